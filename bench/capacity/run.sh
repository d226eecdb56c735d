#!/usr/bin/env bash
# run.sh - capacity figures for docs/OPERATIONS.md: the same `adapterd serve` built or capped several ways,
# measured in the same run, on the same registries and requests.
#
#   bench/capacity/run.sh [--peer NAME=DIR[:CFLAGS][@LEVEL]]... [--cache DIR] [--threads 1,2] [--duration S]
#                         [--duration-base S] [--reps N] [--c N]
#
#  peers: image=build (the default build, as the Dockerfile builds it: every x86 level's kernels, the best
#         chosen at start), image-avx2=build@avx2 (the same binary capped at AVX2, ADAPTERD_CPU_LEVEL) and
#         native=build-native (-march=native) unless --peer is given; a peer's DIR is built when it has no
#         adapterd (ADAPTERD_NATIVE=ON for the name native, else OFF with CFLAGS); @LEVEL caps its kernels
#         (skipped with a message when the CPU lacks the level); ratios are against the first peer;
#  registries: the example registry (README's sample request: 2 inputs x 3 tasks) and a bert-base shaped one
#         (bench_backbone's model with the real bert-base-uncased tokenizer, one AdapterHub seq_bn task made by
#         gen_adapters.py; one 12-token sentence per request);
#  for each --threads value: wrk -t1 -c N (default 16) closed loop, a warm-up then --reps windows of --duration s
#         (--duration-base for bert-base, default 3x); prints the median requests/s, per core, and the ratios;
#  memory: RSS of the first peer's server on each registry after start-up, on the model alone (tasks/ empty),
#         and each task's weights (GET /v1/tasks "bytes").
# The machine may be shared: the load average is printed next to every figure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
note() { echo "bench: $*" >&2; }
peers=() cache="" dur=8 durb="" reps=3 conc=16 threads_list=1,2
while [ $# -gt 0 ]; do
  case $1 in
    --peer) peers+=("$2"); shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --threads) threads_list=$2; shift 2 ;;
    --duration) dur=$2; shift 2 ;;
    --duration-base) durb=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --c) conc=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#peers[@]} -gt 0 ] || peers=("image=build" "image-avx2=build@avx2" "native=build-native")
