"""Independent PyTorch reference of the BERT, RoBERTa/XLM-R and DistilBERT encoders (test oracle, never the product).

Written from the architectures' definitions (Devlin et al. 2018 and Google's modeling.py; Liu et al. 2019 and
fairseq's learned positional embedding; Sanh et al. 2019), using Hugging Face's state-dict key names and config.json
fields so the files it writes are indistinguishable from save_pretrained output.  It does not import `transformers`.

Everything is one functional `forward(cfg, W, input_ids, attention_mask, token_type_ids)` over a dict of tensors
with the *canonical* (unprefixed) key names, so the same code runs as a float64 oracle, as the float32 PyTorch peer
in the benchmarks, and under torch.onnx.export (through `RefEncoder`).

The block (post-LN, as in the original Transformer and all three models):

    e  = LN(word[ids] + pos[position_ids] + type[token_type_ids])      # DistilBERT: no type term
    for each layer:
        a = LN(x + Wo . MHA(x) + bo)                                     # softmax(q k^T / sqrt(d_head) + mask) v
        x = LN(a + W2 . act(W1 . a + b1) + b2)
    pooled = tanh(Wp . x[:, 0] + bp)                                     # BERT/RoBERTa only

Padding is handled as Hugging Face does: an additive mask of finfo(dtype).min on padded keys.  RoBERTa position ids
are cumsum(ids != pad) * (ids != pad) + pad, so real tokens start at pad + 1 and pad tokens sit at position pad.
"""

import math
from dataclasses import dataclass

import torch

ARCHS = ("bert", "roberta", "xlm-roberta", "distilbert")
ACTS = ("gelu", "gelu_new", "relu", "silu", "swish", "gelu_pytorch_tanh")


@dataclass
class Cfg:
    arch: str          # bert | roberta | xlm-roberta | distilbert
    hidden: int        # H
    layers: int        # L
    heads: int         # n_heads; head_dim = H / n_heads
    inter: int         # FFN inner size
    act: str           # gelu | gelu_new | relu | silu
    eps: float         # LayerNorm epsilon
    vocab: int
    max_pos: int       # rows of the position embedding table
    type_vocab: int    # 0 for DistilBERT (no token type embedding)
    pad_id: int

    @property
    def is_roberta(self):
        return self.arch in ("roberta", "xlm-roberta")


# ---------------------------------------------------------------------------------------------------------------
# Shapes and Hugging Face config.json

def shape_defaults(arch, shape):
    """Standard shapes: 'tiny' (the committed fixtures) and 'base' (bert-base-uncased, roberta-base,
    xlm-roberta-base, distilbert-base-uncased)."""
    rob = arch in ("roberta", "xlm-roberta")
    if shape == "tiny":
        return dict(hidden=64, layers=2, heads=4, inter=128, vocab=1024, max_pos=66 if rob else 64)
    if shape == "base":
        vocab = {"bert": 30522, "distilbert": 30522, "roberta": 50265, "xlm-roberta": 250002}[arch]
        return dict(hidden=768, layers=6 if arch == "distilbert" else 12, heads=12, inter=3072, vocab=vocab,
                    max_pos=514 if rob else 512)
    raise ValueError(f"unknown shape {shape}")


def make_cfg(arch, hidden, layers, heads, inter, vocab, max_pos, act="gelu", eps=None):
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch}")
    if hidden % heads:
        raise ValueError("hidden must be a multiple of heads")
    rob = arch in ("roberta", "xlm-roberta")
    if eps is None:
        eps = 1e-5 if rob else 1e-12
    return Cfg(arch=arch, hidden=hidden, layers=layers, heads=heads, inter=inter, act=act, eps=eps, vocab=vocab,
               max_pos=max_pos, type_vocab=0 if arch == "distilbert" else (1 if rob else 2),
               pad_id=1 if rob else 0)


