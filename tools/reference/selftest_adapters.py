#!/usr/bin/python3
"""Self-test of the adapter oracle (adapters.py, gen_adapters.py); runs in a few seconds on the tiny backbones.

Checks, each against something that does not share the code path under test:
  plain       adapters.forward with nothing active == encoder.forward (bert, roberta, distilbert)
  skip=L      every case with all layers skipped == encoder.forward + the same head
  zero        zero-initialised adapters (bottleneck up = 0, LoRA B = 0, (IA)^3 l = 1, AdaLoRA B = 0) == plain
  closed      Pfeiffer / Houlsby / parallel / AdapterPlus / post_add / Stack closed forms (§2.3, §2.4, §7.1) on random
              sub-block inputs, written out here independently of Bottleneck.pre/forward/post
  merged      LoRA (AdapterHub, PEFT, rsLoRA, AdaLoRA) and (IA)^3 == the plain encoder on merged weights
              (W + s B A; (IA)^3: l*alpha scales W and b)
  fusion      Fuse over N copies of one adapter == that adapter alone (static: softmax weights sum to 1; dynamic with
              identity value matrix); attention weights sum to 1
  prefix      flat prefix holding the reparametrised prefix's evaluated vector (eject_prefix_tuning) == reparametrised
  packing     every case: each sequence run alone, unpadded == its rows of the padded batch (gates average valid tokens)
  files       .bin round trip through torch.load (aliases share storage), safetensors round trip, config envelopes,
              v1.0.1 LoRA alpha rule; committed fixtures regenerate byte for byte (if present)
  reader      adapters.LoadedTask re-reads the committed fixtures and every freshly generated case from their files
              and gets the same logits; unknown keys are refused; the real mBERT head's inverted label2id
"""

import filecmp
import json
import math
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import adapters as A  # noqa: E402
import encoder as E  # noqa: E402
import gen_adapters as GA  # noqa: E402
import gen_encoder as G  # noqa: E402
import st  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(GA.FIXTURES_ROOT, "models")
F64 = torch.float64
FAILS = []


def check(name, err, tol):
    ok = err <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {err:.3g} (tol {tol:g})")
    if not ok:
        FAILS.append(name)


def backbone(arch, tmp):
    """The committed tiny backbone if present, else a generated one in tmp."""
    d = os.path.join(MODELS, f"{arch}-tiny")
    if not os.path.exists(os.path.join(d, "config.json")):
        d = os.path.join(tmp, f"{arch}-tiny")
        seed = {"bert": 1, "roberta": 2, "distilbert": 3}[arch]
        extra = ["--prefix", "--head"] if arch == "roberta" else []
        G.main(["--arch", arch, "--shape", "tiny", "--seed", str(seed), "--cases", "single", "--out", d] + extra)
    return d


def batch(cfg, seed=5):
    ids, types = GA.make_inputs(cfg, False, seed)
    return ids, types, G.pad_batch(cfg, ids, types)


def fwd(cfg, W, setup, padded):
    ids, types, mask = padded
    with torch.no_grad():
        return A.forward(cfg, W, ids, mask, types, setup)


def plain(cfg, W, padded):
    ids, types, mask = padded
    with torch.no_grad():
        return E.forward(cfg, W, ids, mask, types, F64)


def maxdiff(a, b, mask):
    m = mask.bool()
    return float((a[m] - b[m]).abs().max())


