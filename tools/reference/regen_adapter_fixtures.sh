#!/bin/sh
# Regenerate the committed adapter fixtures in tests/fixtures/adapters/<backbone>/<case>/ from the committed tiny
# backbones in tests/fixtures/models/ (deterministic: same files with the same torch version).
# Usage: tools/reference/regen_adapter_fixtures.sh [OUT_DIR]
# Bigger cases (the houlsby fusion, every case on RoBERTa/DistilBERT) are left to gen_adapters.py at test time to keep
# the repository small; `gen_adapters.py --list` shows them all.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
models=$here/../../tests/fixtures/models
out=${1:-$here/../../tests/fixtures/adapters}
py=${PYTHON:-/usr/bin/python3}
gen="$py $here/gen_adapters.py --skips 0,1"

rm -rf "$out/bert-tiny" "$out/roberta-tiny" "$out/distilbert-tiny"
$gen --backbone "$models/bert-tiny" --case all --exclude fusion_dynamic_houlsby_n3 --out "$out/bert-tiny"
$gen --backbone "$models/roberta-tiny" --out "$out/roberta-tiny" \
     --case seq_bn_bin,double_seq_bn_st,par_bn,lora_ah,peft_lora,peft_adalora,peft_lora_embedding,prefix,stack_madx
$gen --backbone "$models/distilbert-tiny" --out "$out/distilbert-tiny" \
     --case seq_bn_bin,double_seq_bn_bin,lora_ah,ia3,peft_lora,peft_rslora,peft_embedding_stack,prefix_flat,fusion_static_n4
# ModernBERT's fused attn.Wqkv LoRAs (AdapterHub q,v and q,k,v, PEFT Wqkv: one B split into slices at load), small enough to commit so the
# unit tests (and their AddressSanitizer run) load them; every other ModernBERT case runs in parity_modernbert_adapters.
rm -rf "$out/modernbert-tiny"
$py "$here/gen_modernbert_adapters.py" --backbone "$models/modernbert-tiny" --out "$out/modernbert-tiny" --skips 0,1 \
    --case lora,lora_qkv
$py "$here/gen_modernbert_lora.py" --backbone "$models/modernbert-tiny" --out "$out/modernbert-tiny/peft_lora" --skips 0,1 \
    --r 4 --alpha 8
