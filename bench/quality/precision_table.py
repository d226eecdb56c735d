#!/usr/bin/python3
"""Accuracy lost to bf16 and int8, per task, from quality.py runs of one registry at fp32 and lower precisions:

    bench/quality/precision_table.py --fp32 F.json --precision B.json [--precision I.json ...] [--bound 0.5]

Prints Markdown: each task and skip with fp32's accuracy (entity F1 for tagging) and each precision's with its
difference, then per task the points lost (the largest drop below fp32 over the task's skips, 0 when none
drops) against --bound (issue 41: at most 0.5 points), with the CPU, kernel and load recorded in the files.
Exits 1 when a task loses more than the bound, naming it. Standard library only.
"""

import argparse
import json
import sys


def metric(v):
    return "entity_f1" if "entity_f1" in v else "accuracy"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fp32", required=True)
    ap.add_argument("--precision", action="append", default=[])
    ap.add_argument("--bound", type=float, default=0.5, help="points a task may lose (default 0.5)")
    a = ap.parse_args()
    base = json.load(open(a.fp32))
    ps = [json.load(open(p)) for p in a.precision]

    def served(r):
        v = list(r.get("precision", {}).values())
        return (v[0].get("precision"), v[0].get("kernel")) if v else ("?", "?")

    names = [served(p)[0] for p in ps]
    for r in [base] + ps:
        m = r["machine"]
        print(f"- {served(r)[0]} ({served(r)[1]} kernel): {m['cpu']}, {m.get('cpus')} CPUs, "
              f"{m['server_threads']} server threads, load {m['loadavg_start']:.1f} -> {m.get('loadavg_end', 0):.1f}"
              + (f", at most {r['rows_limit']} rows per split" if r.get("rows_limit") else ", whole splits"))
    print()
    print("| task, skip (rows) | fp32 | " + " | ".join(f"{n} (difference)" for n in names) + " |")
    print("|---|---|" + "---|" * len(ps))
    lost = {}  # task -> [points lost per precision]
    for t in sorted(base["tasks"]):
        bt = base["tasks"][t]
        for s in sorted(bt["skips"], key=int):
            bv = bt["skips"][s]
            k = metric(bv)
            cells = []
            for i, p in enumerate(ps):
                v = p["tasks"].get(t, {}).get("skips", {}).get(s)
                if v is None:
                    cells.append("")
                    continue
                d = 100 * (v[k] - bv[k])
                lost.setdefault(t, [0.0] * len(ps))[i] = max(lost.get(t, [0.0] * len(ps))[i], -d)
                cells.append(f"{100 * v[k]:.2f} ({d:+.2f})")
            print(f"| {t}{' (entity F1)' if k == 'entity_f1' else ''}, {s} ({bt['rows']:,}) | {100 * bv[k]:.2f} | "
                  + " | ".join(cells) + " |")
    print()
    print("| task | " + " | ".join(f"points lost, {n}" for n in names) + f" | within {a.bound:g} |")
    print("|---|" + "---|" * len(ps) + "---|")
    over = []
    for t in sorted(lost):
        bad = [n for n, x in zip(names, lost[t]) if x > a.bound + 1e-9]
        over += [f"{t} ({n})" for n in bad]
        print(f"| {t} | " + " | ".join(f"{x:.2f}" for x in lost[t]) + f" | {'no: ' + ', '.join(bad) if bad else 'yes'} |")
    if over:
        print(f"\nprecision_table.py: more than {a.bound:g} points lost: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
