#!/usr/bin/env bash
# run.sh - ModernBERT at 512 and 8,192 tokens: adapterd (bench_modernbert) next to the PyTorch reference
# (tools/reference/bench_modernbert.py), same run, same thread count, on a ModernBERT-base shaped checkpoint
# generated once by tools/reference/gen_modernbert.py into --cache.
#   bench/modernbert/run.sh --bin build/bench/bench_modernbert [--threads N] [--reps N] [--lens 512,8192]
#                           [--precision fp32|bf16|int8] [--cache DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
bin="" threads=$(nproc) reps=3 lens=512,8192 prec=fp32 cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench"
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --lens) lens=$2; shift 2 ;;
    --precision) prec=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    *) sed -n '2,7p' "$0" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "run.sh: --bin PATH to bench_modernbert is required" >&2; exit 2; }
ref=$root/tools/reference
stamp=$(cat "$ref"/modernbert.py "$ref"/gen_modernbert.py "$ref"/st.py | sha256sum | cut -c1-16)
d=$cache/modernbert-base
if [ "$(cat "$d/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$d"; mkdir -p "$cache"
  echo "bench: generating $d" >&2
  "$PY" "$ref/gen_modernbert.py" --shape base --seed 21 --cases single --out "$d" >/dev/null
  echo "$stamp" > "$d/.stamp"
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" --model "$d" --lens "$lens" --reps "$reps" --threads "$threads" --precision "$prec"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=$threads "$PY" "$ref/bench_modernbert.py" --model "$d" --lens "$lens" \
  --reps "$reps" --threads "$threads"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
