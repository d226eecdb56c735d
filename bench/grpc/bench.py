"""bench.py - gRPC (--grpc-port, KServe v2) against REST (the v2 routes) on the same calls, for one adapterd
binary or several compared in the same run (a build before a change and one after it).

    bench.py --adapterd OLD --label before --adapterd NEW --label after [--rounds 3] [--duration 10]
             [--concurrency 1,8] [--rows live,infer,refused] [--inputs 1] [--threads 2] [--core same|auto|NAME]
             [--heavy shape,inputs,tensors|none] [--heavy-duration 10] [--heavy-bytes 1040000] [--probe-rps 200]
             [--registry examples/registry] [--task sentiment] [--serve-args "..."] [--retries 2] [--json FILE]
             [--tls LABEL[,LABEL...]]

Each round starts one fresh `adapterd serve` per binary (all of them at once, idle while another is
measured), then measures every row on each server in turn, the order of the servers reversed from one
row to the next and from one round to the next: two binaries' figures of a row are taken seconds apart,
so the load of the shared machine, which moves by tens of percent within a minute, hits both alike.

Rows, each at every concurrency c (one h2load connection per client, one request in flight on each, a 1 s
warm-up, then --duration seconds; HTTP/2 for gRPC, --h1 for REST, which libmicrohttpd serves as HTTP/1.1
keep-alive), gRPC then REST:
  live     gRPC ServerLive, REST GET /v2/health/live: the front ends alone, no engine;
  infer    gRPC ModelInfer, REST POST /v2/models/{task}/infer: the same tensor (--inputs texts), answered;
  refused  the same calls asking for an output tensor the task does not answer ("answer"): decoded,
           parsed and refused (INVALID_ARGUMENT, 422) before tokenization and the engine, so the front
           door's own cost of an inference call.
Requests/s and the p50 / p99 latency come from h2load's per-request log (start, status, microseconds to
the end of the answer), which holds the measured window only. Server CPU per request: the server
process's utime + stime (/proc/PID/stat, all its threads), sampled every 20 ms and interpolated at the
window's first request start and last answer end, divided by the requests answered in the window.

Heavy probe (--heavy-duration > 0): one h2load connection sends large ModelInfer calls back to back
(each --heavy kind, a message of about --heavy-bytes, under the server's default 1 MiB --max-body-bytes)
while another connection calls ServerLive --probe-rps times a second on schedule, answered or not (up to
100 in flight): ServerLive's p50 / p99 / max say how long a heavy call holds up a cheap one arriving on
another connection at any moment (the target: under 30 ms). Kinds:
none (the probe alone), shape (one input whose shape holds ~1M entries), inputs (64 texts of ~16 KB, the
default --max-inputs, truncated and run), tensors (~17k input tensors of one short text each).

Reported: medians over the rounds per binary; the gRPC / REST and binary / first-binary ratios as the
median [min-max] of the per-round ratios; the CPU, the core count, the OpenBLAS core each server used,
the commit each binary was built from, and the load: the 1-minute load average and the share of the
machine's CPU other processes (not the servers, h2load or this script) used during each binary's rows.
Every answer is checked first (one gRPC call, one REST call, equal labels; the refused calls refused),
and the servers' own count (adapterd_grpc_requests_total) confirms each gRPC ModelInfer row's calls all
answered OK (infer) or all INVALID_ARGUMENT (refused): h2load sees HTTP 200 whatever the grpc-status.
A server that exits under the bench (a signal from another process on a shared machine) is restarted
and its row measured again, at most --retries times.

OpenBLAS core: --core same (default) runs the first binary's `adapterd version` without
OPENBLAS_CORETYPE and sets the core it picks for every server; --core auto leaves each server to pick
its own (OPENBLAS_CORETYPE removed from the environment); --core NAME sets OPENBLAS_CORETYPE=NAME.

TLS (--tls LABEL,...): the binaries of those labels are served with --tls-cert/--tls-key (a CA and a server
certificate for 127.0.0.1 made with the openssl CLI at start, EC P-256), both ports then measured over TLS (h2
by ALPN for gRPC, HTTPS/1.1 for REST; h2load's connections are opened once, before the window, so the rows
measure records, not handshakes). Giving one binary twice, `--adapterd B --label h2c --adapterd B --label tls
--tls tls`, measures what TLS costs against the cleartext ports under the same load.

Needs Debian's nghttp2-client (h2load) and python3-grpcio / python3-grpc-tools (/usr/bin/python3).
"""
import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import struct
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "proto")
TEXTS = ["the match was great, a fine evening for everyone in the stadium", "a dull and slow film that nobody enjoyed",
         "the service was quick and friendly", "I would not go back there again", "an average day with nothing special",
         "the best concert I have been to in years", "the battery died after one hour", "what a lovely surprise"]
