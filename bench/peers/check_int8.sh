#!/bin/sh
# check_int8.sh - ONNX Runtime's int8 peer is the graph it claims and agrees with float32 (ctest bench_ort_int8).
#
#   bench/peers/check_int8.sh
#
# On a tiny random BERT (tools/reference/export_onnx.py --shape tiny): quantize_onnx_int8.py must rewrite every
# Linear (2 layers x 6) into DynamicQuantizeLinear + MatMulInteger and leave no float MatMul on a weight; ONNX
# Runtime (bench_ort.mjs --check) must run it and agree with the float32 export (cosine >= 0.99); and the check
# must refuse (exit 3) the int8 graph of other weights (seed 1) against seed 0's float32: the gate that
# run_precision.sh relies on can fail. Skips (77) without python3-onnx, torch, node or onnxruntime-node.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=${ADAPTERD_PYTHON:-/usr/bin/python3}
"$PY" -c 'import onnx, torch' 2>/dev/null || { echo "check_int8: skipped: $PY lacks onnx or torch"; exit 77; }
command -v node >/dev/null || { echo "check_int8: skipped: no node"; exit 77; }
(cd "$here" && node -e "require.resolve('onnxruntime-node')" 2>/dev/null) \
    || { echo "check_int8: skipped: onnxruntime-node missing (cd bench/peers && npm ci)"; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
R=$root/tools/reference
"$PY" "$R/export_onnx.py" --arch bert --shape tiny --seed 0 --out "$t/fp32.onnx" >/dev/null
"$PY" "$R/export_onnx.py" --arch bert --shape tiny --seed 1 --out "$t/other.onnx" >/dev/null
"$PY" "$R/quantize_onnx_int8.py" --in "$t/fp32.onnx" --out "$t/int8.onnx"
"$PY" "$R/quantize_onnx_int8.py" --in "$t/other.onnx" --out "$t/other-int8.onnx" >/dev/null
"$PY" - "$t/int8.onnx" <<'PYEOF'
import collections, sys
import onnx
g = onnx.load(sys.argv[1]).graph
ops = collections.Counter(n.op_type for n in g.node)
inits = {t.name for t in g.initializer}
left = [n.name for n in g.node if n.op_type == "MatMul" and n.input[1] in inits]
assert ops["MatMulInteger"] == 12, ops
assert ops["DynamicQuantizeLinear"] == 8, ops  # per layer: Q/K/V's input, attention output, FFN up, FFN down
assert not left, "float MatMuls on weights left: %s" % left
w = [t for t in g.initializer if t.name.endswith("_quantized")]
assert len(w) == 12 and all(t.data_type == onnx.TensorProto.INT8 for t in w)
print("check_int8: graph: %d MatMulInteger, %d DynamicQuantizeLinear, int8 weights" %
      (ops["MatMulInteger"], ops["DynamicQuantizeLinear"]))
PYEOF
run() { (cd "$here" && node bench_ort.mjs --model "$1" --check "$2" --seq 16 --vocab 1024 --threads 1 --workloads none); }
run "$t/int8.onnx" "$t/fp32.onnx"
rc=0
run "$t/other-int8.onnx" "$t/fp32.onnx" 2>/dev/null || rc=$?
[ "$rc" = 3 ] || { echo "check_int8: FAIL: other weights' int8 graph accepted (exit $rc), want 3"; exit 1; }
echo "check_int8: other weights' int8 graph refused (exit 3)"
