#!/usr/bin/env python3
"""The PyTorch side of `adapterd sparsify` (test reference only, never the product).

    sparsify_ref.py --adapter DIR --density D --out DIR [--check-copy DIR]

Prunes the AdapterHub bottleneck adapter saved in --adapter the way engine/sparsify.h defines it, written here
from that definition alone: in every 2-D float tensor named `...adapter_down.<i>.weight` or `...adapter_up.weight`
keep the floor(D * numel + 0.5) entries of largest magnitude (at least one; ties to the lower flat index, by a
stable descending sort) and zero the rest; every other tensor unchanged.  Writes the pruned, still dense, adapter
to --out (adapter.safetensors via st.py plus the folder's other files), which gen_adapters.py --load turns into
expected outputs.

With --check-copy, reads the copy adapterd wrote with st.py's own reader (its header and layout validation) and
requires the same tensor names, dtypes, shapes and bit-identical values as the PyTorch pruning, the other files
byte-identical, and a "sparsify_density" metadata entry; exits 1 naming the first difference.  Prints one JSON line.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

WEIGHT_FILES = ("adapter.safetensors", "pytorch_adapter.bin")
PROJ = re.compile(r"(adapter_down\.\d+\.weight|adapter_up\.weight)$")
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def read_adapter(folder):
    for fn in WEIGHT_FILES:
        p = os.path.join(folder, fn)
        if os.path.exists(p):
            if fn.endswith(".safetensors"):
                return dict(st.load_file(p)[0]), fn
            return dict(torch.load(p, map_location="cpu")), fn
    raise FileNotFoundError(f"{folder}: none of {WEIGHT_FILES}")


def prune(t, density):
    """t with all but its k largest-magnitude entries set to zero (k = floor(density * numel + 0.5), >= 1)."""
    n = t.numel()
    k = min(n, max(1, int(math.floor(density * n + 0.5))))
    flat = t.reshape(-1)
    order = torch.sort(flat.to(torch.float32).abs(), descending=True, stable=True).indices
    keep = torch.zeros(n, dtype=torch.bool)
    keep[order[:k]] = True
    return torch.where(keep, flat, torch.zeros_like(flat)).reshape(t.shape), k


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--density", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--check-copy")
    a = ap.parse_args(argv)
    sd, wfile = read_adapter(a.adapter)
    pruned, rep = {}, {"matrices": 0, "weights": 0, "kept": 0}
    for name, t in sd.items():
        t = t.detach().contiguous()
        if t.dim() == 2 and t.dtype in FLOATS and PROJ.search(name):
            t, k = prune(t, a.density)
            rep["matrices"] += 1
            rep["weights"] += t.numel()
            rep["kept"] += k
        pruned[name] = t
    if rep["matrices"] == 0:
        sys.exit(f"{a.adapter}: no adapter_down / adapter_up weight")
    os.makedirs(a.out, exist_ok=True)
    st.save_file(pruned, os.path.join(a.out, "adapter.safetensors"), {"format": "pt"})
    others = sorted(f for f in os.listdir(a.adapter)
                    if f not in WEIGHT_FILES and not f.startswith(".") and os.path.isfile(os.path.join(a.adapter, f)))
    for f in others:
        shutil.copyfile(os.path.join(a.adapter, f), os.path.join(a.out, f))
    rep["source"] = wfile
    if a.check_copy:
        got, meta = st.load_file(os.path.join(a.check_copy, "adapter.safetensors"))
        if set(got) != set(pruned):
            sys.exit(f"copy: tensors {sorted(set(got) ^ set(pruned))} differ in presence")
        for name, want in pruned.items():
            g = got[name]
            if g.dtype != want.dtype or tuple(g.shape) != tuple(want.shape):
                sys.exit(f"copy: {name}: {g.dtype} {tuple(g.shape)}, expected {want.dtype} {tuple(want.shape)}")
            if not torch.equal(g, want):
                bad = int((g != want).sum())
                sys.exit(f"copy: {name}: {bad} values differ from the PyTorch pruning")
        if not meta or float(meta.get("sparsify_density", "nan")) != a.density:
            sys.exit(f"copy: metadata {meta} lacks sparsify_density {a.density}")
        copied = sorted(f for f in os.listdir(a.check_copy) if f != "adapter.safetensors")
        if copied != others:
            sys.exit(f"copy: files {copied}, expected {others}")
        for f in others:
            with open(os.path.join(a.adapter, f), "rb") as x, open(os.path.join(a.check_copy, f), "rb") as y:
                if x.read() != y.read():
                    sys.exit(f"copy: {f} differs from the original")
        rep["checked"] = a.check_copy
    print(json.dumps(rep))


if __name__ == "__main__":
    main()
