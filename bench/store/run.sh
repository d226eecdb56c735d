#!/usr/bin/env bash
# bench/store: what hot loading costs (issue 7), on a bert-base-shaped backbone.
#   1. load latency of a Pfeiffer adapter (seq_bn, reduction 16, ~3.6 MB + a 2.4 MB head) from disk
#      (KServe /load of tasks never loaded, the store's own load timer) and from upload (PUT .tar:
#      HTTP + untar + load + validate + rename, curl's total time); target under 50 ms
#   2. memory with 1,000 registered tasks and a 256 MB budget: RSS after start-up (metadata only) and
#      after 200 distinct tasks were loaded (LRU keeps what fits)
#   3. p99 of predictions on a resident task (wrk, 4 connections) alone and while a large adapter (a
#      fusion of 8, ~110 MB) loads and unloads in a loop; target: no more than 10% above steady state
# Inputs: the bert-base-shaped checkpoint and tasks cached by bench/multitask (tools/reference/gen_encoder.py
# and gen_adapters.py, in $CACHE), the bert-base-uncased tokenizer of examples/registry.
# Usage: bench/store/run.sh [--build DIR] [--threads N] [--seconds S] [--pairs N]
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/common/lib.sh
BUILD=build THREADS=1 SECS=10 PAIRS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--threads N] [--seconds S] [--pairs N]"; exit 2 ;;
  esac
done
CACHE=${ADAPTERD_BENCH_CACHE:-$HOME/.cache/adapterd/bench}
BIN=$BUILD/tools/adapterd
for p in "$CACHE/bert-base/model.safetensors" "$CACHE/multitask-tasks/task00/adapter.safetensors" "$CACHE/multitask-tasks/fusion8/fusion"; do
  [ -e "$p" ] || { echo "missing $p: run bench/multitask first (it generates the checkpoint and tasks)"; exit 77; }
done
REG=$(mktemp -d -t adapterd-bench-store-XXXXXX)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$REG"; }
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT

# registry: the model (links), 1,000 tasks (hard links of one Pfeiffer task), one fusion of 8
mkdir -p "$REG/models/bert-base" "$REG/tasks"
ln -s "$CACHE/bert-base/config.json" "$CACHE/bert-base/model.safetensors" "$REG/models/bert-base/"
cp examples/registry/models/*/vocab.txt examples/registry/models/*/tokenizer*.json "$REG/models/bert-base/" 2>/dev/null || true
for i in $(seq -w 0 999); do mkdir -p "$REG/tasks/t0$i/1/pfeiffer" && cp -al "$CACHE/multitask-tasks/task00/." "$REG/tasks/t0$i/1/pfeiffer/"; done
mkdir -p "$REG/tasks/big/1" && cp -al "$CACHE/multitask-tasks/fusion8/." "$REG/tasks/big/1/"
echo '{"adapters": ["adapters/t0","adapters/t1","adapters/t2","adapters/t3","adapters/t4","adapters/t5","adapters/t6","adapters/t7"], "fusion": "fusion", "head": "head"}' > "$REG/tasks/big/1/task.json"
TAR=$REG/upload.tar
tar -C "$REG/tasks/t0000/1" -cf "$TAR" .

PORT_FILE=$REG/port
"$BIN" serve --registry "$REG" --port 0 --port-file "$PORT_FILE" --threads "$THREADS" --access-log false \
  --admin-token bench --adapter-memory 268435456 --max-upload-bytes 536870912 --watch false 2>"$REG/log" &