durb=${durb:-$((dur * 3))}
names=() dirs=() levels=()
for p in "${peers[@]}"; do
  name=${p%%=*} rest=${p#*=} level=native
  case $rest in *@*) level=${rest##*@} rest=${rest%@*} ;; esac
  dir=${rest%%:*} cflags=""
  [ "$rest" != "$dir" ] && cflags=${rest#*:}
  case $dir in /*) ;; *) dir="$root/$dir" ;; esac
  nat=OFF
  [ "$name" = native ] && nat=ON
  if [ ! -x "$dir/tools/adapterd" ]; then
    note "building adapterd into $dir (ADAPTERD_NATIVE=$nat${cflags:+, CFLAGS $cflags})"
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DADAPTERD_NATIVE="$nat" -DADAPTERD_BUILD_BENCH=OFF \
      -DADAPTERD_BUILD_TESTS=OFF ${cflags:+"-DCMAKE_C_FLAGS=$cflags"} >/dev/null
    cmake --build "$dir" --target adapterd -j"$(nproc)" >/dev/null
  fi
  if ! why=$("$dir/tools/adapterd" version --cpu-level "$level" 2>&1 >/dev/null); then
    note "skipping peer $name: $why"
    continue
  fi
  names+=("$name") dirs+=("$dir") levels+=("$level")
done
native=${dirs[0]}
cache=${cache:-$native/bench-capacity-cache}
mkdir -p "$cache" && cache=$(cd "$cache" && pwd)
# shellcheck source=bench/common/lib.sh
. "$root/bench/common/lib.sh"
load() { cut -d' ' -f1-3 /proc/loadavg; }
command -v wrk >/dev/null || { note "wrk is missing (Debian package wrk, see scripts/setup.sh)"; exit 77; }

# --- the bert-base shaped registry, once ---
tokdir="${ADAPTERD_DATA_DIR:-$root/../shared/data}/tokenizers/bert-base-uncased"
[ -d "$tokdir" ] || { note "$tokdir is missing (the shared data): nothing to measure"; exit 77; }
bench_backbone "$cache" || exit 77
breg="$cache/registry-base"
if [ ! -f "$breg/.done" ]; then
  rm -rf "$breg" "$cache/cases"
  "$PY" "$root/tools/reference/gen_adapters.py" --backbone "$cache/bert-base" --skips 0 --lens 8 --fast \
    --out "$cache/cases" --case seq_bn_st >/dev/null
  mkdir -p "$breg/models/bert-base" "$breg/tasks/sst/1"
  cp "$cache/bert-base/config.json" "$cache/bert-base/model.safetensors" "$breg/models/bert-base/"
  cp "$tokdir/"* "$breg/models/bert-base/"
  cp -r "$cache/cases/seq_bn_st/adapters/"* "$breg/tasks/sst/1/"
  touch "$breg/.done"
fi
mreg="$cache/registry-model-only"
mkdir -p "$mreg/tasks" && rm -rf "$mreg/models" && mkdir -p "$mreg/models" &&
  cp -r "$breg/models/bert-base" "$mreg/models/"

pid="" port=""
start() { # BIN REGISTRY THREADS [LEVEL]
  local pf="$cache/port"
  rm -f "$pf"
  ADAPTERD_CPU_LEVEL=${4:-native} "$1" serve --registry "$2" --port 0 --port-file "$pf" --access-log false --threads "$3" --max-queue 4096 \
    2>"$cache/server.log" &
  pid=$!
  for _ in $(seq 1 600); do [ -s "$pf" ] && break; sleep 0.1; done
  [ -s "$pf" ] || { note "server did not start:"; cat "$cache/server.log" >&2; exit 1; }
  port=$(cat "$pf")
}
stop() { kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; }
rss_mb() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status"; }
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

ex_body='{"inputs": ["adapterd serves many tasks.", "the match was great"], "tasks": ["sentiment", "topic", "emotion"]}'
base_body='{"inputs": ["the movie was great and the cast was even better"], "tasks": ["sst"]}'
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores); load average before: $(load)"
printf '%-12s %-9s %7s %10s %10s %9s %s\n' registry build threads "req/s" "req/s/core" RSS_MB "load average"
declare -A res
for r in example base; do
  if [ $r = example ]; then reg="$root/examples/registry" body=$ex_body d=$dur; else reg=$breg body=$base_body d=$durb; fi
  for t in ${threads_list//,/ }; do
    for i in "${!names[@]}"; do
      b=${names[$i]}
      start "${dirs[$i]}/tools/adapterd" "$reg" "$t" "${levels[$i]}"
      BENCH_BODY=$body wrk -t1 -c"$conc" -d"$((d / 2 + 2))s" --timeout 120s -s "$root/bench/http/predict.lua" \
        "http://127.0.0.1:$port/v1/predict" >/dev/null
      runs=""
      for _ in $(seq 1 "$reps"); do
        runs="$runs $(BENCH_BODY=$body wrk -t1 -c"$conc" -d"${d}s" --timeout 120s -s "$root/bench/http/predict.lua" \
          "http://127.0.0.1:$port/v1/predict" | sed -n 's/^BENCH //p' | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["rps"])')"
      done
      m=$(echo "$runs" | tr ' ' '\n' | grep . | median)
      res[$r.$t.$b]=$m
      printf '%-12s %-9s %7d %10.1f %10.1f %9s %s\n' $r "$b" "$t" "$m" "$(echo "$m $t" | awk '{print $1 / $2}')" "$(rss_mb)" "$(load)"
      stop
    done
    for b in "${names[@]:1}"; do
      echo "  $r, $t threads: $b / ${names[0]} = $(echo "${res[$r.$t.$b]} ${res[$r.$t.${names[0]}]}" | awk '{printf "%.2f", $1 / $2}')"
    done
  done
done

echo "memory (${names[0]} build, 1 thread, after start-up):"
for r in example base model-only; do
  case $r in example) reg="$root/examples/registry" ;; base) reg=$breg ;; model-only) reg=$mreg ;; esac
  start "$native/tools/adapterd" "$reg" 1 "${levels[0]}"
  tasks=$(curl -s "http://127.0.0.1:$port/v1/tasks" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
ts = d.get("tasks", d) if isinstance(d, dict) else d
print(" ".join("%s=%.2fMB" % (t["name"], (t.get("bytes") or 0) / 1e6) for t in ts))')
  echo "  $r: RSS $(rss_mb) MB; task weights: ${tasks:-none}"
  stop
done
echo "load average after: $(load)"
