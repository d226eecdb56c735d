#!/usr/bin/python3
"""AdapterHub adapters on a ModernBERT backbone, saved as `adapters` saves them, with the float64 oracle's logits.

    gen_modernbert_adapters.py --backbone DIR --out DIR [--case all|a,b] [--skips 0,5] [--lens 1,7,48,20] [--list]

Each case is gen_adapters.py's task directory (setup.json, adapters/<name>/, fusion/, head/, expected/skip<N>.safetensors
with input_ids, token_type_ids, seq_lens, logits, hidden), so tests/parity/parity_adapters runs it.  Where AdapterHub
puts each module on ModernBERT, and the key names, are in modernbert_adapters.py.  One JSON line per case reports the
largest change of the logits against the same head on the plain backbone (a case that changes nothing proves
nothing) and the skip = L self-check (must equal the plain backbone).
"""

import argparse
import json
import os
import shutil
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import adapters as A  # noqa: E402
import modernbert as M  # noqa: E402
import modernbert_adapters as MA  # noqa: E402
import st  # noqa: E402

MODEL_NAME = "answerdotai/ModernBERT-base"


class Case:
    def __init__(self, notes):
        self.notes = notes
        self.saves, self.adapters = [], []
        self.fusion_dir = self.head_dir = None
        self.bn_stack, self.linear, self.fusion, self.head = [], [], None, None

    def setup(self, skip):
        return A.Setup(self.bn_stack, self.fusion, self.linear, [], skip)


def head(cfg, rng, name, **kw):
    labels = kw.pop("labels", ["negative", "positive"])
    return A.Head(name, kw.pop("head_type", "classification"), cfg, rng, num_labels=len(labels), labels=labels,
                  layers=kw.pop("layers", 2), **kw)


def bn_case(preset, name, fmt, notes, head_kw=None, strength=1.0, **over):
    def build(cfg, rng):
        c = Case(notes)
        bn = A.Bottleneck(name, A.bn_config(preset, **over), cfg, rng, strength=strength)
        c.bn_stack, c.head = [bn], head(cfg, rng, name, **(head_kw or {}))
        c.adapters, c.head_dir = [f"adapters/{name}"], f"adapters/{name}"
        c.saves.append((c.head_dir, lambda d: A.save_adapterhub(d, cfg, bn, MODEL_NAME, fmt, c.head)))
        return c
    return build


def lora_case(config_fn, name, fmt, notes, base_over=None, strength=1.0, **over):
    """base_over / strength: config values and weight scale that replace over's / 1.0 at hidden >= 256."""
    def build(cfg, rng):
        c = Case(notes)
        big = cfg.hidden >= 256
        lo = MA.MBLoRA(name, config_fn(**dict(over, **(base_over or {}) if big else over)), cfg, rng,
                       strength=strength if big else 1.0)
        c.linear, c.head = [lo], head(cfg, rng, name)
        c.adapters, c.head_dir = [f"adapters/{name}"], f"adapters/{name}"
        c.saves.append((c.head_dir, lambda d: A.save_adapterhub(d, cfg, lo, MODEL_NAME, fmt, c.head)))
        return c
    return build


def stack_case(cfg, rng):
    c = Case("MAD-X Stack(lang, task) of two seq_bn adapters; the head saved with the task adapter.")
    lang = A.Bottleneck("lang", A.bn_config("seq_bn", reduction_factor=2), cfg, rng)
    task = A.Bottleneck("task", A.bn_config("double_seq_bn"), cfg, rng)
    c.bn_stack, c.head = [lang, task], head(cfg, rng, "task")
    c.adapters, c.head_dir = ["adapters/lang", "adapters/task"], "adapters/task"
    c.saves.append(("adapters/lang", lambda d: A.save_adapterhub(d, cfg, lang, MODEL_NAME, "bin")))
    c.saves.append(("adapters/task", lambda d: A.save_adapterhub(d, cfg, task, MODEL_NAME, "bin", c.head)))
    return c


