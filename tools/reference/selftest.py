#!/usr/bin/python3
"""Checks the reference against independent implementations inside torch, so the oracle is not only self-consistent.

- A whole BERT/RoBERTa/DistilBERT layer against torch.nn.TransformerEncoderLayer (post-LN, norm_first=False), whose
  MultiheadAttention also scales by 1/sqrt(head_dim) and takes a key-padding mask: same math, different code.
- Activations against torch.nn.functional.gelu (erf and tanh), silu, relu; LayerNorm against nn.LayerNorm.
- RoBERTa position ids against a plain loop over fairseq's rule.
- The safetensors writer/reader: every dtype round-trips, shards round-trip, and malformed files are refused.

Prints one line per check and exits non-zero on the first failure.
"""

import os
import struct
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import encoder as E  # noqa: E402
import st  # noqa: E402


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        sys.exit(1)


def layer_vs_torch(arch, act):
    torch.manual_seed(0)
    cfg = E.make_cfg(arch, hidden=64, layers=1, heads=4, inter=128, vocab=100, max_pos=66, act=act)
    W = {k: v.double() for k, v in E.init_tensors(E.param_shapes(cfg), torch.Generator().manual_seed(3)).items()}
    B, T = 3, 11
    x = torch.randn(B, T, 64, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, 7:] = 0
    mask[2, 2:] = 0
    if arch == "distilbert":
        p = "transformer.layer.0."
        n = [p + "attention.q_lin", p + "attention.k_lin", p + "attention.v_lin", p + "attention.out_lin",
             p + "sa_layer_norm", p + "ffn.lin1", p + "ffn.lin2", p + "output_layer_norm"]
    else:
        p = "encoder.layer.0."
        n = [p + "attention.self.query", p + "attention.self.key", p + "attention.self.value",
             p + "attention.output.dense", p + "attention.output.LayerNorm", p + "intermediate.dense",
             p + "output.dense", p + "output.LayerNorm"]
    q, k, v, o, ln1, f1, f2, ln2 = n
    tl = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation={"gelu": "gelu", "relu": "relu"}[act],
                                          layer_norm_eps=cfg.eps, batch_first=True, norm_first=False).double().eval()
    with torch.no_grad():
        tl.self_attn.in_proj_weight.copy_(torch.cat([W[q + ".weight"], W[k + ".weight"], W[v + ".weight"]]))
        tl.self_attn.in_proj_bias.copy_(torch.cat([W[q + ".bias"], W[k + ".bias"], W[v + ".bias"]]))
        tl.self_attn.out_proj.weight.copy_(W[o + ".weight"])
        tl.self_attn.out_proj.bias.copy_(W[o + ".bias"])
        tl.norm1.weight.copy_(W[ln1 + ".weight"])
        tl.norm1.bias.copy_(W[ln1 + ".bias"])
        tl.linear1.weight.copy_(W[f1 + ".weight"])
        tl.linear1.bias.copy_(W[f1 + ".bias"])
        tl.linear2.weight.copy_(W[f2 + ".weight"])
        tl.linear2.bias.copy_(W[f2 + ".bias"])
        tl.norm2.weight.copy_(W[ln2 + ".weight"])
        tl.norm2.bias.copy_(W[ln2 + ".bias"])
        want = tl(x, src_key_padding_mask=(mask == 0))
        # Our layer, isolated by making the embedding stage the identity: feed x through forward()'s layer loop.
        add = (1.0 - mask.double()) * torch.finfo(torch.float64).min
        ctx = E.attention(x, add, W[q + ".weight"], W[q + ".bias"], W[k + ".weight"], W[k + ".bias"],
                          W[v + ".weight"], W[v + ".bias"], 4)
        a = E.layer_norm(x + E.linear(ctx, W[o + ".weight"], W[o + ".bias"]), W[ln1 + ".weight"], W[ln1 + ".bias"],
                         cfg.eps)
        f = E.linear(E.activation(act, E.linear(a, W[f1 + ".weight"], W[f1 + ".bias"])), W[f2 + ".weight"],
                     W[f2 + ".bias"])
        got = E.layer_norm(a + f, W[ln2 + ".weight"], W[ln2 + ".bias"], cfg.eps)
    valid = mask.bool()
    d = (got - want)[valid].abs().max().item()
    check(f"{arch} {act} layer == nn.TransformerEncoderLayer", d < 1e-12, f"max diff {d:.2e}")


