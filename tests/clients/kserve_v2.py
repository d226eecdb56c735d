#!/usr/bin/python3
"""kserve_v2.py - a conformance test of adapterd's KServe v2 REST API, written from the protocol's
documents, not from adapterd's code:
  - the Open Inference Protocol (KServe's "V2 Inference Protocol", REST part): health, server and
    model metadata, versioned model routes, inference request and response objects, and errors as
    {"error": <string>} with an HTTP error status;
  - Triton's extensions adapterd lists in GET /v2: binary_tensor_data (extension_binary_data.md:
    Inference-Header-Content-Length, binary_data_size, binary_data, binary_data_output; tensors in
    little-endian, row-major; BYTES elements as a 4-byte length and the bytes), statistics
    (extension_statistics.md) and model_repository (extension_model_repository.md).
What is adapterd's own (which models exist, their input names "text"/"text_pair", which outputs a head
answers) is read from the server's model metadata, as a generic client would.

Binary answers must equal the JSON answers: FP32 element for element as float32 (the JSON's number
rounded to float32, bit for bit), INT32 and BYTES exactly.

Only the standard library (urllib, struct): run with Debian's python3.
    kserve_v2.py <adapterd> <registry>
Starts `adapterd serve` on 127.0.0.1 (ADAPTERD_TEST_SERVER names another build of it, as for the other
integration tests) and stops it with SIGTERM; exits 0 when every check passed, 1 otherwise.
"""
import json
import math
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

TOKEN = "kserve-conformance"
MAX_BODY = 65536  # --max-body-bytes: the whole body, JSON header and binary data together

failed = 0


