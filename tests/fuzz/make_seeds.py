#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<harness>/ from hand-written inputs and the
project's own test fixtures (tests/fixtures). Run from the checkout's root:
    python3 tests/fuzz/make_seeds.py
Re-running rewrites the seeds (names are content hashes, so libFuzzer's own additions are kept)."""
import gzip, hashlib, io, json, os, struct, sys, tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
SEP = b"\n@@@@\n"  # fuzz_util.h FUZZ_SEP


def put(harness, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def read(*p):
    with open(os.path.join(FIX, *p), "rb") as f:
        return f.read()


# --- v1 codecs: option byte 0 predict, 1 embed, 2 tokenize ---
for body in [b'{"inputs":"hello"}', b'{"inputs":["a",{"text":"q","text_pair":"ctx"}],"tasks":["x","y"]}',
             b'{"inputs":"a","budget":0.5,"skip":{"x":1},"return":["scores","logits"],"truncate":true}',
             b'{"inputs":[{"ids":[101,7,102],"type_ids":[0,0,0]}],"skip":1,"latency_ms":20}',
             b'{"inputs":"a\\u00e9\\ud83d\\ude00","tasks":[]}']:
    put("proto_v1", b"\x00" + body)
for body in [b'{"inputs":"hello","normalize":false,"pooling":"mean","model":"bert-tiny"}',
             b'{"inputs":[[101,102],{"text":"a","text_pair":"b"},{"ids":[1],"type_ids":[0]}],"truncate":true,'
             b'"truncation_direction":"right"}']:
    put("proto_v1", b"\x01" + body)
for body in [b'{"inputs":["a b",{"text":"q","text_pair":"c"}],"add_special_tokens":false}', b'{"inputs":"x"}']:
    put("proto_v1", b"\x02" + body)

# --- v2 codec ---
for body in [
        {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hello"]}]},
        {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]},
                    {"name": "text_pair", "shape": [2], "datatype": "BYTES", "data": ["c", "d"]}],
         "outputs": [{"name": "label"}, {"name": "scores"}], "parameters": {"skip": 1, "budget": 0.5, "truncate": True}},
        {"id": "r1", "inputs": [{"name": "x", "shape": [1, 1], "datatype": "BYTES", "data": [["z"]]}]}]:
    put("proto_v2", json.dumps(body).encode())
# the binary tensor data extension: JSON header, FUZZ_SEP, the tensors' bytes (BYTES: 4-byte LE length + bytes)
def v2_bytes(*s):
    return b"".join(struct.pack("<I", len(x)) + x for x in s)
