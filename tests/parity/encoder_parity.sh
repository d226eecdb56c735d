#!/usr/bin/env bash
# Generates bert-base / roberta-base / distilbert-base shaped checkpoints with the PyTorch reference
# (once; reused while the reference is unchanged) and checks the engine against them.
#   encoder_parity.sh PARITY_BIN REFERENCE_DIR WORK_DIR
set -euo pipefail
bin=$1 ref=$2 work=$3
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch (install Debian's python3-torch)"
  exit 77
fi
mkdir -p "$work"
stamp=$(cat "$ref"/encoder.py "$ref"/gen_encoder.py "$ref"/st.py | sha256sum | cut -c1-16)
dirs=()
# arch, seed, dtype, extra flags: one F32 each, RoBERTa with the prefix + head keys, DistilBERT in F16.
for spec in "bert 11 f32 --no-prefix" "roberta 12 f32 --prefix --head" "distilbert 13 f16 --no-prefix"; do
  set -- $spec
  d="$work/$1-base-$3"
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$d"
    echo "generating $d"
    "$PY" "$ref/gen_encoder.py" --arch "$1" --shape base --seed "$2" --dtype "$3" $4 ${5:-} --out "$d" >/dev/null
    echo "$stamp" > "$d/.stamp"
  fi
  dirs+=("$d")
done
"$bin" --tol 1e-4 "${dirs[@]}"