GRPC_HEADERS = ["content-type: application/grpc", "te: trailers"]
JSON_HEADERS = ["content-type: application/json"]
SERVICE = "/inference.GRPCInferenceService/"
TICK = os.sysconf("SC_CLK_TCK")
ROW_GROUPS = ("live", "infer", "refused")
HEAVY_KINDS = ("shape", "inputs", "tensors")
REFUSED_OUTPUT = "answer"  # a v2 output tensor (question answering) a classification task does not answer
TARGET_MS = 30.0
PROBE_STREAMS = 100  # ServerLive probes in flight at most on the probe's connection (the server's streams per connection)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(v, p):
    v = sorted(v)
    k = min(len(v) - 1, max(0, int(round(p / 100 * (len(v) - 1)))))
    return v[k]


def median(v):
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def proc_cpu(pid):
    """utime + stime of a process (all its threads), seconds; None once it is gone."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    f = s[s.rindex(")") + 2:].split()  # fields from the 3rd (state) on: utime is the 14th, stime the 15th
    return (int(f[11]) + int(f[12])) / TICK


def machine_cpu():
    """(busy, all) CPU seconds of the whole machine from /proc/stat (steal and guest time left out)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = v[:7]
    busy = user + nice + system + irq + softirq
    return busy / TICK, (busy + idle + iowait) / TICK


class Sampler(threading.Thread):
    """Samples the CPU time of some processes (the measured server first), of this script and of the
    machine every 20 ms, with the wall clock (time.time(), the clock of h2load's log)."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids, self.samples, self.stop_ev = pids, [], threading.Event()
        self.sample()
        self.start()

    def sample(self):
        last = self.samples[-1][1] if self.samples else [0.0] * len(self.pids)
        cpu = [c if c is not None else last[i] for i, c in enumerate(proc_cpu(p) for p in self.pids)]
        busy, total = machine_cpu()
        self.samples.append((time.time(), cpu, proc_cpu("self"), busy, total))

    def run(self):
        while not self.stop_ev.wait(0.02):
            self.sample()

    def stop(self):
        self.stop_ev.set()
        self.join()
        self.sample()

    def at(self, t):
        """Every sampled value at wall time t, interpolated linearly."""
        s = self.samples
        j = next((k for k in range(1, len(s)) if s[k][0] >= t), len(s) - 1)
        a, b = s[j - 1], s[j]
        w = 0.0 if b[0] <= a[0] else min(1.0, max(0.0, (t - a[0]) / (b[0] - a[0])))

        def mix(x, y):
            return x + (y - x) * w

        return [mix(x, y) for x, y in zip(a[1], b[1])], mix(a[2], b[2]), mix(a[3], b[3]), mix(a[4], b[4])


def h2load_cmd(url, body, headers, c, duration, log, h1, warmup=1, rps=None, m=1):
    cmd = ["h2load", "-c", str(c), "-m", str(m), "-t", "1", "-D", str(duration), "--log-file", log]
    cmd += (["--warm-up-time", str(warmup)] if warmup else []) + (["--rps", str(rps)] if rps else [])
    cmd += (["-d", body] if body else []) + (["--h1"] if h1 else [])
    for h in headers:
        cmd += ["-H", h]
    return cmd + [url]


def h2load(cmd):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def read_log(path, duration):
    """h2load's per-request log: [start us since the epoch, HTTP status, us to the end of the answer]."""
    if not os.path.exists(path):
        return []
    rows = [[int(x) for x in line.strip().split("\t")[:3]] for line in open(path) if line.strip()]
    os.unlink(path)
    if not rows:
        return rows
    # h2load 1.52 logs the measured window only; a version that logged its warm-up too shows a longer span
    last = max(r[0] for r in rows)
    if last - min(r[0] for r in rows) > (duration + 0.5) * 1e6:
        rows = [r for r in rows if r[0] >= last - duration * 1e6]
    return rows


def stats(rows, sampler, ok_status=200):
    """Requests/s, latency, the measured server's CPU per request and the other processes' share of the
    machine over the window of rows (its first start to its last answer)."""
    ok = [r for r in rows if r[1] == ok_status]
    lat = [r[2] / 1000 for r in ok] or [float("nan")]
    ta, tb = min(r[0] for r in rows) / 1e6, max(r[0] + r[2] for r in rows) / 1e6
    (ca, sa, ba, aa), (cb, sb, bb, ab) = sampler.at(ta), sampler.at(tb)
    span = max(tb - ta, 1e-6)
    ours = sum(y - x for x, y in zip(ca, cb)) + (sb - sa)
    return {"n": len(ok), "bad": len(rows) - len(ok), "rps": len(ok) / span, "p50": percentile(lat, 50),
            "p99": percentile(lat, 99), "max": max(lat), "mean": statistics.mean(lat), "span_s": span,
            "cpu_s": cb[0] - ca[0], "cpu_us": (cb[0] - ca[0]) / max(len(ok), 1) * 1e6,
            "others": max(0.0, (bb - ba) - ours) / max(ab - aa, 1e-6)}


# ---- the binaries and their servers ----

