"""Independent PyTorch reference of every AdapterHub / PEFT inference-time adapter form (test oracle, never the product).

Written from the math in docs/ADAPTER_FORMATS.md (section numbers below are that document's), using only
the libraries' *file conventions* (key names, config JSON, file names) so that what `save_*` here writes looks exactly
like what `adapters` 1.x (`save_adapter`, `save_adapter_fusion`, `save_head`) and PEFT (`save_pretrained`) write.
It imports neither library.  See ADAPTERS.md for what each form computes and which points are [inferred].

The encoder forward is our own (the plain-backbone pieces follow encoder.py, which selftest_adapters.py checks we
reproduce exactly) with a hook at every place an adapter acts:

    per layer i (AdapterDrop: layers i < skip run as the plain backbone: no bottleneck, no LoRA/IA3, no prefix)
      q,k,v = lin("q"|"k"|"v", x)                        LoRA / (IA)^3 / PEFT LoRA / AdaLoRA deltas
      K,V   = cat(prefix_K, K), cat(prefix_V, V)          prefix tuning, additive mask 0 on prefix positions
      h     = lin("o", MHA)                               PEFT may target attention.output.dense
      a     = bottleneck(i, "mh_adapter", h, x, LN1)      §2.3 / §2.4 / §7.1 / §7.2, or LN1(h + x) when none
      f     = lin("f2", act(lin("f1", a)))                LoRA on intermediate.dense is pre-activation
      x     = bottleneck(i, "output_adapter", f, a, LN2)

Everything runs in float64 on the saved (float32) adapter weights upcast, so the oracle computes with exactly what a
loader reads.  Token-averaged gates (`use_gating`) average over the *valid* tokens of each sequence: the library
averages over the padded length too, which makes its output depend on the padding; ours is the library's output for
each sequence run alone (see ADAPTERS.md).
"""

import collections
import json
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deberta as X  # noqa: E402  (ELECTRA, DeBERTa-v2)
import encoder as E  # noqa: E402
import st  # noqa: E402

F64 = torch.float64
# Training only: BERT's hidden and attention dropout probability in `forward` (after the embeddings, on the attention
# probabilities, on each sublayer's output before its residual), as the backbone runs under model.train() while its
# adapters train.  0 (the default, and always at inference) leaves the float64 reference math untouched.
DROPOUT = 0.0
ADAPTERS_VERSION = "adapters.1.1.0"

# ---------------------------------------------------------------------------------------------------------------
# Activations (transformers ACT2FN names as `adapters` resolves them, §7.1)


def act(name, x):
    if name is None:
        return x
    n = name.lower()
    if n in ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish"):
        return E.activation(n, x)
    if n == "tanh":
        return torch.tanh(x)
    if n == "sigmoid":
        return torch.sigmoid(x)
    if n in ("linear", "identity"):
        return x
    if n == "quick_gelu":
        return x * torch.sigmoid(1.702 * x)
    if n == "leakyrelu":
        return torch.where(x >= 0, x, 0.01 * x)
    raise ValueError(f"unknown activation {name}")


def lin(x, w, b=None):
    return torch.nn.functional.linear(x, w, b)


def masked_token_mean(g, tokmask):
    """g [B, T, k] -> [B, 1, k]: mean over the valid tokens of each row (tokmask [B, T] of 0/1)."""
    m = tokmask.to(g.dtype)[:, :, None]
    return (g * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)


# ---------------------------------------------------------------------------------------------------------------
# Names: where each hook sits in each architecture (§1, §1)

def encoder_module(arch):
    """encoder.py (BERT, RoBERTa, XLM-R, DistilBERT) or deberta.py (ELECTRA, DeBERTa-v2): the same API."""
    return X if arch in X.ARCHS else E


def base_prefix(arch):
    if arch == "modernbert":   # ModernBertFor*'s encoder attribute (base_model_prefix "model")
        return "model."
    return encoder_module(arch).prefix_of(arch)   # "bert." | "roberta." | "distilbert." | "electra." | "deberta."


def model_class(arch):
    return {"bert": "BertAdapterModel", "roberta": "RobertaAdapterModel", "xlm-roberta": "XLMRobertaAdapterModel",
            "distilbert": "DistilBertAdapterModel", "electra": "ElectraAdapterModel",
            "deberta-v2": "DebertaV2AdapterModel", "modernbert": "ModernBertForSequenceClassification"}[arch]


def layer_path(arch, i):
    if arch == "modernbert":
        return f"layers.{i}."
    return f"transformer.layer.{i}." if arch == "distilbert" else f"encoder.layer.{i}."


# role -> Linear module path inside layer i (the backbone's own key names)
LINEAR_PATHS = {
    "bert": dict(q="attention.self.query", k="attention.self.key", v="attention.self.value",
                 o="attention.output.dense", f1="intermediate.dense", f2="output.dense"),
    "distilbert": dict(q="attention.q_lin", k="attention.k_lin", v="attention.v_lin", o="attention.out_lin",
                       f1="ffn.lin1", f2="ffn.lin2"),
    "deberta": dict(q="attention.self.query_proj", k="attention.self.key_proj", v="attention.self.value_proj",
                    o="attention.output.dense", f1="intermediate.dense", f2="output.dense"),
}
LN_PATHS = {"bert": ("attention.output.LayerNorm", "output.LayerNorm"),
            "distilbert": ("sa_layer_norm", "output_layer_norm"),
            "deberta": ("attention.output.LayerNorm", "output.LayerNorm")}
# bottleneck location -> module path that holds `adapters.<name>` / `adapter_fusion_layer.<name>`
BN_PATHS = {"bert": {"mh_adapter": "attention.output", "output_adapter": "output"},
            "distilbert": {"mh_adapter": "attention_adapters", "output_adapter": "output_adapters"},
            "deberta": {"mh_adapter": "attention.output", "output_adapter": "output"},
            # AdapterHub's plugin interface (src/adapters/methods/bottleneck.py, init_bottleneck) puts the layer's
            # BottleneckLayers on the layer itself: layers.N.attention_adapters / layers.N.output_adapters
            "modernbert": {"mh_adapter": "attention_adapters", "output_adapter": "output_adapters"}}
# where the prefix-tuning layer (and so its `.pool.` alias, §5) sits
PREFIX_LAYER_PATH = {"bert": "attention.self.prefix_tuning", "distilbert": "attention.prefix_tuning"}


def fam(arch):
    """Naming family: BERT's module names (also RoBERTa, XLM-R, ELECTRA), DistilBERT's, DeBERTa's (*_proj)."""
    return {"distilbert": "distilbert", "deberta-v2": "deberta", "modernbert": "modernbert"}.get(arch, "bert")


def linear_path(arch, i, role):
    return layer_path(arch, i) + LINEAR_PATHS[fam(arch)][role]


# ---------------------------------------------------------------------------------------------------------------
# Configs, written as the libraries' to_dict() writes them (§7.1, §8, §5, §6, §7.2, §9)

BN_DEFAULTS = dict(
    adapter_residual_before_ln=False, cross_adapter=False, dropout=0.0, factorized_phm_W=True,
    factorized_phm_rule=False, hypercomplex_nonlinearity="glorot-uniform", init_weights="bert", init_weights_seed=None,
    inv_adapter=None, inv_adapter_reduction_factor=None, is_parallel=False, learn_phm=True, leave_out=[],
    ln_after=False, ln_before=False, original_ln_after=True, original_ln_before=False, phm_bias=True,
    phm_c_init="normal", phm_dim=4, phm_init_range=0.0001, phm_layer=False, phm_rank=1, residual_before_ln=True,
    scaling=1.0, shared_W_phm=False, shared_phm_rule=True, stochastic_depth=0.0, use_gating=False)

BN_PRESETS = {
    "seq_bn": dict(original_ln_before=True, original_ln_after=True, residual_before_ln=True, mh_adapter=False,
                   output_adapter=True, non_linearity="relu", reduction_factor=16),
    "double_seq_bn": dict(original_ln_before=False, original_ln_after=True, residual_before_ln=True, mh_adapter=True,
                          output_adapter=True, non_linearity="swish", reduction_factor=16),
    "par_bn": dict(mh_adapter=False, output_adapter=True, non_linearity="relu", reduction_factor=2,
                   init_weights="mam_adapter", is_parallel=True, scaling=4.0),
    "scaled_par_bn": dict(mh_adapter=False, output_adapter=True, non_linearity="relu", reduction_factor=2,
                          init_weights="mam_adapter", is_parallel=True, scaling="learned"),
}


def bn_config(preset, **over):
    c = dict(BN_DEFAULTS)
    c.update(BN_PRESETS[preset])
    c.update(over)
    return c


def lora_config(**over):
    c = dict(architecture="lora", selfattn_lora=True, intermediate_lora=False, output_lora=False, leave_out=[], r=8,
             alpha=8, dropout=0.0, attn_matrices=["q", "v"], composition_mode="add", init_weights="lora",
             use_gating=False, dtype=None, vera_b=None, vera_d=None)
    c.update(over)
    return c


def ia3_config(**over):
    c = lora_config(intermediate_lora=True, r=1, alpha=1, attn_matrices=["k", "v"], composition_mode="scale",
                    init_weights="ia3")
    c.update(over)
    return c


def prefix_config(**over):
    c = dict(architecture="prefix_tuning", encoder_prefix=True, cross_prefix=True, leave_out=[], flat=False,
             prefix_length=30, bottleneck_size=512, non_linearity="tanh", dropout=0.0, use_gating=False,
             shared_gating=True)
    c.update(over)
    return c


