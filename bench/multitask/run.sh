#!/usr/bin/env bash
# run.sh - the multi-task benchmark of issue 5 in one command: adapterd's shared packed pass next to the same
# engine running each task separately and to the PyTorch reference run AdapterHub-style, same run.
#
#   bench/multitask/run.sh [--build DIR | --bin PATH] [--threads N] [--core NAME|auto] [--cpu-level LEVEL] [--reps N]
#                          [--batch-reps N] [--batch N] [--counts 1,2,4,8,16] [--skips 0,5] [--fusion-ks 8,4,2]
#                          [--rounds N] [--peers adapterd,pytorch] [--precisions fp32,bf16,int8] [--cache DIR]
#                          [--json FILE] [--keep DIR] [--prepare-only]
#
# What it does, in order:
#  1. builds bench_multitask (Release, into --build, default build-mt/) when --bin is not given and it is missing;
#  2. generates once, into --cache (default ~/.cache/adapterd/bench): the bert-base shaped backbone
#     (gen_encoder.py --arch bert --shape base, full 30522 vocab; the same directory and stamp bench/encoder uses)
#     and the tasks (bench/multitask/gen_tasks.py: task00..task15 = Pfeiffer seq_bn + 2-layer head each, and
#     fusion8 = gen_adapters.py's fusion_dynamic_n8 case), reused while tools/reference and gen_tasks.py are unchanged;
#  3. runs, --rounds times: (a) adapterd once per precision of --precisions (bench_multitask --precision P
#     --json: joint pass and T separate eng_run calls, interleaved, plus the sgemm peak through the engine's
#     split and the instruction peak of P, both in the same run), (b) the PyTorch peer (peer_torch.py:
#     Parallel(T tasks) with skip_layers, float32, torch.set_num_threads(N), OpenBLAS N threads,
#     OMP_WAIT_POLICY=PASSIVE as tools/reference/bench_encoder.py gives the encoder peer);
#     workloads: 1 input of 128 tokens (latency) and --batch inputs of 128 tokens (throughput, default 8);
#  4. prints (report.py) the CPU, the load average around each peer, the core each peer really ran with, the
#     medians over rounds of each round's medians, per precision: GFLOP/s of adapterd's plans (eng_plan_stats)
#     as a share of that precision's peak and each plan's FLOP floor, the speed-up vs separate next to the FLOP
#     ratio (the most sharing can gain), vs PyTorch float32, and the per-layer profile of T=8 skip 5.
#
# OpenBLAS core: OPENBLAS_CORETYPE is removed from the environment (OpenBLAS's own detection for both peers)
# unless --core NAME is given, which sets it for both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}

build="$root/build-mt" bin="" threads=$(nproc) core=auto level=${ADAPTERD_CPU_LEVEL:-native} reps=3 batch_reps=2 batch=8 rounds=1
counts=1,2,4,8,16 skips=0,5 fks=8,4,2
peers=adapterd,pytorch precisions=fp32,bf16,int8 cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench" json_out="" keep="" prepare=0
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --core) core=$2; core_given=1; shift 2 ;;
    --cpu-level) level=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --batch-reps) batch_reps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --counts) counts=$2; shift 2 ;;
    --skips) skips=$2; shift 2 ;;
    --fusion-ks) fks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --prepare-only) prepare=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
has_peer() { case ",$peers," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"

bench_set_level "$level"
[ "${core_given:-0}" = 1 ] || [ -z "$bench_level_core" ] || core=$bench_level_core
bench_set_core "$core" "$threads"

if has_peer adapterd && [ -z "$bin" ] && [ $prepare = 0 ]; then bin=$(bench_build "$build" bench_multitask); fi

# --- backbone (shared with bench/encoder: same directory, same stamp) and tasks, once ---
have_torch=0
"$PY" -c 'import torch' 2>/dev/null && have_torch=1
model="$cache/bert-base" tasks="$cache/multitask-tasks"
bench_backbone "$cache" || exit 1
stamp=$bench_stamp
tstamp=$( (echo "$stamp"; cat "$root"/tools/reference/{adapters.py,gen_adapters.py} "$here/gen_tasks.py") | sha256sum | cut -c1-16)
if [ "$(cat "$tasks/.stamp" 2>/dev/null)" != "$tstamp" ]; then
  [ $have_torch = 1 ] || { note "$PY cannot import torch and $tasks is not generated"; exit 1; }
  rm -rf "$tasks"
  note "generating $tasks (16 seq_bn tasks + fusion of 8)"
  "$PY" "$here/gen_tasks.py" --backbone "$model" --out "$tasks" >/dev/null
  echo "$tstamp" > "$tasks/.stamp"
fi
[ $prepare = 1 ] && exit 0
if has_peer pytorch && [ $have_torch = 0 ]; then note "skipping PyTorch: $PY cannot import torch"; fi

# --- measure (raw JSON lines kept in --keep DIR when given) ---
if [ -n "$keep" ]; then
  out=$keep; mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
for r in $(seq 1 "$rounds"); do
  if has_peer adapterd; then
    for p in ${precisions//,/ }; do
      echo "$(loadavg)" > "$out/adapterd-$p.$r.load"
      note "round $r/$rounds: adapterd $p (load $(loadavg))"
      "$bin" --model "$model" --tasks "$tasks" --threads "$threads" --reps "$reps" --batch-reps "$batch_reps" \
        --batch "$batch" --counts "$counts" --skips "$skips" --fusion-ks "$fks" --precision "$p" --json \
        > "$out/adapterd-$p.$r.json" || { note "adapterd $p failed"; rm -f "$out/adapterd-$p.$r.json"; }
      echo "$(loadavg)" >> "$out/adapterd-$p.$r.load"
    done
  fi
  if has_peer pytorch && [ $have_torch = 1 ]; then
    echo "$(loadavg)" > "$out/pytorch.$r.load"
    note "round $r/$rounds: PyTorch peer (load $(loadavg))"
    "$PY" "$here/peer_torch.py" --model "$model" --tasks "$tasks" --threads "$threads" --omp-wait-policy PASSIVE \
      --reps "$reps" --batch-reps "$batch_reps" --batch "$batch" --counts "$counts" --skips "$skips" \
      --fusion-ks "$fks" > "$out/pytorch.$r.json" || { note "PyTorch peer failed"; rm -f "$out/pytorch.$r.json"; }
    echo "$(loadavg)" >> "$out/pytorch.$r.load"
  fi
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
"$PY" "$here/report.py" "$out" "$threads" "$core" "$cpu" "$json_out"
