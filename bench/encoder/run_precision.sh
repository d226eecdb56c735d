#!/usr/bin/env bash
# run_precision.sh - the whole encoder at bert-base shapes in fp32, bf16 and int8, next to PyTorch float32 and
# PyTorch int8 dynamic quantization, in one run, on the same threads.
#
#   bench/encoder/run_precision.sh [--build DIR] [--threads N] [--reps N] [--batch-reps N] [--rounds N]
#                                  [--cache DIR] [--precisions fp32,bf16,int8] [--cpu-level LEVEL]
#
# Peers, each on the same checkpoint (bench_backbone: bert-base shapes, reference seed 0):
#   adapterd fp32 / bf16 / int8   bench_encoder --precision P (the backbone's four Linear layers in P; attention,
#                                 LayerNorm, softmax stay float32)
#   PyTorch fp32                  tools/reference/bench_encoder.py (the reference module, torch's fused ops)
#   ONNX Runtime fp32             bench/peers/bench_ort.mjs (onnxruntime-node, CPU EP) on the checkpoint's ONNX export
#   PyTorch int8 dynamic          the same with every Linear through torch.ao.quantization.quantize_dynamic
#                                 (qint8 weights, activations quantized per call; the quantized engine is the
#                                 one torch reports, printed in the table)
#   ONNX Runtime int8 dynamic     bench_ort.mjs on the export rewritten into the graph ONNX Runtime's
#                                 quantize_dynamic makes (DynamicQuantizeLinear + MatMulInteger per Linear, uint8
#                                 activations, int8 weights per tensor: tools/reference/quantize_onnx_int8.py, with
#                                 Debian's python3-onnx), checked against the float32 export (cosine >= 0.99)
#                                 before it is timed; skipped with a message without python3-onnx or onnxruntime-node
# Workloads 1x128 (latency) and 32x128 (throughput), medians of --reps / --batch-reps runs after warm-up, then
# the median over --rounds. Each adapterd precision is also stated as a share of its own instruction peak
# (vfmadd231ps, vdpbf16ps, vpdpbusd on every thread: bench_isa_peak), measured by the same bench_encoder run. When $ADAPTERD_PAUSE_PIDFILE names a file holding the pid of a running process (a
# training job sharing the machine), that process is stopped (SIGSTOP) while each peer is timed and continued
# (SIGCONT) after, also on exit. --cpu-level LEVEL (default ADAPTERD_CPU_LEVEL, else native) caps adapterd's kernels,
# PyTorch's own and everybody's OpenBLAS core alike (bench/common/lib.sh, bench_set_level). The 1-minute load average is printed for each peer.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}

build="$root/build" threads=$(nproc) reps=20 batch_reps=5 rounds=1 precisions=fp32,bf16,int8
level=${ADAPTERD_CPU_LEVEL:-native}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/adapterd/bench"
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --batch-reps) batch_reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --cpu-level) level=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_precision.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
note() { echo "bench: $*" >&2; }
. "$root/bench/common/lib.sh"
bench_set_level "$level"
bench_set_core "${bench_level_core:-auto}" "$threads"
bin=$(bench_build "$build" bench_encoder)
bench_backbone "$cache" || exit 1
model="$cache/bert-base"

pause_pid=""
if [ -n "${ADAPTERD_PAUSE_PIDFILE:-}" ] && [ -s "$ADAPTERD_PAUSE_PIDFILE" ]; then
  pause_pid=$(cat "$ADAPTERD_PAUSE_PIDFILE")
  kill -0 "$pause_pid" 2>/dev/null || pause_pid=""
fi
pause() { if [ -n "$pause_pid" ]; then kill -STOP "$pause_pid" 2>/dev/null || true; sleep 2; fi; }
resume() { if [ -n "$pause_pid" ]; then kill -CONT "$pause_pid" 2>/dev/null || true; fi; }