FUSION_PRESETS = {
    "dynamic": dict(key=True, query=True, value=True, query_before_ln=False, regularization=True,
                    residual_before=False, temperature=False, value_before_softmax=True, value_initialized=True,
                    dropout_prob=None),
    "static": dict(key=True, query=True, value=False, query_before_ln=False, regularization=False,
                   residual_before=False, temperature=False, value_before_softmax=True, value_initialized=False,
                   dropout_prob=None),
}


def envelope(cfg, arch, name, config, model_name, version=ADAPTERS_VERSION):
    """The adapter_config.json / head_config.json / adapter_fusion_config.json wrapper (§10.1)."""
    return {"config": config, "hidden_size": cfg.hidden, "model_class": model_class(arch), "model_name": model_name,
            "model_type": arch, "name": name, "version": version}


def write_json(path, obj):
    """json.dump(..., indent=2, sort_keys=True) as adapters and PEFT write their configs."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)


def rf_width(cfg, config, i):
    rf = config["reduction_factor"]
    if isinstance(rf, dict):
        rf = rf.get(str(i), rf.get("default"))
    return max(1, int(cfg.hidden // rf))


# ---------------------------------------------------------------------------------------------------------------
# Deterministic random adapter weights (saved as float32; the oracle upcasts what is saved)

class Rng:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, shape, std):
        return (torch.randn(shape, generator=self.g) * std).to(torch.float32)

    def uniform(self, shape, lo, hi):
        return (lo + (hi - lo) * torch.rand(shape, generator=self.g)).to(torch.float32)


# ---------------------------------------------------------------------------------------------------------------
# Bottleneck adapters (§7.2-§2.4)

class Bottleneck:
    """One BnConfig adapter: sequential (Adapter) or parallel (ParallelAdapter), at mh_adapter and/or output_adapter."""

    def __init__(self, name, config, cfg, rng, strength=1.0, zero=False):
        self.name, self.config, self.cfg = name, config, cfg
        self.kind = "bottleneck"
        self.p = {}   # (layer, location) -> {param: float32 tensor}
        H = cfg.hidden
        locs = [l for l in ("mh_adapter", "output_adapter") if config[l]]
        for i in range(cfg.layers):
            if i in config["leave_out"]:
                continue
            for loc in locs:
                d = rf_width(cfg, config, i)
                t = {}
                if config["ln_before"]:
                    t["ln_before.weight"] = rng.uniform((H,), 0.8, 1.2)
                    t["ln_before.bias"] = rng.normal((H,), 0.1)
                t["down.weight"] = rng.normal((d, H), 1.0 / math.sqrt(H))
                t["down.bias"] = rng.normal((d,), 0.2)
                t["up.weight"] = rng.normal((H, d), strength / math.sqrt(d))
                t["up.bias"] = rng.normal((H,), 0.1 * strength)
                if zero:
                    t["up.weight"].zero_()
                    t["up.bias"].zero_()
                if config["scaling"] == "learned":
                    t["scaling"] = rng.uniform((1,), 0.5, 1.5)
                elif config["scaling"] == "channel":
                    t["scaling"] = rng.uniform((H,), 0.3, 1.7)
                if config["ln_after"]:
                    t["ln_after.weight"] = rng.uniform((H,), 0.8, 1.2)
                    t["ln_after.bias"] = rng.normal((H,), 0.1)
                if config["use_gating"]:
                    t["gate.weight"] = rng.normal((1, H), 1.0 / math.sqrt(H))
                    t["gate.bias"] = rng.normal((1,), 0.5)
                self.p[(i, loc)] = t
        self._p64 = {k: {n: v.to(F64) for n, v in t.items()} for k, t in self.p.items()}

    def has(self, i, loc):
        return (i, loc) in self.p

    # -- the three steps of §2.3 / §2.4, exactly as modeling.py codes them --
    def pre_forward(self, h, x, LN, fusion_config=None):
        """-> (adapter input, fusion query, adapter residual)."""
        c = self.config
        if c["is_parallel"]:
            return x, (x if fusion_config is not None else None), x
        query = None
        residual = None
        rbl = c["residual_before_ln"]
        if rbl is True:
            residual = h
        if fusion_config is not None and fusion_config["query_before_ln"]:
            query = h
        if c["original_ln_before"]:
            t = h + x
            if rbl == "post_add":
                residual = t
            h = LN(t)
        if not rbl:
            residual = h
        if residual is None:
            raise ValueError(f"{self.name}: residual_before_ln={rbl!r} needs original_ln_before")
        if fusion_config is not None and not fusion_config["query_before_ln"]:
            query = h
        return h, query, residual

    def forward(self, i, loc, a, residual, tokmask):
        """-> (output, up) where up is the scaled up-projection (what Fuse attends over)."""
        c = self.config
        t = self._p64[(i, loc)]
        z = a
        if c["ln_before"]:
            z = E.layer_norm(z, t["ln_before.weight"], t["ln_before.bias"], 1e-5)
        down = act(c["non_linearity"], lin(z, t["down.weight"], t["down.bias"]))
        up = lin(down, t["up.weight"], t["up.bias"])
        s = c["scaling"]
        up = up * (t["scaling"] if isinstance(s, str) else float(s))
        out = up
        if c["use_gating"]:
            g = masked_token_mean(torch.sigmoid(lin(a, t["gate.weight"], t["gate.bias"])), tokmask)
            out = out * g
        if c["is_parallel"]:
            if c["ln_after"]:
                out = E.layer_norm(out, t["ln_after.weight"], t["ln_after.bias"], 1e-5)
            return out, up
        if c["adapter_residual_before_ln"]:
            out = out + residual
        if c["ln_after"]:
            out = E.layer_norm(out, t["ln_after.weight"], t["ln_after.bias"], 1e-5)
        if not c["adapter_residual_before_ln"]:
            out = out + residual
        return out, up

    def post_forward(self, o, h_orig, x, LN, hooked=False):
        """hooked: AdapterHub's plugin-interface models (ModernBERT) force original_ln_after off at add time
        (bottleneck.py, BottleneckLayer.add_adapter): the model adds its own residual after the hook."""
        if self.config["is_parallel"]:
            o = o + h_orig
        if self.config["original_ln_after"] and not hooked:
            o = LN(o + x)
        return o

    # -- files --
    def state_dict(self, arch):
        """Library key names in module registration order (scaling, norm_before, down, up, norm_after, gate); with
        ln_before the LayerNorm is registered twice (adapter_norm_before and adapter_down.0): same tensor object, so
        torch.save stores one storage, as the library's state_dict does (§7.2)."""
        sd = collections.OrderedDict()
        pre = base_prefix(arch)
        for i in range(self.cfg.layers):
            for loc in ("mh_adapter", "output_adapter"):
                if (i, loc) not in self.p:
                    continue
                t = self.p[(i, loc)]
                k = pre + layer_path(arch, i) + BN_PATHS[fam(arch)][loc] + f".adapters.{self.name}."
                if "scaling" in t:
                    sd[k + "scaling"] = t["scaling"]
                j = 0
                if self.config["ln_before"]:
                    for part in ("weight", "bias"):
                        sd[k + "adapter_norm_before." + part] = t["ln_before." + part]
                    for part in ("weight", "bias"):
                        sd[k + "adapter_down.0." + part] = t["ln_before." + part]
                    j = 1
                sd[k + f"adapter_down.{j}.weight"] = t["down.weight"]
                sd[k + f"adapter_down.{j}.bias"] = t["down.bias"]
                sd[k + "adapter_up.weight"] = t["up.weight"]
                sd[k + "adapter_up.bias"] = t["up.bias"]
                if self.config["ln_after"]:
                    sd[k + "adapter_norm_after.weight"] = t["ln_after.weight"]
                    sd[k + "adapter_norm_after.bias"] = t["ln_after.bias"]
                if self.config["use_gating"]:
                    sd[k + "gate.weight"] = t["gate.weight"]
                    sd[k + "gate.bias"] = t["gate.bias"]
        return sd


# ---------------------------------------------------------------------------------------------------------------
# AdapterHub LoRA and (IA)^3 (§8)

def _version_tuple(v):
    return tuple(int(p) for p in v.split("."))


def effective_lora_alpha(config, version):
    """§8 compat rule: adapters.X with X < 1.1.0, architecture lora and r != alpha -> alpha := r."""
    alpha = config["alpha"]
    if version and version.startswith("adapters.") and config.get("architecture") == "lora":
        if _version_tuple(version[len("adapters."):]) < (1, 1, 0) and config["r"] != alpha:
            alpha = config["r"]
    return alpha


def lora_roles(arch, config):
    """Which Linear roles AdapterHub wraps for this config (attention.output.dense never, §8)."""
    roles = []
    if config["selfattn_lora"]:
        roles += [m for m in ("q", "k", "v") if m in config["attn_matrices"]]
    if config["intermediate_lora"]:
        roles.append("f1")
    if config["output_lora"]:
        roles.append("f2")
    return roles


