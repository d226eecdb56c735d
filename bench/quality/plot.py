#!/usr/bin/python3
"""Plots of the quality results (Debian's python3-matplotlib):

    bench/quality/plot.py --quality bench/quality/results.json --results REGISTRY/results.json \
                          [--curve WORK/pretrain/curve.csv] --out docs

- quality_skip.png: accuracy (entity F1 for the tagger) vs AdapterDrop skip for each task measured through the server, with the control
  adapter (trained without AdapterDrop, PyTorch evaluation on the same held-out split) dashed;
- quality_latency.png: each task's accuracy per skip against the speed-up of one request asking all the main tasks
  at that skip over skip 0 (AdapterDrop's shared layers; from the plan's GFLOP, default, or the median engine time,
  --x ms, of a quiet run given by --multitask): the shape of the AdapterDrop paper's Figure 2. Without multi-task
  figures, accuracy against one task's own GFLOP or time per skip;
- pretrain_curve.png: MLM validation loss vs pretraining tokens, with (--adapter-curve [LABEL=]PATH, repeatable:
  tools/train/curve.sh's curve.tsv per recipe) the SST-2 dev accuracy of an adapter trained on each encoder
  snapshot.
"""

import argparse
import csv
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

MAIN = ["sentiment", "topic", "question", "emotion", "entities"]


def score(v):
    """The task's figure: entity F1 for the tagger, accuracy for the others (%)."""
    return 100 * v.get("entity_f1", v["accuracy"])


def label(name):
    return f"{name} (entity F1)" if name == "entities" else name


def plot_skips(ax, name, t, sk, xs):
    """One task's line: its score at each skip of `sk` against `xs`, each point labelled with its skip."""
    ys = [score(t["skips"][str(s)]) for s in sk]
    ax.plot(xs, ys, marker="o", label=label(name))
    for s, x, y in zip(sk, xs, ys):
        ax.annotate(str(s), (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quality", required=True)
    ap.add_argument("--results", default=None, help="registry results.json (tools/train/registry.py)")
    ap.add_argument("--curve", default=None)
    ap.add_argument("--adapter-curve", action="append", default=[],
                    help="[LABEL=]WORK/curve/curve.tsv (tools/train/curve.sh); repeat for several recipes")
    ap.add_argument("--multitask", default=None,
                    help="results file whose multi-task timing quality_latency.png uses (default: --quality's)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--x", choices=("gflop", "ms"), default="gflop",
                    help="second plot's x axis: the plan's GFLOP (stable) or the median engine ms (needs a quiet CPU)")
    args = ap.parse_args()
    q = json.load(open(args.quality))
    res = json.load(open(args.results)) if args.results else {}
    os.makedirs(args.out, exist_ok=True)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in MAIN:
        t = q["tasks"].get(name)
        if not t:
            continue
        sk = sorted(int(s) for s in t["skips"])
        line, = ax.plot(sk, [score(t["skips"][str(s)]) for s in sk], marker="o", label=f"{label(name)} (robust)")
        # skips its task.json does not allow: the trained task's PyTorch figures, hollow, dotted
        tr = next((r for r in res.values() if r.get("public_name") == name), None)
        more = sorted(int(s) for s in tr["skips"] if int(s) > sk[-1]) if tr else []
        if more:
            ax.plot([sk[-1]] + more, [score(t["skips"][str(sk[-1])])] + [score(tr["skips"][str(s)]) for s in more],
                    marker="o", markerfacecolor="white", linestyle=":", color=line.get_color(),
                    label=f"{label(name)}, beyond its task.json range (PyTorch)")
    ctl = res.get("sst2-control")
    if ctl:
        sk = sorted(int(s) for s in ctl["skips"])
        ax.plot(sk, [100 * ctl["skips"][str(s)]["accuracy"] for s in sk], marker="x", linestyle="--",
                color="C0", label="sentiment control (no AdapterDrop; PyTorch)")
    ax.set_xlabel("AdapterDrop skip (layers without adapters)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("held-out accuracy / entity F1 (%)")
    ax.set_title("Accuracy vs skip, 6-layer encoder")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "quality_skip.png"), dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    key = "gflop_1_input" if args.x == "gflop" else "median_ms_1_input"
    mt = (json.load(open(args.multitask)) if args.multitask else q).get("multitask")
    if mt:
        # AdapterDrop's trade-off: each task's accuracy at skip s against the speed-up of one request asking all
        # the tasks at skip s over the same request at skip 0 (the shape of the AdapterDrop paper's Figure 2)
        base = mt["skips"]["0"][key]
        for name in mt["tasks"]:
            t = q["tasks"].get(name)
            sk = [s for s in sorted(int(s) for s in mt["skips"]) if t and str(s) in t["skips"]]
            plot_skips(ax, name, t, sk, [base / mt["skips"][str(s)][key] for s in sk])
        what = "plan GFLOP" if args.x == "gflop" else "median engine time"
        ax.set_xlabel(f"speed-up of one request asking all {len(mt['tasks'])} tasks, over skip 0 ({what})")
        ax.set_title("Accuracy vs shared layers (labels: skip)")
    else:
        for name in MAIN:
            t = q["tasks"].get(name)
            if not t:
                continue
            sk = sorted(int(s) for s in t["skips"])
            plot_skips(ax, name, t, sk, [t["skips"][str(s)][key] for s in sk])
        ax.set_xlabel("GFLOP of one median-length input (plan)" if args.x == "gflop"
                      else "median engine time, one input (ms)")
        ax.set_title("Accuracy vs work (labels: skip)" if args.x == "gflop" else "Accuracy vs latency (labels: skip)")
    ax.set_ylabel("held-out accuracy / entity F1 (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "quality_latency.png"), dpi=110)

    if args.curve:
        tok, vl = [], []
        with open(args.curve) as f:
            for r in csv.DictReader(f):
                if r["val_loss"]:
                    tok.append(int(r["tokens"]) / 1e6)
                    vl.append(float(r["val_loss"]))
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(tok, vl, marker=".")
        ax.set_xlabel("pretraining tokens (M)")
        ax.set_ylabel("MLM validation loss (held-out articles)")
        ax.set_title("Pretraining curve")
        ax.grid(alpha=0.3)
        if args.adapter_curve:
            ax2 = ax.twinx()
            for i, spec in enumerate(args.adapter_curve):
                recipe, _, path = spec.rpartition("=")
                with open(path) as f:
                    rows = list(csv.DictReader(f, delimiter="\t"))
                ax2.plot([int(r["tokens_M"]) for r in rows], [100 * float(r["sst2_dev_accuracy"]) for r in rows],
                         marker="s", color=f"C{i + 1}", label=f"SST-2 dev accuracy of an adapter on the snapshot"
                         + (f" ({recipe})" if recipe else ""))
            ax2.set_ylabel("SST-2 dev accuracy (%)")
            ax2.legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "pretrain_curve.png"), dpi=110)


if __name__ == "__main__":
    main()
