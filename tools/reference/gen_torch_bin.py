#!/usr/bin/python3
"""Writes the fixtures of adapterd's PyTorch .bin reader (engine/io/torch_bin.c) into tests/fixtures/torch_bin/.

Test tooling only. Uses Debian's torch (1.13) and the standard library; run with /usr/bin/python3:

    /usr/bin/python3 tools/reference/gen_torch_bin.py --out tests/fixtures/torch_bin \
        [--mbert ../shared/data/adapters/adapterhub-mbert-md]

Every valid archive comes with expected/<name>.safetensors holding the same tensors (contiguous copies, raw bytes
taken from torch, written by the small independent writer below), so the C test compares the .bin reader against
values that torch itself produced, bit for bit. The broken archives are made from valid ones:

  dtypes.bin            torch.save of an OrderedDict state dict (with _metadata, like nn.Module.state_dict())
                        holding one tensor per storage type: F32 F64 F16 BF16 I64 I32 I16 I8 U8 BOOL
  views.bin             views sharing one storage with offsets, a 0-dim view, a 0-dim tensor, an empty tensor, a
                        size-1 dim with an odd stride, an nn.Parameter (_rebuild_parameter), and an alias (two
                        names, one tensor, as AdapterHub's prefix-tuning pool aliases are saved)
  zip64.bin             views.bin's entries rewritten by hand: archive folder "archive", every size/offset in the
                        central directory saturated to 0xFFFFFFFF with the real values in ZIP64 extra fields,
                        ZIP64 end records, and odd-length local extras so the tensor data is unaligned;
                        torch.load reads it back (checked here)
  noncontig.bin         a transposed (non-contiguous) tensor: must be rejected
  forbidden_global.bin  a valid zip whose data.pkl calls os.system: must be rejected, naming "os.system"
  truncated.bin         dtypes.bin cut to two thirds
  deflated.bin          dtypes.bin with its data entries DEFLATE-compressed: rejected (no zlib in adapterd)

With --mbert DIR it also writes expected_mbert_md.json: for each tensor of DIR/pytorch_adapter.bin and
DIR/pytorch_model_head.bin, loaded with torch.load, its dtype, shape, float64 sum, and the values at flat indices
0, numel // 2 and numel - 1.
"""

import argparse
import collections
import io
import json
import os
import struct
import sys
import zipfile

import torch

# torch dtype -> (safetensors name, same-size integer dtype used to take raw bytes)
DT = {
    torch.float32: ("F32", torch.int32),
    torch.float64: ("F64", torch.int64),
    torch.float16: ("F16", torch.int16),
    torch.bfloat16: ("BF16", torch.int16),
    torch.int64: ("I64", torch.int64),
    torch.int32: ("I32", torch.int32),
    torch.int16: ("I16", torch.int16),
    torch.int8: ("I8", torch.int8),
    torch.uint8: ("U8", torch.uint8),
    torch.bool: ("BOOL", torch.uint8),
}


def raw_bytes(t):
    """Little-endian bytes of t in C order (x86-64 is little-endian)."""
    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    else:
        t = t.view(DT[t.dtype][1])
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    """Minimal safetensors writer: header padded to 8, tensors back to back in name order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = raw_bytes(t)
        header[name] = {"dtype": DT[t.dtype][0], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def state_dict(items):
    """An OrderedDict with the _metadata attribute nn.Module.state_dict() sets (pickled through BUILD)."""
    sd = collections.OrderedDict(items)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd


def make_dtypes(g):
    return state_dict([
        ("f32", torch.randn(3, 4, generator=g)),
        ("f64", torch.randn(2, generator=g, dtype=torch.float64)),
        ("f16", torch.randn(5, generator=g).half()),
        ("bf16", torch.randn(2, 3, generator=g).bfloat16()),
        ("i64", torch.tensor([0, -1, 2**40 + 3, -2**62, 7], dtype=torch.int64)),
        ("i32", torch.tensor([1, -2, 2**31 - 1], dtype=torch.int32)),
        ("i16", torch.tensor([-32768, 12345], dtype=torch.int16)),
        ("i8", torch.tensor([-128, 0, 127], dtype=torch.int8)),
        ("u8", torch.tensor([0, 1, 200, 255], dtype=torch.uint8)),
        ("bool", torch.tensor([True, False, True])),
    ])


def make_views(g):
    base = torch.randn(24, generator=g)
    grid = base.view(4, 6)
    alias = torch.randn(2, 3, generator=g)
    odd = torch.arange(6.0).view(6, 1).t()  # shape (1, 6), stride (1, 1): size-1 dim with a non-C stride
    assert odd.stride() == (1, 1)
    return state_dict([
        ("base", base),
        ("grid", grid),                      # same storage, offset 0
        ("slice", base[4:10]),               # offset 4
        ("block", base[6:18].view(3, 4)),    # offset 6, 2-D
        ("row", grid[2]),                    # offset 12
        ("elem", base[5]),                   # 0-dim view, offset 5
        ("scalar", torch.tensor(3.5)),       # 0-dim with its own storage
        ("empty", torch.zeros(0, 3)),        # 0 elements, 0-byte storage
        ("odd_stride", odd),
        ("param", torch.nn.Parameter(torch.randn(2, 2, generator=g))),
        ("pool.alias", alias),
        ("canonical.alias", alias),          # the same tensor under a second name
    ])


def expected_of(sd):
    return {k: v.detach().clone().contiguous() for k, v in sd.items()}


def rewrite_zip(src, dst, deflate=()):
    """Copies a zip entry by entry with zipfile, DEFLATE-compressing the entries whose name ends with one of
    `deflate`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            method = zipfile.ZIP_DEFLATED if info.filename.endswith(tuple(deflate)) else zipfile.ZIP_STORED
            zout.writestr(zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0)), zin.read(info),
                          compress_type=method)


