"""Copy the example registry's subset out of a registry assembled by registry.py (training tooling).

    example.py --registry WORK/registry --out examples/registry [--max-bytes 30000000]

The example serves the model, the four README tasks (sentiment, topic, question, emotion) and the SST-2 fusion
pruned to 2 adapters (`sentiment-fusion-k2`, shipped as `sentiment-fusion`).  OUT/models and OUT/tasks are
replaced; everything else in OUT (its README) is left alone.  Fails when the result is larger than --max-bytes
(the repository keeps the example under 30 MB).
"""

import argparse
import os
import shutil
import sys

TASKS = ("sentiment", "topic", "question", "emotion")
FUSION = "sentiment-fusion-k2"


def tree_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", required=True, help="a registry written by registry.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-bytes", type=int, default=30_000_000)
    args = ap.parse_args()
    src_tasks = os.path.join(args.registry, "tasks")
    need = [os.path.join(args.registry, "models")] + [os.path.join(src_tasks, t) for t in TASKS + (FUSION,)]
    missing = [p for p in need if not os.path.isdir(p)]
    if missing:
        sys.exit(f"example.py: not in the registry: {', '.join(missing)}")
    for sub in ("models", "tasks"):
        shutil.rmtree(os.path.join(args.out, sub), ignore_errors=True)
    shutil.copytree(os.path.join(args.registry, "models"), os.path.join(args.out, "models"))
    for t in TASKS:
        shutil.copytree(os.path.join(src_tasks, t), os.path.join(args.out, "tasks", t))
    shutil.copytree(os.path.join(src_tasks, FUSION), os.path.join(args.out, "tasks", "sentiment-fusion"))
    n = tree_bytes(args.out)
    print(f"example.py: {args.out}: {n} bytes ({n / 1e6:.1f} MB)")
    if n > args.max_bytes:
        sys.exit(f"example.py: {n} bytes is over the limit of {args.max_bytes}")


if __name__ == "__main__":
    main()