def binary_origin(path):
    """Where a binary comes from: the source tree of the CMake build folder above it, its commit, whether
    that tree has uncommitted changes outside bench/, docs/, tests/ and *.md, whether the binary is older
    than the commit; and the binary's hash."""
    info = {"path": os.path.abspath(path), "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest()[:12],
            "commit": "unknown", "subject": "", "dirty": False, "stale": False, "source": None}
    d = os.path.dirname(os.path.realpath(path))
    while d != "/":
        cc = os.path.join(d, "CMakeCache.txt")
        if os.path.exists(cc):
            info["source"] = next((l.split("=", 1)[1].strip() for l in open(cc) if l.startswith("CMAKE_HOME_DIRECTORY:")), None)
            break
        d = os.path.dirname(d)
    if not info["source"]:
        return info

    def git(*a):
        return subprocess.run(["git", "-C", info["source"]] + list(a), capture_output=True, text=True).stdout.strip()

    h = git("rev-parse", "--short=12", "HEAD")
    if h:
        subject = git("log", "-1", "--format=%s")
        info["commit"], info["subject"] = h, subject if len(subject) <= 60 else subject[:57].rstrip() + "..."
        info["dirty"] = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench", ":!docs", ":!tests", ":!*.md"))
        info["stale"] = os.path.getmtime(path) < int(git("log", "-1", "--format=%ct") or 0)
    return info


def version_of(binary, env):
    out = subprocess.run([binary, "version"], capture_output=True, text=True, env=env, timeout=60).stdout
    try:
        return json.loads(out)
    except ValueError:
        return {}


class ServerGone(Exception):
    pass


def make_certs(tmp):
    """A CA and a server certificate for 127.0.0.1 (--tls); returns the paths of ca, cert, key."""
    run = lambda *c: subprocess.run(c, check=True, capture_output=True)
    for n in ("ca", "srv"):
        run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", os.path.join(tmp, n + ".key"))
    run("openssl", "req", "-x509", "-new", "-key", os.path.join(tmp, "ca.key"), "-out", os.path.join(tmp, "ca.crt"), "-days", "2",
        "-subj", "/CN=bench CA")
    run("openssl", "req", "-new", "-key", os.path.join(tmp, "srv.key"), "-out", os.path.join(tmp, "srv.csr"), "-subj", "/CN=127.0.0.1")
    with open(os.path.join(tmp, "srv.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", os.path.join(tmp, "srv.csr"), "-CA", os.path.join(tmp, "ca.crt"), "-CAkey",
        os.path.join(tmp, "ca.key"), "-set_serial", "1", "-days", "2", "-out", os.path.join(tmp, "srv.crt"), "-extfile",
        os.path.join(tmp, "srv.ext"))
    return [os.path.join(tmp, n) for n in ("ca.crt", "srv.crt", "srv.key")]


class Server:
    def __init__(self, a, binary, env, tmp, tag, tls=None):
        self.tls = tls  # (ca, cert, key) or None
        self.port_file, self.gport = os.path.join(tmp, "port-" + tag), free_port()
        self.log_path = os.path.join(tmp, "server-%s.log" % tag)
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        with open(self.log_path, "wb") as log:
            self.p = subprocess.Popen([binary, "serve", "--registry", a.registry, "--port", "0", "--port-file", self.port_file,
                                       "--grpc-port", str(self.gport), "--threads", str(a.threads), "--access-log", "false"] +
                                      (["--tls-cert", tls[1], "--tls-key", tls[2]] if tls else []) +
                                      shlex.split(a.serve_args), stdout=log, stderr=log, env=env)
        while not os.path.exists(self.port_file) or not open(self.port_file).read().strip():
            if self.p.poll() is not None:
                log = open(self.log_path, errors="replace").read()
                if "SIGTERM" in log or self.p.returncode < 0:
                    raise ServerGone("the server exited (status %s) while starting: %s" % (self.p.returncode, self.tail()))
                sys.exit("bench: %s did not start:\n%s" % (binary, log))
            time.sleep(0.05)
        scheme = "https" if tls else "http"
        self.http = "%s://127.0.0.1:%s" % (scheme, open(self.port_file).read().strip())
        self.grpc = "%s://127.0.0.1:%d" % (scheme, self.gport)
        self.ctx = ssl.create_default_context(cafile=tls[0]) if tls else None

    def channel(self, grpc):
        target, opts = self.grpc.split("://", 1)[1], [("grpc.max_receive_message_length", 64 << 20)]
        if not self.tls:
            return grpc.insecure_channel(target, options=opts)
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(open(self.tls[0], "rb").read()), options=opts)

    def urlopen(self, req, timeout):
        return urllib.request.urlopen(req, timeout=timeout, context=self.ctx)

    def tail(self):
        return " / ".join(open(self.log_path, errors="replace").read().splitlines()[-3:])

    def alive(self, what, grace=0):
        """Raises ServerGone when the server exited (another process's signal on a shared machine, a crash)."""
        try:
            self.p.wait(timeout=grace) if grace else None
        except subprocess.TimeoutExpired:
            pass
        if self.p.poll() is not None:
            raise ServerGone("the server exited (status %s) during %s: %s" % (self.p.returncode, what, self.tail()))

    def blas_core(self):
        m = re.findall(r"OpenBLAS core (\S+)", open(self.log_path, errors="replace").read())
        return m[-1] if m else "?"

    def grpc_codes(self, method="ModelInfer"):
        """The server's count of a method's gRPC calls by grpc-status, or None without the metric."""
        try:
            metrics = self.urlopen(self.http + "/metrics", timeout=30).read().decode().splitlines()
        except OSError:
            return None
        codes = {}
        for l in metrics:
            m = re.match(r'adapterd_grpc_requests_total\{method="%s",code="(\w+)"\} (\S+)' % method, l)
            if m:
                codes[m.group(1)] = float(m.group(2))
        return codes

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


