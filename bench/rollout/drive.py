#!/usr/bin/env python3
"""drive.py - bench/rollout's traffic (run.sh starts the server): the same requests three ways, interleaved
round by round (none, shadow at 20%, the candidate as a separate request for 20% of the inputs), one client
(closed loop, one request at a time), medians over rounds. Standard library only."""
import argparse
import http.client
import json
import os
import statistics
import time

WORDS = ("the screen is great but battery poor service slow food tasty room clean staff rude price fair "
         "delivery late quality good sound loud camera sharp design ugly value high").split()
TASKS = ["task0%d" % i for i in range(8)]


def sentence(i):
    # deterministic and distinct: 12-16 words picked by i
    n = 12 + i % 5
    return " ".join(WORDS[(i * 7 + k * 13 + (i // 5) * k) % len(WORDS)] for k in range(n))


class Client:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def call(self, method, path, body=None, admin=False):
        h = {"Content-Type": "application/json"}
        if admin:
            h["Authorization"] = "Bearer bench"
        self.c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = self.c.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)

    def metric(self, name):
        self.c.request("GET", "/metrics")
        for line in self.c.getresponse().read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{} "):
                return float(line.split()[1])
        return 0.0


def cpu_s(pid):
    """CPU seconds the server used so far (all threads): under a loaded machine a steadier cost than wall time."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def predict(cl, text, tasks, gflop=None):
    """The request's latency in ms; its pass's GFLOP (the engine's plan: every stream of the batch, a
    shadow's included; one request a batch with one client) added to gflop[0] when given."""
    t0 = time.perf_counter()
    st, d = cl.call("POST", "/v1/predict", {"inputs": [text], "tasks": tasks, "skip": 5, "return": {"explain": True}})
    assert st == 200, (st, d)
    ms = (time.perf_counter() - t0) * 1e3
    if gflop is not None:
        gflop[0] += d["explain"]["batch"]["gflop"]
        gflop.append((d["explain"]["layers"][-1]["batch"]["streams"], ms))  # streams at the last layer: 9 with a shadow
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--cpu", default="")
    ap.add_argument("--threads", default="")
    ap.add_argument("--pid", type=int, required=True)
    a = ap.parse_args()
    cl = Client(a.port)
    cl.call("POST", "/v1/tasks/task00:abort", admin=True)
    for i in range(5):  # warm-up: every task resident, the workers' scratch grown
        predict(cl, sentence(10_000 + i), TASKS)
        predict(cl, sentence(10_000 + i), ["task00@2"])
    ways = ["none", "shadow", "separate"]
    res = {w: {"p50": [], "engine": [], "gflop": [], "cpu": [], "compared": 0} for w in ways}
    nxt = 0
    for r in range(a.rounds):
        for w in ways[r % 3:] + ways[:r % 3]:  # each way first in turn
            if w == "shadow":
                st, d = cl.call("POST", "/v1/tasks/task00:rollout",
                                {"version": "2", "mode": "shadow", "percent": 20, "max_share": 1}, admin=True)
                assert st == 201, (st, d)
            lat, gf = [], [0.0]
            e0, c0 = cl.metric("adapterd_batch_seconds_sum"), cpu_s(a.pid)
            for k in range(a.requests):
                text = sentence(nxt)
                nxt += 1
                lat.append(predict(cl, text, TASKS, gf))
                if w == "separate" and k % 5 == 0:
                    predict(cl, text, ["task00@2"], gf)
            e1, c1 = cl.metric("adapterd_batch_seconds_sum"), cpu_s(a.pid)
            if w == "shadow":
                st, d = cl.call("POST", "/v1/tasks/task00:abort", admin=True)
                c = d["ended"]["comparison"]
                res[w]["compared"] += c["compared"]
                res[w]["dropped"] = res[w].get("dropped", 0) + c["shadow_dropped"]
            res[w]["p50"].append(statistics.median(lat))
            res[w]["engine"].append((e1 - e0) * 1e3 / a.requests)
            res[w]["gflop"].append(gf[0] / a.requests)
            res[w]["cpu"].append((c1 - c0) * 1e3 / a.requests)
            if w == "shadow":
                res[w].setdefault("by_streams", {})
                for st, ms in gf[1:]:
                    res[w]["by_streams"].setdefault(st, []).append(ms)
    base = statistics.median(res["none"]["engine"])
    base_p50 = statistics.median(res["none"]["p50"])
    gbase = statistics.median(res["none"]["gflop"])
    cbase = statistics.median(res["none"]["cpu"])
    print("| way | caller p50 ms | vs none | engine ms / request | vs none | server CPU ms / request | vs none "
          "| GFLOP / request (plan) | vs none |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w in ways:
        p50, eng, cpu, g = (statistics.median(res[w][k]) for k in ("p50", "engine", "cpu", "gflop"))
        print("| %s | %.1f | %.3f | %.1f | %.3f | %.1f | %.3f | %.2f | %.3f |" %
              (w, p50, p50 / base_p50, eng, eng / base, cpu, cpu / cbase, g, g / gbase))
    n = a.rounds * a.requests
    print()
    print("shadow: %d of %d inputs compared (%.1f%%), %d dropped; separate: %d extra requests" %
          (res["shadow"]["compared"], n, 100.0 * res["shadow"]["compared"] / n, res["shadow"].get("dropped", 0),
           a.rounds * ((a.requests + 4) // 5)))
    for st, v in sorted(res["shadow"].get("by_streams", {}).items()):
        print("shadow way, requests whose pass ran %d streams at the last layer: %d, p50 %.1f ms" %
              (st, len(v), statistics.median(v)))
    s_extra = statistics.median(res["shadow"]["engine"]) - base
    p_extra = statistics.median(res["separate"]["engine"]) - base
    if p_extra > 0:
        print("the shadow's extra engine time is %.2f of the separate requests' (the shared trunk's saving: %.0f%%)" %
              (s_extra / p_extra, 100 * (1 - s_extra / p_extra)))
    cs = statistics.median(res["shadow"]["cpu"]) - cbase
    cp = statistics.median(res["separate"]["cpu"]) - cbase
    if cp > 0:
        print("the shadow's extra server CPU is %.2f of the separate requests'" % (cs / cp))
    gs = statistics.median(res["shadow"]["gflop"]) - gbase
    gp = statistics.median(res["separate"]["gflop"]) - gbase
    if gp > 0:
        print("the shadow's extra GFLOP is %.2f of the separate requests' (per input compared: %.2f vs %.2f GFLOP)" %
              (gs / gp, gs * n / max(1, res["shadow"]["compared"]), gp * n / (a.rounds * ((a.requests + 4) // 5))))
    print(json.dumps({"bench": "rollout", "cpu": a.cpu, "threads": a.threads, "rounds": a.rounds,
                      "requests": a.requests, "medians": {w: {"p50_ms": statistics.median(res[w]["p50"]),
                                                                 "engine_ms": statistics.median(res[w]["engine"]),
                                                                 "gflop": statistics.median(res[w]["gflop"]),
                                                                 "cpu_ms": statistics.median(res[w]["cpu"])}
                                                             for w in ways},
                      "shadow_compared": res["shadow"]["compared"]}))


if __name__ == "__main__":
    main()