class AHLoRA:
    """AdapterHub LoRA (composition_mode add) or (IA)^3 (composition_mode scale), keys `...<module>.loras.<n>.lora_A`."""

    def __init__(self, name, config, cfg, rng, version=ADAPTERS_VERSION, strength=1.0, zero=False):
        self.name, self.config, self.cfg, self.version = name, config, cfg, version
        self.kind = "lora"
        self.ia3 = config["composition_mode"] == "scale"
        self.alpha = effective_lora_alpha(config, version)
        r = config["r"]
        self.scaling = self.alpha if self.ia3 else self.alpha / r
        self.p = {}
        for i in range(cfg.layers):
            if i in config["leave_out"]:
                continue
            for role in lora_roles(cfg.arch, config):
                n_in, n_out = self.shape(role)
                t = {}
                if self.ia3:
                    t["lora_B"] = rng.uniform((n_out, 1), 1.0 - 0.6 * strength, 1.0 + 0.6 * strength)
                    if zero:
                        t["lora_B"].fill_(1.0)
                else:
                    t["lora_A"] = rng.normal((r, n_in), 1.0 / math.sqrt(n_in))
                    # B so that the delta is O(strength) whatever alpha/r is (the saved weights carry 1/scaling)
                    t["lora_B"] = rng.normal((n_out, r), strength / math.sqrt(r) / self.scaling)
                    if zero:
                        t["lora_B"].zero_()
                if config["use_gating"]:
                    t["gate.weight"] = rng.normal((1, n_in), 1.0 / math.sqrt(n_in))
                    t["gate.bias"] = rng.normal((1,), 0.5)
                self.p[(i, role)] = t
        self._p64 = {k: {n: v.to(F64) for n, v in t.items()} for k, t in self.p.items()}

    def shape(self, role):
        H, I = self.cfg.hidden, self.cfg.inter
        return {"q": (H, H), "k": (H, H), "v": (H, H), "o": (H, H), "f1": (H, I), "f2": (I, H)}[role]

    def apply(self, i, role, x, y, tokmask):
        t = self._p64.get((i, role))
        if t is None:
            return y
        gate = None
        if self.config["use_gating"]:
            gate = masked_token_mean(torch.sigmoid(lin(x, t["gate.weight"], t["gate.bias"])), tokmask)
        if self.ia3:
            s = t["lora_B"].view(-1) * (gate if gate is not None else self.scaling)
            return y * s                       # (W x + b) * (l * alpha): the bias is scaled too
        d = x @ t["lora_A"].T @ t["lora_B"].T
        return y + d * (gate if gate is not None else self.scaling)

    def state_dict(self, arch):
        sd = collections.OrderedDict()
        pre = base_prefix(arch)
        for i in range(self.cfg.layers):
            for role in ("q", "k", "v", "o", "f1", "f2"):
                t = self.p.get((i, role))
                if t is None:
                    continue
                k = pre + linear_path(arch, i, role) + f".loras.{self.name}."
                for n in ("lora_A", "lora_B", "gate.weight", "gate.bias"):
                    if n in t:
                        sd[k + n] = t[n]
        return sd


# ---------------------------------------------------------------------------------------------------------------
# Prefix tuning (§5)

class Prefix:
    """Prefix tuning, reparametrised (wte + control_trans MLP) or flat; keys/values per layer precomputed once."""

    def __init__(self, name, config, cfg, rng, strength=1.0, zero=False):
        self.name, self.config, self.cfg = name, config, cfg
        self.kind = "prefix"
        H, L = cfg.hidden, cfg.layers
        self.layers = [i for i in range(L) if i not in config["leave_out"]]
        nL = len(self.layers)
        P, bn = config["prefix_length"], config["bottleneck_size"]
        self.p = collections.OrderedDict()
        if config["flat"]:
            self.p["control_trans"] = rng.normal((P * nL * 2 * H,), strength)
            if zero:
                self.p["control_trans"].zero_()
        else:
            self.p["wte.weight"] = rng.normal((P, H), 1.0)
            self.p["control_trans.0.weight"] = rng.normal((bn, H), 1.0 / math.sqrt(H))
            self.p["control_trans.0.bias"] = rng.normal((bn,), 0.2)
            self.p["control_trans.2.weight"] = rng.normal((nL * 2 * H, bn), strength / math.sqrt(bn))
            self.p["control_trans.2.bias"] = rng.normal((nL * 2 * H,), 0.2 * strength)
            if zero:
                self.p["control_trans.2.weight"].zero_()
                self.p["control_trans.2.bias"].zero_()
        self.gates = {}   # layer -> (weight [k, H], bias [k]); k = 1 if shared_gating else 2
        if config["use_gating"]:
            k = 1 if config["shared_gating"] else 2
            for i in self.layers:
                self.gates[i] = (rng.normal((k, H), 1.0 / math.sqrt(H)), rng.normal((k,), 0.5))
        self.kv = self._compute()

    def gated_kv(self, i, x, tokmask):
        """Layer i's (K, V) prefixes, [B or 1, nH, P, hd]; with use_gating scaled per row by
        g = mean_t sigmoid(gate(x)) (x = the self-attention input): keys by g[:, 0], values by g[:, -1]."""
        kp, vp = self.kv[i]
        kp, vp = kp.unsqueeze(0), vp.unsqueeze(0)
        if i in self.gates:
            w, b = (t.to(F64) for t in self.gates[i])
            g = masked_token_mean(torch.sigmoid(lin(x, w, b)), tokmask)[:, 0]       # [B, k]
            kp = kp * g[:, 0].view(-1, 1, 1, 1)
            vp = vp * g[:, -1].view(-1, 1, 1, 1)
        return kp, vp

    def _compute(self):
        """{layer: (K [nH, P, hd], V [nH, P, hd])}: view (P, 2L, nH, hd), layer j's key = channel 2j, value 2j+1."""
        c, cfg = self.config, self.cfg
        P, nL, nH, hd = c["prefix_length"], len(self.layers), cfg.heads, cfg.hidden // cfg.heads
        p = {k: v.to(F64) for k, v in self.p.items()}
        if c["flat"]:
            flat = p["control_trans"]
        else:
            e = p["wte.weight"]                                   # wte(arange(P))
            z = act(c["non_linearity"], lin(e, p["control_trans.0.weight"], p["control_trans.0.bias"]))
            flat = lin(z, p["control_trans.2.weight"], p["control_trans.2.bias"])
        kv = flat.reshape(P, 2 * nL, nH, hd).permute(1, 2, 0, 3)   # (2L, nH, P, hd)
        return {i: (kv[2 * j], kv[2 * j + 1]) for j, i in enumerate(self.layers)}

    def state_dict(self, arch, aliases=True):
        """Canonical `<base>.prefix_tuning.prefix_tunings.<n>.self_prefix.*` keys, plus (.bin only) the per-layer
        `.pool.` alias keys sharing the same tensors, which the library's state_dict also yields (§5 [inferred])."""
        sd = collections.OrderedDict()
        pre = base_prefix(arch)
        tail = f"prefix_tunings.{self.name}.self_prefix."
        for i, (w, b) in sorted(self.gates.items()):
            k = pre + layer_path(arch, i) + PREFIX_LAYER_PATH[fam(arch)] + f".prefix_gates.{self.name}."
            sd[k + "weight"] = w
            sd[k + "bias"] = b
        if aliases:
            for i in range(self.cfg.layers):
                k = pre + layer_path(arch, i) + PREFIX_LAYER_PATH[fam(arch)] + ".pool." + tail
                for n, v in self.p.items():
                    sd[k + n] = v
        for n, v in self.p.items():
            sd[pre + "prefix_tuning." + tail + n] = v
        return sd


# ---------------------------------------------------------------------------------------------------------------
# PEFT LoRA / rsLoRA / AdaLoRA (§4)

def peft_target_roles(arch, target_modules):
    """Roles whose module name matches PEFT's rule: key == t or key ends with '.' + t."""
    roles = []
    for role, path in LINEAR_PATHS[fam(arch)].items():
        full = path
        if any(full == t or full.endswith("." + t) for t in target_modules):
            roles.append(role)
    return roles


