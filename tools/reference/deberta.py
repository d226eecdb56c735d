"""Independent PyTorch reference of the ELECTRA (discriminator) and DeBERTa-v2/v3 encoders (test oracle only).

Written from the papers (Clark et al. 2020, ELECTRA; He et al. 2021, DeBERTa and DeBERTa-v3) and the public
description of Hugging Face's `ElectraModel` / `DebertaV2Model` (read, not copied), using Hugging Face's
state-dict key names and config.json fields so the files written look like `save_pretrained` output.  It has the
same API as `encoder.py` (ARCHS, shape_defaults, make_cfg, hf_config, cfg_from_hf, prefix_of, param_shapes,
head_shapes, init_tensors, canonical_weights, position_ids, forward), so `gen_encoder.py` drives both.

ELECTRA is BERT's block with a narrower embedding (embedding_size E, LayerNorm over E) projected to H:

    e = Wp . LN_E(word[ids] + pos[t] + type[tt]) + bp                       # electra.embeddings_project

DeBERTa-v2/v3 (post-LN like BERT) differs in its embeddings and its attention:

    e = LN_H(Wproj . (word[ids] [+ pos[t]] [+ type[tt]]))                  # Wproj (no bias) only when E != H
    R = LN(rel_embeddings)                                                  # (2k, H), k = position_buckets or
                                                                             #   max_relative_positions
    for each layer, head:   (q, k, v from query_proj, key_proj, value_proj)
        delta(i, j) = bucket(i - j)                                         # log buckets beyond k/2
        idx = clamp(delta + k, 0, 2k - 1)
        s[i, j] = (q_i . k_j + [c2p] q_i . Kr[idx(i, j)] + [p2c] k_j . Qr[idx(i, j)]) / sqrt(d * (1 + #types))
        Kr = key_proj(R), Qr = query_proj(R)    (share_att_key; else pos_key_proj, pos_query_proj)

p2c's index: HF gathers k_j . Qr at clamp(k - bucket(j - i)); bucket is odd (bucket(-x) = -bucket(x)), so that is
idx(i, j) as well.  The bucket function is computed in float32 as HF does (torch's default dtype), so a float32
implementation of it lands on the same integer.
"""

import math
from dataclasses import dataclass, field

import torch

import encoder as E

ARCHS = ("electra", "deberta-v2")
ACTS = E.ACTS


@dataclass
class Cfg:
    arch: str           # electra | deberta-v2
    hidden: int
    layers: int
    heads: int
    inter: int
    act: str
    eps: float
    vocab: int
    max_pos: int
    type_vocab: int
    pad_id: int
    emb: int            # embedding_size E (== hidden when the model has none)
    # DeBERTa-v2 only
    buckets: int = -1           # position_buckets (<= 0: none)
    max_rel: int = -1           # max_relative_positions as in the config (< 1: max_pos)
    pos_biased: bool = True     # position_biased_input: absolute positions added to the embeddings
    share_att_key: bool = False
    pos_att_type: tuple = field(default_factory=tuple)   # subset of ("c2p", "p2c")
    norm_rel: bool = False      # norm_rel_ebd contains layer_norm
    is_roberta = False

    @property
    def max_rel_eff(self):
        return self.max_rel if self.max_rel >= 1 else self.max_pos

    @property
    def span(self):
        """att_span: rows of R are 2 * span."""
        return self.buckets if self.buckets > 0 else self.max_rel_eff


def shape_defaults(arch, shape):
    """tiny: committed-fixture size; small: electra-small-discriminator / deberta-v3-small; base: deberta-v3-base."""
    if shape == "tiny":
        return dict(hidden=64, layers=2, heads=4, inter=128, vocab=1024, max_pos=64,
                    emb=32 if arch == "electra" else 64)
    if arch == "electra" and shape in ("small", "base"):
        if shape == "small":
            return dict(hidden=256, layers=12, heads=4, inter=1024, vocab=30522, max_pos=512, emb=128)
        return dict(hidden=768, layers=12, heads=12, inter=3072, vocab=30522, max_pos=512, emb=768)
    if arch == "deberta-v2" and shape in ("small", "base"):
        return dict(hidden=768, layers=6 if shape == "small" else 12, heads=12, inter=3072, vocab=128100,
                    max_pos=512, emb=768)
    raise ValueError(f"unknown shape {shape} for {arch}")