for ins, raw in [
        ([{"name": "text", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": 13}}], v2_bytes(b"hello", b"")),
        ([{"name": "text", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 5}},
          {"name": "text_pair", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 7}}],
         v2_bytes(b"q") + v2_bytes(b"ctx")),
        ([{"name": "text", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}], struct.pack("<2f", 1, 2))]:
    body = {"inputs": ins, "outputs": [{"name": "label", "parameters": {"binary_data": True}}],
            "parameters": {"binary_data_output": True}}
    put("proto_v2", json.dumps(body).encode() + SEP + raw)

# --- gRPC messages (proto/grpc.c): option byte 0 ModelInferRequest, 1 model request, 2 RepositoryIndexRequest,
# 3/4 an answer to encode (contents / raw: head, inputs, labels, outputs mask, flags, then NUL-separated
# strings), 5 model metadata, 6 statistics, 7 server metadata; protobuf by hand
def pb_len(field, b):
    n, v = len(b), b""
    while True:
        v += bytes([(n & 0x7f) | (0x80 if n > 0x7f else 0)])
        n >>= 7
        if not n:
            break
    return bytes([field << 3 | 2]) + v + b


def pb_tensor(name, dt, shape, texts):
    return (pb_len(1, name) + pb_len(2, dt) + pb_len(3, bytes(shape)) +
            (pb_len(5, b"".join(pb_len(8, t) for t in texts)) if texts is not None else b""))


def pb_param(key, field, value):
    """A map<string, InferParameter> entry: 1 bool, 2 int64, 3 string, 4 double, 5 uint64 (varints as given)"""
    return pb_len(1, key) + pb_len(2, (pb_len(field, value) if field == 3 else
                                      bytes([field << 3 | 1]) + value if field == 4 else bytes([field << 3]) + value))


for msg in [pb_len(1, b"sentiment") + pb_len(5, pb_tensor(b"text", b"BYTES", [2], [b"a", b"b"])),
            pb_len(1, b"t") + pb_len(3, b"id-1") +
            pb_len(4, pb_param(b"skip", 2, b"\x02")) + pb_len(4, pb_param(b"truncate", 1, b"\x00")) +
            pb_len(4, pb_param(b"aggregation", 3, b"first")) + pb_len(4, pb_param(b"priority", 5, b"\x14")) +
            pb_len(4, pb_param(b"binary_data_output", 1, b"\x01")) +
            pb_len(5, pb_tensor(b"text", b"BYTES", [1, 1], [b"caf\xc3\xa9"])) +
            pb_len(6, pb_len(1, b"label") + pb_len(2, pb_param(b"binary_data", 1, b"\x00"))) + pb_len(6, pb_len(1, b"scores")),
            pb_len(1, b"t") + pb_len(4, pb_param(b"budget", 4, struct.pack("<d", 0.5))) +
            pb_len(5, pb_tensor(b"text", b"BYTES", [1], [b"x"])),
            pb_len(1, b"t") + pb_len(4, pb_param(b"latency_ms", 5, b"\x14")) + pb_len(5, pb_tensor(b"text", b"BYTES", [1], None)) + pb_len(5, pb_tensor(b"text_pair", b"BYTES", [1], None)) +
            pb_len(7, struct.pack("<I", 1) + b"q") + pb_len(7, struct.pack("<I", 3) + b"ctx"),
            pb_len(1, b"qa") + pb_len(2, b"1") + pb_len(3, b"r1") + pb_len(4, pb_len(1, b"skip") + pb_len(2, b"\x10\x01")) +
            pb_len(5, pb_tensor(b"text", b"BYTES", [1], [b"q"])) + pb_len(5, pb_tensor(b"text_pair", b"BYTES", [1], [b"c"])) +
            pb_len(6, pb_len(1, b"answer")),
            pb_len(1, b"m") + pb_len(5, pb_tensor(b"text", b"BYTES", [2], None)) +
            pb_len(7, struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0))]:
    put("proto_grpc", b"\x00" + msg)
put("proto_grpc", b"\x01" + pb_len(1, b"cls") + pb_len(2, b"2"))
put("proto_grpc", b"\x02" + b"\x10\x01")
# answers: classification (2 inputs, 3 labels, every output), QA, tagging with entities, named labels or LABEL_i
for head, flags in [(0, 0), (0, 1), (4, 0), (3, 0), (1, 1), (2, 0)]:
    strings = [b"neg", b"pos", b"neutral", b"other", b"task", b"an answer", b"caf\xc3\xa9", b"", b"x", b"PER", b"LOC", b"MISC",
               b"Ada", b"London", b"word", b"req-1"]
    desc = bytes([head, 1 | 0x3c, 2, 0, 0, flags])
    put("proto_grpc", b"\x03" + desc + b"\x00".join(strings))
    put("proto_grpc", b"\x04" + desc + b"\x00".join(strings))
put("proto_grpc", b"\x05" + json.dumps({"name": "t", "versions": ["1"], "platform": "adapterd", "inputs": [
    {"name": "text", "datatype": "BYTES", "shape": [-1]}], "outputs": [{"name": "scores", "datatype": "FP32", "shape": [-1, 2]}]}).encode())
put("proto_grpc", b"\x06" + json.dumps({"model_stats": [{"name": "t", "version": "1", "inference_count": 3, "execution_count": 3,
                                                        "inference_stats": {"success": {"count": 3, "ns": 300}}}]}).encode())
put("proto_grpc", b"\x07" + json.dumps({"name": "adapterd", "version": "0.1.0", "extensions": ["statistics"]}).encode())

# --- gRPC sessions (server/grpc.c): option byte (connection, limits, read size, refusals; see the harness), then the
# client's HTTP/2 frames after its preface; HPACK literals without indexing or Huffman (RFC 7541 6.2.2)
def h2_frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hpack(*pairs):
    return b"".join(b"\x00" + bytes([len(k)]) + k + bytes([len(v)]) + v for k, v in pairs)


def grpc_headers(method, *extra, verb=b"POST", ctype=b"application/grpc"):
    return hpack((b":method", verb), (b":scheme", b"http"), (b":path", b"/inference.GRPCInferenceService/" + method),
                 (b":authority", b"a"), (b"content-type", ctype), (b"te", b"trailers"), *extra)


