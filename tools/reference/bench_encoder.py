#!/usr/bin/python3
"""Time the PyTorch reference encoder: the PyTorch peer of adapterd's benchmarks.

    bench_encoder.py --arch bert --shape base --threads 2 [--model DIR] [--iters 20] [--warmup 3]

Runs the reference forward in float32 under torch.inference_mode() with torch.set_num_threads(N) (and OpenMP and
OpenBLAS limited to N threads too, set before torch loads), for two workloads: 1 sequence of --seq tokens (latency)
and --batch sequences of --seq tokens (throughput; equal lengths, so no padding is wasted).  Prints one JSON object
with the median and min milliseconds of each, the achieved GFLOP/s, and the OpenBLAS core and thread count torch's
BLAS actually runs with (OPENBLAS_CORETYPE is respected, never set here, so the caller chooses it for every peer).
"""

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="bert", choices=("bert", "roberta", "xlm-roberta", "distilbert"))
    ap.add_argument("--shape", default="base", choices=("tiny", "base", "custom"))
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--intermediate", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--model", help="time a saved model directory instead of random weights of --shape")
    ap.add_argument("--act", default="gelu")
    ap.add_argument("--threads", type=int, default=2, help="OpenBLAS threads (the GEMMs)")
    ap.add_argument("--torch-threads", type=int,
                    help="torch intra-op (OpenMP) threads for the non-GEMM ops; default = --threads")
    ap.add_argument("--omp-wait-policy", default="PASSIVE", choices=("PASSIVE", "ACTIVE", "inherit"),
                    help="OMP_WAIT_POLICY; PASSIVE (default) stops torch's idle OpenMP threads spinning against "
                         "OpenBLAS's own threads on the same cores, which otherwise costs 3-4x at 2 threads")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workloads", default="latency,batch", help="comma list of latency, batch")
    ap.add_argument("--quantize", default="none", choices=("none", "int8-dynamic"),
                    help="int8-dynamic: every Linear through torch.ao.quantization.quantize_dynamic (qint8 weights, "
                         "activations quantized per call: fbgemm's kernels); attention products, LayerNorm and softmax "
                         "stay float32, as adapterd's int8")
    return ap.parse_args(argv)


def openblas_info():
    """Core name and thread count of the OpenBLAS already loaded into this process (by torch), if any."""
    for name in ("libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return {"openblas_core": lib.openblas_get_corename().decode(), "openblas_threads":
                    lib.openblas_get_num_threads(), "openblas_lib": name}
        except (OSError, AttributeError):
            continue
    return {"openblas_core": None}


def flops(cfg, batch, seq):
    """Multiply-adds x 2 of one forward: the GEMMs plus the two attention products (embeddings/LN/softmax ignored)."""
    H, I, L = cfg.hidden, cfg.inter, cfg.layers
    per_layer = batch * seq * 2 * (4 * H * H + 2 * H * I) + batch * 2 * 2 * seq * seq * H
    pool = batch * 2 * H * H if cfg.arch in ("bert", "roberta", "xlm-roberta") else 0
    return L * per_layer + pool


def quantize_linears(torch, E, model):
    """Routes every 2-D weight of `model` (RefEncoder: the Linear layers and the pooler; not the embeddings)
    through an nn.Linear quantized by torch.ao.quantization.quantize_dynamic. The reference calls
    E.linear(x, w, b) with the module's own buffers, so the quantized layer is found by the weight's storage."""
    lin = torch.nn.ModuleDict()
    names = {}
    for k in model.keys:
        w = getattr(model, k.replace(".", "__"))
        if not k.endswith(".weight") or w.dim() != 2 or "embeddings" in k:
            continue
        bk = k[:-len("weight")] + "bias"
        m = torch.nn.Linear(w.shape[1], w.shape[0])
        m.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
        m.bias = torch.nn.Parameter(getattr(model, bk.replace(".", "__")).clone(), requires_grad=False)
        name = "l%d" % len(names)
        lin[name] = m
        names[w.data_ptr()] = name
    q = torch.ao.quantization.quantize_dynamic(lin, {torch.nn.Linear}, dtype=torch.qint8)
    table = {ptr: q[name] for ptr, name in names.items()}
    plain = E.linear

    def linear(x, w, b):
        m = table.get(w.data_ptr())
        return m(x) if m is not None else plain(x, w, b)

    E.linear = linear
    model.quantized = q  # kept alive with the model


