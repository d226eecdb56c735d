#!/usr/bin/env bash
# Generates bert-base / roberta-base / distilbert-base shaped checkpoints with the PyTorch reference
# (once; reused while the reference is unchanged) and checks the engine against them.
#   encoder_parity.sh PARITY_BIN REFERENCE_DIR WORK_DIR
set -euo pipefail
bin=$1 ref=$2 work=$3
. "$(dirname "$0")/encoder_models.sh"
need_torch
dirs=()
# arch, seed, dtype, extra flags: one F32 each, RoBERTa with the prefix + head keys, DistilBERT in F16.
for spec in "bert 11 f32 --no-prefix" "roberta 12 f32 --prefix --head" "distilbert 13 f16 --no-prefix"; do
  # shellcheck disable=SC2086 # the spec's words are the arguments
  dirs+=("$(encoder_model "$ref" "$work" $spec)")
done
"$bin" --tol 1e-4 "${dirs[@]}"
