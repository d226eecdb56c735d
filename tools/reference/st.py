"""Minimal safetensors writer and reader (test reference only, never the product).

The format, as the safetensors reference implementation defines it:

    [u64 little-endian N][N bytes of JSON header][data]

The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative to the start
of the data section; an optional "__metadata__" entry maps strings to strings.  The header is padded with spaces
so that N is a multiple of 8 (the data section then starts 8-byte aligned).  Tensors are laid out back to back,
with no gaps and no overlaps, and the data section is exactly as long as the last tensor end.

Tensors are torch tensors in and out, because torch is the only Debian-packaged library that has all five
dtypes (numpy has no bfloat16).  We write tensors in name order; the Rust writer sorts by alignment then name,
which no reader may rely on, so a loader that works on our files must not assume either order.
"""

import json
import os
import struct

import torch

DTYPES = {
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I32": (torch.int32, 4),
    "I64": (torch.int64, 8),
    "F64": (torch.float64, 8),
}
_BY_TORCH = {v[0]: k for k, v in DTYPES.items()}

# The reference implementation refuses headers above 100 MB.
MAX_HEADER = 100_000_000


def _tensor_bytes(t):
    """Raw little-endian bytes of a contiguous CPU tensor (x86-64 is little-endian)."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def serialize(tensors, metadata=None):
    """Return the bytes of a safetensors file holding `tensors` (dict name -> torch.Tensor)."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _BY_TORCH:
            raise ValueError(f"{name}: unsupported dtype {t.dtype}")
        b = _tensor_bytes(t)
        header[name] = {"dtype": _BY_TORCH[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    return struct.pack("<Q", len(hj)) + hj + b"".join(blobs)


def save_file(tensors, path, metadata=None):
    """Write `tensors` to `path` as one safetensors file."""
    data = serialize(tensors, metadata)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def deserialize(buf):
    """Parse safetensors bytes; return (dict name -> torch.Tensor, metadata dict or None).

    Validates as the reference does: header length bound, JSON object, known dtypes, each tensor's byte size equal to
    shape x dtype size, offsets inside the buffer, tensors contiguous without gaps or overlaps.
    """
    if len(buf) < 8:
        raise ValueError("file shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER or 8 + n > len(buf):
        raise ValueError(f"header length {n} out of bounds (file is {len(buf)} bytes)")
    header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    data = memoryview(buf)[8 + n:]
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    out = {}
    expect = 0
    for name, e in entries:
        if e["dtype"] not in DTYPES:
            raise ValueError(f"{name}: unsupported dtype {e['dtype']}")
        dt, size = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        numel = 1
        for d in e["shape"]:
            numel *= d
        if b != expect:
            raise ValueError(f"{name}: data_offsets begin {b}, expected {expect} (gap or overlap)")
        if end - b != numel * size:
            raise ValueError(f"{name}: {end - b} bytes for shape {e['shape']} {e['dtype']}")
        if end > len(data):
            raise ValueError(f"{name}: data_offsets end {end} beyond data section ({len(data)} bytes)")
        expect = end
        raw = bytes(data[b:end])
        if dt in (torch.float16, torch.bfloat16):
            t = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(dt) if numel else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(bytearray(raw), dtype=dt) if numel else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"])
    if expect != len(data):
        raise ValueError(f"data section is {len(data)} bytes, tensors cover {expect}")
    return out, meta


def load_file(path):
    """Read one safetensors file; return (tensors, metadata)."""
    with open(path, "rb") as f:
        return deserialize(f.read())


def shard_name(i, n):
    """Hugging Face's shard naming: model-00001-of-00003.safetensors (1-based)."""
    return f"model-{i:05d}-of-{n:05d}.safetensors"


def save_sharded(tensors, out_dir, n_shards, metadata=None):
    """Write `tensors` as `n_shards` files plus model.safetensors.index.json, as save_pretrained does.

    Tensors go to shards in name order, each shard closed once it reaches total/n_shards bytes, so every shard is
    non-empty when there are at least n_shards tensors.
    """
    names = sorted(tensors)
    if n_shards < 1 or n_shards > len(names):
        raise ValueError(f"cannot split {len(names)} tensors into {n_shards} shards")
    sizes = {k: tensors[k].numel() * tensors[k].element_size() for k in names}
    total = sum(sizes.values())
    groups = [[] for _ in range(n_shards)]
    acc = 0
    gi = 0
    for idx, k in enumerate(names):
        remaining = len(names) - idx  # including k
        later = n_shards - 1 - gi     # shards after the current one
        # Move on once this shard has its share, or when every later shard needs one of the remaining tensors.
        if groups[gi] and later > 0 and (acc >= total * (gi + 1) / n_shards or remaining <= later):
            gi += 1
        groups[gi].append(k)
        acc += sizes[k]
    weight_map = {}
    for i, g in enumerate(groups):
        fn = shard_name(i + 1, n_shards)
        save_file({k: tensors[k] for k in g}, os.path.join(out_dir, fn), metadata)
        for k in g:
            weight_map[k] = fn
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return weight_map


def load_dir(model_dir):
    """Load every tensor of a Hugging Face model directory (single file or sharded index)."""
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load_file(single)[0]
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out = {}
    for fn in sorted(set(index["weight_map"].values())):
        part, _ = load_file(os.path.join(model_dir, fn))
        for k, v in part.items():
            if index["weight_map"].get(k) != fn:
                raise ValueError(f"{k} found in {fn} but the index maps it elsewhere")
            out[k] = v
    missing = set(index["weight_map"]) - set(out)
    if missing:
        raise ValueError(f"index names tensors missing from shards: {sorted(missing)[:5]}")
    return out
