"""PyTorch predictions of a saved task on texts: the peer of bench/quality's server numbers (training tooling).

    eval_task.py --model ENC --task-dir REGISTRY/tasks/NAME/1 --texts FILE --skips 0,1,2 > preds.json
    eval_task.py --model ENC --task-dir REGISTRY/tasks/entities/1 --words SENTS.json --skips 0 > tags.json

Reads the task as adapterd does from its task.json (adapter folders in Stack order, fusion, head) with
tools/reference/adapters.py's readers (`LoadedTask`), and runs its forward in float32 (the reference's float64
would take hours on a held-out split of thousands of rows on 2 cores); AdaMix folders are merged as check_task.py
merges them, and a fusion_pruning.json beside a fusion restricts it to the kept adapters.  Prints {"labels": [...], "skips": {"0": [label index per text], ...}}; with
--words (a tagging task; a JSON list of sentences, each a list of words, tokenized and aligned as
adapters_train.py's tagging rows are) {"labels": [...], "skips": {"0": [[tag of each word] per sentence], ...}}.
"""

import argparse
import json
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import adapters as A  # noqa: E402

A.F64 = torch.float32
import adapters_train  # noqa: E402
import check_task  # noqa: E402
import wordpiece  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task-dir", required=True)
    ap.add_argument("--texts", help="one text a line")
    ap.add_argument("--words", help="tagging: JSON list of sentences as lists of words")
    ap.add_argument("--skips", default="0")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    cfg, W = adapters_train.load_encoder(args.model)
    tok = wordpiece.WordPiece.from_dir(args.model)
    with open(os.path.join(args.task_dir, "task.json")) as f:
        tj = json.load(f)
    if args.words:
        with open(args.words, encoding="utf-8") as f:
            rows = adapters_train.tag_rows([(w, None) for w in json.load(f)], tok, min(args.max_len, cfg.max_pos))
    else:
        with open(args.texts, encoding="utf-8") as f:
            texts = [ln.rstrip("\n") for ln in f]
        rows = [(tok.encode_single(t, min(args.max_len, cfg.max_pos)), 0) for t in texts]
    out = {"skips": {}}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [check_task.merged_adamix(os.path.join(args.task_dir, a), tmp) for a in tj["adapters"]]
        fusion = os.path.join(args.task_dir, tj["fusion"]) if tj.get("fusion") else None
        head = None
        if tj.get("head") and (fusion or tj["head"] not in tj["adapters"]):
            head = os.path.join(args.task_dir, tj["head"])
        task = A.LoadedTask(cfg, dirs, fusion, head)
        pruning = os.path.join(fusion, "fusion_pruning.json") if fusion else None
        if pruning and os.path.exists(pruning):
            # as adapterd applies fusion_pruning.json: the fusion attends over the kept adapters only
            with open(pruning) as f:
                keep = set(json.load(f)["keep"])
            fu = task.fusion
            fu.adapters = [a for a in fu.adapters if a.name in keep]
            fu.names = [a.name for a in fu.adapters]
        out["labels"] = tj.get("labels") or task.labels

        class Runner:
            def logits(self, ids, mask, skip, train):
                h, pooled = A.forward(cfg, W, ids, mask, torch.zeros_like(ids), task.setup(skip))
                return task.head.forward(h, pooled)

        for s in [int(x) for x in args.skips.split(",")]:
            pred = adapters_train.evaluate(Runner(), rows, s)
            if args.words:
                pred = [adapters_train.word_tags(r, p, out["labels"]) for r, p in zip(rows, pred)]
            out["skips"][str(s)] = pred
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
