#!/usr/bin/env bash
# ModernBERT against the PyTorch reference (tools/reference/modernbert.py): checkpoints generated once (kept while
# the reference's sources are unchanged) and compared by parity_encoder, packed and one sequence at a time.
#   modernbert_parity.sh PARITY_BIN ADAPTERS_BIN REFERENCE_DIR WORK_DIR
# Models: ModernBERT-base's shapes (22 layers, H 768, GeGLU 2 x 1152, window 128, global every 3; 'model.' keys, the
# prediction head and a classifier the encoder ignores) with 128-token, 32 mixed-length and 600 + 40 token cases;
# a bare 4-layer model (no prefix, no head, window 16) whose long case is one 8,192-token sequence packed with a
# 40-token one; a 4-layer model with every bias (attention_bias, mlp_bias, norm_bias, classifier_bias), cls
# pooling and F16 weights.
# Adapters (gen_modernbert_lora.py): PEFT LoRA as saved for ModernBertForSequenceClassification (target_modules
# Wqkv, Wo, Wi: the fused Wqkv's B updates q, k and v; "Wo" is attn.Wo and mlp.Wo), with its classifier in
# modules_to_save, on the base model at AdapterDrop skips 0 and 5, and an rsLoRA of rank 4 (also on tok_embeddings)
# on the model with every bias, at skips 0 and 1; logits at 1e-4.
# Tolerances (max |adapterd - reference| of any hidden state or head output): fp32 1e-4 as for BERT (measured 2.6e-5
# on the base model); bf16 0.12 and int8 0.7, set as encoder_levels.sh sets BERT's, about 1.8x the largest difference
# measured (2026-11-26, base model, 22 layers: bf16 0.067 at AVX512-BF16 and 0.059 at AVX2, int8 0.384 at both;
# mean differences 0.0085 and 0.049): ModernBERT's 22 pre-norm layers drift further than bert-base's 12.
set -euo pipefail
bin=$1 adapters_bin=$2 ref=$3 work=$4
. "$(dirname "$0")/encoder_models.sh"
need_torch

modernbert_model() {
  local name=$1 stamp d
  shift
  stamp=$(cat "$ref"/modernbert.py "$ref"/gen_modernbert.py "$ref"/encoder.py "$ref"/st.py | sha256sum | cut -c1-16)
  d="$work/modernbert-$name"
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$d"
    mkdir -p "$work"
    echo "generating $d" >&2
    "$PY" "$ref/gen_modernbert.py" "$@" --out "$d" >/dev/null
    echo "$stamp" > "$d/.stamp"
  fi
  echo "$d"
}

bare=$(modernbert_model tiny-bare --shape tiny --seed 3 --no-prefix)
bias=$(modernbert_model tiny-bias --shape tiny --seed 4 --bias --norm-bias --pooling cls --dtype f16 --classifier \
         --cases single,packed)
base=$(modernbert_model base --shape base --seed 21 --classifier)
"$bin" --tol 1e-4 "$bare" "$bias" "$base"
"$bin" --tol 0.12 --precision bf16 "$base"
"$bin" --tol 0.7 --precision int8 "$base"

lstamp=$(cat "$ref"/modernbert.py "$ref"/gen_modernbert_lora.py "$ref"/st.py "$base/.stamp" "$bias/.stamp" | sha256sum | cut -c1-16)
cases="$work/modernbert-lora"
if [ "$(cat "$cases/.stamp" 2>/dev/null)" != "$lstamp" ]; then
  rm -rf "$cases"
  mkdir -p "$cases"
  echo "generating $cases" >&2
  "$PY" "$ref/gen_modernbert_lora.py" --backbone "$base" --out "$cases/base-lora" --skips 0,5 >/dev/null
  "$PY" "$ref/gen_modernbert_lora.py" --backbone "$bias" --out "$cases/bias-rslora" --skips 0,1 --r 4 --rslora \
    --seed 6 --targets Wqkv,Wo,Wi,tok_embeddings >/dev/null
  echo "$lstamp" > "$cases/.stamp"
fi
"$adapters_bin" --tol 1e-4 "$cases"
