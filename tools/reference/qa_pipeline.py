#!/usr/bin/python3
"""Reference of Hugging Face's question-answering pipeline around a model: its windows over a long context and its
post-processing of the start and end logits, restated from the pipeline's documented algorithm (no `transformers`
package here). The C side (engine/task/answer.c eng_qa_answers, engine/tokenizer/windows.c, server/predict.c and
server/answer.c) is checked against it by tests/engine/task/test_answer.c (generated logits) and
tests/server/test_long.c (the fixture registry's QA task, model included).

    qa_pipeline.py --cases --seed 7 --n 40      # generated windows and logits with the expected answers (JSON)
    qa_pipeline.py --model M --task T < reqs.json  # the pipeline over tokenized inputs, the model run in float64

Windows (the tokenizers library's overflowing tokens with a stride, truncation "only_second"): the question,
cut to max_question_len tokens, and the special tokens are in every window; the context's n tokens are cut into
windows of room = max_seq_len - specials - question tokens, window k starting at k * (room - doc_stride), the
last one the first that reaches n. (The pipeline's fast-tokenizer path leaves the question whole; its documented
max_question_len cuts it. adapterd cuts it.)

Post-processing of one window (the pipeline's select_starts_ends and decode_spans):
  - p_mask: 1 for every token that is not context, 0 for context tokens and for tokens whose id is [CLS];
  - start and end logits of masked tokens become -10000; softmax over the window's tokens;
  - the window's no-answer score is p_start[0] * p_end[0]; then p_start[0] = p_end[0] = 0;
  - candidates: the outer product p_start[s] * p_end[e], kept for s <= e <= s + max_answer_len - 1 (np.triu,
    np.tril), both ends allowed tokens; the top_k by score.
Over windows: every window's answers in window order, the no-answer (the smallest no-answer score over the windows)
appended when handle_impossible_answer, sorted by score (stable, descending), the first top_k. An answer's
characters: the words its first and last tokens belong to (token_to_word, word_to_chars within the window), or the
tokens' own offsets when align_to_words is off. Spans that start at [CLS] (score 0) are left out, as adapterd does
(they can appear in the pipeline's list only when top_k exceeds every span of the context).
"""
import argparse
import json
import os
import random
import sys

import torch

MASKED = -10000.0


def window_starts(n, room, stride):
    """The tokenizers library's overflow loop: starts of the windows over n tokens."""
    if n <= room:
        return [0]
    if not 0 <= stride < room:
        raise ValueError(f"doc_stride {stride} must be below the room of {room} tokens")
    starts, step = [], room - stride
    for start in range(0, n, step):
        starts.append(start)
        if min(start + room, n) == n:
            break
    return starts


def make_windows(full, max_seq_len, doc_stride, max_question_len):
    """full: {"ids", "type_ids", "seq_ids", "offsets", "word_starts"} of [CLS] question [SEP] context [SEP].
    Returns the windows as lists of token indexes into full."""
    seq = full["seq_ids"]
    q = [i for i, s in enumerate(seq) if s == 0]
    c = [i for i, s in enumerate(seq) if s == 1]
    special = [i for i, s in enumerate(seq) if s < 0]
    qkeep = q[:max_question_len]
    room = max_seq_len - len(special) - len(qkeep)
    if len(c) <= room and len(qkeep) == len(q):
        return [list(range(len(seq)))]
    out = []
    for st in window_starts(len(c), room, doc_stride):
        keep = set(special) | set(qkeep) | set(c[st:st + room])
        out.append(sorted(keep))
    return out


def window_answers(start, end, allowed, top_k, max_answer_len):
    """start, end: float32 [n] logits; allowed: bool [n] (context or [CLS]). Returns (answers, null) where answers
    are (s, e, score) best first."""
    s = torch.where(allowed, start, torch.tensor(MASKED, dtype=start.dtype))
    e = torch.where(allowed, end, torch.tensor(MASKED, dtype=end.dtype))
    ps = torch.softmax(s.double(), 0)
    pe = torch.softmax(e.double(), 0)
    null = float(ps[0] * pe[0])
    ps[0] = 0.0
    pe[0] = 0.0
    outer = ps[:, None] * pe[None, :]
    cand = torch.tril(torch.triu(outer), max_answer_len - 1)
    n = len(start)
    ok = allowed[:, None] & allowed[None, :]
    idx = torch.arange(n)
    ok &= idx[:, None] >= 1  # no span from [CLS]
    ok &= idx[None, :] >= idx[:, None]
    ok &= idx[None, :] <= idx[:, None] + max_answer_len - 1
    flat = [(float(cand[a, b]), a, b) for a in range(n) for b in range(n) if bool(ok[a, b])]
    # descending score; equal scores keep (start, end) order
    flat.sort(key=lambda t: -t[0])
    return [(a, b, sc) for sc, a, b in flat[:top_k]], null


def answers(wins, logits, cls_id, top_k=1, max_answer_len=15, handle_impossible=False):
    """wins: per window {"ids", "seq_ids"}; logits: per window float32 [n, 2]. Returns [(window, s, e, score)]."""
    out, min_null = [], 1e6
    for w, (win, lg) in enumerate(zip(wins, logits)):
        seq = torch.tensor(win["seq_ids"])
        ids = torch.tensor(win["ids"])
        allowed = (seq == 1) | (ids == cls_id)
        got, null = window_answers(lg[:, 0], lg[:, 1], allowed, top_k, max_answer_len)
        min_null = min(min_null, null)
        out += [(w, a, b, sc) for a, b, sc in got]
    if handle_impossible:
        out.append((-1, 0, 0, min_null))
    out.sort(key=lambda t: -t[3])  # stable: window order on equal scores
    return out[:top_k]


