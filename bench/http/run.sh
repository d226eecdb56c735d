#!/usr/bin/env bash
# run.sh - the HTTP benchmark of issue 6 in one command: wrk on loopback against `adapterd serve`, next to the
# engine's own batched throughput on the same inputs, same run, same threads.
#
#   bench/http/run.sh [--build DIR] [--cache DIR] [--threads N] [--http-threads N] [--duration S]
#                     [--duration64 S] [--skip-frontend] [--json FILE]
#
# What it does, in order:
#  1. builds adapterd and bench_http_engine into --build (default build-http/) when missing;
#  2. generates once, into --cache (default <build>/bench-http-cache): a bert-base shaped BERT (gen_encoder.py
#     --shape base, full 30522 vocab, seed 1) with the real bert-base-uncased tokenizer files from
#     $ADAPTERD_DATA_DIR/tokenizers (default ../shared/data), and 8 tasks of mixed adapter forms
#     (gen_adapters.py cases seq_bn_st, par_bn, lora_ah, ia3, peft_lora, prefix, seq_bn_gating,
#     double_seq_bn_st; each its own head) as a registry;
#  3. (a) GET /healthz with wrk -t1 -c64, for --http-threads 1 and the chosen value (the effect of moving
#     parsing/tokenizing onto MHD's thread pool), and the same for POST /v1/predict on the tiny fixture model
#     (front-end bound: the engine costs little there) unless --skip-frontend;
#     (b) POST /v1/predict, all 8 tasks, one ~11-token sentence per request, at concurrency 1, 8, 64 (wrk -t1,
#     --latency, a warm-up at the same concurrency first): throughput, p50/p99, and from the server's own
#     timing of every answer the mean queue wait, engine time and the rest (HTTP, JSON, tokenizing, loopback);
#     (c) bench_http_engine: eng_run on 1, 8 and 64 copies of the same tokenized input x 8 tasks, no HTTP;
#  4. prints the load average before and after every step, the CPU, and one table.
#
# The machine may be shared: read the load averages it prints next to the numbers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}

build="$root/build-http" cache="" threads=$(nproc) http_threads=2 dur=20 dur64=60 frontend=1 json_out=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --http-threads) http_threads=$2; shift 2 ;;
    --duration) dur=$2; shift 2 ;;
    --duration64) dur64=$2; shift 2 ;;
    --skip-frontend) frontend=0; shift ;;
    --json) json_out=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$build"
build=$(cd "$build" && pwd) # absolute: the registry is made of symlinks into the cache
cache=${cache:-$build/bench-http-cache}
mkdir -p "$cache" && cache=$(cd "$cache" && pwd)
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"
load() { cut -d' ' -f1-3 /proc/loadavg; }
command -v wrk >/dev/null || { note "wrk is missing (Debian package wrk, see scripts/setup.sh)"; exit 77; }

adapterd="$build/tools/adapterd" engine="$build/bench/bench_http_engine"
if [ ! -x "$adapterd" ] || [ ! -x "$engine" ]; then
  note "building adapterd and bench_http_engine into $build (Release)"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" --target adapterd bench_http_engine -j2 >/dev/null
fi

# --- the bert-base shaped registry, once ---
reg="$cache/registry"
if [ ! -f "$reg/.done" ]; then
  mkdir -p "$cache"
  note "generating the bert-base shaped model and 8 tasks into $cache (once)"
  [ -f "$cache/bert-base/model.safetensors" ] ||
    "$PY" "$root/tools/reference/gen_encoder.py" --arch bert --shape base --seed 1 --cases single --out "$cache/bert-base" >/dev/null
  "$PY" "$root/tools/reference/gen_adapters.py" --backbone "$cache/bert-base" --skips 0 --lens 8 --fast --out "$cache/cases" \
    --case seq_bn_st,par_bn,lora_ah,ia3,peft_lora,prefix,seq_bn_gating,double_seq_bn_st >/dev/null
  CACHE="$cache" TOK="${ADAPTERD_DATA_DIR:-$root/../shared/data}/tokenizers/bert-base-uncased" "$PY" - <<'EOF'
import json, os
c = os.environ["CACHE"]; reg = os.path.join(c, "registry"); mb = os.path.join(reg, "models", "bert-base")
os.makedirs(mb, exist_ok=True)
def link(src, dst):
    if not os.path.lexists(dst): os.symlink(src, dst)
for f in ("config.json", "model.safetensors"): link(os.path.join(c, "bert-base", f), os.path.join(mb, f))
for f in os.listdir(os.environ["TOK"]): link(os.path.join(os.environ["TOK"], f), os.path.join(mb, f))
for i, case in enumerate(sorted(os.listdir(os.path.join(c, "cases")))):
    s = json.load(open(os.path.join(c, "cases", case, "setup.json")))
    d = os.path.join(reg, "tasks", "t%d_%s" % (i, case), "1"); os.makedirs(d, exist_ok=True)
    names = [os.path.basename(a) for a in s["adapters"]]
    for a in s["adapters"]: link(os.path.join(c, "cases", case, a), os.path.join(d, os.path.basename(a)))
    head = os.path.basename(s["head"]) if s.get("head") else None
    if head and head not in names: link(os.path.join(c, "cases", case, s["head"]), os.path.join(d, head))
    json.dump({"model": "bert-base", "adapters": names, "fusion": None, "head": head,
               "skips": {"min": 0, "max": 11, "default": 0}}, open(os.path.join(d, "task.json"), "w"))
EOF
  touch "$reg/.done"
fi

