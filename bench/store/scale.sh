#!/usr/bin/env bash
# scale.sh - the registry at scale (issue 29): what 10, 1,000 and 10,000 registered tasks cost, in one run.
#
#   bench/store/scale.sh [--sizes "10 1000 10000"] [--seconds S] [--uploads K] [--rounds R] [--onoff-seconds T]
#                        [--onoff-only] [BINARY ...]
#
# For each N a registry of N copies of the example task "topic" (hard links: one version, a Pfeiffer
# adapter and a head; --adapter-memory 256 MiB, so weights load on first use) on the example backbone, then for each binary
# (default build/tools/adapterd; pass a before and an after to compare them in one run):
#   server A, --watch-interval-ms 0 (file events only: an idle registry):
#     start-up   launch to /readyz, then until the watch's first full rescan is done; RSS then
#     idle       predict p50/p99 (wrk -t1 -c4, S seconds, one task) with nothing else happening
#     upload     K uploads one after another (PUT of a .tar, new version, activate): time to 201, median/p95
#     +uploads   predict p50/p99 while uploads run back to back
#   server B, --watch-interval-ms 250 (a full rescan as often as it can run, 20x the default's rate):
#     +rescans   predict p50/p99 while full rescans run; each rescan's mean wall (a paced one's includes its pauses) and CPU time
# and for every window the event loop's longest turn (adapterd_loop_busy_max_seconds: callbacks between two
# waits for events, reset at each scrape; wall, then CPU) and the most CPU one registry watch callback took
# on it (adapterd_watch_loop_max_seconds): on a loaded host the wall time is mostly the loop being preempted. The machine and its load are printed first: compare figures of
# one run only. --rounds R (default 1) alternates the idle and +uploads windows R times, and takes R +rescans windows,
# after a discarded warm-up window: each predict figure is then the median over its R windows (each window's p99
# alone moves by tens of percent on a 2-vCPU host), and each round's p99 is printed under the row. The upload
# client runs at nice 19: on a 2-vCPU host it would otherwise take CPU from the server it measures.
# Rescans on/off (issue 41, fault 3): at each N, the same predict stream (T seconds a window, default 30: p99.9
# needs tens of thousands of answers and several default rescans) against a server with the default
# --watch-interval-ms (5000) and one with 0, alternated R times in one run; p50/p99/p99.9 of each, medians over
# the R windows, and their p99.9 ratio. --onoff-only runs this part alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
sizes="10 1000 10000" secs=8 uploads=10 rounds=1 onoff_secs=30 onoff_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) sizes=$2; shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    --uploads) uploads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --onoff-seconds) onoff_secs=$2; shift 2 ;;
    --onoff-only) onoff_only=1; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --*) echo "scale.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || set -- "$root/build/tools/adapterd"
for b in "$@"; do [ -x "$b" ] || { echo "scale.sh: $b is not an executable (build adapterd first)" >&2; exit 2; }; done
command -v wrk >/dev/null || { echo "scale.sh: wrk is missing (Debian package wrk, see scripts/setup.sh)" >&2; exit 77; }
PY=/usr/bin/python3
tmp=$(mktemp -d -t adapterd-store-scale-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
src=$root/examples/registry/tasks/topic/1
model=$root/examples/registry/models/bert-6l-256-uncased
tar -C "$src" -cf "$tmp/upload.tar" .

# tasks t00000 .. t(N-1): one folder of hard links each (a few seconds for 10,000)
make_registry() {
  rm -rf "$tmp/reg"
  mkdir -p "$tmp/reg/models" "$tmp/reg/tasks"
  ln -s "$model" "$tmp/reg/models/bert-6l-256-uncased"
  "$PY" - "$src" "$tmp/reg/tasks" "$1" <<'PY'
import os, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = []
for d, _, fs in os.walk(src):
    files += [os.path.relpath(os.path.join(d, f), src) for f in fs]
for i in range(n):
    v = os.path.join(dst, "t%05d" % i, "1")
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(v, f)), exist_ok=True)
        os.link(os.path.join(src, f), os.path.join(v, f))
PY
}