def grpc_msg(b, flag=0):
    return bytes([flag]) + struct.pack(">I", len(b)) + b


SETTINGS = h2_frame(4, 0, 0, b"")
END_STREAM, END_HEADERS = 1, 4
infer = grpc_msg(pb_len(1, b"cls") + pb_len(5, pb_tensor(b"text", b"BYTES", [1], [b"a fine film"])))
sessions = [
    # ServerLive, then a ModelInfer whose message comes in three frames
    SETTINGS + h2_frame(1, END_HEADERS, 1, grpc_headers(b"ServerLive")) + h2_frame(0, END_STREAM, 1, grpc_msg(b"")) +
    h2_frame(1, END_HEADERS, 3, grpc_headers(b"ModelInfer")) + h2_frame(0, 0, 3, infer[:3]) + h2_frame(0, 0, 3, infer[3:9]) +
    h2_frame(0, END_STREAM, 3, infer[9:]),
    # a deadline already passed, a malformed one, an unknown method, a GET, a JSON content-type, a compressed flag
    SETTINGS + h2_frame(1, END_HEADERS, 1, grpc_headers(b"ModelInfer", (b"grpc-timeout", b"1n"))) +
    h2_frame(0, END_STREAM, 1, infer) +
    h2_frame(1, END_HEADERS, 3, grpc_headers(b"ModelInfer", (b"grpc-timeout", b"soon"))) + h2_frame(0, END_STREAM, 3, infer) +
    h2_frame(1, END_HEADERS | END_STREAM, 5, grpc_headers(b"NoSuchCall")) +
    h2_frame(1, END_HEADERS | END_STREAM, 7, grpc_headers(b"ServerLive", verb=b"GET")) +
    h2_frame(1, END_HEADERS, 9, grpc_headers(b"ServerReady", ctype=b"application/json")) + h2_frame(0, END_STREAM, 9, b"{}") +
    h2_frame(1, END_HEADERS, 11, grpc_headers(b"ModelInfer", (b"grpc-encoding", b"gzip"))) +
    h2_frame(0, END_STREAM, 11, grpc_msg(b"zz", 1)),
    # a message declared larger than it is, one with bytes past its declared end, a prefix cut short
    SETTINGS + h2_frame(1, END_HEADERS, 1, grpc_headers(b"ModelInfer")) + h2_frame(0, END_STREAM, 1, infer[:5] + b"\x00" * 4) +
    h2_frame(1, END_HEADERS, 3, grpc_headers(b"ModelMetadata")) + h2_frame(0, END_STREAM, 3, grpc_msg(b"") + b"extra") +
    h2_frame(1, END_HEADERS, 5, grpc_headers(b"ServerLive")) + h2_frame(0, END_STREAM, 5, b"\x00\x00"),
    # a large message in frames (its window raised past 64 KiB), a window update, a ping, a stream reset by the client
    SETTINGS + h2_frame(1, END_HEADERS, 1, grpc_headers(b"ModelInfer")) +
    h2_frame(0, 0, 1, b"\x00" + struct.pack(">I", 70000) + b"x" * 16379) +
    b"".join(h2_frame(0, 0, 1, b"x" * 16384) for _ in range(3)) + h2_frame(0, END_STREAM, 1, b"x" * (70000 - 16379 - 3 * 16384)) +
    h2_frame(8, 0, 0, struct.pack(">I", 1 << 20)) + h2_frame(6, 0, 0, b"12345678") +
    h2_frame(1, END_HEADERS, 3, grpc_headers(b"ModelInfer")) + h2_frame(3, 0, 3, struct.pack(">I", 8)),
    # headers in a HEADERS and a CONTINUATION, then trailers from the client that end the stream
    SETTINGS + h2_frame(1, 0, 1, grpc_headers(b"ServerReady")[:20]) + h2_frame(9, END_HEADERS, 1, grpc_headers(b"ServerReady")[20:]) +
    h2_frame(0, 0, 1, grpc_msg(b"")) + h2_frame(1, END_HEADERS | END_STREAM, 1, hpack((b"x-trailer", b"1"))),
]
for i, sess in enumerate(sessions):
    for opt in (0x00, 0x02 | 0x30, 0x03 | 0x10, 0x84 | 0x40, 0x0c | 0x70, 0x88 | 0x20):
        if (i + opt) % 2 == 0 or opt in (0x00, 0x0c | 0x70):
            put("grpc_session", bytes([opt]) + sess)