def fusion_case(n, preset, bn_preset):
    def build(cfg, rng):
        c = Case(f"AdapterFusion ({preset}) over {n} {bn_preset} adapters; fusion in fusion/, head in head/.")
        s_ad, s_fu = (1.5, 1.0) if cfg.hidden < 256 else (0.5, (64.0 / cfg.hidden) ** 0.25)  # gen_adapters' reasons
        bns = [A.Bottleneck(f"t{j}", A.bn_config(bn_preset), cfg, rng, strength=s_ad) for j in range(n)]
        c.fusion = A.Fusion(bns, preset, cfg, rng, strength=s_fu)
        c.head = head(cfg, rng, "fusion_task", labels=["a", "b", "c"])
        c.adapters, c.fusion_dir, c.head_dir = [f"adapters/{b.name}" for b in bns], "fusion", "head"
        for b in bns:
            c.saves.append((f"adapters/{b.name}", lambda d, b=b: A.save_adapterhub(d, cfg, b, MODEL_NAME, "bin")))
        c.saves.append(("fusion", lambda d: A.save_fusion(d, cfg, c.fusion, MODEL_NAME)))
        c.saves.append(("head", lambda d: A.save_head(d, cfg, c.head, MODEL_NAME)))
        return c
    return build


CASES = {
    "seq_bn": bn_case("seq_bn", "sst", "bin", "Pfeiffer (seq_bn) at the output site: input mlp.Wo's output + "
                      "mlp_norm(h) (original_ln_before, no LayerNorm there), residual mlp.Wo's output."),
    "double_seq_bn": bn_case("double_seq_bn", "sst", "st", "Houlsby (double_seq_bn): attention and output sites, "
                             "swish, safetensors."),
    "seq_bn_mh": bn_case("seq_bn", "mh", "st", "seq_bn also at the attention site (mh_adapter): original_ln_before "
                         "normalizes Wo's output + attn_norm(x) with the LAST layer's mlp_norm (late-bound getter), "
                         "gating, tanh.", mh_adapter=True, use_gating=True, non_linearity="tanh"),
    "par_bn": bn_case("par_bn", "par", "bin", "par_bn: parallel adapter on the pre-normed MLP input, added to mlp.Wo's "
                      "output, s=4.", strength=0.5),
    "scaled_par_bn": bn_case("scaled_par_bn", "spar", "st", "scaled_par_bn (learned scalar) at both sites.",
                             strength=0.5, mh_adapter=True),
    "lora": lora_case(A.lora_config, "lora", "st", "AdapterHub LoRA r=8 alpha=16 on q,v of the merged attn.Wqkv "
                      "(lora_A (2r, H), lora_B (2H, r)), mlp.Wi and mlp.Wo.", r=8, alpha=16, intermediate_lora=True,
                      output_lora=True),
    "lora_qkv": lora_case(A.lora_config, "lqkv", "bin", "AdapterHub LoRA r=4 alpha=4 on q, k and v of attn.Wqkv.",
                          r=4, alpha=4, attn_matrices=["q", "k", "v"]),
    "lora_gated": lora_case(A.lora_config, "lgate", "st", "AdapterHub LoRA with use_gating on q, k of attn.Wqkv (gate "
                            "Linear(H, 2): one gate per slice) and mlp.Wo; the gates replace alpha / r.", r=4, alpha=8,
                            attn_matrices=["q", "k"], output_lora=True, use_gating=True),
    # (IA)^3 scales q and k, so every layer's attention scores by their product: at base shapes alpha 2 and l in
    # 1 +- 0.6 make an ill-conditioned case (a relative 1e-7 change of the weights moves the float64 logits by
    # 1.1e-4, measured), which no float32 engine could meet at 1e-4; there alpha 1.25 and l in 1 +- 0.18.
    "ia3": lora_case(A.ia3_config, "ia3", "bin", "(IA)^3 on k, v of attn.Wqkv and mlp.Wi, alpha 2 (1.25 at base "
                     "shapes; the q slice is multiplied by alpha too: LoRAMergedLinear pads with ones).", alpha=2,
                     base_over=dict(alpha=1.25), strength=0.3),
    "stack": stack_case,
    "fusion_n3": fusion_case(3, "dynamic", "seq_bn"),
    "fusion_houlsby_n2": fusion_case(2, "static", "double_seq_bn"),
    "head_tagging": bn_case("seq_bn", "ner", "bin", "tagging head (per token) over a seq_bn adapter.",
                            head_kw=dict(head_type="tagging", layers=1, labels=["O", "B", "I"])),
}
CASES["seq_bn_flags"] = bn_case("seq_bn", "flags", "bin", "seq_bn with ln_before, ln_after, residual_before_ln false, "
                                "float scaling 0.5, gelu, at both sites.", mh_adapter=True, ln_before=True,
                                ln_after=True, residual_before_ln=False, scaling=0.5, non_linearity="gelu")


