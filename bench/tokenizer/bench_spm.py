#!/usr/bin/python3
"""bench_spm.py - adapterd's SentencePiece tokenizers next to python3-sentencepiece, in one run.

For each SentencePiece model of the shared data (DeBERTa-v3 spm.model, T5 spiece.model, CamemBERT
sentencepiece.bpe.model: all three Unigram) and a SentencePiece BPE model trained here at run time (2,000 pieces with
byte fallback on the first 6,000 phrases of sst2_train.tsv, as the parity test trains it: no real BPE .model file is
available), and each sentence set (SST-2: sst2_train.tsv + sst2_dev.tsv; AG News test;
Wikipedia: the first --wiki-paragraphs paragraph lines of at least 200 bytes of wiki_en_unlabelled's first
shard) it tokenizes every text single-threaded with both tokenizers: adapterd through bench_spm_driver
(the model file alone, SentencePiece's rules, templates and offsets as served), sentencepiece through
SentencePieceProcessor.encode(texts, out_type=int, num_threads=1) (one C++ call for the whole list, so no
Python loop is timed; sentencepiece builds its pieces with their offsets to produce the ids). The passes
of the two alternate (one warm-up each, then --rounds timed passes each), so both see the same machine
load; the figure is the median pass, in tokens/s (the model's pieces, template tokens not counted) and
MB/s. It prints the CPU, the load average before and after, both token counts (they must be equal: the
parity test checks the ids themselves), the ratio adapterd / sentencepiece, and adapterd's load time and
the piece index's memory.
Run with Debian's python3 (python3-sentencepiece). Exit 0, 1 when the token counts differ, 77 when
sentencepiece, the data or the driver is missing.
Usage: bench_spm.py --driver build/bench/bench_spm_driver [--data DIR] [--rounds N]
                    [--models deberta-v3,t5-v1_1,camembert-base,trained-bpe] [--sets sst2,agnews,wiki]
"""
import argparse
import os
import statistics
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
ap.add_argument("--data", default=os.environ.get("ADAPTERD_DATA_DIR", os.path.join(here, "../../../shared/data")))
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--models", default="deberta-v3,t5-v1_1,camembert-base,trained-bpe")
ap.add_argument("--sets", default="sst2,agnews,wiki")
ap.add_argument("--wiki-paragraphs", type=int, default=3000)
args = ap.parse_args()

MODEL_FILES = {"deberta-v3": "spm.model", "t5-v1_1": "spiece.model", "camembert-base": "sentencepiece.bpe.model",
               "trained-bpe": "spm.model"}
ds = os.path.join(args.data, "datasets")
if not os.access(args.driver, os.X_OK):
    print(f"SKIP: driver {args.driver} not built")
    sys.exit(77)


def tsv_column(path, header):
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    return [l[: l.rindex("\t")] for l in lines[1 if header else 0:] if "\t" in l and l.rindex("\t") > 0]


