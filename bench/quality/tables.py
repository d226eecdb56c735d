#!/usr/bin/python3
"""bench/README.md's quality tables (Markdown on stdout) from the files the runs wrote:

    bench/quality/tables.py --quality bench/quality/results.json [--precision bench/quality/results-bf16.json ...]
                            --training bench/quality/training.json [--registry REGISTRY] [--times WORK/times.tsv]

--quality: quality.py's float32 run (through the server, PyTorch agreement, full fine-tuning yardsticks);
--precision: quality.py runs of the same registry with --precision bf16 / int8; --training: the registry's
results.json (tools/train/registry.py: every trained task's PyTorch held-out figures at skips 0..2, used for the
control, the forms and skips a task.json does not allow); --registry for the fusion variants' kept adapters;
--times: run.sh's stage wall times.  Standard library only.
"""

import argparse
import json
import os

MAIN = [("sentiment", "sst2"), ("topic", "agnews"), ("question", "trec"), ("emotion", "emotion")]
SPLIT = {"sst2": "SST-2 dev", "agnews": "AG News test", "trec": "TREC test", "emotion": "emotion validation",
         "wnut": "WNUT-17 test"}


def pct(x):
    return "" if x is None else f"{100 * x:.2f}"


def af(v):
    return f"{pct(v['accuracy'])} / {pct(v['macro_f1'])}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quality", required=True)
    ap.add_argument("--precision", action="append", default=[])
    ap.add_argument("--training", required=True)
    ap.add_argument("--registry", default=None)
    ap.add_argument("--times", default=None)
    args = ap.parse_args()
    q = json.load(open(args.quality))
    tr = json.load(open(args.training))
    qt = q["tasks"]

    print("| task (split, rows) | skip 0 acc / F1 | skip 1 | skip 2 | PyTorch agreement | full fine-tuning | "
          "GFLOP skip 0, 2 |")
    print("|---|---|---|---|---|---|---|")
    for pub, name in MAIN:
        t = qt.get(pub)
        if not t:
            continue
        cells = []
        for s in ("0", "1", "2"):
            if s in t["skips"]:
                cells.append(af(t["skips"][s]))
            elif name in tr and s in tr[name]["skips"]:
                cells.append(f"(not allowed: {pct(tr[name]['skips'][s]['accuracy'])} in PyTorch)")
            else:
                cells.append("")
        ag = [v.get("label_agreement") for v in t["skips"].values() if v.get("label_agreement") is not None]
        rows = {v.get("pytorch_rows") for v in t["skips"].values()} - {None}
        agree = f"{100 * min(ag):.2f}% ({max(rows):,} rows)" if ag else ""
        ff = t.get("full_finetune")
        if not ff and f"{name}-full" in tr:       # the yardstick's own evaluation (PyTorch, up to 2,000 rows)
            ff = tr[f"{name}-full"]["skips"]["0"]
        ffs = af(ff) if ff else ""
        g = [t["skips"][s]["gflop_1_input"] for s in sorted(t["skips"], key=int)]
        gs = f"{g[0]:.3f}, {g[-1]:.3f}" if g else ""
        print(f"| {pub} ({SPLIT[name]}, {t['rows']:,}) | {' | '.join(cells)} | {agree} | {ffs} | {gs} |")
    c = tr.get("sst2-control")
    if c:
        cells = [af(c["skips"][s]) if s in c["skips"] else "" for s in ("0", "1", "2")]
        print(f"| sentiment control, no AdapterDrop (PyTorch, {c['eval_rows']:,}) | {' | '.join(cells)} | | | |")
    e = qt.get("entities")
    if e:
        print()
        print("| entities (WNUT-17 test sentences) | entity F1 | precision | recall | word accuracy | "
              "PyTorch entity F1 on its rows (server, same rows) | word agreement | GFLOP |")
        print("|---|---|---|---|---|---|---|---|")
        for s in sorted(e["skips"], key=int):
            v = e["skips"][s]
            print(f"| skip {s} ({e['rows']:,}) | {pct(v['entity_f1'])} | {pct(v['entity_precision'])} | "
                  f"{pct(v['entity_recall'])} | {pct(v['accuracy'])} | {pct(v.get('pytorch_entity_f1'))} "
                  f"({pct(v.get('server_entity_f1_same_rows'))}, {v.get('pytorch_rows', 0):,} rows) | "
                  f"{pct(v.get('label_agreement'))} | {v['gflop_1_input']:.3f} |")

    fus = sorted((n for n in qt if n.startswith("sentiment-fusion")),
                 key=lambda n: -int(n.rsplit("-k", 1)[1]) if "-k" in n else -99)
    if fus:
        print()
        print("| SST-2 dev | accuracy / F1 | PyTorch agreement | GFLOP, median input | kept adapters |")
        print("|---|---|---|---|---|")
        if "sentiment" in qt:
            v = qt["sentiment"]["skips"]["0"]
            print(f"| single adapter (sentiment) | {af(v)} | | {v['gflop_1_input']:.3f} | |")
        for n in fus:
            v = qt[n]["skips"]["0"]
            kept = "all"
            if args.registry:
                p = os.path.join(args.registry, "tasks", n, "1", "fusion", "fusion_pruning.json")
                if os.path.exists(p):
                    kept = ", ".join(json.load(open(p))["keep"])
            k = n.rsplit("-k", 1)[1] if "-k" in n else None
            what = f"fusion pruned to k = {k}" if k else "fusion of all"
            print(f"| {what} | {af(v)} | {pct(v.get('label_agreement'))}% | {v['gflop_1_input']:.3f} | {kept} |")

    if args.precision:
        ps = [json.load(open(p)) for p in args.precision]
        names = [list(p.get("precision", {}).values())[0]["precision"] if p.get("precision") else "?" for p in ps]
        print()
        print("| task, skip | fp32 | " + " | ".join(f"{n} (difference)" for n in names) + " |")
        print("|---|---|" + "---|" * len(ps))
        for n in sorted(qt):
            for s in sorted(qt[n]["skips"], key=int):
                key = "entity_f1" if "entity_f1" in qt[n]["skips"][s] else "accuracy"
                base = qt[n]["skips"][s][key]
                cells = []
                for p in ps:
                    v = p["tasks"].get(n, {}).get("skips", {}).get(s)
                    cells.append("" if v is None else f"{pct(v[key])} ({100 * (v[key] - base):+.2f})")
                print(f"| {n}{' (entity F1)' if key == 'entity_f1' else ''}, {s} | {pct(base)} | "
                      + " | ".join(cells) + " |")

    forms = [(n, r) for n, r in sorted(tr.items()) if r["form"] not in ("fusion",)]
    print()
    print("| trained | form | task | trainable parameters | rows x epochs | skip 0 | skip 1 | skip 2 | train s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, r in forms:
        key = "entity_f1" if "entity_f1" in r["skips"].get("0", {}) else "accuracy"
        cells = [pct(r["skips"][s][key]) if s in r["skips"] else "" for s in ("0", "1", "2")]
        frozen = f" (+{r['frozen_params']:,} frozen)" if r.get("frozen_params") else ""
        print(f"| {n} | {r['form']} | {r['task']} | {r['trainable_params']:,}{frozen} | {r['train_rows']:,} x "
              f"{r['epochs']:g} | {' | '.join(cells)} | {r['train_seconds']:.0f} |")

    if args.times and os.path.exists(args.times):
        print()
        print("| stage | wall time |")
        print("|---|---|")
        tot = 0
        for ln in open(args.times):
            what, s = ln.rstrip("\n").split("\t")
            tot += int(s)
            print(f"| {what} | {int(s) // 60} min {int(s) % 60:02d} s |")
        print(f"| total | {tot // 60} min {tot % 60:02d} s |")


if __name__ == "__main__":
    main()
