"""The project's own uncased WordPiece: a vocabulary learner, a tokenizer, and the Hugging Face file writer.

Training-time tooling (never part of the product).  The tokenizer reproduces the pipeline that Hugging Face's
`BertTokenizerFast` runs for an uncased vocabulary, and that adapterd's engine/tokenizer implements in C:

    BertNormalizer   drop NUL, U+FFFD and C* characters except \\t\\n\\r; whitespace -> ' '; spaces around CJK
                     ideographs; lowercase; canonical decomposition with the Mn marks removed
    BertPreTokenizer split on whitespace; every punctuation character (ASCII symbol ranges and Unicode P*) is a
                     word of its own
    WordPiece        greedy longest match from the left, continuation pieces prefixed '##'; a word with a
                     character no piece covers, or longer than 100 characters, becomes [UNK] as a whole

The vocabulary is learned the way the `tokenizers` library's WordPieceTrainer does it: byte-pair merges over word
counts, where a word starts as its first character followed by '##'-prefixed characters, the most frequent adjacent
pair is merged each step (ties broken by the pair's text so a seed-free run is reproducible), and the merge's
result becomes a vocabulary entry, until the vocabulary reaches its size.  Applying it then uses longest match, not
the merges, as WordPiece does.

Files written (`write_hf`) are those `BertTokenizerFast.save_pretrained` writes: tokenizer.json, vocab.txt,
tokenizer_config.json, special_tokens_map.json.
"""

import collections
import heapq
import json
import os
import re
import sys
import unicodedata

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = range(5)
MAX_WORD_CHARS = 100


# ---------------------------------------------------------------------------------------------------------------
# Normalizer and pre-tokenizer

def _is_punct(cp):
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(chr(cp)).startswith("P")


def _is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or
            0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
            0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


_PUNCT_CLASS = "".join(re.escape(chr(c)) for c in range(0x110000)
                       if not (0xD800 <= c <= 0xDFFF) and _is_punct(c))