def main(argv=None):
    a = parse(argv)
    tt_n = a.torch_threads or a.threads
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(tt_n)
    os.environ["MKL_NUM_THREADS"] = str(tt_n)
    if a.omp_wait_policy != "inherit":
        os.environ["OMP_WAIT_POLICY"] = a.omp_wait_policy
    import torch  # noqa: E402  (after the thread variables)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import encoder as E  # noqa: E402
    import st  # noqa: E402

    torch.set_num_threads(tt_n)
    if a.model:
        with open(os.path.join(a.model, "config.json")) as f:
            d = json.load(f)
        if d["model_type"] in ("electra", "deberta-v2"):   # deberta.py: the same API
            import deberta as E  # noqa: E402
        cfg = E.cfg_from_hf(d)
        W = E.canonical_weights(cfg, st.load_dir(a.model))
    else:
        d = E.shape_defaults(a.arch, "tiny" if a.shape == "custom" else a.shape)
        for k, v in (("hidden", a.hidden), ("layers", a.layers), ("heads", a.heads), ("inter", a.intermediate),
                     ("vocab", a.vocab)):
            if v is not None:
                d[k] = v
        cfg = E.make_cfg(a.arch, act=a.act, **d)
        W = E.init_tensors(E.param_shapes(cfg, pooler=a.arch != "distilbert"), torch.Generator().manual_seed(0))
    limit = cfg.max_pos - (cfg.pad_id + 1 if cfg.is_roberta else 0)
    if a.seq > limit:
        sys.exit(f"--seq {a.seq} exceeds the model's {limit} positions")
    model = E.RefEncoder(cfg, W, torch.float32).eval()
    if a.quantize == "int8-dynamic":
        quantize_linears(torch, E, model)
    low = 3 if cfg.vocab > 3 else 0
    g = torch.Generator().manual_seed(1)

    out = {"peer": "pytorch-reference", "torch": torch.__version__, "arch": cfg.arch, "hidden": cfg.hidden,
           "layers": cfg.layers, "heads": cfg.heads, "intermediate": cfg.inter, "threads": a.threads,
           "torch_threads": torch.get_num_threads(), "seq": a.seq,
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
           "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"), "quantize": a.quantize,
           "quantized_engine": torch.backends.quantized.engine}
    for wl in [w for w in a.workloads.split(",") if w]:
        b = 1 if wl == "latency" else a.batch
        ids = torch.randint(low, cfg.vocab, (b, a.seq), generator=g)
        mask = torch.ones_like(ids)
        tt = torch.zeros_like(ids)
        times = []
        with torch.inference_mode():
            for i in range(a.warmup + a.iters):
                t0 = time.perf_counter()
                model(ids, mask, tt)
                dt = (time.perf_counter() - t0) * 1e3
                if i >= a.warmup:
                    times.append(dt)
        med = statistics.median(times)
        key = "latency_1x%d" % a.seq if wl == "latency" else "batch_%dx%d" % (b, a.seq)
        out[key + "_ms"] = round(med, 3)
        out[key + "_min_ms"] = round(min(times), 3)
        out[key + "_gflops"] = round(flops(cfg, b, a.seq) / (med * 1e-3) / 1e9, 1)
        if wl == "batch":
            out[key + "_seq_per_s"] = round(b / (med * 1e-3), 1)
    out.update(openblas_info())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
