"""Where the training text lives and how it is read (training-time tooling, never part of the product).

All text is read at run time from the shared data directory (`--data`, default `../shared/data` beside the
checkout, or $ADAPTERD_DATA_DIR); nothing from it is copied into the repository.  Only TRAIN splits feed the
vocabulary, the pretraining corpus and the adapters; the held-out splits named here are for evaluation only.

`prep` (run as `data.py prep`) learns the WordPiece vocabulary, writes it as Hugging Face files, and turns the
pretraining text into fixed 128-token blocks `[CLS] t1 .. t126 [SEP]` (documents and task sentences concatenated with
[SEP] between them, as RoBERTa's FULL-SENTENCES packing does), shuffled with the seed, stored as int16 numpy arrays
in the work directory with a few held-out Wikipedia blocks for the validation loss.
"""

import argparse
import collections
import glob
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wordpiece  # noqa: E402

# name: (train file, eval file, labels in id order); eval files are never read for training.
TASKS = {
    "sst2": ("sst2/train.tsv", "sst2/dev.tsv", ["negative", "positive"]),
    "agnews": ("ag_news/train.tsv", "ag_news/test.tsv", ["World", "Sports", "Business", "Sci/Tech"]),
    "trec": ("trec/train.tsv", "trec/test.tsv", ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]),
    "emotion": ("emotion/train.tsv", "emotion/validation.tsv", ["sadness", "joy", "love", "anger", "fear",
                                                                "surprise"]),
}
WNUT_TRAIN = "wnut17/wnut17train.conll"
WNUT_DEV = "wnut17/emerging.dev.conll"
WNUT_TEST = "wnut17/emerging.test.annotated"
# WNUT-17 BIO tags in id order: O, then B-/I- of the six entity types (alphabetical)
WNUT_TYPES = ["corporation", "creative-work", "group", "location", "person", "product"]
WNUT_LABELS = ["O"] + [f"{p}-{t}" for t in WNUT_TYPES for p in ("B", "I")]


def default_data_dir():
    d = os.environ.get("ADAPTERD_DATA_DIR")
    if d:
        return d
    return os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "data"))


def default_work_dir():
    d = os.environ.get("ADAPTERD_TRAIN_DIR")
    if d:
        return d
    return os.path.normpath(os.path.join(HERE, "..", "..", "..", "train-cache"))


def ds(data_dir, rel):
    return os.path.join(data_dir, "datasets", rel)


def read_tsv(path, limit=None):
    """[(text, label)] from a header `text<TAB>label` file; split on the tab (the files are not CSV-quoted)."""
    out = []
    with open(path, encoding="utf-8") as f:
        next(f)
        for ln in f:
            ln = ln.rstrip("\n")
            if not ln:
                continue
            t, lab = ln.rsplit("\t", 1)
            out.append((t, lab))
            if limit and len(out) >= limit:
                break
    return out


def read_conll(path, limit=None):
    """[(tokens, tags)] sentences of a CoNLL file (token TAB tag, blank line between sentences)."""
    out, toks, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for ln in f:
            ln = ln.rstrip("\n")
            if not ln.strip():
                if toks:
                    out.append((toks, tags))
                    toks, tags = [], []
                    if limit and len(out) >= limit:
                        return out
                continue
            parts = ln.split("\t")
            toks.append(parts[0])
            tags.append(parts[-1])
    if toks:
        out.append((toks, tags))
    return out


def wiki_docs(data_dir, max_docs=None):
    """Wikipedia articles as lists of lines (title, then paragraphs)."""
    n = 0
    for path in sorted(glob.glob(ds(data_dir, "wiki_en_unlabelled/*.txt"))):
        doc = []
        with open(path, encoding="utf-8") as f:
            for ln in f:
                ln = ln.strip()
                if not ln:
                    if doc:
                        yield doc
                        n += 1
                        doc = []
                        if max_docs and n >= max_docs:
                            return
                    continue
                doc.append(ln)
        if doc:
            yield doc
            n += 1
            if max_docs and n >= max_docs:
                return


def task_train_texts(data_dir, limit=None):
    """Training sentences of every task (TRAIN splits only), one list per source."""
    out = {}
    for name, (tr, _, _) in TASKS.items():
        out[name] = [t for t, _ in read_tsv(ds(data_dir, tr), limit)]
    out["wnut17"] = [" ".join(toks) for toks, _ in read_conll(ds(data_dir, WNUT_TRAIN), limit)]
    return out


