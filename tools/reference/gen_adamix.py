#!/usr/bin/python3
"""Turn a saved bottleneck adapter case into an AdaMix case: M experts per projection whose average is the original.

    gen_adamix.py --src tests/fixtures/adapters/bert-tiny/seq_bn_st --out tests/fixtures/adapters/bert-tiny/adamix_seq_bn -m 4

AdaMix (Wang et al., 2022) trains a mixture of M adapters per layer and, at inference, averages their weights into one
adapter.  Its code keeps the experts of each projection in a `MixtureSoup` module (`deepspeed_experts.<m>`); adapterd
reads them in AdapterHub's layout as

    <...>.adapters.<name>.adapter_down.0.deepspeed_experts.<m>.{weight,bias}
    <...>.adapters.<name>.adapter_up.deepspeed_experts.<m>.{weight,bias}

and merges them at load.  Expert m is the original tensor plus a deterministic perturbation d_m with sum_m d_m = 0, so
the merged adapter equals the source adapter exactly (up to float rounding) and the source case's expected outputs
apply unchanged; a loader that picked one expert instead of the average would be off by |d_m| (order 0.5 * |w|).
"""
import argparse
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("-m", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    shutil.copytree(a.src, a.out)
    setup = json.load(open(os.path.join(a.out, "setup.json")))
    g = torch.Generator().manual_seed(a.seed)
    for rel in setup["adapters"]:
        d = os.path.join(a.out, rel)
        path = os.path.join(d, "adapter.safetensors")
        sd, _meta = st.load_file(path)
        out = {}
        for k, v in sd.items():
            base = None
            for p in ("adapter_down.0.", "adapter_up."):
                i = k.find(p)
                if i >= 0 and k[i + len(p):] in ("weight", "bias"):
                    base = (k[:i + len(p)], k[i + len(p):])
            if base is None:
                out[k] = v
                continue
            deltas = [torch.randn(v.shape, generator=g, dtype=torch.float64) * 0.5 * float(v.abs().mean()) for _ in range(a.m)]
            mean = sum(deltas) / a.m
            for m in range(a.m):
                out[f"{base[0]}deepspeed_experts.{m}.{base[1]}"] = (v.double() + deltas[m] - mean).float()
        st.save_file(out, path)
        cfg = json.load(open(os.path.join(d, "adapter_config.json")))
        cfg["config"]["adamix"] = {"num_experts": a.m, "merge": "average"}
        json.dump(cfg, open(os.path.join(d, "adapter_config.json"), "w"), indent=2, sort_keys=True)
    setup["notes"] = f"AdaMix: {a.m} experts per projection averaging to {os.path.basename(a.src)}'s weights; same expected outputs."
    json.dump(setup, open(os.path.join(a.out, "setup.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