# --- server helpers ---
pid="" port=""
start() { # registry, extra args...
  local r=$1; shift
  local pf; pf=$(mktemp)
  rm -f "$pf"
  "$adapterd" serve --registry "$r" --port 0 --port-file "$pf" --access-log false --threads "$threads" \
    --max-queue 4096 "$@" 2>"$cache/server.log" &
  pid=$!
  for _ in $(seq 1 600); do [ -s "$pf" ] && break; sleep 0.1; done
  [ -s "$pf" ] || { note "server did not start:"; cat "$cache/server.log" >&2; exit 1; }
  port=$(cat "$pf"); rm -f "$pf"
}
stop() { kill -TERM "$pid"; wait "$pid" || true; }
metric() { bench_metric "http://127.0.0.1:$port" "$1"; }

text="the screen is great but the battery is poor"
body='{"inputs":"'"$text"'","return":{"scores":true}}'
results="$cache/results.jsonl"; : >"$results"
emit() { echo "$1" | tee -a "$results"; }

note "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; engine threads $threads; load $(load)"

# --- (a) front end: /healthz, and predict on the tiny fixture model, 1 vs $http_threads MHD threads ---
for ht in 1 "$http_threads"; do
  start "$root/tests/fixtures/registry" --http-threads "$ht"
  wrk -t1 -c64 -d3s "http://127.0.0.1:$port/healthz" >/dev/null
  l0=$(load)
  rps=$(wrk -t1 -c64 -d10s "http://127.0.0.1:$port/healthz" | awk '/Requests\/sec/ {print $2}')
  emit "{\"bench\":\"healthz\",\"http_threads\":$ht,\"rps\":$rps,\"load_before\":\"$l0\",\"load_after\":\"$(load)\"}"
  if [ "$frontend" = 1 ]; then
    tiny='{"inputs":"'"$text"'","tasks":["cls_lora","peft","ml","reg"]}'
    BENCH_BODY=$tiny wrk -t1 -c64 -d3s -s "$here/predict.lua" "http://127.0.0.1:$port/v1/predict" >/dev/null
    l0=$(load)
    out=$(BENCH_BODY=$tiny wrk -t1 -c64 -d10s --timeout 30s -s "$here/predict.lua" "http://127.0.0.1:$port/v1/predict" | sed -n 's/^BENCH //p')
    emit "{\"bench\":\"predict-tiny\",\"http_threads\":$ht,\"c\":64,\"wrk\":$out,\"load_before\":\"$l0\",\"load_after\":\"$(load)\"}"
  fi
  stop
done

# --- (b) predict, 8 tasks on bert-base shapes, c = 1, 8, 64 ---
start "$reg" --http-threads "$http_threads"
for c in 1 8 64; do
  d=$dur; [ "$c" = 64 ] && d=$dur64
  BENCH_BODY=$body wrk -t1 -c"$c" -d"$((d / 3 + 5))s" --timeout 300s -s "$here/predict.lua" "http://127.0.0.1:$port/v1/predict" >/dev/null
  b0=$(metric adapterd_batch_seconds_sum) n0=$(metric adapterd_batch_seconds_count) l0=$(load)
  out=$(BENCH_BODY=$body wrk -t1 -c"$c" -d"${d}s" --timeout 300s --latency -s "$here/predict.lua" "http://127.0.0.1:$port/v1/predict" | sed -n 's/^BENCH //p')
  b1=$(metric adapterd_batch_seconds_sum) n1=$(metric adapterd_batch_seconds_count)
  emit "{\"bench\":\"predict\",\"c\":$c,\"wrk\":$out,\"engine_busy_s\":$(awk -v a="$b0" -v b="$b1" 'BEGIN {print b - a}'),\"batches\":$((n1 - n0)),\"load_before\":\"$l0\",\"load_after\":\"$(load)\"}"
done
stop

# --- (c) the engine alone on the same input x 8 tasks ---
l0=$(load)
"$engine" --registry "$reg" --text "$text" --batches 1,8,64 --reps 3 --threads "$threads" | while read -r line; do
  emit "{\"bench\":\"engine\",\"run\":$line,\"load_before\":\"$l0\",\"load_after\":\"$(load)\"}"
done

# --- table ---
"$PY" - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
eng = {r["run"]["batch"]: r["run"]["inputs_per_s"] for r in rows if r["bench"] == "engine"}
print("\n| bench | c | req/s | p50 ms | p99 ms | p99/p50 | queue ms | engine ms | rest ms | engine alone (batch c) inputs/s | http/engine | load 1m before/after |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["bench"] == "healthz":
        print(f"| /healthz (http-threads {r['http_threads']}) | 64 | {r['rps']:.0f} | | | | | | | | | {r['load_before'].split()[0]} / {r['load_after'].split()[0]} |")
    elif r["bench"] in ("predict", "predict-tiny"):
        w = r["wrk"]; c = r["c"]
        rest = w["mean_ms"] - w["queue_ms"] - w["inference_ms"]
        e = eng.get(c) if r["bench"] == "predict" else None
        name = "predict 8 tasks bert-base" if r["bench"] == "predict" else f"predict tiny (http-threads {r['http_threads']})"
        es = "" if e is None else "%.2f" % e
        ratio = "" if e is None else "%.2f" % (w["rps"] / e)
        print(f"| {name} | {c} | {w['rps']:.2f} | {w['p50_ms']:.1f} | {w['p99_ms']:.1f} | {w['p99_ms'] / max(w['p50_ms'], 1e-9):.2f} | "
              f"{w['queue_ms']:.1f} | {w['inference_ms']:.1f} | {rest:.1f} | {es} | {ratio} | "
              f"{r['load_before'].split()[0]} / {r['load_after'].split()[0]} |")
for b, v in sorted(eng.items()):
    print(f"| engine alone, batch {b} | | {v:.2f} inputs/s | | | | | | | | | |")
EOF
[ -n "$json_out" ] && cp "$results" "$json_out"
exit 0
