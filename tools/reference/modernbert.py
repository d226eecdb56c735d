"""Independent PyTorch reference of ModernBERT (test oracle, never the product).

Written from the paper (Warner et al. 2024, "Smarter, Better, Faster, Longer: A Modern Bidirectional Encoder")
and the public Hugging Face modeling code's conventions (state-dict key names, config.json fields); it does not
import `transformers`.  One functional `forward` over a dict of tensors with the canonical (unprefixed) key names,
so the same code runs as the float64 oracle and as the float32 PyTorch peer of the benchmarks.

    e = LN_emb(tok[ids])                                       no position embeddings; LayerNorms without bias
    for layer l:
        a   = x if l == 0 else LN_attn(x)                      pre-norm; layer 0's attn_norm is the identity
        q, k, v = split(a Wqkv^T)                              (3, heads, head_dim) order of the fused rows
        q, k = rope(q), rope(k)                                NeoX halves; theta global or local by layer
        x  += softmax(q k^T / sqrt(d) + mask) v Wo^T           local layers (l % every != 0): |i - j| <= window/2
        g, u = (LN_mlp(x) Wi^T).chunk(2)                       GeGLU: act(first half) * second half
        x  += (act(g) * u) Wo_mlp^T
    h = LN_final(x)
    pooled = LN_head(act(Wd pool(h)))                          pool: first token (cls) or masked mean
    logits = Wc pooled + bc

Padding is handled with a key mask (masked_fill of finfo.min), and the sliding window with the same fill, so a
padded batch reproduces each sequence run alone.
"""

import math
from dataclasses import dataclass

import torch

import encoder as E


@dataclass
class Cfg:
    hidden: int
    layers: int
    heads: int
    inter: int           # intermediate_size: Wi has 2 * inter rows
    vocab: int
    max_pos: int         # max_position_embeddings (longest input; rotary has no table in the checkpoint)
    act: str             # hidden_activation
    eps: float           # norm_eps
    global_every: int    # global_attn_every_n_layers
    window: int          # local_attention (each token sees +- window // 2)
    global_theta: float
    local_theta: float
    pad_id: int = 50283
    cls_id: int = 50281
    sep_id: int = 50282
    norm_bias: bool = False
    attn_bias: bool = False
    mlp_bias: bool = False
    cls_pooling: str = "mean"
    cls_act: str = "gelu"
    cls_bias: bool = False
    arch: str = "modernbert"

    def is_global(self, layer):
        return layer % self.global_every == 0


def shape_defaults(shape):
    """'tiny' (small and fast, short window so packing and windows are exercised) or 'base' (ModernBERT-base)."""
    if shape == "tiny":
        return dict(hidden=64, layers=4, heads=4, inter=96, vocab=1024, max_pos=8192, window=16, global_every=3)
    if shape == "base":
        return dict(hidden=768, layers=22, heads=12, inter=1152, vocab=50368, max_pos=8192, window=128,
                    global_every=3)
    raise ValueError(f"unknown shape {shape}")


def make_cfg(hidden, layers, heads, inter, vocab, max_pos, window, global_every, act="gelu", eps=1e-5,
             global_theta=160000.0, local_theta=10000.0, cls_pooling="mean", norm_bias=False, bias=False):
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    special = (vocab - 87, vocab - 86, vocab - 85) if vocab > 1000 else (1, 2, 0)  # base: 50281, 50282, 50283
    return Cfg(hidden=hidden, layers=layers, heads=heads, inter=inter, vocab=vocab, max_pos=max_pos, act=act, eps=eps,
               global_every=global_every, window=window, global_theta=global_theta, local_theta=local_theta,
               cls_id=special[0], sep_id=special[1], pad_id=special[2], norm_bias=norm_bias, attn_bias=bias,
               mlp_bias=bias, cls_pooling=cls_pooling, cls_bias=bias)


