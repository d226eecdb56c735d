#!/usr/bin/env python3
"""Rewrites a safetensors file with its first tensor's last dimension halved (data cut to match):
a well-formed file whose shapes do not fit the backbone, for test_admin.c's bad-upload test.

With NAME DIM DELTA after the path, the tensor NAME instead gets DELTA added to dimension DIM (its
data cut, or repeated to the new length): one tensor that no longer fits the ones it meets."""
import json
import struct
import sys

path = sys.argv[1]
target = sys.argv[2] if len(sys.argv) > 4 else None
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
    if (target is None and i == 0) or name == target:
        if target is None:
            shape[-1] //= 2
        else:
            shape[int(sys.argv[3])] += int(sys.argv[4])
        size = 4
        for d in shape:
            size *= d
        blob = (blob * (size // max(len(blob), 1) + 1))[:size]
    out[name] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
if meta is not None:
    out["__metadata__"] = meta
h = json.dumps(out).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
