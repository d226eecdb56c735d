#!/usr/bin/env python3
"""Rewrites a safetensors file with its first tensor's last dimension halved (data cut to match):
a well-formed file whose shapes do not fit the backbone, for test_admin.c's bad-upload test."""
import json
import struct
import sys

path = sys.argv[1]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8 : 8 + n])
data = raw[8 + n :]
meta = header.pop("__metadata__", None)
items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
out, blobs, off = {}, [], 0
for i, (name, t) in enumerate(items):
    a, b = t["data_offsets"]
    blob = data[a:b]
    shape = list(t["shape"])
    if i == 0:
        shape[-1] //= 2
        size = 4
        for d in shape:
            size *= d
        blob = blob[:size]
    out[name] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
if meta is not None:
    out["__metadata__"] = meta
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