def hf_config(cfg, torch_dtype="float32", with_head=False, num_labels=2):
    """config.json as transformers' save_pretrained writes it for this model type (keys sorted, indent 2)."""
    if cfg.arch == "distilbert":
        d = {
            "activation": cfg.act, "architectures": ["DistilBertForSequenceClassification" if with_head
                                                     else "DistilBertModel"],
            "attention_dropout": 0.1, "dim": cfg.hidden, "dropout": 0.1, "hidden_dim": cfg.inter,
            "initializer_range": 0.02, "max_position_embeddings": cfg.max_pos, "model_type": "distilbert",
            "n_heads": cfg.heads, "n_layers": cfg.layers, "pad_token_id": cfg.pad_id, "qa_dropout": 0.1,
            "seq_classif_dropout": 0.2, "sinusoidal_pos_embds": False, "tie_weights_": True, "vocab_size": cfg.vocab,
        }
    else:
        cls = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta"}[cfg.arch]
        d = {
            "architectures": [cls + ("ForSequenceClassification" if with_head else "Model")],
            "attention_probs_dropout_prob": 0.1, "classifier_dropout": None, "hidden_act": cfg.act,
            "hidden_dropout_prob": 0.1, "hidden_size": cfg.hidden, "initializer_range": 0.02,
            "intermediate_size": cfg.inter, "layer_norm_eps": cfg.eps, "max_position_embeddings": cfg.max_pos,
            "model_type": cfg.arch, "num_attention_heads": cfg.heads, "num_hidden_layers": cfg.layers,
            "pad_token_id": cfg.pad_id, "position_embedding_type": "absolute", "type_vocab_size": cfg.type_vocab,
            "use_cache": True, "vocab_size": cfg.vocab,
        }
        if cfg.is_roberta:
            d["bos_token_id"] = 0
            d["eos_token_id"] = 2
    if with_head:
        d["id2label"] = {str(i): f"LABEL_{i}" for i in range(num_labels)}
        d["label2id"] = {f"LABEL_{i}": i for i in range(num_labels)}
    d["torch_dtype"] = torch_dtype
    d["transformers_version"] = "4.40.0"
    return d


def cfg_from_hf(d):
    """Cfg from a config.json dict (the fields our engine must read, with HF's defaults where one is optional)."""
    mt = d["model_type"]
    if mt == "distilbert":
        if d.get("sinusoidal_pos_embds"):
            raise ValueError("sinusoidal_pos_embds not supported")
        return Cfg(arch=mt, hidden=d["dim"], layers=d["n_layers"], heads=d["n_heads"], inter=d["hidden_dim"],
                   act=d.get("activation", "gelu"), eps=1e-12, vocab=d["vocab_size"],
                   max_pos=d.get("max_position_embeddings", 512), type_vocab=0, pad_id=d.get("pad_token_id", 0))
    if mt not in ("bert", "roberta", "xlm-roberta"):
        raise ValueError(f"unknown model_type {mt}")
    return Cfg(arch=mt, hidden=d["hidden_size"], layers=d["num_hidden_layers"], heads=d["num_attention_heads"],
               inter=d["intermediate_size"], act=d.get("hidden_act", "gelu"), eps=d.get("layer_norm_eps", 1e-12),
               vocab=d["vocab_size"], max_pos=d.get("max_position_embeddings", 512),
               type_vocab=d.get("type_vocab_size", 2), pad_id=d.get("pad_token_id", 0))


# ---------------------------------------------------------------------------------------------------------------
# State-dict keys

def prefix_of(arch):
    """Attribute name the *ForSequenceClassification classes give the encoder (XLM-R reuses RoBERTa's)."""
    return {"bert": "bert.", "roberta": "roberta.", "xlm-roberta": "roberta.", "distilbert": "distilbert."}[arch]


