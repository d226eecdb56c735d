#!/usr/bin/python3
"""Export the reference encoder (float32) to ONNX, for the ONNX Runtime peer of the benchmarks.

    export_onnx.py --model DIR --out model.onnx            # a saved checkpoint (e.g. from gen_encoder.py)
    export_onnx.py --arch bert --shape base --out bert.onnx   # random weights of a standard shape

Inputs input_ids, attention_mask, token_type_ids: int64 [batch, seq] (dynamic axes); outputs last_hidden_state
float32 [batch, seq, H] and pooler_output [batch, H] when the model has a pooler.  Opset 14.  torch 1.13 serializes
ONNX itself, so no `onnx` python package is needed.  The graph uses torch's fused LayerNorm/GELU (decomposed by the
exporter at opset 14; ONNX Runtime fuses them back), the same function the oracle computes (see selftest.py).
DistilBERT ignores token_type_ids but keeps the input so every model has the same signature.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import encoder as E  # noqa: E402
import st  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model directory (config.json + safetensors)")
    ap.add_argument("--arch", default="bert", choices=E.ARCHS)
    ap.add_argument("--shape", default="base", choices=("tiny", "base"))
    ap.add_argument("--act", default="gelu", choices=E.ACTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    if a.model:
        with open(os.path.join(a.model, "config.json")) as f:
            cfg = E.cfg_from_hf(json.load(f))
        W = E.canonical_weights(cfg, st.load_dir(a.model))
    else:
        cfg = E.make_cfg(a.arch, act=a.act, **E.shape_defaults(a.arch, a.shape))
        W = E.init_tensors(E.param_shapes(cfg, pooler=a.arch != "distilbert"), torch.Generator().manual_seed(a.seed))
    model = E.RefEncoder(cfg, {k: v.float() for k, v in W.items()}, torch.float32).eval()
    T = min(16, cfg.max_pos - 2)
    ids = torch.randint(3, cfg.vocab, (2, T), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, T // 2:] = 0
    tt = torch.zeros_like(ids)
    outs = ["last_hidden_state"] + (["pooler_output"] if "pooler.dense.weight" in W else [])
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "token_type_ids": {0: "batch", 1: "seq"}, "last_hidden_state": {0: "batch", 1: "seq"}}
    if len(outs) > 1:
        axes["pooler_output"] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask, tt), a.out, input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=outs, dynamic_axes=axes, opset_version=a.opset, do_constant_folding=True)
    print(json.dumps({"out": a.out, "bytes": os.path.getsize(a.out), "arch": cfg.arch, "hidden": cfg.hidden,
                      "layers": cfg.layers, "opset": a.opset, "outputs": outs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
