#!/usr/bin/python3
"""Rewrite a float32 ONNX encoder into ONNX Runtime's dynamic int8 graph, for the int8 peer of the benchmarks.

    quantize_onnx_int8.py --in bert-base.onnx --out bert-base-int8.onnx [--per-channel]

The graph that onnxruntime.quantization.quantize_dynamic makes with its defaults, built with the `onnx` package
(Debian's python3-onnx) because ONNX Runtime's Python package, which holds that tool, is not in Debian (and the
npm build has no Python side). Every Linear of the export -- a MatMul whose second input is a 2-D float
initializer, followed by the Add of its bias -- becomes

    x -> DynamicQuantizeLinear -> (x_q uint8, x_scale, x_zp)        once per activation tensor (Q, K, V share one)
    MatMulInteger(x_q, W_q int8, x_zp, W_zp) -> int32 -> Cast(float) -> Mul(x_scale * W_scale) -> Add(bias)

with quantize_dynamic's defaults: uint8 activations quantized per call over the whole tensor (asymmetric, 0
exact), int8 weights per tensor and symmetric (scale max|W| / 127, zero point 0; --per-channel: one scale per
output column, as its per_channel=True). The MatMuls between activations (attention's QK^T and PV) stay float32
as they do there, and so does the pooler's Gemm (not in quantize_dynamic's default operator list). ONNX Runtime's
graph optimizer then fuses each chain into its DynamicQuantizeMatMul / MatMulIntegerToFloat kernels, as it does
for a model from quantize_dynamic. Prints one JSON line: the Linears rewritten, their shapes, the output size.
"""

import argparse
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def quantize_weight(w, per_channel):
    """int8 weights, symmetric: scale = max|W| / 127 (per tensor, or per output column), zero point 0."""
    absmax = np.abs(w).max(axis=0) if per_channel else np.abs(w).max()
    scale = np.maximum(absmax, 1e-12).astype(np.float32) / np.float32(127.0)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    zp = np.zeros_like(scale, dtype=np.int8)
    return q, scale.astype(np.float32), zp


def rewrite(model, per_channel):
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    uses = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1

    def is_linear(n):
        if n.op_type != "MatMul" or n.input[1] not in inits or n.input[0] in inits:
            return False
        t = inits[n.input[1]]
        return len(t.dims) == 2 and t.data_type == TensorProto.FLOAT

    quantized = {}  # activation name -> (x_q, x_scale, x_zp): one DynamicQuantizeLinear per tensor
    nodes, new_inits, dropped, shapes = [], [], set(), []
    for n in g.node:
        if not is_linear(n):
            nodes.append(n)
            continue
        x, wname, y = n.input[0], n.input[1], n.output[0]
        base = n.name.strip("/").replace("/", "_") or y
        if x not in quantized:
            q = (x + "_quantized", x + "_scale", x + "_zero_point")
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], list(q), name=x + "_QuantizeLinear"))
            quantized[x] = q
        xq, xs, xz = quantized[x]
        w = numpy_helper.to_array(inits[wname]).astype(np.float32)
        wq, ws, wz = quantize_weight(w, per_channel)
        shapes.append(list(w.shape))
        new_inits += [numpy_helper.from_array(wq, wname + "_quantized"),
                      numpy_helper.from_array(ws, wname + "_scale"),
                      numpy_helper.from_array(wz, wname + "_zero_point")]
        uses[wname] -= 1
        if uses[wname] == 0:
            dropped.add(wname)
        nodes += [
            helper.make_node("MatMulInteger", [xq, wname + "_quantized", xz, wname + "_zero_point"],
                             [y + "_int32"], name=base + "_quant"),
            helper.make_node("Cast", [y + "_int32"], [y + "_cast"], to=TensorProto.FLOAT,
                             name=base + "_quant_cast"),
            helper.make_node("Mul", [xs, wname + "_scale"], [y + "_scales"], name=base + "_quant_scales_mul"),
            helper.make_node("Mul", [y + "_cast", y + "_scales"], [y], name=base + "_quant_output_scale_mul"),
        ]
    if not shapes:
        raise SystemExit("quantize_onnx_int8: no MatMul with a 2-D float initializer: nothing to quantize")
    del g.node[:]
    g.node.extend(nodes)
    keep = [t for t in g.initializer if t.name not in dropped]
    del g.initializer[:]
    g.initializer.extend(keep + new_inits)
    # MatMulInteger needs opset 10 and DynamicQuantizeLinear 11: the export's 14 has both.
    return shapes, len(quantized)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="src", required=True, help="float32 ONNX model (tools/reference/export_onnx.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--per-channel", action="store_true", help="one weight scale per output column")
    a = ap.parse_args(argv)
    model = onnx.load(a.src)
    if max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 11:
        raise SystemExit("quantize_onnx_int8: opset 11 or later needed (DynamicQuantizeLinear)")
    shapes, acts = rewrite(model, a.per_channel)
    onnx.checker.check_model(model)
    onnx.save(model, a.out)
    print(json.dumps({"out": a.out, "bytes": os.path.getsize(a.out), "linears": len(shapes), "activations": acts,
                      "weights": "int8 symmetric " + ("per channel" if a.per_channel else "per tensor"),
                      "activations_type": "uint8 dynamic (DynamicQuantizeLinear)",
                      "shapes": sorted({"x".join(map(str, s)) for s in shapes})}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
