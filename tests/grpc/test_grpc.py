"""test_grpc.py - KServe v2's GRPCInferenceService of `adapterd serve --grpc-port`, through a client
generated from the protocol's .proto (proto/grpc_service.proto) by grpc_tools at test time, against a
live server on the fixture registry.

Every call is checked (RepositoryIndex with the admin token, as REST's), and every ModelInfer answer against REST's POST /v2/models/{m}/infer on the
same inputs: the same tensors (names, datatypes, shapes), the same labels and integers exactly, and
the same scores within 1e-6 relative (float32 carried as JSON in REST and as float in gRPC: the same
float32 when both passes agree; a batch of another size may round the last bit differently). Raw
inputs (raw_input_contents), or binary_data_output, get raw outputs, decoded here; every tensor holds
its shape's elements. Errors: unknown model NOT_FOUND, bad
tensors INVALID_ARGUMENT, unknown method UNIMPLEMENTED, a compressed message UNIMPLEMENTED, a message
over --max-body-bytes and a full queue RESOURCE_EXHAUSTED, a passed deadline DEADLINE_EXCEEDED (the
server's: sent with nghttp as a raw grpc-timeout header), a non-gRPC content-type 415. /metrics
counts the calls by method and status. A request that stops arriving is answered after --header-timeout-ms.
SIGTERM: the calls under way finish, then the server exits 0. A connection over --max-connections-per-ip (counted
with HTTP's) fails its call UNAVAILABLE with the server's reason.

With `tls` as a fourth argument, every check runs with both ports over TLS (--tls-cert/--tls-key, a CA and a
certificate for 127.0.0.1 made with the openssl CLI): grpc.secure_channel, HTTPS for REST, nghttp and the
hand-made HTTP/2 frames over TLS with ALPN h2; the same answers are expected.

    test_grpc.py <adapterd> <registry> <proto dir> [tls]
(ADAPTERD_TEST_SERVER, when set, names another build of adapterd to run, as for the other integration tests.)
"""
import json
import re
import math
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import grpc
from grpc_tools import protoc

ADAPTERD, REGISTRY, PROTO_DIR = sys.argv[1:4]
ADAPTERD = os.environ.get("ADAPTERD_TEST_SERVER") or ADAPTERD  # another build (CI: ThreadSanitizer's)
TLS = sys.argv[4:5] == ["tls"]
TLS_FILES = None  # (ca, cert, key) once made, in TLS mode
FAILS = []
TOKEN = "grpc-test-token"


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stubs(tmp):
    rc = protoc.main(["protoc", "-I" + PROTO_DIR, "--python_out=" + tmp, "--grpc_python_out=" + tmp,
                      os.path.join(PROTO_DIR, "grpc_service.proto")])
    if rc:
        sys.exit("grpc_tools.protoc failed on grpc_service.proto")
    sys.path.insert(0, tmp)
    import grpc_service_pb2 as pb
    import grpc_service_pb2_grpc as pbg
    return pb, pbg


