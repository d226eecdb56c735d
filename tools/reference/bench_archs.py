#!/usr/bin/python3
"""Times the float32 reference of one encoder checkpoint (the PyTorch peer of bench/archs): BERT, RoBERTa, XLM-R,
DistilBERT (encoder.py) or ELECTRA, DeBERTa-v2/v3 (deberta.py), chosen by config.json's model_type.

    bench_archs.py --model DIR [--batches 1,8] [--seq 128] [--reps 5] [--threads 2] [--warmup 1]

torch.inference_mode, torch.set_num_threads, fused LayerNorm / GELU (as Hugging Face's modules call them), weights
cast to float32 once before timing, --batch sequences of --seq tokens (equal lengths, all-ones mask), random ids
in [0, min(vocab, 50000)) as bench_modernbert draws them.  Prints one JSON line per batch size."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deberta as X  # noqa: E402
import encoder as E  # noqa: E402
import st  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.model, "config.json")) as f:
        hf = json.load(f)
    M = X if hf["model_type"] in X.ARCHS else E
    cfg = M.cfg_from_hf(hf)
    W = {k: v.to(torch.float32).contiguous() for k, v in M.canonical_weights(cfg, st.load_dir(a.model)).items()}
    for b in (int(x) for x in a.batches.split(",")):
        ids = torch.randint(0, min(cfg.vocab, 50000), (b, a.seq), generator=torch.Generator().manual_seed(7))
        mask = torch.ones_like(ids)
        types = torch.zeros_like(ids)
        times = []
        with torch.inference_mode():
            for r in range(a.reps + a.warmup):
                t0 = time.perf_counter()
                M.forward(cfg, W, ids, mask, types, torch.float32, fused=True)
                if r >= a.warmup:
                    times.append((time.perf_counter() - t0) * 1000)
        med = statistics.median(times)
        print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "arch": cfg.arch, "threads": a.threads,
                          "batch": b, "tokens": a.seq, "median_ms": round(med, 1), "min_ms": round(min(times), 1),
                          "tokens_per_s": round(b * a.seq / (med / 1000), 1)}), flush=True)


if __name__ == "__main__":
    main()