# ---- the calls ----

def check(a, srv, k):
    """One call of each protocol: equal labels, the refused calls refused (REST's status kept for the rows);
    and each heavy message's answer (code, message, time)."""
    grpc, pbg = k["grpc"], k["pbg"]
    ch = srv.channel(grpc)
    try:
        grpc.channel_ready_future(ch).result(timeout=60)
        g = pbg.GRPCInferenceServiceStub(ch).ModelInfer(k["req"], timeout=120)
        r = json.loads(srv.urlopen(urllib.request.Request(srv.http + "/v2/models/%s/infer" % a.task, json.dumps(k["rest"]).encode(),
                                                                      {"Content-Type": "application/json"}), timeout=120).read())
        gl = [b.decode() for b in next(t for t in g.outputs if t.name == "label").contents.bytes_contents]
        rl = next(t for t in r["outputs"] if t["name"] == "label")["data"]
        if gl != rl:
            sys.exit("bench: gRPC and REST disagree: %s vs %s" % (gl, rl))
        raw = ch.unary_unary(SERVICE + "ModelInfer")
        out = {"rest_refused": None, "grpc_refused": None, "heavy": {}}
        if "refused" in a.rows:
            try:
                raw(k["refused_msg"], timeout=120)
                out["grpc_refused"] = "OK"
            except grpc.RpcError as e:
                out["grpc_refused"] = "%s: %s" % (e.code().name, e.details())
            try:
                srv.urlopen(urllib.request.Request(srv.http + "/v2/models/%s/infer" % a.task, json.dumps(k["rest_refused"]).encode(),
                                                              {"Content-Type": "application/json"}), timeout=120)
                out["rest_refused"] = 200
            except urllib.error.HTTPError as e:
                out["rest_refused"], out["rest_refused_body"] = e.code, e.read().decode(errors="replace")[:200]
            if not out["grpc_refused"].startswith("INVALID_ARGUMENT") or out["rest_refused"] < 400:
                sys.exit("bench: the refused calls were not refused: gRPC %s, REST %s" % (out["grpc_refused"], out["rest_refused"]))
        for kind, (msg, _) in k["heavy"].items():
            t0 = time.perf_counter()
            try:
                code, detail = "OK", "%d bytes" % len(raw(msg, timeout=120))
            except grpc.RpcError as e:
                code, detail = e.code().name, (e.details() or "")[:90]
            out["heavy"][kind] = {"code": code, "detail": detail, "ms": (time.perf_counter() - t0) * 1e3}
    finally:
        ch.close()
    return out


def row_specs(a, files):
    """(name, group, gRPC?, path, body file, headers, h1) of each row's pair, gRPC first."""
    inf = "/v2/models/%s/infer" % a.task
    specs = []
    for g in a.rows:
        if g == "live":
            specs += [("gRPC ServerLive", g, True, SERVICE + "ServerLive", files["live"], GRPC_HEADERS, False),
                      ("REST GET /v2/health/live", g, False, "/v2/health/live", None, [], True)]
        elif g == "infer":
            specs += [("gRPC ModelInfer", g, True, SERVICE + "ModelInfer", files["grpc"], GRPC_HEADERS, False),
                      ("REST POST " + inf, g, False, inf, files["rest"], JSON_HEADERS, True)]
        elif g == "refused":
            specs += [("gRPC ModelInfer, refused", g, True, SERVICE + "ModelInfer", files["grpc_refused"], GRPC_HEADERS, False),
                      ("REST POST %s, refused" % inf, g, False, inf, files["rest_refused"], JSON_HEADERS, True)]
        else:
            sys.exit("bench: unknown --rows group %s (%s)" % (g, ", ".join(ROW_GROUPS)))
    return specs


def measure_row(a, srv, pids, spec, c, tmp, expect):
    name, group, is_grpc, path, body, hdr, h1 = spec
    log = os.path.join(tmp, "row.log")
    before = srv.grpc_codes() if is_grpc and group != "live" else None
    p = h2load(h2load_cmd((srv.grpc if is_grpc else srv.http) + path, body, hdr, c, a.duration, log, h1))
    smp = Sampler([srv.p.pid, p.pid] + pids)
    out = p.communicate()[0]
    smp.stop()
    srv.alive("%s c=%d" % (name, c))
    rows = read_log(log, a.duration)
    if not rows:
        sys.exit("bench: h2load logged no request for %s c=%d (no answer within the window?):\n%s" % (name, c, out))
    x = stats(rows, smp, 200 if is_grpc else expect.get(group, 200))
    after = srv.grpc_codes() if before is not None else None
    if before is not None and after is not None:  # calls answered with another grpc-status than the row's
        want = "OK" if group == "infer" else "INVALID_ARGUMENT"
        x["unexpected"] = sum(v - before.get(code, 0) for code, v in after.items() if code != want)
    return x