def make_certs(tmp):
    """TLS mode: a CA and a server certificate for 127.0.0.1 (EC P-256); HTTPS requests trust the CA from then on."""
    run = lambda *c: subprocess.run(c, check=True, capture_output=True)
    p = lambda n: os.path.join(tmp, n)
    for n in ("ca", "srv"):
        run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p(n + ".key"))
    run("openssl", "req", "-x509", "-new", "-key", p("ca.key"), "-out", p("ca.crt"), "-days", "2", "-subj", "/CN=test CA")
    run("openssl", "req", "-new", "-key", p("srv.key"), "-out", p("srv.csr"), "-subj", "/CN=127.0.0.1")
    with open(p("srv.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", p("srv.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"), "-set_serial", "1", "-days", "2",
        "-out", p("srv.crt"), "-extfile", p("srv.ext"))
    urllib.request.install_opener(urllib.request.build_opener(urllib.request.HTTPSHandler(
        context=ssl.create_default_context(cafile=p("ca.crt")))))
    return p("ca.crt"), p("srv.crt"), p("srv.key")


def channel(port, options=()):
    """A channel to the gRPC port: secure (trusting the test's CA) in TLS mode."""
    if TLS:
        return grpc.secure_channel("127.0.0.1:%d" % port, grpc.ssl_channel_credentials(open(TLS_FILES[0], "rb").read()),
                                   options=list(options))
    return grpc.insecure_channel("127.0.0.1:%d" % port, options=list(options))


class Server:
    def __init__(self, tmp, *extra):
        if TLS:
            extra += ("--tls-cert", TLS_FILES[1], "--tls-key", TLS_FILES[2])
        self.port_file = os.path.join(tmp, "port-%d" % free_port())
        self.grpc_port = free_port()
        self.log = open(os.path.join(tmp, "server.log"), "ab")
        self.p = subprocess.Popen([ADAPTERD, "serve", "--registry", REGISTRY, "--port", "0", "--port-file", self.port_file,
                                   "--grpc-port", str(self.grpc_port), "--threads", "1", *extra],
                                  stdout=self.log, stderr=self.log)
        deadline = time.time() + 120
        while not os.path.exists(self.port_file):
            if self.p.poll() is not None or time.time() > deadline:
                sys.exit("adapterd did not start (see %s)" % self.log.name)
            time.sleep(0.05)
        self.http = "%s://127.0.0.1:%s" % ("https" if TLS else "http", open(self.port_file).read().strip())
        self.channel = channel(self.grpc_port)
        grpc.channel_ready_future(self.channel).result(timeout=30)

    def get(self, path):
        with urllib.request.urlopen(self.http + path, timeout=60) as r:
            return r.read().decode()

    def post(self, path, body):
        req = urllib.request.Request(self.http + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self, signalled=False):
        self.channel.close()
        if not signalled:  # a second SIGTERM during the shutdown would kill it
            self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=60)
        self.log.close()
        if rc:
            print("adapterd exited %d; its log ends:\n%s" % (rc, open(self.log.name, errors="replace").read()[-3000:]))
        return rc


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def infer_req(pb, model, texts, pairs=None, raw=False, outputs=(), rid="", params=None):
    r = pb.ModelInferRequest(model_name=model, id=rid)
    for name, data in (("text", texts), ("text_pair", pairs)):
        if data is None:
            continue
        t = r.inputs.add(name=name, datatype="BYTES", shape=[len(data)])
        enc = [s.encode() for s in data]
        if raw:
            r.raw_input_contents.append(b"".join(struct.pack("<I", len(b)) + b for b in enc))
        else:
            t.contents.bytes_contents.extend(enc)
    for o in outputs:
        r.outputs.add(name=o)
    for k, v in (params or {}).items():
        if isinstance(v, bool):
            r.parameters[k].bool_param = v
        elif isinstance(v, int):
            r.parameters[k].int64_param = v
        else:
            r.parameters[k].string_param = v
    return r