def test_plain_and_cases(arch, d):
    cfg, W = A.load_backbone(d)
    ids, types, padded = batch(cfg)
    mask = padded[2]
    h0, p0 = plain(cfg, W, padded)
    h, p = fwd(cfg, W, A.Setup(), padded)
    check(f"{arch} plain == encoder.forward", maxdiff(h, h0, mask), 1e-12)
    for name, (builder, fams) in GA.CASES.items():
        if A.fam(arch) not in fams:
            continue
        case = builder(cfg, A.Rng(GA.case_seed(name, arch)))
        hL, pL = fwd(cfg, W, case.setup(cfg.layers), padded)
        lL, l0 = case.head.forward(hL, pL), case.head.forward(h0, p0)
        check(f"{arch} {name} skip=L == plain", max(maxdiff(hL, h0, mask), float((lL - l0).abs().max())), 1e-12)
        # packing: each sequence alone, unpadded
        hb, _ = fwd(cfg, W, case.setup(0), padded)
        worst = 0.0
        for b, (x, t) in enumerate(zip(ids, types)):
            one = (x[None], t[None], torch.ones(1, len(x), dtype=torch.int64))
            ha, _ = fwd(cfg, W, case.setup(0), one)
            worst = max(worst, float((ha[0] - hb[b, :len(x)]).abs().max()))
        check(f"{arch} {name} alone == padded batch", worst, 1e-10)


def test_zero(d):
    cfg, W = A.load_backbone(d)
    _, _, padded = batch(cfg)
    mask = padded[2]
    h0, _ = plain(cfg, W, padded)
    rng = A.Rng(11)
    forms = {
        "seq_bn": A.Setup([A.Bottleneck("z", A.bn_config("seq_bn"), cfg, rng, zero=True)]),
        "double_seq_bn": A.Setup([A.Bottleneck("z", A.bn_config("double_seq_bn", use_gating=True), cfg, rng,
                                               zero=True)]),
        "par_bn": A.Setup([A.Bottleneck("z", A.bn_config("par_bn"), cfg, rng, zero=True)]),
        "lora": A.Setup(linear=[A.AHLoRA("z", A.lora_config(intermediate_lora=True, output_lora=True), cfg, rng,
                                         zero=True)]),
        "ia3": A.Setup(linear=[A.AHLoRA("z", A.ia3_config(), cfg, rng, zero=True)]),
        "peft_lora": A.Setup(linear=[A.PeftLoRA("z", A.peft_config("bert", "LORA", ["query", "value", "dense"]), cfg,
                                                rng, zero=True)]),
        "adalora": A.Setup(linear=[A.PeftLoRA("z", A.peft_config("bert", "ADALORA", ["query", "key"]), cfg, rng,
                                              zero=True)]),
    }
    for n, s in forms.items():
        h, _ = fwd(cfg, W, s, padded)
        check(f"zero-initialised {n} == plain", maxdiff(h, h0, mask), 1e-12)