class PeftLoRA:
    """PEFT LoRA (peft_type LORA, optional use_rslora) or AdaLoRA (peft_type ADALORA).

    LoRA:    y += (x A^T B^T) * s,  s = lora_alpha / r  (rsLoRA: lora_alpha / sqrt(r))
    AdaLoRA: y += (x (A*E)^T B^T) * scaling / (ranknum + 1e-5),  scaling = lora_alpha if > 0 else r,
             ranknum = init_r (not saved; PEFT sets it to init_r when it builds the layer and keeps it on resize).
    With "word_embeddings" among target_modules (LoRA only), PEFT's lora.Embedding on the word embeddings:
             e(t) += B A[:, t] * s, lora_embedding_A [r, vocab], lora_embedding_B [H, r] (.emb; word_delta)."""

    def __init__(self, name, config, cfg, rng, strength=1.0, zero=False):
        self.name, self.config, self.cfg = name, config, cfg
        self.kind = "peft"
        self.ada = config["peft_type"] == "ADALORA"
        r = config["init_r"] if self.ada else config["r"]
        self.r = r
        a = config["lora_alpha"]
        if self.ada:
            self.scaling = (a if a > 0 else float(r)) / (float(r) + 1e-5)
        elif config["use_rslora"]:
            self.scaling = a / math.sqrt(r)
        else:
            self.scaling = a / r
        self.roles = peft_target_roles(cfg.arch, config["target_modules"])
        self.p = {}
        H, I = cfg.hidden, cfg.inter
        self.emb = None
        if any(t == "word_embeddings" or t.endswith(".word_embeddings") for t in config["target_modules"]):
            assert not self.ada, "AdaLoRA has no embedding LoRA"
            self.emb = {"A": rng.normal((r, cfg.vocab), 1.0), "B": rng.normal((H, r), strength / math.sqrt(r) / self.scaling)}
            if zero:
                self.emb["A"].zero_()      # PEFT initialises the embedding LoRA's A to zeros (B normal)
            self.emb_scaling = self.scaling
        shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "o": (H, H), "f1": (H, I), "f2": (I, H)}
        for i in range(cfg.layers):
            for role in self.roles:
                n_in, n_out = shapes[role]
                t = {"A": rng.normal((r, n_in), 1.0 / math.sqrt(n_in))}
                if self.ada:
                    t["E"] = rng.uniform((r, 1), 0.5, 1.5)
                t["B"] = rng.normal((n_out, r), strength / math.sqrt(r) / self.scaling)
                if zero:
                    t["B"].zero_()
                self.p[(i, role)] = t
        self._p64 = {k: {n: v.to(F64) for n, v in t.items()} for k, t in self.p.items()}
        self.head = None   # {key suffix under base_model.model.: tensor}, modules_to_save

    def apply(self, i, role, x, y, tokmask):
        t = self._p64.get((i, role))
        if t is None:
            return y
        A = t["A"] * t["E"] if self.ada else t["A"]
        return y + (x @ A.T @ t["B"].T) * self.scaling

    def word_delta(self, input_ids):
        """[B, T, H] added to the word embeddings, or None (PEFT lora.Embedding: F.embedding(x, A^T) @ B^T * s)."""
        if self.emb is None:
            return None
        a, b = self.emb["A"].to(F64), self.emb["B"].to(F64)
        return torch.nn.functional.embedding(input_ids, a.t()) @ b.t() * self.emb_scaling

    def state_dict(self, arch):
        sd = collections.OrderedDict()
        pre = "base_model.model." + base_prefix(arch)
        for (i, role), t in sorted(self.p.items()):
            k = pre + linear_path(arch, i, role) + "."
            if self.ada:
                sd[k + "lora_A"] = t["A"]
                sd[k + "lora_B"] = t["B"]
                sd[k + "lora_E"] = t["E"]
            else:
                sd[k + "lora_A.weight"] = t["A"]
                sd[k + "lora_B.weight"] = t["B"]
        if self.emb is not None:
            k = pre + "embeddings.word_embeddings."
            sd[k + "lora_embedding_A"] = self.emb["A"]
            sd[k + "lora_embedding_B"] = self.emb["B"]
        for k, v in (self.head or {}).items():
            sd["base_model.model." + k] = v
        return sd


def peft_config(arch, peft_type="LORA", target_modules=("query", "value"), r=8, lora_alpha=16, use_rslora=False,
                init_r=6, target_r=4, base_model="bert-base-uncased", task_type="SEQ_CLS"):
    """adapter_config.json as PEFT 0.1x writes it (keys as in the real files under ../shared/data/adapters)."""
    c = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base_model, "bias": "none",
         "corda_config": None, "eva_config": None, "exclude_modules": None, "fan_in_fan_out": False,
         "inference_mode": True, "init_lora_weights": True, "layer_replication": None, "layers_pattern": None,
         "layers_to_transform": None, "loftq_config": {}, "lora_alpha": lora_alpha, "lora_bias": False,
         "lora_dropout": 0.1, "megatron_config": None, "megatron_core": "megatron.core",
         "modules_to_save": ["classifier", "score"] + (["pooler"] if arch == "deberta-v2" else []),
         "peft_type": peft_type, "r": r, "rank_pattern": {},
         "revision": None, "target_modules": list(target_modules), "target_parameters": None,
         "task_type": task_type, "trainable_token_indices": None, "use_dora": False, "use_rslora": use_rslora}
    if peft_type == "LORA":
        c.update(qalora_group_size=16, use_qalora=False)
    else:
        c.update(beta1=0.85, beta2=0.85, deltaT=1, init_r=init_r, orth_reg_weight=0.5, rank_pattern=None,
                 target_r=target_r, tfinal=0, tinit=0, total_step=1000)
    return c


# ---------------------------------------------------------------------------------------------------------------
# AdapterFusion (§7.2)

class Fusion:
    def __init__(self, adapters, preset, cfg, rng, strength=1.0):
        self.adapters = adapters          # list of Bottleneck, in Fuse order
        self.names = [a.name for a in adapters]
        self.name = ",".join(self.names)
        self.config = dict(FUSION_PRESETS[preset])
        self.cfg = cfg
        H = cfg.hidden
        self.p = {}
        for i in range(cfg.layers):
            for loc in ("mh_adapter", "output_adapter"):
                if not all(a.has(i, loc) for a in adapters):
                    continue          # a fusion layer exists only where every fused adapter does
                t = {}
                if self.config["query"]:
                    t["query.weight"] = rng.normal((H, H), strength / math.sqrt(H))
                    t["query.bias"] = rng.normal((H,), 0.1)
                if self.config["key"]:
                    t["key.weight"] = rng.normal((H, H), strength / math.sqrt(H))
                    t["key.bias"] = rng.normal((H,), 0.1)
                if self.config["value"]:
                    t["value.weight"] = (torch.eye(H) + rng.normal((H, H), 0.3 / math.sqrt(H))).to(torch.float32)
                self.p[(i, loc)] = t
        self._p64 = {k: {n: v.to(F64) for n, v in t.items()} for k, t in self.p.items()}

    def has(self, i, loc):
        return (i, loc) in self.p

    def run(self, i, loc, h, x, LN, tokmask, stats=None, hooked=False):
        """compose_fuse: last adapter's pre_forward, every child's scaled up, attention with T = 1, last's post."""
        c = self.config
        t = self._p64[(i, loc)]
        last = self.adapters[-1]
        hs, query, residual = last.pre_forward(h, x, LN, fusion_config=c)
        U = torch.stack([a.forward(i, loc, hs, residual, tokmask)[1] for a in self.adapters], dim=2)  # (B,T,N,H)
        if c["residual_before"]:
            U = U + residual[:, :, None, :]          # in place in the library: key and value both see it
        Q = lin(query, t["query.weight"], t["query.bias"]) if c["query"] else query
        K = lin(U, t["key.weight"], t["key.bias"]) if c["key"] else U
        V = lin(U, t["value.weight"]) if (c["value"] and c["value_before_softmax"]) else U
        scores = torch.matmul(Q.unsqueeze(2), K.transpose(-2, -1)).squeeze(2)     # (B,T,N), no 1/sqrt(d)
        probs = torch.softmax(scores / 1.0, dim=-1)
        if stats is not None:
            stats.append(((i, loc), probs))
        ctx = torch.matmul(probs.unsqueeze(2), V).squeeze(2)
        if c["value"] and not c["value_before_softmax"]:
            ctx = lin(ctx, t["value.weight"])
        if not c["residual_before"]:
            ctx = ctx + residual
        return last.post_forward(ctx, h, x, LN, hooked)

    def state_dict(self, arch):
        sd = collections.OrderedDict()
        pre = base_prefix(arch)
        for i in range(self.cfg.layers):
            for loc in ("mh_adapter", "output_adapter"):
                if (i, loc) not in self.p:
                    continue
                k = pre + layer_path(arch, i) + BN_PATHS[fam(arch)][loc] + f".adapter_fusion_layer.{self.name}."
                for n in ("query.weight", "query.bias", "key.weight", "key.bias", "value.weight"):
                    if n in self.p[(i, loc)]:
                        sd[k + n] = self.p[(i, loc)][n]
        return sd


# ---------------------------------------------------------------------------------------------------------------
# Prediction heads (§9) and PEFT/HF static heads

class Head:
    """AdapterHub flex head: nn.Sequential of [Dropout, Linear(H,H), act]*(layers-1) + [Dropout, Linear(H, out)]."""

    def __init__(self, name, head_type, cfg, rng, num_labels=2, layers=2, activation="tanh", use_pooler=False,
                 labels=None, bias=True, strength=1.0):
        self.name, self.cfg = name, cfg
        labels = labels or [f"LABEL_{j}" for j in range(num_labels)]
        assert len(labels) == num_labels
        self.config = {"head_type": head_type, "num_labels": num_labels, "layers": layers,
                       "activation_function": activation, "label2id": {l: j for j, l in enumerate(labels)}}
        if head_type in ("classification", "multilabel_classification"):
            self.config.update(use_pooler=use_pooler, bias=bias)
        self.config["dropout_prob"] = None
        H = cfg.hidden
        self.linears = []   # (module index, weight, bias)
        idx = 0
        for l in range(layers):
            idx += 1                                   # Dropout
            if l < layers - 1:
                self.linears.append((idx, rng.normal((H, H), 1.0 / math.sqrt(H)), rng.normal((H,), 0.1)))
                idx += 1
                if activation:
                    idx += 1
            else:
                self.linears.append((idx, rng.normal((num_labels, H), 2.0 * strength / math.sqrt(H)),
                                     rng.normal((num_labels,), 0.1) if bias else None))
                idx += 1

    @property
    def per_token(self):
        return self.config["head_type"] in ("tagging", "question_answering")

    def forward(self, hidden, pooled):
        c = self.config
        if self.per_token:
            z = hidden
        else:
            z = pooled if c.get("use_pooler") else hidden[:, 0]
        n = len(self.linears)
        for j, (_, w, b) in enumerate(self.linears):
            z = lin(_drop(z), w.to(F64), None if b is None else b.to(F64))   # the head's Dropout before each Linear
            if j < n - 1:
                z = act(c["activation_function"], z)
        return z

    def state_dict(self):
        sd = collections.OrderedDict()
        for idx, w, b in self.linears:
            sd[f"heads.{self.name}.{idx}.weight"] = w
            if b is not None:
                sd[f"heads.{self.name}.{idx}.bias"] = b
        return sd


