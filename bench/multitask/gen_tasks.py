#!/usr/bin/python3
"""Write the tasks of bench/multitask and bench/fusion on a backbone, with the reference's own builders.

    gen_tasks.py --backbone DIR --out DIR [--tasks 16]

DIR/task00 .. task15: one Pfeiffer (seq_bn preset: output_adapter, reduction factor 16 -> d 48 at H 768, relu) adapter
each, saved with its 2-layer tanh classification head exactly as AdapterHub's save_adapter(with_head) writes it
(tools/reference/gen_adapters.py `single_bn`, case `seq_bn_st`, each task with its own seed and name).
DIR/fusion8: gen_adapters.py's `fusion_dynamic_n8` case (8 seq_bn adapters t0..t7, dynamic AdapterFusion with value
matrix, T = 1, a 3-label head saved on its own), files only.

No expected outputs are computed (float64 at base shapes would take minutes and the benchmarks compare speed; the
parity tests cover correctness); bench_multitask checks that the shared pass equals the separate runs instead.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))
import adapters as A  # noqa: E402
import encoder as E  # noqa: E402
import gen_adapters as G  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbone", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tasks", type=int, default=16)
    a = ap.parse_args(argv)
    with open(os.path.join(a.backbone, "config.json")) as f:
        cfg = E.cfg_from_hf(json.load(f))
    os.makedirs(a.out, exist_ok=True)
    for j in range(a.tasks):
        name = "task%02d" % j
        case = G.single_bn("seq_bn", "st", name, "bench task", head_kw=dict(layers=2))(cfg, A.Rng(1000 + j))
        for rel, fn in case.saves:
            fn(os.path.join(a.out, name))
    case = G.CASES["fusion_dynamic_n8"][0](cfg, A.Rng(G.case_seed("fusion_dynamic_n8", cfg.arch)))
    for rel, fn in case.saves:
        fn(os.path.join(a.out, "fusion8", rel))
    print(json.dumps({"tasks": a.tasks, "fusion": "fusion8", "out": a.out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
