#!/usr/bin/env bash
# traces.sh - the cost of OpenTelemetry tracing (issue 42) on the HTTP benchmark: POST /v1/predict with 4 tasks on
# the tiny fixture model (front-end bound, where a per-request cost shows most) with wrk, tracing off, at 1% and at
# 100% sampling, in the same run, rounds interleaved (off, 1%, 100%, off, ...) so the machine's drift falls on all
# three alike; medians over the rounds. The collector is a local OTLP/HTTP sink (it answers 200 without decoding)
# on 127.0.0.1.
#
#   bench/http/traces.sh [--build DIR] [--rounds N] [--duration S] [--c N] [--threads N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
build="$root/build" rounds=3 dur=8 conc=64 threads=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --duration) dur=$2; shift 2 ;;
    --c) conc=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "traces.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"
command -v wrk >/dev/null || { note "wrk is missing (Debian package wrk, see scripts/setup.sh)"; exit 77; }
adapterd="$build/tools/adapterd"
[ -x "$adapterd" ] || { note "no $adapterd: build the adapterd target first"; exit 1; }
tmp=$(mktemp -d)
trap 'kill $sink 2>/dev/null || true; rm -rf "$tmp"' EXIT

# the collector: answers every POST 200 at once (keep-alive), counts the bytes it took
"$PY" - "$tmp/sink.port" <<'EOF2' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200); self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0"); self.end_headers()
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_address[1])); __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
EOF2
sink=$!
for _ in $(seq 1 100); do [ -s "$tmp/sink.port" ] && break; sleep 0.05; done
sink_url="http://127.0.0.1:$(cat "$tmp/sink.port")"

pid="" port=""
start() { # env assignments...
  rm -f "$tmp/port"
  env "$@" "$adapterd" serve --registry "$root/tests/fixtures/registry" --port 0 --port-file "$tmp/port" --access-log false \
    --threads "$threads" --max-queue 4096 2>"$tmp/server.log" &
  pid=$!
  for _ in $(seq 1 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || { note "server did not start:"; cat "$tmp/server.log" >&2; exit 1; }
  port=$(cat "$tmp/port")
}
stop() { kill -TERM "$pid"; wait "$pid" || true; }
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; } # the server's CPU time, clock ticks (all threads)
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 == n {print $2}'; }

body='{"inputs":"the screen is great but the battery is poor","tasks":["cls_lora","peft","ml","reg"]}'
note "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs; engine threads $threads; wrk -t1 -c$conc ${dur}s x $rounds rounds"
results="$tmp/results"
: >"$results"
for r in $(seq 1 "$rounds"); do
  for mode in off 1 100; do
    case $mode in
      off) start OTEL_SDK_DISABLED=true ;;
      1) start OTEL_EXPORTER_OTLP_ENDPOINT="$sink_url" OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.01 OTEL_BSP_SCHEDULE_DELAY=1000 ;;
      100) start OTEL_EXPORTER_OTLP_ENDPOINT="$sink_url" OTEL_TRACES_SAMPLER=always_on OTEL_BSP_SCHEDULE_DELAY=1000 ;;
    esac
    BENCH_BODY=$body wrk -t1 -c"$conc" -d2s -s "$here/predict.lua" "http://127.0.0.1:$port/v1/predict" >/dev/null
    c0=$(cpu)
    out=$(BENCH_BODY=$body wrk -t1 -c"$conc" -d"${dur}s" --timeout 30s --latency -s "$here/predict.lua" "http://127.0.0.1:$port/v1/predict" | sed -n 's/^BENCH //p')
    c1=$(cpu)
    exported=$(metric adapterd_trace_spans_exported_total) dropped=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^adapterd_trace_spans_dropped_total/ {s += $2} END {print s + 0}')
    echo "{\"round\":$r,\"mode\":\"$mode\",\"wrk\":$out,\"cpu_s\":$(awk -v a="$c0" -v b="$c1" -v t="$(getconf CLK_TCK)" 'BEGIN {print (b - a) / t}'),\"exported\":${exported:-0},\"dropped\":${dropped:-0},\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" | tee -a "$results" >&2
    stop
  done
done
"$PY" - "$results" <<'EOF2'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
name = {"off": "tracing off", "1": "1% sampled (traceidratio 0.01)", "100": "100% sampled (always_on)"}
base = None
print("| tracing | req/s (median) | p50 ms | p99 ms | req/s vs off | server CPU us / request | CPU vs off | spans exported / dropped (last round) |")
print("|---|---|---|---|---|---|---|---|")
cbase = None
for m in ("off", "1", "100"):
    rs = [r for r in rows if r["mode"] == m]
    rps = statistics.median(r["wrk"]["rps"] for r in rs)
    p50 = statistics.median(r["wrk"]["p50_ms"] for r in rs)
    p99 = statistics.median(r["wrk"]["p99_ms"] for r in rs)
    cpr = statistics.median(r["cpu_s"] / max(r["wrk"]["requests"], 1) * 1e6 for r in rs)
    base, cbase = base or rps, cbase or cpr
    print("| %s | %.0f | %.2f | %.2f | %.3f | %.0f | %.3f | %d / %d |" % (name[m], rps, p50, p99, rps / base, cpr, cpr / cbase,
                                                                     rs[-1]["exported"], rs[-1]["dropped"]))
EOF2