def make_cfg(arch, hidden, layers, heads, inter, vocab, max_pos, emb=None, act="gelu", eps=None, buckets=None,
             max_rel=-1, pos_biased=None, share_att_key=True, pos_att_type=("p2c", "c2p"), norm_rel=True,
             type_vocab=None):
    """Defaults are electra-small's and deberta-v3's (buckets 256, no absolute positions, no token types)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch}")
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    deb = arch == "deberta-v2"
    if eps is None:
        eps = 1e-7 if deb else 1e-12
    if type_vocab is None:
        type_vocab = 0 if deb else 2
    if pos_biased is None:
        pos_biased = not deb
    if buckets is None:
        buckets = 256 if deb else -1
    cfg = Cfg(arch=arch, hidden=hidden, layers=layers, heads=heads, inter=inter, act=act, eps=eps, vocab=vocab,
              max_pos=max_pos, type_vocab=type_vocab, pad_id=0, emb=emb or hidden)
    if deb:
        cfg.buckets, cfg.max_rel, cfg.pos_biased = buckets, max_rel, pos_biased
        cfg.share_att_key, cfg.pos_att_type, cfg.norm_rel = share_att_key, tuple(pos_att_type), norm_rel
    return cfg


def hf_config(cfg, torch_dtype="float32", with_head=False, num_labels=2):
    """config.json as save_pretrained writes it for ElectraModel / DebertaV2Model (and the sequence classifiers)."""
    if cfg.arch == "electra":
        d = {
            "architectures": ["ElectraForSequenceClassification" if with_head else "ElectraModel"],
            "attention_probs_dropout_prob": 0.1, "classifier_dropout": None, "embedding_size": cfg.emb,
            "hidden_act": cfg.act, "hidden_dropout_prob": 0.1, "hidden_size": cfg.hidden, "initializer_range": 0.02,
            "intermediate_size": cfg.inter, "layer_norm_eps": cfg.eps, "max_position_embeddings": cfg.max_pos,
            "model_type": "electra", "num_attention_heads": cfg.heads, "num_hidden_layers": cfg.layers,
            "pad_token_id": cfg.pad_id, "position_embedding_type": "absolute", "summary_activation": "gelu",
            "summary_last_dropout": 0.1, "summary_type": "first", "summary_use_proj": True,
            "type_vocab_size": cfg.type_vocab, "use_cache": True, "vocab_size": cfg.vocab,
        }
    else:
        d = {
            "architectures": ["DebertaV2ForSequenceClassification" if with_head else "DebertaV2Model"],
            "attention_probs_dropout_prob": 0.1, "hidden_act": cfg.act, "hidden_dropout_prob": 0.1,
            "hidden_size": cfg.hidden, "initializer_range": 0.02, "intermediate_size": cfg.inter,
            "layer_norm_eps": cfg.eps, "max_position_embeddings": cfg.max_pos, "max_relative_positions": cfg.max_rel,
            "model_type": "deberta-v2", "norm_rel_ebd": "layer_norm" if cfg.norm_rel else "none",
            "num_attention_heads": cfg.heads, "num_hidden_layers": cfg.layers, "pad_token_id": cfg.pad_id,
            "pooler_dropout": 0, "pooler_hidden_act": "gelu", "pooler_hidden_size": cfg.hidden,
            "pos_att_type": list(cfg.pos_att_type), "position_biased_input": cfg.pos_biased,
            "position_buckets": cfg.buckets, "relative_attention": True, "share_att_key": cfg.share_att_key,
            "type_vocab_size": cfg.type_vocab, "vocab_size": cfg.vocab,
        }
        if cfg.emb != cfg.hidden:
            d["embedding_size"] = cfg.emb
    if with_head:
        d["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        d["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    d["torch_dtype"] = torch_dtype
    d["transformers_version"] = "4.40.0"
    return d


def cfg_from_hf(d):
    mt = d["model_type"]
    if mt not in ARCHS:
        raise ValueError(f"unknown model_type {mt}")
    H = d["hidden_size"]
    common = dict(hidden=H, layers=d["num_hidden_layers"], heads=d["num_attention_heads"],
                  inter=d["intermediate_size"], vocab=d["vocab_size"], max_pos=d.get("max_position_embeddings", 512),
                  emb=d.get("embedding_size", H), act=d.get("hidden_act", "gelu"))
    if mt == "electra":
        return make_cfg(mt, eps=d.get("layer_norm_eps", 1e-12), type_vocab=d.get("type_vocab_size", 2), **common)
    if d.get("conv_kernel_size", 0) > 0 or not d.get("relative_attention", False):
        raise ValueError("only relative_attention without the convolution layer is modelled")
    pat = d.get("pos_att_type") or []
    if isinstance(pat, str):
        pat = [x.strip() for x in pat.lower().split("|")]
    norm = [x.strip() for x in (d.get("norm_rel_ebd") or "none").lower().split("|")]
    return make_cfg(mt, eps=d.get("layer_norm_eps", 1e-7), type_vocab=d.get("type_vocab_size", 0),
                    buckets=d.get("position_buckets", -1), max_rel=d.get("max_relative_positions", -1),
                    pos_biased=d.get("position_biased_input", True), share_att_key=d.get("share_att_key", False),
                    pos_att_type=tuple(p for p in pat if p in ("c2p", "p2c")), norm_rel="layer_norm" in norm,
                    **common)


def prefix_of(arch):
    return {"electra": "electra.", "deberta-v2": "deberta."}[arch]


def linear_names(cfg, i):
    """Module paths of layer i's Linear layers and LayerNorms, by role."""
    p = f"encoder.layer.{i}."
    qkv = ("query_proj", "key_proj", "value_proj") if cfg.arch == "deberta-v2" else ("query", "key", "value")
    return dict(q=p + "attention.self." + qkv[0], k=p + "attention.self." + qkv[1], v=p + "attention.self." + qkv[2],
                o=p + "attention.output.dense", ln1=p + "attention.output.LayerNorm", f1=p + "intermediate.dense",
                f2=p + "output.dense", ln2=p + "output.LayerNorm", pk=p + "attention.self.pos_key_proj",
                pq=p + "attention.self.pos_query_proj")


