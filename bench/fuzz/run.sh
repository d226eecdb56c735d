#!/usr/bin/env bash
# bench/fuzz/run.sh - runs every libFuzzer harness of tests/fuzz for a while, one after another, and
# prints per harness: executions, executions per second, coverage (libFuzzer's final cov and ft),
# corpus growth and crashes. Needs a build configured with ADAPTERD_FUZZ=ON:
#     CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DADAPTERD_FUZZ=ON \
#         -DADAPTERD_BUILD_TESTS=OFF -DADAPTERD_BUILD_BENCH=OFF
#     cmake --build build-fuzz -j2 --target fuzz_url ...   (or the whole build)
#     bench/fuzz/run.sh [--seconds N] [--build DIR] [--only name[,name...]] [--jobs J] [--report]
#                       [--scratch DIR]
# Each harness starts from its committed seeds (tests/fuzz/corpus/<name>) and regressions, and grows
# a working corpus in DIR/fuzz/corpus/<name> kept between runs. Crash inputs land in
# DIR/fuzz/artifacts/<name>/; minimise one with `DIR/tests/fuzz/fuzz_<name> -minimize_crash=1 FILE`,
# fix the bug and commit the input under tests/fuzz/regressions/<name>/. Every run appends its
# figures to DIR/fuzz/totals.tsv, and the last table sums that ledger: the executions per harness
# over all runs of this build folder (the issue's target is 10 million each).
# --jobs J runs J harnesses at once (each single-threaded); runs are `nice`d. --scratch DIR is where
# the harnesses run (DIR/<name>; default fuzz/run of the build folder): tar extracts every input there
# and task_json keeps its scratch registry there, so a memory file system (tmpfs) spares the disk.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=60
build="$root/build-fuzz"
only=""
jobs=1
report_only=0 # --report: print and record the figures of the last logs without running
scratch=""
all="proto_v1 proto_v2 proto_grpc url traceparent grpc_session tar safetensors torch_bin tokenizer config adapter_config head_config task_json"

while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --only) only=${2//,/ }; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --report) report_only=1; shift ;;
    --scratch) mkdir -p "$2"; scratch=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
names=${only:-$all}
bin="$build/tests/fuzz"
out="$build/fuzz"
mkdir -p "$out/logs" "$out/run"
scratch=${scratch:-$out/run}
for n in $names; do
    if [ ! -x "$bin/fuzz_$n" ]; then
        echo "missing $bin/fuzz_$n: configure with CC=clang -DADAPTERD_FUZZ=ON and build it" >&2
        exit 1
    fi
done

# sources NAME: the files whose string literals seed the harness's dictionary
sources() {
    case "$1" in
    proto_v1) echo proto/parse.c proto/json.c ;;
    proto_v2) echo proto/v2.c proto/parse.c proto/json.c ;;
    proto_grpc) echo proto/grpc.c proto/v2.c proto/parse.c ;;
    url) echo server/routes.c server/admin.c ;;
    tar) echo server/tar.c ;;
    safetensors) echo engine/io/safetensors.c ;;
    torch_bin) echo engine/io/pickle.c engine/io/torch_bin.c ;;
    tokenizer) echo engine/tokenizer/load.c ;;
    config) echo engine/model/model.c engine/io/hf_keys.c ;;
    adapter_config|head_config) echo engine/task/*.c ;;
    task_json) echo adapters_store/meta.c ;;
    esac
}

# make_dict NAME: a libFuzzer dictionary of the identifiers and paths the parser compares against,
# quoted as JSON keys too for the JSON harnesses (made at run time from the sources, not kept)
make_dict() {
    local n=$1 d="$out/dict/$1.dict"
    mkdir -p "$out/dict"
    (cd "$root" && grep -oh '"[A-Za-z_/.][A-Za-z0-9_./{}:-]*"' $(sources "$n")) | sort -u | while read -r t; do
        t=${t#\"}; t=${t%\"}
        [ ${#t} -le 40 ] || continue
        printf '"%s"\n' "$t"
        case "$n" in url|tar|safetensors|torch_bin) ;; *) printf '"\\"%s\\""\n' "$t" ;; esac
    done >"$d"
    echo "$d"
}

# run_one NAME: one libFuzzer run; the log goes to $out/logs/NAME.log
run_one() {
    local n=$1 dirs dict
    dict=$(make_dict "$n")
    mkdir -p "$out/corpus/$n" "$out/artifacts/$n" "$scratch/$n"
    dirs=("$out/corpus/$n" "$root/tests/fuzz/corpus/$n")
    [ -d "$root/tests/fuzz/regressions/$n" ] && dirs+=("$root/tests/fuzz/regressions/$n")
    # the harnesses make their scratch folders in the working directory
    (cd "$scratch/$n" && nice "$bin/fuzz_$n" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 \
        -rss_limit_mb=2048 -max_len=65536 -dict="$dict" -artifact_prefix="$out/artifacts/$n/" "${dirs[@]}" \
        >"$out/logs/$n.log" 2>&1) || true
}

# figures NAME: "execs exec/s cov ft new crashes" from the log and the artifacts folder
figures() {
    local n=$1 log="$out/logs/$1.log"
    local execs eps newu cov ft crashes
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    newu=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    if [ -z "$execs" ]; then # a crash stops libFuzzer before its final stats: take the last status line
        execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
        eps=$(grep -o 'exec/s: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    fi
    crashes=$(grep -c '^SUMMARY: ' "$log" || true) # one per crash, leak, timeout or out-of-memory
    echo "${execs:-0} ${eps:-0} ${cov:-0} ${ft:-0} ${newu:-0} ${crashes:-0}"
}

echo "fuzzing $seconds s per harness, $jobs at a time; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
running=0
[ "$report_only" = 1 ] && names_run="" || names_run=$names
for n in $names_run; do
    run_one "$n" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

stamp=$(date -u +%Y-%m-%dT%H:%M:%SZ)
printf '%-15s %12s %9s %7s %7s %6s %8s\n' harness execs exec/s cov ft new crashes
for n in $names; do
    read -r execs eps cov ft newu crashes < <(figures "$n")
    printf '%-15s %12s %9s %7s %7s %6s %8s\n' "$n" "$execs" "$eps" "$cov" "$ft" "$newu" "$crashes"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$stamp" "$n" "$seconds" "$execs" "$eps" "$cov" "$ft" "$crashes" >>"$out/totals.tsv"
    if [ "$crashes" != 0 ]; then
        echo "    $n: see $out/logs/$n.log; inputs in $out/artifacts/$n/" >&2
    fi
done

echo
echo "ledger ($out/totals.tsv): all runs of this build folder"
printf '%-15s %5s %14s %9s %8s\n' harness runs total-execs seconds crashes
awk -F'\t' '{ r[$2]++; e[$2] += $4; s[$2] += $3; c[$2] += $8 }
    END { for (n in r) printf "%-15s %5d %14d %9d %8d\n", n, r[n], e[n], s[n], c[n] }' "$out/totals.tsv" | sort