def wiki(n):
    out = []
    with open(os.path.join(ds, "wiki_en_unlabelled", "enwiki_p56564554p57025655_000.txt"), encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if len(line.encode("utf-8")) >= 200:
                out.append(line)
                if len(out) == n:
                    break
    return out


SETS = {
    "sst2": lambda: tsv_column(os.path.join(ds, "sst2_train.tsv"), True) + tsv_column(os.path.join(ds, "sst2_dev.tsv"), True),
    "agnews": lambda: tsv_column(os.path.join(ds, "agnews_test.tsv"), False),
    "wiki": lambda: wiki(args.wiki_paragraphs),
}
try:
    sets = {s: SETS[s]() for s in args.sets.split(",")}
except (OSError, KeyError) as e:
    print(f"SKIP: a sentence set is missing ({e}); set ADAPTERD_DATA_DIR or --data")
    sys.exit(77)
models = args.models.split(",")
for m in models:
    if m == "trained-bpe":
        continue
    if m not in MODEL_FILES or not os.path.exists(os.path.join(args.data, "tokenizers", m, MODEL_FILES[m])):
        print(f"SKIP: no SentencePiece model for {m} under {args.data}/tokenizers")
        sys.exit(77)


def cpu_name():
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


print(f"SentencePiece tokenizers: adapterd vs python3-sentencepiece {spm.__version__}, 1 thread each, "
      f"median of {args.rounds} alternating passes after 1 warm-up each")
print(f"machine: {cpu_name()}, {os.cpu_count()} cpus; load average before: {loadavg()}")
print(f"{'model':15} {'set':7} {'texts':>6} {'MB':>6} {'tokens':>9} {'adapterd tok/s':>15} {'spm tok/s':>12} "
      f"{'ratio':>6} {'adapterd MB/s':>13} {'spm MB/s':>9}")
rc = 0
summary = []
with tempfile.TemporaryDirectory() as tmp:
    for m in models:
        folder = os.path.join(args.data, "tokenizers", m)
        if m == "trained-bpe":
            folder = os.path.join(tmp, m)
            os.makedirs(folder)
            corpus = os.path.join(tmp, "corpus.txt")
            with open(corpus, "w", encoding="utf-8") as fh:
                fh.write("\n".join(tsv_column(os.path.join(ds, "sst2_train.tsv"), True)[:6000]) + "\n")
            spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(folder, "spm"), vocab_size=2000,
                                           model_type="bpe", byte_fallback=True, character_coverage=0.9995,
                                           minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(folder, MODEL_FILES[m]))
        for sname, texts in sets.items():
            texts = [t for t in texts if t and "\n" not in t]
            path = os.path.join(tmp, sname + ".txt")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write("".join(t + "\n" for t in texts))
            nbytes = sum(len(t.encode("utf-8")) for t in texts)
            drv = subprocess.Popen([args.driver, folder, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True)
            ready = drv.stdout.readline().split()
            if not ready or ready[0] != "ready":
                print(f"bench_spm: the driver failed on {m}")
                sys.exit(1)
            load_s, rss_kb, index_bytes = float(ready[3]), int(ready[4]), int(ready[5])

            def c_pass():
                drv.stdin.write("pass\n")
                drv.stdin.flush()
                t, n = drv.stdout.readline().split()
                return float(t), int(n)

            def py_pass():
                t0 = time.perf_counter()
                ids = sp.encode(texts, out_type=int, num_threads=1)
                t = time.perf_counter() - t0
                return t, sum(len(x) for x in ids)

            _, c_tokens = c_pass()
            _, py_tokens = py_pass()
            ct, pt = [], []
            for _ in range(args.rounds):
                t, n = py_pass()
                pt.append(t)
                t, n2 = c_pass()
                ct.append(t)
            drv.stdin.close()
            drv.wait()
            cm, pm = statistics.median(ct), statistics.median(pt)
            ratio = pm / cm
            print(f"{m:15} {sname:7} {len(texts):6d} {nbytes / 1e6:6.2f} {c_tokens:9d} {c_tokens / cm:15,.0f} "
                  f"{py_tokens / pm:12,.0f} {ratio:5.2f}x {nbytes / cm / 1e6:13.2f} {nbytes / pm / 1e6:9.2f}")
            if c_tokens != py_tokens:
                print(f"  token counts differ: adapterd {c_tokens}, sentencepiece {py_tokens}")
                rc = 1
            summary.append((m, load_s, rss_kb, index_bytes))
            sys.stdout.flush()
print(f"load average after: {loadavg()}")
seen = set()
for m, load_s, rss_kb, index_bytes in summary:
    if m in seen:
        continue
    seen.add(m)
    print(f"{m}: adapterd load {load_s * 1e3:.0f} ms, resident memory +{rss_kb / 1024:.1f} MiB at load, "
          f"piece index {index_bytes / 1024 / 1024:.2f} MiB")
sys.exit(rc)
