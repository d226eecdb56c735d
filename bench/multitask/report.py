#!/usr/bin/python3
"""Report of bench/multitask/run.sh: medians over rounds of the per-round medians, targets of issue 5.

    report.py OUT_DIR THREADS CORE CPU [JSON_OUT]

OUT_DIR holds adapterd.<round>.json (bench_multitask --json lines), pytorch.<round>.json (peer_torch.py lines)
and <peer>.<round>.load (load averages before/after)."""
import glob
import json
import os
import statistics
import sys


def lines(pattern):
    rounds = []
    for f in sorted(glob.glob(pattern)):
        with open(f) as fh:
            rounds.append([json.loads(x) for x in fh if x.strip().startswith("{")])
    return rounds


def keyed(rounds, kind):
    """(workload, T or k, skip) -> list over rounds of the row."""
    d = {}
    for rows in rounds:
        for x in rows:
            if x.get("kind") != kind:
                continue
            d.setdefault((x["workload"], x.get("T", x.get("k")), x["skip"]), []).append(x)
    return d


def med(rows, field):
    return statistics.median(r[field] for r in rows)


def main():
    out, threads, core, cpu = sys.argv[1:5]
    json_out = sys.argv[5] if len(sys.argv) > 5 else ""
    ad, pt = lines(os.path.join(out, "adapterd.*.json")), lines(os.path.join(out, "pytorch.*.json"))
    loads = {p: [open(f).read().split("\n")[:2] for f in sorted(glob.glob(os.path.join(out, p + ".*.load")))]
             for p in ("adapterd", "pytorch")}
    setup = [x for rows in ad for x in rows if x.get("kind") == "setup"]
    psetup = [x for rows in pt for x in rows if x.get("kind") == "setup"]
    peak = statistics.median(x["sgemm_peak_gflops"] for x in setup) if setup else float("nan")
    am, af = keyed(ad, "multitask"), keyed(ad, "fusion")
    pm, pf = keyed(pt, "multitask"), keyed(pt, "fusion")
    batch = setup[0]["batch"] if setup else 8
    print()
    print("multi-task benchmark, bert-base shapes (12 layers, H 768, FFN 3072), 128-token inputs, float32")
    print("machine: %s, %d online CPUs, %s threads per peer; %d round(s)" % (cpu, os.cpu_count(), threads,
                                                                              max(len(ad), len(pt))))
    for p, ls in loads.items():
        for j, l in enumerate(ls):
            print("  load (1/5/15 min) %s round %d: before %s, after %s" % (p, j + 1, l[0], l[1] if len(l) > 1 else "?"))
    print("OpenBLAS core: %s" % ("OpenBLAS's own detection (OPENBLAS_CORETYPE unset)" if core == "auto" else
                                 "OPENBLAS_CORETYPE=" + core))
    if setup:
        print("adapterd: core %s, %d threads, tasks %s (%.2f MB of weights each); sgemm peak (2048x3072x768 "
              "through the engine's split, same run): %.1f GFLOP/s" % (setup[0]["blas_core"], setup[0]["threads"],
                                                                       setup[0]["task_kind"], setup[0]["task_mb"], peak))
    if psetup:
        s = psetup[0]
        print("PyTorch peer: torch %s, %s torch threads, OpenBLAS %s (%s threads), OMP_WAIT_POLICY=%s" % (
            s["torch"], s["torch_threads"], s.get("openblas_core"), s.get("openblas_threads"), s["OMP_WAIT_POLICY"]))
    print()
    print("T tasks on the same input (seq_bn + head each); joint = one eng_run, separate = T eng_run calls,")
    print("PyTorch = Parallel(T) with skip_layers; ms are medians; speed-up = other ms / joint ms")
    hdr = ("%-10s %3s %4s %9s %9s %9s %7s %7s  %8s %8s %6s %8s" %
           ("workload", "T", "skip", "joint", "separate", "PyTorch", "vs sep", "vs PT", "GFLOP", "GFLOP/s", "%peak",
            "floor ms"))
    print(hdr)
    res = {"cpu": cpu, "threads": int(threads), "core": core, "sgemm_peak_gflops": peak, "multitask": [], "fusion": []}
    for key in sorted(am, key=lambda k: (k[2], k[0] != "latency", k[1])):
        wl, T, skip = key
        rows = am[key]
        j, s, g = med(rows, "joint_ms"), med(rows, "separate_ms"), med(rows, "plan_gflop")
        p = med(pm[key], "ms") if key in pm else float("nan")
        gfs = g / j * 1e3
        label = "latency" if wl == "latency" else "thr x%d" % batch
        print("%-10s %3d %4d %9.1f %9.1f %9.1f %6.2fx %6.2fx  %8.1f %8.1f %5.0f%% %8.1f" % (
            label, T, skip, j, s, p, s / j, p / j, g, gfs, 100 * gfs / peak, g / peak * 1e3))
        res["multitask"].append({"workload": wl, "T": T, "skip": skip, "joint_ms": j, "separate_ms": s,
                                 "pytorch_ms": p, "plan_gflop": g, "gflops": gfs, "max_diff": max(
                                     r["max_diff"] for r in rows)})
    diffs = [r["max_diff"] for rows in am.values() for r in rows]
    if diffs:
        print("joint vs separate logits: max |diff| over every row %.2g (issue 5: <= 1e-5)" % max(diffs))
    if af:
        print()
        print("AdapterFusion of 8 seq_bn adapters pruned to the first k (cost does not depend on which k);")
        print("speed-up vs k=8 = ms(k=8) / ms(k); AdapterDrop paper (PyTorch): 2 of 8 kept -> 68% faster")
        print("%-10s %2s %4s %9s %8s %9s %8s %7s %8s %6s" % ("workload", "k", "skip", "adapterd", "vs k=8", "PyTorch",
                                                            "vs k=8", "vs PT", "GFLOP/s", "%peak"))
        for key in sorted(af, key=lambda k: (k[2], k[0] != "latency", -k[1])):
            wl, k, skip = key
            a = med(af[key], "ms")
            a8 = med(af[(wl, 8, skip)], "ms") if (wl, 8, skip) in af else float("nan")
            p = med(pf[key], "ms") if key in pf else float("nan")
            p8 = med(pf[(wl, 8, skip)], "ms") if (wl, 8, skip) in pf else float("nan")
            gfs = med(af[key], "plan_gflop") / a * 1e3
            label = "latency" if wl == "latency" else "thr x%d" % batch
            print("%-10s %2d %4d %9.1f %7.2fx %9.1f %7.2fx %6.2fx %8.1f %5.0f%%" % (
                label, k, skip, a, a8 / a, p, p8 / p, p / a, gfs, 100 * gfs / peak))
            res["fusion"].append({"workload": wl, "k": k, "skip": skip, "adapterd_ms": a, "pytorch_ms": p})
    # targets: T = 8, skip 5
    print()
    for wl in ("latency", "throughput"):
        key = (wl, 8, 5)
        if key not in am:
            continue
        j, s = med(am[key], "joint_ms"), med(am[key], "separate_ms")
        p = med(pm[key], "ms") if key in pm else float("nan")
        gfs = med(am[key], "plan_gflop") / j * 1e3
        print("targets, T=8 skip 5 %s: vs separate %.2fx (>= 2x: %s), vs PyTorch %.2fx (>= 1.5x: %s), "
              "%.0f%% of sgemm peak (>= 65%%: %s)" % (
                  wl, s / j, "met" if s / j >= 2 else "MISSED", p / j, "met" if p / j >= 1.5 else "MISSED",
                  100 * gfs / peak, "met" if gfs / peak >= 0.65 else "MISSED"))
    # profile of T=8 skip 5 throughput (last round)
    key = ("throughput", 8, 5)
    if key in am:
        r = am[key][-1]
        print()
        print("profile, T=8 skip 5, %d inputs (eng_plan_stats of one run): embed %.1f ms, heads %.1f ms, total %.1f ms"
              % (r["inputs"], r["embed_ms"], r["heads_ms"], r["total_ms"]))
        print("  layer   rows   GFLOP      ms  GFLOP/s  %peak")
        for l, (rows, ms, g) in enumerate(zip(r["layer_rows"], r["layer_ms"], r["layer_gflop"])):
            print("  %5d %6d %7.2f %7.1f %8.1f %5.0f%%" % (l, rows, g, ms, g / ms * 1e3, 100 * g / ms * 1e3 / peak))
    if json_out:
        with open(json_out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
