#!/usr/bin/python3
"""spm_parity.py - adapterd's SentencePiece tokenizers against the sentencepiece library.

For each SentencePiece model file of the shared data (deberta-v3/spm.model, t5-v1_1/spiece.model,
camembert-base/sentencepiece.bpe.model - all three are Unigram models, the last despite its name) and
for a SentencePiece BPE model with byte fallback trained here on SST-2 (no real BPE .model file is
available: XLM-R's is not obtainable here) this builds a folder with the model file and its
tokenizer_config.json / special_tokens_map.json / config.json only (no tokenizer.json), runs the C
driver (tok_driver) on every sentence of the shared datasets (SST-2 train/dev, AG News test), the hard
cases of hard_cases.json and hard_cases_spm.json, and 1,000 text pairs, and requires, for every input:
  * identical ids: sentencepiece's pieces, mapped as Hugging Face's slow tokenizers map them (T5 and
    DeBERTa-v3: SentencePiece's ids; CamemBERT: fairseq's table - <s>NOTUSED 0, <pad> 1,
    </s>NOTUSED 2, <unk> 3, every other piece + 4), text first cut at the added tokens of
    tokenizer_config.json (longest match, lstrip/rstrip), with the templates [CLS] A [SEP] (B [SEP])
    (DeBERTa, pair type 1), A </s> (B </s>) (T5), <s> A </s></s> B </s> (CamemBERT);
  * identical type ids;
  * identical offsets: sentencepiece's begin/end (code points, as its Python wrapper reports them),
    (0, 0) for template tokens.
Run with Debian's python3 (python3-sentencepiece). Exit 0 on full agreement, 1 on any difference
(the first ones are printed), 77 when sentencepiece, the shared data or the driver is missing.
Usage: spm_parity.py --driver PATH/tok_driver [--fixtures DIR] [--data DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import sentencepiece as spm
except ImportError as e:
    print(f"SKIP: python3-sentencepiece is not installed (apt-get install python3-sentencepiece): {e}")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--driver", required=True)
shared = os.environ.get("ADAPTERD_DATA_DIR", os.path.join(here, "../../../../shared/data"))
ap.add_argument("--fixtures", default=None)
ap.add_argument("--data", default=None)
args = ap.parse_args()
fixtures = args.fixtures or os.path.join(shared, "tokenizers")
data = args.data or os.path.join(shared, "datasets")

MODELS = [  # name, model file, id mapping, template
    ("deberta-v3", "spm.model", "plain", "cls_sep"),
    ("t5-v1_1", "spiece.model", "plain", "eos"),
    ("camembert-base", "sentencepiece.bpe.model", "camembert", "roberta"),
    ("trained-bpe", "spm.model", "plain", "eos"),
]
for name, f, _, _ in MODELS[:3]:
    if not os.path.exists(os.path.join(fixtures, name, f)):
        print(f"SKIP: {os.path.join(fixtures, name, f)} not found (the shared tokenizers; set ADAPTERD_DATA_DIR)")
        sys.exit(77)
DS = [("sst2_train.tsv", True), ("sst2_dev.tsv", True), ("agnews_test.tsv", False)]
for f, _ in DS:
    if not os.path.exists(os.path.join(data, f)):
        print(f"SKIP: dataset {os.path.join(data, f)} not found (set ADAPTERD_DATA_DIR or --data)")
        sys.exit(77)
if not os.access(args.driver, os.X_OK):
    print(f"SKIP: driver {args.driver} not built")
    sys.exit(77)


def read_column(path, header):
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    if header:
        lines = lines[1:]
    return [l[: l.rindex("\t")] for l in lines if l]


sentences = [s for f, h in DS for s in read_column(os.path.join(data, f), h)]
hard = json.load(open(os.path.join(here, "hard_cases.json"), encoding="utf-8"))
hard_spm = json.load(open(os.path.join(here, "hard_cases_spm.json"), encoding="utf-8"))
singles = sentences + hard["single"] + hard_spm["single"]
sst2dev = read_column(os.path.join(data, "sst2_dev.tsv"), True)
agnews = read_column(os.path.join(data, "agnews_test.tsv"), False)
pairs = [tuple(p) for p in hard["pairs"] + hard_spm["pairs"]]
pairs += [(sst2dev[i % len(sst2dev)], agnews[(i * 7) % len(agnews)]) for i in range(1000)]

JS_SPACE = set("\t\n\x0b\x0c\r \xa0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff") | {chr(c) for c in range(0x2000, 0x200B)}


def added_tokens(cfg):
    """The added tokens, all matched in the raw text as the slow tokenizers do, as (content, id, lstrip,
    rstrip)."""
    out = []
    for k, a in (cfg.get("added_tokens_decoder") or {}).items():
        out.append((a["content"], int(k), a.get("lstrip", False), a.get("rstrip", False)))
    out.sort(key=lambda t: -len(t[0]))
    return out


def split_added(text, added):
    """[(start, end, id or None)] in code points: longest added token at the leftmost position."""
    secs, start, i = [], 0, 0
    firsts = {a[0][0] for a in added}
    while i < len(text):
        hit = None
        if text[i] in firsts:
            hit = next((a for a in added if text.startswith(a[0], i)), None)
        if not hit:
            i += 1
            continue
        if i > start:
            secs.append([start, i, None])
        secs.append([i, i + len(hit[0]), hit])
        i += len(hit[0])
        start = i
    if start < len(text):
        secs.append([start, len(text), None])
    for k, s in enumerate(secs):
        if s[2] is None:
            continue
        if s[2][2] and k > 0 and secs[k - 1][2] is None:
            p = secs[k - 1]
            while p[1] > p[0] and text[p[1] - 1] in JS_SPACE:
                p[1] -= 1
        if s[2][3] and k + 1 < len(secs) and secs[k + 1][2] is None:
            x = secs[k + 1]
            while x[0] < x[1] and text[x[0]] in JS_SPACE:
                x[0] += 1
    return [(s, e, a[1] if a else None) for s, e, a in secs]


def encode(sp, mapping, added, text):
    ids, offs = [], []
    for s, e, aid in split_added(text, added):
        if aid is not None:
            ids.append(aid)
            offs.append((s, e))
            continue
        if e <= s:
            continue
        for p in sp.encode(text[s:e], out_type="immutable_proto").pieces:
            pid = p.id
            if mapping == "camembert":
                table = {"<s>NOTUSED": 0, "<pad>": 1, "</s>NOTUSED": 2, "<unk>": 3}
                pid = table.get(p.piece, 3 if pid == sp.unk_id() else pid + 4)
            ids.append(pid)
            offs.append((s + p.begin, s + p.end))
    return ids, offs


def template(kind, a, b, eos=1):
    """(ids, type ids, offsets) of the post-processed pair; b is None for a single text."""
    (ia, oa), z = a, (0, 0)
    if kind == "cls_sep":
        ids, types, offs = [1] + ia + [2], [0] * (len(ia) + 2), [z] + oa + [z]
        if b:
            ids, types, offs = ids + b[0] + [2], types + [1] * (len(b[0]) + 1), offs + b[1] + [z]
    elif kind == "eos":
        ids, types, offs = ia + [eos], [0] * (len(ia) + 1), oa + [z]
        if b:
            ids, types, offs = ids + b[0] + [eos], types + [0] * (len(b[0]) + 1), offs + b[1] + [z]
    else:
        ids, offs = [5] + ia + [6], [z] + oa + [z]
        if b:
            ids, offs = ids + [6] + b[0] + [6], offs + [z] + b[1] + [z]
        types = [0] * len(ids)
    return ids, types, offs


def hexs(s):
    return s.encode("utf-8", "surrogatepass").hex()


failures = 0


def fail(msg):
    global failures
    if failures < 40:
        print("FAIL " + msg)
    failures += 1


t0 = time.time()
tmp = tempfile.mkdtemp(prefix="spm-parity-")
try:
    for name, mfile, mapping, tpl in MODELS:
        d = os.path.join(tmp, name)
        os.makedirs(d)
        if name == "trained-bpe":
            corpus = os.path.join(tmp, "corpus.txt")
            with open(corpus, "w", encoding="utf-8") as fh:
                fh.write("\n".join(sentences[:6000]) + "\n")
            spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(d, "spm"), vocab_size=2000,
                                           model_type="bpe", byte_fallback=True, character_coverage=0.9995,
                                           minloglevel=2)
            os.remove(os.path.join(d, "spm.vocab"))
        for f in (mfile, "tokenizer_config.json", "special_tokens_map.json", "config.json"):
            src = os.path.join(fixtures, name, f)
            if os.path.exists(src):
                shutil.copy(src, d)
        cfg_path = os.path.join(d, "tokenizer_config.json")
        cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
        sp = spm.SentencePieceProcessor(model_file=os.path.join(d, mfile))
        added = added_tokens(cfg)
        cases = [(f"single {i}", s, None) for i, s in enumerate(singles)]
        cases += [(f"pair {i}", a, b) for i, (a, b) in enumerate(pairs)]
        lines = "".join(hexs(a) + ("\t" + hexs(b) if b is not None else "") + "\n" for _, a, b in cases)
        r = subprocess.run([args.driver, d], input=lines.encode(), capture_output=True)
        if r.returncode != 0:
            fail(f"{name}: tok_driver exited {r.returncode}: {r.stderr.decode()[:500]}")
            continue
        got = [json.loads(l) for l in r.stdout.decode().splitlines()]
        n_ok = n_tok = 0
        for (label, a, b), g in zip(cases, got):
            want = template(tpl, encode(sp, mapping, added, a), encode(sp, mapping, added, b) if b is not None else None,
                            sp.piece_to_id("</s>"))
            where = f"{name} [{mfile}] {label} {json.dumps(a)[:80]}"
            if "error" in g:
                fail(f"{where}: error {g['error']}")
                continue
            goff = list(zip(g["offsets"][0::2], g["offsets"][1::2]))
            if g["ids"] != want[0]:
                fail(f"{where}:\n  sentencepiece {want[0]}\n  adapterd      {g['ids']}")
            elif g["type_ids"] != want[1]:
                fail(f"{where}: type ids {g['type_ids']} != {want[1]}")
            elif goff != [tuple(o) for o in want[2]]:
                fail(f"{where}:\n  sentencepiece offsets {want[2]}\n  adapterd      offsets {goff}")
            else:
                n_ok += 1
                n_tok += len(g["ids"])
        if len(got) != len(cases):
            fail(f"{name}: {len(got)} results for {len(cases)} inputs")
        # decode (eng_tok_decode, TEI's /decode): the ids of single texts back to SentencePiece's own
        # decode of its pieces (special tokens skipped; texts with an unknown piece left out, which
        # SentencePiece writes as " ⁇ " and Hugging Face skips as a special token)
        dec = [(a, g["ids"]) for (label, a, b), g in zip(cases, got) if b is None and "ids" in g
               and sp.unk_id() not in sp.encode(a)][:1500]
        r = subprocess.run([args.driver, d], capture_output=True,
                           input="".join(f"D\t1\t{','.join(map(str, ids))}\n" for _, ids in dec).encode())
        dgot = [json.loads(l) for l in r.stdout.decode().splitlines()]
        n_dec = 0
        for (a, ids), g in zip(dec, dgot):
            want = sp.decode(sp.encode(a))
            text = bytes.fromhex(g["text"]).decode("utf-8") if "text" in g else f"(error {g.get('error')})"
            if text == want:
                n_dec += 1
            else:
                fail(f"{name} [{mfile}] decode {ids}:\n  sentencepiece {want!r}\n  adapterd      {text!r}")
        if len(dgot) != len(dec):
            fail(f"{name}: {len(dgot)} decodes for {len(dec)} inputs")
        print(f"{name} [{mfile}]: {time.time() - t0:.0f} s, {len(cases)} inputs ({len(singles)} single texts, {len(pairs)} pairs): "
              f"ids, type ids and offsets identical for {n_ok}/{len(cases)} ({n_tok} tokens); decode identical for "
              f"{n_dec}/{len(dec)} texts")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print(f"{'FAILED' if failures else 'OK'}: {failures} differences; {time.time() - t0:.1f} s")
sys.exit(1 if failures else 0)