def check(name, fn):
    global failed
    try:
        fn()
        print(f"ok   {name}")
    except Exception as e:  # noqa: BLE001 - every failure is reported and counted
        failed += 1
        import traceback
        print(f"FAIL {name}: {e!r}\n{traceback.format_exc()}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, binary, registry):
        binary = os.environ.get("ADAPTERD_TEST_SERVER") or binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # the server's log goes to a file (a pipe nobody reads would fill and stall it); printed on failure
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1", "--registry", registry,
             "--admin-token", TOKEN, "--watch", "false", "--max-body-bytes", str(MAX_BODY)],
            stdout=subprocess.DEVNULL, stderr=self.log)
        t0 = time.time()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit("adapterd serve exited before it was ready:\n" + self.log_text())
            if time.time() - t0 > 30:
                self.proc.kill()
                raise SystemExit("adapterd serve was not ready within 30 s")
            try:
                if urllib.request.urlopen(self.url + "/readyz", timeout=2).status == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)

    def log_text(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -1


def call(method, path, body=None, headers=None):
    """(status, headers, body bytes); an HTTP error status is an answer, not an exception."""
    req = urllib.request.Request(SRV.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get_json(path):
    st, _, b = call("GET", path)
    assert st == 200, f"GET {path}: {st} {b[:300]!r}"
    return json.loads(b)


def expect_error(st, hdrs, b, statuses, what):
    """The protocol's error: an HTTP error status and {"error": <string>}."""
    assert st in statuses, f"{what}: status {st}, want one of {statuses}: {b[:300]!r}"
    d = json.loads(b)
    assert isinstance(d, dict) and isinstance(d.get("error"), str) and d["error"], f"{what}: not {{\"error\": string}}: {d}"
    return d["error"]


# ---- requests ----

def bytes_tensor(*elems):
    """BYTES elements as the extension lays them out: 4-byte little-endian length, then the bytes."""
    return b"".join(struct.pack("<I", len(e)) + e for e in elems)


def input_tensor(name, texts, binary):
    t = {"name": name, "shape": [len(texts)], "datatype": "BYTES"}
    raw = b""
    if binary:
        raw = bytes_tensor(*[s.encode() for s in texts])
        t["parameters"] = {"binary_data_size": len(raw)}
    else:
        t["data"] = texts
    return t, raw


def infer(model, texts, pairs=None, binary_in=False, binary_out=None, outputs=None, rid=None, version=None, extra=None):
    """POST .../infer. binary_out: None (JSON), True (binary_data_output), or a set of output names to
    ask with binary_data: true. Returns (status, headers, body)."""
    ins, raws = [], []
    for name, vals in (("text", texts), ("text_pair", pairs)):
        if vals is None:
            continue
        t, raw = input_tensor(name, vals, binary_in)
        ins.append(t)
        raws.append(raw)
    req = {"inputs": ins}
    if rid:
        req["id"] = rid
    if binary_out is True:
        req["parameters"] = {"binary_data_output": True}
    if outputs is not None or isinstance(binary_out, set):
        names = outputs if outputs is not None else sorted(binary_out)
        req["outputs"] = [{"name": n, **({"parameters": {"binary_data": True}} if isinstance(binary_out, set) and n in binary_out
                                         else {})} for n in names]
    if extra:
        req.update(extra)
    header = json.dumps(req).encode()
    body = header + b"".join(raws)
    hdrs = {"Content-Type": "application/json"}
    if binary_in:
        hdrs = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return call("POST", path, body, hdrs)


# ---- answers ----

def decode_binary(datatype, raw, count):
    """The elements of one binary output tensor, by the extension's layout."""
    if datatype == "BYTES":
        out, o = [], 0
        while o < len(raw):
            n = struct.unpack_from("<I", raw, o)[0]
            o += 4
            out.append(raw[o:o + n].decode())
            o += n
        assert o == len(raw), "BYTES elements run past their tensor"
        return out
    fmt = {"FP32": "f", "INT32": "i", "INT64": "q", "FP64": "d", "BOOL": "?"}[datatype]
    size = struct.calcsize(fmt)
    assert len(raw) == count * size, f"{datatype}: {len(raw)} bytes for {count} elements"
    return list(struct.unpack("<%d%s" % (count, fmt), raw))


def flatten(data):
    out = []
    for x in data:
        out.extend(flatten(x) if isinstance(x, list) else [x])
    return out


def parse_infer(st, hdrs, body):
    """{output name: (datatype, shape, flat elements, was binary)} of a 200 answer, reading the binary
    tensor data after the JSON when the Inference-Header-Content-Length says there is some."""
    assert st == 200, f"infer: {st} {body[:400]!r}"
    hl = hdrs.get("Inference-Header-Content-Length")
    n = int(hl) if hl is not None else len(body)
    if hl is not None:
        assert hdrs.get("Content-Type", "").startswith("application/octet-stream"), hdrs.get("Content-Type")
        assert int(hdrs["Content-Length"]) == len(body), "Content-Length is the whole body"
    resp = json.loads(body[:n])
    assert isinstance(resp.get("model_name"), str)
    assert isinstance(resp.get("outputs"), list) and resp["outputs"]
    rest, at, outs = body[n:], 0, {}
    for o in resp["outputs"]:
        count = math.prod(o["shape"])
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            assert "data" not in o, "a binary output carries no JSON data"
            vals = decode_binary(o["datatype"], rest[at:at + size], count)
            at += size
        else:
            vals = flatten(o["data"])
        assert len(vals) == count, f"{o['name']}: {len(vals)} elements for shape {o['shape']}"
        outs[o["name"]] = (o["datatype"], o["shape"], vals, size is not None)
    assert at == len(rest), f"{len(rest) - at} bytes after the last binary output"
    return resp, outs


def f32(x):
    return float("nan") if x is None else struct.unpack("<f", struct.pack("<f", x))[0]


def same_outputs(a, b, what):
    assert a.keys() == b.keys(), f"{what}: outputs {sorted(a)} vs {sorted(b)}"
    for k in a:
        (da, sa, va, _), (db, sb, vb, _) = a[k], b[k]
        assert (da, sa) == (db, sb), f"{what}: {k} {da}{sa} vs {db}{sb}"
        if da == "FP32":
            fa, fb = [f32(x) for x in va], [f32(x) for x in vb]
            assert all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(fa, fb)), f"{what}: {k} {fa} vs {fb}"
        else:
            assert va == vb, f"{what}: {k} {va} vs {vb}"


# ---- the checks ----

def main():
    global SRV
    binary, registry = sys.argv[1], sys.argv[2]
    SRV = Server(binary, registry)
    try:
        run()
    finally:
        rc = SRV.stop()
        if rc != 0:
            print(f"FAIL adapterd serve exited {rc} after SIGTERM:\n{SRV.log_text()[-4000:]}")
            globals()["failed"] += 1
    print(f"{failed} failed")
    return 1 if failed else 0


def run():
    models = {}

    def health():
        for p in ("/v2/health/live", "/v2/health/ready"):
            st, _, _ = call("GET", p)
            assert st == 200, f"{p}: {st}"
    check("health: live and ready answer 200", health)

    def server_metadata():
        d = get_json("/v2")
        assert isinstance(d["name"], str) and isinstance(d["version"], str)
        assert isinstance(d["extensions"], list) and all(isinstance(e, str) for e in d["extensions"])
        for e in ("binary_tensor_data", "statistics", "model_repository"):
            assert e in d["extensions"], f"{e} not listed: {d['extensions']}"
    check("server metadata: name, version, extensions (binary_tensor_data listed)", server_metadata)

    def repository_index():
        st, _, b = call("POST", "/v2/repository/index", b"{}", {"Authorization": f"Bearer {TOKEN}",
                                                                 "Content-Type": "application/json"})
        assert st == 200, f"{st} {b[:200]!r}"
        idx = json.loads(b)
        assert isinstance(idx, list) and idx
        for m in idx:
            assert isinstance(m["name"], str)
        for m in idx:
            md = get_json(f"/v2/models/{m['name']}")
            models[m["name"]] = md
    check("model repository: index lists the models", repository_index)

    def model_metadata():
        assert models, "no models"
        for name, md in models.items():
            assert md["name"] == name and isinstance(md["platform"], str)
            assert isinstance(md.get("versions", []), list)
            for t in md["inputs"] + md["outputs"]:
                assert isinstance(t["name"], str) and isinstance(t["datatype"], str)
                assert isinstance(t["shape"], list) and all(isinstance(x, int) for x in t["shape"])
            for v in md.get("versions", []):
                vd = get_json(f"/v2/models/{name}/versions/{v}")
                assert vd["name"] == name, vd
                st, _, _ = call("GET", f"/v2/models/{name}/versions/{v}/ready")
                assert st == 200, f"{name}@{v} ready: {st}"
            st, _, _ = call("GET", f"/v2/models/{name}/ready")
            assert st == 200, f"{name} ready: {st}"
    check("model metadata: every model, every version, ready", model_metadata)

    def unknown_model():
        for m, p in (("GET", "/v2/models/no-such-model"), ("GET", "/v2/models/no-such-model/ready"),
                     ("GET", "/v2/models/no-such-model/versions/1")):
            st, h, b = call(m, p)
            expect_error(st, h, b, range(400, 500), f"{m} {p}")
        st, h, b = infer("no-such-model", ["x"])
        expect_error(st, h, b, range(400, 500), "infer on an unknown model")
    check("unknown model: 4xx and {\"error\": string} on metadata, ready and infer", unknown_model)

    def pick(kind_outputs):
        for name, md in models.items():
            outs = {o["name"] for o in md["outputs"]}
            if kind_outputs <= outs:
                return name, md
        raise AssertionError(f"no model answers {kind_outputs}")

    texts = ["the movie was great", "a dull and tiresome film", "caf\u00e9 \u00fcber na\u00efve \U0001F600"]

    def json_in_json_out():
        name, md = pick({"label", "score", "scores"})
        resp, outs = parse_infer(*infer(name, texts, rid="req-42"))
        assert resp["id"] == "req-42", "the request's id comes back"
        assert resp["model_name"] == name
        for o in md["outputs"]:
            assert o["name"] in outs, f"metadata output {o['name']} missing"
            assert outs[o["name"]][0] == o["datatype"]
            assert outs[o["name"]][1][0] == len(texts)
    check("infer JSON in, JSON out: id echoed, outputs as the metadata says", json_in_json_out)

    def binary_ways(name, pairs=None, batch=texts):
        print(f"     model {name}")
        want = parse_infer(*infer(name, batch, pairs))[1]
        for bi, bo, what in ((True, None, "binary in / JSON out"), (False, True, "JSON in / binary out"),
                             (True, True, "binary in / binary out")):
            resp, got = parse_infer(*infer(name, batch, pairs, binary_in=bi, binary_out=bo))
            if bo:
                assert all(v[3] for v in got.values()), f"{what}: binary_data_output makes every output binary"
            same_outputs(got, want, f"{name} {what}")
        # one output binary (binary_data on it), the others JSON
        one = sorted(want)[0]
        resp, got = parse_infer(*infer(name, batch, pairs, binary_out={one}, outputs=sorted(want)))
        assert got[one][3] and not any(v[3] for k, v in got.items() if k != one), "only the output asked for is binary"
        same_outputs(got, want, f"{name} binary_data on {one}")
        # binary_data false on one output overrides binary_data_output
        resp, got = parse_infer(*infer(name, batch, pairs, binary_out=True,
                                       extra={"outputs": [{"name": k, "parameters": {"binary_data": k != one}} for k in sorted(want)]}))
        assert not got[one][3] and all(v[3] for k, v in got.items() if k != one)
        same_outputs(got, want, f"{name} binary_data false on {one}")

    def classification():
        binary_ways(pick({"label", "score", "scores"})[0])
    check("binary tensor data, classification (BYTES, FP32 [N], FP32 [N, K]): every way equals JSON", classification)

    def other_heads():
        for outs, pairs in (({"value"}, None), ({"labels"}, None), ({"entity", "word", "start", "input"}, None),
                            ({"answer", "start", "end"}, ["paris is the capital of france", "bob lives in rome",
                                                           "the cat sat on the mat"])):
            try:
                name, _ = pick(outs)
            except AssertionError:
                continue
            qs = ["what is the capital?", "where does bob live?", "where did it sit?"] if pairs else texts
            binary_ways(name, pairs, qs)
    check("binary tensor data, regression, multi-label, tagging, QA (INT32, pairs): every way equals JSON", other_heads)

    def versioned_infer():
        name, md = pick({"label"})
        for v in md.get("versions", [])[:2]:
            resp, _ = parse_infer(*infer(name, texts[:1], version=v, binary_in=True, binary_out=True))
            assert resp.get("model_version", v) == v, f"asked {v}, answered {resp.get('model_version')}"
    check("infer on /versions/{v}: binary both ways, the version answered", versioned_infer)

    def no_content_type():
        # Triton's Python client (geventhttpclient) sends infer bodies with no Content-Type; urllib would
        # add a form type, so http.client sends this one as it is
        import http.client
        name, _ = pick({"label"})
        raw = bytes_tensor(b"the movie was great")
        head = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                       "parameters": {"binary_data_size": len(raw)}}],
                           "parameters": {"binary_data_output": True}}).encode()
        c = http.client.HTTPConnection("127.0.0.1", SRV.port, timeout=60)
        c.putrequest("POST", f"/v2/models/{name}/infer", skip_accept_encoding=True)
        c.putheader("Inference-Header-Content-Length", str(len(head)))
        c.putheader("Content-Length", str(len(head) + len(raw)))
        c.endheaders(head + raw)
        r = c.getresponse()
        body = r.read()
        c.close()
        _, got = parse_infer(r.status, r.headers, body)
        _, want = parse_infer(*infer(name, ["the movie was great"]))
        same_outputs(got, want, "no Content-Type")
    check("binary request without a Content-Type (as tritonclient sends it)", no_content_type)

    def statistics():
        name, _ = pick({"label"})
        before = get_json(f"/v2/models/{name}/stats")["model_stats"][0]
        parse_infer(*infer(name, texts[:2], binary_in=True))
        after = get_json(f"/v2/models/{name}/stats")["model_stats"][0]
        assert after["name"] == name
        assert after["inference_count"] >= before["inference_count"] + 1, (before, after)
        succ = after["inference_stats"]["success"]
        assert succ["count"] >= 1 and succ["ns"] > 0
    check("statistics: counts and time grow with an inference", statistics)

    def binary_errors():
        name, _ = pick({"label"})
        raw = bytes_tensor(b"hello", b"abc")
        hdr = json.dumps({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                      "parameters": {"binary_data_size": len(raw)}}]}).encode()
        path = f"/v2/models/{name}/infer"

        def post(body, hl, what, statuses=(400,)):
            st, h, b = call("POST", path, body, {"Content-Type": "application/octet-stream",
                                                 "Inference-Header-Content-Length": str(hl)})
            return expect_error(st, h, b, statuses, what)

        st, h, b = call("POST", path, hdr + raw, {"Content-Type": "application/octet-stream",
                                                 "Inference-Header-Content-Length": str(len(hdr))})
        assert st == 200, f"the well-formed request: {st} {b[:200]!r}"
        post(hdr + raw, len(hdr) + len(raw) + 1, "header length past the body")
        post(hdr + raw, "12x", "a header length that is not a number")
        post(hdr + raw + b"\0", len(hdr), "a byte more than the sizes add up to")
        post(hdr + raw[:-1], len(hdr), "binary_data_size past the body's end")
        post(hdr + raw, len(hdr) - 5, "a header cut inside the JSON")
        bad = bytes_tensor(b"hello") + struct.pack("<I", 1000) + b"abc"
        h2 = json.dumps({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(bad)}}]}).encode()
        post(h2 + bad, len(h2), "a BYTES element running past its tensor")
        h3 = json.dumps({"inputs": [{"name": "text", "shape": [3], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
        post(h3 + raw, len(h3), "a shape of 3 elements over 2")
        h4 = json.dumps({"inputs": [{"name": "text", "shape": [2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 7}}]}).encode()
        post(h4 + b"\0" * 7, len(h4), "FP32 [2] in 7 bytes")
        h5 = json.dumps({"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["a", "b"],
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
        post(h5 + raw, len(h5), "data and binary_data_size both")
        # the server still answers after all of that
        assert call("POST", path, hdr + raw, {"Content-Type": "application/octet-stream",
                                              "Inference-Header-Content-Length": str(len(hdr))})[0] == 200
    check("binary tensor data: bad sizes are 400 {\"error\": string}, and the server goes on", binary_errors)

    def body_limit():
        name, _ = pick({"label"})
        big = bytes_tensor(b"x" * (MAX_BODY - 100))
        hdr = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                      "parameters": {"binary_data_size": len(big)}}]}).encode()
        assert len(hdr) < MAX_BODY < len(hdr) + len(big)
        st, h, b = call("POST", f"/v2/models/{name}/infer", hdr + big,
                        {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(hdr))})
        expect_error(st, h, b, (413,), "a body over --max-body-bytes, its JSON header under it")
    check("the body limit is the whole body's (header + binary data): 413 {\"error\": string}", body_limit)

    def json_errors():
        name, _ = pick({"label"})
        path = f"/v2/models/{name}/infer"
        for body, what in ((b"{not json", "malformed JSON"), (b"[]", "not an object"),
                           (json.dumps({"inputs": []}).encode(), "no inputs"),
                           (json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}],
                                        "outputs": [{"name": "no-such-output"}]}).encode(), "an unknown output")):
            st, h, b = call("POST", path, body, {"Content-Type": "application/json"})
            expect_error(st, h, b, range(400, 500), what)
        st, h, b = call("GET", path)
        expect_error(st, h, b, (405,), "GET on infer")
    check("inference errors: 4xx and {\"error\": string}", json_errors)

    def repository_errors():
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        for p in ("/v2/repository/models/no-such-model/load", "/v2/repository/models/no-such-model/unload"):
            st, h, b = call("POST", p, b"{}", auth)
            expect_error(st, h, b, range(400, 500), f"POST {p}")
        st, h, b = call("POST", "/v2/repository/index", b"{}", {"Content-Type": "application/json"})
        expect_error(st, h, b, (401, 403), "the index without the admin token")
    check("model repository errors: 4xx and {\"error\": string}", repository_errors)

    def load_unload():
        name, _ = pick({"label"})
        auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        st, _, b = call("POST", f"/v2/repository/models/{name}/unload", b"{}", auth)
        assert st == 200, f"unload: {st} {b[:200]!r}"
        st, _, b = call("POST", f"/v2/repository/models/{name}/load", b"{}", auth)
        assert st == 200, f"load: {st} {b[:200]!r}"
        assert call("GET", f"/v2/models/{name}/ready")[0] == 200
        parse_infer(*infer(name, texts[:1], binary_in=True, binary_out=True))
    check("model repository: unload, load, ready, infer", load_unload)


if __name__ == "__main__":
    sys.exit(main())