def param_shapes(cfg, pooler=True):
    """Canonical (unprefixed) key -> (shape, kind) in module order; kinds as encoder.init_tensors."""
    del pooler   # neither model has a pooler inside its base model
    H, I, Em = cfg.hidden, cfg.inter, cfg.emb
    out = {}

    def lin(name, n_out, n_in, kind="w", bias=True):
        out[name + ".weight"] = ((n_out, n_in), kind)
        if bias:
            out[name + ".bias"] = ((n_out,), "b")

    def ln(name, n=H):
        out[name + ".weight"] = ((n,), "ln_w")
        out[name + ".bias"] = ((n,), "ln_b")

    out["embeddings.word_embeddings.weight"] = ((cfg.vocab, Em), "emb_word")
    if cfg.arch == "electra":
        out["embeddings.position_embeddings.weight"] = ((cfg.max_pos, Em), "emb")
        out["embeddings.token_type_embeddings.weight"] = ((cfg.type_vocab, Em), "emb")
        ln("embeddings.LayerNorm", Em)
        if Em != H:
            lin("embeddings_project", H, Em)
    else:
        if cfg.pos_biased:
            out["embeddings.position_embeddings.weight"] = ((cfg.max_pos, Em), "emb")
        if cfg.type_vocab > 0:
            out["embeddings.token_type_embeddings.weight"] = ((cfg.type_vocab, Em), "emb")
        if Em != H:
            lin("embeddings.embed_proj", H, Em, bias=False)
        ln("embeddings.LayerNorm")
    for i in range(cfg.layers):
        n = linear_names(cfg, i)
        lin(n["q"], H, H, "w_qk")
        lin(n["k"], H, H, "w_qk")
        lin(n["v"], H, H, "w_v")
        if cfg.arch == "deberta-v2" and not cfg.share_att_key:
            if "c2p" in cfg.pos_att_type:
                lin(n["pk"], H, H, "w_qk")
            if "p2c" in cfg.pos_att_type:
                lin(n["pq"], H, H, "w_qk")
        lin(n["o"], H, H, "w_v")
        ln(n["ln1"])
        lin(n["f1"], I, H)
        lin(n["f2"], H, I)
        ln(n["ln2"])
    if cfg.arch == "deberta-v2":
        # Trained relative embeddings are larger than the absolute ones (the R row norm of deberta-v3-base is ~1).
        out["encoder.rel_embeddings.weight"] = ((2 * cfg.span, H), "emb_word")
        if cfg.norm_rel:
            ln("encoder.LayerNorm")
    return out