out=$(mktemp -d)
trap 'resume; rm -rf "$out"' EXIT
loadavg() { cut -d' ' -f1 /proc/loadavg; }
have_torch=0
"$PY" -c 'import torch' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || note "skipping the PyTorch peers: $PY cannot import torch"
# ONNX Runtime float32 (bench/peers/bench_ort.mjs, npm onnxruntime-node, CPU EP), on the same checkpoint exported
# once to ONNX, as bench/encoder/run.sh runs it; skipped with a message when node or the package is missing.
onnx="$cache/bert-base.onnx" ort_ok=0 ort8_ok=0
bench_ort "$cache" && ort_ok=1
# ONNX Runtime's own int8 (the dynamic quantization graph), when int8 is measured and the float32 peer can run.
case ",$precisions," in
  *,int8,*)
    if [ $ort_ok = 1 ]; then bench_ort_int8 "$cache" && ort8_ok=1
    else note "skipping ONNX Runtime int8 too: it needs what the float32 peer needs"; fi ;;
esac

for r in $(seq 1 "$rounds"); do
  for p in ${precisions//,/ }; do
    pause
    echo "$(loadavg)" > "$out/adapterd-$p.$r.load"
    note "round $r: adapterd $p (load $(loadavg))"
    "$bin" --model "$model" --threads "$threads" --reps "$reps" --batch-reps "$batch_reps" --precision "$p" --json \
      > "$out/adapterd-$p.$r.json" || { note "adapterd $p failed"; rm -f "$out/adapterd-$p.$r.json"; }
    resume
  done
  if [ $have_torch = 1 ]; then
    for q in none int8-dynamic; do
      pause
      echo "$(loadavg)" > "$out/pytorch-$q.$r.load"
      note "round $r: PyTorch $q (load $(loadavg))"
      "$PY" "$root/tools/reference/bench_encoder.py" --model "$model" --threads "$threads" --omp-wait-policy PASSIVE \
        --quantize "$q" --workloads latency --iters "$reps" --warmup 2 > "$out/pytorch-$q.$r.lat.json" \
        && "$PY" "$root/tools/reference/bench_encoder.py" --model "$model" --threads "$threads" \
        --omp-wait-policy PASSIVE --quantize "$q" --workloads batch --iters "$batch_reps" --warmup 1 \
        > "$out/pytorch-$q.$r.batch.json" || { note "PyTorch $q failed"; rm -f "$out"/pytorch-$q.$r.*.json; }
      resume
    done
  fi
  if [ $ort_ok = 1 ]; then
    pause
    echo "$(loadavg)" > "$out/ort.$r.load"
    note "round $r: ONNX Runtime fp32 (load $(loadavg))"
    (cd "$root/bench/peers" && node bench_ort.mjs --model "$onnx" --threads "$threads" --iters "$reps" \
      --batch-iters "$batch_reps" --warmup 2) > "$out/ort.$r.json" || { note "ONNX Runtime failed"; rm -f "$out/ort.$r.json"; }
    resume
  fi
  if [ $ort8_ok = 1 ]; then
    pause
    echo "$(loadavg)" > "$out/ort8.$r.load"
    note "round $r: ONNX Runtime int8 dynamic (load $(loadavg))"
    (cd "$root/bench/peers" && node bench_ort.mjs --model "$cache/bert-base-int8.onnx" --check "$onnx" \
      --threads "$threads" --iters "$reps" --batch-iters "$batch_reps" --warmup 2) > "$out/ort8.$r.json" \
      || { note "ONNX Runtime int8 failed (or disagreed with float32: $(cat "$out/ort8.$r.json"))"; rm -f "$out/ort8.$r.json"; }
    resume
  fi
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
python3 - "$out" "$threads" "$cpu" "$precisions" "${pause_pid:-none}" <<'EOF'
import glob, json, os, statistics, sys
out, threads, cpu, precisions, paused = sys.argv[1:6]
H, I, L = 768, 3072, 12
def flops(b, s=128):
    return L * (2.0 * b * s * (4 * H * H + 2 * H * I) + 4.0 * b * s * s * H)
def rows(pat):
    r = []
    for f in sorted(glob.glob(os.path.join(out, pat))):
        with open(f) as fh:
            r.append(json.loads(fh.read().strip().splitlines()[-1]))
    return r
def loads(pat):
    return "/".join(open(f).read().strip() for f in sorted(glob.glob(os.path.join(out, pat))))
res = []
for p in precisions.split(","):
    a = rows("adapterd-%s.*.json" % p)
    if a:
        lat = statistics.median(x["latency_1x128_ms"] for x in a)
        thr = statistics.median(x["batch_32x128_ms"] for x in a)
        pk = [x["precision_peak_gops"] for x in a if x.get("precision_peak_gops")]
        own = ""
        if pk:
            pk = statistics.median(pk)
            own = ", %s peak %.0f G/s: %.0f%% / %.0f%% of it" % (p, pk, 100 * flops(1) / lat / 1e6 / pk,
                                                                 100 * flops(32) / thr / 1e6 / pk)
        res.append(("adapterd " + p, lat, thr, loads("adapterd-%s.*.load" % p),
                    "%s kernel, OpenBLAS %s, fp32 sgemm peak %.0f GFLOP/s%s" % (
                        a[0]["kernel"], a[0]["blas_core"], statistics.median(x["sgemm_peak_gflops"] for x in a), own)))
for q, name in (("none", "PyTorch fp32"), ("int8-dynamic", "PyTorch int8 dyn")):
    l, b = rows("pytorch-%s.*.lat.json" % q), rows("pytorch-%s.*.batch.json" % q)
    if l and b:
        res.append((name, statistics.median(x["latency_1x128_ms"] for x in l),
                    statistics.median(x["batch_32x128_ms"] for x in b), loads("pytorch-%s.*.load" % q),
                    "torch %s, OpenBLAS %s%s" % (l[0]["torch"], l[0].get("openblas_core"),
                                                  ", quantized engine " + l[0]["quantized_engine"] if q != "none" else "")))
o = rows("ort.*.json")
if o:
    res.append(("ONNX Runtime fp32", statistics.median(x["latency_1x128_ms"] for x in o),
                statistics.median(x["batch_32x128_ms"] for x in o), loads("ort.*.load"),
                "onnxruntime-node %s, CPU execution provider, graph optimization all" % o[0].get("ort")))
o = rows("ort8.*.json")
if o:
    res.append(("ONNX Runtime int8", statistics.median(x["latency_1x128_ms"] for x in o),
                statistics.median(x["batch_32x128_ms"] for x in o), loads("ort8.*.load"),
                "onnxruntime-node %s, dynamic int8 (DynamicQuantizeLinear + MatMulInteger: uint8 x int8 per tensor), "
                "cosine to its fp32 %.4f" % (o[0].get("ort"), min(x["check"]["cosine"] for x in o))))
print()
print("encoder by precision, bert-base shapes (12 layers, H 768, FFN 3072), 1x128 and 32x128 tokens")
print("machine: %s, %d online CPUs; %s threads per peer; paused during timing: %s" % (cpu, os.cpu_count(), threads, paused))
print()
print("%-18s %9s %8s %10s %8s %6s  %s" % ("peer", "1x128 ms", "GFLOP/s", "32x128 ms", "GFLOP/s", "load", "notes"))
for n, lat, thr, ld, notes in res:
    print("%-18s %9.1f %8.1f %10.1f %8.1f %6s  %s" % (n, lat, flops(1) / lat / 1e6, thr, flops(32) / thr / 1e6, ld, notes))
print("(medians; load = 1-minute load average when the peer started)")
d = {n: (lat, thr) for n, lat, thr, _, _ in res}
print()
for base in ("adapterd fp32", "PyTorch fp32", "PyTorch int8 dyn", "ONNX Runtime fp32", "ONNX Runtime int8"):
    if base not in d:
        continue
    for n in ("adapterd bf16", "adapterd int8") if base != "ONNX Runtime int8" else ("adapterd int8",):
        if n in d:
            print("%-14s vs %-17s 1x128 %.2fx, 32x128 %.2fx  (peer ms / adapterd ms)" % (
                n, base + ":", d[base][0] / d[n][0], d[base][1] / d[n][1]))
if "adapterd int8" in d and "ONNX Runtime int8" in d:
    r = [d["ONNX Runtime int8"][i] / d["adapterd int8"][i] for i in (0, 1)]
    print("issue 41 target, adapterd int8 >= 1.3x ONNX Runtime int8 at both shapes: %s (%.2fx / %.2fx)" % (
        "met" if min(r) >= 1.3 else "not met", r[0], r[1]))
EOF