class HFHead:
    """The *ForSequenceClassification heads PEFT saves through modules_to_save (keys without base_model.model.):
    BERT classifier(pooler_output); RoBERTa out_proj(tanh(dense(h[:,0]))); DistilBERT classifier(relu(pre_classifier(h[:,0])))."""

    def __init__(self, cfg, rng, num_labels=2):
        self.cfg = cfg
        H = cfg.hidden
        self.num_labels = num_labels
        self.t = collections.OrderedDict()
        if cfg.arch == "bert":
            self.t["classifier.weight"] = rng.normal((num_labels, H), 2.0 / math.sqrt(H))
            self.t["classifier.bias"] = rng.normal((num_labels,), 0.1)
        elif cfg.arch == "deberta-v2":   # ContextPooler (dense, pooler_hidden_act gelu) on h[:,0], then classifier
            self.t["pooler.dense.weight"] = rng.normal((H, H), 1.0 / math.sqrt(H))
            self.t["pooler.dense.bias"] = rng.normal((H,), 0.1)
            self.t["classifier.weight"] = rng.normal((num_labels, H), 2.0 / math.sqrt(H))
            self.t["classifier.bias"] = rng.normal((num_labels,), 0.1)
        elif cfg.is_roberta or cfg.arch == "electra":   # ELECTRA: the same keys, gelu instead of tanh
            self.t["classifier.dense.weight"] = rng.normal((H, H), 1.0 / math.sqrt(H))
            self.t["classifier.dense.bias"] = rng.normal((H,), 0.1)
            self.t["classifier.out_proj.weight"] = rng.normal((num_labels, H), 2.0 / math.sqrt(H))
            self.t["classifier.out_proj.bias"] = rng.normal((num_labels,), 0.1)
        else:
            self.t["pre_classifier.weight"] = rng.normal((H, H), 1.0 / math.sqrt(H))
            self.t["pre_classifier.bias"] = rng.normal((H,), 0.1)
            self.t["classifier.weight"] = rng.normal((num_labels, H), 2.0 / math.sqrt(H))
            self.t["classifier.bias"] = rng.normal((num_labels,), 0.1)

    per_token = False

    def forward(self, hidden, pooled):
        t = {k: v.to(F64) for k, v in self.t.items()}
        if self.cfg.arch == "bert":
            if pooled is None:
                raise ValueError("BertForSequenceClassification needs the pooler")
            return lin(pooled, t["classifier.weight"], t["classifier.bias"])
        cls = hidden[:, 0]
        if self.cfg.arch == "deberta-v2":
            z = E.activation("gelu", lin(cls, t["pooler.dense.weight"], t["pooler.dense.bias"]))
            return lin(z, t["classifier.weight"], t["classifier.bias"])
        if self.cfg.is_roberta or self.cfg.arch == "electra":
            z = lin(cls, t["classifier.dense.weight"], t["classifier.dense.bias"])
            z = E.activation("gelu", z) if self.cfg.arch == "electra" else torch.tanh(z)
            return lin(z, t["classifier.out_proj.weight"], t["classifier.out_proj.bias"])
        z = torch.relu(lin(cls, t["pre_classifier.weight"], t["pre_classifier.bias"]))
        return lin(z, t["classifier.weight"], t["classifier.bias"])


# ---------------------------------------------------------------------------------------------------------------
# The forward with hooks

class Setup:
    """What is active for one task.  bn_stack: bottleneck adapters in Stack order (each acts where it has a module);
    fusion: a Fusion (replaces the stack at its locations); linear: LoRA-like deltas (applied in order); prefixes:
    prefix tunings in Stack order; skip: AdapterDrop count (layers 0..skip-1 plain). A `linear` module's
    word_delta (PeftLoRA's LoRA on the word embeddings) sits below every layer: it acts at skip 0 only."""

    def __init__(self, bn_stack=(), fusion=None, linear=(), prefixes=(), skip=0):
        self.bn_stack, self.fusion = list(bn_stack), fusion
        self.linear, self.prefixes, self.skip = list(linear), list(prefixes), skip


def embeddings(cfg, W, input_ids, token_type_ids, word_delta=None, attention_mask=None):
    """word_delta: [B, T, H] added to the word embeddings (an embedding LoRA's update), or None."""
    if cfg.arch == "electra":
        return X.electra_embeddings(cfg, W, input_ids, token_type_ids, E.layer_norm, word_delta)
    if cfg.arch == "deberta-v2":
        return X.deberta_embeddings(cfg, W, input_ids, token_type_ids, attention_mask, E.layer_norm, word_delta)
    pos = E.position_ids(cfg, input_ids)
    x = W["embeddings.word_embeddings.weight"][input_ids] + W["embeddings.position_embeddings.weight"][pos]
    if word_delta is not None:
        x = x + word_delta
    if cfg.arch != "distilbert":
        x = x + W["embeddings.token_type_embeddings.weight"][token_type_ids]
    return E.layer_norm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], cfg.eps)


def forward(cfg, W, input_ids, attention_mask, token_type_ids, setup, fusion_stats=None):
    """Float64 encoder forward with adapters.  W: canonical backbone weights (float64); input_ids etc. [B, T].
    Returns (last_hidden_state [B, T, H], pooler_output [B, H] or None)."""
    setup = setup or Setup()
    B, T = input_ids.shape
    H, nH = cfg.hidden, cfg.heads
    hd = H // nH
    add_mask = (1.0 - attention_mask.to(F64)) * torch.finfo(F64).min
    delta = None
    if setup.skip == 0:
        for d in [getattr(m, "word_delta", None) for m in setup.linear]:
            dd = d(input_ids) if d is not None else None
            if dd is not None:
                delta = dd if delta is None else delta + dd
    x = _drop(embeddings(cfg, W, input_ids, token_type_ids, delta, attention_mask))
    if cfg.arch == "deberta-v2":
        return _deberta_layers(cfg, W, x, add_mask, attention_mask, setup, fusion_stats), None
    fm = fam(cfg.arch)
    for i in range(cfg.layers):
        on = i >= setup.skip
        lp = layer_path(cfg.arch, i)

        def L(role, inp):
            n = lp + LINEAR_PATHS[fm][role]
            y = lin(inp, W[n + ".weight"], W[n + ".bias"])
            if on:
                for m in setup.linear:
                    y = m.apply(i, role, inp, y, attention_mask)
            return y

        ln1w, ln2w = (lp + p for p in LN_PATHS[fm])

        def LN1(z):
            return E.layer_norm(z, W[ln1w + ".weight"], W[ln1w + ".bias"], cfg.eps)

        def LN2(z):
            return E.layer_norm(z, W[ln2w + ".weight"], W[ln2w + ".bias"], cfg.eps)

        def heads(t):
            return t.view(B, -1, nH, hd).transpose(1, 2)

        q, k, v = heads(L("q", x)), heads(L("k", x)), heads(L("v", x))
        m = add_mask
        if on:
            for p in setup.prefixes:
                if i in p.kv:
                    kp, vp = p.gated_kv(i, x, attention_mask)
                    P = kp.shape[2]
                    k = torch.cat([kp.expand(B, -1, -1, -1), k], dim=2)
                    v = torch.cat([vp.expand(B, -1, -1, -1), v], dim=2)
                    m = torch.cat([torch.zeros(B, P, dtype=F64), m], dim=1)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd) + m[:, None, None, :]
        ctx = torch.matmul(_drop(torch.softmax(s, dim=-1)), v).transpose(1, 2).reshape(B, T, H)
        h = _drop(L("o", ctx))
        a = bottleneck_block(setup, i, "mh_adapter", h, x, LN1, attention_mask, on, fusion_stats)
        f = _drop(L("f2", E.activation(cfg.act, L("f1", a))))
        x = bottleneck_block(setup, i, "output_adapter", f, a, LN2, attention_mask, on, fusion_stats)
    pooled = None
    if "pooler.dense.weight" in W:
        pooled = torch.tanh(lin(x[:, 0], W["pooler.dense.weight"], W["pooler.dense.bias"]))
    return x, pooled


def _deberta_layers(cfg, W, x, add_mask, attention_mask, setup, fusion_stats):
    """DeBERTa's layers (deberta.layers) with the same hooks: Linear modules act on every call of the Linear they
    wrap, so a LoRA on query_proj / key_proj also changes the projected relative table (one 'sequence' of 2 span
    rows, all valid); bottleneck sites replace the residual LayerNorms. Prefix tuning has no place there."""
    if setup.prefixes:
        raise ValueError("prefix tuning is not supported on DeBERTa (relative attention)")

    def hooks(i, role, inp, y):
        if i < setup.skip:
            return y
        flat = inp.dim() == 2
        if flat:
            inp, y, mask = inp[None], y[None], torch.ones(1, inp.shape[0], dtype=attention_mask.dtype)
        else:
            mask = attention_mask
        for m in setup.linear:
            y = m.apply(i, role, inp, y, mask)
        return y[0] if flat else y

    def between(i, where, h, x_in, LN):
        loc = "mh_adapter" if where == "attn" else "output_adapter"
        return bottleneck_block(setup, i, loc, h, x_in, LN, attention_mask, i >= setup.skip, fusion_stats)

    return X.layers(cfg, W, x, add_mask, E.layer_norm, E.activation, hooks, between)


def _drop(t):
    return torch.nn.functional.dropout(t, DROPOUT, True) if DROPOUT else t


