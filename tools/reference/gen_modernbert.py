#!/usr/bin/python3
"""Write a deterministic random ModernBERT checkpoint (Hugging Face key names) and its expected outputs.

    gen_modernbert.py --shape tiny|base --seed 1 --out DIR [--no-prefix] [--no-head] [--classifier] [--bias]
                      [--pooling mean|cls] [--dtype f32|f16|bf16] [--cases single,packed,long] [--long N]

writes DIR/config.json, DIR/model.safetensors and DIR/expected/<case>.safetensors in gen_encoder.py's format
(input_ids, token_type_ids (zeros), position_ids, seq_lens, last_hidden_state, cls, and pooler_output: the
prediction head's output, LN(act(head.dense(pool(h)))), when the checkpoint has head.*).

Saved as ModernBertForMaskedLM / ForSequenceClassification save it: the encoder under 'model.', the prediction head
as head.dense / head.norm, and (--classifier) classifier.weight / .bias, which the encoder must ignore; --no-prefix
saves a bare ModernBertModel (no head).  The oracle runs each case as one right-padded batch in float64.

Cases: single (16 tokens tiny, 128 base); packed (12 tiny / 32 base mixed lengths, incl. 1 and the longest,
64 tiny / 128 base); long (one sequence of --long tokens, default 8192 tiny / 600 base, and one of 40, padded
together), which crosses many local windows and, at 8192, the model's whole length.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modernbert as M  # noqa: E402
import st  # noqa: E402

DT = {"f32": (torch.float32, "float32"), "f16": (torch.float16, "float16"), "bf16": (torch.bfloat16, "bfloat16")}


def make_sequence(cfg, gen, n):
    # ordinary ids: below the special tokens (base: < 50281), or above them (tiny: 1, 2, 0 are special)
    lo, hi = (3, cfg.vocab) if cfg.cls_id <= 3 else (0, cfg.cls_id)
    body = torch.randint(lo, hi, (n,), generator=gen)
    body[0] = cfg.cls_id
    if n >= 2:
        body[-1] = cfg.sep_id
    return body


def build_cases(cfg, shape, seed, names, long_len):
    gen = torch.Generator().manual_seed(seed + 7919)
    top = 64 if shape == "tiny" else 128
    out = {}
    if "single" in names:
        out["single"] = [make_sequence(cfg, gen, 16 if shape == "tiny" else 128)]
    if "packed" in names:
        n_seq = 12 if shape == "tiny" else 32
        lens = [1, top] + torch.randint(2, top + 1, (n_seq - 2,), generator=gen).tolist()
        perm = torch.randperm(len(lens), generator=gen).tolist()
        out["packed"] = [make_sequence(cfg, gen, lens[i]) for i in perm]
    if "long" in names:
        n = long_len or (8192 if shape == "tiny" else 600)
        out["long"] = [make_sequence(cfg, gen, min(n, cfg.max_pos)), make_sequence(cfg, gen, 40)]
    return out


def run_case(cfg, W64, ids_list, head_chunk):
    T = max(len(x) for x in ids_list)
    B = len(ids_list)
    ids = torch.full((B, T), cfg.pad_id, dtype=torch.int64)
    mask = torch.zeros((B, T), dtype=torch.int64)
    for b, x in enumerate(ids_list):
        ids[b, :len(x)] = x
        mask[b, :len(x)] = 1
    with torch.no_grad():
        h, pooled = M.forward(cfg, W64, ids, mask, torch.float64, head_chunk=head_chunk)
    lens = [len(x) for x in ids_list]
    out = {
        "input_ids": torch.cat(ids_list).to(torch.int32),
        "token_type_ids": torch.zeros(sum(lens), dtype=torch.int32),
        "position_ids": torch.cat([torch.arange(n) for n in lens]).to(torch.int32),
        "seq_lens": torch.tensor(lens, dtype=torch.int32),
        "last_hidden_state": torch.cat([h[b, :n] for b, n in enumerate(lens)]),
        "cls": h[:, 0],
    }
    if pooled is not None:
        out["pooler_output"] = pooled
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="tiny", choices=("tiny", "base"))
    ap.add_argument("--layers", type=int, help="override the shape's layer count")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="f32", choices=sorted(DT))
    ap.add_argument("--no-prefix", action="store_true", help="save a bare ModernBertModel (no 'model.', no head)")
    ap.add_argument("--no-head", action="store_true", help="omit head.dense / head.norm")
    ap.add_argument("--classifier", action="store_true", help="add classifier.weight/bias (ignored by the encoder)")
    ap.add_argument("--bias", action="store_true", help="attention_bias, mlp_bias, classifier_bias true")
    ap.add_argument("--norm-bias", action="store_true", help="norm_bias true")
    ap.add_argument("--pooling", default="mean", choices=("mean", "cls"))
    ap.add_argument("--act", default="gelu", choices=("gelu", "gelu_new", "relu", "silu"))
    ap.add_argument("--cases", default="single,packed,long")
    ap.add_argument("--long", type=int, default=0, help="length of the long case's first sequence")
    ap.add_argument("--head-chunk", type=int, default=0, help="heads per attention product (default: all, 1 if long)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    d = M.shape_defaults(a.shape)
    if a.layers:
        d["layers"] = a.layers
    cfg = M.make_cfg(act=a.act, cls_pooling=a.pooling, norm_bias=a.norm_bias, bias=a.bias, **d)
    names = [c for c in a.cases.split(",") if c]
    bad = set(names) - {"single", "packed", "long"}
    if bad:
        ap.error(f"unknown cases {sorted(bad)}")
    torch_dt, dt_name = DT[a.dtype]
    gen = torch.Generator().manual_seed(a.seed)
    head = not a.no_prefix and not a.no_head
    W = M.init_tensors(M.param_shapes(cfg, head=head), gen)
    W = {k: v.to(torch_dt) for k, v in W.items()}
    W64 = {k: v.to(torch.float64) for k, v in W.items()}
    if a.no_prefix:
        sd = dict(W)
    else:
        sd = {(k if k.startswith("head.") else M.PREFIX + k): v for k, v in W.items()}
    if a.classifier:
        sd.update({k: v.to(torch_dt) for k, v in M.init_tensors(M.classifier_shapes(cfg), gen).items()})
    os.makedirs(os.path.join(a.out, "expected"), exist_ok=True)
    for fn in os.listdir(os.path.join(a.out, "expected")):
        os.remove(os.path.join(a.out, "expected", fn))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        f.write(json.dumps(M.hf_config(cfg, dt_name, with_head=a.classifier), indent=2, sort_keys=True) + "\n")
    st.save_file(sd, os.path.join(a.out, "model.safetensors"), {"format": "pt"})
    back = M.canonical_weights(cfg, st.load_dir(a.out))
    assert set(back) == set(W64), sorted(set(back) ^ set(W64))
    report = {"out": a.out, "arch": "modernbert", "shape": a.shape, "layers": cfg.layers, "dtype": a.dtype,
              "cases": []}
    for case, ids_list in build_cases(cfg, a.shape, a.seed, names, a.long).items():
        hc = a.head_chunk or (1 if case == "long" else cfg.heads)
        t64 = run_case(cfg, W64, ids_list, hc)
        h = t64["last_hidden_state"]
        report["cases"].append({"case": case, "n_seq": len(ids_list), "tokens": int(h.shape[0]),
                                "max_abs": round(h.abs().max().item(), 4), "std": round(h.std().item(), 4)})
        t = {k: (v.to(torch.float32) if v.is_floating_point() else v) for k, v in t64.items()}
        st.save_file(t, os.path.join(a.out, "expected", case + ".safetensors"),
                     {"arch": "modernbert", "case": case, "reference": "float64 padded batch, rounded to f32",
                      "weights_dtype": a.dtype, "seed": str(a.seed)})
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
