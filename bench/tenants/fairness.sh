#!/usr/bin/env bash
# fairness.sh - what one tenant's flood does to another tenant's latency (issue 38, the scheduler's weighted
# fair queuing and its interactive/batch classes).
#
#   bench/tenants/fairness.sh [--mode share|priority] [--duration S] [--flood-connections C] [--flood-inputs N]
#                             [--quiet-connections C] [--threads N] [--workers N] [--core CORE] [--max-batch-tokens N]
#                             [--adapterd BIN] [--registry DIR] [--no-keys]
#
# `adapterd serve` on the bundled example registry (examples/registry, every task per request) with a keys file
# (--keys) of two tenants, then wrk on loopback, closed loop (each connection sends its next request when its
# answer comes):
#  1. idle: the quiet tenant alone, --quiet-connections (default 1) for S seconds (default 10), after a 2 s
#     warm-up: its p50 and p99;
#  2. flooded: the flooding tenant on --flood-connections (default 64) connections, each request --flood-inputs
#     (default 8) inputs, starts first; after 2 s the quiet tenant runs again as in 1, while the flood goes on;
#  3. prints both rows, the flood's own rate and 429s, and the ratio flooded p99 / idle p99 (target: <= 2).
# A flooded request waits at least for the pass in flight and then runs in a pass the flood shares, so the ratio
# is bounded below by the pass length: --max-batch-tokens (the server's option) sets it; with the default 8192 a
# pass of the flood's 64 x 8 inputs is seconds long on 2 cores. The server's light-tenant cap (server/scheduler.c)
# shrinks the flood's passes while the quiet tenant is active; with --workers 2 it also keeps a worker free for
# the quiet tenant, so its request does not wait for the pass in flight.
# --mode share (default): tenants "flood" and "quiet", equal shares, both interactive (the keys file exactly as
# issue 38 writes it). --mode priority: tenants "batch" ("priority": "batch") floods and "interactive" is the quiet
# one. Keys are random per run; the file holds their digests (`printf %s KEY | sha256sum`), clients send
# `Authorization: Bearer KEY`.
# The binary must have --keys (checked in `serve --help`); without it the script says so and exits 77, unless
# --no-keys: the same two loads without a keys file, so both are one queue (slot 0, interactive): the baseline
# of the scheduler without tenants, and a check of the load generator.
# The header names the CPU (/proc/cpuinfo), the cores, the load average, the OpenBLAS core the server reported
# (--core sets OPENBLAS_CORETYPE; default: the environment's, else OpenBLAS's own detection) and the commit.
# The machine may be shared: wrk runs on the same cores as the server; read the load average next to the numbers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mode=share dur=10 flood_conns=64 flood_inputs=8 quiet_conns=1 threads="" workers="" core="" mbt="" keys=1
bin="$root/build/tools/adapterd" registry="$root/examples/registry"
while [ $# -gt 0 ]; do
  case $1 in
    --mode) mode=$2; shift 2 ;;
    --duration) dur=$2; shift 2 ;;
    --flood-connections) flood_conns=$2; shift 2 ;;
    --flood-inputs) flood_inputs=$2; shift 2 ;;
    --quiet-connections) quiet_conns=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --core) core=$2; shift 2 ;;
    --max-batch-tokens) mbt=$2; shift 2 ;;
    --adapterd) bin=$2; shift 2 ;;
    --registry) registry=$2; shift 2 ;;
    --no-keys) keys=0; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fairness.sh: unknown argument $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
case $mode in
  share) flood_name=flood quiet_name=quiet ;;
  priority) flood_name=batch quiet_name=interactive ;;
  *) echo "fairness.sh: --mode is share or priority, not $mode" >&2; exit 2 ;;
