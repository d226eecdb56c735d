#!/usr/bin/env bash
# flood.sh - what a request refused by --max-queue costs the server: CPU per 429.
#
#   bench/http/flood.sh [--duration S] [--connections C] ADAPTERD [ADAPTERD ...]
#
# For each binary, in turn on the same machine: `adapterd serve` on the fixture registry with --max-queue 1 and
# a 10 s batching window, one request admitted and held in the queue (so every later one is beyond it), then
# wrk -t1 -cC for S seconds POSTing a predict body of 8 inputs x ~1,500 characters. The server's CPU time
# (utime + stime from /proc/PID/stat, every thread) over the flood divided by the 429s answered is the cost of
# one refusal; wrk runs on the same cores, so the rate is the client's and the server's together. Pass the
# binary before and after a change to compare them in one run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dur=5 conns=16
while [ $# -gt 0 ]; do
  case $1 in
    --duration) dur=$2; shift 2 ;;
    --connections) conns=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --*) echo "flood.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "flood.sh: name at least one adapterd binary" >&2; exit 2; }
command -v wrk >/dev/null || { echo "flood.sh: wrk is missing (Debian package wrk, see scripts/setup.sh)" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text=$(printf 'the film was long but the actors kept it alive from start to end, %.0s' $(seq 1 22))
body="{\"inputs\":[$(for i in 1 2 3 4 5 6 7 8; do printf '%s"%s %d"' "$([ $i = 1 ] || echo ,)" "$text" "$i"; done)]}"
cat > "$tmp/flood.lua" <<'LUA'
wrk.method = "POST"
wrk.body = os.getenv("FLOOD_BODY")
wrk.headers["Content-Type"] = "application/json"
local threads = {}
function setup(t) table.insert(threads, t) end
function init(args) n429, nother = 0, 0 end
function response(status, headers, body)
  if status == 429 then n429 = n429 + 1 else nother = nother + 1 end
end
function done(summary, latency, requests)
  local a, b = 0, 0
  for _, t in ipairs(threads) do a, b = a + t:get("n429"), b + t:get("nother") end
  io.write(string.format("FLOOD %d %d %d\n", summary.requests, a, b))
end
LUA
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "body: ${#body} bytes, 8 inputs; wrk -t1 -c$conns -d${dur}s"
printf '%-40s %10s %10s %14s %16s\n' binary requests 429s server_cpu_s cpu_us_per_429
for bin in "$@"; do
  rm -f "$tmp/port"
  "$bin" serve --registry "$root/tests/fixtures/registry" --port 0 --port-file "$tmp/port" --max-queue 1 \
    --max-wait-us 10000000 --max-body-bytes 1048576 2>"$tmp/server.log" &
  pid=$!
  for _ in $(seq 1 200); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || { echo "flood.sh: $bin did not start:" >&2; cat "$tmp/server.log" >&2; exit 1; }
  port=$(cat "$tmp/port")
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"inputs":"held in the queue"}' \
    "http://127.0.0.1:$port/v1/predict" &
  held=$!
  for _ in $(seq 1 100); do curl -s "http://127.0.0.1:$port/metrics" | grep -q '^adapterd_queue_depth 1' && break; sleep 0.05; done
  c0=$(cpu_ticks $pid)
  out=$(FLOOD_BODY="$body" wrk -t1 -c"$conns" -d"${dur}s" -s "$tmp/flood.lua" "http://127.0.0.1:$port/v1/predict" | grep '^FLOOD')
  c1=$(cpu_ticks $pid)
  kill -TERM $pid; wait $pid 2>/dev/null || true; wait $held 2>/dev/null || true
  read -r _ reqs n429 _ <<<"$out"
  awk -v b="$bin" -v r="$reqs" -v n="$n429" -v c="$((c1 - c0))" -v hz="$hz" 'BEGIN {
    s = c / hz; printf "%-40s %10d %10d %14.2f %16.1f\n", b, r, n, s, (n > 0 ? s * 1e6 / n : 0) }'
done
