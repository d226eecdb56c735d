"""AdapterHub's adapters on ModernBERT: the float64 reference (test oracle, never the product).

Where they act.  AdapterHub has no ModernBERT model class of its own: ModernBERT runs through the plugin interface
(adapter-hub/adapters, src/adapters/wrappers/interfaces.py, CUSTOM_INTERFACES["modernbert"]:
adapter_methods bottleneck, lora, reft, invertible - "not yet working for prompt tuning", and no prefix tuning;
attn_qkv_proj "Wqkv", attn_o_proj "Wo", layer_intermediate_proj "mlp.Wi", layer_output_proj "mlp.Wo",
layer_pre_self_attn "attn", layer_pre_ffn "mlp", layer_ln_1 "mlp_norm", layer_ln_2 None).  From that table:

  * Bottleneck sites (src/adapters/methods/bottleneck.py, init_bottleneck): `layers.N.attention_adapters`, a
    forward hook on attn.Wo's output, and `layers.N.output_adapters`, a hook on mlp.Wo's output.  Each hook's
    "input_tensor" (the sub-block residual of BERT's adapters) is what a forward pre-hook on attn / mlp saw as its
    first argument: ModernBertEncoderLayer calls self.attn(self.attn_norm(x)) and self.mlp(self.mlp_norm(h))
    (transformers 4.57, the version adapters pins), so it is the *pre-normed* sub-block input a = attn_norm(x)
    (x itself on layer 0, whose attn_norm is the identity) and m = mlp_norm(h).
  * These layers are "hooked" (is_layer_hooked): add_adapter sets every adapter's original_ln_after to False, and a
    config with original_ln_after false is refused (LAYER_HOOK_UNSUPPORTED): the residual x + ... is ModernBERT's
    own, after the hook.  So the hook's output replaces Wo's output, and with no active adapter it is Wo's output.
  * "original_ln_before" adds the sub-block input and applies the hooked layer's LayerNorm: for the attention site
    layer_ln_1 "mlp_norm", read through `lambda: multigetattr(layer, ...)` defined in the loop over the layers, so
    (Python closures bind late) every layer's attention site gets the LAST layer's mlp_norm; the output site has
    no LayerNorm (layer_ln_2 None), so there original_ln_before adds m without normalizing.  residual_before_ln
    picks the adapter residual as on BERT (the Wo output, or the sum / its norm).
  * Parallel adapters read the sub-block input (a or m) and add to the Wo output (ParallelAdapter.post_forward).
  * Fusion: compose_fuse as on BERT, then the last adapter's post_forward (hooked: no LayerNorm).
  * LoRA (src/adapters/methods/lora.py, init_lora): attn.Wqkv is wrapped in LoRAMergedLinear: with n of q, k, v in
    attn_matrices, lora_A (n r, H), lora_B (n H, r), and a grouped product: matrix g (in q, k, v order among the
    enabled) adds scaling * x A_g^T B_g^T to its H-wide slice of the fused output, A_g = rows g r.. of lora_A, B_g
    = rows g H.. of lora_B; (IA)^3 (composition_mode scale) multiplies the output by lora_B (n H, 1) padded with
    ones, times alpha: slices not enabled are multiplied by alpha.  mlp.Wi (intermediate_lora, 2I outputs before
    GeGLU) and mlp.Wo (output_lora) are LoRALinear as on BERT.  attn.Wo takes no LoRA there (init_lora wraps only
    the qkv, intermediate and output projections).
  * Keys: the model's state-dict names, `model.layers.N.attention_adapters.adapters.<name>.adapter_down.0.weight`,
    `model.layers.N.attn.Wqkv.loras.<name>.lora_A`, ...adapter_fusion_layer.<names>.query.weight.

Checked once (2026-11-26) against the library's own code, run from its source on Debian's torch with shims for the
transformers imports (nothing of it kept here): Adapter / ParallelAdapter / BertFusion of methods/modeling.py in the
hooked arrangement (pre_forward, forward, post_forward with original_ln_after off, with and without a LayerNorm;
seq_bn, double_seq_bn, par_bn, scaled_par_bn, gating, ln_before/ln_after, channel scaling, a Stack of two, a dynamic
Fuse of three) agree with hooked_block to 1.8e-15 in float64; LoRAMergedLinear's forward arithmetic (grouped conv1d,
pad, com; LoRA, gated LoRA, (IA)^3) agrees with MBLoRA.apply exactly.  The wiring (which tensors reach the hooks) is
read from bottleneck.py and transformers 4.57's modeling_modernbert.py, which do not run here.

No flex heads exist for a plugin model; the cases carry an AdapterHub flex head folder (head_config.json) as on the
other architectures, which adapterd applies to the final hidden state as everywhere.
"""

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import adapters as A  # noqa: E402
import modernbert as M  # noqa: E402

