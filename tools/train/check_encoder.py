"""Check an exported encoder against adapterd: same token ids, same hidden states (training tooling).

For each text, tokenizes with the project's Python WordPiece and runs tools/reference/encoder.py's forward in
float64 on the stored (F16) weights upcast, then runs `adapterd encode --model DIR --text T` and compares:
ids must be identical; last_hidden_state and pooler_output within --atol (default 2e-3: adapterd computes in float32
with its own kernels over 6 layers whose LayerNorms renormalise, measured differences are ~1e-4).
Exit status 0 when every text agrees, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import encoder as ref  # noqa: E402
import st  # noqa: E402
import wordpiece  # noqa: E402

TEXTS = [
    "adapterd serves many tasks.",
    "the match was great",
    "How far is it from Denver to Aspen ?",
    "Stocks fell sharply on Tuesday after the Federal Reserve raised rates; Café-owners weren't happy!",
    "i feel so hopeless and tired today",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapterd", required=True)
    ap.add_argument("--atol", type=float, default=2e-3)
    ap.add_argument("--text", action="append")
    ap.add_argument("--data", help="also compare token ids on --n lines of Wikipedia and task training text")
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = ref.cfg_from_hf(json.load(f))
    W = {k: v.to(torch.float64) for k, v in ref.canonical_weights(cfg, st.load_dir(args.model)).items()}
    wp = wordpiece.WordPiece.from_dir(args.model)
    ok = True
    for t in args.text or TEXTS:
        ids = wp.encode_single(t, cfg.max_pos)
        h, pooled = ref.forward(cfg, W, torch.tensor([ids]), dtype=torch.float64)
        r = subprocess.run([args.adapterd, "encode", "--model", args.model, "--text", t, "--threads", "1"],
                           capture_output=True, text=True, check=True)
        got = json.loads(r.stdout)
        if got["ids"] != ids:
            print(f"FAIL ids differ for {t!r}: adapterd {got['ids']} python {ids}")
            ok = False
            continue
        dh = (torch.tensor(got["last_hidden_state"], dtype=torch.float64) - h[0]).abs().max().item()
        dp = (torch.tensor(got["pooler_output"], dtype=torch.float64) - pooled[0]).abs().max().item()
        good = dh <= args.atol and dp <= args.atol
        ok = ok and good
        print(f"{'ok  ' if good else 'FAIL'} {len(ids)} tokens, max|dh| {dh:.2e}, max|dpool| {dp:.2e}: {t!r}")
    if args.data:
        ok = tokenizer_agrees(args, wp) and ok
    sys.exit(0 if ok else 1)


def tokenizer_agrees(args, wp):
    """adapterd tokenize vs wordpiece.py on lines of the training text (ids must be identical; adapterd may cut at
    the model's position limit, so its ids must then be a prefix of ours)."""
    import data
    texts = []
    per = max(1, args.n // 4)
    for d in list(data.wiki_docs(args.data, per * 10))[::10]:
        texts += d[:2]
    for task in data.TASKS:
        texts += [t for t, _ in data.read_tsv(data.ds(args.data, data.TASKS[task][0]), per // 2)]
    bad = 0
    for t in texts:
        r = subprocess.run([args.adapterd, "tokenize", "--model", args.model, "--text", t], capture_output=True,
                           text=True, check=True)
        got = json.loads(r.stdout)["ids"]
        want = [wordpiece.CLS] + wp.encode(t) + [wordpiece.SEP]
        same = got == want or (len(got) < len(want) and got[:-1] == want[:len(got) - 1])
        if not same:
            bad += 1
            if bad <= 3:
                print(f"FAIL tokenizer differs on {t[:80]!r}: adapterd {got[:12]}.. python {want[:12]}..")
    print(f"{'ok  ' if not bad else 'FAIL'} tokenizer: {len(texts) - bad}/{len(texts)} texts give identical ids")
    return bad == 0


if __name__ == "__main__":
    main()