esac
[ -x "$bin" ] || { echo "fairness.sh: $bin is not built (cmake --build build --target adapterd, or --adapterd BIN)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "fairness.sh: wrk is missing (Debian package wrk, see scripts/setup.sh)" >&2; exit 77; }
help=$("$bin" serve --help 2>&1 || true) # whole, not piped into grep -q: an early exit would fail the pipe
if [ $keys = 1 ] && ! grep -q -- '--keys' <<<"$help"; then
  echo "fairness.sh: $bin has no --keys option (tenants and their keys file come with issue 38's front door);" \
       "nothing to measure. --no-keys measures the same loads as one queue, the baseline." >&2
  exit 77
fi
[ -n "$core" ] && export OPENBLAS_CORETYPE=$core

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- the keys file: two tenants, random keys, their SHA-256 digests ---
flood_key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
quiet_key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
digest() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
if [ $mode = share ]; then
  printf '{"tenants":[{"name":"flood","keys":["sha256:%s"],"predict":["*"]},{"name":"quiet","keys":["sha256:%s"],"predict":["*"]}]}\n' \
    "$(digest "$flood_key")" "$(digest "$quiet_key")" > "$tmp/keys.json"
else
  printf '{"tenants":[{"name":"batch","keys":["sha256:%s"],"predict":["*"],"priority":"batch"},{"name":"interactive","keys":["sha256:%s"],"predict":["*"],"priority":"interactive"}]}\n' \
    "$(digest "$flood_key")" "$(digest "$quiet_key")" > "$tmp/keys.json"
fi

# --- bodies: the quiet tenant sends one sentence, the flood --flood-inputs of them; every task runs ---
sentence="the film was long but the actors kept it alive from start to end"
quiet_body="{\"inputs\":\"$sentence\"}"
flood_body="{\"inputs\":[$(for i in $(seq 1 "$flood_inputs"); do printf '%s"%s %d"' "$([ "$i" = 1 ] || echo ,)" "$sentence" "$i"; done)]}"

# One wrk script for both tenants: body and key from the environment; done() prints one line,
# "RESULT requests non200 p50_us p99_us seconds".
cat > "$tmp/load.lua" <<'LUA'
wrk.method = "POST"
wrk.body = os.getenv("LOAD_BODY")
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("LOAD_KEY")
if key and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
local threads = {}
function setup(t) table.insert(threads, t) end
function init(args) ok, bad, n429 = 0, 0, 0 end
function response(status, headers, body)
  if status == 200 then ok = ok + 1 elseif status == 429 then n429 = n429 + 1 else bad = bad + 1 end
end
function done(summary, latency, requests)
  local o, b, r = 0, 0, 0
  for _, t in ipairs(threads) do o, b, r = o + t:get("ok"), b + t:get("bad"), r + t:get("n429") end
  io.write(string.format("RESULT %d %d %d %.0f %.0f %.3f\n", o, b, r, latency:percentile(50), latency:percentile(99),
                         summary.duration / 1e6))
end
LUA
# load NAME KEY BODY CONNECTIONS SECONDS: runs wrk, leaves its RESULT line in $tmp/NAME.out
load() {
  LOAD_KEY=$2 LOAD_BODY=$3 wrk -t1 -c"$4" -d"${5}s" --timeout 30s -s "$tmp/load.lua" "$url/v1/predict" \
    | grep '^RESULT' > "$tmp/$1.out"
}

# --- the server ---
args=(serve --registry "$registry" --port 0 --port-file "$tmp/port")
[ -n "$threads" ] && args+=(--threads "$threads")
[ -n "$workers" ] && args+=(--workers "$workers")
[ -n "$mbt" ] && args+=(--max-batch-tokens "$mbt")
[ $keys = 1 ] && args+=(--keys "$tmp/keys.json")
"$bin" "${args[@]}" 2>"$tmp/server.log" &
pid=$!
pids+=("$pid")
for _ in $(seq 1 300); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { echo "fairness.sh: the server did not start:" >&2; cat "$tmp/server.log" >&2; exit 1; }
url="http://127.0.0.1:$(cat "$tmp/port")"
for _ in $(seq 1 300); do curl -sf "$url/readyz" >/dev/null && break; sleep 0.1; done
code=$(curl -s -o "$tmp/probe" -w '%{http_code}' -H 'Content-Type: application/json' -H "Authorization: Bearer $quiet_key" \
  -d "$quiet_body" "$url/v1/predict")
[ "$code" = 200 ] || { echo "fairness.sh: a quiet request is answered $code: $(head -c 300 "$tmp/probe")" >&2; exit 1; }
[ $keys = 0 ] && { flood_key=""; quiet_key=""; }

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$root" status --porcelain -- server engine adapters_store proto tools 2>/dev/null)" ] || commit="$commit (uncommitted changes)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus," \
     "$(grep -o -m1 -w 'avx512_bf16\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "server: $bin ($commit), $(grep -m1 -o 'OpenBLAS core [^ ]*' "$tmp/server.log" || echo 'OpenBLAS core not reported')," \
     "threads ${threads:-all cores}, workers ${workers:-default: 2 with --keys}, max-batch-tokens ${mbt:-default}; registry $registry"
echo "mode $mode$([ $keys = 0 ] && echo ', NO KEYS: one queue, the baseline'); quiet tenant \"$quiet_name\": 1 input," \
     "$quiet_conns connection(s); flood tenant \"$flood_name\": $flood_inputs inputs, $flood_conns connections; ${dur}s each"

# --- 1. idle ---
load warm "$quiet_key" "$quiet_body" "$quiet_conns" 2
echo "load average before idle: $(cut -d' ' -f1-3 /proc/loadavg)"
load idle "$quiet_key" "$quiet_body" "$quiet_conns" "$dur"

# --- 2. flooded ---
echo "load average before flood: $(cut -d' ' -f1-3 /proc/loadavg)"
load flood "$flood_key" "$flood_body" "$flood_conns" $((dur + 4)) &
fpid=$!
pids+=("$fpid")
sleep 2
load flooded "$quiet_key" "$quiet_body" "$quiet_conns" "$dur"
wait "$fpid"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- 3. report ---
printf '%-24s %9s %7s %9s %9s %9s\n' phase answered other req_s p50_ms p99_ms
row() {
  read -r _ ok bad n429 p50 p99 secs < "$tmp/$2.out"
  awk -v n="$1" -v ok="$ok" -v bad="$((bad + n429))" -v s="$secs" -v a="$p50" -v b="$p99" \
    'BEGIN { printf "%-24s %9d %7d %9.1f %9.2f %9.2f\n", n, ok, bad, ok / s, a / 1e3, b / 1e3 }'
}
row "$quiet_name idle" idle
row "$quiet_name flooded" flooded
row "$flood_name (flood)" flood
read -r _ _ _ _ _ idle99 _ < "$tmp/idle.out"
read -r _ fl_ok _ _ _ flood99 _ < "$tmp/flooded.out"
read -r _ _ _ f429 _ _ _ < "$tmp/flood.out"
[ "$f429" = 0 ] || echo "the flood was refused $f429 times (429: --max-queue, batch requests first)"
if [ "$fl_ok" = 0 ]; then
  # closed loop: its one request outlived the window, so wrk has no latency to give
  echo "quiet p99 flooded / idle: no quiet answer within ${dur}s while flooded (ratio > $((dur * 1000000 / idle99))): target NOT met"
else
  awk -v a="$idle99" -v b="$flood99" 'BEGIN { r = b / a; printf "quiet p99 flooded / idle: %.2f (target <= 2: %s)\n", r, r <= 2 ? "met" : "NOT met" }'
fi