def param_shapes(cfg, pooler=True):
    """Canonical (unprefixed) key -> (shape, kind), in Hugging Face module order.

    kind drives the random init: emb_word, emb, ln_w, ln_b, w_qk, w_v, w, b."""
    H, I = cfg.hidden, cfg.inter
    out = {}

    def lin(name, n_out, n_in, kind="w"):
        out[name + ".weight"] = ((n_out, n_in), kind)
        out[name + ".bias"] = ((n_out,), "b")

    def ln(name):
        out[name + ".weight"] = ((H,), "ln_w")
        out[name + ".bias"] = ((H,), "ln_b")

    out["embeddings.word_embeddings.weight"] = ((cfg.vocab, H), "emb_word")
    out["embeddings.position_embeddings.weight"] = ((cfg.max_pos, H), "emb")
    if cfg.arch == "distilbert":
        ln("embeddings.LayerNorm")
        for i in range(cfg.layers):
            p = f"transformer.layer.{i}."
            lin(p + "attention.q_lin", H, H, "w_qk")
            lin(p + "attention.k_lin", H, H, "w_qk")
            lin(p + "attention.v_lin", H, H, "w_v")
            lin(p + "attention.out_lin", H, H, "w_v")
            ln(p + "sa_layer_norm")
            lin(p + "ffn.lin1", I, H)
            lin(p + "ffn.lin2", H, I)
            ln(p + "output_layer_norm")
        return out
    out["embeddings.token_type_embeddings.weight"] = ((cfg.type_vocab, H), "emb")
    ln("embeddings.LayerNorm")
    for i in range(cfg.layers):
        p = f"encoder.layer.{i}."
        lin(p + "attention.self.query", H, H, "w_qk")
        lin(p + "attention.self.key", H, H, "w_qk")
        lin(p + "attention.self.value", H, H, "w_v")
        lin(p + "attention.output.dense", H, H, "w_v")
        ln(p + "attention.output.LayerNorm")
        lin(p + "intermediate.dense", I, H)
        lin(p + "output.dense", H, I)
        ln(p + "output.LayerNorm")
    if pooler:
        lin("pooler.dense", H, H)
    return out


def head_shapes(cfg, num_labels=2):
    """Classification-head tensors the *ForSequenceClassification classes add (outside the encoder prefix)."""
    H = cfg.hidden
    if cfg.arch == "bert":
        names = [("classifier", num_labels, H)]
    elif cfg.is_roberta:
        names = [("classifier.dense", H, H), ("classifier.out_proj", num_labels, H)]
    else:
        names = [("pre_classifier", H, H), ("classifier", num_labels, H)]
    out = {}
    for n, o, i in names:
        out[n + ".weight"] = ((o, i), "w")
        out[n + ".bias"] = ((o,), "b")
    return out


def init_tensors(shapes, gen):
    """Deterministic random tensors scaled like a trained encoder (float32).

    Linear weights have std 1/sqrt(fan_in) (0.036 at H=768, where trained BERT sits between 0.02 and 0.05) so the
    FFN pre-activations are O(1) and exercise the non-linearity; query/key weights get sqrt(2) more so attention is
    peaked rather than uniform; value and attention-output weights get half, because at full scale the attention
    average (common to all tokens) swamps the residual and 12 layers collapse every token of a sequence onto one
    vector (mean pairwise cosine 0.998 at bert-base; 0.5 with this scaling, about what trained BERT shows).
    LayerNorm gains are 1 +- 0.1, biases +- 0.05, embeddings N(0, 0.02..0.05)."""
    out = {}
    for name, (shape, kind) in shapes.items():
        if kind == "emb_word":
            t = torch.randn(shape, generator=gen) * 0.05
        elif kind == "emb":
            t = torch.randn(shape, generator=gen) * 0.02
        elif kind == "ln_w":
            t = 1.0 + (torch.rand(shape, generator=gen) * 2 - 1) * 0.1
        elif kind == "ln_b":
            t = (torch.rand(shape, generator=gen) * 2 - 1) * 0.05
        elif kind == "w":
            t = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
        elif kind == "w_v":
            t = torch.randn(shape, generator=gen) * (0.5 / math.sqrt(shape[1]))
        elif kind == "w_qk":
            t = torch.randn(shape, generator=gen) * math.sqrt(2.0 / shape[1])
        elif kind == "b":
            t = torch.randn(shape, generator=gen) * 0.02
        else:
            raise AssertionError(kind)
        out[name] = t.to(torch.float32).contiguous()
    return out


