#!/bin/sh
# precision.sh - the example tasks' accuracy through the server at bf16 and int8 against fp32 (issue 41's table).
#
#   bench/quality/precision.sh [--registry DIR] [--adapterd BIN] [--rows N] [--threads N] [--bound 0.5]
#
# Serves the registry (default: the bundled examples/registry) three times, `--precision fp32`, `bf16`, `int8`,
# and sends each task's whole held-out split (SST-2 dev, AG News test, TREC test, emotion validation from
# ../shared/data; --rows N: N evenly spaced rows) at every skip the task allows (bench/quality/quality.py,
# server only). Writes bench/quality/results-example-{fp32,bf16,int8}.json and prints bench/README.md's table
# (precision_table.py): per task and skip the accuracy and its difference, per task the points lost against the
# bound; exits 1 when a task loses more. The runs are accuracy only (timing needs a quiet machine; the load is
# recorded).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
REG=$ROOT/examples/registry
BIN=$ROOT/build/tools/adapterd
ROWS= THREADS=2 BOUND=0.5
while [ $# -gt 0 ]; do
    case "$1" in
        --registry) REG=$2; shift 2 ;;
        --adapterd) BIN=$2; shift 2 ;;
        --rows) ROWS="--rows $2"; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --bound) BOUND=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "precision.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
Q=$ROOT/bench/quality
for p in fp32 bf16 int8; do
    echo "precision.sh: $p (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    # shellcheck disable=SC2086
    "$PY" "$Q/quality.py" --registry "$REG" --adapterd "$BIN" $ROWS --no-pytorch --threads "$THREADS" \
        --precision $p --tasks sentiment,topic,question,emotion,sentiment-fusion --out "$Q/results-example-$p.json" >&2
done
"$PY" "$Q/precision_table.py" --fp32 "$Q/results-example-fp32.json" --precision "$Q/results-example-bf16.json" \
    --precision "$Q/results-example-int8.json" --bound "$BOUND"