def test_closed_forms(d):
    cfg, W = A.load_backbone(d)
    H = cfg.hidden
    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 5, H, generator=g, dtype=F64)
    x = torch.randn(2, 5, H, generator=g, dtype=F64)
    tok = torch.ones(2, 5, dtype=torch.int64)
    lw = 1 + 0.1 * torch.randn(H, generator=g, dtype=F64)
    lb = 0.1 * torch.randn(H, generator=g, dtype=F64)

    def LN(z, w=lw, b=lb, eps=cfg.eps):
        return torch.nn.functional.layer_norm(z, (H,), w, b, eps)     # torch's own LN, not E.layer_norm

    rng = A.Rng(21)

    def f(bn, z, loc="output_adapter"):
        t = {k: v.double() for k, v in bn.p[(0, loc)].items()}
        s = bn.config["scaling"]
        s = t["scaling"] if isinstance(s, str) else s
        a = A.act(bn.config["non_linearity"], z @ t["down.weight"].T + t["down.bias"])
        return s * (a @ t["up.weight"].T + t["up.bias"])

    def block(setup, loc="output_adapter"):
        return A.bottleneck_block(setup, 0, loc, h, x, LN, tok, True)

    pf = A.Bottleneck("p", A.bn_config("seq_bn"), cfg, rng)
    check("Pfeiffer closed form LN(h+x+f(LN(h+x)))", float((block(A.Setup([pf])) - LN(h + x + f(pf, LN(h + x))))
                                                           .abs().max()), 1e-12)
    ho = A.Bottleneck("h", A.bn_config("double_seq_bn"), cfg, rng)
    for loc in ("mh_adapter", "output_adapter"):
        check(f"Houlsby closed form LN(x+h+f(h)) at {loc}",
              float((block(A.Setup([ho]), loc) - LN(x + h + f(ho, h, loc))).abs().max()), 1e-12)
    pa = A.Bottleneck("q", A.bn_config("par_bn"), cfg, rng)
    check("parallel closed form LN(h+x+4 f(x))", float((block(A.Setup([pa])) - LN(h + x + f(pa, x))).abs().max()),
          1e-12)
    ap = A.Bottleneck("ap", A.bn_config("seq_bn", original_ln_after=False, residual_before_ln=False,
                                        scaling="channel", non_linearity="gelu"), cfg, rng)
    t = LN(h + x)
    check("AdapterPlus closed form t+f(t), t=LN(h+x)", float((block(A.Setup([ap])) - (t + f(ap, t))).abs().max()),
          1e-12)
    pa2 = A.Bottleneck("pa2", A.bn_config("seq_bn", residual_before_ln="post_add", adapter_residual_before_ln=True,
                                          ln_after=True), cfg, rng)
    tt = {k: v.double() for k, v in pa2.p[(0, "output_adapter")].items()}
    o = torch.nn.functional.layer_norm(f(pa2, LN(h + x)) + h + x, (H,), tt["ln_after.weight"], tt["ln_after.bias"],
                                       1e-5)
    check("post_add + adapter_residual_before_ln + ln_after closed form", float((block(A.Setup([pa2]))
                                                                                  - LN(o + x)).abs().max()), 1e-12)
    la = A.Bottleneck("la", A.bn_config("seq_bn"), cfg, rng)
    ta = A.Bottleneck("ta", A.bn_config("seq_bn"), cfg, rng)
    o1 = h + f(la, LN(h + x))
    o2 = o1 + f(ta, LN(o1 + x))
    check("Stack(lang, task) Pfeiffer closed form (§7.1)", float((block(A.Setup([la, ta])) - LN(o2 + x)).abs().max()),
          1e-12)
    # fusion over copies of one adapter
    for preset in ("static", "dynamic"):
        copies = [A.Bottleneck(f"c{j}", A.bn_config("seq_bn"), cfg, A.Rng(99)) for j in range(3)]
        fu = A.Fusion(copies, preset, cfg, rng)
        if preset == "dynamic":
            fu._p64 = {k: dict(v, **{"value.weight": torch.eye(H, dtype=F64)}) for k, v in fu._p64.items()}
        stats = []
        out = A.bottleneck_block(A.Setup(fusion=fu), 0, "output_adapter", h, x, LN, tok, True, stats)
        check(f"{preset} Fuse over 3 copies == the single adapter",
              float((out - block(A.Setup([copies[0]]))).abs().max()), 1e-12)
        check(f"{preset} fusion attention sums to 1", float((stats[0][1].sum(-1) - 1).abs().max()), 1e-12)


def merged_weights(cfg, W, mod):
    """Plain-encoder weights with the LoRA / (IA)^3 deltas merged in."""
    W = dict(W)
    for (i, role), t in mod._p64.items():
        n = A.linear_path(cfg.arch, i, role)
        w, b = W[n + ".weight"], W[n + ".bias"]
        if isinstance(mod, A.AHLoRA) and mod.ia3:
            s = t["lora_B"].view(-1) * mod.scaling
            W[n + ".weight"], W[n + ".bias"] = w * s[:, None], b * s
        elif isinstance(mod, A.AHLoRA):
            W[n + ".weight"] = w + mod.scaling * t["lora_B"] @ t["lora_A"]
        else:
            Am = t["A"] * t["E"] if mod.ada else t["A"]
            W[n + ".weight"] = w + mod.scaling * t["B"] @ Am
    return W


