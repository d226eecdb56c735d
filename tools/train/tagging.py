"""Entity-level scoring of BIO tag sequences, as seqeval scores them by default (training and bench tooling; the
standard library only, so that bench/quality's server side needs nothing else).

seqeval's default mode follows conlleval: a chunk starts at B-X, or at I-X when the previous tag is O or of another
type (a stray I- opens a chunk); it ends before O, before B-, and before a tag of another type.  Precision, recall
and F1 are micro averages over exact (sentence, type, start, end) matches; the macro figure is the mean of the
per-type F1s, as seqeval's classification_report prints them.
"""


def chunks(tags):
    """Entities (type, start, end) of one BIO tag sequence (end inclusive, as seqeval's get_entities)."""
    out = []
    start, typ = None, None
    for i, t in enumerate(list(tags) + ["O"]):
        tag, _, ty = t.partition("-")
        if start is not None and (tag in ("B", "O") or ty != typ):
            out.append((typ, start, i - 1))
            start = None
        if tag == "B" or (tag == "I" and start is None):
            start, typ = i, ty
    return out


def _prf(pred, gold, hit):
    pre = len(hit) / len(pred) if pred else 0.0
    rec = len(hit) / len(gold) if gold else 0.0
    return pre, rec, (2 * pre * rec / (pre + rec) if pre + rec else 0.0)


def entity_metrics(pred_tags, gold_tags):
    """{entity_f1, entity_precision, entity_recall, entities_pred, entities_gold, macro_f1, per_type_f1, accuracy}
    of sentences of predicted vs gold tags (accuracy: the word-level tag accuracy)."""
    pred, gold = set(), set()
    for k, (p, g) in enumerate(zip(pred_tags, gold_tags)):
        pred |= {(k,) + c for c in chunks(p)}
        gold |= {(k,) + c for c in chunks(g)}
    ok = pred & gold
    pre, rec, f1 = _prf(pred, gold, ok)
    per = {}
    for t in sorted({c[1] for c in gold}):
        per[t] = _prf({c for c in pred if c[1] == t}, {c for c in gold if c[1] == t}, {c for c in ok if c[1] == t})[2]
    words = sum(len(g) for g in gold_tags)
    acc = sum(a == b for p, g in zip(pred_tags, gold_tags) for a, b in zip(p, g)) / max(1, words)
    return {"entity_f1": f1, "entity_precision": pre, "entity_recall": rec, "entities_gold": len(gold),
            "entities_pred": len(pred), "macro_f1": sum(per.values()) / max(1, len(per)), "per_type_f1": per,
            "accuracy": acc}


def _self_test():
    """Cases worked out by hand from conlleval's rules (run: python3 tagging.py)."""
    assert chunks("B-person I-person O I-location I-location B-location I-person O".split()) == \
        [("person", 0, 1), ("location", 3, 4), ("location", 5, 5), ("person", 6, 6)]
    assert chunks("I-a I-b B-b I-b O".split()) == [("a", 0, 0), ("b", 1, 1), ("b", 2, 3)]
    assert chunks(["O", "O"]) == [] and chunks(["B-x"]) == [("x", 0, 0)]
    m = entity_metrics([["B-person", "I-person", "O"], ["B-location", "O"]],
                       [["B-person", "I-person", "O"], ["O", "B-location"]])
    assert (m["entity_precision"], m["entity_recall"], m["entity_f1"]) == (0.5, 0.5, 0.5)
    assert m["per_type_f1"] == {"location": 0.0, "person": 1.0} and abs(m["accuracy"] - 0.6) < 1e-12
    # a prediction that splits one gold entity in two scores neither half
    m = entity_metrics([["B-x", "B-x"]], [["B-x", "I-x"]])
    assert (m["entities_pred"], m["entities_gold"], m["entity_f1"]) == (2, 1, 0.0)
    print("tagging.py: self-test ok")


if __name__ == "__main__":
    _self_test()
