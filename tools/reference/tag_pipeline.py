#!/usr/bin/python3
"""Reference of Hugging Face's token-classification pipeline over a long text with `stride`, restated from its
documented algorithm (no `transformers` package here). The C side (server/predict.c's windows, server/answer.c and
engine/task/answer.c's eng_tag_merge_windows) is checked against it by tests/server/test_long.c.

    tag_pipeline.py --model M --task T < reqs.json   # stdin: a list of requests; stdout: a list of entity lists

A request: {"full": {"ids", "type_ids", "seq_ids", "offsets", "special", "subword"} (the text's untruncated
encoding, this build's tokenizer and subword flags), "text", "params": {"max_len", "stride", "aggregation"}}.
With "subword_rule": "fallback" the reference decides the subwords itself, as the pipeline does for a tokenizer
without a continuing-subword prefix (byte-level BPE, SentencePiece): a token continues a word when it does not start
the text and neither the character before it nor its first character is a space (`" " not in
sentence[start - 1:start + 1]`), from the token's offsets; "subword" is then not read.

Windows: the tokenizers library's overflowing tokens with a stride over the text's tokens, each window max_len
tokens with its special tokens, consecutive windows sharing `stride` tokens (qa_pipeline.window_starts). Each
window: the model's logits, softmax per token, the aggregation ("simple" or "first": heads.tag_entities, the
pipeline's rules restated), entities labelled "O" dropped, offsets in characters of the text. Over windows (when
there are several): sorted by start (stable), and walking them, an entity starting inside the one kept before
replaces it when longer, or as long with a higher score, else is dropped (aggregate_overlapping_entities).
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import heads as HD  # noqa: E402
import qa_pipeline as QP  # noqa: E402


def merge_overlapping(ents):
    if not ents:
        return ents
    ents = sorted(ents, key=lambda x: x["start"])
    out, prev = [], ents[0]
    for e in ents:
        if prev["start"] <= e["start"] < prev["end"]:
            cur, was = e["end"] - e["start"], prev["end"] - prev["start"]
            if cur > was or (cur == was and e["score"] > prev["score"]):
                prev = e
        else:
            out.append(prev)
            prev = e
    out.append(prev)
    return out


def fallback_subwords(full, text):
    out = []
    for i, s in enumerate(full["seq_ids"]):
        st = full["offsets"][2 * i]
        out.append(int(s >= 0 and not full["special"][i] and st > 0 and " " not in text[st - 1:st + 1]))
    return out


def one(req, cfg, W, task):
    full, p, text = req["full"], req["params"], req["text"]
    if req.get("subword_rule") == "fallback":
        full = dict(full, subword=fallback_subwords(full, text))
    seq = full["seq_ids"]
    toks = [i for i, s in enumerate(seq) if s == 0]
    special = [i for i, s in enumerate(seq) if s < 0]
    room = p["max_len"] - len(special)
    starts = QP.window_starts(len(toks), room, p["stride"])
    wins = []
    for st in starts:
        keep = sorted(set(special) | set(toks[st:st + room]))
        w = {k: [full[k][i] for i in keep] for k in ("ids", "type_ids", "seq_ids", "special", "subword")}
        w["offsets"] = [v for i in keep for v in full["offsets"][2 * i:2 * i + 2]]
        wins.append(w)
    logits = QP.run_model(cfg, W, task, wins, p.get("skip", 0))
    ents = []
    for w, lg in zip(wins, logits):
        probs = torch.softmax(lg.double(), 1).float()
        for e in HD.tag_entities(probs, w["special"], w["subword"], w["seq_ids"], task.labels, p["aggregation"]):
            s0, s1 = w["offsets"][2 * e["first"]], w["offsets"][2 * e["last"] + 1]
            ents.append({"name": e["name"], "score": e["score"], "start": s0, "end": s1, "word": text[s0:s1]})
    if len(wins) > 1:
        ents = merge_overlapping(ents)
    return {"windows": len(wins), "entities": ents}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True)
    a = ap.parse_args()
    import adapters as A
    cfg, W = A.load_backbone(a.model)
    task = A.LoadedTask(cfg, [a.task])
    print(json.dumps([one(r, cfg, W, task) for r in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