def bottleneck_block(setup, i, loc, h, x, LN, tokmask, on, fusion_stats=None):
    """BottleneckLayer.bottleneck_layer_forward: Stack (§7.1) or Fuse (§7.2); LN(h + x) when nothing is active."""
    if on and setup.fusion is not None and setup.fusion.has(i, loc):
        return setup.fusion.run(i, loc, h, x, LN, tokmask, fusion_stats)
    stack = [a for a in setup.bn_stack if a.has(i, loc)] if on else []
    if not stack:
        return LN(h + x)
    hs, res = h, x
    for a in stack:
        hs, _, res = a.pre_forward(hs, x, LN)
        hs, _ = a.forward(i, loc, hs, res, tokmask)
    return stack[-1].post_forward(hs, h, x, LN)


# ---------------------------------------------------------------------------------------------------------------
# Backbones and saving

def load_backbone(model_dir):
    """(cfg, canonical float64 weights) from a Hugging Face model directory written by gen_encoder.py."""
    with open(os.path.join(model_dir, "config.json")) as f:
        d = json.load(f)
    M = encoder_module(d["model_type"])
    cfg = M.cfg_from_hf(d)
    W = M.canonical_weights(cfg, st.load_dir(model_dir))
    return cfg, {k: v.to(F64) for k, v in W.items()}


def save_torch(sd, path):
    """torch.save of an OrderedDict of CPU float32 tensors: what `adapters` writes by default (zip + pickle)."""
    torch.save(collections.OrderedDict(sd), path)


def save_adapterhub(out_dir, cfg, adapter, model_name, fmt="bin", head=None, version=ADAPTERS_VERSION,
                    union_children=None):
    """save_adapter(out_dir, name[, use_safetensors]) for one adapter (its union children share its name)."""
    os.makedirs(out_dir, exist_ok=True)
    arch = cfg.arch
    parts = union_children or [adapter]
    sd = collections.OrderedDict()
    for a in parts:
        if isinstance(a, Prefix):
            sd.update(a.state_dict(arch, aliases=(fmt == "bin")))
        else:
            sd.update(a.state_dict(arch))
    if union_children:
        config = {"architecture": "union", "configs": [a.config for a in union_children]}
    else:
        config = adapter.config
    write_json(os.path.join(out_dir, "adapter_config.json"), envelope(cfg, arch, adapter.name, config, model_name,
                                                                        version))
    if fmt == "bin":
        save_torch(sd, os.path.join(out_dir, "pytorch_adapter.bin"))
    else:
        st.save_file(dict(sd), os.path.join(out_dir, "adapter.safetensors"))   # adapters writes no metadata
    if head is not None:
        save_head(out_dir, cfg, head, model_name, fmt, version)


def save_head(out_dir, cfg, head, model_name, fmt="bin", version=ADAPTERS_VERSION):
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "head_config.json"), envelope(cfg, cfg.arch, head.name, head.config, model_name,
                                                                     version))
    if fmt == "bin":
        save_torch(head.state_dict(), os.path.join(out_dir, "pytorch_model_head.bin"))
    else:
        st.save_file(dict(head.state_dict()), os.path.join(out_dir, "model_head.safetensors"))


def save_fusion(out_dir, cfg, fusion, model_name, fmt="bin", version=ADAPTERS_VERSION):
    os.makedirs(out_dir, exist_ok=True)
    env = envelope(cfg, cfg.arch, fusion.name, fusion.config, model_name, version)
    env["adapter_names"] = list(fusion.names)
    write_json(os.path.join(out_dir, "adapter_fusion_config.json"), env)
    if fmt == "bin":
        save_torch(fusion.state_dict(cfg.arch), os.path.join(out_dir, "pytorch_model_adapter_fusion.bin"))
    else:
        st.save_file(dict(fusion.state_dict(cfg.arch)), os.path.join(out_dir, "model_adapter_fusion.safetensors"))


def save_peft(out_dir, cfg, peft):
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "adapter_config.json"), peft.config)
    st.save_file(dict(peft.state_dict(cfg.arch)), os.path.join(out_dir, "adapter_model.safetensors"),
                 {"format": "pt"})


# ---------------------------------------------------------------------------------------------------------------
# Reading saved folders back (AdapterHub save_adapter / save_head / save_adapter_fusion, PEFT save_pretrained)
#
# Independent of how a folder was made: the objects above are rebuilt from the config JSON and the tensors as
# saved (torch.load for .bin, st.py for safetensors), so the oracle can compute expected outputs for real files
# (../shared/data/adapters) and re-derive its own fixtures.  Strict: a key the reader does not understand raises,
# naming it, rather than being silently ignored (only the prefix `.pool.` aliases, which duplicate the canonical
# prefix keys, and PEFT's `original_module` copies are skipped on purpose).

_BASE_RE = r"(?:(?:bert|roberta|distilbert|electra|deberta)\.)?"
_LAYER_RE = re.compile(r"^" + _BASE_RE + r"(?:encoder|transformer)\.layer\.(\d+)\.(.+)$")


def _new(cls, **attrs):
    o = cls.__new__(cls)
    o.__dict__.update(attrs)
    return o


def read_json(path):
    with open(path) as f:
        return json.load(f)


def read_weights(folder, stems):
    """The state dict saved in `folder` under one of `stems` (tried as <stem>.safetensors, then <stem>.bin, then the
    AdapterHub pytorch_<stem>.bin name); float tensors come back as float32 CPU tensors, as saved."""
    for stem in stems:
        p = os.path.join(folder, stem + ".safetensors")
        if os.path.exists(p):
            return dict(st.load_file(p)[0]), p
        for b in (stem + ".bin", "pytorch_" + stem + ".bin"):
            p = os.path.join(folder, b)
            if os.path.exists(p):
                sd = torch.load(p, map_location="cpu")
                return dict(sd), p
    raise FileNotFoundError(f"{folder}: none of {stems} (.safetensors / .bin)")


def _split_layer_key(key, cfg, where):
    """'bert.encoder.layer.3.output.adapters.x.adapter_up.weight' -> (3, 'output.adapters.x.adapter_up.weight')."""
    m = _LAYER_RE.match(key)
    if not m:
        return None, None
    i = int(m.group(1))
    if i >= cfg.layers:
        raise ValueError(f"{where}: {key}: layer {i} but the backbone has {cfg.layers}")
    return i, m.group(2)


def _check_envelope(env, cfg, where):
    if env.get("hidden_size") not in (None, cfg.hidden):
        raise ValueError(f"{where}: hidden_size {env['hidden_size']} != backbone {cfg.hidden}")
    mt = env.get("model_type")
    if mt is not None and fam(mt) != fam(cfg.arch):
        raise ValueError(f"{where}: model_type {mt} does not fit a {cfg.arch} backbone")


def _bn_config_full(config, version):
    c = dict(BN_DEFAULTS)
    c.update(config)
    # [inferred] configs saved before `version` existed name the tanh approximation "gelu" (ADAPTERS.md)
    if version is None and c.get("non_linearity") == "gelu":
        c["non_linearity"] = "gelu_new"
    return c


def _read_bottleneck(name, config, cfg, sd, where):
    """Bottleneck from the keys `<layer>.<site>.adapters.<name>.<param>` (§7.2)."""
    locs = {v: k for k, v in BN_PATHS[fam(cfg.arch)].items()}
    raw = {}
    for key, v in sd.items():
        i, rest = _split_layer_key(key, cfg, where)
        if rest is None or f".adapters.{name}." not in rest:
            continue
        site, param = rest.split(f".adapters.{name}.", 1)
        if site not in locs:
            raise ValueError(f"{where}: {key}: unknown bottleneck site {site!r}")
        raw.setdefault((i, locs[site]), {})[param] = v
    p = {}
    for k, t in raw.items():
        ln_before = "adapter_down.1.weight" in t
        m = {}
        for param, v in t.items():
            if ln_before and param.startswith("adapter_down.0."):
                m["ln_before." + param.split(".")[-1]] = v
            elif param.startswith("adapter_norm_before."):
                m["ln_before." + param.split(".")[-1]] = v
            elif param.startswith("adapter_down.1." if ln_before else "adapter_down.0."):
                m["down." + param.split(".")[-1]] = v
            elif param.startswith("adapter_up."):
                m["up." + param.split(".")[-1]] = v
            elif param.startswith("adapter_norm_after."):
                m["ln_after." + param.split(".")[-1]] = v
            elif param in ("gate.weight", "gate.bias", "scaling"):
                m[param] = v
            else:
                raise ValueError(f"{where}: layer {k[0]} {k[1]}: unknown bottleneck parameter {param!r}")
        for need in ("down.weight", "down.bias", "up.weight", "up.bias"):
            if need not in m:
                raise ValueError(f"{where}: layer {k[0]} {k[1]}: missing {need}")
        if ("ln_before.weight" in m) != bool(config["ln_before"]) or ("ln_after.weight" in m) != bool(config["ln_after"]) \
                or ("gate.weight" in m) != bool(config["use_gating"]):
            raise ValueError(f"{where}: layer {k[0]} {k[1]}: keys do not match ln_before/ln_after/use_gating in the config")
        if config["scaling"] in ("learned", "channel") and "scaling" not in m:
            raise ValueError(f"{where}: scaling {config['scaling']!r} but no scaling tensor")
        p[k] = {n: v.to(torch.float32) for n, v in m.items()}
    if not p:
        raise ValueError(f"{where}: no bottleneck weights for {name!r}")
    return _new(Bottleneck, name=name, config=config, cfg=cfg, kind="bottleneck", p=p,
                _p64={k: {n: v.to(F64) for n, v in t.items()} for k, t in p.items()})


