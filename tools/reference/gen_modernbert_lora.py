#!/usr/bin/python3
"""PEFT LoRA on a ModernBERT backbone, saved as PEFT saves it, with the float64 oracle's logits.

    gen_modernbert_lora.py --backbone DIR --out CASE_DIR [--seed 5] [--r 8] [--alpha 16] [--skips 0,5]
                           [--lens 1,7,48,20] [--targets Wqkv,Wo,Wi[,tok_embeddings]] [--rslora]

The case folder has gen_adapters.py's layout (setup.json, adapters/<name>/, expected/skip<N>.safetensors with
input_ids, token_type_ids, seq_lens, logits [n_seq, 2], hidden [T, H]), so tests/parity/parity_adapters runs it.

The adapter is what PEFT (LoraConfig(task_type=SEQ_CLS, target_modules=[...])) saves for
ModernBertForSequenceClassification: adapter_config.json, and adapter_model.safetensors with
base_model.model.model.layers.{i}.<module>.lora_A.weight (r, in) / lora_B.weight (out, r) for every Linear whose
name ends in a target ("Wo" matches attn.Wo and mlp.Wo, as PEFT's suffix match does), and the modules_to_save
classifier as base_model.model.classifier.{weight,bias}; with tok_embeddings among the targets, a LoRA on the word
embeddings (lora_embedding_A (r, vocab), lora_embedding_B (H, r)), acting at skip 0 only.  The fused attn.Wqkv's LoRA has B (3H, r): its rows update
query, key and value.  The prediction head (head.dense, head.norm) is the backbone's, as PEFT leaves it frozen.

The oracle merges each LoRA into its weight (W + scaling B A, scaling alpha / r or alpha / sqrt(r) with rsLoRA) for
the layers at or above the skip and runs modernbert.forward in float64: an independent route from the engine's
unmerged products.  Lengths are padded into one batch.
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modernbert as M  # noqa: E402
import st  # noqa: E402

MODULES = (("attn.Wqkv", "Wqkv"), ("attn.Wo", "Wo"), ("mlp.Wi", "Wi"), ("mlp.Wo", "Wo"))


FIXTURES_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))


def backbone_ref(path):   # relative to tests/fixtures for the committed fixtures (tests/common/ref_case.c)
    p = os.path.abspath(path)
    return os.path.relpath(p, FIXTURES_ROOT) if p.startswith(FIXTURES_ROOT + os.sep) else p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbone", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--r", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--skips", default="0,5")
    ap.add_argument("--lens", default="1,7,48,20")
    ap.add_argument("--targets", default="Wqkv,Wo,Wi")
    ap.add_argument("--rslora", action="store_true")
    a = ap.parse_args(argv)
    with open(os.path.join(a.backbone, "config.json")) as f:
        cfg = M.cfg_from_hf(json.load(f))
    W = {k: v.to(torch.float64) for k, v in M.canonical_weights(cfg, st.load_dir(a.backbone)).items()}
    if "head.dense.weight" not in W:
        raise SystemExit("the backbone needs the prediction head (head.dense, head.norm)")
    gen = torch.Generator().manual_seed(a.seed)
    targets = set(a.targets.split(","))
    H, I, r = cfg.hidden, cfg.inter, a.r
    dims = {"attn.Wqkv": (H, 3 * H), "attn.Wo": (H, H), "mlp.Wi": (H, 2 * I), "mlp.Wo": (I, H)}
    scaling = a.alpha / (math.sqrt(r) if a.rslora else r)
    sd, lora = {}, {}
    for i in range(cfg.layers):
        for mod, short in MODULES:
            if short not in targets:
                continue
            n_in, n_out = dims[mod]
            A = torch.randn((r, n_in), generator=gen) / math.sqrt(n_in)
            B = torch.randn((n_out, r), generator=gen) * 0.1   # trained LoRA: B is no longer zero
            key = f"base_model.model.model.layers.{i}.{mod}"
            sd[key + ".lora_A.weight"], sd[key + ".lora_B.weight"] = A, B
            lora[(i, mod)] = (A.double(), B.double())
    emb = None
    if "tok_embeddings" in targets:   # PEFT's lora.Embedding: A (r, vocab), B (H, r); token t gains scaling * B A[:, t]
        A = torch.randn((r, cfg.vocab), generator=gen)
        B = torch.randn((H, r), generator=gen) * 0.02
        key = "base_model.model.model.embeddings.tok_embeddings"
        sd[key + ".lora_embedding_A"], sd[key + ".lora_embedding_B"] = A, B
        emb = (A.double(), B.double())
    cw = torch.randn((2, H), generator=gen) / math.sqrt(H) * 2
    cb = torch.randn((2,), generator=gen) * 0.1
    sd["base_model.model.classifier.weight"], sd["base_model.model.classifier.bias"] = cw, cb
    adir = os.path.join(a.out, "adapters", "modernbert-lora")
    os.makedirs(adir, exist_ok=True)
    os.makedirs(os.path.join(a.out, "expected"), exist_ok=True)
    peft_cfg = {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "answerdotai/ModernBERT-base",
        "bias": "none", "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
        "layers_pattern": None, "layers_to_transform": None, "lora_alpha": a.alpha, "lora_dropout": 0.1,
        "modules_to_save": ["classifier", "score"], "peft_type": "LORA", "r": r, "rank_pattern": {},
        "revision": None, "target_modules": sorted(targets), "task_type": "SEQ_CLS", "use_dora": False,
        "use_rslora": a.rslora,
    }
    with open(os.path.join(adir, "adapter_config.json"), "w") as f:
        json.dump(peft_cfg, f, indent=2, sort_keys=True)
    st.save_file({k: v.to(torch.float32).contiguous() for k, v in sd.items()},
                 os.path.join(adir, "adapter_model.safetensors"), {"format": "pt"})
    skips = [int(s) for s in a.skips.split(",") if s]
    with open(os.path.join(a.out, "setup.json"), "w") as f:
        json.dump({"backbone": backbone_ref(a.backbone), "format": "peft", "adapters": ["adapters/modernbert-lora"],
                   "fusion": None, "head": None, "skips": skips,
                   "notes": "PEFT LoRA on ModernBERT (gen_modernbert_lora.py)"}, f, indent=2)

    gen_ids = torch.Generator().manual_seed(a.seed + 1)
    lens = [int(x) for x in a.lens.split(",")]
    seqs = []
    for n in lens:
        s = torch.randint(0, min(cfg.vocab, cfg.cls_id), (n,), generator=gen_ids)
        s[0] = cfg.cls_id
        if n > 1:
            s[-1] = cfg.sep_id
        seqs.append(s)
    T = max(lens)
    ids = torch.full((len(lens), T), cfg.pad_id, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = s
        mask[b, :len(s)] = 1
    cw64, cb64 = cw.to(torch.float32).double(), cb.to(torch.float32).double()
    report = []
    for skip in skips:
        Wm = dict(W)
        if emb is not None and skip == 0:   # below every layer: AdapterDrop drops it first
            Wm["embeddings.tok_embeddings.weight"] = W["embeddings.tok_embeddings.weight"] + scaling * (emb[1] @ emb[0]).T
        for (i, mod), (A, B) in lora.items():
            if i >= skip:
                k = f"layers.{i}.{mod}.weight"
                Wm[k] = W[k] + scaling * (B.float().double() @ A.float().double())
        with torch.no_grad():
            h, pooled = M.forward(cfg, Wm, ids, mask, torch.float64)
            h0, pooled0 = M.forward(cfg, W, ids, mask, torch.float64)
        logits = pooled @ cw64.T + cb64
        base = pooled0 @ cw64.T + cb64
        st.save_file({"input_ids": torch.cat(seqs).to(torch.int32),
                      "token_type_ids": torch.zeros(sum(lens), dtype=torch.int32),
                      "seq_lens": torch.tensor(lens, dtype=torch.int32),
                      "logits": logits.to(torch.float32),
                      "hidden": torch.cat([h[b, :n] for b, n in enumerate(lens)]).to(torch.float32)},
                     os.path.join(a.out, "expected", f"skip{skip}.safetensors"), {"case": "modernbert_lora"})
        report.append({"skip": skip, "max_logit": round(logits.abs().max().item(), 4),
                       "logit_change_vs_backbone": round((logits - base).abs().max().item(), 4)})
    print(json.dumps({"out": a.out, "r": r, "targets": sorted(targets), "skips": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
