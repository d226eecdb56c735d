#!/usr/bin/env bash
# run.sh - the low-precision product benchmark of issue 14 in one command: the backbone's packed
# products in float32, bf16 and int8 at bert-base shapes, with each precision's peak measured in the
# same run.
#
#   bench/lowp/run.sh [--build DIR | --bin PATH] [--threads N] [--reps N] [--big-reps N] [--rounds N]
#                     [--pause-pid-file FILE]
#
# What it does, in order:
#  1. builds bench_lowp (Release, into --build, default build/) when --bin is not given and it is missing;
#  2. with --pause-pid-file, stops the process whose pid the file holds (a background job sharing the
#     machine) with SIGSTOP for the timed runs, and always resumes it with SIGCONT on exit;
#  3. prints the CPU, then runs bench_lowp --rounds times (each prints its peaks, medians, shares of
#     peak, ratios to float32 and the load average before and after).
# The products do not go through OpenBLAS; its core is printed for the record only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}

build="$root/build" bin="" threads=$(nproc) reps=30 big_reps=7 rounds=1 pause_file=""
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --big-reps) big_reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --pause-pid-file) pause_file=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"
bench_set_core auto "$threads"
[ -n "$bin" ] || bin=$(bench_build "$build" bench_lowp)

paused=""
resume() { if [ -n "$paused" ]; then kill -CONT "$paused" 2>/dev/null || true; note "resumed pid $paused"; fi; }
trap resume EXIT
if [ -n "$pause_file" ] && [ -f "$pause_file" ]; then
  pid=$(cat "$pause_file")
  if kill -STOP "$pid" 2>/dev/null; then paused=$pid; note "paused pid $pid for the timed runs"; fi
fi

echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) online; $(date -u +%Y-%m-%dT%H:%MZ)"
for r in $(seq 1 "$rounds"); do
  echo "--- round $r of $rounds"
  "$bin" --threads "$threads" --reps "$reps" --big-reps "$big_reps"
done
