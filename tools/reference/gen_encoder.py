#!/usr/bin/python3
"""Write a deterministic random Hugging Face encoder checkpoint and its expected outputs.

    gen_encoder.py --arch bert --shape tiny --seed 1 --out DIR

writes DIR/config.json, DIR/model.safetensors (or shards + index) and DIR/expected/{single,packed,pair}.safetensors.
Each expected file holds the concatenated (padding-free) inputs and the float64 oracle's outputs rounded to F32:

    input_ids          I32 [T_total]     sequences back to back
    token_type_ids     I32 [T_total]
    position_ids       I32 [T_total]     what the model uses (RoBERTa's rule applied); for debugging only
    seq_lens           I32 [n_seq]
    last_hidden_state  F32 [T_total, H]  rows in the same order as input_ids
    pooler_output      F32 [n_seq, H]    absent when the checkpoint has no pooler
    cls                F32 [n_seq, H]    last_hidden_state of each sequence's first token

The oracle runs each case as ONE right-padded batch with an attention mask, so comparing an engine that packs
sequences without padding against it tests packing for real.  The weights it uses are the saved ones (rounded to
F16/BF16 when --dtype asks for it) upcast to float64.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deberta as X  # noqa: E402  (ELECTRA, DeBERTa-v2: same API as encoder.py)
import encoder as E  # noqa: E402
import st  # noqa: E402

DT = {"f32": (torch.float32, "float32"), "f16": (torch.float16, "float16"), "bf16": (torch.bfloat16, "bfloat16")}


def special_ids(cfg):
    """(first, sep, low): the ids a tokenizer puts at the start and the end, and the smallest 'ordinary' id."""
    if cfg.is_roberta:
        return 0, 2, 3                      # <s> ... </s>, pad is 1
    if cfg.arch == "deberta-v2":
        return 1, 2, 3                      # DeBERTa-v3's [CLS]=1 ... [SEP]=2, pad 0
    if cfg.vocab > 103:
        return 101, 102, 103                # [CLS] ... [SEP]
    return 1, 2, 3


def make_sequence(cfg, gen, n, pair=False):
    """Token ids and type ids of one sequence of length n (n >= 1), with realistic special tokens."""
    first, sep, low = special_ids(cfg)
    body = torch.randint(low, cfg.vocab, (n,), generator=gen)
    body[0] = first
    types = torch.zeros(n, dtype=torch.int64)
    if n >= 2:
        body[-1] = sep
    if pair and n >= 5:
        # BERT: [CLS] a [SEP] b [SEP], b and its [SEP] type 1.  RoBERTa: <s> a </s></s> b </s>, types all 0.
        a = (n - 3) // 2
        body[1 + a] = sep
        if cfg.is_roberta:
            body[2 + a] = sep
        elif cfg.arch != "distilbert" and cfg.type_vocab > 0:
            types[2 + a:] = 1
    return body, types


def max_len(cfg):
    """Longest sequence the position table allows (RoBERTa's positions start at pad + 1)."""
    return cfg.max_pos - (cfg.pad_id + 1 if cfg.is_roberta else 0)


def build_cases(cfg, shape, seed, names, n_packed):
    """Return {case: (list of id tensors, list of type tensors)}."""
    gen = torch.Generator().manual_seed(seed + 7919)
    top = min(max_len(cfg), 128)
    out = {}
    if "single" in names:
        n = 16 if shape == "tiny" else min(128, top)
        ids, tt = make_sequence(cfg, gen, n)
        out["single"] = ([ids], [tt])
    if "packed" in names:
        n_seq = n_packed or (12 if shape == "tiny" else 32)
        lens = [1, top] + torch.randint(2, top + 1, (max(n_seq - 2, 0),), generator=gen).tolist()
        lens = lens[:n_seq]
        # Deterministic shuffle so the length-1 and the longest sequence are not always first.
        perm = torch.randperm(len(lens), generator=gen).tolist()
        lens = [lens[i] for i in perm]
        seqs = [make_sequence(cfg, gen, n) for n in lens]
        if cfg.is_roberta:
            # One sequence with the pad id in the middle: its position ids must skip it (fairseq make_positions).
            j = max(range(len(lens)), key=lambda i: (lens[i] >= 6, -abs(lens[i] - 10)))
            if lens[j] >= 6:
                seqs[j][0][lens[j] // 2] = cfg.pad_id
        out["packed"] = ([s[0] for s in seqs], [s[1] for s in seqs])
    if "pair" in names:
        lens = [min(top, 24), min(top, 9), min(top, 17)] if shape == "tiny" else [min(top, 128), 57, 90]
        seqs = [make_sequence(cfg, gen, n, pair=True) for n in lens]
        out["pair"] = ([s[0] for s in seqs], [s[1] for s in seqs])
    if "long" in names:   # the longest sequence the model takes (DeBERTa's far log buckets)
        ids, tt = make_sequence(cfg, gen, max_len(cfg))
        out["long"] = ([ids], [tt])
    return out


def pad_batch(cfg, ids_list, types_list):
    """Right-pad into [B, T] with the pad id and mask 0, as a Hugging Face tokenizer does."""
    T = max(len(x) for x in ids_list)
    B = len(ids_list)
    ids = torch.full((B, T), cfg.pad_id, dtype=torch.int64)
    types = torch.zeros((B, T), dtype=torch.int64)
    mask = torch.zeros((B, T), dtype=torch.int64)
    for b, (x, t) in enumerate(zip(ids_list, types_list)):
        ids[b, :len(x)] = x
        types[b, :len(x)] = t
        mask[b, :len(x)] = 1
    return ids, types, mask


def run_case(cfg, W64, ids_list, types_list):
    """Float64 oracle on one padded batch; returns the packed tensors of an expected file."""
    ids, types, mask = pad_batch(cfg, ids_list, types_list)
    with torch.no_grad():
        h, pooled = E.forward(cfg, W64, ids, mask, types, torch.float64)
    pos = E.position_ids(cfg, ids)
    lens = [len(x) for x in ids_list]
    rows = torch.cat([h[b, :n] for b, n in enumerate(lens)])
    out = {
        "input_ids": torch.cat(ids_list).to(torch.int32),
        "token_type_ids": torch.cat(types_list).to(torch.int32),
        "position_ids": torch.cat([pos[b, :n] for b, n in enumerate(lens)]).to(torch.int32),
        "seq_lens": torch.tensor(lens, dtype=torch.int32),
        "last_hidden_state": rows,
        "cls": h[:, 0],
    }
    if pooled is not None:
        out["pooler_output"] = pooled
    return out


def self_check(cfg, W64, ids_list, types_list, packed64):
    """Independent checks on the oracle itself: each sequence run alone (no padding) must match the padded batch
    to ~1e-12, and the float32 path must stay within ~1e-5 of float64 (tiny shapes)."""
    worst_pack = 0.0
    worst_f32 = 0.0
    W32 = {k: v.to(torch.float32) for k, v in W64.items()}
    off = 0
    with torch.no_grad():
        for x, t in zip(ids_list, types_list):
            h, _ = E.forward(cfg, W64, x[None], None, t[None], torch.float64)
            ref = packed64["last_hidden_state"][off:off + len(x)]
            worst_pack = max(worst_pack, (h[0] - ref).abs().max().item())
            off += len(x)
        ids, types, mask = pad_batch(cfg, ids_list, types_list)
        h32, _ = E.forward(cfg, W32, ids, mask, types, torch.float32)
        rows = torch.cat([h32[b, :len(x)] for b, x in enumerate(ids_list)]).double()
        worst_f32 = (rows - packed64["last_hidden_state"]).abs().max().item()
    return worst_pack, worst_f32


def summarize(case, t):
    h = t["last_hidden_state"]
    s = {
        "case": case, "n_seq": int(t["seq_lens"].numel()), "tokens": int(h.shape[0]),
        "lens": t["seq_lens"].tolist() if t["seq_lens"].numel() <= 40 else "...",
        "max_abs": round(h.abs().max().item(), 4), "std": round(h.std().item(), 4),
        # Spread over all tokens (mean over features of the per-feature std over tokens): ~0 means degenerate.
        "token_spread": round(h.std(0).mean().item(), 4) if h.shape[0] > 1 else None,
    }
    # Mean pairwise cosine between the tokens of a sequence: near 1 means the layers collapsed the tokens together.
    cos = []
    off = 0
    for n in t["seq_lens"].tolist():
        if n > 1:
            x = h[off:off + n]
            x = x / x.norm(dim=-1, keepdim=True)
            cos.append(((x @ x.T).sum().item() - n) / (n * n - n))
        off += n
    s["within_seq_cos"] = round(sum(cos) / len(cos), 3) if cos else None
    if "pooler_output" in t:
        p = t["pooler_output"]
        s["pooler_max_abs"] = round(p.abs().max().item(), 4)
        s["pooler_std"] = round(p.std().item(), 4) if p.numel() > 1 else None
    return s


def main(argv=None):
    global E
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=E.ARCHS + X.ARCHS)
    ap.add_argument("--shape", default="tiny", choices=("tiny", "small", "base", "custom"),
                    help="tiny: H64 L2 heads4 I128 V1024; base: the *-base model; small: electra-small / "
                         "deberta-v3-small; custom: tiny overridden by flags")
    ap.add_argument("--embedding-size", type=int, help="ELECTRA / DeBERTa: embedding_size")
    ap.add_argument("--type-vocab", type=int, help="ELECTRA / DeBERTa: type_vocab_size")
    ap.add_argument("--buckets", type=int, help="DeBERTa: position_buckets (default 256; <= 0 none)")
    ap.add_argument("--max-rel", type=int, default=-1, help="DeBERTa: max_relative_positions (< 1: max_pos)")
    ap.add_argument("--position-biased-input", type=int, choices=(0, 1), help="DeBERTa (default 0)")
    ap.add_argument("--no-share-att-key", action="store_true", help="DeBERTa: pos_key_proj / pos_query_proj")
    ap.add_argument("--pos-att-type", default="p2c,c2p", help="DeBERTa: comma list of c2p, p2c (or empty)")
    ap.add_argument("--no-norm-rel", action="store_true", help="DeBERTa: norm_rel_ebd none")
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--intermediate", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--max-pos", type=int, help="max_position_embeddings")
    ap.add_argument("--eps", type=float, help="layer_norm_eps (default 1e-12 BERT, 1e-5 RoBERTa; DistilBERT fixed)")
    ap.add_argument("--act", default="gelu", choices=E.ACTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="f32", choices=sorted(DT))
    ap.add_argument("--prefix", dest="prefix", action="store_true",
                    help="save keys as *ForSequenceClassification does (bert./roberta./distilbert.)")
    ap.add_argument("--no-prefix", dest="prefix", action="store_false", help="save keys as the bare model (default)")
    ap.set_defaults(prefix=False)
    ap.add_argument("--head", action="store_true",
                    help="add the classification-head tensors (classifier.*, pre_classifier.*) the encoder ignores")
    ap.add_argument("--no-pooler", action="store_true", help="omit pooler.dense (BERT/RoBERTa)")
    ap.add_argument("--position-ids-buffer", action="store_true",
                    help="also save the I64 embeddings.position_ids buffer older transformers versions saved")
    ap.add_argument("--shards", type=int, default=1, help="K > 1 writes model-0000i-of-0000K.safetensors + index")
    ap.add_argument("--cases", default="single,packed,pair",
                    help="comma list of cases (single, packed, pair), or a number N = all cases with N packed seqs")
    ap.add_argument("--check", action="store_true", help="run the oracle self-checks (packing, f32 vs f64)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    if a.arch in X.ARCHS:
        E = X
    d = E.shape_defaults(a.arch, "tiny" if a.shape == "custom" else a.shape)
    for k, v in (("hidden", a.hidden), ("layers", a.layers), ("heads", a.heads), ("inter", a.intermediate),
                 ("vocab", a.vocab), ("max_pos", a.max_pos)):
        if v is not None:
            d[k] = v
    if E is X:
        if a.embedding_size:
            d["emb"] = a.embedding_size
        if a.arch == "deberta-v2":
            d.update(max_rel=a.max_rel, share_att_key=not a.no_share_att_key, norm_rel=not a.no_norm_rel,
                     pos_att_type=tuple(p for p in a.pos_att_type.split(",") if p))
            if a.buckets is not None:
                d["buckets"] = a.buckets
            if a.position_biased_input is not None:
                d["pos_biased"] = bool(a.position_biased_input)
        if a.type_vocab is not None:
            d["type_vocab"] = a.type_vocab
    cfg = E.make_cfg(a.arch, act=a.act, eps=a.eps if a.arch != "distilbert" else None, **d)
    if a.arch == "distilbert" and (a.no_pooler or a.eps is not None):
        print("note: DistilBERT has no pooler and a fixed eps 1e-12", file=sys.stderr)
    if a.cases.isdigit():
        names, n_packed = ["single", "packed", "pair"], int(a.cases)
    else:
        names, n_packed = [c for c in a.cases.split(",") if c], None
        bad = set(names) - {"single", "packed", "pair", "long"}
        if bad:
            ap.error(f"unknown cases {sorted(bad)}")

    torch_dt, dt_name = DT[a.dtype]
    gen = torch.Generator().manual_seed(a.seed)
    pooler = a.arch in ("bert", "roberta", "xlm-roberta") and not a.no_pooler
    W = E.init_tensors(E.param_shapes(cfg, pooler=pooler), gen)
    W = {k: v.to(torch_dt) for k, v in W.items()}          # what gets saved
    W64 = {k: v.to(torch.float64) for k, v in W.items()}    # what the oracle computes with

    sd = dict(W)
    if a.position_ids_buffer:
        sd["embeddings.position_ids"] = torch.arange(cfg.max_pos, dtype=torch.int64)[None]
    if a.prefix:
        sd = {E.prefix_of(cfg.arch) + k: v for k, v in sd.items()}
    if a.head:
        sd.update({k: v.to(torch_dt) for k, v in E.init_tensors(E.head_shapes(cfg), gen).items()})

    os.makedirs(os.path.join(a.out, "expected"), exist_ok=True)
    for fn in os.listdir(a.out):   # a stale single file or shard set would confuse loaders
        if fn == "model.safetensors" or fn.startswith("model-") or fn == "model.safetensors.index.json":
            os.remove(os.path.join(a.out, fn))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        f.write(json.dumps(E.hf_config(cfg, dt_name, with_head=a.head), indent=2, sort_keys=True) + "\n")
    meta = {"format": "pt"}
    if a.shards > 1:
        st.save_sharded(sd, a.out, a.shards, meta)
    else:
        st.save_file(sd, os.path.join(a.out, "model.safetensors"), meta)

    # Round trip through our own reader so what the oracle used is what a loader will see.
    back = E.canonical_weights(cfg, st.load_dir(a.out))
    assert set(back) == set(W64), sorted(set(back) ^ set(W64))
    for k in back:
        assert torch.equal(back[k].to(torch.float64), W64[k]), k

    report = {"out": a.out, "arch": cfg.arch, "dtype": a.dtype, "act": cfg.act, "hidden": cfg.hidden,
              "layers": cfg.layers, "heads": cfg.heads, "intermediate": cfg.inter, "vocab": cfg.vocab,
              "max_pos": cfg.max_pos, "cases": []}
    for case, (ids_list, types_list) in build_cases(cfg, a.shape, a.seed, names, n_packed).items():
        t64 = run_case(cfg, W64, ids_list, types_list)
        s = summarize(case, t64)
        if a.check:
            s["packed_vs_alone_f64"], s["f32_vs_f64"] = self_check(cfg, W64, ids_list, types_list, t64)
        t = {k: (v.to(torch.float32) if v.is_floating_point() else v) for k, v in t64.items()}
        st.save_file(t, os.path.join(a.out, "expected", case + ".safetensors"),
                     {"arch": cfg.arch, "case": case, "reference": "float64 padded batch, rounded to f32",
                      "weights_dtype": a.dtype, "seed": str(a.seed)})
        report["cases"].append(s)
    cases = report.pop("cases")
    print(json.dumps(report))
    for s in cases:
        print("  " + json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