def test_merged(arch, d):
    cfg, W = A.load_backbone(d)
    _, _, padded = batch(cfg)
    mask = padded[2]
    rng = A.Rng(31)
    tm = {"bert": ["query", "value", "attention.output.dense", "intermediate.dense"],
          "distilbert": ["q_lin", "k_lin", "out_lin", "lin2"]}[A.fam(arch)]
    mods = {
        "AdapterHub LoRA r8 a16": A.AHLoRA("m", A.lora_config(alpha=16, intermediate_lora=True, output_lora=True), cfg,
                                           rng),
        "AdapterHub LoRA v1.0.1 (alpha:=r)": A.AHLoRA("m", A.lora_config(alpha=16), cfg, rng, version="adapters.1.0.1"),
        "(IA)^3 alpha 2": A.AHLoRA("m", A.ia3_config(alpha=2), cfg, rng),
        "PEFT LoRA": A.PeftLoRA("m", A.peft_config(arch, "LORA", tm), cfg, rng),
        "PEFT rsLoRA": A.PeftLoRA("m", A.peft_config(arch, "LORA", tm, r=4, lora_alpha=8, use_rslora=True), cfg, rng),
        "PEFT AdaLoRA": A.PeftLoRA("m", A.peft_config(arch, "ADALORA", tm, lora_alpha=2, init_r=6), cfg, rng),
    }
    for n, m in mods.items():
        h, _ = fwd(cfg, W, A.Setup(linear=[m]), padded)
        hm, _ = plain(cfg, merged_weights(cfg, W, m), padded)
        h0, _ = plain(cfg, W, padded)
        check(f"{arch} {n} == merged weights (moves hidden by {maxdiff(h, h0, mask):.2f})", maxdiff(h, hm, mask),
              1e-10)
    check("v1.0.1 alpha rule: scaling", abs(mods["AdapterHub LoRA v1.0.1 (alpha:=r)"].scaling - 1.0), 0)
    check("1.1.0 scaling alpha/r", abs(mods["AdapterHub LoRA r8 a16"].scaling - 2.0), 0)
    check("rsLoRA scaling alpha/sqrt(r)", abs(mods["PEFT rsLoRA"].scaling - 4.0), 0)
    check("AdaLoRA scaling alpha/(init_r+1e-5)", abs(mods["PEFT AdaLoRA"].scaling - 2 / (6 + 1e-5)), 0)


def test_prefix(d):
    cfg, W = A.load_backbone(d)
    _, _, padded = batch(cfg)
    mask = padded[2]
    rp = A.Prefix("p", A.prefix_config(prefix_length=5, bottleneck_size=16), cfg, A.Rng(41))
    fl = A.Prefix("p", A.prefix_config(prefix_length=5, flat=True), cfg, A.Rng(42))
    # eject_prefix_tuning: the flat vector is control_trans(wte(arange(P))).view(-1)
    p = {k: v.double() for k, v in rp.p.items()}
    z = torch.tanh(p["wte.weight"] @ p["control_trans.0.weight"].T + p["control_trans.0.bias"])
    fl.p["control_trans"] = (z @ p["control_trans.2.weight"].T + p["control_trans.2.bias"]).reshape(-1).float()
    fl.kv = fl._compute()
    rp.p = {k: v for k, v in rp.p.items()}
    h1, _ = fwd(cfg, W, A.Setup(prefixes=[rp]), padded)
    h2, _ = fwd(cfg, W, A.Setup(prefixes=[fl]), padded)
    h0, _ = plain(cfg, W, padded)
    check(f"flat(ejected) == reparametrised prefix (moves hidden by {maxdiff(h1, h0, mask):.2f})",
          maxdiff(h1, h2, mask), 1e-5)   # flat vector rounded to f32, as eject + save would


