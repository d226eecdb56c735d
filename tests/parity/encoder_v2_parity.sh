#!/usr/bin/env bash
# ELECTRA and DeBERTa-v2/v3 against the PyTorch reference (tools/reference/deberta.py), like
# encoder_parity.sh for BERT: checkpoints of real shapes generated once (kept while the reference's
# sources are unchanged) with Hugging Face key names, compared packed and one sequence at a time.
#   encoder_v2_parity.sh PARITY_BIN REFERENCE_DIR WORK_DIR [DATA_DIR]
# Models: electra-small-discriminator's shape (E 128 -> H 256, "electra." keys + head), deberta-v3-small's
# and -base's (buckets 256, c2p|p2c, shared keys, no absolute positions; "deberta." keys + head, base in F16),
# each with a 'long' case of 512 tokens (far log buckets), and tiny ones for the other config branches:
# embed_proj + absolute positions + token types + pos_key_proj/pos_query_proj; no buckets with c2p only;
# p2c only with small buckets. Tolerances as BERT's (encoder_levels.sh): fp32 1e-4; the v3-small model
# also in bf16 (0.08) and int8 (0.4). With DATA_DIR, the real config.json files of electra-small-discriminator and
# deberta-v3-base (DATA_DIR/tokenizers/*, read in place) replace the generated ones over the same weights: they
# describe the same models, so the engine reading them must give the same outputs.
set -euo pipefail
bin=$1 ref=$2 work=$3 data=${4:-}
. "$(dirname "$0")/encoder_models.sh"
need_torch
stamp=$(cat "$ref"/encoder.py "$ref"/deberta.py "$ref"/gen_encoder.py "$ref"/st.py | sha256sum | cut -c1-16)
gen() { # NAME gen_encoder.py-args...: prints the directory
  local d="$work/$1"
  shift
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$d"
    mkdir -p "$work"
    echo "generating $d" >&2
    "$PY" "$ref/gen_encoder.py" "$@" --out "$d" >/dev/null
    echo "$stamp" > "$d/.stamp"
  fi
  echo "$d"
}
cases=single,packed,pair,long
small=$(gen deberta-v3-small --arch deberta-v2 --shape small --seed 32 --prefix --head --cases $cases)
dirs=(
  "$(gen electra-small --arch electra --shape small --seed 31 --prefix --head --cases $cases)"
  "$small"
  "$(gen deberta-v3-base-f16 --arch deberta-v2 --shape base --seed 33 --dtype f16 --no-prefix --cases $cases)"
  "$(gen deberta-tiny-proj --arch deberta-v2 --seed 34 --buckets 8 --embedding-size 32 --position-biased-input 1 \
       --type-vocab 2 --no-share-att-key --cases $cases)"
  "$(gen deberta-tiny-c2p --arch deberta-v2 --seed 35 --buckets -1 --max-rel 16 --pos-att-type c2p --cases $cases)"
  "$(gen deberta-tiny-p2c --arch deberta-v2 --seed 36 --buckets 12 --max-rel 20 --pos-att-type p2c --cases $cases)"
  "$(gen electra-tiny --arch electra --seed 37 --cases $cases)"
)
real_cfg() { # NAME GENERATED_DIR REAL_CONFIG: the generated weights and expected outputs under the real config
  local d="$work/$1"
  rm -rf "$d"
  mkdir -p "$d"
  ln -s "$2/model.safetensors" "$d/model.safetensors"
  ln -s "$2/expected" "$d/expected"
  cp "$3" "$d/config.json"
  echo "$d"
}
if [ -n "$data" ] && [ -f "$data/tokenizers/deberta-v3/config.json" ] &&
   [ -f "$data/tokenizers/electra-small-discriminator/config.json" ]; then
  dirs+=("$(real_cfg electra-small-real-config "${dirs[0]}" "$data/tokenizers/electra-small-discriminator/config.json")"
         "$(real_cfg deberta-v3-base-real-config "${dirs[2]}" "$data/tokenizers/deberta-v3/config.json")")
else
  echo "note: no DATA_DIR/tokenizers/{deberta-v3,electra-small-discriminator}/config.json: the real configs are not read"
fi
fail=0
"$bin" --tol 1e-4 "${dirs[@]}" || fail=1
"$bin" --tol 0.08 --precision bf16 "$small" || fail=1
"$bin" --tol 0.4 --precision int8 "$small" || fail=1
exit $fail
