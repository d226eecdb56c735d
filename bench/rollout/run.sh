#!/usr/bin/env bash
# run.sh - the cost of a shadow version (issue 40): 8 tasks at skip 5 on bert-base shapes, one input a request,
# the same traffic three ways in one run, interleaved round by round:
#
#   none      no rollout
#   shadow    task00's candidate as a shadow at 20% (max_share 1): one more task stream in the same job, on the
#             same trunk pass (the 5 shared lower layers are not recomputed)
#   separate  no rollout; the same 20% of inputs (every 5th) also sent as a second request naming the candidate
#             (task00@2) at skip 5: what a caller comparing versions on its own side pays
#
#   bench/rollout/run.sh [--build DIR | --bin PATH] [--threads N] [--rounds N] [--requests N] [--cache DIR]
#
# Prints the CPU, then per way the medians over rounds of: the caller's latency (p50 of the requests of the
# round; "separate": of the caller's own requests), the engine time per caller request (adapterd_batch_seconds_sum
# over the round / requests of the round, the separate requests included), the server's CPU time per caller request
# (/proc/PID/stat, all threads: steadier than wall time on a shared machine), and the GFLOP of the passes' plans
# (the engine's own count, "explain": exact, independent of load), each against "none".
# Model: the bert-base shaped backbone and Pfeiffer seq_bn tasks bench/multitask generates (its cache,
# ~/.cache/adapterd/bench: bert-base, multitask-tasks/task00..task08; bench/multitask/run.sh --prepare-only makes
# them), with the bert-base-uncased tokenizer from ../shared/data/tokenizers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
build="$root/build" bin="" threads=$(nproc) rounds=5 requests=40
cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
note() { echo "bench: $*" >&2; }
[ -n "$bin" ] || bin="$build/tools/adapterd"
[ -x "$bin" ] || { note "no adapterd at $bin (cmake --build $build --target adapterd)"; exit 1; }
tok="${ADAPTERD_DATA_DIR:-$root/../shared/data}/tokenizers/bert-base-uncased"
for f in "$cache/bert-base/model.safetensors" "$cache/multitask-tasks/task08/adapter_config.json" "$tok/vocab.txt"; do
  [ -e "$f" ] || { note "missing $f (bench/multitask/run.sh --prepare-only makes the model and tasks)"; exit 1; }
done

# --- the registry: symlinks into the cache; task00 has version 2 (task08's weights) as the candidate ---
reg=$(mktemp -d "${TMPDIR:-/tmp}/adapterd-rollout-XXXXXX")
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$reg"' EXIT
pid=""
mkdir -p "$reg/models/bert-base"
for f in config.json model.safetensors; do ln -s "$cache/bert-base/$f" "$reg/models/bert-base/$f"; done
for f in "$tok"/*; do ln -sf "$f" "$reg/models/bert-base/"; done
version() { # task, version, source task
  local d="$reg/tasks/$1/$2"
  mkdir -p "$d"
  for f in "$cache/multitask-tasks/$3"/*; do ln -s "$f" "$d/"; done
  echo '{"model": "bert-base", "adapters": ["."], "head": ".", "skips": {"min": 0, "max": 11, "default": 5}}' >"$d/task.json"
}
for i in 0 1 2 3 4 5 6 7; do version "task0$i" 1 "task0$i"; done
version task00 2 task08
mkdir -p "$reg/.s" # the server's log, beside the registry it serves (removed with it)
echo '{"version": 2, "generation": 0, "deleted": [], "tasks": {"task00": {"current": "1", "max": 2}}}' >"$reg/.adapterd-state.json"

pf=$(mktemp); rm -f "$pf"
"$bin" serve --registry "$reg" --port 0 --port-file "$pf" --access-log false --threads "$threads" --admin-token bench \
  --watch off 2>"$reg/.s/server.log" &
pid=$!
for _ in $(seq 1 600); do [ -s "$pf" ] && break; sleep 0.1; done
[ -s "$pf" ] || { note "the server did not start:"; cat "$reg/.s/server.log" >&2; exit 1; }
port=$(cat "$pf"); rm -f "$pf"

cpu=$(lscpu | sed -n 's/^Model name: *//p')
note "CPU: $cpu, $(nproc) vCPUs ($(grep -o -m1 'avx512_bf16\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')); engine threads $threads; load $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" "$here/drive.py" --port "$port" --pid "$pid" --rounds "$rounds" --requests "$requests" --cpu "$cpu" --threads "$threads"
