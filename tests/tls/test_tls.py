"""test_tls.py - --tls-cert/--tls-key/--tls-client-ca on both ports of a live `adapterd serve`, from the outside,
with certificates made at test time by the openssl CLI (a CA; two server certificates for localhost and
127.0.0.1, serials 0x1001 and 0x1002; a client certificate; a self-signed client certificate) in a temp dir.

- start: a missing file and a key that is not the certificate's stop the start at once, exit 2 (configuration),
  the message naming the file; --tls-cert without --tls-key too; a start that fails later (--host) exits, not hangs;
- HTTP: curl over HTTPS (/health, predict with a tenant key, 401 without); plain HTTP to the TLS port gets no
  HTTP answer; /metrics exports the reload counters;
- gRPC: Python's grpc.secure_channel (ServerLive, ModelInfer with `authorization` metadata, a 320 KiB message,
  32 concurrent calls on one channel, UNAUTHENTICATED without a key, RESOURCE_EXHAUSTED past the tenant's request
  bucket); an insecure (h2c) channel and the h2c preface to the TLS port are refused; a TLS client that does not
  negotiate ALPN h2 is refused;
- the real npm clients (openai, @huggingface/inference) over TLS with the key (tests/clients/tls.mjs);
- rotation while connected, as Kubernetes updates a Secret volume (the ..data symlink swapped): a keep-alive
  HTTPS connection and an open gRPC channel made before keep working after on the same connections (no new
  handshake counted), new HTTPS connections from 4 threads through the swap are all served, a new connection on
  either port sees the new serial; a broken pair (key of the other certificate) keeps the last good one, logged
  and counted;
- SIGTERM with TLS connections open on both ports (one before its handshake) drains and exits 0 at once;
- mutual TLS: without a client certificate, or with one another CA signed, refused on both ports, with one
  served; a connection over --max-connections-per-ip refused UNAVAILABLE with the reason;
- a connection that never starts its handshake is closed after --header-timeout-ms on both ports.

    test_tls.py <adapterd> <registry> <proto dir> <tests/clients dir>
(ADAPTERD_TEST_SERVER, when set, names another build of adapterd to run, as for the other integration tests.)
"""
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import grpc
from grpc_tools import protoc

