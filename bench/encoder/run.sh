#!/usr/bin/env bash
# run.sh - the encoder benchmark of issue 2 in one command: adapterd next to the PyTorch reference and
# ONNX Runtime on a bert-base shaped checkpoint, same run, same thread count, same OpenBLAS core.
#
#   bench/encoder/run.sh [--build DIR | --bin PATH] [--threads N] [--core NAME|auto] [--reps N]
#                        [--batch-reps N] [--rounds N] [--peers adapterd,pytorch,ort] [--cache DIR]
#                        [--cpu-level LEVEL] [--json FILE]
#
# What it does, in order:
#  1. builds bench_encoder (Release, into --build, default build/) when --bin is not given and it is missing;
#  2. generates the checkpoint once with the reference (gen_encoder.py --arch bert --shape base --cases single)
#     and exports it to ONNX once (export_onnx.py), into --cache (default ~/.cache/adapterd/bench); both are
#     reused while tools/reference is unchanged (a stamp of its sources);
#  3. runs, --rounds times, each peer in turn: (a) adapterd (bench_encoder), (b) the PyTorch reference
#     (bench_encoder.py: torch.set_num_threads(N), OpenBLAS N threads, OMP_WAIT_POLICY=PASSIVE as its README
#     recommends), (c) ONNX Runtime (bench/peers/bench_ort.mjs: npm onnxruntime-node, CPU EP, N intra-op
#     threads, all graph optimizations); workloads 1x128 (latency) and 32x128 (throughput);
#  4. prints the CPU, the load average around each peer, the core each peer really ran with, the medians
#     (median over rounds of each round's median), GFLOP/s, the sgemm peak measured by bench_encoder in
#     the same run, and the speedups of adapterd (peer ms / adapterd ms).
#
# CPU level: --cpu-level LEVEL (default: ADAPTERD_CPU_LEVEL, else native) caps adapterd's kernels
# (engine/math/kern.h), to measure a lower level's path on a bigger CPU; at avx2 or below PyTorch is capped
# the same way (ATEN_CPU_CAPABILITY=avx2 / default for its own kernels) and, unless --core is given,
# every peer's OpenBLAS gets the Haswell (AVX2) core. ONNX Runtime has no such cap: MLAS dispatches by CPUID, so
# on a bigger CPU it runs its bigger kernels (the report says which); compare with that in mind.
#
# OpenBLAS core: by default OPENBLAS_CORETYPE is removed from the environment, so every peer that loads
# OpenBLAS (adapterd, torch) uses OpenBLAS's own CPU detection; --core NAME sets OPENBLAS_CORETYPE=NAME for
# all of them. ONNX Runtime does not use OpenBLAS (its own MLAS kernels, chosen by CPU features); the
# report says so. A missing peer (no torch, no node, no onnxruntime-node) is skipped with a message.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}

build="$root/build" bin="" threads=$(nproc) core=auto reps=20 batch_reps=7 rounds=1
peers=adapterd,pytorch,ort cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench" json_out=""
level=${ADAPTERD_CPU_LEVEL:-native} core_given=0
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
    --rounds) rounds=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