F64 = torch.float64
QKV = ("q", "k", "v")


class MBLoRA:
    """AdapterHub LoRA / (IA)^3 on ModernBERT: one merged module on attn.Wqkv (role "qkv"), f1 = mlp.Wi, f2 = mlp.Wo."""

    def __init__(self, name, config, cfg, rng, version=A.ADAPTERS_VERSION, strength=1.0):
        self.name, self.config, self.cfg, self.version = name, config, cfg, version
        self.kind = "lora"
        self.ia3 = config["composition_mode"] == "scale"
        self.alpha = A.effective_lora_alpha(config, version)
        r = config["r"]
        self.scaling = self.alpha if self.ia3 else self.alpha / r
        self.enabled = [m for m in QKV if m in config["attn_matrices"]] if config["selfattn_lora"] else []
        H, I, n = cfg.hidden, cfg.inter, len(self.enabled)
        shapes = {}
        if n:
            shapes["qkv"] = (H, n * H, n)
        if config["intermediate_lora"]:
            shapes["f1"] = (H, 2 * I, 1)
        if config["output_lora"]:
            shapes["f2"] = (I, H, 1)
        self.p = {}
        for i in range(cfg.layers):
            if i in config["leave_out"]:
                continue
            for role, (n_in, n_out, g) in shapes.items():
                t = {}
                if self.ia3:
                    t["lora_B"] = rng.uniform((n_out, 1), 1.0 - 0.6 * strength, 1.0 + 0.6 * strength)
                else:
                    t["lora_A"] = rng.normal((g * r, n_in), 1.0 / math.sqrt(n_in))
                    t["lora_B"] = rng.normal((n_out, r), strength / math.sqrt(r) / self.scaling)
                if config["use_gating"]:   # Linear(in, gating_heads): n heads on the merged Wqkv (get_n_heads)
                    t["gate.weight"] = rng.normal((g, n_in), 1.0 / math.sqrt(n_in))
                    t["gate.bias"] = rng.normal((g,), 0.5)
                self.p[(i, role)] = t
        self._p64 = {k: {n: v.to(F64) for n, v in t.items()} for k, t in self.p.items()}

    def apply(self, i, role, x, y, tokmask):
        t = self._p64.get((i, role))
        if t is None:
            return y
        # gated: mean over the valid tokens of sigmoid(gate(x)), one per head, in place of the scaling
        gate = A.masked_token_mean(torch.sigmoid(A.lin(x, t["gate.weight"], t["gate.bias"])), tokmask) \
            if "gate.weight" in t else None
        if role != "qkv":
            if self.ia3:
                return y * (t["lora_B"].view(-1) * self.scaling)
            return y + (x @ t["lora_A"].T @ t["lora_B"].T) * (self.scaling if gate is None else gate)
        H, r = self.cfg.hidden, self.config["r"]
        parts = list(y.split(H, dim=-1))
        for g, m in enumerate(self.enabled):
            j = QKV.index(m)
            if self.ia3:
                parts[j] = parts[j] * t["lora_B"][g * H:(g + 1) * H, 0]
            else:
                Ag, Bg = t["lora_A"][g * r:(g + 1) * r], t["lora_B"][g * H:(g + 1) * H]
                parts[j] = parts[j] + (x @ Ag.T @ Bg.T) * (self.scaling if gate is None else gate[..., g:g + 1])
        if self.ia3:   # LoRAMergedLinear.pad fills the slices not enabled with 1, then com multiplies by alpha
            parts = [p * self.scaling for p in parts]
        return torch.cat(parts, dim=-1)

    def state_dict(self, arch):
        import collections
        sd = collections.OrderedDict()
        path = {"qkv": "attn.Wqkv", "f1": "mlp.Wi", "f2": "mlp.Wo"}
        for i in range(self.cfg.layers):
            for role in ("qkv", "f1", "f2"):
                t = self.p.get((i, role))
                if t is None:
                    continue
                k = f"model.layers.{i}.{path[role]}.loras.{self.name}."
                for n in ("lora_A", "lora_B", "gate.weight", "gate.bias"):
                    if n in t:
                        sd[k + n] = t[n]
        return sd