ADAPTERD, REGISTRY, PROTO_DIR, CLIENTS = sys.argv[1:5]
ADAPTERD = os.environ.get("ADAPTERD_TEST_SERVER") or ADAPTERD  # another build (CI: ThreadSanitizer's)
FAILS = []
KEY = "tls-test-key-1"
SLOW_KEY = "tls-test-key-slow"


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certs(d):
    """CA, two server pairs (serials 0x1001, 0x1002), a client pair, a self-signed client pair; EC P-256 for speed."""
    def key(name):
        sh("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{d}/{name}.key")

    key("ca")
    sh("openssl", "req", "-x509", "-new", "-key", f"{d}/ca.key", "-out", f"{d}/ca.crt", "-days", "2", "-subj", "/CN=adapterd test CA")
    for name, serial, ext in (("srv1", "0x1001", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                              ("srv2", "0x1002", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                              ("client", "0x2001", "extendedKeyUsage=clientAuth")):
        key(name)
        sh("openssl", "req", "-new", "-key", f"{d}/{name}.key", "-out", f"{d}/{name}.csr", "-subj", f"/CN={name}")
        with open(f"{d}/{name}.ext", "w") as f:
            f.write(ext + "\n")
        sh("openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.crt", "-CAkey", f"{d}/ca.key", "-set_serial",
           serial, "-days", "2", "-out", f"{d}/{name}.crt", "-extfile", f"{d}/{name}.ext")
    key("rogue")  # a client certificate no trusted CA signed (self-signed)
    sh("openssl", "req", "-x509", "-new", "-key", f"{d}/rogue.key", "-out", f"{d}/rogue.crt", "-days", "2", "-subj", "/CN=rogue")


def secret_dir(d, cert, key, version):
    """A Secret volume's layout: tls.crt and tls.key are symlinks through ..data, which Kubernetes swaps
    atomically to a new ..<version> directory on an update (so cert and key change together)."""
    vdir = f"{d}/live/..{version}"
    os.makedirs(vdir)
    shutil.copy(cert, f"{vdir}/tls.crt")
    shutil.copy(key, f"{vdir}/tls.key")
    tmp = f"{d}/live/..data_tmp"
    os.symlink(f"..{version}", tmp)
    os.replace(tmp, f"{d}/live/..data")
    for f in ("tls.crt", "tls.key"):
        if not os.path.islink(f"{d}/live/{f}"):
            os.symlink(f"..data/{f}", f"{d}/live/{f}")


def stubs(tmp):
    rc = protoc.main(["protoc", "-I" + PROTO_DIR, "--python_out=" + tmp, "--grpc_python_out=" + tmp,
                      os.path.join(PROTO_DIR, "grpc_service.proto")])
    if rc:
        sys.exit("grpc_tools.protoc failed on grpc_service.proto")
    sys.path.insert(0, tmp)
    import grpc_service_pb2 as pb
    import grpc_service_pb2_grpc as pbg
    return pb, pbg


class Server:
    def __init__(self, tmp, name, *extra):
        self.port_file = os.path.join(tmp, f"port-{name}")
        self.grpc_port = free_port()
        self.log = open(os.path.join(tmp, f"server-{name}.log"), "ab")
        self.p = subprocess.Popen([ADAPTERD, "serve", "--registry", REGISTRY, "--port", "0", "--port-file", self.port_file,
                                   "--grpc-port", str(self.grpc_port), "--threads", "1", "--watch", "off", *extra],
                                  stdout=self.log, stderr=self.log)
        deadline = time.time() + 60
        while not os.path.exists(self.port_file):
            if self.p.poll() is not None or time.time() > deadline:
                sys.exit("adapterd did not start (see %s)" % self.log.name)
            time.sleep(0.05)
        self.port = int(open(self.port_file).read())
        self.https = f"https://localhost:{self.port}"

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(20)
        except subprocess.TimeoutExpired:
            self.p.kill()


def curl(url, ca, *extra):
    r = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", ca, "-o", "-", "-w", "\n%{http_code}", *extra, url],
                       capture_output=True, text=True)
    body, _, code = r.stdout.rpartition("\n")
    return r.returncode, int(code or 0), body


def metric(srv, ca, name):
    _, code, body = curl(srv.https + "/metrics", ca)
    m = re.search("^" + re.escape(name) + r" (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def peer_serial(port, ca, alpn=None):
    """The serial of the certificate a new TLS connection to port is served."""
    ctx = ssl.create_default_context(cafile=ca)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s, ctx.wrap_socket(s, server_hostname="localhost") as t:
        der = t.getpeercert(binary_form=True)
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"], input=der, capture_output=True).stdout
    return out.decode().strip().split("=")[-1].lstrip("0").lower()


def plain_refused(port, payload):
    """Sends plaintext to a TLS port; True when nothing that reads as HTTP or HTTP/2 comes back."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(payload)
            got = b""
            while len(got) < 64:
                b = s.recv(64)
                if not b:
                    break
                got += b
    except (ConnectionResetError, socket.timeout):
        return True
    # an HTTP/1 status line, or HTTP/2's SETTINGS frame (type 4) that a served h2c connection opens with
    return not got.startswith(b"HTTP/") and not (len(got) >= 9 and got[3] == 4)


def grpc_code(fn):
    try:
        fn()
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def infer_req(pb, text):
    r = pb.ModelInferRequest(model_name="cls_lora")
    r.inputs.add(name="text", datatype="BYTES", shape=[1]).contents.bytes_contents.append(text.encode())
    return r


def main():
    tmp = tempfile.mkdtemp(prefix="adapterd-tls-")
    servers = []
    try:
        run(tmp, servers)
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("all TLS checks passed")


def run(tmp, servers):
    t0 = time.time()
    make_certs(tmp)
    ca = f"{tmp}/ca.crt"
    pb, pbg = stubs(tmp)

    # ---- start-up: a bad file stops the start at once, as a configuration error ----
    for what, cert, key in (("a missing certificate", f"{tmp}/nope.crt", f"{tmp}/srv1.key"),
                            ("a key that is not the certificate's", f"{tmp}/srv1.crt", f"{tmp}/srv2.key")):
        t = time.time()
        r = subprocess.run([ADAPTERD, "serve", "--registry", REGISTRY, "--port", "0", "--tls-cert", cert, "--tls-key", key],
                           capture_output=True, text=True, timeout=30)
        named = (cert if "missing" in what else key) in r.stderr
        check(r.returncode == 2 and named and time.time() - t < 10,
              f"start with {what}: exit {r.returncode} in {time.time() - t:.1f} s, message names the file ({r.stderr.strip()[-160:]})")
    r = subprocess.run([ADAPTERD, "serve", "--registry", REGISTRY, "--port", "0", "--tls-cert", f"{tmp}/srv1.crt"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "--tls-key" in r.stderr, "--tls-cert without --tls-key: exit 2")
    # a start that fails once the registry is open and the watch has begun ends at once (it used to hang in the
    # loop's last run, the watch's rescan re-queueing itself)
    t = time.time()
    try:
        r = subprocess.run([ADAPTERD, "serve", "--registry", REGISTRY, "--port", "0", "--host", "not-an-address", "--tls-cert",
                            f"{tmp}/srv1.crt", "--tls-key", f"{tmp}/srv1.key"], capture_output=True, text=True, timeout=30)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = None
    check(rc not in (0, None) and time.time() - t < 15, f"a start that fails after the watch began exits ({rc}, {time.time() - t:.1f} s)")

    # ---- the server: TLS on both ports, tenants' keys ----
    digest = lambda k: "sha256:" + hashlib.sha256(k.encode()).hexdigest()
    keys = {"tenants": [{"name": "app", "keys": [digest(KEY)], "predict": ["*"]},
                        {"name": "slow", "keys": [digest(SLOW_KEY)], "predict": ["*"], "requests_per_s": 0.01, "burst": 1}]}
    with open(f"{tmp}/keys.json", "w") as f:
        json.dump(keys, f)
    secret_dir(tmp, f"{tmp}/srv1.crt", f"{tmp}/srv1.key", "v1")
    srv = Server(tmp, "tls", "--tls-cert", f"{tmp}/live/tls.crt", "--tls-key", f"{tmp}/live/tls.key", "--keys", f"{tmp}/keys.json")
    servers.append(srv)
    auth = ["-H", "Authorization: Bearer " + KEY]
    predict = ["-H", "Content-Type: application/json", "-d", json.dumps({"inputs": "the movie was great", "tasks": ["cls_lora"]})]

    rc, code, _ = curl(srv.https + "/health", ca)
    check(rc == 0 and code == 200, f"curl https /health: 200 (curl rc {rc}, {code})")
    rc, code, body = curl(srv.https + "/v1/predict", ca, *auth, *predict)
    check(code == 200 and "cls_lora" in body, f"curl https predict with the tenant key: 200 ({code} {body[:120]})")
    rc, code, _ = curl(srv.https + "/v1/predict", ca, *predict)
    check(code == 401, f"curl https predict without a key: 401 ({code})")
    rc, code, _ = curl(f"http://127.0.0.1:{srv.port}/health", ca)
    check(code == 0 and rc != 0, f"curl plain http to the TLS port: no HTTP answer (curl rc {rc}, status {code})")
    check(plain_refused(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), "plain HTTP/1.1 bytes to the TLS port: not served")
    check(metric(srv, ca, "adapterd_tls_reloads_total") == 0 and metric(srv, ca, "adapterd_tls_reload_errors_total") == 0,
          "/metrics: adapterd_tls_reloads_total and _errors_total exported, 0")

    # ---- gRPC over TLS ----
    creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
    target = f"localhost:{srv.grpc_port}"
    ch = grpc.secure_channel(target, creds)
    stub = pbg.GRPCInferenceServiceStub(ch)
    md = [("authorization", "Bearer " + KEY)]
    check(stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live, "grpc.secure_channel ServerLive")
    resp = stub.ModelInfer(infer_req(pb, "the movie was great"), metadata=md, timeout=10)
    check(resp.model_name == "cls_lora" and len(resp.outputs) > 0, "grpc.secure_channel ModelInfer with authorization metadata")
    # a message of many records, arriving over several reads (records split across them), and an answer as
    # large: 8 inputs of 40 KiB each
    big = pb.ModelInferRequest(model_name="cls_lora")
    texts = [("input %d " % i + "the movie was great " * 2500)[:40 * 1024].encode() for i in range(8)]
    big.inputs.add(name="text", datatype="BYTES", shape=[8]).contents.bytes_contents.extend(texts)
    resp = stub.ModelInfer(big, metadata=md, timeout=30)
    check(resp.model_name == "cls_lora" and list(resp.outputs[0].shape)[0] == 8,
          f"gRPC over TLS: a {big.ByteSize() // 1024} KiB ModelInfer answered for its 8 inputs")
    futs = [stub.ModelInfer.future(infer_req(pb, "call %d was great" % i), metadata=md, timeout=30) for i in range(32)]
    ok = sum(1 for f in futs if f.result().model_name == "cls_lora")
    check(ok == 32, f"gRPC over TLS: 32 concurrent ModelInfer calls on one channel all answered ({ok})")
    check(grpc_code(lambda: stub.ModelInfer(infer_req(pb, "x"), timeout=10)) == grpc.StatusCode.UNAUTHENTICATED,
          "grpc.secure_channel ModelInfer without a key: UNAUTHENTICATED")
    slow = [("authorization", "Bearer " + SLOW_KEY)]
    first = grpc_code(lambda: stub.ModelInfer(infer_req(pb, "x"), metadata=slow, timeout=10))
    second = grpc_code(lambda: stub.ModelInfer(infer_req(pb, "x"), metadata=slow, timeout=10))
    check(first == grpc.StatusCode.OK and second == grpc.StatusCode.RESOURCE_EXHAUSTED,
          f"gRPC over TLS, a tenant past its request bucket: RESOURCE_EXHAUSTED ({first}, {second})")
    ins = grpc.insecure_channel(f"127.0.0.1:{srv.grpc_port}")
    code = grpc_code(lambda: pbg.GRPCInferenceServiceStub(ins).ServerLive(pb.ServerLiveRequest(), timeout=3))
    check(code == grpc.StatusCode.UNAVAILABLE, f"an insecure (h2c) channel to the TLS gRPC port: refused ({code})")
    ins.close()
    check(plain_refused(srv.grpc_port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")),
          "the h2c preface to the TLS gRPC port: no SETTINGS back")
    for alpn, what in ((["http/1.1"], "ALPN http/1.1 only"), (None, "no ALPN")):
        try:
            ctx = ssl.create_default_context(cafile=ca)
            if alpn:
                ctx.set_alpn_protocols(alpn)
            with socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=5) as s, ctx.wrap_socket(s, server_hostname="localhost") as t:
                t.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
                got = t.recv(64)
            refused = not (len(got) >= 9 and got[3] == 4)
        except (ssl.SSLError, ConnectionResetError, OSError):
            refused = True
        check(refused, f"a TLS client with {what} on the gRPC port: refused")
    for ver in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = ssl.create_default_context(cafile=ca)
        ctx.minimum_version = ctx.maximum_version = ver
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=5) as s, ctx.wrap_socket(s, server_hostname="localhost") as t:
            t.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
            got = t.recv(64)
        check(len(got) >= 9 and got[3] == 4, f"gRPC port, {ver.name} with ALPN h2: served (the server's SETTINGS)")
    check(peer_serial(srv.grpc_port, ca, ["h2"]) == "1001" and peer_serial(srv.port, ca) == "1001",
          "both ports serve the first certificate (serial 1001)")

    # ---- the real npm clients with the key over TLS ----
    if shutil.which("node") and os.path.isdir(os.path.join(CLIENTS, "node_modules", "openai")):
        r = subprocess.run(["node", os.path.join(CLIENTS, "tls.mjs"), srv.https, KEY], capture_output=True, text=True,
                           env=dict(os.environ, NODE_EXTRA_CA_CERTS=ca), timeout=60)
        print(r.stdout, end="")
        check(r.returncode == 0, "openai and @huggingface/inference over TLS with the key (tests/clients/tls.mjs)" +
              (": " + r.stderr[-400:] if r.returncode else ""))
    else:
        print("skip the npm clients: node or tests/clients/node_modules missing (npm ci in tests/clients)")

    # ---- rotation while connected ----
    keep = http.client.HTTPSConnection("localhost", srv.port, context=ssl.create_default_context(cafile=ca), timeout=10)
    keep.request("GET", "/health")
    r = keep.getresponse()
    r.read()
    sock_before = keep.sock
    check(r.status == 200, "keep-alive HTTPS connection opened before the rotation")
    check(stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live, "gRPC channel open before the rotation")
    hs = lambda port: metric(srv, ca, 'adapterd_tls_handshakes_total{port="%s"}' % port)
    grpc_hs = hs("grpc")
    # new HTTPS connections from 4 threads all through the swap: every handshake gets one whole pair
    stop, results = threading.Event(), []

    def hammer():
        ctx = ssl.create_default_context(cafile=ca)
        while not stop.is_set():
            conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=ctx, timeout=10)
            try:
                conn.request("GET", "/health")
                results.append(conn.getresponse().status)
            except (OSError, http.client.HTTPException) as e:
                results.append(repr(e))
            finally:
                conn.close()

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for th in threads:
        th.start()
    time.sleep(0.3)
    secret_dir(tmp, f"{tmp}/srv2.crt", f"{tmp}/srv2.key", "v2")
    deadline = time.time() + 5
    while metric(srv, ca, "adapterd_tls_reloads_total") != 1 and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    stop.set()
    for th in threads:
        th.join()
    check(metric(srv, ca, "adapterd_tls_reloads_total") == 1, "the swapped Secret is reloaded within a second or two")
    bad = [r for r in results if r != 200]
    check(len(results) > 8 and not bad, f"{len(results)} new HTTPS connections from 4 threads through the swap, all served ({bad[:3]})")
    keep.request("POST", "/v1/predict", body=json.dumps({"inputs": "great", "tasks": ["cls_lora"]}),
                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    r = keep.getresponse()
    r.read()
    check(r.status == 200 and keep.sock is sock_before, "the keep-alive HTTPS connection keeps working after the rotation (same socket)")
    resp = stub.ModelInfer(infer_req(pb, "still here"), metadata=md, timeout=10)
    check(resp.model_name == "cls_lora" and hs("grpc") == grpc_hs,
          f"the open gRPC channel keeps working after the rotation, no new handshake ({grpc_hs} -> {hs('grpc')})")
    s_http, s_grpc = peer_serial(srv.port, ca), peer_serial(srv.grpc_port, ca, ["h2"])
    check(s_http == "1002" and s_grpc == "1002", f"new connections see the new certificate (serial {s_http}, {s_grpc})")
    ch2 = grpc.secure_channel(target, creds)
    check(pbg.GRPCInferenceServiceStub(ch2).ServerLive(pb.ServerLiveRequest(), timeout=10).live, "a new gRPC channel after the rotation")
    ch2.close()

    # a broken pair: the key of the other certificate; the last good pair stays, the error counted
    secret_dir(tmp, f"{tmp}/srv1.crt", f"{tmp}/srv2.key", "v3")
    deadline = time.time() + 5
    while metric(srv, ca, "adapterd_tls_reload_errors_total") != 1 and time.time() < deadline:
        time.sleep(0.1)
    check(metric(srv, ca, "adapterd_tls_reload_errors_total") == 1 and metric(srv, ca, "adapterd_tls_reloads_total") == 1,
          "a broken pair is refused and counted (adapterd_tls_reload_errors_total 1)")
    check(peer_serial(srv.port, ca) == "1002" and peer_serial(srv.grpc_port, ca, ["h2"]) == "1002",
          "after the broken pair both ports still serve the last good certificate")
    log = open(srv.log.name, errors="replace").read()
    check("TLS reload refused" in log, "the refused reload is logged")
    # SIGTERM with a gRPC channel and a kept-alive HTTPS connection open: the drain ends, exit 0
    check(stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live, "gRPC channel open before SIGTERM")
    keep.request("GET", "/health")
    keep.getresponse().read()
    silent = socket.create_connection(("127.0.0.1", srv.grpc_port))  # a gRPC connection still before its handshake
    time.sleep(0.2)
    t = time.time()
    srv.p.terminate()
    try:
        rc = srv.p.wait(20)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0 and time.time() - t < 5,
          f"SIGTERM with TLS connections open on both ports (one not past its handshake): drained, exit {rc} in {time.time() - t:.1f} s")
    silent.close()
    keep.close()
    ch.close()

    # ---- mutual TLS ----
    m = Server(tmp, "mtls", "--tls-cert", f"{tmp}/srv1.crt", "--tls-key", f"{tmp}/srv1.key", "--tls-client-ca", ca,
               "--header-timeout-ms", "1000", "--max-connections-per-ip", "3")
    servers.append(m)
    # a client that connects and never starts its handshake is closed after --header-timeout-ms on both ports
    for port, what in ((m.port, "HTTP"), (m.grpc_port, "gRPC")):
        t = time.time()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            try:
                closed = s.recv(1) == b""
            except (ConnectionResetError, socket.timeout):
                closed = True
        check(closed and time.time() - t < 5, f"a silent TLS connection on the {what} port is closed after --header-timeout-ms "
              f"({time.time() - t:.1f} s)")
    rc, code, _ = curl(m.https + "/health", ca)
    check(code == 0 and rc != 0, f"mTLS HTTP without a client certificate: refused (curl rc {rc})")
    rc, code, _ = curl(m.https + "/health", ca, "--cert", f"{tmp}/client.crt", "--key", f"{tmp}/client.key")
    check(code == 200, f"mTLS HTTP with the client certificate: 200 ({code}, curl rc {rc})")
    rc, code, _ = curl(m.https + "/health", ca, "--cert", f"{tmp}/rogue.crt", "--key", f"{tmp}/rogue.key")
    check(code == 0 and rc != 0, f"mTLS HTTP with a client certificate another CA signed: refused (curl rc {rc})")
    mt = f"localhost:{m.grpc_port}"
    nocert = grpc.secure_channel(mt, creds)
    code = grpc_code(lambda: pbg.GRPCInferenceServiceStub(nocert).ServerLive(pb.ServerLiveRequest(), timeout=5))
    check(code == grpc.StatusCode.UNAVAILABLE, f"mTLS gRPC without a client certificate: refused ({code})")
    nocert.close()
    withcert = grpc.secure_channel(mt, grpc.ssl_channel_credentials(open(ca, "rb").read(), open(f"{tmp}/client.key", "rb").read(),
                                                                    open(f"{tmp}/client.crt", "rb").read()))
    check(pbg.GRPCInferenceServiceStub(withcert).ServerLive(pb.ServerLiveRequest(), timeout=10).live,
          "mTLS gRPC with the client certificate: served")
    withcert.close()
    # over --max-connections-per-ip: a TLS connection is refused as a cleartext one is, UNAVAILABLE with the reason
    cc = grpc.ssl_channel_credentials(open(ca, "rb").read(), open(f"{tmp}/client.key", "rb").read(), open(f"{tmp}/client.crt", "rb").read())
    chans = [grpc.secure_channel(mt, cc, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(4)]
    got = []
    for c in chans:
        try:
            got.append(pbg.GRPCInferenceServiceStub(c).ServerLive(pb.ServerLiveRequest(), timeout=10).live)
        except grpc.RpcError as e:
            got.append((e.code(), e.details()))
    last = got[-1]
    check(got[:3] == [True] * 3 and last[0] == grpc.StatusCode.UNAVAILABLE and "--max-connections-per-ip" in last[1],
          f"mTLS gRPC over --max-connections-per-ip 3: the 4th connection UNAVAILABLE with the reason ({last})")
    for c in chans:
        c.close()
    print(f"({time.time() - t0:.1f} s)")


main()