def chars(win, a, b, align):
    """Character span of tokens a..b of a window: widened to the words they are in (as far as the window holds
    them) when align."""
    if align:
        ws, seq = win["word_starts"], win["seq_ids"]
        while a > 0 and not ws[a] and seq[a - 1] == seq[a]:
            a -= 1
        while b + 1 < len(seq) and not ws[b + 1] and seq[b + 1] == seq[b]:
            b += 1
    return win["offsets"][2 * a], win["offsets"][2 * b + 1]


def slice_window(full, keep):
    w = {k: [full[k][i] for i in keep] for k in ("ids", "type_ids", "seq_ids", "word_starts")}
    w["offsets"] = [v for i in keep for v in full["offsets"][2 * i:2 * i + 2]]
    # a window's first context token starts a word of that window (word_to_chars sees this window only)
    first = next((j for j, s in enumerate(w["seq_ids"]) if s == 1), None)
    if first is not None:
        w["word_starts"][first] = 1
    return w


def run_model(cfg, W, task, wins, skip):
    import gen_adapters as GA
    ids = [torch.tensor(w["ids"], dtype=torch.int64) for w in wins]
    types = [torch.tensor(w["type_ids"], dtype=torch.int64) for w in wins]
    _, lg, _ = GA.run(cfg, W, task, skip, ids, types)
    lg = lg.to(torch.float32)
    out, at = [], 0
    for w in wins:
        out.append(lg[at:at + len(w["ids"])])
        at += len(w["ids"])
    return out


def serve_requests(a):
    """stdin: a list of {"full": encoding, "context": str, "cls_id", "params": {...}}; stdout: a list of
    {"windows", "answers"}, one per request (the model loaded once)."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import adapters as A
    cfg, W = A.load_backbone(a.model)
    task = A.LoadedTask(cfg, [a.task])
    print(json.dumps([serve_request(req, cfg, W, task) for req in json.load(sys.stdin)]))


def serve_request(req, cfg, W, task):
    p = req["params"]
    full = req["full"]
    keeps = make_windows(full, p["max_seq_len"], p["doc_stride"], p["max_question_len"])
    wins = [slice_window(full, k) for k in keeps]
    logits = run_model(cfg, W, task, wins, p.get("skip", 0))
    got = answers(wins, logits, req["cls_id"], p["top_k"], p["max_answer_len"], p["handle_impossible_answer"])
    res = []
    for w, s, e, sc in got:
        if w < 0:
            res.append({"start": 0, "end": 0, "score": sc, "text": ""})
            continue
        c0, c1 = chars(wins[w], s, e, p.get("align_to_words", True))
        res.append({"start": c0, "end": c1, "score": sc, "text": req["context"][c0:c1]})
    return {"windows": len(wins), "answers": res}


def gen_cases(a):
    """Generated windows: a question of q tokens, a context of n tokens, the windows as above, random logits per
    window; the expected (window, start, end, score) of each parameter set."""
    rng = random.Random(a.seed)
    g = torch.Generator().manual_seed(a.seed)
    cases = []
    for c in range(a.n):
        msl = rng.choice([16, 24, 40, 64])
        stride = rng.randint(0, msl // 2 - 1)
        mql = rng.choice([2, 4, 8, 64])
        q = rng.randint(0, 10)
        qkeep = min(q, mql)
        room = msl - 3 - qkeep
        if room <= stride:
            continue
        step = room - stride
        k = rng.randint(1, 10)  # windows
        n = room if k == 1 else room + (k - 1) * step - rng.randint(0, step - 1)
        # the boundaries: an empty context, exactly one window, one token over
        n = {0: 0, 1: room, 2: room + 1}.get(c % 9, n)
        ids = [101] + [1000 + i for i in range(q)] + [102] + [2000 + i for i in range(n)] + [102]
        seq = [-1] + [0] * q + [-1] + [1] * n + [-1]
        full = {"ids": ids, "type_ids": [0] * len(ids), "seq_ids": seq, "offsets": [0] * (2 * len(ids)),
                "word_starts": [1] * len(ids)}
        keeps = make_windows(full, msl, stride, mql)
        wins = [slice_window(full, k) for k in keeps]
        scale = rng.choice([0.5, 2.0, 6.0])
        logits = [(torch.randn(len(w["ids"]), 2, generator=g) * scale).float() for w in wins]
        if c % 5 == 0:  # [CLS] strong: the no-answer wins when asked
            for lg in logits:
                lg[0] += 8.0
        params = {"top_k": rng.choice([1, 1, 3, 7]), "max_answer_len": rng.choice([1, 3, 15, 30]),
                  "handle_impossible_answer": rng.random() < 0.4}
        got = answers(wins, logits, 101, params["top_k"], params["max_answer_len"], params["handle_impossible_answer"])
        cases.append({"q": q, "n": n, "max_seq_len": msl, "doc_stride": stride, "max_question_len": mql,
                      "windows": [{"start": next((i - q - 2 for i in k if seq[i] == 1), 0), "ids": w["ids"], "seq_ids": w["seq_ids"],
                                   "logits": lg.flatten().tolist()} for k, w, lg in zip(keeps, wins, logits)],
                      "params": params,
                      "expected": [{"window": w, "start": s, "end": e, "score": sc} for w, s, e, sc in got]})
    print(json.dumps({"seed": a.seed, "cases": cases}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", action="store_true", help="generated cases (see gen_cases)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--model", help="model directory (config.json + weights)")
    ap.add_argument("--task", help="the QA task's folder (AdapterHub adapter + head)")
    a = ap.parse_args()
    if a.cases:
        gen_cases(a)
    else:
        serve_requests(a)


if __name__ == "__main__":
    main()