def canonical_weights(cfg, sd):
    """Encoder tensors from a saved state dict: strip the task prefix if present, drop head tensors and the
    optional `embeddings.position_ids` buffer; raise naming the tensor if one is missing or mis-shaped."""
    pre = prefix_of(cfg.arch)
    has_prefix = any(k.startswith(pre) for k in sd)
    want = param_shapes(cfg, pooler=True)
    out = {}
    for k, v in sd.items():
        if has_prefix:
            if not k.startswith(pre):
                continue  # classifier head etc.
            k = k[len(pre):]
        if k in want:
            out[k] = v
    for k, (shape, _) in want.items():
        if k not in out:
            if k.startswith("pooler."):
                continue
            raise KeyError(f"missing tensor {pre if has_prefix else ''}{k}")
        if tuple(out[k].shape) != tuple(shape):
            raise ValueError(f"{k}: shape {tuple(out[k].shape)}, expected {tuple(shape)}")
    if ("pooler.dense.weight" in out) != ("pooler.dense.bias" in out):
        raise KeyError("pooler.dense needs both weight and bias")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Forward

def activation(name, x):
    """Hugging Face ACT2FN semantics, written out from their formulas."""
    if name == "gelu":                       # exact: x * Phi(x)
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name in ("gelu_new", "gelu_pytorch_tanh"):   # Hendrycks & Gimpel's tanh approximation
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    if name == "relu":
        return torch.clamp(x, min=0)
    if name in ("silu", "swish"):
        return x * torch.sigmoid(x)
    raise ValueError(f"unknown activation {name}")


def layer_norm(x, w, b, eps):
    """(x - mean) / sqrt(biased var + eps) * w + b over the last axis."""
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdim=True)
    return xc / torch.sqrt(var + eps) * w + b


def _fused_activation(name, x):
    F = torch.nn.functional
    if name == "gelu":
        return F.gelu(x)
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu(x)
    if name in ("silu", "swish"):
        return F.silu(x)
    raise ValueError(f"unknown activation {name}")


def linear(x, w, b):
    """x [.., in] . w[out, in]^T + b[out] (torch.nn.Linear's layout, which HF saves)."""
    return torch.nn.functional.linear(x, w, b)


def position_ids(cfg, input_ids):
    """[B, T] int64.  BERT/DistilBERT: 0..T-1.  RoBERTa: fairseq's make_positions."""
    B, T = input_ids.shape
    if cfg.is_roberta:
        m = (input_ids != cfg.pad_id).to(torch.int64)
        return torch.cumsum(m, dim=1) * m + cfg.pad_id
    return torch.arange(T, dtype=torch.int64, device=input_ids.device).unsqueeze(0).expand(B, T)


def attention(x, add_mask, wq, bq, wk, bk, wv, bv, n_heads, d=None):
    """Multi-head self-attention; x [B, T, H], add_mask [B, T] (0 or very negative per key); returns [B, T, H].
    d is the head size, passed as a Python int so the scale is a constant under torch.onnx tracing."""
    B, T, H = x.shape
    if d is None:
        d = H // n_heads

    def heads(t):  # [B, T, H] -> [B, n_heads, T, d]
        return t.view(B, T, n_heads, d).transpose(1, 2)

    q = heads(linear(x, wq, bq))
    k = heads(linear(x, wk, bk))
    v = heads(linear(x, wv, bv))
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + add_mask[:, None, None, :]   # [B, n, T, T]
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v).transpose(1, 2).reshape(B, T, H)


