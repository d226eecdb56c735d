#!/bin/sh
# Regenerate the committed encoder fixtures in tests/fixtures/models/ (deterministic: same files, byte for byte,
# with the same torch version).  Usage: tools/reference/regen_fixtures.sh [OUT_DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../tests/fixtures/models}
mkdir -p "$out" && out=$(cd "$out" && pwd)
py=${PYTHON:-/usr/bin/python3}
gen="$py $here/gen_encoder.py --shape tiny --check"

$gen --arch bert       --seed 1 --dtype f32  --no-prefix               --act gelu     --out "$out/bert-tiny"
$gen --arch roberta    --seed 2 --dtype f32  --prefix --head           --act gelu     --out "$out/roberta-tiny"
$gen --arch distilbert --seed 3 --dtype f16  --no-prefix               --act gelu     --out "$out/distilbert-tiny"
$gen --arch bert       --seed 4 --dtype bf16 --no-prefix --shards 2    --act gelu_new --out "$out/bert-tiny-bf16-sharded"

# the same four at hidden 8, vocab 32 (the config.json fuzz harness loads one per execution)
micro="$py $here/gen_encoder.py --shape custom --hidden 8 --layers 2 --heads 2 --intermediate 16 --vocab 32 --max-pos 16 --cases single --check"
$micro --arch bert       --seed 1 --dtype f32  --no-prefix               --act gelu     --out "$out/bert-micro"
$micro --arch roberta    --seed 2 --dtype f32  --prefix --head           --act gelu     --max-pos 18 --out "$out/roberta-micro"
$micro --arch distilbert --seed 3 --dtype f16  --no-prefix               --act gelu     --out "$out/distilbert-micro"
$micro --arch bert       --seed 4 --dtype bf16 --no-prefix --shards 2    --act gelu_new --out "$out/bert-micro-bf16-sharded"

# ELECTRA and DeBERTa-v2 (tools/reference/deberta.py): ELECTRA with embedding_size 32 < hidden 64 and its prefix +
# head; DeBERTa-v3-like with 8 position buckets (log buckets from distance 4: the 64-token 'long' case reaches the
# far ones); DeBERTa with embed_proj, absolute positions, token types and pos_key_proj / pos_query_proj, in F16.
$gen --arch electra    --seed 5 --dtype f32  --prefix --head --cases single,packed,pair,long --out "$out/electra-tiny"
$gen --arch deberta-v2 --seed 6 --dtype f32  --prefix --head --buckets 8 --cases single,packed,pair,long \
     --out "$out/deberta-tiny"
$gen --arch deberta-v2 --seed 7 --dtype f16  --no-prefix --buckets 8 --embedding-size 32 --position-biased-input 1 \
     --type-vocab 2 --no-share-att-key --cases single,packed,pair,long --out "$out/deberta-tiny-proj"
# ModernBERT: 3 layers (global, local, local), window 16, 'model.' keys + prediction head + an ignored classifier
$py "$here/gen_modernbert.py" --shape tiny --layers 3 --seed 1 --classifier --cases single,packed --out "$out/modernbert-tiny"