def test_files(tmp):
    d = backbone("bert", tmp)
    cfg, W = A.load_backbone(d)
    out = os.path.join(tmp, "cases")
    GA.generate(d, "prefix", out, [0])
    GA.generate(d, "seq_bn_ln_before_after", out, [0])
    GA.generate(d, "seq_bn_st", out, [0])
    GA.generate(d, "peft_adalora", out, [0])
    GA.generate(d, "fusion_dynamic_n3", out, [0])
    sd = torch.load(os.path.join(out, "prefix/adapters/prefix_task/pytorch_adapter.bin"))
    canon = [k for k in sd if ".pool." not in k]
    alias = [k for k in sd if ".pool." in k]
    check("prefix .bin: 5 canonical + 5 per layer alias keys", abs(len(canon) - 5) + abs(len(alias) - 5 * cfg.layers),
          0)
    same = all(sd[k].storage().data_ptr() == sd["bert.prefix_tuning." + k.split(".pool.")[1]].storage().data_ptr()
               for k in alias)
    check("prefix aliases share the canonical storage", 0 if same else 1, 0)
    sd = torch.load(os.path.join(out, "seq_bn_ln_before_after/adapters/lnba/pytorch_adapter.bin"))
    k = "bert.encoder.layer.0.output.adapters.lnba."
    check("ln_before: adapter_norm_before and adapter_down.0 share storage",
          0 if sd[k + "adapter_norm_before.weight"].storage().data_ptr() == sd[k + "adapter_down.0.weight"]
          .storage().data_ptr() else 1, 0)
    check("ln_before: Linear at adapter_down.1", 0 if sd[k + "adapter_down.1.weight"].shape == (4, 64) else 1, 0)
    t, meta = st.load_file(os.path.join(out, "seq_bn_st/adapters/sst/adapter.safetensors"))
    check("AdapterHub safetensors: no metadata, 8 keys", (meta is not None) + abs(len(t) - 8), 0)
    t, meta = st.load_file(os.path.join(out, "peft_adalora/adapters/peft_task/adapter_model.safetensors"))
    ok = meta == {"format": "pt"} and not any("ranknum" in k for k in t) and \
        t["base_model.model.bert.encoder.layer.0.attention.self.query.lora_E"].shape == (6, 1) and \
        "base_model.model.classifier.weight" in t
    check("PEFT AdaLoRA file: format pt, lora_E [6,1], no ranknum, classifier", 0 if ok else 1, 0)
    env = json.load(open(os.path.join(out, "seq_bn_st/adapters/sst/adapter_config.json")))
    ok = sorted(env) == ["config", "hidden_size", "model_class", "model_name", "model_type", "name", "version"] and \
        env["version"] == "adapters.1.1.0" and "architecture" not in env["config"]
    check("adapter_config.json envelope (§10.1)", 0 if ok else 1, 0)
    fz = torch.load(os.path.join(out, "fusion_dynamic_n3/fusion/pytorch_model_adapter_fusion.bin"))
    ok = "bert.encoder.layer.1.output.adapter_fusion_layer.t0,t1,t2.value.weight" in fz and \
        not any(k.endswith("value.bias") for k in fz) and len(fz) == 5 * cfg.layers
    check("fusion .bin keys (value without bias)", 0 if ok else 1, 0)
    # committed fixtures regenerate byte for byte
    committed = os.path.join(GA.FIXTURES_ROOT, "adapters")
    if os.path.isdir(committed) and os.path.isdir(os.path.join(MODELS, "bert-tiny")):
        regen = os.path.join(tmp, "regen")
        import subprocess
        subprocess.run(["sh", os.path.join(HERE, "regen_adapter_fixtures.sh"), regen], check=True,
                       stdout=subprocess.DEVNULL)
        diff = []

        def walk(c):
            # committed case folders gen_adapters.py does not write (e.g. gen_adamix.py's) are not regenerated here
            left = [x for x in c.left_only if not (os.path.dirname(c.left) == committed and x not in GA.CASES)]
            diff.extend(left + c.right_only + c.diff_files + c.funny_files)
            for sub in c.subdirs.values():
                walk(sub)
        for bb in sorted(os.listdir(regen)):
            cmp = filecmp.dircmp(os.path.join(committed, bb), os.path.join(regen, bb))
            walk(cmp)
        # filecmp's shallow compare uses size+mtime; recheck the reported ones byte for byte
        check("committed fixtures regenerate identically", len(diff), 0)
        if diff:
            print("     differing:", diff[:8])