def prep(args):
    t0 = time.time()
    os.makedirs(args.work, exist_ok=True)
    tok_dir = os.path.join(args.work, "tokenizer")
    max_docs = args.max_docs
    limit = args.task_rows
    docs = list(wiki_docs(args.data, max_docs))
    tasks = task_train_texts(args.data, limit)
    print(f"prep: {len(docs)} articles, task sentences " +
          ", ".join(f"{k} {len(v)}" for k, v in tasks.items()), flush=True)
    if os.path.exists(os.path.join(tok_dir, "vocab.txt")) and not args.relearn:
        print(f"prep: reusing {tok_dir}", flush=True)
    else:
        counts = collections.Counter()
        for d in docs:
            for ln in d:
                counts.update(wordpiece.pre_tokenize(ln))
        for v in tasks.values():
            for t in v:
                counts.update(wordpiece.pre_tokenize(t))
        print(f"prep: {len(counts)} distinct words, {sum(counts.values())} words "
              f"({time.time() - t0:.0f} s)", flush=True)
        vocab = wordpiece.learn({w: c for w, c in counts.items() if c >= args.min_word_count}, args.vocab_size)
        wordpiece.write_hf(vocab, tok_dir)
        print(f"prep: vocabulary of {len(vocab)} written to {tok_dir} ({time.time() - t0:.0f} s)", flush=True)
    wp = wordpiece.WordPiece.from_dir(tok_dir)
    L = args.seq_len
    body = L - 2
    rng = np.random.default_rng(args.seed)
    # Hold out whole articles for the validation loss (never trained on).
    order = rng.permutation(len(docs))
    n_val_docs = max(1, min(len(docs) // 50, args.val_docs))
    val_idx = set(order[:n_val_docs].tolist())

    def stream(items):
        buf = []
        for ids in items:
            buf.extend(ids)
            buf.append(wordpiece.SEP)
        return buf

    def doc_ids(d):
        out = []
        for ln in d:
            out.extend(wp.encode(ln))
        return out

    train_stream, val_stream = [], []
    for i, d in enumerate(docs):
        ids = doc_ids(d)
        (val_stream if i in val_idx else train_stream).append(ids)
    n_wiki = sum(len(x) for x in train_stream)
    task_items = []
    for v in tasks.values():
        task_items.extend(wp.encode(t) for t in v)
    # Shuffle task sentences so each block mixes them, then put them among the articles.
    perm = rng.permutation(len(task_items))
    task_items = [task_items[j] for j in perm]
    n_task = sum(len(x) for x in task_items)
    items = train_stream + task_items
    perm = rng.permutation(len(items))
    flat = stream(items[j] for j in perm)
    vflat = stream(val_stream)

    def blocks(flat):
        n = len(flat) // body
        a = np.asarray(flat[: n * body], dtype=np.int16).reshape(n, body)
        out = np.empty((n, L), dtype=np.int16)
        out[:, 0] = wordpiece.CLS
        out[:, 1:-1] = a
        out[:, -1] = wordpiece.SEP
        return out

    tr = blocks(flat)
    va = blocks(vflat)[: args.val_blocks]
    np.save(os.path.join(args.work, "train_blocks.npy"), tr)
    np.save(os.path.join(args.work, "val_blocks.npy"), va)
    unk = float((tr == wordpiece.UNK).mean())
    meta = {"seq_len": L, "train_blocks": int(tr.shape[0]), "val_blocks": int(va.shape[0]),
            "wiki_tokens": n_wiki, "task_tokens": n_task, "unk_rate": unk, "seed": args.seed,
            "vocab_size": len(wp.vocab), "articles": len(docs), "val_articles": n_val_docs}
    with open(os.path.join(args.work, "blocks.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(f"prep: {json.dumps(meta)} ({time.time() - t0:.0f} s)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prep", help="learn the vocabulary and build the pretraining blocks")
    p.add_argument("--data", default=default_data_dir())
    p.add_argument("--work", default=default_work_dir())
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--min-word-count", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--max-docs", type=int, default=None, help="smoke: read only this many articles")
    p.add_argument("--task-rows", type=int, default=None, help="smoke: read only this many rows per task")
    p.add_argument("--val-docs", type=int, default=200)
    p.add_argument("--val-blocks", type=int, default=256)
    p.add_argument("--relearn", action="store_true", help="learn the vocabulary again even if one exists")
    args = ap.parse_args()
    if args.cmd == "prep":
        prep(args)


if __name__ == "__main__":
    main()
