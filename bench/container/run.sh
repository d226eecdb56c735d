#!/usr/bin/env bash
# run.sh - the image's server inside its container against the same binary outside it, same run: what the
# container costs (issue 28: within 3%).
#
#   bench/container/run.sh [--image localhost/adapterd:ci-example] [--rounds 3] [--duration S] [--threads N]
#                          [--podman-args "ARGS"]
#
# Needs the image scripts/ci-container.sh builds (and its podman settings in build-container/). The binary
# outside is the image's own /usr/local/bin/adapterd, copied out (the host has the same Debian libraries);
# both serve the example registry with --threads N (default 1), the container on the host's network (no
# port-forwarding proxy in the way), and wrk -t1 -c16 sends the README's sample request for --duration s
# (default 8), rounds alternating inside / outside after one warm-up each. Prints each window, the medians
# and their ratio, the CPU level and kernels each side reported (/metrics, adapterd_cpu_info).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
image=localhost/adapterd:ci-example rounds=3 dur=8 threads=1 pargs=""
while [ $# -gt 0 ]; do
  case $1 in
    --image) image=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --duration) dur=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --podman-args) pargs=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=${CI_WORK:-$root/build-container}
export CONTAINERS_CONF=$work/containers.conf CONTAINERS_STORAGE_CONF=$work/storage.conf
command -v podman >/dev/null && podman image exists "$image" || {
  echo "run.sh: no podman or no image $image: run scripts/ci-container.sh first" >&2; exit 1; }
tmp=$(mktemp -d)
name=adapterd-bench-$$
cleanup() { podman rm -f "$name" >/dev/null 2>&1 || true; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
cid=$(podman create "$image")
podman cp "$cid:/usr/local/bin/adapterd" "$tmp/adapterd" >/dev/null
podman rm "$cid" >/dev/null
port_in=18181 port_out=18182
body='{"inputs": ["the team played a wonderful game", "i feel so sad that the shares fell again"], "tasks": ["sentiment", "topic", "emotion"]}'
wait_ready() { for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/readyz" >/dev/null && return 0; sleep 0.1; done; return 1; }
window() { BENCH_BODY=$body wrk -t1 -c16 -d"${1}s" --timeout 60s -s "$root/bench/http/predict.lua" \
  "http://127.0.0.1:$2/v1/predict" | sed -n 's/^BENCH //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["rps"])'; }
# shellcheck disable=SC2086 # extra podman options, split on purpose
podman run -d --init --name "$name" --network host $pargs -e ADAPTERD_PORT=$port_in -e ADAPTERD_THREADS=$threads \
  "$image" --access-log false >/dev/null
"$tmp/adapterd" serve --registry "$root/examples/registry" --port $port_out --threads "$threads" --access-log false \
  2>"$tmp/out.log" &
pid=$!
wait_ready $port_in && wait_ready $port_out || { echo "run.sh: a server did not become ready" >&2; exit 1; }
for p in $port_in $port_out; do
  echo "$([ $p = $port_in ] && echo inside || echo outside): $(curl -s http://127.0.0.1:$p/metrics | grep '^adapterd_cpu_info')"
  window 3 $p >/dev/null
done
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'); $threads engine thread(s); wrk -t1 -c16, ${dur} s windows"
ins="" outs=""
for r in $(seq 1 "$rounds"); do
  a=$(window "$dur" $port_in); b=$(window "$dur" $port_out)
  echo "round $r: inside $a req/s, outside $b req/s (load $(cut -d' ' -f1 /proc/loadavg))"
  ins="$ins $a" outs="$outs $b"
done
python3 - "$ins" "$outs" <<'PY'
import statistics, sys
i = statistics.median(float(x) for x in sys.argv[1].split()); o = statistics.median(float(x) for x in sys.argv[2].split())
print("medians: inside %.1f req/s, outside %.1f req/s: inside / outside = %.3f (target within 3%%)" % (i, o, i / o))
PY