def head_shapes(cfg, num_labels=2):
    """ElectraForSequenceClassification: classifier.dense + classifier.out_proj; DebertaV2ForSequenceClassification:
    pooler.dense (ContextPooler) + classifier.  Both outside the base-model prefix."""
    H = cfg.hidden
    names = ([("classifier.dense", H, H), ("classifier.out_proj", num_labels, H)] if cfg.arch == "electra"
             else [("pooler.dense", H, H), ("classifier", num_labels, H)])
    out = {}
    for n, o, i in names:
        out[n + ".weight"] = ((o, i), "w")
        out[n + ".bias"] = ((o,), "b")
    return out


init_tensors = E.init_tensors


def canonical_weights(cfg, sd):
    pre = prefix_of(cfg.arch)
    has_prefix = any(k.startswith(pre) for k in sd)
    want = param_shapes(cfg)
    out = {}
    for k, v in sd.items():
        if has_prefix:
            if not k.startswith(pre):
                continue
            k = k[len(pre):]
        if k in want:
            out[k] = v
    for k, (shape, _) in want.items():
        if k not in out:
            raise KeyError(f"missing tensor {pre if has_prefix else ''}{k}")
        if tuple(out[k].shape) != tuple(shape):
            raise ValueError(f"{k}: shape {tuple(out[k].shape)}, expected {tuple(shape)}")
    return out


def position_ids(cfg, input_ids):
    B, T = input_ids.shape
    return torch.arange(T, dtype=torch.int64).unsqueeze(0).expand(B, T)


# ---------------------------------------------------------------------------------------------------------------
# Relative positions

def log_bucket(rel, bucket_size, max_position):
    """DeBERTa's log-bucketed relative position: exact inside (-bucket_size/2, bucket_size/2), beyond it
    sign(rel) * (mid + ceil(log(|rel| / mid) / log((max_position - 1) / mid) * (mid - 1))), mid = bucket_size // 2.
    Computed in float32 (HF's dtype); rel is an int64 tensor, returns int64."""
    mid = bucket_size // 2
    sign = torch.sign(rel)
    absr = torch.where((rel < mid) & (rel > -mid), torch.full_like(rel, mid - 1), rel.abs())
    ratio = absr.to(torch.float32) / float(mid)
    denom = torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float32))
    logp = torch.ceil(torch.log(ratio) / denom * float(mid - 1)) + mid
    return torch.where(absr <= mid, rel.to(torch.float32), logp * sign.to(torch.float32)).to(torch.int64)


def relative_positions(cfg, T):
    """[T, T] int64: bucket(i - j) (or i - j without buckets)."""
    r = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    if cfg.buckets > 0 and cfg.max_rel_eff > 0:
        r = log_bucket(r, cfg.buckets, cfg.max_rel_eff)
    return r


