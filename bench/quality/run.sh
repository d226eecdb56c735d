#!/bin/sh
# run.sh - every figure of bench/README.md's quality section, in order, from a registry tools/train/run.sh assembled.
#
#   bench/quality/run.sh [--work DIR] [--rows N] [--plots-only]
#
# WORK (default $ADAPTERD_TRAIN_DIR, else ../train-cache beside the checkout) holds the training run: WORK/registry,
# WORK/tasks (the full fine-tuning yardsticks), WORK/pretrain/curve.csv and the adapter curves. Writes
# bench/quality/results*.json and training.json (paths inside WORK written relative to the checkout), the example
# registry's check_200.json, the README's tables to WORK/quality-tables.md (to paste into bench/README.md) and the
# plots to docs/. --rows N limits each split to N evenly spaced rows (default: the whole
# split). Run it after the whole training run (the yardsticks must exist) with the machine to itself: the latency
# figures come from the last run (quiet), the others are accuracy only.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
WORK=${ADAPTERD_TRAIN_DIR:-$ROOT/../train-cache}
ROWS=
PLOTS_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --work) WORK=$2; shift 2 ;;
        --rows) ROWS="--rows $2"; shift 2 ;;
        --plots-only) PLOTS_ONLY=1; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
cd "$ROOT"
WORK=$(cd "$WORK" && pwd)
R=$WORK/registry
Q=bench/quality
MAIN=sentiment,topic,question,emotion
FUSIONS=sentiment-fusion,sentiment-fusion-k4,sentiment-fusion-k2,sentiment-fusion-k1
for f in "$R/results.json" "$WORK/tasks/sst2-full.json"; do
    [ -f "$f" ] || { echo "run.sh: $f missing: run tools/train/run.sh first" >&2; exit 1; }
done
q() { echo "quality: $*" >&2; "$PY" $Q/quality.py --registry "$R" "$@"; }

if [ "$PLOTS_ONLY" = 0 ]; then
    # shellcheck disable=SC2086
    q $ROWS --pytorch-rows 500 --yardsticks "$WORK/tasks" --tasks $MAIN,$FUSIONS --out $Q/results.json
    for p in bf16 int8; do
        # shellcheck disable=SC2086
        q $ROWS --no-pytorch --precision $p --tasks $MAIN,sentiment-fusion-k2 --out $Q/results-$p.json
    done
    q --tasks entities --pytorch-rows 400 --out $Q/results-entities.json
    # shellcheck disable=SC2086
    q $ROWS --no-pytorch --tasks $MAIN,$FUSIONS --out $Q/results-quiet.json
    cp "$R/results.json" $Q/training.json
    # the example registry's CI figures (ctest -R quality_check)
    "$PY" $Q/quality.py --registry examples/registry --rows 200 --no-pytorch --threads 2 --out $Q/check_200.json
    # WORK's absolute path out of the committed files
    rel=$(realpath --relative-to="$ROOT" "$WORK")
    for f in "$Q"/results*.json "$Q"/training.json "$Q"/check_200.json; do
        sed -i "s|$WORK|$rel|g" "$f"
    done
fi
"$PY" $Q/tables.py --quality $Q/results.json --training $Q/training.json \
    --precision $Q/results-bf16.json --precision $Q/results-int8.json --registry "$R" > "$WORK/quality-tables.md"
set -- --quality $Q/results.json --results $Q/training.json --multitask $Q/results-quiet.json --out docs
# the pretraining curve only where this work directory pretrained (run.sh --no-pretrain on a copied encoder has none)
if [ -f "$WORK/pretrain/curve.csv" ]; then set -- "$@" --curve "$WORK/pretrain/curve.csv"; fi
if [ -f "$WORK/curve/curve.tsv" ]; then set -- "$@" --adapter-curve "2e-3, d = 32=$WORK/curve/curve.tsv"; fi
if [ -f "$WORK/curve-registry/curve.tsv" ]; then
    set -- "$@" --adapter-curve "1e-3, d = 128=$WORK/curve-registry/curve.tsv"
fi
"$PY" $Q/plot.py "$@"
echo "run.sh: results in $Q, tables in $WORK/quality-tables.md, plots in docs/"
