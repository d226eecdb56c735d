#!/usr/bin/env bash
# Adapter parity at base shapes: every adapter form / head / fusion case of tools/reference/gen_adapters.py on
# generated bert-base, roberta-base and distilbert-base shaped backbones (vocab reduced to 2000: only the
# embedding-LoRA cases touch the embeddings, with A [r, 2000]), plus the real AdapterHub / PEFT checkpoints in DATA_DIR/adapters read in place (never copied),
# each at AdapterDrop skips 0 and 5, checked by the C engine at 1e-4.
#   adapter_parity.sh PARITY_BIN REFERENCE_DIR WORK_DIR DATA_DIR
# Generated data is cached in WORK_DIR and regenerated when the reference sources, this script or the real files
# change. Exits 77 (skip) when python3-torch or the real files are missing.
set -euo pipefail
bin=$1 ref=$2 work=$3 data=$4
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "SKIP: $PY cannot import torch (install Debian's python3-torch)"
  exit 77
fi
real=(adapterhub-mbert-md peft-distilbert-lora-imdb peft-roberta-adalora-agnews)
for r in "${real[@]}"; do
  if [ ! -f "$data/adapters/$r/adapter_config.json" ]; then
    echo "SKIP: $data/adapters/$r is missing (the shared data folder, ../shared/data in CI)"
    exit 77
  fi
done
mkdir -p "$work"
t0=$(date +%s)
skips=0,5
lens=1,7,48,20          # 4 sequences: one of length 1, a sentence pair of 48; short keeps the float64 oracle fast
bb_stamp=$(cat "$ref"/encoder.py "$ref"/gen_encoder.py "$ref"/st.py | sha256sum | cut -c1-16)
case_stamp=$( { cat "$ref"/encoder.py "$ref"/gen_encoder.py "$ref"/st.py "$ref"/adapters.py "$ref"/gen_adapters.py \
                   "$0"; echo "$skips $lens"; } | sha256sum | cut -c1-16)
real_stamp=$( { echo "$case_stamp"; cd "$data/adapters" && cat "${real[@]/%//adapter_config.json}" && \
                sha256sum ./*/*.bin ./*/*.safetensors ./*/head_config.json; } | sha256sum | cut -c1-16)

# arch, seed, flags. RoBERTa without a pooler (as fine-tuned classifiers are saved) would drop head_pooler: keep it.
for spec in "bert 31" "roberta 32" "distilbert 33"; do
  set -- $spec
  d="$work/backbones/$1-base"
  if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$bb_stamp" ]; then
    rm -rf "$d"
    echo "generating $d"
    "$PY" "$ref/gen_encoder.py" --arch "$1" --shape base --vocab 2000 --seed "$2" --cases '' --out "$d" >/dev/null
    echo "$bb_stamp" > "$d/.stamp"
  fi
done

gen() {   # gen OUT_SET STAMP ARGS...: regenerate WORK_DIR/cases/OUT_SET unless its stamp matches
  local out="$work/cases/$1" stamp=$2
  shift 2
  if [ "$(cat "$out/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$out"
    mkdir -p "$out"
    echo "generating $out"
    "$PY" "$ref/gen_adapters.py" --skips "$skips" --lens "$lens" --out "$out" "$@" > "$out.log"
    echo "$stamp" > "$out/.stamp"
  fi
}
B=$work/backbones
# The real files. bert-base-multilingual-cased differs from bert-base only in its vocabulary (119,547), which the
# adapter and head never touch: the bert-base backbone above (vocab 2000) has its exact shape otherwise.
realgen() {   # realgen NAME BACKBONE FOLDER
  local out="$work/cases/real"
  if [ "$(cat "$out/$1/.stamp" 2>/dev/null)" != "$real_stamp" ]; then
    mkdir -p "$out"
    echo "generating $out/$1"
    "$PY" "$ref/gen_adapters.py" --skips "$skips" --lens "$lens" --out "$out" --backbone "$B/$2" --name "$1" \
          --load "$data/adapters/$3" --notes "real checkpoint $3 read in place on a generated $2 backbone" \
          > "$out/$1.log"
    echo "$real_stamp" > "$out/$1/.stamp"
  fi
}
# Two generator processes (torch runs single-threaded here; CI has 2 cores and runs tests one at a time).
( gen bert-base "$case_stamp" --backbone "$B/bert-base" --case all --fast
  realgen adapterhub_mbert_md bert-base adapterhub-mbert-md
  realgen peft_distilbert_lora_imdb distilbert-base peft-distilbert-lora-imdb ) &
job=$!
trap "wait $job 2>/dev/null || true" EXIT   # never leave the other generator running
gen roberta-base "$case_stamp" --backbone "$B/roberta-base" --case all --fast
gen distilbert-base "$case_stamp" --backbone "$B/distilbert-base" --case all --fast
realgen peft_roberta_adalora_agnews roberta-base peft-roberta-adalora-agnews
wait "$job"
t1=$(date +%s)
echo "reference data ready in $((t1 - t0)) s"
rc=0
"$bin" --tol 1e-4 --threads 2 "$work/cases/bert-base" "$work/cases/roberta-base" "$work/cases/distilbert-base" \
       "$work/cases/real" || rc=$?
echo "engine checks took $(( $(date +%s) - t1 )) s"
exit $rc