def deberta_embeddings(cfg, W, input_ids, token_type_ids, mask, ln, word_delta=None):
    x = W["embeddings.word_embeddings.weight"][input_ids]
    if word_delta is not None:
        x = x + word_delta
    if cfg.pos_biased:
        x = x + W["embeddings.position_embeddings.weight"][position_ids(cfg, input_ids)]
    if cfg.type_vocab > 0:
        x = x + W["embeddings.token_type_embeddings.weight"][token_type_ids]
    if cfg.emb != cfg.hidden:
        x = E.linear(x, W["embeddings.embed_proj.weight"], None)
    x = ln(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], cfg.eps)
    return x * mask[..., None].to(x.dtype)


def electra_embeddings(cfg, W, input_ids, token_type_ids, ln, word_delta=None):
    x = W["embeddings.word_embeddings.weight"][input_ids]
    if word_delta is not None:
        x = x + word_delta
    x = x + W["embeddings.position_embeddings.weight"][position_ids(cfg, input_ids)]
    x = x + W["embeddings.token_type_embeddings.weight"][token_type_ids]
    x = ln(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], cfg.eps)
    if cfg.emb != cfg.hidden:
        x = E.linear(x, W["embeddings_project.weight"], W["embeddings_project.bias"])
    return x


def rel_table(cfg, W, ln):
    """R: the (2 span, H) relative embeddings after their LayerNorm."""
    R = W["encoder.rel_embeddings.weight"][: 2 * cfg.span]
    if cfg.norm_rel:
        R = ln(R, W["encoder.LayerNorm.weight"], W["encoder.LayerNorm.bias"], cfg.eps)
    return R


def disentangled_attention(cfg, x, add_mask, q, k, v, Qr, Kr, relpos):
    """x [B, T, H] (unused but for shapes); q, k, v [B, T, H] projections; Qr, Kr [2 span, H] projected relative
    embeddings (None where the type is off); relpos [T, T].  Returns the context [B, T, H]."""
    B, T, H = q.shape
    n, d = cfg.heads, H // cfg.heads
    sf = 1 + len(cfg.pos_att_type)
    scale = math.sqrt(d * sf)

    def heads(t):
        return t.view(t.shape[0], -1, n, d).transpose(1, 2)     # [B?, n, T, d]

    qh, kh, vh = heads(q), heads(k), heads(v)
    s = torch.matmul(qh, kh.transpose(-1, -2))                  # [B, n, T, T]
    idx = torch.clamp(relpos + cfg.span, 0, 2 * cfg.span - 1)   # [T, T]
    if "c2p" in cfg.pos_att_type:
        kr = heads(Kr[None])[0]                                  # [n, 2span, d]
        c2p = torch.matmul(qh, kr.transpose(-1, -2)[None])      # [B, n, T, 2span]
        s = s + torch.gather(c2p, -1, idx.expand(B, n, T, T))
    if "p2c" in cfg.pos_att_type:
        qr = heads(Qr[None])[0]
        p2c = torch.matmul(kh, qr.transpose(-1, -2)[None])      # [B, n, T(key j), 2span]
        # p2c[i, j] = k_j . Qr[idx(i, j)]: gather row j at idx(i, j) = idx^T[j, i], then transpose.
        s = s + torch.gather(p2c, -1, idx.t().contiguous().expand(B, n, T, T)).transpose(-1, -2)
    s = s / scale + add_mask[:, None, None, :]
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, vh).transpose(1, 2).reshape(B, T, H)


