#!/usr/bin/python3
"""Times the float32 ModernBERT reference (the PyTorch peer of bench/modernbert): one sequence of each length.

    bench_modernbert.py --model DIR [--lens 512,8192] [--reps 3] [--threads 2] [--warmup 1]

torch.inference_mode, torch.set_num_threads, fused LayerNorm / GELU (as Hugging Face's modules call them), attention
one head at a time at long lengths (the whole [heads, L, L] score tensor of 8,192 tokens is 3.2 GB) with the window
as a mask, as Hugging Face's eager and SDPA paths compute it on CPU (no flash attention there).  Prints one JSON line
per length."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modernbert as M  # noqa: E402
import st  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--lens", default="512,8192")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = M.cfg_from_hf(json.load(f))
    W = M.canonical_weights(cfg, st.load_dir(a.model))
    for n in (int(x) for x in a.lens.split(",")):
        model = M.RefModernBert(cfg, W, torch.float32, fused=True, head_chunk=cfg.heads if n <= 1024 else 1)
        ids = torch.randint(0, min(cfg.vocab, 50000), (1, n), generator=torch.Generator().manual_seed(7))
        mask = torch.ones_like(ids)
        times = []
        with torch.inference_mode():
            for r in range(a.reps + a.warmup):
                t0 = time.perf_counter()
                model(ids, mask)
                if r >= a.warmup:
                    times.append((time.perf_counter() - t0) * 1000)
        med = statistics.median(times)
        print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "threads": a.threads, "tokens": n,
                          "median_ms": round(med, 1), "min_ms": round(min(times), 1),
                          "tokens_per_s": round(n / (med / 1000), 1)}), flush=True)


if __name__ == "__main__":
    main()