_SPLIT = re.compile("[" + _PUNCT_CLASS + "]|[^\\s" + _PUNCT_CLASS + "]+")
_ASCII_CLEAN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def normalize(text):
    """BertNormalizer(clean_text, handle_chinese_chars, lowercase, strip_accents) on one string."""
    if text.isascii():
        text = _ASCII_CLEAN.sub("", text)
        return text.replace("\t", " ").replace("\n", " ").replace("\r", " ").lower()
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD:
            continue
        if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
            out.append(" ")
            continue
        if unicodedata.category(ch).startswith("C"):
            continue
        if _is_cjk(cp):
            out.append(" " + ch + " ")
            continue
        out.append(ch)
    text = "".join(out).lower()
    text = unicodedata.normalize("NFD", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")


def pre_tokenize(text):
    """Normalized words of `text` (normalizer + BertPreTokenizer)."""
    return _SPLIT.findall(normalize(text))


# ---------------------------------------------------------------------------------------------------------------
# Learner

def learn(word_counts, vocab_size, min_char_count=20, max_alphabet=1000, log=sys.stderr):
    """Vocabulary (list of pieces, specials first) of `vocab_size` entries from {word: count}."""
    chars = collections.Counter()
    for w, c in word_counts.items():
        for ch in w:
            chars[ch] += c
    alphabet = [ch for ch, c in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))
                if c >= min_char_count][:max_alphabet]
    aset = set(alphabet)
    words, counts = [], []
    for w, c in word_counts.items():
        if len(w) <= MAX_WORD_CHARS and all(ch in aset for ch in w):
            words.append([w[0]] + ["##" + ch for ch in w[1:]])
            counts.append(c)
    vocab = list(SPECIALS)
    seen = set(vocab)
    for ch in alphabet:
        if ch not in seen:
            vocab.append(ch)
            seen.add(ch)
    for syms in words:
        for s in syms[1:]:
            if s not in seen:
                vocab.append(s)
                seen.add(s)
    # pair -> count, pair -> set of word indices
    pc = collections.Counter()
    where = collections.defaultdict(set)
    for i, syms in enumerate(words):
        for a, b in zip(syms, syms[1:]):
            pc[(a, b)] += counts[i]
            where[(a, b)].add(i)
    heap = [(-c, p) for p, c in pc.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        negc, pair = heapq.heappop(heap)
        if pc.get(pair, 0) != -negc or negc == 0:
            continue  # stale entry
        a, b = pair
        new = a + (b[2:] if b.startswith("##") else b)
        if new not in seen:
            vocab.append(new)
            seen.add(new)
        touched = collections.Counter()
        for i in list(where[pair]):
            syms = words[i]
            c = counts[i]
            for x, y in zip(syms, syms[1:]):
                pc[(x, y)] -= c
                touched[(x, y)] += 0
                where[(x, y)].discard(i)
            j, out = 0, []
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            words[i] = out
            for x, y in zip(out, out[1:]):
                pc[(x, y)] += c
                touched[(x, y)] += 0
                where[(x, y)].add(i)
        for p in touched:
            if pc[p] > 0:
                heapq.heappush(heap, (-pc[p], p))
            else:
                pc.pop(p, None)
                where.pop(p, None)
        if len(vocab) % 1000 == 0 and log:
            print(f"wordpiece: {len(vocab)} pieces, last merge {new!r} x{-negc}", file=log, flush=True)
    return vocab


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer

class WordPiece:
    def __init__(self, vocab):
        self.vocab = list(vocab)
        self.ids = {p: i for i, p in enumerate(self.vocab)}
        self.cache = {}

    @classmethod
    def from_dir(cls, d):
        with open(os.path.join(d, "vocab.txt"), encoding="utf-8") as f:
            return cls([ln.rstrip("\n") for ln in f])

    def word_ids(self, w):
        r = self.cache.get(w)
        if r is not None:
            return r
        if len(w) > MAX_WORD_CHARS:
            r = [UNK]
        else:
            r, start = [], 0
            while start < len(w):
                end = len(w)
                cur = None
                while start < end:
                    piece = w[start:end] if start == 0 else "##" + w[start:end]
                    cur = self.ids.get(piece)
                    if cur is not None:
                        break
                    end -= 1
                if cur is None:
                    r = [UNK]
                    break
                r.append(cur)
                start = end
        if len(self.cache) < 2_000_000:
            self.cache[w] = r
        return r

    def encode(self, text):
        """Ids of `text` without [CLS]/[SEP]."""
        out = []
        for w in pre_tokenize(text):
            out.extend(self.word_ids(w))
        return out

    def encode_single(self, text, max_len=128):
        """[CLS] text [SEP], truncated to max_len as the tokenizer's truncation does (longest_first)."""
        ids = self.encode(text)[: max_len - 2]
        return [CLS] + ids + [SEP]


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face files

def _added(i, tok):
    return {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
            "special": True}


def write_hf(vocab, out_dir, model_max_length=512):
    """Write tokenizer.json, vocab.txt, tokenizer_config.json, special_tokens_map.json as BertTokenizerFast does."""
    os.makedirs(out_dir, exist_ok=True)
    ids = {p: i for i, p in enumerate(vocab)}

    def special(tok, type_id):
        return {"SpecialToken": {"id": tok, "type_id": type_id}}

    def seq(s, type_id):
        return {"Sequence": {"id": s, "type_id": type_id}}

    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added(ids[t], t) for t in SPECIALS],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)],
            "pair": [special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ("[CLS]", "[SEP]")},
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": MAX_WORD_CHARS, "vocab": ids},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        for p in vocab:
            f.write(p + "\n")
    cfg = {
        "added_tokens_decoder": {str(ids[t]): {k: v for k, v in _added(ids[t], t).items() if k != "id"}
                                 for t in SPECIALS},
        "clean_up_tokenization_spaces": True,
        "cls_token": "[CLS]", "do_basic_tokenize": True, "do_lower_case": True, "mask_token": "[MASK]",
        "model_max_length": model_max_length, "never_split": None, "pad_token": "[PAD]", "sep_token": "[SEP]",
        "strip_accents": None, "tokenize_chinese_chars": True, "tokenizer_class": "BertTokenizer",
        "unk_token": "[UNK]",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    stm = {"cls_token": "[CLS]", "mask_token": "[MASK]", "pad_token": "[PAD]", "sep_token": "[SEP]",
           "unk_token": "[UNK]"}
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(stm, f, indent=2, sort_keys=True)
        f.write("\n")