metric() { curl -s "$U/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
metrics_to() { curl -s "$U/metrics" > "$1"; }
from() { awk -v k="$2" '$1 == k {print $2}' "$1"; }
stall_reset() { curl -s -o /dev/null "$U/metrics"; }
# the window's longest loop turn, wall/CPU, and the watch's costliest callback (CPU), ms (one scrape resets them)
stall_of() { awk '$1 == "adapterd_loop_busy_max_seconds" {a = $2} $1 == "adapterd_loop_busy_cpu_max_seconds" {b = $2}
  $1 == "adapterd_watch_loop_max_seconds" {c = $2} END {printf "%.1f/%.1f/%.1f", a * 1000, b * 1000, c * 1000}' "$1"; }
stall_ms() { metrics_to "$tmp/ms"; stall_of "$tmp/ms"; }
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p/100+0.999); if (i<1) i=1; printf "%.1f", a[i]}'; }
wrk_run() { STORE_TASK=t00000 wrk -t1 -c4 -d"${secs}s" -s "$here/predict.lua" "$U/v1/predict" | grep RESULT; }
field() { echo "$1" | sed "s/.*$2=\([0-9.]*\).*/\1/"; }
med() { sort -n | awk '{a[NR] = $1} END {if (NR % 2) printf "%.3f", a[(NR + 1) / 2]; else printf "%.3f", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# the worst of stall strings a/b/c (each field's maximum)
worst() { tr '/' ' ' | awk 'NF == 3 {for (i = 1; i <= 3; i++) if ($i > m[i]) m[i] = $i} END {printf "%.1f/%.1f/%.1f", m[1], m[2], m[3]}'; }
upload_one() { # task version -> seconds to the answer, or the status when it is not 201
  nice -n 19 curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -XPUT -H "Authorization: Bearer bench" \
    -H 'Content-Type: application/x-tar' --data-binary @"$tmp/upload.tar" "$U/v1/tasks/$1/versions/$2?activate=true" |
    awk '$1 == 201 {print $2 * 1000} $1 != 201 {print "status " $1 > "/dev/stderr"}'
}