has_peer() { case ",$peers," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"

# --- the CPU level: adapterd's cap, and the same for PyTorch's own kernels and everybody's OpenBLAS ---
bench_set_level "$level"
torch_cap=$bench_torch_cap
[ $core_given = 1 ] || [ -z "$bench_level_core" ] || core=$bench_level_core

# --- the OpenBLAS core, one for everybody ---
bench_set_core "$core" "$threads"

# --- adapterd's binary ---
if has_peer adapterd && [ -z "$bin" ]; then bin=$(bench_build "$build" bench_encoder); fi

# --- checkpoint and ONNX export, once ---
have_torch=0
"$PY" -c 'import torch' 2>/dev/null && have_torch=1
model="$cache/bert-base" onnx="$cache/bert-base.onnx"
bench_backbone "$cache" || exit 1

ort_ok=0
if has_peer ort && bench_ort "$cache"; then ort_ok=1; fi
if has_peer pytorch && [ $have_torch = 0 ]; then
  note "skipping PyTorch: $PY cannot import torch (Debian python3-torch)"
fi

# --- measure ---
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
for r in $(seq 1 "$rounds"); do
  if has_peer adapterd; then
    echo "load $(loadavg)" > "$out/adapterd.$r.load"
    note "round $r/$rounds: adapterd (load $(loadavg))"
    "$bin" --model "$model" --threads "$threads" --reps "$reps" --batch-reps "$batch_reps" --json > "$out/adapterd.$r.json" \
      || { note "adapterd failed"; rm -f "$out/adapterd.$r.json"; }
  fi
  if has_peer pytorch && [ $have_torch = 1 ]; then
    note "round $r/$rounds: PyTorch reference (load $(loadavg))"
    echo "load $(loadavg)" > "$out/pytorch.$r.load"
    # Two processes so each workload gets its own repetition count; same settings otherwise.
    "$PY" "$root/tools/reference/bench_encoder.py" --model "$model" --threads "$threads" --omp-wait-policy PASSIVE \
      --workloads latency --iters "$reps" --warmup 2 > "$out/pytorch.$r.lat.json" \
      && "$PY" "$root/tools/reference/bench_encoder.py" --model "$model" --threads "$threads" --omp-wait-policy PASSIVE \
      --workloads batch --iters "$batch_reps" --warmup 1 > "$out/pytorch.$r.batch.json" \
      || { note "PyTorch peer failed"; rm -f "$out"/pytorch.$r.*.json; }
  fi
  if [ $ort_ok = 1 ]; then
    note "round $r/$rounds: ONNX Runtime (load $(loadavg))"
    echo "load $(loadavg)" > "$out/ort.$r.load"
    (cd "$root/bench/peers" && node bench_ort.mjs --model "$onnx" --threads "$threads" --iters "$reps" \
      --batch-iters "$batch_reps" --warmup 2) > "$out/ort.$r.json" || { note "ONNX Runtime peer failed"; rm -f "$out/ort.$r.json"; }
  fi
done
echo "load $(loadavg)" > "$out/end.load"

# --- report ---
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
isa=SSE
grep -qw avx2 /proc/cpuinfo && isa=AVX2
grep -qw avx512f /proc/cpuinfo && isa=AVX-512
python3 - "$out" "$rounds" "$threads" "$core" "$bench_env_core" "$cpu" "$isa" "$json_out" "$peers" "$level" "$torch_cap" <<'EOF'
import glob, json, os, statistics, sys
out, rounds, threads, core, env_core, cpu, isa, json_out, peers, level, torch_cap = sys.argv[1:12]
H, I, L = 768, 3072, 12
def flops(b, s=128):  # the encoder's products + attention (as bench_encoder.c counts them)
    return L * (2.0 * b * s * (4 * H * H + 2 * H * I) + 4.0 * b * s * s * H)
def load(name):
    rows = []
    for f in sorted(glob.glob(os.path.join(out, name))):
        with open(f) as fh:
            rows.append(json.loads(fh.read().strip().splitlines()[-1]))
    return rows
def loads(peer):
    return [open(f).read().split(None, 1)[1].strip() for f in sorted(glob.glob(os.path.join(out, peer + ".*.load")))]
res = {}
a = load("adapterd.*.json")
if a:
    res["adapterd"] = {"lat": statistics.median(x["latency_1x128_ms"] for x in a),
                       "thr": statistics.median(x["batch_32x128_ms"] for x in a),
                       "core": "OpenBLAS %s, kernels %s at CPU level %s" % (a[0]["blas_core"], a[0].get("kernel"), level),
                       "peak": statistics.median(x["sgemm_peak_gflops"] for x in a),
                       "isa_peak": statistics.median(x.get("precision_peak_gops", 0) for x in a),
                       "kernel": a[0].get("kernel"), "load": loads("adapterd")}
pl, pb = load("pytorch.*.lat.json"), load("pytorch.*.batch.json")
if pl and pb:
    res["pytorch"] = {"lat": statistics.median(x["latency_1x128_ms"] for x in pl),
                      "thr": statistics.median(x["batch_32x128_ms"] for x in pb),
                      "core": "OpenBLAS %s (%s threads), torch %s, OMP_WAIT_POLICY=%s%s" % (
                          pl[0].get("openblas_core"), pl[0].get("openblas_threads"), pl[0]["torch"],
                          pl[0].get("OMP_WAIT_POLICY"), ", ATEN_CPU_CAPABILITY=" + torch_cap if torch_cap else ""),
                      "load": loads("pytorch")}
o = load("ort.*.json")
if o:
    res["ort"] = {"lat": statistics.median(x["latency_1x128_ms"] for x in o),
                  "thr": statistics.median(x["batch_32x128_ms"] for x in o),
                  "core": "no OpenBLAS: ORT's MLAS, dispatched by CPU features (%s here), onnxruntime-node %s" % (
                      isa, o[0]["ort"]),
                  "load": loads("ort")}
names = {"adapterd": "adapterd", "pytorch": "PyTorch reference", "ort": "ONNX Runtime"}
print()
print("encoder benchmark, bert-base shapes (12 layers, H 768, FFN 3072), float32")
print("machine: %s (%s), %d online CPUs; %s threads per peer; %d round(s); load average at the end: %s" % (
    cpu, isa, os.cpu_count(), threads, int(rounds), open(os.path.join(out, "end.load")).read().split(None, 1)[1].strip()))
print("OpenBLAS core requested: %s" % (("OpenBLAS's own detection (OPENBLAS_CORETYPE unset%s)" % (
    ", environment had " + env_core if env_core else "")) if core == "auto" else "OPENBLAS_CORETYPE=" + core))
print()
print("%-18s %9s %8s %10s %8s %6s  %s" % ("peer", "1x128 ms", "GFLOP/s", "32x128 ms", "GFLOP/s", "load", "core actually used"))
for k in ("adapterd", "pytorch", "ort"):
    if k in res:
        p = res[k]
        print("%-18s %9.1f %8.1f %10.1f %8.1f %6s  %s" % (names[k], p["lat"], flops(1) / p["lat"] / 1e6, p["thr"],
                                                          flops(32) / p["thr"] / 1e6,
                                                          "/".join(l.split()[0] for l in p["load"]), p["core"]))
    else:
        why = "skipped (see the message above)" if k in peers.split(",") else "not selected (--peers)"
        print("%-18s %9s %8s %10s %8s %6s  %s" % (names[k], "-", "-", "-", "-", "-", why))
print("(medians; load = 1-minute load average when the peer started, per round; > 0.5 means others were running)")
if "adapterd" in res:
    ad = res["adapterd"]
    g32 = flops(32) / ad["thr"] / 1e6
    print()
    print("sgemm peak (2048x3072x768 through the engine's split, same run): %.1f GFLOP/s; adapterd 32x128 at %.0f%% of it"
          % (ad["peak"], 100 * g32 / ad["peak"]))
    if ad["isa_peak"]:
        print("FMA peak of adapterd's %s kernel's instruction on every thread (same run): %.1f GFLOP/s; adapterd 1x128 at "
              "%.0f%%, 32x128 at %.0f%% of it (target >= 80%% at 32x128)" % (ad["kernel"], ad["isa_peak"],
              100 * flops(1) / ad["lat"] / 1e6 / ad["isa_peak"], 100 * g32 / ad["isa_peak"]))
    for k, tgt in (("pytorch", "target >= 1.3x on both"), ("ort", "target >= 1.1x at 1x128, >= 1.2x at 32x128")):
        if k in res:
            print("adapterd vs %-18s 1x128 %.2fx faster, 32x128 %.2fx faster  (peer ms / adapterd ms; %s)" % (
                names[k] + ":", res[k]["lat"] / ad["lat"], res[k]["thr"] / ad["thr"], tgt))
if json_out:
    with open(json_out, "w") as f:
        json.dump({"cpu": cpu, "threads": int(threads), "core": core, "results": res}, f, indent=1)
EOF