def full_forward_vs_layers():
    """forward() == embeddings + the layer composed by hand via TransformerEncoderLayer, for a 2-layer BERT."""
    cfg = E.make_cfg("bert", hidden=32, layers=2, heads=2, inter=64, vocab=50, max_pos=20, act="gelu")
    W = {k: v.double() for k, v in E.init_tensors(E.param_shapes(cfg), torch.Generator().manual_seed(5)).items()}
    ids = torch.randint(0, 50, (2, 9))
    tt = torch.randint(0, 2, (2, 9))
    with torch.no_grad():
        h, pooled = E.forward(cfg, W, ids, None, tt)
        emb = torch.nn.functional.embedding
        x = emb(ids, W["embeddings.word_embeddings.weight"]) + \
            emb(torch.arange(9)[None], W["embeddings.position_embeddings.weight"]) + \
            emb(tt, W["embeddings.token_type_embeddings.weight"])
        x = torch.nn.functional.layer_norm(x, (32,), W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"],
                                           cfg.eps)
        for i in range(2):
            p = f"encoder.layer.{i}."
            tl = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, activation="gelu", layer_norm_eps=cfg.eps,
                                                  batch_first=True).double().eval()
            g = {n: W[p + n] for n in [
                "attention.self.query.weight", "attention.self.key.weight", "attention.self.value.weight",
                "attention.self.query.bias", "attention.self.key.bias", "attention.self.value.bias"]}
            tl.self_attn.in_proj_weight.copy_(torch.cat([g["attention.self.query.weight"],
                                                         g["attention.self.key.weight"],
                                                         g["attention.self.value.weight"]]))
            tl.self_attn.in_proj_bias.copy_(torch.cat([g["attention.self.query.bias"], g["attention.self.key.bias"],
                                                       g["attention.self.value.bias"]]))
            for mod, key in ((tl.self_attn.out_proj, "attention.output.dense"),
                             (tl.norm1, "attention.output.LayerNorm"), (tl.linear1, "intermediate.dense"),
                             (tl.linear2, "output.dense"), (tl.norm2, "output.LayerNorm")):
                mod.weight.copy_(W[p + key + ".weight"])
                mod.bias.copy_(W[p + key + ".bias"])
            x = tl(x)
        pw = torch.tanh(torch.nn.functional.linear(x[:, 0], W["pooler.dense.weight"], W["pooler.dense.bias"]))
    d = max((h - x).abs().max().item(), (pooled - pw).abs().max().item())
    check("bert 2-layer forward == embeddings + TransformerEncoderLayer x2 + pooler", d < 1e-12, f"max diff {d:.2e}")


def activations_and_norm():
    x = torch.linspace(-8, 8, 4001, dtype=torch.float64)
    F = torch.nn.functional
    pairs = [("gelu", F.gelu(x)), ("gelu_new", F.gelu(x, approximate="tanh")), ("relu", F.relu(x)),
             ("silu", F.silu(x))]
    for name, want in pairs:
        d = (E.activation(name, x) - want).abs().max().item()
        check(f"activation {name} == torch", d < 1e-14, f"max diff {d:.1e}")
    d = (E.activation("gelu", x) - E.activation("gelu_new", x)).abs().max().item()
    check("gelu and gelu_new differ (so the fixtures can tell them apart)", d > 1e-4, f"max diff {d:.1e}")
    y = torch.randn(5, 33, dtype=torch.float64)
    w, b = torch.randn(33, dtype=torch.float64), torch.randn(33, dtype=torch.float64)
    d = (E.layer_norm(y, w, b, 1e-5) - F.layer_norm(y, (33,), w, b, 1e-5)).abs().max().item()
    check("layer_norm == torch", d < 1e-13, f"max diff {d:.1e}")