def hf_config(cfg, torch_dtype="float32", with_head=False, num_labels=2):
    """config.json with the fields ModernBertConfig saves (the real ModernBERT-base file's layout)."""
    d = {
        "architectures": ["ModernBertForSequenceClassification" if with_head else "ModernBertForMaskedLM"],
        "attention_bias": cfg.attn_bias, "attention_dropout": 0.0, "bos_token_id": cfg.cls_id,
        "classifier_activation": cfg.cls_act, "classifier_bias": cfg.cls_bias, "classifier_dropout": 0.0,
        "classifier_pooling": cfg.cls_pooling, "cls_token_id": cfg.cls_id, "decoder_bias": True,
        "deterministic_flash_attn": False, "embedding_dropout": 0.0, "eos_token_id": cfg.sep_id,
        "global_attn_every_n_layers": cfg.global_every, "global_rope_theta": cfg.global_theta,
        "gradient_checkpointing": False, "hidden_activation": cfg.act, "hidden_size": cfg.hidden,
        "initializer_cutoff_factor": 2.0, "initializer_range": 0.02, "intermediate_size": cfg.inter,
        "layer_norm_eps": cfg.eps, "local_attention": cfg.window, "local_rope_theta": cfg.local_theta,
        "max_position_embeddings": cfg.max_pos, "mlp_bias": cfg.mlp_bias, "mlp_dropout": 0.0,
        "model_type": "modernbert", "norm_bias": cfg.norm_bias, "norm_eps": cfg.eps,
        "num_attention_heads": cfg.heads, "num_hidden_layers": cfg.layers, "pad_token_id": cfg.pad_id,
        "position_embedding_type": "absolute", "repad_logits_with_grad": False, "sep_token_id": cfg.sep_id,
        "sparse_pred_ignore_index": -100, "sparse_prediction": False, "torch_dtype": torch_dtype,
        "transformers_version": "4.48.0", "vocab_size": cfg.vocab,
    }
    if with_head:
        d["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        d["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    return d


def cfg_from_hf(d):
    if d.get("model_type") != "modernbert":
        raise ValueError("not a modernbert config")
    return Cfg(hidden=d["hidden_size"], layers=d["num_hidden_layers"], heads=d["num_attention_heads"],
               inter=d["intermediate_size"], vocab=d["vocab_size"], max_pos=d.get("max_position_embeddings", 8192),
               act=d.get("hidden_activation", "gelu"), eps=d.get("norm_eps", 1e-5),
               global_every=d.get("global_attn_every_n_layers", 3), window=d.get("local_attention", 128),
               global_theta=d.get("global_rope_theta", 160000.0),
               local_theta=d.get("local_rope_theta") or d.get("global_rope_theta", 160000.0),
               pad_id=d.get("pad_token_id", 50283), cls_id=d.get("cls_token_id", 50281),
               sep_id=d.get("sep_token_id", 50282), norm_bias=d.get("norm_bias", False),
               attn_bias=d.get("attention_bias", False), mlp_bias=d.get("mlp_bias", False),
               cls_pooling=d.get("classifier_pooling", "cls"), cls_act=d.get("classifier_activation", "gelu"),
               cls_bias=d.get("classifier_bias", False))


# ---------------------------------------------------------------------------------------------------------------
# Keys

PREFIX = "model."   # ModernBertFor*'s attribute for the encoder (base_model_prefix)


def param_shapes(cfg, head=True):
    """Canonical key -> (shape, kind), in module order.  Keys under 'model.' in a saved *For* checkpoint are given
    here without it; head.* sits outside the encoder in every saved checkpoint."""
    H, I = cfg.hidden, cfg.inter
    out = {}

    def lin(name, n_out, n_in, kind, bias):
        out[name + ".weight"] = ((n_out, n_in), kind)
        if bias:
            out[name + ".bias"] = ((n_out,), "b")

    def ln(name):
        out[name + ".weight"] = ((H,), "ln_w")
        if cfg.norm_bias:
            out[name + ".bias"] = ((H,), "ln_b")

    out["embeddings.tok_embeddings.weight"] = ((cfg.vocab, H), "emb_word")
    ln("embeddings.norm")
    for i in range(cfg.layers):
        p = f"layers.{i}."
        if i:
            ln(p + "attn_norm")
        lin(p + "attn.Wqkv", 3 * H, H, "w_qkv", cfg.attn_bias)
        lin(p + "attn.Wo", H, H, "w_v", cfg.attn_bias)
        ln(p + "mlp_norm")
        lin(p + "mlp.Wi", 2 * I, H, "w", cfg.mlp_bias)
        lin(p + "mlp.Wo", H, I, "w_v", cfg.mlp_bias)
    ln("final_norm")
    if head:
        lin("head.dense", H, H, "w", cfg.cls_bias)
        ln("head.norm")
    return out


def classifier_shapes(cfg, num_labels=2):
    return {"classifier.weight": ((num_labels, cfg.hidden), "w"), "classifier.bias": ((num_labels,), "b")}


def init_tensors(shapes, gen):
    """encoder.init_tensors' scaling; the fused Wqkv gets the query/key scale on its first 2/3 of rows."""
    plain = {}
    for k, (shape, kind) in shapes.items():
        plain[k] = (shape, "w" if kind == "w_qkv" else kind)
    out = E.init_tensors(plain, gen)
    for k, (shape, kind) in shapes.items():
        if kind == "w_qkv":
            n = shape[0] // 3
            out[k][:2 * n] *= math.sqrt(2.0)
    return out


def canonical_weights(cfg, sd):
    """Encoder + head tensors from a saved state dict (with or without the 'model.' prefix)."""
    has_prefix = any(k.startswith(PREFIX) for k in sd)
    want = param_shapes(cfg, head=True)
    out = {}
    for k, v in sd.items():
        if has_prefix and k.startswith(PREFIX):
            k = k[len(PREFIX):]
        if k in want:
            out[k] = v
    for k, (shape, _) in want.items():
        if k not in out:
            if k.startswith("head."):
                continue
            raise KeyError(f"missing tensor {k}")
        if tuple(out[k].shape) != tuple(shape):
            raise ValueError(f"{k}: shape {tuple(out[k].shape)}, expected {tuple(shape)}")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Forward

def rope_tables(theta, T, d, dtype):
    """cos, sin [T, d] for positions 0..T-1: angle t * theta^(-2i/d), duplicated over both halves (NeoX layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope(x, cos, sin):
    """x [B, n, T, d]: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]."""
    d = x.shape[-1]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _ln(fused, x, w, b, eps):
    if fused:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)
    return E.layer_norm(x, w, b if b is not None else 0.0, eps)


def forward(cfg, W, input_ids, attention_mask=None, dtype=torch.float64, fused=False, head_chunk=1):
    """Returns (last_hidden_state [B, T, H], pooled [B, H] or None).  input_ids [B, T] int64; attention_mask [B, T]
    1 = token.  head_chunk heads are computed at once (memory: B * head_chunk * T^2 scores)."""
    act = E._fused_activation if fused else E.activation
    W = {k: (v if v.dtype == dtype else v.to(dtype)) for k, v in W.items()}
    B, T = input_ids.shape
    H, n, d = cfg.hidden, cfg.heads, cfg.hidden // cfg.heads
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    keep = attention_mask.bool()[:, None, None, :]                                     # [B, 1, 1, T]
    pos = torch.arange(T)
    near = ((pos[:, None] - pos[None, :]).abs() <= cfg.window // 2)[None, None]         # [1, 1, T, T]
    neg = torch.finfo(dtype).min
    tables = {True: rope_tables(cfg.global_theta, T, d, dtype), False: rope_tables(cfg.local_theta, T, d, dtype)}

    def g(k):
        return W.get(k)

    def ln(x, name):
        return _ln(fused, x, W[name + ".weight"], g(name + ".bias"), cfg.eps)

    x = ln(W["embeddings.tok_embeddings.weight"][input_ids], "embeddings.norm")
    for i in range(cfg.layers):
        p = f"layers.{i}."
        glob = cfg.is_global(i)
        a = x if i == 0 else ln(x, p + "attn_norm")
        qkv = torch.nn.functional.linear(a, W[p + "attn.Wqkv.weight"], g(p + "attn.Wqkv.bias"))
        qkv = qkv.view(B, T, 3, n, d).permute(2, 0, 3, 1, 4)                           # [3, B, n, T, d]
        cos, sin = tables[glob]
        q, k, v = rope(qkv[0], cos, sin), rope(qkv[1], cos, sin), qkv[2]
        allowed = keep if glob else keep & near
        ctx = torch.empty_like(q)
        for h0 in range(0, n, head_chunk):
            hs = slice(h0, min(n, h0 + head_chunk))
            s = torch.matmul(q[:, hs], k[:, hs].transpose(-1, -2)) / math.sqrt(d)
            s = s.masked_fill(~allowed, neg)
            ctx[:, hs] = torch.matmul(torch.softmax(s, dim=-1), v[:, hs])
        ctx = ctx.transpose(1, 2).reshape(B, T, H)
        x = x + torch.nn.functional.linear(ctx, W[p + "attn.Wo.weight"], g(p + "attn.Wo.bias"))
        m = torch.nn.functional.linear(ln(x, p + "mlp_norm"), W[p + "mlp.Wi.weight"], g(p + "mlp.Wi.bias"))
        gate_in, gate = m.chunk(2, dim=-1)
        x = x + torch.nn.functional.linear(act(cfg.act, gate_in) * gate, W[p + "mlp.Wo.weight"],
                                           g(p + "mlp.Wo.bias"))
    x = ln(x, "final_norm")
    pooled = None
    if "head.dense.weight" in W:
        if cfg.cls_pooling == "cls":
            pin = x[:, 0]
        else:
            mk = attention_mask.to(dtype)[:, :, None]
            pin = (x * mk).sum(1) / mk.sum(1)
        pooled = ln(act(cfg.cls_act, torch.nn.functional.linear(pin, W["head.dense.weight"], g("head.dense.bias"))),
                    "head.norm")
    return x, pooled


class RefModernBert(torch.nn.Module):
    """nn.Module wrapper of `forward` for benchmarking; weights are buffers in `dtype`."""

    def __init__(self, cfg, W, dtype=torch.float32, fused=True, head_chunk=1):
        super().__init__()
        self.cfg, self.fused, self.dtype, self.head_chunk = cfg, fused, dtype, head_chunk
        self.keys = sorted(W)
        for k in self.keys:
            self.register_buffer(k.replace(".", "__"), W[k].to(dtype).contiguous())

    def forward(self, input_ids, attention_mask):
        W = {k: getattr(self, k.replace(".", "__")) for k in self.keys}
        return forward(self.cfg, W, input_ids, attention_mask, self.dtype, self.fused, self.head_chunk)
