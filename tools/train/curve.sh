#!/bin/sh
# curve.sh - adapter accuracy vs pretraining tokens: one SST-2 Pfeiffer adapter (8,000 training rows, one epoch)
# on each encoder snapshot the pretraining exported (WORK/pretrain/encoders/tok<N>M), evaluated on SST-2 dev.
# Two recipes: the default, rate 2e-3 with a 32-wide bottleneck (reduction 8), the one session 3 started the curve
# with, written to WORK/curve; `--registry-recipe`, rate 1e-3 with a 128-wide bottleneck (reduction 2), the
# registry's SST-2 recipe, written to WORK/curve-registry.
#
#   tools/train/curve.sh [--work DIR] [--data DIR] [--registry-recipe]
#
# Resumable (a snapshot with a result is skipped); prints "tokens_M accuracy" per snapshot and writes
# curve.tsv in its folder.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
WORK=${ADAPTERD_TRAIN_DIR:-$ROOT/../train-cache}
DATA=${ADAPTERD_DATA_DIR:-$ROOT/../shared/data}
OUT=curve
RECIPE="--lr 2e-3"
while [ $# -gt 0 ]; do
    case "$1" in
        --work) WORK=$2; shift 2 ;;
        --data) DATA=$2; shift 2 ;;
        --registry-recipe) OUT=curve-registry; RECIPE="--lr 1e-3 --reduction 2"; shift ;;
        *) echo "curve.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$WORK/$OUT"
for enc in "$WORK"/pretrain/encoders/tok*M; do
    [ -d "$enc" ] || continue
    snap=$(basename "$enc")
    if [ ! -f "$WORK/$OUT/$snap.json" ]; then
        # shellcheck disable=SC2086
        nice "$PY" "$ROOT/tools/train/adapters_train.py" --model "$enc" --data "$DATA" --task sst2 --form pfeiffer \
            --name sst2 --out "$WORK/$OUT/$snap" --max-train 8000 --epochs 1 $RECIPE >/dev/null
    fi
done
"$PY" - "$WORK/$OUT" <<'PYEOF'
import glob, json, os, sys
rows = []
for p in sorted(glob.glob(os.path.join(sys.argv[1], "tok*M.json"))):
    r = json.load(open(p))
    rows.append((int(os.path.basename(p)[3:-6]), r["skips"]["0"]["accuracy"]))
with open(os.path.join(sys.argv[1], "curve.tsv"), "w") as f:
    f.write("tokens_M\tsst2_dev_accuracy\n")
    for t, a in rows:
        f.write(f"{t}\t{a:.4f}\n")
        print(f"{t}M tokens: SST-2 dev accuracy {a:.4f}")
PYEOF