def make_inputs(cfg, seed, lens):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in lens:
        s = torch.randint(0, min(cfg.vocab, cfg.cls_id), (n,), generator=gen)
        s[0] = cfg.cls_id
        if n > 1:
            s[-1] = cfg.sep_id
        out.append(s)
    return out


def pad(cfg, seqs):
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), cfg.pad_id, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = s
        mask[b, :len(s)] = 1
    return ids, mask


def run(cfg, W, case, skip, seqs, stats=None):
    ids, mask = pad(cfg, seqs)
    with torch.no_grad():
        h, pooled = MA.forward(cfg, W, ids, mask, case.setup(skip), stats)
        logits = case.head.forward(h, pooled)
    lens = [len(s) for s in seqs]
    if case.head.per_token:
        logits = torch.cat([logits[b, :n] for b, n in enumerate(lens)])
    return torch.cat([h[b, :n] for b, n in enumerate(lens)]), logits, mask


FIXTURES_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))


def backbone_ref(path):   # relative to tests/fixtures for the committed fixtures (tests/common/ref_case.c)
    p = os.path.abspath(path)
    return os.path.relpath(p, FIXTURES_ROOT) if p.startswith(FIXTURES_ROOT + os.sep) else p


def generate(cfg, W, backbone, name, out_root, skips, lens):
    seed = zlib.crc32(f"modernbert/{name}".encode()) & 0x7FFFFFFF
    case = CASES[name](cfg, A.Rng(seed))
    out = os.path.join(out_root, name)
    shutil.rmtree(out, ignore_errors=True)
    for rel, fn in case.saves:
        fn(os.path.join(out, rel))
    with open(os.path.join(out, "setup.json"), "w") as f:
        json.dump({"backbone": backbone_ref(backbone), "format": "adapterhub", "adapters": case.adapters,
                   "fusion": case.fusion_dir, "head": case.head_dir, "skips": skips, "notes": case.notes}, f, indent=2)
    os.makedirs(os.path.join(out, "expected"))
    seqs = make_inputs(cfg, seed + 1, lens)
    hL, plain, mask = run(cfg, W, case, cfg.layers, seqs)
    with torch.no_grad():   # skip = L must be modernbert.forward's plain backbone (an independent route)
        h0, _ = M.forward(cfg, W, *pad(cfg, seqs), torch.float64)
    h0 = torch.cat([h0[b, :len(s)] for b, s in enumerate(seqs)])
    if float((hL - h0).abs().max()) > 1e-10:
        raise RuntimeError(f"{name}: skip=L differs from the plain backbone by {float((hL - h0).abs().max())}")
    rep = {"case": name, "skips": {}}
    for skip in skips:
        stats = [] if case.fusion is not None else None
        h, lg, mask = run(cfg, W, case, skip, seqs, stats)
        t = {"input_ids": torch.cat(seqs).to(torch.int32), "token_type_ids": torch.zeros(sum(lens), dtype=torch.int32),
             "seq_lens": torch.tensor(lens, dtype=torch.int32), "logits": lg.to(torch.float32),
             "hidden": h.to(torch.float32)}
        st.save_file(t, os.path.join(out, "expected", f"skip{skip}.safetensors"),
                     {"case": name, "arch": "modernbert", "skip": str(skip),
                      "reference": "float64 padded batch, rounded to f32"})
        rep["skips"][str(skip)] = {"max_dlogits_vs_plain": round(float((lg - plain).abs().max()), 4),
                                   "max_abs_logits": round(float(lg.abs().max()), 3)}
        if not torch.isfinite(lg).all():
            raise RuntimeError(f"{name}: non-finite outputs")
    return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbone")
    ap.add_argument("--out")
    ap.add_argument("--case", default="all")
    ap.add_argument("--skips", default="0,5")
    ap.add_argument("--lens", default="1,7,48,20")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(CASES))
        return 0
    if not a.backbone or not a.out:
        ap.error("--backbone and --out are required")
    with open(os.path.join(a.backbone, "config.json")) as f:
        cfg = M.cfg_from_hf(json.load(f))
    W = {k: v.to(torch.float64) for k, v in M.canonical_weights(cfg, st.load_dir(a.backbone)).items()}
    skips = [int(s) for s in a.skips.split(",") if s]
    lens = [int(n) for n in a.lens.split(",") if n]
    names = list(CASES) if a.case == "all" else a.case.split(",")
    for n in names:
        print(json.dumps(generate(cfg, W, a.backbone, n, a.out, skips, lens)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