def measure_heavy(a, srv, pids, kind, files, heavy, tmp):
    hp, hlog, plog = None, os.path.join(tmp, "heavy.log"), os.path.join(tmp, "probe.log")
    if kind != "none":
        hp = h2load(h2load_cmd(srv.grpc + SERVICE + "ModelInfer", heavy[kind][1], GRPC_HEADERS, 1, a.heavy_duration + 2, hlog, False,
                               warmup=0))
    pp = h2load(h2load_cmd(srv.grpc + SERVICE + "ServerLive", files["live"], GRPC_HEADERS, 1, a.heavy_duration, plog, False,
                           warmup=1, rps=a.probe_rps, m=PROBE_STREAMS))
    smp = Sampler([srv.p.pid, pp.pid] + ([hp.pid] if hp else []) + pids)
    pout = pp.communicate()[0]
    hout = hp.communicate()[0] if hp else ""
    smp.stop()
    srv.alive("the heavy probe (%s)" % kind)
    rows = read_log(plog, a.heavy_duration)
    if not rows:
        sys.exit("bench: the ServerLive probe logged nothing (%s):\n%s" % (kind, pout))
    x = stats(rows, smp)
    r = {"probe_n": x["n"], "probe_bad": x["bad"], "p50": x["p50"], "p99": x["p99"], "max": x["max"], "others": x["others"],
         "over": sum(1 for q in rows if q[2] / 1000 >= TARGET_MS)}
    if hp:
        hrows = read_log(hlog, a.heavy_duration + 2)
        if hrows:
            h = stats(hrows, smp)
            r.update(heavy_n=h["n"], heavy_p50=h["p50"], heavy_cpu_ms=h["cpu_us"] / 1000)
        else:  # not one heavy call answered within the window
            r.update(heavy_n=0, heavy_p50=float("nan"), heavy_cpu_ms=float("nan"), heavy_out=hout[-300:])
    return r


