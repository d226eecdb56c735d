#!/usr/bin/env bash
# run.sh - the AdapterFusion pruning benchmark of issue 4 in one command.
#
#   bench/fusion/run.sh [--build DIR | --bin PATH] [--threads N] [--core NAME|auto] [--cpu-level LEVEL] [--reps N] [--batch-reps N]
#                       [--calib N] [--heldout N] [--skip S] [--cache DIR]
#
# Uses the bert-base backbone and the fusion8 case that bench/multitask/run.sh generates into the cache
# (it runs `bench/multitask/run.sh --prepare-only` when they are missing), then bench_fusion: calibration on the
# first --calib (200) SST-2 dev sentences (<data>/datasets/sst2_dev.tsv under ADAPTERD_DATA_DIR, tokenized with the real
# bert-base-uncased tokenizer; the backbone keeps the full 30522 vocab), k = 8, 4, 2, speed-up vs k = 8 and the max
# |logit change| on the next --heldout (200) sentences. Prints the load average before and after.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build-mt" bin="" threads=$(nproc) core=auto level=${ADAPTERD_CPU_LEVEL:-native} reps=5 batch_reps=3 calib=200 heldout=200 skip=0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench" data=${ADAPTERD_DATA_DIR:-$root/../shared/data}
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --core) core=$2; core_given=1; shift 2 ;;
    --cpu-level) level=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --batch-reps) batch_reps=$2; shift 2 ;;
    --calib) calib=$2; shift 2 ;;
    --heldout) heldout=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"
bench_set_level "$level"
[ "${core_given:-0}" = 1 ] || [ -z "$bench_level_core" ] || core=$bench_level_core
bench_set_core "$core" "$threads"
if [ -z "$bin" ]; then bin=$(bench_build "$build" bench_fusion); fi
if [ ! -f "$cache/multitask-tasks/.stamp" ] || [ ! -f "$cache/bert-base/.stamp" ]; then
  "$root/bench/multitask/run.sh" --prepare-only --cache "$cache"
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" --model "$cache/bert-base" --fusion-case "$cache/multitask-tasks/fusion8" \
  --tokenizer "$data/tokenizers/bert-base-uncased" --data "$data/datasets/sst2_dev.tsv" --calib "$calib" \
  --heldout "$heldout" --skip "$skip" --threads "$threads" --reps "$reps" --batch-reps "$batch_reps"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
