#!/usr/bin/python3
"""Reference for turning head outputs into answers: the extractive-QA span search and the entity grouping of
token tagging, on generated logits. The C side (engine/task/answer.c) is checked against it by
tests/engine/task/test_answer.c.

    heads.py --seed 7 --qa 40 --tagging 40        # prints one JSON document: {"qa": [...], "tagging": [...]}

QA: written as a tensor computation rather than a search, so it shares no structure with the C loop. Softmax of
the start logits and of the end logits, each over the context tokens only (seq id 1), the outer product
P[s, e] = p_start[s] * p_end[e], masked to s <= e < s + max_len with every token of s..e in the context, and the
argmax of the flattened matrix (row-major: on equal scores the earliest start, then the earliest end), in float64.

Tagging: the aggregation strategies of Hugging Face's token-classification pipeline ("none", "simple", "first"),
restated from its documented behaviour: special tokens dropped; "first" merges a token flagged as a subword into the
word before it, the word taking its first token's argmax label and that probability; "simple"/"first" then group
neighbours whose tag (label without a "B-"/"I-" prefix) is the same and which are not a "B-", the group named after
its first member's label with the text up to the first "-" removed, its score the mean of the members' scores;
entities labelled / named "O" are dropped. One difference from the pipeline, shared with the C side on purpose:
words and groups never cross from the text (seq 0) into the text_pair (seq 1).

Generated cases carry the float32 inputs the C test feeds its functions, and the expected results.
"""
import argparse
import json
import random

import torch

LABEL_SETS = [
    ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "MISC"],
    ["O", "B-ORG", "I-ORG"],
    ["PER", "LOC", "O"],
    ["B-X", "I-X", "E-X", "S-Y", "O"],
]


def qa_span(start, end, seq, max_len):
    """start, end: float32 tensors [n]; seq: list of seq ids. Returns (s, e, score) or None."""
    n = len(seq)
    ctx = torch.tensor([x == 1 for x in seq])
    if not bool(ctx.any()):
        return None
    s64, e64 = start.double(), end.double()
    neg = torch.tensor(float("-inf"), dtype=torch.float64)
    ps = torch.softmax(torch.where(ctx, s64, neg), 0)
    pe = torch.softmax(torch.where(ctx, e64, neg), 0)
    P = ps[:, None] * pe[None, :]
    i = torch.arange(n)
    band = (i[None, :] >= i[:, None]) & (i[None, :] < i[:, None] + max_len)
    # every token from s to e is context: the count of non-context tokens up to e equals the one before s
    outside = torch.cumsum((~ctx).long(), 0)
    before = torch.cat([torch.zeros(1, dtype=torch.long), outside[:-1]])
    inside = (outside[None, :] == before[:, None]) & ctx[:, None] & ctx[None, :]
    P = torch.where(band & inside, P, torch.full_like(P, -1.0))
    k = int(torch.argmax(P.flatten()))  # first maximum in row-major order
    return k // n, k % n, float(P.flatten()[k])


def get_tag(label):
    if label.startswith("B-"):
        return "B", label[2:]
    if label.startswith("I-"):
        return "I", label[2:]
    return "I", label


def nanmean(xs):
    v = [x for x in xs if x == x]
    return sum(v) / len(v) if v else float("nan")


def tag_entities(probs, special, subword, seq, labels, agg):
    """probs: float32 tensor [n, k]. Returns [{"label", "score", "first", "last", "seq"}, ...]."""
    pre = []
    for i in range(probs.shape[0]):
        if special[i]:
            continue
        p = probs[i].double()
        lb = int(torch.argmax(p))
        pre.append({"label": lb, "score": float(p[lb]), "first": i, "last": i, "seq": max(seq[i], 0),
                    "is_subword": bool(subword[i])})
    if agg == "first":
        words = []
        for e in pre:
            if words and e["is_subword"] and words[-1][-1]["seq"] == e["seq"]:
                words[-1].append(e)
            else:
                words.append([e])
        ents = [{"label": w[0]["label"], "score": w[0]["score"], "first": w[0]["first"], "last": w[-1]["last"],
                 "seq": w[0]["seq"]} for w in words]
    else:
        ents = [{k: e[k] for k in ("label", "score", "first", "last", "seq")} for e in pre]
    if agg == "none":
        return [e for e in ents if labels[e["label"]] != "O"]
    groups, cur = [], []
    for e in ents:
        if cur:
            bi, tag = get_tag(labels[e["label"]])
            _, last_tag = get_tag(labels[cur[-1]["label"]])
            if tag == last_tag and bi != "B" and e["seq"] == cur[-1]["seq"]:
                cur.append(e)
                continue
            groups.append(cur)
        cur = [e]
    if cur:
        groups.append(cur)
    out = []
    for g in groups:
        name = labels[g[0]["label"]].split("-", 1)[-1]
        if name == "O":
            continue
        out.append({"label": g[0]["label"], "name": name, "score": nanmean([m["score"] for m in g]),
                    "first": g[0]["first"], "last": g[-1]["last"], "seq": g[0]["seq"]})
    return out


def layout(rng):
    """seq ids of [CLS] A [SEP] B [SEP] (B may be empty or absent)."""
    a = rng.randint(0, 25)
    b = rng.choice([None, 0, rng.randint(1, 40)])
    seq = [-1] + [0] * a + [-1]
    if b is not None:
        seq += [1] * b + [-1]
    return seq


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--qa", type=int, default=40)
    ap.add_argument("--tagging", type=int, default=40)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    g = torch.Generator().manual_seed(a.seed)
    qa = []
    for _ in range(a.qa):
        seq = layout(rng)
        n = len(seq)
        logits = (torch.randn(n, 2, generator=g) * rng.choice([0.5, 2.0, 6.0])).float()
        max_len = rng.choice([1, 2, 5, 30])
        r = qa_span(logits[:, 0], logits[:, 1], seq, max_len)
        qa.append({"seq_ids": seq, "logits": logits.flatten().tolist(), "max_len": max_len,
                   "expected": None if r is None else {"start": r[0], "end": r[1], "score": r[2]}})
    tagging = []
    for c in range(a.tagging):
        seq = layout(rng)
        n = len(seq)
        labels = LABEL_SETS[c % len(LABEL_SETS)]
        # peaked logits so runs of one tag form; sometimes flat ones
        logits = torch.randn(n, len(labels), generator=g) * rng.choice([1.0, 4.0])
        for i in range(1, n):
            if rng.random() < 0.5:
                logits[i] = logits[i - 1] + 0.3 * torch.randn(len(labels), generator=g)
        probs = torch.softmax(logits, 1).float()
        special = [1 if s < 0 else 0 for s in seq]
        subword = [0 if s < 0 else int(rng.random() < 0.4) for s in seq]
        case = {"labels": labels, "seq_ids": seq, "special": special, "subword": subword,
                "probs": probs.flatten().tolist(), "expected": {}}
        for agg in ("none", "simple", "first"):
            case["expected"][agg] = tag_entities(probs, special, subword, seq, labels, agg)
        tagging.append(case)
    print(json.dumps({"seed": a.seed, "qa": qa, "tagging": tagging}))


if __name__ == "__main__":
    main()