def fused_vs_oracle():
    """The benchmark/ONNX path (torch's fused LayerNorm and activations) computes the same function as the oracle."""
    for arch, act in (("bert", "gelu"), ("roberta", "gelu_new"), ("distilbert", "silu"), ("bert", "relu")):
        cfg = E.make_cfg(arch, hidden=64, layers=2, heads=4, inter=128, vocab=100, max_pos=66, act=act)
        W = {k: v.double() for k, v in E.init_tensors(E.param_shapes(cfg), torch.Generator().manual_seed(9)).items()}
        ids = torch.randint(3, 100, (3, 13))
        mask = torch.ones_like(ids)
        mask[0, 5:] = 0
        with torch.no_grad():
            h0, p0 = E.forward(cfg, W, ids, mask, None, fused=False)
            h1, p1 = E.forward(cfg, W, ids, mask, None, fused=True)
        d = (h0 - h1).abs().max().item()
        if p0 is not None:
            d = max(d, (p0 - p1).abs().max().item())
        check(f"{arch} {act} fused forward == oracle forward", d < 1e-12, f"max diff {d:.1e}")


def roberta_positions():
    cfg = E.make_cfg("roberta", hidden=8, layers=1, heads=2, inter=8, vocab=20, max_pos=20)
    ids = torch.tensor([[0, 5, 1, 7, 2, 1, 1], [0, 9, 9, 9, 9, 9, 2]])
    want = []
    for row in ids.tolist():
        n, r = 0, []
        for t in row:
            if t == cfg.pad_id:
                r.append(cfg.pad_id)
            else:
                n += 1
                r.append(cfg.pad_id + n)
        want.append(r)
    got = E.position_ids(cfg, ids).tolist()
    check("roberta position ids (pad in the middle, right padding)", got == want, str(got[0]))
    check("roberta first real position is pad+1", got[1][0] == 2)


def safetensors_io():
    g = torch.Generator().manual_seed(1)
    t = {"a.f32": torch.randn(3, 5, generator=g), "b.f16": torch.randn(7, generator=g).half(),
         "c.bf16": torch.randn(2, 3, generator=g).bfloat16(), "d.i32": torch.arange(-3, 3, dtype=torch.int32),
         "e.i64": torch.arange(4, dtype=torch.int64).reshape(2, 2), "f.empty": torch.zeros(0, 4)}
    buf = st.serialize(t, {"format": "pt"})
    (n,) = struct.unpack("<Q", buf[:8])
    check("header length multiple of 8", n % 8 == 0, str(n))
    back, meta = st.deserialize(buf)
    ok = meta == {"format": "pt"} and all(torch.equal(back[k], t[k]) and back[k].dtype == t[k].dtype for k in t)
    check("safetensors round trip F32/F16/BF16/I32/I64/empty", ok)
    # A flipped bf16 bit pattern must survive (BF16 stored as raw u16).
    check("bf16 raw bits preserved", torch.equal(back["c.bf16"].view(torch.int16), t["c.bf16"].view(torch.int16)))
    for what, bad in (("truncated", buf[:-1]), ("huge header length", struct.pack("<Q", 1 << 40) + buf[8:]),
                      ("short file", buf[:5])):
        try:
            st.deserialize(bad)
            check(f"reject {what}", False)
        except ValueError as e:
            check(f"reject {what}", True, f"({e})")
    with tempfile.TemporaryDirectory() as d:
        big = {f"w.{i}": torch.randn(10 + i, generator=g) for i in range(9)}
        wm = st.save_sharded(big, d, 3)
        files = sorted(os.listdir(d))
        check("3 shards + index", files == ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                            "model-00003-of-00003.safetensors", "model.safetensors.index.json"],
              str(files))
        back = st.load_dir(d)
        check("sharded round trip", set(back) == set(big) and all(torch.equal(back[k], big[k]) for k in big),
              str(sorted(set(wm.values()))))


def main():
    activations_and_norm()
    for arch in ("bert", "roberta", "distilbert"):
        for act in ("gelu", "relu"):
            layer_vs_torch(arch, act)
    full_forward_vs_layers()
    fused_vs_oracle()
    roberta_positions()
    safetensors_io()
    print("all reference self-tests passed")


if __name__ == "__main__":
    main()