def _read_ahlora(name, config, version, cfg, sd, where):
    """AdapterHub LoRA / (IA)^3 from `<layer>.<linear>.loras.<name>.{lora_A,lora_B,gate.*}` (§8)."""
    roles = {v: k for k, v in LINEAR_PATHS[fam(cfg.arch)].items()}
    p = {}
    for key, v in sd.items():
        i, rest = _split_layer_key(key, cfg, where)
        if rest is None or f".loras.{name}." not in rest:
            continue
        mod, param = rest.split(f".loras.{name}.", 1)
        if mod not in roles:
            raise ValueError(f"{where}: {key}: unknown LoRA target {mod!r}")
        if param not in ("lora_A", "lora_B", "gate.weight", "gate.bias"):
            raise ValueError(f"{where}: {key}: unknown LoRA parameter {param!r}")
        p.setdefault((i, roles[mod]), {})[param] = v.to(torch.float32)
    if not p:
        raise ValueError(f"{where}: no LoRA weights for {name!r}")
    ia3 = config["composition_mode"] == "scale"
    alpha = effective_lora_alpha(config, version)
    o = _new(AHLoRA, name=name, config=config, cfg=cfg, version=version, kind="lora", ia3=ia3, alpha=alpha,
             scaling=alpha if ia3 else alpha / config["r"], p=p,
             _p64={k: {n: v.to(F64) for n, v in t.items()} for k, t in p.items()})
    for k, t in p.items():
        n_in, n_out = o.shape(k[1])
        want = {"lora_B": (n_out, 1)} if ia3 else {"lora_A": (config["r"], n_in), "lora_B": (n_out, config["r"])}
        for n, s in want.items():
            if n not in t or tuple(t[n].shape) != s:
                raise ValueError(f"{where}: layer {k[0]} {k[1]}: {n} shape {tuple(t[n].shape) if n in t else None} != {s}")
    return o


def _read_prefix(name, config, cfg, sd, where):
    """Prefix tuning from `<base>prefix_tuning.prefix_tunings.<name>.self_prefix.*` (flat or reparametrised, detected
    from the keys as eject_prefix_tuning leaves `flat: false` in the config) + per-layer prefix_gates (§5, §6)."""
    tail = f"prefix_tuning.prefix_tunings.{name}.self_prefix."
    p, gates = collections.OrderedDict(), {}
    for key, v in sd.items():
        if ".prefix_tuning.pool." in key:
            continue                                 # the .bin's per-layer aliases of the same tensors
        m = re.match(r"^" + _BASE_RE + re.escape(tail) + r"(.+)$", key)
        if m:
            p[m.group(1)] = v.to(torch.float32)
            continue
        i, rest = _split_layer_key(key, cfg, where)
        if rest is not None and rest.startswith(PREFIX_LAYER_PATH[fam(cfg.arch)] + f".prefix_gates.{name}."):
            gates.setdefault(i, {})[rest.rsplit(".", 1)[1]] = v.to(torch.float32)
    if not p:
        raise ValueError(f"{where}: no prefix weights for {name!r}")
    flat = set(p) == {"control_trans"}
    if not flat and set(p) != {"wte.weight", "control_trans.0.weight", "control_trans.0.bias", "control_trans.2.weight",
                               "control_trans.2.bias"}:
        raise ValueError(f"{where}: prefix {name!r}: unexpected keys {sorted(p)}")
    config = dict(config, flat=flat)
    layers = [i for i in range(cfg.layers) if i not in config["leave_out"]]
    o = _new(Prefix, name=name, config=config, cfg=cfg, kind="prefix", layers=layers, p=p,
             gates={i: (g["weight"], g["bias"]) for i, g in gates.items()})
    if bool(gates) != bool(config["use_gating"]):
        raise ValueError(f"{where}: prefix {name!r}: prefix_gates present={bool(gates)} but use_gating={config['use_gating']}")
    n = config["prefix_length"] * len(layers) * 2 * cfg.hidden
    got = p["control_trans"].numel() if flat else p["control_trans.2.bias"].numel() * config["prefix_length"]
    if got != n:
        raise ValueError(f"{where}: prefix {name!r}: {got} prefix values, expected P*L*2*H = {n}")
    o.kv = o._compute()
    return o


def read_adapterhub(folder, cfg):
    """One save_adapter folder -> (name, [components], head or None).  Components are Bottleneck / AHLoRA / Prefix
    (a ConfigUnion gives one per member, all with the adapter's name)."""
    env = read_json(os.path.join(folder, "adapter_config.json"))
    _check_envelope(env, cfg, folder)
    name, version, config = env["name"], env.get("version"), env["config"]
    sd, wpath = read_weights(folder, ["adapter", "pytorch_adapter"])
    where = wpath
    configs = config["configs"] if config.get("architecture") == "union" else [config]
    comps = []
    for c in configs:
        arch = c.get("architecture") or ("bottleneck" if "reduction_factor" in c else None)
        if arch == "bottleneck":
            comps.append(_read_bottleneck(name, _bn_config_full(c, version), cfg, sd, where))
        elif arch == "lora":
            full = lora_config()
            full.update(c)
            comps.append(_read_ahlora(name, full, version, cfg, sd, where))
        elif arch == "prefix_tuning":
            full = prefix_config()
            full.update(c)
            comps.append(_read_prefix(name, full, cfg, sd, where))
        else:
            raise ValueError(f"{folder}: adapter architecture {arch!r} is not supported by the reader")
    known = set()
    for o in comps:
        if isinstance(o, Prefix):
            known |= set(o.state_dict(cfg.arch, aliases=True))
        else:
            known |= set(o.state_dict(cfg.arch))
    strip = [k for k in sd if k not in known and ".prefix_tuning.pool." not in k]
    # keys saved without the `<base>.` model prefix are also fine: compare without it
    strip = [k for k in strip if base_prefix(cfg.arch) + k not in known]
    if strip:
        raise ValueError(f"{where}: keys the reader did not use: {strip[:5]}{' ...' if len(strip) > 5 else ''}")
    head = None
    if os.path.exists(os.path.join(folder, "head_config.json")):
        head = read_head(folder, cfg)
    return name, comps, head


def read_head(folder, cfg):
    """save_head folder (head_config.json + model_head.safetensors | pytorch_model_head.bin) -> Head (§9)."""
    env = read_json(os.path.join(folder, "head_config.json"))
    _check_envelope(env, cfg, folder)
    name, c = env["name"], dict(env["config"])
    if c["head_type"] not in ("classification", "multilabel_classification", "tagging", "question_answering"):
        raise ValueError(f"{folder}: head_type {c['head_type']!r} is not supported by the reader")
    sd, where = read_weights(folder, ["model_head", "pytorch_model_head"])
    lins = {}
    for key, v in sd.items():
        m = re.match(r"^heads\." + re.escape(name) + r"\.(\d+)\.(weight|bias)$", key)
        if not m:
            raise ValueError(f"{where}: unknown head key {key!r}")
        lins.setdefault(int(m.group(1)), {})[m.group(2)] = v.to(torch.float32)
    idx = sorted(lins)
    if len(idx) != c["layers"]:
        raise ValueError(f"{where}: {len(idx)} Linear layers, config says {c['layers']}")
    if tuple(lins[idx[-1]]["weight"].shape) != (c["num_labels"], cfg.hidden):
        raise ValueError(f"{where}: last layer {tuple(lins[idx[-1]]['weight'].shape)} != ({c['num_labels']}, H)")
    if "label2id" in c and c["label2id"]:
        c["label2id"] = dict(c["label2id"])
    o = _new(Head, name=name, cfg=cfg, config=c,
             linears=[(j, lins[j]["weight"], lins[j].get("bias")) for j in idx])
    return o


def head_labels(head):
    """Label names in logit order: label2id inverted (AdapterHub), else id2label, else LABEL_j."""
    c = head.config if isinstance(head, Head) else {}
    n = c.get("num_labels") if isinstance(head, Head) else head.num_labels
    if c.get("label2id"):
        inv = {int(v): k for k, v in c["label2id"].items()}
        return [inv.get(j, f"LABEL_{j}") for j in range(n)]
    if c.get("id2label"):
        return [c["id2label"].get(str(j), f"LABEL_{j}") for j in range(n)]
    return [f"LABEL_{j}" for j in range(n)]


def read_fusion(folder, cfg, children):
    """save_adapter_fusion folder -> Fusion over `children` (Bottlenecks, any order; the config's adapter_names
    give the fusion order) (§7.2).  T = 1 (issue 4)."""
    env = read_json(os.path.join(folder, "adapter_fusion_config.json"))
    _check_envelope(env, cfg, folder)
    names = env.get("adapter_names") or env["name"].split(",")
    by = {a.name: a for a in children}
    missing = [n for n in names if n not in by]
    if missing:
        raise ValueError(f"{folder}: fused adapters {missing} were not given")
    fuse_name = ",".join(names)
    sd, where = read_weights(folder, ["model_adapter_fusion", "pytorch_model_adapter_fusion"])
    locs = {v: k for k, v in BN_PATHS[fam(cfg.arch)].items()}
    p = {}
    for key, v in sd.items():
        i, rest = _split_layer_key(key, cfg, where)
        tag = f".adapter_fusion_layer.{fuse_name}."
        if rest is None or tag not in rest:
            raise ValueError(f"{where}: unknown fusion key {key!r}")
        site, param = rest.split(tag, 1)
        if site not in locs or param not in ("query.weight", "query.bias", "key.weight", "key.bias", "value.weight"):
            raise ValueError(f"{where}: unknown fusion key {key!r}")
        p.setdefault((i, locs[site]), {})[param] = v.to(torch.float32)
    config = dict(FUSION_PRESETS["dynamic"])
    config.update(env["config"])
    for k, t in p.items():
        for part, flag in (("query", "query"), ("key", "key"), ("value", "value")):
            if (part + ".weight" in t) != bool(config[flag]):
                raise ValueError(f"{where}: layer {k[0]} {k[1]}: {part} weights vs config {flag}={config[flag]}")
    adapters_ = [by[n] for n in names]
    return _new(Fusion, adapters=adapters_, names=list(names), name=fuse_name, config=config, cfg=cfg, p=p,
                _p64={k: {n: v.to(F64) for n, v in t.items()} for k, t in p.items()})