def heavy_messages(pb, a):
    """Each --heavy kind's ModelInferRequest of about --heavy-bytes, serialized."""
    out = {}
    for kind in a.heavy:
        r = pb.ModelInferRequest(model_name=a.task)
        if kind == "shape":  # one input, one text, a shape of ~1M entries of 1 (one byte each, packed)
            t = r.inputs.add(name="text", datatype="BYTES")
            t.contents.bytes_contents.append(TEXTS[0].encode())
            t.shape.extend([1] * (a.heavy_bytes - r.ByteSize() - 8))
        elif kind == "inputs":  # the default --max-inputs (64) texts filling the message, truncated by the server
            words = " ".join(TEXTS) + " "
            per = (a.heavy_bytes - 64 * 8 - 64) // 64
            text = (words * (per // len(words) + 1))[:per].encode()
            r.inputs.add(name="text", datatype="BYTES", shape=[64]).contents.bytes_contents.extend([text] * 64)
        elif kind == "tensors":  # many input tensors of one short text each (the parser takes "text" and "text_pair")
            one = pb.ModelInferRequest.InferInputTensor(name="t00000", datatype="BYTES", shape=[1])
            one.contents.bytes_contents.append(TEXTS[2].encode())
            for i in range((a.heavy_bytes - 64) // (one.ByteSize() + 3)):
                t = r.inputs.add(name="t%05d" % i, datatype="BYTES", shape=[1])
                t.contents.bytes_contents.append(TEXTS[2].encode())
        else:
            sys.exit("bench: unknown --heavy kind %s (%s, or none)" % (kind, ", ".join(HEAVY_KINDS)))
        out[kind] = r.SerializeToString()
    return out


# ---- the report ----

def fmt(x, nd=2):
    if x != x:
        return "-"
    if abs(x) >= 1000:
        return "{:,.0f}".format(x).replace(",", " ")
    if abs(x) >= 100:
        return "%.0f" % x
    return ("%%.%df" % nd) % x


def ratio_cell(v):
    v = [x for x in v if x == x]
    if not v:
        return "-"
    return "%.2f [%.2f-%.2f]" % (median(v), min(v), max(v)) if len(v) > 1 else "%.2f" % v[0]


def ratios(xs, ys):
    return [x / y if y else float("nan") for x, y in zip(xs, ys)]


def report(a, labels, rounds, keys, info):
    R = len(rounds)

    def series(label, key, field):
        return [rd[label]["rows"][key][field] for rd in rounds]

    print()
    print("Per binary: medians over %d round(s) of %d s windows; CPU = the server's utime+stime per request answered" % (R, a.duration))
    print()
    print("| binary | call | c | req/s | p50 ms | p99 ms | CPU us/req | requests/round | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label in labels:
        for key in keys:
            name, c = key.rsplit("|", 1)
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
                label, name, c, fmt(median(series(label, key, "rps")), 1), fmt(median(series(label, key, "p50"))),
                fmt(median(series(label, key, "p99"))), fmt(median(series(label, key, "cpu_us")), 1),
                fmt(median(series(label, key, "n")), 0), sum(series(label, key, "bad"))))
    print()
    print("gRPC / REST: median [min-max] of the per-round ratios (same server, same round)")
    print()
    print("| binary | calls | c | req/s | p50 | p99 | CPU/req |")
    print("|---|---|---|---|---|---|---|")
    pairs = [(k, keys[i + 1]) for i, k in enumerate(keys) if k.startswith("gRPC")]
    for label in labels:
        for g, r in pairs:
            name, c = g.rsplit("|", 1)
            cells = [ratio_cell(ratios(series(label, g, f), series(label, r, f))) for f in ("rps", "p50", "p99", "cpu_us")]
            print("| %s | %s / %s | %s | %s |" % (label, name[5:], r.rsplit("|", 1)[0][5:], c, " | ".join(cells)))
    for other in labels[1:]:
        print()
        print("%s / %s: median [min-max] of the per-round ratios (the two servers' windows of a row seconds apart)" % (other, labels[0]))
        print()
        print("| call | c | req/s | p50 | p99 | CPU/req |")
        print("|---|---|---|---|---|---|")
        for key in keys:
            name, c = key.rsplit("|", 1)
            cells = [ratio_cell(ratios(series(other, key, f), series(labels[0], key, f))) for f in ("rps", "p50", "p99", "cpu_us")]
            print("| %s | %s | %s |" % (name, c, " | ".join(cells)))
    if a.heavy_duration > 0:
        print()
        print("Heavy calls back to back on one gRPC connection, ServerLive on another at %d/s on schedule (up to %d in flight): "
              "%d s windows, medians over %d round(s), max over all (target: under %.0f ms)" % (a.probe_rps, PROBE_STREAMS, a.heavy_duration,
                                                                                             R, TARGET_MS))
        print()
        print("| binary | heavy call | its answer | heavy calls/round | heavy call p50 ms | server CPU ms/heavy call | "
              "ServerLive p50 ms | p99 ms | max ms | probes >= %.0f ms |" % TARGET_MS)
        print("|---|---|---|---|---|---|---|---|---|---|")
        for label in labels:
            for kind in ["none"] + a.heavy:
                hs = [rd[label]["heavy"][kind] for rd in rounds]

                def g(f):
                    return [h[f] for h in hs if f in h]

                if kind == "none":
                    desc, cells = "none (the probe alone)", ["-"] * 4
                else:
                    desc = "%s, %s bytes" % (kind, fmt(len(info["heavy"][kind]), 0))
                    cells = [info["answers"][label]["heavy"][kind]["code"], fmt(median(g("heavy_n")), 0), fmt(median(g("heavy_p50")), 1),
                             fmt(median(g("heavy_cpu_ms")), 1)]
                print("| %s | %s | %s | %s | %s | %s | %d / %d |" % (label, desc, " | ".join(cells), fmt(median(g("p50"))),
                                                                     fmt(median(g("p99"))), fmt(max(g("max"))), sum(g("over")),
                                                                     sum(g("probe_n"))))
        for label in labels:
            print("%s heavy answers (its first check call): %s" % (label, "; ".join(
                "%s %s (%s) in %.0f ms" % (k, v["code"], v["detail"], v["ms"]) for k, v in info["answers"][label]["heavy"].items()) or "-"))
    print()
    print("Conditions (load average at the round's start; other processes' share of the machine's CPU during each binary's windows, "
          "median [max]):")
    for i, rd in enumerate(rounds):
        def others(label):
            v = [x["others"] for x in list(rd[label]["rows"].values()) + list(rd[label]["heavy"].values())] or [float("nan")]
            return 100 * median(v), 100 * max(v)

        print("  round %d: load %.2f; %s%s" % (i + 1, rd["load"], ", ".join("%s %.0f%% [%.0f%%]" % ((label,) + others(label)) for label in labels),
            "; measured again after its server exited under it: " + ", ".join(rd["redone"]) if rd["redone"] else ""))
    un = {l: [x.get("unexpected") for rd in rounds for x in rd[l]["rows"].values() if "unexpected" in x] for l in labels}
    print("gRPC ModelInfer calls of the rows answered with another grpc-status than the row's (the servers' own count): %s" % ", ".join(
        "%s %s" % (l, "- (no ModelInfer row)" if not v else "n/a (no metric)" if any(x is None for x in v) else "%d" % sum(v))
        for l, v in un.items()))
    print("load average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


# ---- the run ----

def main():
    ap = argparse.ArgumentParser(description="gRPC against REST, for one adapterd or several in the same run")
    ap.add_argument("--adapterd", action="append", required=True, help="an adapterd binary (repeat to compare)")
    ap.add_argument("--label", action="append", help="a name per --adapterd, in order (default: its commit)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--registry", default=os.path.join(HERE, "..", "..", "examples", "registry"))
    ap.add_argument("--task", default="sentiment")
    ap.add_argument("--duration", type=int, default=10, help="seconds per row, after a 1 s warm-up")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--rows", default=",".join(ROW_GROUPS), help="row groups: " + ",".join(ROW_GROUPS))
    ap.add_argument("--inputs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="engine threads of each server")
    ap.add_argument("--core", default="same", help="same (default), auto or an OpenBLAS core name")
    ap.add_argument("--heavy", default=",".join(HEAVY_KINDS), help="heavy kinds (%s), or none: the probe alone" % ",".join(HEAVY_KINDS))
    ap.add_argument("--heavy-duration", type=int, default=10, help="seconds of each probe window; 0: no heavy probe")
    ap.add_argument("--heavy-bytes", type=int, default=1_040_000)
    ap.add_argument("--probe-rps", type=int, default=200)
    ap.add_argument("--serve-args", default="", help="more `adapterd serve` options, for every binary")
    ap.add_argument("--retries", type=int, default=2, help="restarts of a server that exits under the bench, per row")
    ap.add_argument("--json", help="write every round's figures to this file")
    ap.add_argument("--tls", default="", help="labels whose servers run with --tls-cert/--tls-key (both ports over TLS)")
    a = ap.parse_args()
    a.conc = [int(x) for x in a.concurrency.split(",")]
    a.rows = [x for x in a.rows.split(",") if x]
    a.heavy = [] if a.heavy in ("", "none") else a.heavy.split(",")
    if not shutil.which("h2load"):
        sys.exit("bench: h2load (Debian's nghttp2-client) is not installed")
    for b in a.adapterd:
        if not os.access(b, os.X_OK):
            sys.exit("bench: %s is not an executable" % b)
    origins = [binary_origin(b) for b in a.adapterd]
    labels = list(a.label or [])
    if len(labels) > len(a.adapterd):
        sys.exit("bench: more --label than --adapterd")
    labels += [o["commit"] if o["commit"] != "unknown" else "#%d" % (i + 1) for i, o in enumerate(origins)][len(labels):]
    if len(set(labels)) != len(labels):
        labels = ["%s#%d" % (l, i + 1) for i, l in enumerate(labels)]

    # one environment for every server, the OpenBLAS core included
    env = dict(os.environ)
    env_core = env.pop("OPENBLAS_CORETYPE", None)
    if a.core == "same":
        core = version_of(a.adapterd[0], env).get("blas_core")
        if not core or core == "unknown":
            sys.exit("bench: %s version did not say which OpenBLAS core it picks; pass --core NAME or --core auto" % a.adapterd[0])
        env["OPENBLAS_CORETYPE"] = core
        core_note = "OPENBLAS_CORETYPE=%s for every server (what %s picks on its own)" % (core, labels[0])
    elif a.core == "auto":
        core_note = "OPENBLAS_CORETYPE unset: each server picks its own"
    else:
        env["OPENBLAS_CORETYPE"] = a.core
        core_note = "OPENBLAS_CORETYPE=%s for every server (--core)" % a.core
    if env_core and env.get("OPENBLAS_CORETYPE") != env_core:
        core_note += "; the environment's OPENBLAS_CORETYPE=%s not used" % env_core
    versions = [version_of(b, env) for b in a.adapterd]

    tmp = tempfile.mkdtemp(prefix="adapterd-bench-grpc-")
    tls_labels = set(x for x in a.tls.split(",") if x)
    if tls_labels - set(labels):
        sys.exit("bench: --tls names no --label: %s" % ",".join(sorted(tls_labels - set(labels))))
    tls_files = make_certs(tmp) if tls_labels else None
    from grpc_tools import protoc
    protoc.main(["protoc", "-I" + PROTO_DIR, "--python_out=" + tmp, "--grpc_python_out=" + tmp, os.path.join(PROTO_DIR, "grpc_service.proto")])
    sys.path.insert(0, tmp)
    import grpc
    import grpc_service_pb2 as pb
    import grpc_service_pb2_grpc as pbg

    def framed(name, msg):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(b"\0" + struct.pack(">I", len(msg)) + msg)
        return path

    def json_file(name, doc):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    texts = (TEXTS * (a.inputs // len(TEXTS) + 1))[:a.inputs]
    req = pb.ModelInferRequest(model_name=a.task)
    req.inputs.add(name="text", datatype="BYTES", shape=[len(texts)]).contents.bytes_contents.extend(t.encode() for t in texts)
    msg = req.SerializeToString()
    refused = pb.ModelInferRequest()
    refused.CopyFrom(req)
    refused.outputs.add(name=REFUSED_OUTPUT)
    rest = {"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": texts}]}
    rest_refused = dict(rest, outputs=[{"name": REFUSED_OUTPUT}])
    files = {"grpc": framed("grpc.bin", msg), "rest": json_file("rest.json", rest), "live": framed("live.bin", b""),  # an empty ServerLiveRequest
             "grpc_refused": framed("grpc-refused.bin", refused.SerializeToString()), "rest_refused": json_file("rest-refused.json", rest_refused)}
    heavy = {k: (m, framed("heavy-%s.bin" % k, m)) for k, m in heavy_messages(pb, a).items()}
    calls = {"grpc": grpc, "pbg": pbg, "req": req, "rest": rest, "refused_msg": refused.SerializeToString(),
             "rest_refused": rest_refused, "heavy": heavy}

    cpuinfo = open("/proc/cpuinfo").read()

    def field(k):
        return next((l.split(":", 1)[1].strip() for l in cpuinfo.splitlines() if re.match(k + r"\s*:", l)), "?")

    print("CPU: %s (family %s, model %s), %d online CPUs (%d usable here), CPU level %s; load average before: %s" % (
        field("model name"), field("cpu family"), field("model"), os.cpu_count(), len(os.sched_getaffinity(0)),
        versions[0].get("cpu_level_detected", "?"), " ".join(open("/proc/loadavg").read().split()[:3])))
    print("OpenBLAS: %s" % core_note)
    for label, o, v in zip(labels, origins, versions):
        print("  %s: %s, commit %s%s%s (\"%s\"), sha256 %s, version %s" % (
            label, o["path"], o["commit"], " + uncommitted changes in its tree" if o["dirty"] else "",
            ", the binary older than that commit: rebuild?" if o["stale"] else "", o["subject"], o["sha256"], v.get("version", "?")))
    if len({o["sha256"] for o in origins}) < len(origins):
        print("  note: some binaries are byte for byte the same (a sanity check run?)")
    print("task %s, %d input(s) per request; gRPC message %d bytes, REST body %d bytes; %d s per row after a 1 s warm-up, "
          "concurrency %s; %d round(s), servers alternating row by row; engine threads %d%s" % (
              a.task, len(texts), len(msg) + 5, os.path.getsize(files["rest"]), a.duration, a.concurrency, a.rounds, a.threads,
              "; serve options: " + a.serve_args if a.serve_args else ""), flush=True)

    specs = row_specs(a, files)
    steps = [("row", s, c) for c in a.conc for s in specs] + ([("heavy", k) for k in ["none"] + a.heavy] if a.heavy_duration > 0 else [])
    keys = ["%s|%d" % (s[0], c) for c in a.conc for s in specs]
    info = {"heavy": {k: m for k, (m, _) in heavy.items()}, "answers": {}, "cores": {l: set() for l in labels}}
    rounds, n_srv = [], [0]

    def start(i, r):
        for attempt in range(a.retries + 1):
            n_srv[0] += 1
            try:
                srv = Server(a, a.adapterd[i], env, tmp, "%d-%d-%d" % (r, i, n_srv[0]), tls_files if labels[i] in tls_labels else None)
                try:
                    ans = check(a, srv, calls)
                except Exception:
                    srv.alive("the check calls", grace=3)
                    raise
            except ServerGone as e:
                print("  %s: %s; starting it again" % (labels[i], e), flush=True)
                if attempt == a.retries:
                    sys.exit("bench: giving up (--retries %d)" % a.retries)
                continue
            info["answers"].setdefault(labels[i], ans)
            return srv, ans

    try:
        for r in range(a.rounds):
            rd = {"load": float(open("/proc/loadavg").read().split()[0]), "redone": []}
            servers, expect = {}, {}
            for i in range(len(labels)):
                servers[i], ans = start(i, r)
                expect[i] = {"refused": ans["rest_refused"]}
                rd[labels[i]] = {"rows": {}, "heavy": {}}
            try:
                for si, step in enumerate(steps):
                    order = list(range(len(labels)))
                    if (r + si) % 2:
                        order.reverse()
                    for i in order:
                        for attempt in range(a.retries + 1):
                            srv = servers[i]
                            idle = [servers[j].p.pid for j in servers if j != i]
                            try:
                                if step[0] == "row":
                                    rd[labels[i]]["rows"]["%s|%d" % (step[1][0], step[2])] = measure_row(a, srv, idle, step[1], step[2], tmp,
                                                                                                        expect[i])
                                else:
                                    rd[labels[i]]["heavy"][step[1]] = measure_heavy(a, srv, idle, step[1], files, heavy, tmp)
                                break
                            except ServerGone as e:
                                print("  round %d, %s: %s; measuring it again on a new server" % (r + 1, labels[i], e), flush=True)
                                if attempt == a.retries:
                                    sys.exit("bench: giving up (--retries %d)" % a.retries)
                                info["cores"][labels[i]].add(srv.blas_core())
                                srv.stop()
                                servers[i] = start(i, r)[0]
                                rd["redone"].append(labels[i])
            finally:
                for i, srv in servers.items():
                    info["cores"][labels[i]].add(srv.blas_core())
                    srv.stop()
            rounds.append(rd)
            live, inf = [k for k in keys if "ServerLive" in k][:1], [k for k in keys if k.startswith("gRPC ModelInfer|")][:1]
            print("round %d/%d done (load average %.2f at its start)%s" % (r + 1, a.rounds, rd["load"], "".join(
                "; %s: %s" % (l, ", ".join("%s %s req/s" % (k[5:].replace("|", " c="), fmt(rd[l]["rows"][k]["rps"], 1)) for k in live + inf))
                for l in labels)), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("OpenBLAS core each server reported: %s" % ", ".join("%s %s" % (l, "/".join(sorted(c))) for l, c in info["cores"].items()))
    for label in labels:
        ans = info["answers"][label]
        if ans["grpc_refused"]:
            print("%s refused calls: gRPC %s; REST %s %s" % (label, ans["grpc_refused"][:120], ans["rest_refused"], ans.get("rest_refused_body", "")[:120]))
    report(a, labels, rounds, keys, info)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"labels": labels, "binaries": origins, "versions": versions, "core": core_note, "args": vars(a),
                       "answers": info["answers"], "rounds": rounds}, f, indent=1, default=str)


main()