PID=$!
for _ in $(seq 1 600); do [ -s "$PORT_FILE" ] && break; sleep 0.1; done
U=http://127.0.0.1:$(cat "$PORT_FILE")
A="Authorization: Bearer bench"
rss() { awk '/VmRSS/ {printf "%.1f", $2/1024}' /proc/$PID/status; }
metric() { bench_metric "$U" "$1"; }
engine_mark() { echo "$(metric adapterd_batch_seconds_sum) $(metric adapterd_batch_seconds_count)"; }
engine_since() { # "sum count" of a mark -> engine ms per batch and batches since then
  set -- $1 $(engine_mark); awk -v s0="$1" -v c0="$2" -v s1="$3" -v c1="$4" 'BEGIN {printf "engine %.1f ms/batch over %d batches", (s1-s0)/(c1-c0)*1000, c1-c0}'; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== adapterd bench/store: $(nproc) cores, --threads $THREADS, OpenBLAS $(grep -o 'core [A-Za-z0-9]*' "$REG/log" | head -1)"
echo "RSS after start-up, 1,001 registered tasks, none loaded: $(rss) MB"

# 1a. from disk: /load of 20 tasks never loaded
for i in $(seq -w 0 19); do curl -s -o /dev/null -w '%{time_total}\n' -XPOST -H "$A" $U/v2/repository/models/t00$i/load; done > "$REG/disk"
echo "load from disk (Pfeiffer, $(stat -c %s "$CACHE/multitask-tasks/task00/adapter.safetensors") B adapter + head): HTTP /load median $(awk '{print $1*1000}' "$REG/disk" | median) ms; store timer mean $(awk -v s="$(metric adapterd_adapter_load_seconds_sum)" -v c="$(metric adapterd_adapter_load_seconds_count)" 'BEGIN {printf "%.2f", s/c*1000}') ms"
# 1b. from upload
for v in $(seq 1 10); do curl -s -o /dev/null -w '%{time_total}\n' -XPUT -H "$A" -H 'Content-Type: application/x-tar' --data-binary @"$TAR" "$U/v1/tasks/up/versions/$v?activate=true"; done > "$REG/up"
echo "load from upload (PUT $(stat -c %s "$TAR") B .tar, untar + load + validate + rename, activate): median $(awk '{print $1*1000}' "$REG/up" | median) ms"

# 2. memory: 200 distinct tasks through a 256 MB budget
for i in $(seq -w 0 199); do curl -s -o /dev/null -XPOST -H "$A" $U/v2/repository/models/t0$(printf %03d $((10#$i)))/load; done
echo "after loading 200 distinct tasks: RSS $(rss) MB, resident $(metric adapterd_tasks_resident) versions, $(awk -v b="$(metric adapterd_adapter_bytes)" 'BEGIN {printf "%.1f", b/1048576}') MB of adapters (budget 256 MB), evictions $(metric adapterd_adapter_evictions_total)"

# 3. p99 of another task, steady and while a large adapter loads
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"inputs":"x","tasks":["t0000"]}' $U/v1/predict
curl -s -o /dev/null -XPOST -H "$A" $U/v2/repository/models/t0000/load
# A p99 over one window of ~500 requests moves by 10-20% between identical windows, so the windows
# alternate, steady then during, PAIRS times; the verdict uses the medians of each kind's p99.
for _ in $(seq 1 2000); do echo "url = \"$U/v2/repository/models/big/load\""; echo "url = \"$U/v2/repository/models/big/unload\""; done > "$REG/loadurls"
p99() { echo "$1" | sed 's/.*p99_ms=\([0-9.]*\).*/\1/'; }
: > "$REG/p99s"; : > "$REG/p99d"
for pair in $(seq 1 "$PAIRS"); do
  mark=$(engine_mark)
  steady=$(STORE_TASK=t0000 wrk -t1 -c4 -d${SECS}s -s bench/store/predict.lua $U/v1/predict | grep RESULT)
  echo "pair $pair steady:            $steady; $(engine_since "$mark")"
  mark=$(engine_mark)
  # the loads come from one curl process on one connection (a curl per request would make the
  # benchmark's own fork/exec the contention it measures); it is stopped when wrk ends
  loads0=$(metric adapterd_adapter_load_seconds_count)
  curl -s -XPOST -H "$A" -K "$REG/loadurls" > /dev/null &
  LOADER=$!
  during=$(STORE_TASK=t0000 wrk -t1 -c4 -d${SECS}s -s bench/store/predict.lua $U/v1/predict | grep RESULT)
  kill $LOADER 2>/dev/null || true; wait $LOADER 2>/dev/null || true
  echo "pair $pair while loading big: $during; $(engine_since "$mark")  ($(( $(metric adapterd_adapter_load_seconds_count) - loads0 )) loads of the fusion of 8, $(awk -v s="$(metric adapterd_adapter_load_seconds_max)" 'BEGIN {printf "%.0f", s*1000}') ms the longest so far)"
  p99 "$steady" >> "$REG/p99s"; p99 "$during" >> "$REG/p99d"
done
p_s=$(median < "$REG/p99s"); p_d=$(median < "$REG/p99d")
echo "p99 median of $PAIRS windows: steady $p_s ms, while loading $p_d ms; ratio $(awk -v a="$p_d" -v b="$p_s" 'BEGIN {printf "%.2f", a/b}') (target <= 1.10)"