def forward(cfg, W, input_ids, attention_mask=None, token_type_ids=None, dtype=torch.float64, fused=False,
            hooks=None):
    """Encoder forward, same contract as encoder.forward; returns (last_hidden_state, None): neither base model
    has a pooler.  hooks (optional, for the adapter reference) maps role -> fn(i, role, x_in, y) -> y applied after
    layer i's Linear of that role (q k v o f1 f2), also to the relative table's projections (share_att_key)."""
    H = cfg.hidden

    def _fused_ln(x, w, b, eps):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)

    ln = _fused_ln if fused else E.layer_norm
    act = E._fused_activation if fused else E.activation
    W = {k: (v if v.dtype == dtype else v.to(dtype)) for k, v in W.items()}
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    add_mask = (1.0 - attention_mask.to(dtype)) * torch.finfo(dtype).min
    if cfg.arch == "electra":
        x = electra_embeddings(cfg, W, input_ids, token_type_ids, ln)
    else:
        x = deberta_embeddings(cfg, W, input_ids, token_type_ids, attention_mask, ln)
    return layers(cfg, W, x, add_mask, ln, act, hooks), None


def layers(cfg, W, x, add_mask, ln, act, hooks=None, between=None):
    """The encoder's layers on embedded x; between(i, role, h, x_in, LN) (optional) replaces the two residual
    LayerNorm steps (role 'attn' / 'ffn') for bottleneck adapters."""
    T = x.shape[1]
    deb = cfg.arch == "deberta-v2"
    if deb:
        R = rel_table(cfg, W, ln)
        relpos = relative_positions(cfg, T)
    for i in range(cfg.layers):
        n = linear_names(cfg, i)

        def L(role, z, i=i, n=n):
            y = E.linear(z, W[n[role] + ".weight"], W[n[role] + ".bias"])
            return hooks(i, role, z, y) if hooks else y

        q, k, v = L("q", x), L("k", x), L("v", x)
        if deb:
            Qr = Kr = None
            if cfg.share_att_key:
                Qr = L("q", R) if "p2c" in cfg.pos_att_type else None
                Kr = L("k", R) if "c2p" in cfg.pos_att_type else None
            else:
                if "p2c" in cfg.pos_att_type:
                    Qr = E.linear(R, W[n["pq"] + ".weight"], W[n["pq"] + ".bias"])
                if "c2p" in cfg.pos_att_type:
                    Kr = E.linear(R, W[n["pk"] + ".weight"], W[n["pk"] + ".bias"])
            ctx = disentangled_attention(cfg, x, add_mask, q, k, v, Qr, Kr, relpos)
        else:
            B, _, H = x.shape
            d = H // cfg.heads
            hq, hk, hv = (t.view(B, T, cfg.heads, d).transpose(1, 2) for t in (q, k, v))
            s = torch.matmul(hq, hk.transpose(-1, -2)) / math.sqrt(d) + add_mask[:, None, None, :]
            ctx = torch.matmul(torch.softmax(s, -1), hv).transpose(1, 2).reshape(B, T, H)

        def LN1(z, n=n):
            return ln(z, W[n["ln1"] + ".weight"], W[n["ln1"] + ".bias"], cfg.eps)

        def LN2(z, n=n):
            return ln(z, W[n["ln2"] + ".weight"], W[n["ln2"] + ".bias"], cfg.eps)

        h = L("o", ctx)
        a = between(i, "attn", h, x, LN1) if between else LN1(h + x)
        f = L("f2", act(cfg.act, L("f1", a)))
        x = between(i, "ffn", f, a, LN2) if between else LN2(f + a)
    return x


class RefEncoder(torch.nn.Module):
    """nn.Module wrapper of `forward` for benchmarking; weights are buffers in `dtype`."""

    def __init__(self, cfg, W, dtype=torch.float32, fused=True):
        super().__init__()
        self.cfg, self.fused, self.dtype = cfg, fused, dtype
        self.keys = sorted(W)
        for k in self.keys:
            self.register_buffer(k.replace(".", "__"), W[k].to(dtype).contiguous())

    def forward(self, input_ids, attention_mask, token_type_ids):
        W = {k: getattr(self, k.replace(".", "__")) for k in self.keys}
        return (forward(self.cfg, W, input_ids, attention_mask, token_type_ids, self.dtype, self.fused)[0],)
