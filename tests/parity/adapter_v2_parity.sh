#!/usr/bin/env bash
# Adapters on ELECTRA and DeBERTa-v3 against the PyTorch reference (tools/reference/adapters.py, deberta.py), like
# adapter_parity.sh: generated electra-small and deberta-v3-small shaped backbones (vocab reduced to 2000: no case
# here touches the embeddings) with AdapterHub (Pfeiffer = seq_bn, Houlsby = double_seq_bn, parallel, gating, LoRA,
# (IA)^3, Stack, Fusion) and PEFT (LoRA, rsLoRA, AdaLoRA, with the model's own classification head) adapters under
# the real key names (deberta.encoder.layer.N.attention.self.query_proj...), at AdapterDrop skips 0 and 5, checked
# by the C engine at 1e-4 (BERT's tolerance). On DeBERTa a LoRA / (IA)^3 on query or key also changes the projected
# relative table, which these cases check (the lora_ah, ia3, peft_* ones fail by ~1 without it).
#   adapter_v2_parity.sh PARITY_BIN REFERENCE_DIR WORK_DIR
set -euo pipefail
bin=$1 ref=$2 work=$3
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch (install Debian's python3-torch)"
  exit 77
fi
mkdir -p "$work"
skips=0,5
lens=1,7,48,20
src=("$ref"/encoder.py "$ref"/deberta.py "$ref"/gen_encoder.py "$ref"/st.py)
bb_stamp=$(cat "${src[@]}" | sha256sum | cut -c1-16)
case_stamp=$( { cat "${src[@]}" "$ref"/adapters.py "$ref"/gen_adapters.py "$0"; echo "$skips $lens"; } \
              | sha256sum | cut -c1-16)
B=$work/backbones
for spec in "electra 41" "deberta-v2 42"; do
  set -- $spec
  d="$B/$1-small"
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$bb_stamp" ]; then
    rm -rf "$d"
    echo "generating $d"
    "$PY" "$ref/gen_encoder.py" --arch "$1" --shape small --vocab 2000 --seed "$2" --cases '' --out "$d" >/dev/null
    echo "$bb_stamp" > "$d/.stamp"
  fi
done
gen() {   # gen OUT_SET BACKBONE CASES
  local out="$work/cases/$1"
  if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$case_stamp" ]; then
    rm -rf "$out"
    mkdir -p "$out"
    echo "generating $out"
    "$PY" "$ref/gen_adapters.py" --skips "$skips" --lens "$lens" --out "$out" --backbone "$B/$2" --case "$3" \
          --fast > "$out.log"
    echo "$case_stamp" > "$out/.stamp"
  fi
}
# DeBERTa: every case gen_adapters.py registers for its family; ELECTRA (BERT's names): the classic forms.
gen deberta-v3-small deberta-v2-small all &
job=$!
trap "wait $job 2>/dev/null || true" EXIT
gen electra-small electra-small seq_bn_bin,double_seq_bn_st,par_bn,lora_ah,ia3,peft_lora,peft_rslora,stack_madx
wait "$job"
"$bin" --tol 1e-4 --threads 2 "$work/cases/deberta-v3-small" "$work/cases/electra-small"