class LoadedPeftLoRA(PeftLoRA):
    """A PeftLoRA read from a folder: per-module rank (AdaLoRA rank_pattern, LoRA rank_pattern / alpha_pattern)."""

    def apply(self, i, role, x, y, tokmask):
        t = self._p64.get((i, role))
        if t is None:
            return y
        A = t["A"] * t["E"] if self.ada else t["A"]
        return y + (x @ A.T @ t["B"].T) * self.scalings[(i, role)]


def _pattern_get(pattern, key, default):
    """PEFT's rank_pattern / alpha_pattern lookup: a pattern key matches the module name's end."""
    for k, v in (pattern or {}).items():
        if key == k or key.endswith("." + k) or re.fullmatch(r"(.*\.)?" + k, key):
            return v
    return default


def read_peft(folder, cfg):
    """PEFT save_pretrained folder (LORA incl. rsLoRA, ADALORA) -> LoadedPeftLoRA with its modules_to_save head as
    an HFHead in .hf_head (§4)."""
    c = read_json(os.path.join(folder, "adapter_config.json"))
    pt = c.get("peft_type")
    if pt not in ("LORA", "ADALORA"):
        raise ValueError(f"{folder}: peft_type {pt!r} is not supported by the reader")
    for flag in ("use_dora", "fan_in_fan_out"):
        if c.get(flag):
            raise ValueError(f"{folder}: {flag} is not supported by the reader")
    if c.get("bias", "none") != "none" or c.get("lora_bias"):
        raise ValueError(f"{folder}: LoRA bias terms are not supported by the reader")
    sd, where = read_weights(folder, ["adapter_model"])
    roles = {v: k for k, v in LINEAR_PATHS[fam(cfg.arch)].items()}
    p, head, modnames, emb = {}, collections.OrderedDict(), {}, {}
    for key, v in sd.items():
        if not key.startswith("base_model.model."):
            raise ValueError(f"{where}: unexpected key {key!r}")
        k = key[len("base_model.model."):]
        i, rest = _split_layer_key(k, cfg, where)
        if rest is None:
            if ".original_module." in k:
                continue
            m = re.match(r"^" + _BASE_RE + r"embeddings\.word_embeddings\.lora_embedding_([AB])$", k)
            if m:
                if pt != "LORA":
                    raise ValueError(f"{where}: {key}: an embedding LoRA in a {pt} folder")
                emb[m.group(1)] = v.to(torch.float32)
                continue
            if "lora_" in k or "embeddings." in k:
                raise ValueError(f"{where}: {key}: only the word embeddings take a LoRA outside the layers")
            k = re.sub(r"\.modules_to_save\.[^.]+\.", ".", k)
            head[k] = v.to(torch.float32)
            continue
        m = re.match(r"^(.+)\.lora_([ABE])(?:\.[A-Za-z0-9_]+)?(?:\.weight)?$", rest)
        if not m or m.group(1) not in roles:
            raise ValueError(f"{where}: unknown PEFT key {key!r}")
        p.setdefault((i, roles[m.group(1)]), {})[m.group(2)] = v.to(torch.float32)
        modnames[(i, roles[m.group(1)])] = k[: -len(rest)] + m.group(1)
    ada = pt == "ADALORA"
    scalings = {}
    for mk, t in p.items():
        if set(t) != ({"A", "B", "E"} if ada else {"A", "B"}):
            raise ValueError(f"{where}: layer {mk[0]} {mk[1]}: has {sorted(t)}")
        r = t["A"].shape[0]
        if ada:
            a = c["lora_alpha"]
            rank = c["init_r"]       # ranknum: init_r, not saved, kept on resize (ADAPTERS.md)
            scalings[mk] = (a if a > 0 else float(rank)) / (float(rank) + 1e-5)
        else:
            rr = _pattern_get(c.get("rank_pattern"), modnames[mk], c["r"])
            aa = _pattern_get(c.get("alpha_pattern"), modnames[mk], c["lora_alpha"])
            if rr != r:
                raise ValueError(f"{where}: {modnames[mk]}: lora_A has rank {r}, config says {rr}")
            scalings[mk] = aa / math.sqrt(r) if c.get("use_rslora") else aa / r
    emb_scaling = None
    if emb:
        if set(emb) != {"A", "B"}:
            raise ValueError(f"{where}: the embedding LoRA has only lora_embedding_{sorted(emb)[0]}")
        r = emb["A"].shape[0]
        if emb["A"].shape[1] != cfg.vocab or tuple(emb["B"].shape) != (cfg.hidden, r):
            raise ValueError(f"{where}: embedding LoRA A {tuple(emb['A'].shape)}, B {tuple(emb['B'].shape)} do not "
                             f"fit vocabulary {cfg.vocab}, hidden {cfg.hidden}")
        a = c["lora_alpha"]
        emb_scaling = a / math.sqrt(r) if c.get("use_rslora") else a / r
    if not p and not emb:
        raise ValueError(f"{where}: no LoRA weights")
    o = _new(LoadedPeftLoRA, name=os.path.basename(os.path.normpath(folder)), config=c, cfg=cfg, kind="peft", ada=ada,
             r=None, scaling=None, scalings=scalings, roles=sorted({k[1] for k in p}), p=p,
             _p64={k: {n: v.to(F64) for n, v in t.items()} for k, t in p.items()}, head=head,
             emb=emb or None, emb_scaling=emb_scaling)
    o.hf_head = None
    if head:
        want = {"bert": {"classifier.weight", "classifier.bias"},
                "roberta": {"classifier.dense.weight", "classifier.dense.bias", "classifier.out_proj.weight",
                            "classifier.out_proj.bias"},
                "distilbert": {"pre_classifier.weight", "pre_classifier.bias", "classifier.weight",
                               "classifier.bias"},
                "deberta-v2": {"pooler.dense.weight", "pooler.dense.bias", "classifier.weight", "classifier.bias"}}[
            "roberta" if cfg.is_roberta or cfg.arch == "electra" else cfg.arch]
        if set(head) != want:
            raise ValueError(f"{where}: modules_to_save keys {sorted(head)} are not the {cfg.arch} classifier {sorted(want)}")
        last = head["classifier.out_proj.weight" if "classifier.out_proj.weight" in head else "classifier.weight"]
        o.hf_head = _new(HFHead, cfg=cfg, num_labels=last.shape[0], t=collections.OrderedDict(head))
    return o


class LoadedTask:
    """What a task folder set computes: the pieces of a Setup plus the head, read from files."""

    def __init__(self, cfg, adapter_dirs, fusion_dir=None, head_dir=None):
        self.bn_stack, self.linear, self.prefixes, self.fusion, self.head = [], [], [], None, None
        self.fmt = None
        self.names = []
        bns = []
        n_peft = 0
        for j, d in enumerate(adapter_dirs):
            if os.path.exists(os.path.join(d, "adapter_config.json")) and \
                    "peft_type" in read_json(os.path.join(d, "adapter_config.json")):
                # one per task: on its own, or headless beside AdapterHub folders (whose last folder has the head)
                n_peft += 1
                if n_peft > 1 or fusion_dir:
                    raise ValueError(f"{d}: a task takes one PEFT folder, never fused")
                pe = read_peft(d, cfg)
                if pe.hf_head is not None and len(adapter_dirs) > 1:
                    raise ValueError(f"{d}: a PEFT folder with a head is a task on its own")
                self.fmt = self.fmt or "peft"
                self.linear.append(pe)
                if len(adapter_dirs) == 1:
                    self.head = pe.hf_head
                self.names.append(pe.name)
                continue
            self.fmt = "adapterhub"
            name, comps, head = read_adapterhub(d, cfg)
            self.names.append(name)
            for o in comps:
                if isinstance(o, Bottleneck):
                    bns.append(o)
                elif isinstance(o, Prefix):
                    self.prefixes.append(o)
                else:
                    self.linear.append(o)
            if head is not None:
                self.head = head
        if fusion_dir:
            if self.linear or self.prefixes:
                raise ValueError("fusion over non-bottleneck adapters is not supported by the reader")
            self.fusion = read_fusion(fusion_dir, cfg, bns)
        else:
            self.bn_stack = bns
        if head_dir:
            self.head = read_head(head_dir, cfg)
        if self.head is None:
            raise ValueError(f"{adapter_dirs}: no prediction head (give head_dir)")
        self.labels = head_labels(self.head) if isinstance(self.head, Head) else \
            [f"LABEL_{j}" for j in range(self.head.num_labels)]

    def setup(self, skip):
        return Setup(self.bn_stack, self.fusion, self.linear, self.prefixes, skip)