def decode_raw(dt, b):
    if dt == "FP32":
        return list(struct.unpack("<%df" % (len(b) // 4), b))
    if dt == "INT32":
        return list(struct.unpack("<%di" % (len(b) // 4), b))
    out, o = [], 0
    while o < len(b):
        (n,) = struct.unpack_from("<I", b, o)
        out.append(b[o + 4:o + 4 + n].decode())
        o += 4 + n
    return out


def grpc_tensors(resp):
    tens = {}
    for i, t in enumerate(resp.outputs):
        if resp.raw_output_contents:
            data = decode_raw(t.datatype, resp.raw_output_contents[i])
        elif t.datatype == "FP32":
            data = list(t.contents.fp32_contents)
        elif t.datatype == "INT32":
            data = list(t.contents.int_contents)
        else:
            data = [b.decode() for b in t.contents.bytes_contents]
        tens[t.name] = (t.datatype, list(t.shape), data)
    return tens


def flat(x):
    return [z for y in x for z in (flat(y) if isinstance(y, list) else [y])]


def same_value(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None or math.isnan(b):
            return (a is None) == math.isnan(b)
        return abs(a - b) <= 1e-6 * max(1.0, abs(a))
    return a == b


def compare(s, pb, stub, model, texts, pairs=None, raw=False, outputs=(), params=None, grpc_params=None):
    """grpc_params: parameters of the gRPC request alone (binary_data_output: the answer comes raw)."""
    body = {"id": "cmp", "inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": texts}]}
    if pairs:
        body["inputs"].append({"name": "text_pair", "shape": [len(pairs)], "datatype": "BYTES", "data": pairs})
    if outputs:
        body["outputs"] = [{"name": o} for o in outputs]
    if params:
        body["parameters"] = params
    st, rest = s.post("/v2/models/%s/infer" % model, body)
    what = "%s%s%s" % (model, " raw" if raw else "", " outputs=" + ",".join(outputs) if outputs else "")
    check(st == 200, "REST infer %s answers 200 (%s)" % (what, st))
    resp = stub.ModelInfer(infer_req(pb, model, texts, pairs, raw, outputs, "cmp", dict(params or {}, **(grpc_params or {}))))
    g = grpc_tensors(resp)
    what += " " + json.dumps(grpc_params) if grpc_params else ""
    check(resp.model_name == rest["model_name"] and resp.model_version == rest["model_version"] and resp.id == "cmp",
          "gRPC infer %s: model_name, model_version and id as REST's" % what)
    want_raw = raw or bool((grpc_params or {}).get("binary_data_output"))
    check(bool(resp.raw_output_contents) == want_raw,
          "gRPC infer %s: raw outputs exactly when the inputs were raw or binary data was asked for" % what)
    check(all(len(g[t.name][2]) == math.prod(t.shape) for t in resp.outputs),
          "gRPC infer %s: every tensor holds the elements its shape says" % what)
    check([t.name for t in resp.outputs] == [t["name"] for t in rest["outputs"]], "gRPC infer %s: the same output tensors" % what)
    for t in rest["outputs"]:
        dt, shape, data = g.get(t["name"], (None, None, None))
        rd = flat(t["data"])
        ok = dt == t["datatype"] and shape == t["shape"] and len(data) == len(rd) and all(map(same_value, rd, data))
        check(ok, "gRPC infer %s: tensor %s equals REST's (%s %s, %d values)" % (what, t["name"], t["datatype"], t["shape"], len(rd)))
    return resp


def main():
    global TLS_FILES
    tmp = tempfile.mkdtemp(prefix="adapterd-grpc-")
    try:
        if TLS:
            TLS_FILES = make_certs(tmp)
        pb, pbg = stubs(tmp)
        s = Server(tmp, "--max-body-bytes", "65536", "--admin-token", TOKEN)
        stub = pbg.GRPCInferenceServiceStub(s.channel)

        check(stub.ServerLive(pb.ServerLiveRequest()).live, "ServerLive: live")
        check(stub.ServerReady(pb.ServerReadyRequest()).ready, "ServerReady: ready")
        md = stub.ServerMetadata(pb.ServerMetadataRequest())
        rest = json.loads(s.get("/v2"))
        check(md.name == rest["name"] and md.version == rest["version"], "ServerMetadata: name and version as GET /v2")
        check(list(md.extensions) == ["model_repository", "statistics"], "ServerMetadata: the extensions gRPC serves")

        tasks = [t for t in json.loads(s.get("/v1/tasks"))["tasks"]]
        names = [t["name"] for t in tasks]
        for name in names:
            check(stub.ModelReady(pb.ModelReadyRequest(name=name)).ready == json.loads(s.get("/v2/models/%s/ready" % name))["ready"],
                  "ModelReady %s as GET /v2/models/%s/ready" % (name, name))
            m = stub.ModelMetadata(pb.ModelMetadataRequest(name=name))
            r = json.loads(s.get("/v2/models/" + name))
            check(m.name == r["name"] and list(m.versions) == r["versions"] and m.platform == r["platform"] and
                  [(t.name, t.datatype, list(t.shape)) for t in m.inputs] == [(t["name"], t["datatype"], t["shape"]) for t in r["inputs"]] and
                  [(t.name, t.datatype, list(t.shape)) for t in m.outputs] == [(t["name"], t["datatype"], t["shape"]) for t in r["outputs"]],
                  "ModelMetadata %s as GET /v2/models/%s" % (name, name))
        v = json.loads(s.get("/v2/models/cls_lora"))["versions"]
        m = stub.ModelMetadata(pb.ModelMetadataRequest(name="cls_lora", version=v[0]))
        check(m.name == "cls_lora", "ModelMetadata with a version")
        check(code_of(lambda: stub.ModelReady(pb.ModelReadyRequest(name="nope")))[0] == grpc.StatusCode.NOT_FOUND, "ModelReady unknown: NOT_FOUND")
        check(code_of(lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="cls_lora", version="99")))[0] == grpc.StatusCode.NOT_FOUND,
              "ModelMetadata unknown version: NOT_FOUND")
        check(code_of(lambda: stub.ModelMetadata(pb.ModelMetadataRequest()))[0] == grpc.StatusCode.INVALID_ARGUMENT,
              "ModelMetadata without a name: INVALID_ARGUMENT")

        texts = ["the match was great", "a dull and slow film", "Ada Lovelace lived in London"]
        for name in names:
            if name == "qa":
                compare(s, pb, stub, name, ["who lived in London?"], ["Ada Lovelace lived in London."])
                compare(s, pb, stub, name, ["who lived in London?"], ["Ada Lovelace lived in London."], raw=True)
                continue
            compare(s, pb, stub, name, texts)
            compare(s, pb, stub, name, texts, raw=True)
        compare(s, pb, stub, "cls_lora", texts, outputs=("label",))
        compare(s, pb, stub, "cls_lora", texts, params={"skip": 1})
        compare(s, pb, stub, "cls_lora", ["x"], pairs=["y"])
        # binary_data_output: every output in raw_output_contents, with its data (it once answered OK with no data)
        for name in names:
            if name != "qa":
                compare(s, pb, stub, name, texts, grpc_params={"binary_data_output": True})
        r = stub.ModelInfer(pb.ModelInferRequest(model_name="cls_lora", model_version=v[0],
                                                 inputs=[pb.ModelInferRequest.InferInputTensor(
                                                     name="text", datatype="BYTES", shape=[1],
                                                     contents=pb.InferTensorContents(bytes_contents=[b"hi"]))]))
        check(r.model_version == v[0], "ModelInfer with model_version runs that version")

        # errors, each as REST refuses it
        bad = [
            ("unknown model", infer_req(pb, "nope", texts), grpc.StatusCode.NOT_FOUND),
            ("no model name", infer_req(pb, "", texts), grpc.StatusCode.INVALID_ARGUMENT),
            ("FP32 input", pb.ModelInferRequest(model_name="cls_lora", inputs=[pb.ModelInferRequest.InferInputTensor(
                name="text", datatype="FP32", shape=[1], contents=pb.InferTensorContents(fp32_contents=[1.0]))]),
             grpc.StatusCode.INVALID_ARGUMENT),
            ("shape not matching the data", pb.ModelInferRequest(model_name="cls_lora", inputs=[pb.ModelInferRequest.InferInputTensor(
                name="text", datatype="BYTES", shape=[3], contents=pb.InferTensorContents(bytes_contents=[b"a"]))]),
             grpc.StatusCode.INVALID_ARGUMENT),
            ("no inputs", pb.ModelInferRequest(model_name="cls_lora"), grpc.StatusCode.INVALID_ARGUMENT),
            ("bytes that are not UTF-8", pb.ModelInferRequest(
                model_name="cls_lora", inputs=[pb.ModelInferRequest.InferInputTensor(
                    name="text", datatype="BYTES", shape=[1], contents=pb.InferTensorContents(bytes_contents=[b"\xff\xfe"]))]),
             grpc.StatusCode.INVALID_ARGUMENT),
            ("raw data cut inside an element", pb.ModelInferRequest(model_name="cls_lora", inputs=[pb.ModelInferRequest.InferInputTensor(
                name="text", datatype="BYTES", shape=[1])], raw_input_contents=[b"\x09\x00\x00\x00abc"]), grpc.StatusCode.INVALID_ARGUMENT),
            ("an output the head does not answer", infer_req(pb, "cls_lora", texts, outputs=("answer",)), grpc.StatusCode.INVALID_ARGUMENT),
            ("an unknown parameter value", infer_req(pb, "cls_lora", texts, params={"skip": 99}), grpc.StatusCode.INVALID_ARGUMENT),
            ("a message over --max-body-bytes", infer_req(pb, "cls_lora", ["x" * 70000]), grpc.StatusCode.RESOURCE_EXHAUSTED),
        ]
        for what, req, want in bad:
            got, msg = code_of(lambda: stub.ModelInfer(req))
            check(got == want and msg, "ModelInfer %s: %s (%s: %s)" % (what, want.name, got.name, msg[:120]))
        got, msg = code_of(lambda: s.channel.unary_unary("/inference.GRPCInferenceService/NoSuchCall")(b""))
        check(got == grpc.StatusCode.UNIMPLEMENTED, "an unknown method: UNIMPLEMENTED (%s)" % msg)
        got, msg = code_of(lambda: s.channel.unary_unary("/other.Service/ModelInfer")(b""))
        check(got == grpc.StatusCode.UNIMPLEMENTED, "another service: UNIMPLEMENTED")
        got, msg = code_of(lambda: s.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(b"\xff\xff\xff"))
        check(got == grpc.StatusCode.INVALID_ARGUMENT, "a message that is not a ModelInferRequest: INVALID_ARGUMENT (%s)" % msg)
        # strings that are not UTF-8 (Python's protobuf will not write them: the bytes are patched) are the client's mistake
        for field, good, bad_bytes in (("id", b"\x1a\x02ZZ", b"\x1a\x02\xff\xfe"), ("outputs[0].name", b"\x0a\x02ZZ", b"\x0a\x02\xc3\x28")):
            req = infer_req(pb, "cls_lora", texts, rid="ZZ" if field == "id" else "", outputs=("ZZ",) if field != "id" else ())
            raw_msg = req.SerializeToString().replace(good, bad_bytes)
            got, msg = code_of(lambda: s.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(raw_msg))
            check(got == grpc.StatusCode.INVALID_ARGUMENT and field in msg,
                  "a ModelInfer %s that is not UTF-8: INVALID_ARGUMENT naming it (%s: %s)" % (field, got.name, msg))

        nghttp = shutil.which("nghttp")
        if nghttp:
            body = infer_req(pb, "cls_lora", texts).SerializeToString()
            path = os.path.join(tmp, "msg.bin")
            with open(path, "wb") as f:
                f.write(b"\0" + struct.pack(">I", len(body)) + body)
            url = "%s://127.0.0.1:%d/inference.GRPCInferenceService/ModelInfer" % ("https" if TLS else "http", s.grpc_port)

            def raw_call(*headers):
                args = [nghttp, "-v", "-d", path, "-H", "te: trailers"]
                for h in headers:
                    args += ["-H", h]
                return subprocess.run(args + [url], capture_output=True, timeout=60).stdout.decode(errors="replace")

            out = raw_call("content-type: application/grpc", "grpc-timeout: 1n")
            check("grpc-status: 4" in out, "grpc-timeout 1n: the server answers DEADLINE_EXCEEDED")
            out = raw_call("content-type: application/grpc", "grpc-timeout: 10S")
            check("grpc-status: 0" in out, "grpc-timeout 10S: answered in time")
            out = raw_call("content-type: application/grpc", "grpc-timeout: soon")
            check("grpc-status: 3" in out, "a malformed grpc-timeout: INVALID_ARGUMENT")
            out = raw_call("content-type: application/json")
            check(":status: 415" in out, "content-type application/json: HTTP 415")
            with open(path, "wb") as f:
                f.write(b"\1" + struct.pack(">I", len(body)) + body)
            out = raw_call("content-type: application/grpc")
            check("grpc-status: 12" in out, "the compressed flag without grpc-encoding: UNIMPLEMENTED")
            out = raw_call("content-type: application/grpc", "grpc-encoding: gzip")
            check("grpc-status: 12" in out, "a gzip-compressed message (grpc-encoding: gzip): UNIMPLEMENTED")
        else:
            print("skip the raw HTTP/2 checks: nghttp (Debian's nghttp2-client) is not installed")

        # the statistics extension: as GET /v2/models/{m}/stats, one model or (no name) every model
        st = stub.ModelStatistics(pb.ModelStatisticsRequest(name="cls_lora"))
        r = json.loads(s.get("/v2/models/cls_lora/stats"))["model_stats"][0]
        m = st.model_stats[0] if len(st.model_stats) == 1 else None
        check(m is not None and m.name == r["name"] and m.version == r["version"] and m.inference_count == r["inference_count"] and
              m.execution_count == r["execution_count"] and m.inference_stats.success.count == r["inference_stats"]["success"]["count"] and
              m.inference_stats.success.ns == r["inference_stats"]["success"]["ns"] and m.inference_count > 0,
              "ModelStatistics cls_lora as GET /v2/models/cls_lora/stats (%d requests)" % r["inference_count"])
        st = stub.ModelStatistics(pb.ModelStatisticsRequest())
        check(sorted(x.name for x in st.model_stats) == sorted(names), "ModelStatistics without a name: every model")
        check(code_of(lambda: stub.ModelStatistics(pb.ModelStatisticsRequest(name="nope")))[0] == grpc.StatusCode.NOT_FOUND,
              "ModelStatistics unknown: NOT_FOUND")
        # RepositoryIndex is an admin call, as REST's POST /v2/repository/index
        check(code_of(lambda: stub.RepositoryIndex(pb.RepositoryIndexRequest()))[0] == grpc.StatusCode.UNAUTHENTICATED,
              "RepositoryIndex without the admin token: UNAUTHENTICATED")
        check(code_of(lambda: stub.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=[("authorization", "Bearer nope")]))[0] ==
              grpc.StatusCode.UNAUTHENTICATED, "RepositoryIndex with a wrong token: UNAUTHENTICATED")
        idx = stub.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=[("authorization", "Bearer " + TOKEN)])
        req = urllib.request.Request(s.http + "/v2/repository/index", b"{}", {"Content-Type": "application/json",
                                                                             "Authorization": "Bearer " + TOKEN})
        rest = json.loads(urllib.request.urlopen(req, timeout=60).read())
        check(sorted((m.name, m.version, m.state, m.reason) for m in idx.models) ==
              sorted((m["name"], m["version"], m["state"], m["reason"]) for m in rest), "RepositoryIndex as POST /v2/repository/index")
        idx = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), metadata=[("authorization", "Bearer " + TOKEN)])
        check(sorted(m.name for m in idx.models) == sorted(m["name"] for m in rest if m["state"] == "READY"),
              "RepositoryIndex ready: only the models in memory")

        metrics = s.get("/metrics")
        check('adapterd_grpc_requests_total{method="ModelInfer",code="OK"}' in metrics and
              'adapterd_grpc_requests_total{method="ModelInfer",code="NOT_FOUND"} 1' in metrics and
              'adapterd_grpc_requests_total{method="ServerLive",code="OK"} 1' in metrics and
              'adapterd_grpc_request_duration_seconds_count{method="ModelInfer"}' in metrics,
              "/metrics counts gRPC calls by method and status")
        # the front door: every ModelInfer that was decoded went through the gRPC codec, none through another's
        # (the ones answered OK at least; a refusal before decoding, e.g. an unknown method, is not decoded)
        decoded = re.search(r'^adapterd_decoded_requests_total\{protocol="kserve_v2_grpc"\} (\d+)$', metrics, re.M)
        ok = re.search(r'^adapterd_grpc_requests_total\{method="ModelInfer",code="OK"\} (\d+)$', metrics, re.M)
        check(decoded and ok and int(decoded.group(1)) >= int(ok.group(1)) > 0,
              "/metrics: ModelInfer calls decoded by the gRPC codec (adapterd_decoded_requests_total)")
        # a request that stops arriving: HEADERS without END_STREAM and no DATA, by hand (HTTP/2 frames, HPACK
        # literals without indexing or Huffman, RFC 7540 / 7541); past --header-timeout-ms it is answered (a HEADERS
        # frame that ends stream 1, the trailers-only answer) while the client still holds the stream open
        check(s.stop() == 0, "SIGTERM: exit 0")
        s = Server(tmp, "--header-timeout-ms", "200")

        def lit(name, value):
            return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

        hdrs = (lit(b":method", b"POST") + lit(b":scheme", b"https" if TLS else b"http") + lit(b":path", b"/inference.GRPCInferenceService/ModelInfer") +
                lit(b":authority", b"x") + lit(b"content-type", b"application/grpc") + lit(b"te", b"trailers"))
        sock = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=10)
        if TLS:
            ctx = ssl.create_default_context(cafile=TLS_FILES[0])
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0\0\0\x04\0\0\0\0\0" +
                     struct.pack(">I", len(hdrs))[1:] + b"\x01\x04" + struct.pack(">I", 1) + hdrs)  # HEADERS, END_HEADERS only
        t0, buf, ended = time.time(), b"", None
        while ended is None and time.time() - t0 < 8:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                ftype, flags, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff
                if ftype == 1 and sid == 1 and flags & 1:
                    ended = time.time() - t0
                buf = buf[9 + n:]
        sock.close()
        check(ended is not None and 0.2 <= ended < 4, "a request that stops arriving is answered after --header-timeout-ms (%s s)" %
              (ended if ended is None else round(ended, 2)))
        metrics = s.get("/metrics")
        check('adapterd_grpc_requests_total{method="ModelInfer",code="DEADLINE_EXCEEDED"} 1' in metrics,
              "... with DEADLINE_EXCEEDED (/metrics)")
        check(s.stop() == 0, "SIGTERM: exit 0")

        # a queue of one: concurrent calls beyond it are refused RESOURCE_EXHAUSTED, the rest answer
        s = Server(tmp, "--max-queue", "1", "--max-wait-us", "20000")
        stub = pbg.GRPCInferenceServiceStub(s.channel)
        codes = []
        lock = threading.Lock()

        def one():
            c, _ = code_of(lambda: stub.ModelInfer(infer_req(pb, "cls_lora", texts * 20)))
            with lock:
                codes.append(c)

        th = [threading.Thread(target=one) for _ in range(16)]
        [t.start() for t in th]
        [t.join() for t in th]
        check(grpc.StatusCode.RESOURCE_EXHAUSTED in codes and grpc.StatusCode.OK in codes and
              set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED},
              "--max-queue 1: RESOURCE_EXHAUSTED beyond the queue, the others OK (%s)" % sorted(c.name for c in codes))

        # SIGTERM with calls under way: they finish (OK), the server drains and exits 0
        codes.clear()
        th = [threading.Thread(target=one) for _ in range(1)]
        th[0].start()
        time.sleep(0.005)
        s.p.send_signal(signal.SIGTERM)
        th[0].join()
        check(codes == [grpc.StatusCode.OK] or codes == [grpc.StatusCode.UNAVAILABLE],
              "SIGTERM during a call: the call answers (%s)" % [c.name for c in codes])
        check(s.stop(signalled=True) == 0, "drained, exit 0")

        # connection limits shared with HTTP: with one connection per address, the test's channel holds it, and a
        # second channel's call fails UNAVAILABLE with the server's reason (what grpcio reports to its caller)
        s = Server(tmp, "--max-connections-per-ip", "1")
        # (its own subchannel pool: grpcio would otherwise share the first channel's connection)
        second = channel(s.grpc_port, options=[("grpc.use_local_subchannel_pool", 1)])
        got, msg = code_of(lambda: pbg.GRPCInferenceServiceStub(second).ServerLive(pb.ServerLiveRequest(), timeout=10))
        second.close()
        check(got == grpc.StatusCode.UNAVAILABLE and "--max-connections-per-ip 1" in msg,
              "a connection over --max-connections-per-ip: UNAVAILABLE naming it (%s: %s)" % (got.name, msg))
        check(s.stop() == 0, "SIGTERM: exit 0")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % len(FAILS))
    sys.exit(1 if FAILS else 0)


main()
