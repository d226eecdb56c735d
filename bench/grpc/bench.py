"""bench.py - gRPC (--grpc-port, KServe v2 ModelInfer) against REST (POST /v2/models/{m}/infer) on the same
request, in the same run, with the same load generator: nghttp2's h2load (HTTP/2 for gRPC, --h1 for REST,
which libmicrohttpd serves as HTTP/1.1 keep-alive), one connection per client, one request in flight per
connection, for --duration seconds at each concurrency; and, for the front ends' own cost without the engine,
gRPC's ServerLive against REST's GET /v2/health/live. Latency percentiles and requests/s come from
h2load's per-request log (--log-file: start time, status, microseconds to the end of the response): the requests
started in the --duration seconds after a 1 s warm-up. gRPC's HTTP status is 200 whatever its grpc-status: the
check call before the runs, and the server's own count (adapterd_grpc_requests_total{code="OK"}), confirm them. Every answer is checked first: one gRPC call with Python's client, one REST call, equal labels.

    bench.py --adapterd build/tools/adapterd [--registry examples/registry] [--task sentiment]
             [--duration 10] [--concurrency 1,8] [--inputs 1]
Needs Debian's nghttp2-client (h2load) and python3-grpcio / python3-grpc-tools (/usr/bin/python3).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "proto")
TEXTS = ["the match was great, a fine evening for everyone in the stadium", "a dull and slow film that nobody enjoyed",
         "the service was quick and friendly", "I would not go back there again", "an average day with nothing special",
         "the best concert I have been to in years", "the battery died after one hour", "what a lovely surprise"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(v, p):
    v = sorted(v)
    k = min(len(v) - 1, max(0, int(round(p / 100 * (len(v) - 1)))))
    return v[k]


def h2load(args, url, body, headers, c, duration, log, h1):
    cmd = ["h2load", "-c", str(c), "-m", "1", "-t", "1", "-D", str(duration), "--warm-up-time", "1", "--log-file", log]
    cmd += (["-d", body] if body else []) + (["--h1"] if h1 else [])
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=duration + 120).stdout
    rows = [[int(x) if x.isdigit() else x for x in line.strip().split("\t")[:3]] for line in open(log) if line.strip()]
    # the measured window: requests started from the end of the 1 s warm-up for `duration` seconds
    t0 = min(r[0] for r in rows) + 1_000_000
    rows = [r for r in rows if t0 <= r[0] < t0 + duration * 1_000_000]
    lat = [r[2] / 1000 for r in rows if r[1] == 200]
    bad = sum(1 for r in rows if r[1] != 200)
    return {"n": len(lat), "bad": bad, "rps": len(lat) / duration, "p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "mean": statistics.mean(lat)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--adapterd", required=True)
    ap.add_argument("--registry", default=os.path.join(HERE, "..", "..", "examples", "registry"))
    ap.add_argument("--task", default="sentiment")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--inputs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if not shutil.which("h2load"):
        sys.exit("bench: h2load (Debian's nghttp2-client) is not installed")
    tmp = tempfile.mkdtemp(prefix="adapterd-bench-grpc-")
    from grpc_tools import protoc
    protoc.main(["protoc", "-I" + PROTO_DIR, "--python_out=" + tmp, "--grpc_python_out=" + tmp, os.path.join(PROTO_DIR, "grpc_service.proto")])
    sys.path.insert(0, tmp)
    import grpc
    import grpc_service_pb2 as pb
    import grpc_service_pb2_grpc as pbg

    texts = (TEXTS * (a.inputs // len(TEXTS) + 1))[:a.inputs]
    req = pb.ModelInferRequest(model_name=a.task)
    req.inputs.add(name="text", datatype="BYTES", shape=[len(texts)]).contents.bytes_contents.extend(t.encode() for t in texts)
    msg = req.SerializeToString()
    grpc_body, rest_body = os.path.join(tmp, "grpc.bin"), os.path.join(tmp, "rest.json")
    with open(grpc_body, "wb") as f:
        f.write(b"\0" + struct.pack(">I", len(msg)) + msg)
    rest = {"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": texts}]}
    with open(rest_body, "w") as f:
        json.dump(rest, f)

    port_file, gport = os.path.join(tmp, "port"), free_port()
    log = open(os.path.join(tmp, "server.log"), "wb")
    srv = subprocess.Popen([a.adapterd, "serve", "--registry", a.registry, "--port", "0", "--port-file", port_file, "--grpc-port",
                            str(gport), "--threads", str(a.threads), "--access-log", "false"], stdout=log, stderr=log)
    try:
        while not os.path.exists(port_file):
            if srv.poll() is not None:
                sys.exit("adapterd did not start: " + open(log.name).read())
            time.sleep(0.05)
        http = "http://127.0.0.1:%s" % open(port_file).read().strip()
        ch = grpc.insecure_channel("127.0.0.1:%d" % gport)
        grpc.channel_ready_future(ch).result(timeout=30)
        g = pbg.GRPCInferenceServiceStub(ch).ModelInfer(req)
        r = json.loads(urllib.request.urlopen(urllib.request.Request(http + "/v2/models/%s/infer" % a.task, json.dumps(rest).encode(),
                                                                      {"Content-Type": "application/json"})).read())
        gl = [b.decode() for b in next(t for t in g.outputs if t.name == "label").contents.bytes_contents]
        rl = next(t for t in r["outputs"] if t["name"] == "label")["data"]
        if gl != rl:
            sys.exit("bench: gRPC and REST disagree: %s vs %s" % (gl, rl))
        ch.close()
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        print("CPU: %s, %d vCPUs; load average before: %s" % (cpu, os.cpu_count(), open("/proc/loadavg").read().split()[:3]))
        print("task %s, %d input(s) per request; gRPC message %d bytes, REST body %d bytes; %d s per row (after 1 s warm-up)" %
              (a.task, len(texts), len(msg) + 5, os.path.getsize(rest_body), a.duration))
        print("| protocol | c | req/s | p50 ms | p99 ms | mean ms | requests | errors |")
        print("|---|---|---|---|---|---|---|---|")
        live = os.path.join(tmp, "live.bin")
        with open(live, "wb") as f:
            f.write(b"\0\0\0\0\0")  # an empty ServerLiveRequest
        for c in [int(x) for x in a.concurrency.split(",")]:
            for name, url, body, hdr, h1 in (
                    ("gRPC ServerLive", "http://127.0.0.1:%d/inference.GRPCInferenceService/ServerLive" % gport, live,
                     ["content-type: application/grpc", "te: trailers"], False),
                    ("REST GET /v2/health/live", http + "/v2/health/live", None, [], True),
                    ("gRPC ModelInfer", "http://127.0.0.1:%d/inference.GRPCInferenceService/ModelInfer" % gport, grpc_body,
                     ["content-type: application/grpc", "te: trailers"], False),
                    ("REST /v2/.../infer", http + "/v2/models/%s/infer" % a.task, rest_body, ["content-type: application/json"], True)):
                x = h2load(a, url, body, hdr, c, a.duration, os.path.join(tmp, "log-%d-%s" % (c, name.replace("/", "_").replace(" ", "_"))), h1)
                print("| %s | %d | %.1f | %.2f | %.2f | %.2f | %d | %d |" % (name, c, x["rps"], x["p50"], x["p99"], x["mean"], x["n"], x["bad"]),
                      flush=True)
        metrics = urllib.request.urlopen(http + "/metrics").read().decode().splitlines()
        not_ok = sum(float(l.split()[-1]) for l in metrics
                     if l.startswith('adapterd_grpc_requests_total{method="ModelInfer"') and 'code="OK"' not in l)
        print("gRPC ModelInfer calls answered with another grpc-status than OK (the server's count): %d" % not_ok)
        print("load average after: %s" % open("/proc/loadavg").read().split()[:3])
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


main()