def test_reader(tmp):
    """adapters.LoadedTask re-reads every committed fixture (and a fresh set of every case) from its files and
    reproduces the expected logits exactly; unknown keys are refused; the real mBERT head's label2id is inverted."""
    committed = os.path.join(GA.FIXTURES_ROOT, "adapters")
    worst, n = 0.0, 0
    for bbname in ("bert-tiny", "roberta-tiny", "distilbert-tiny"):
        cdir = os.path.join(committed, bbname)
        if not os.path.isdir(cdir):
            continue
        bb = A.load_backbone(os.path.join(MODELS, bbname))
        for c in sorted(os.listdir(cdir)):
            if c not in GA.CASES:
                continue                     # fixtures written by other tools (e.g. the engine's AdaMix one)
            worst = max(worst, max(GA.recheck_from_files(os.path.join(cdir, c), bb).values()))
            n += 1
    check(f"reader: {n} committed fixtures re-read from their files give the same logits", worst, 0)
    d = backbone("distilbert", tmp)
    bb = A.load_backbone(d)
    out = os.path.join(tmp, "reader")
    worst = 0.0
    for c in GA.CASES:
        if A.fam(bb[0].arch) in GA.CASES[c][1]:
            GA.generate(d, c, out, [0, 2], bb, selfcheck=False)
            worst = max(worst, max(GA.recheck_from_files(os.path.join(out, c), bb).values()))
    check("reader: every distilbert case regenerated and re-read gives the same logits", worst, 0)
    a = os.path.join(out, "seq_bn_bin", "adapters", "sst")
    sd = torch.load(os.path.join(a, "pytorch_adapter.bin"))
    sd["distilbert.transformer.layer.0.output_adapters.adapters.sst.surprise"] = torch.zeros(1)
    torch.save(sd, os.path.join(a, "pytorch_adapter.bin"))
    try:
        A.LoadedTask(bb[0], [a])
        refused = 0
    except ValueError as e:
        refused = "surprise" in str(e)
    check("reader: an unknown adapter key is refused, naming it", 0 if refused else 1, 0)
    real = os.path.join(HERE, "..", "..", "..", "shared", "data", "adapters", "adapterhub-mbert-md")
    if os.path.isdir(real):
        cfg = E.make_cfg("bert", hidden=768, layers=12, heads=12, inter=3072, vocab=100, max_pos=512)
        name, comps, head = A.read_adapterhub(real, cfg)
        ok = name == "md" and len(comps) == 1 and A.head_labels(head) == ["1", "0"] and \
            sorted(comps[0].p) == [(i, "output_adapter") for i in range(12)]
        check("reader: real mBERT md adapter (12 output adapters, labels ['1', '0'] from label2id {'0': 1, '1': 0})",
              0 if ok else 1, 0)


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {a: backbone(a, tmp) for a in ("bert", "roberta", "distilbert")}
        for a, d in dirs.items():
            test_plain_and_cases(a, d)
        test_zero(dirs["bert"])
        test_closed_forms(dirs["bert"])
        for a in ("bert", "roberta", "distilbert"):
            test_merged(a, dirs[a])
        test_prefix(dirs["bert"])
        test_files(tmp)
        test_reader(tmp)
    print(f"{len(FAILS)} failures" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