start() { # binary, interval (empty: the default) -> $pid, $U, $startup_s
  rm -f "$tmp/port"
  local iv=(--watch-interval-ms "$2"); [ -n "$2" ] || iv=()
  local t0; t0=$(date +%s.%N)
  "$1" serve --registry "$tmp/reg" --port 0 --port-file "$tmp/port" --threads 1 --access-log false --admin-token bench \
    "${iv[@]}" --max-upload-bytes 67108864 \
    --adapter-memory 268435456 2>"$tmp/log" &
  pid=$!
  for _ in $(seq 1 1200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
  [ -s "$tmp/port" ] || { echo "scale.sh: $1 did not start:" >&2; tail "$tmp/log" >&2; exit 1; }
  U=http://127.0.0.1:$(cat "$tmp/port")
  for _ in $(seq 1 1200); do curl -sf "$U/readyz" >/dev/null && break; sleep 0.05; done
  # the watch's first full rescan is part of starting; the loop's longest turns meanwhile are the
  # maxima over every scrape of the wait (each scrape resets them)
  : > "$tmp/startmax"
  for _ in $(seq 1 1200); do
    metrics_to "$tmp/ms"
    stall_of "$tmp/ms" >> "$tmp/startmax"; echo >> "$tmp/startmax"
    [ "$(from "$tmp/ms" 'adapterd_registry_rescan_seconds_count{kind="full"}')" -ge 1 ] 2>/dev/null && break
    sleep 0.05
  done
  sleep 1 # what the first full rescan's end still does on the loop (the watches of every folder, before)
  metrics_to "$tmp/ms"; stall_of "$tmp/ms" >> "$tmp/startmax"; echo >> "$tmp/startmax"
  start_stall=$(worst < "$tmp/startmax")
  startup_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
  curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"inputs":"x","tasks":["t00000"]}' "$U/v1/predict"
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "predict: wrk -t1 -c4 -d${secs}s, one input, one task; uploads: ${uploads} PUTs of $(stat -c %s "$tmp/upload.tar") B"
hdr=$(printf '%-9s %6s %7s %7s %14s | %7s %7s %14s | %7s %7s %14s | %7s %7s %7s %14s | %8s %8s %7s %7s %14s' \
  binary N start_s rss_mb stall_ms idl_p50 idl_p99 stall up_med up_p95 stall upl_p50 upl_p99 upl_med stall \
  resc_ms resc_cpu res_p50 res_p99 stall)
rows=() onoff=()
binname() { local name; name=$(basename "$1")
  [ "$name" = adapterd ] && name=$(basename "$(dirname "$(dirname "$1")")") # build/tools/adapterd: "build"
  echo "$name"; }
# the same stream, rescans at the default interval (on) and none (off), windows alternated
onoff_run() { # binary N
  local r w mode
  : > "$tmp/on" ; : > "$tmp/off"
  for r in $(seq 1 "$rounds"); do
    for mode in on off; do
      make_registry "$2"
      if [ $mode = on ]; then start "$1" ""; else start "$1" 0; fi
      STORE_TASK=t00000 wrk -t1 -c4 -d2s -s "$here/predict.lua" "$U/v1/predict" >/dev/null # warm-up, not counted
      w=$(STORE_TASK=t00000 wrk -t1 -c4 -d"${onoff_secs}s" -s "$here/predict.lua" "$U/v1/predict" | grep RESULT)
      echo "$(field "$w" p50_ms) $(field "$w" p99_ms) $(field "$w" p999_ms) $(field "$w" requests)" >> "$tmp/$mode"
      stop
      echo "    $(binname "$1") N=$2 round $r rescans $mode: p50/p99/p99.9 $(tail -1 "$tmp/$mode" | cut -d' ' -f1-3) ms, $(tail -1 "$tmp/$mode" | cut -d' ' -f4) answers; load $(cut -d' ' -f1-3 /proc/loadavg)"
    done
  done
  local a b
  a=$(cut -d' ' -f3 "$tmp/on" | med) b=$(cut -d' ' -f3 "$tmp/off" | med)
  onoff+=("$(printf '%-9s %6s | %7s %7s %8s | %7s %7s %8s | %6s' "$(binname "$1")" "$2" \
    "$(cut -d' ' -f1 "$tmp/on" | med)" "$(cut -d' ' -f2 "$tmp/on" | med)" "$a" \
    "$(cut -d' ' -f1 "$tmp/off" | med)" "$(cut -d' ' -f2 "$tmp/off" | med)" "$b" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')")")
}
for n in $sizes; do for bin in "$@"; do onoff_run "$bin" "$n"; done; done
echo
echo "rescans on (default --watch-interval-ms) / off (0), ${onoff_secs}s windows, median of $rounds; predict ms:"
printf '%-9s %6s | %7s %7s %8s | %7s %7s %8s | %6s\n' binary N on_p50 on_p99 on_p99.9 off_p50 off_p99 off_p99.9 ratio
printf '%s\n' "${onoff[@]}"
[ "$onoff_only" = 1 ] && exit 0
echo
for n in $sizes; do
  for bin in "$@"; do
    make_registry "$n" # anew for each binary: the same start (no state file, no upload of the previous one)
    name=$(binname "$bin")
    # --- server A: file events only
    start "$bin" 0
    rss=$(awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$pid/status")
    st0=$start_stall
    STORE_TASK=t00000 wrk -t1 -c4 -d2s -s "$here/predict.lua" "$U/v1/predict" >/dev/null # warm-up, not counted
    : > "$tmp/idl" ; : > "$tmp/dur"; : > "$tmp/s1"; : > "$tmp/s3"
    for r in $(seq 1 "$rounds"); do
      stall_reset; w=$(wrk_run); stall_ms >> "$tmp/s1"; echo >> "$tmp/s1"
      echo "$(field "$w" p50_ms) $(field "$w" p99_ms)" >> "$tmp/idl"
      if [ "$r" = 1 ]; then
        : > "$tmp/up"
        for v in $(seq 2 $((uploads + 1))); do upload_one t00001 "$v" >> "$tmp/up"; done
        st2=$(stall_ms)
      fi
      ( v=$((r * 100000)); while :; do upload_one t00002 $v >> "$tmp/upl"; v=$((v + 1)); done ) &
      loader=$!
      w=$(wrk_run)
      kill "$loader" 2>/dev/null; wait "$loader" 2>/dev/null || true
      stall_ms >> "$tmp/s3"; echo >> "$tmp/s3"
      echo "$(field "$w" p50_ms) $(field "$w" p99_ms)" >> "$tmp/dur"
    done
    st1=$(worst < "$tmp/s1"); st3=$(worst < "$tmp/s3")
    upl_med=$(pct 50 < "$tmp/upl"); rm -f "$tmp/upl"
    stop
    # --- server B: full rescans back to back
    start "$bin" 250
    metrics_to "$tmp/m0"
    STORE_TASK=t00000 wrk -t1 -c4 -d2s -s "$here/predict.lua" "$U/v1/predict" >/dev/null # warm-up, not counted
    : > "$tmp/res"
    for r in $(seq 1 "$rounds"); do w=$(wrk_run); echo "$(field "$w" p50_ms) $(field "$w" p99_ms)" >> "$tmp/res"; done
    metrics_to "$tmp/m1"
    k='adapterd_registry_rescan_seconds_count{kind="full"}' s='adapterd_registry_rescan_seconds_sum{kind="full"}'
    c='adapterd_registry_rescan_cpu_seconds_total{kind="full"}'
    # every full rescan since the start (the start-up's one included: at 10,000 tasks on a loaded host
    # fewer than one more may end within the window)
    rw=$(awk -v b="$(from "$tmp/m1" "$s")" -v y="$(from "$tmp/m1" "$k")" 'BEGIN {if (y > 0) printf "%.1f", b / y * 1000; else print "-"}')
    rc=$(awk -v b="$(from "$tmp/m1" "$c")" -v y="$(from "$tmp/m1" "$k")" 'BEGIN {if (y > 0) printf "%.1f", b / y * 1000; else print "-"}')
    st4=$(stall_of "$tmp/m1")
    nresc=$(awk -v x="$(from "$tmp/m0" "$k")" -v y="$(from "$tmp/m1" "$k")" 'BEGIN {print y - x}')
    stop
    row=$(printf '%-9s %6s %7s %7s %14s | %7s %7s %14s | %7s %7s %14s | %7s %7s %7s %14s | %8s %8s %7s %7s %14s' \
      "$name" "$n" "$startup_s" "$rss" "$st0" "$(cut -d' ' -f1 "$tmp/idl" | med)" "$(cut -d' ' -f2 "$tmp/idl" | med)" "$st1" \
      "$(pct 50 < "$tmp/up")" "$(pct 95 < "$tmp/up")" "$st2" "$(cut -d' ' -f1 "$tmp/dur" | med)" "$(cut -d' ' -f2 "$tmp/dur" | med)" "$upl_med" "$st3" \
      "$rw" "$rc" "$(cut -d' ' -f1 "$tmp/res" | med)" "$(cut -d' ' -f2 "$tmp/res" | med)" "$st4")
    echo "$row   ($nresc full rescans; load $(cut -d' ' -f1 /proc/loadavg))"
    echo "    p99 by round, idle: $(cut -d' ' -f2 "$tmp/idl" | tr '\n' ' ')| +uploads: $(cut -d' ' -f2 "$tmp/dur" | tr '\n' ' ')| +rescans: $(cut -d' ' -f2 "$tmp/res" | tr '\n' ' ')"
    rows+=("$row")
  done
done
echo
echo "start_s: launch to ready and the first full rescan done; stall: the event loop's longest turn in the window before it,"
echo "ms of wall time / of the loop thread's CPU / of the loop's CPU in one registry watch callback"
echo "idl: idle predict (ms); up: time to 201 of one upload at a time (ms); upl: predict while uploads run, upl_med their"
echo "time to 201; resc_ms / resc_cpu: one full rescan's wall / CPU (ms, mean of all since the start); res: predict while"
echo "full rescans run; with --rounds R each predict figure is the median of its R windows"
echo "$hdr"
printf '%s\n' "${rows[@]}"