# --- URLs: option byte picks GET POST PUT DELETE HEAD ---
for m, u in [(0, "/v1/tasks/abc"), (0, "/v2/models/t/ready"), (1, "/v2/models/t/infer"), (1, "/v1/predict"),
             (2, "/v1/tasks/t/versions/3"), (3, "/v1/tasks/t%00/versions/1"), (1, "/v1/tasks/t:activate"),
             (3, "/v1/tasks/t"), (1, "/v2/repository/models/t/load"), (1, "/v2/repository/index"),
             (0, "/v1/tasks/a%2Fb"), (0, "/docs/redoc.standalone.js"), (0, "/%7f%41%zz%4")]:
    put("url", bytes([m]) + u.encode())


# --- tar / tar.gz ---
def tar_bytes(entries, fmt=tarfile.USTAR_FORMAT, gz=False):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            if data is None:
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    raw = b.getvalue()
    return gzip.compress(raw, mtime=0) if gz else raw


cfg = b'{"config": {"architecture": "bottleneck"}}'
put("tar", tar_bytes([("t/", None), ("t/adapter_config.json", cfg)]))
put("tar", tar_bytes([("t/adapter_config.json", cfg)], gz=True))
put("tar", tar_bytes([("d" * 120 + "/long_name_file.json", b"{}")], fmt=tarfile.GNU_FORMAT))
put("tar", tar_bytes([("p" * 130 + "/pax.json", b"{}")], fmt=tarfile.PAX_FORMAT))


# --- safetensors (small, hand-made) ---
def st_bytes(tensors, meta=None):
    header, data = {}, b""
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", st_bytes({"a": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
                             "b": ("BF16", [3], b"\x80\x3f" * 3)}, {"format": "pt"}))
put("safetensors", st_bytes({"x": ("F16", [1, 2], b"\x00\x3c" * 2), "y": ("I64", [1], struct.pack("<q", 7)),
                             "z": ("F64", [0], b"")}))

# --- torch .bin: the reader's own fixtures ---
for n in sorted(os.listdir(os.path.join(FIX, "torch_bin"))):
    if n.endswith(".bin"):
        put("torch_bin", read("torch_bin", n))

