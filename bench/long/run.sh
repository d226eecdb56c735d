#!/usr/bin/env bash
# run.sh - issue 39's long-input benchmark in one command: a 4,096-token document read in the server's windows
# with 8 tasks at skip 5, adapterd's one pass (the trunk once per window, the tasks packed) next to PyTorch running
# the same windows task by task (bench/multitask/peer_torch.py --long-doc: AdapterHub-style seq_bn, one task per
# forward, as a pipeline per task does), same run; and adapterd's time per window of the long document against a
# short input of one window, measured alternately in one process (bench_long).
#
#   bench/long/run.sh [--build DIR | --bin PATH] [--threads N] [--core NAME|auto] [--reps N] [--short-reps N]
#                     [--doc 4096] [--window 384] [--stride 128] [--tasks-n 8] [--skip 5] [--cache DIR]
#
# The bert-base shaped backbone and the tasks are bench/multitask/run.sh's (generated there, reused here while
# unchanged). Prints the CPU, the load average around each peer, the OpenBLAS core and threads, then one JSON line
# per measurement (medians over --reps).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
build="$root/build" bin="" threads=$(nproc) core=auto reps=3 short_reps=9 doc=4096 window=384 stride=128 ntasks=8 skip=5
cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --core) core=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --short-reps) short_reps=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --stride) stride=$2; shift 2 ;;
    --tasks-n) ntasks=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"
bench_set_core "$core" "$threads"
[ -n "$bin" ] || bin=$(bench_build "$build" bench_long)
"$root/bench/multitask/run.sh" --prepare-only --cache "$cache" --peers pytorch >&2
model="$cache/bert-base" tasks="$cache/multitask-tasks"
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; threads $threads; OPENBLAS_CORETYPE ${OPENBLAS_CORETYPE:-unset: OpenBLAS detects}"
echo "adapterd: load before $(loadavg)"
"$bin" --model "$model" --tasks "$tasks" --threads "$threads" --doc "$doc" --window "$window" --stride "$stride" \
  --tasks-n "$ntasks" --skip "$skip" --reps "$reps" --short-reps "$short_reps"
echo "adapterd: load after $(loadavg)"
if "$PY" -c 'import torch' 2>/dev/null; then
  echo "pytorch: load before $(loadavg)"
  "$PY" "$root/bench/multitask/peer_torch.py" --model "$model" --tasks "$tasks" --threads "$threads" \
    --omp-wait-policy PASSIVE --reps "$reps" --long-doc "$doc" --long-window "$window" --long-stride "$stride" \
    --long-tasks "$ntasks" --long-skip "$skip"
  echo "pytorch: load after $(loadavg)"
else
  note "skipping PyTorch: $PY cannot import torch"
fi