def write_zip64(src, dst, folder):
    """Rewrites src with every central-directory size and offset in ZIP64 extra fields (see the module doc)."""
    with zipfile.ZipFile(src) as zin:
        entries = [(folder + "/" + i.filename.split("/", 1)[1], zin.read(i)) for i in zin.infolist()]
    out, central = bytearray(), bytearray()
    for k, (name, data) in enumerate(entries):
        name = name.encode()
        crc = zipfile.crc32(data) & 0xFFFFFFFF
        off = len(out)
        pad = 1 + 2 * k % 5  # odd lengths: data lands at odd offsets
        lextra = struct.pack("<HH", 0xCAFE, pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, len(data), len(data), len(name),
                           len(lextra)) + name + lextra + data
        cextra = struct.pack("<HHQQQ", 0x0001, 24, len(data), len(data), off)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(name), len(cextra), 0, 0, 0, 0, 0xFFFFFFFF) + name + cextra
    cd_off = len(out)
    out += central
    z64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries), len(central), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(dst, "wb") as f:
        f.write(out)


def forbidden_pickle():
    """A protocol-2 pickle that would run os.system('true') if unpickled."""
    return b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03."


def check_same(path, expected):
    got = torch.load(path)
    assert list(got) == list(expected), path
    for k, v in expected.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and raw_bytes(got[k]) == raw_bytes(v), (path, k)


def mbert_expected(d):
    out = {"_produced_by": "tools/reference/gen_torch_bin.py --mbert: torch.load (torch %s) of each file; sum "
                           "in float64 over the stored values; values at flat index 0, numel//2, numel-1"
                           % torch.__version__}
    for fn in ("pytorch_adapter.bin", "pytorch_model_head.bin"):
        sd = torch.load(os.path.join(d, fn), map_location="cpu")
        tens = {}
        for k, v in sd.items():
            f = v.detach().reshape(-1).double()
            n = f.numel()
            tens[k] = {"dtype": DT[v.dtype][0], "shape": list(v.shape), "sum": float(f.sum()),
                       "at": [[i, float(f[i])] for i in sorted({0, n // 2, n - 1})]}
        out[fn] = tens
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mbert", help="directory with the AdapterHub mBERT pytorch_adapter.bin / pytorch_model_head.bin")
    a = ap.parse_args()
    out = a.out
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    p = lambda n: os.path.join(out, n)
    g = torch.Generator().manual_seed(1234)

    dt = make_dtypes(g)
    torch.save(dt, p("dtypes.bin"))
    write_safetensors(p("expected/dtypes.safetensors"), expected_of(dt))
    check_same(p("dtypes.bin"), dt)

    vw = make_views(g)
    torch.save(vw, p("views.bin"))
    write_safetensors(p("expected/views.safetensors"), expected_of(vw))
    check_same(p("views.bin"), vw)

    write_zip64(p("views.bin"), p("zip64.bin"), "archive")
    check_same(p("zip64.bin"), vw)
    with zipfile.ZipFile(p("zip64.bin")) as z:
        assert z.testzip() is None

    torch.save(collections.OrderedDict([("ok", torch.ones(2)), ("t", torch.randn(3, 4, generator=g).t())]),
               p("noncontig.bin"))

    with zipfile.ZipFile(p("dtypes.bin")) as zin, zipfile.ZipFile(p("forbidden_global.bin"), "w") as zout:
        for info in zin.infolist():
            data = forbidden_pickle() if info.filename.endswith("/data.pkl") else zin.read(info)
            zout.writestr(zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0)), data)

    with open(p("dtypes.bin"), "rb") as f:
        whole = f.read()
    with open(p("truncated.bin"), "wb") as f:
        f.write(whole[: len(whole) * 2 // 3])

    rewrite_zip(p("dtypes.bin"), p("deflated.bin"), deflate=("/data/0", "/data/1", "/data/2"))

    if a.mbert:
        with open(p("expected_mbert_md.json"), "w") as f:
            json.dump(mbert_expected(a.mbert), f, indent=1, sort_keys=True)
            f.write("\n")

    total = sum(os.path.getsize(os.path.join(r, n)) for r, _, fs in os.walk(out) for n in fs)
    print(json.dumps({"out": out, "bytes": total}))


if __name__ == "__main__":
    sys.exit(main())