# --- tokenizer: option byte (0 tokenizer.json, 1 vocab.txt, 2 vocab.json + merges.txt; bit 2 pair) ---
wp_vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "##ing", "un", "##aff", "##able", ",", "."]
wp = {"version": "1.0", "truncation": None, "padding": None,
      "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                        "normalized": False, "special": True} for i, t in enumerate(wp_vocab[:5])],
      "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                     "strip_accents": None, "lowercase": True},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {"type": "TemplateProcessing",
                         "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                         "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                  {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                                  {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                         "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                            "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
      "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                "max_input_chars_per_word": 100, "vocab": {t: i for i, t in enumerate(wp_vocab)}}}
text = "Hello, worlds! unaffable h\u00e9llo \u4e2d\u6587 [MASK]".encode()
put("tokenizer", b"\x00" + json.dumps(wp).encode() + SEP + SEP + SEP + text)
put("tokenizer", b"\x04" + json.dumps(wp).encode() + SEP + SEP + SEP + text)
bpe_vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "h": 5, "e": 6, "l": 7, "o": 8, "\u0120": 9,
             "w": 10, "r": 11, "d": 12, "he": 13, "ll": 14, "hell": 15, "hello": 16, "\u0120w": 17, "or": 18}
merges = ["h e", "l l", "he ll", "hell o", "\u0120 w", "o r"]
bpe = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [{"id": v, "content": k, "single_word": False, "lstrip": k == "<mask>", "rstrip": False,
                         "normalized": False, "special": True} for k, v in list(bpe_vocab.items())[:5]],
       "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                          "trim_offsets": True, "add_prefix_space": False},
       "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                 "vocab": bpe_vocab, "merges": merges}}
put("tokenizer", b"\x00" + json.dumps(bpe).encode() + SEP + SEP + SEP + "hello world <mask> h\u00e9".encode())
put("tokenizer", b"\x01" + read("registry", "models", "bert-tiny", "vocab.txt") + SEP + SEP +
    b'{"do_lower_case": true, "model_max_length": 16}' + SEP + text)
put("tokenizer", b"\x06" + json.dumps(bpe_vocab).encode() + SEP + ("#version: 0.2\n" + "\n".join(merges)).encode() +
    SEP + b'{"add_prefix_space": true}' + SEP + b"hello world hello")

# --- tokenizer: Unigram tokenizer.json, NFC byte-level BPE, SentencePiece models (layout 3) ---
uni = {"model": {"type": "Unigram", "unk_id": 0, "byte_fallback": True,
                 "vocab": [["<unk>", 0.0], ["</s>", 0.0], ["\u2581", -2.0], ["\u2581a", -1.5], ["b", -3.0], ["ab", -2.5],
                           ["\u2581ab", -2.0], ["<0xC3>", -10.0], ["<0xA9>", -10.0]]},
       "normalizer": {"type": "Sequence", "normalizers": [
           {"type": "NFKC"}, {"type": "Strip", "strip_left": False, "strip_right": True},
           {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}, {"type": "Lowercase"}]},
       "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
       "added_tokens": [{"id": 1, "content": "</s>", "special": True, "normalized": False}],
       "post_processor": {"type": "TemplateProcessing",
                          "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                          "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}],
                          "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}}}
put("tokenizer", b"\x00" + json.dumps(uni).encode() + SEP + SEP + SEP + "ab  a\u00e9 AB \u00bd</s>x".encode())
bpe_nfc = dict(bpe, normalizer={"type": "NFC"})
put("tokenizer", b"\x04" + json.dumps(bpe_nfc).encode() + SEP + SEP + SEP + "he\u0301llo world h\u00e9".encode())


def pb_varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_field(num, wire, payload):
    key = pb_varint(num << 3 | wire)
    if wire == 0:
        return key + pb_varint(payload)
    if wire == 5:
        return key + payload
    return key + pb_varint(len(payload)) + payload


def spm_model(model_type, pieces, charsmap=b""):
    m = b""
    for piece, score, typ in pieces:
        m += pb_field(1, 2, pb_field(1, 2, piece.encode()) + pb_field(2, 5, struct.pack("<f", score)) + pb_field(3, 0, typ))
    m += pb_field(2, 2, pb_field(3, 0, model_type) + pb_field(35, 0, 1))
    m += pb_field(3, 2, pb_field(1, 2, b"nmt_nfkc") + (pb_field(2, 2, charsmap) if charsmap else b"") +
                  pb_field(3, 0, 1) + pb_field(4, 0, 1) + pb_field(5, 0, 1))
    return m


spm_pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("\u2581", -2.0, 1), ("\u2581a", -1.5, 1),
              ("b", -3.0, 1), ("ab", -2.5, 1), ("\u2581ab", -2.0, 1), ("a", -4.0, 1)] + \
             [("<0x%02X>" % b, 0.0, 6) for b in (0xC3, 0xA9, 0x41)]
# a charsmap blob: a trie size, two darts units, one replacement string (mutations explore the reader)
charsmap = struct.pack("<I", 8) + struct.pack("<II", 0x400, 0x141) + b"x\x00"
put("tokenizer", b"\x03" + spm_model(1, spm_pieces, charsmap) + SEP + SEP + SEP + "  ab a\u00e9  b ".encode())
put("tokenizer", b"\x83" + spm_model(2, spm_pieces) + SEP + SEP + b'{"tokenizer_class": "CamembertTokenizer"}' + SEP +
    "ab ab\tAb <mask>".encode())
put("tokenizer", b"\x07" + spm_model(1, spm_pieces)[:40] + SEP + SEP + SEP + b"ab")


# --- config.json: option byte picks bert-micro, roberta-micro, distilbert-micro, bert-micro-bf16-sharded ---
for i, m in enumerate(["bert-micro", "roberta-micro", "distilbert-micro", "bert-micro-bf16-sharded"]):
    put("config", bytes([i]) + read("models", m, "config.json"))

# --- adapter_config.json / head_config.json: option byte picks the folder (fuzz_task_common.h order) ---
folders = ["seq_bn_st/adapters/sst", "lora_ah/adapters/lora", "peft_lora/adapters/peft_task", "head_pooler/adapters/pool",
           "prefix/adapters/prefix_task", "ia3/adapters/ia3", "head_tagging/adapters/ner", "head_qa/adapters/squad",
           "head_multilabel/adapters/ml", "head_regression/adapters/reg", "peft_adalora/adapters/peft_task",
           "adamix_seq_bn/adapters/sst", "par_bn/adapters/par", "seq_bn_bin/adapters/sst"]
for i, f in enumerate(folders):
    d = os.path.join(FIX, "adapters", "bert-tiny", f)
    for name, harness in [("adapter_config.json", "adapter_config"), ("head_config.json", "head_config")]:
        if os.path.exists(os.path.join(d, name)):
            put(harness, bytes([i]) + read("adapters", "bert-tiny", f, name))

# --- task.json: option bit 0 = metadata only ---
for body in [{"model": "bert-tiny", "adapters": ["t0", "t1", "t2", "t3"], "fusion": "fusion", "head": "head"},
             {"model": "bert-tiny", "adapters": ["lora"], "fusion": None, "head": "lora",
              "skips": {"min": 0, "max": 1, "default": 0}, "labels": ["neg", "pos"], "pinned": True}]:
    for opt in (0, 1):
        put("task_json", bytes([opt]) + json.dumps(body).encode())
# --- .adapterd-state.json: version 2, version 1 (no max), tombstones, types out of place ---
for body in [{"version": 2, "tasks": {"cls": {"current": "2", "max": 3, "pinned": True}, "ner": {"current": "1", "max": 1}},
              "deleted": ["cls/0"]},
             {"tasks": {"cls": {"current": "1"}}},
             {"version": 2, "tasks": {"a": {}, "b": {"pinned": True}, "c": 5}, "deleted": ["a/1", 7, None]},
             {"version": 2, "tasks": [], "deleted": {}}]:
    put("state", json.dumps(body, indent=2).encode())
put("state", b'["not an object"]')
# --- .adapterd-state.log: a journal (header, entries, a gone task, tombstones, a partial last line) ---
put("state", b'{"generation": 7}\n{"task": "cls", "current": "2", "max": 3, "pinned": true, "deleted": ["0"]}\n'
             b'{"task": "ner", "gone": true, "deleted": []}\n{"task": "cls", "current": "3", "max": 3, "deleted": []}\n'
             b'{"task": "qa", "current": "1"')
# --- window plans (fuzz_windows.c): option byte (bit 0: a single text; bits 1-2: the special tokens' template),
# then 2-byte big-endian numbers: QA question, context, max_seq_len - 1, doc_stride + 1, max_question_len;
# a text: tokens, max_len - 1, stride + 1 ---
def be(*v):
    return b"".join(struct.pack(">H", x) for x in v)


for opt, nums in [(2, (5, 1200, 383, 0, 0)), (2, (70, 300, 383, 129, 64)), (4, (3, 10, 63, 33, 0)),
                  (2, (0, 0, 63, 0, 0)), (2, (40, 100, 63, 33, 0)), (6, (9, 4097, 511, 0, 5)), (0, (1, 1, 0, 1, 1))]:
    put("windows", bytes([opt]) + be(*nums))
for opt, nums in [(3, (600, 511, 129)), (3, (62, 63, 17)), (3, (63, 63, 0)), (5, (4096, 127, 0)), (1, (10, 0, 0)),
                  (3, (300, 63, 62)), (7, (5000, 1023, 1001))]:
    put("windows", bytes([opt]) + be(*nums))

# --- keys files (--keys): a good one, every field, and each kind of refusal ---
D1 = "sha256:" + hashlib.sha256(b"key-a").hexdigest()
D2 = "sha256:" + hashlib.sha256(b"key-b").hexdigest()
for body in [{"tenants": [{"name": "search", "keys": [D1], "predict": ["sentiment", "search-*"], "admin": ["search-*"],
                           "requests_per_s": 50, "burst": 100, "tokens_per_s": 40000, "priority": "interactive", "share": 2},
                          {"name": "batch", "keys": [D2], "predict": ["*"], "priority": "batch", "tokens_burst": 5,
                           "tokens_per_s": 1.5}]},
             {"tenants": []},
             {"tenants": [{"name": "a", "keys": ["plain-key"]}]},
             {"tenants": [{"name": "a", "keys": [D1]}, {"name": "a", "keys": [D2]}]},
             {"tenants": [{"name": "a", "keys": [D1]}, {"name": "b", "keys": [D1]}]},
             {"tenants": [{"name": "a", "keys": [D1], "share": 0, "colour": "red"}]}]:
    put("keys", json.dumps(body).encode())
put("keys", b'{"tenants": [{"name": "a", "keys": ["sha256:zz"]}')
print("seeds written under", os.path.relpath(OUT, ROOT), file=sys.stderr)