def forward(cfg, W, input_ids, attention_mask=None, token_type_ids=None, dtype=torch.float64, fused=False):
    """Encoder forward.  W: canonical key -> tensor (already in `dtype`, or cast here); input_ids [B, T] int64;
    attention_mask [B, T] 1 = token, 0 = padding (default all ones); token_type_ids [B, T] (default zeros).
    fused=False computes LayerNorm and the activation from their formulas (the oracle); fused=True calls torch's
    fused kernels as Hugging Face's modules do (the benchmark peer and the ONNX export; selftest.py checks both agree).
    Returns (last_hidden_state [B, T, H], pooler_output [B, H] or None)."""
    H = cfg.hidden

    def _fused_layer_norm(x, w, b, eps):   # normalized_shape from cfg, a constant under torch.onnx tracing
        return torch.nn.functional.layer_norm(x, (H,), w, b, eps)

    ln = _fused_layer_norm if fused else layer_norm
    act = _fused_activation if fused else activation
    W = {k: (v if v.dtype == dtype else v.to(dtype)) for k, v in W.items()}
    B, T = input_ids.shape
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    add_mask = (1.0 - attention_mask.to(dtype)) * torch.finfo(dtype).min           # [B, T]
    pos = position_ids(cfg, input_ids)
    x = W["embeddings.word_embeddings.weight"][input_ids] + W["embeddings.position_embeddings.weight"][pos]
    if cfg.arch != "distilbert":
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = x + W["embeddings.token_type_embeddings.weight"][token_type_ids]
    x = ln(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], cfg.eps)
    for i in range(cfg.layers):
        if cfg.arch == "distilbert":
            p = f"transformer.layer.{i}."
            n = dict(q=p + "attention.q_lin", k=p + "attention.k_lin", v=p + "attention.v_lin",
                     o=p + "attention.out_lin", ln1=p + "sa_layer_norm", f1=p + "ffn.lin1", f2=p + "ffn.lin2",
                     ln2=p + "output_layer_norm")
        else:
            p = f"encoder.layer.{i}."
            n = dict(q=p + "attention.self.query", k=p + "attention.self.key", v=p + "attention.self.value",
                     o=p + "attention.output.dense", ln1=p + "attention.output.LayerNorm",
                     f1=p + "intermediate.dense", f2=p + "output.dense", ln2=p + "output.LayerNorm")

        def g(key, part):
            return W[n[key] + "." + part]

        ctx = attention(x, add_mask, g("q", "weight"), g("q", "bias"), g("k", "weight"), g("k", "bias"),
                        g("v", "weight"), g("v", "bias"), cfg.heads,
                        cfg.hidden // cfg.heads)
        a = ln(x + linear(ctx, g("o", "weight"), g("o", "bias")), g("ln1", "weight"), g("ln1", "bias"),
                       cfg.eps)
        f = linear(act(cfg.act, linear(a, g("f1", "weight"), g("f1", "bias"))), g("f2", "weight"),
                   g("f2", "bias"))
        x = ln(a + f, g("ln2", "weight"), g("ln2", "bias"), cfg.eps)
    pooled = None
    if "pooler.dense.weight" in W:
        pooled = torch.tanh(linear(x[:, 0], W["pooler.dense.weight"], W["pooler.dense.bias"]))
    return x, pooled


class RefEncoder(torch.nn.Module):
    """nn.Module wrapper of `forward` for benchmarking and torch.onnx.export; weights are buffers in `dtype`."""

    def __init__(self, cfg, W, dtype=torch.float32, fused=True):
        super().__init__()
        self.cfg = cfg
        self.fused = fused
        self.dtype = dtype
        self.keys = sorted(W)
        for k in self.keys:
            self.register_buffer(k.replace(".", "__"), W[k].to(dtype).contiguous())

    def forward(self, input_ids, attention_mask, token_type_ids):
        W = {k: getattr(self, k.replace(".", "__")) for k in self.keys}
        h, pooled = forward(self.cfg, W, input_ids, attention_mask, token_type_ids, self.dtype, self.fused)
        if pooled is None:
            return (h,)
        return h, pooled