def hooked_block(setup, i, loc, h, x, LN, tokmask, on, fusion_stats=None):
    """BottleneckLayer.bottleneck_layer_forward in hooking mode: h (the Wo output) comes back unchanged when nothing
    is active at this site; the adapters' post step adds no residual (original_ln_after forced off)."""
    if on and setup.fusion is not None and setup.fusion.has(i, loc):
        return setup.fusion.run(i, loc, h, x, LN, tokmask, fusion_stats, hooked=True)
    stack = [a for a in setup.bn_stack if a.has(i, loc)] if on else []
    if not stack:
        return h
    hs, res = h, x
    for a in stack:
        hs, _, res = a.pre_forward(hs, x, LN)
        hs, _ = a.forward(i, loc, hs, res, tokmask)
    return stack[-1].post_forward(hs, h, x, LN, hooked=True)


def forward(cfg, W, input_ids, attention_mask, setup, fusion_stats=None):
    """modernbert.forward in float64 with AdapterHub's hooks (see the file's top).  W: canonical float64 weights.
    Returns (last_hidden_state [B, T, H] after final_norm, pooled [B, H] or None)."""
    if setup.prefixes:
        raise ValueError("AdapterHub has no prefix tuning on ModernBERT")
    B, T = input_ids.shape
    H, n, d = cfg.hidden, cfg.heads, cfg.hidden // cfg.heads
    keep = attention_mask.bool()[:, None, None, :]
    pos = torch.arange(T)
    near = ((pos[:, None] - pos[None, :]).abs() <= cfg.window // 2)[None, None]
    neg = torch.finfo(F64).min
    tables = {True: M.rope_tables(cfg.global_theta, T, d, F64), False: M.rope_tables(cfg.local_theta, T, d, F64)}

    def g(k):
        return W.get(k)

    def ln(z, name):
        return M._ln(False, z, W[name + ".weight"], g(name + ".bias"), cfg.eps)

    last_mlp_norm = f"layers.{cfg.layers - 1}.mlp_norm"    # the late-bound layer_ln_1 of every layer

    def LN_attn_site(z):
        return ln(z, last_mlp_norm)

    def no_ln(z):                                         # layer_ln_2 None: original_ln_before only adds
        return z

    x = ln(W["embeddings.tok_embeddings.weight"][input_ids], "embeddings.norm")
    for i in range(cfg.layers):
        p = f"layers.{i}."
        on = i >= setup.skip

        def L(role, inp, y):
            if on:
                for m in setup.linear:
                    y = m.apply(i, role, inp, y, attention_mask)
            return y

        a = x if i == 0 else ln(x, p + "attn_norm")
        qkv = L("qkv", a, torch.nn.functional.linear(a, W[p + "attn.Wqkv.weight"], g(p + "attn.Wqkv.bias")))
        qkv = qkv.view(B, T, 3, n, d).permute(2, 0, 3, 1, 4)
        cos, sin = tables[cfg.is_global(i)]
        q, k, v = M.rope(qkv[0], cos, sin), M.rope(qkv[1], cos, sin), qkv[2]
        allowed = keep if cfg.is_global(i) else keep & near
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        ctx = torch.matmul(torch.softmax(s.masked_fill(~allowed, neg), dim=-1), v).transpose(1, 2).reshape(B, T, H)
        o = torch.nn.functional.linear(ctx, W[p + "attn.Wo.weight"], g(p + "attn.Wo.bias"))
        x = x + hooked_block(setup, i, "mh_adapter", o, a, LN_attn_site, attention_mask, on, fusion_stats)
        mi = ln(x, p + "mlp_norm")
        wi = L("f1", mi, torch.nn.functional.linear(mi, W[p + "mlp.Wi.weight"], g(p + "mlp.Wi.bias")))
        gi, gu = wi.chunk(2, dim=-1)
        gl = A.act(cfg.act, gi) * gu
        f = L("f2", gl, torch.nn.functional.linear(gl, W[p + "mlp.Wo.weight"], g(p + "mlp.Wo.bias")))
        x = x + hooked_block(setup, i, "output_adapter", f, mi, no_ln, attention_mask, on, fusion_stats)
    x = ln(x, "final_norm")
    pooled = None
    if "head.dense.weight" in W:
        if cfg.cls_pooling == "cls":
            pin = x[:, 0]
        else:
            mk = attention_mask.to(F64)[:, :, None]
            pin = (x * mk).sum(1) / mk.sum(1)
        pooled = ln(A.act(cfg.cls_act, torch.nn.functional.linear(pin, W["head.dense.weight"], g("head.dense.bias"))),
                    "head.norm")
    return x, pooled
