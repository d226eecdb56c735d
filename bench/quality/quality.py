#!/usr/bin/python3
"""Quality through the server: each task's held-out split sent to `adapterd serve` as HTTP requests at every
allowed AdapterDrop skip, with accuracy and macro-F1, next to the same saved task evaluated in PyTorch (label
agreement) and the full fine-tuning yardstick of the same encoder.

    bench/quality/quality.py --registry DIR [--adapterd BIN] [--data DIR] [--tasks a,b] [--rows N] [--no-pytorch]
                             [--yardsticks WORK/tasks] [--threads 2] [--precision fp32|bf16|int8]
                             [--out FILE.json] [--check FILE.json --tol 1]

Per task and skip: accuracy and macro-F1 over the rows (32 inputs per request, the skip given per request), the
median engine time of single-input requests (`timing.inference_ms`, 21 requests of one median-length row) and the
plan's GFLOP for that input (`return.explain`).  When two or more of the four main tasks are measured, the same
is measured for one request asking all of them at each skip they all allow (`multitask` in the output: AdapterDrop
shares the skipped layers between the tasks of a request).  The tagging task (`entities`, WNUT-17 test) is scored by entity F1
(tools/train/tagging.py, seqeval's rules): each sentence is sent as its words joined by spaces and each word takes
the label of the first returned token that starts inside it, as the tagger was trained (first word piece).
--precision serves the backbone in bf16 or int8 (`adapterd serve --precision`, for models without a model.json);
the precision and kernel actually served are recorded from GET /v1/models.  The PyTorch peer (tools/train/eval_task.py) reads the same task
folders with the reference readers.  --check compares accuracies with a committed result file and exits 1 when one
differs by more than --tol points (CI's small quality check).  Only the standard library is needed for the server
part; the PyTorch part needs python3-torch.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import tagging  # noqa: E402  (standard library only)

# task name prefix -> (dataset file of the held-out split, label list order is the task's)
SPLITS = {"sentiment": "sst2/dev.tsv", "topic": "ag_news/test.tsv", "question": "trec/test.tsv",
          "emotion": "emotion/validation.tsv"}
# the tasks asked for together in the multi-task measurement (AdapterDrop's shared lower layers)
MULTI = ["sentiment", "topic", "question", "emotion"]
YARD = {"sentiment": "sst2-full", "topic": "agnews-full", "question": "trec-full", "emotion": "emotion-full"}
# tagging tasks: name prefix -> CoNLL file of the held-out split
TAGGING = {"entities": "wnut17/emerging.test.annotated"}


def read_conll(path, limit):
    """[(words, tags)] of a CoNLL file (word TAB tag, blank lines between sentences), every k-th when limited."""
    out, words, tags = [], [], []
    with open(path, encoding="utf-8") as f:
        for ln in list(f) + [""]:
            ln = ln.rstrip("\n")
            if not ln.strip():
                if words:
                    out.append((words, tags))
                    words, tags = [], []
                continue
            parts = ln.split("\t")
            words.append(parts[0])
            tags.append(parts[-1])
    if limit and len(out) > limit:
        k = len(out) / limit
        out = [out[int(i * k)] for i in range(limit)]
    return out


def words_tags(words, tokens):
    """The tag of each word of a sentence sent as " ".join(words): that of the first returned token starting inside
    the word (offsets are code points, as Python indexes str), O when none does."""
    out, pos, k = [], 0, 0
    for w in words:
        lab = "O"
        while k < len(tokens) and tokens[k]["start"] < pos:
            k += 1
        if k < len(tokens) and tokens[k]["start"] < pos + len(w):
            lab = tokens[k]["label"]
        out.append(lab)
        pos += len(w) + 1
    return out


def read_tsv(path, limit):
    rows = []
    with open(path, encoding="utf-8") as f:
        next(f)
        for ln in f:
            ln = ln.rstrip("\n")
            if ln:
                t, lab = ln.rsplit("\t", 1)
                rows.append((t, lab))
    if limit and len(rows) > limit:
        # every k-th row: a fixed, label-balanced-enough subset without a random generator
        k = len(rows) / limit
        rows = [rows[int(i * k)] for i in range(limit)]
    return rows


def metrics(pred, gold, labels):
    acc = sum(p == g for p, g in zip(pred, gold)) / len(gold)
    f1 = []
    for c in labels:
        tp = sum(1 for p, g in zip(pred, gold) if p == c and g == c)
        fp = sum(1 for p, g in zip(pred, gold) if p == c and g != c)
        fn = sum(1 for p, g in zip(pred, gold) if p != c and g == c)
        f1.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return acc, sum(f1) / len(f1)


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/predict", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return json.loads(r.read())


def start_server(args, tmp):
    pf = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "serve.log"), "w")
    cmd = [args.adapterd, "serve", "--registry", args.registry, "--port", "0", "--port-file", pf,
           "--threads", str(args.threads), "--access-log", "false", "--watch", "false"]
    if args.precision:
        cmd += ["--precision", args.precision]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if p.poll() is not None:
            raise SystemExit(f"adapterd serve exited: see {log.name}")
        if os.path.exists(pf) and open(pf).read().strip():
            port = int(open(pf).read().strip())
            try:
                if get(port, "/readyz").get("ready"):
                    return p, port
            except Exception:
                pass
        time.sleep(0.1)
    p.terminate()
    raise SystemExit("adapterd serve did not become ready")


def latency(port, name, text, s):
    """Median engine time of 20 single-input requests and the plan's GFLOP (explain) for `text` at skip s; `name`
    is a task or a list of tasks asked for in one request."""
    lat, gflop = [], None
    for j in range(21):
        body = {"inputs": [text], "tasks": name if isinstance(name, list) else [name], "skip": s}
        if j == 0:
            body["return"] = {"explain": True}
        out = post(port, body)
        if j == 0:
            gflop = out.get("explain", {}).get("gflop")
        else:
            lat.append(out["timing"]["inference_ms"])
    return statistics.median(lat), gflop


def multitask(port, names, tasks, meds):
    """AdapterDrop's sharing: one request asking every task of `names` for one input, at each skip all of them
    allow. The input is the median-length one of the tasks' median inputs; skip 0 is every task's own pass through
    all the layers, skip s shares the s lowest layers between them."""
    cand = sorted((meds[n] for n in names), key=len)
    text = cand[len(cand) // 2]
    top = min(max(int(s) for s in tasks[n]["skips"]) for n in names)
    out = {"tasks": names, "text": text, "skips": {}}
    for s in range(top + 1):
        ms, gflop = latency(port, names, text, s)
        out["skips"][str(s)] = {"median_ms_1_input": ms, "gflop_1_input": gflop}
        print(f"{len(names)} tasks in one request, skip {s}: {ms:.2f} ms {gflop} GFLOP", flush=True)
    return out


def tag_task(args, port, name, t):
    sents = read_conll(os.path.join(args.data, "datasets", TAGGING[name.split("-")[0]]), args.rows)
    sk = t.get("skips", {"min": 0, "max": 0})
    texts = [" ".join(w) for w, _ in sents]
    med = sorted(texts, key=len)[len(texts) // 2]
    r = {"split": TAGGING[name.split("-")[0]], "rows": len(sents), "skips": {}, "sents": sents}
    for s in range(sk["min"], sk["max"] + 1):
        pred = []
        for i in range(0, len(texts), 32):
            out = post(port, {"inputs": texts[i:i + 32], "tasks": [name], "skip": s})
            pred += [words_tags(w, res["tasks"][name]["tokens"]) for (w, _), res in zip(sents[i:i + 32],
                                                                                       out["results"])]
        m = tagging.entity_metrics(pred, [g for _, g in sents])
        ms, gflop = latency(port, name, med, s)
        m.update(server_pred=pred, median_ms_1_input=ms, gflop_1_input=gflop)
        r["skips"][str(s)] = m
        print(f"{name} skip {s}: entity F1 {m['entity_f1']:.4f} (P {m['entity_precision']:.4f} "
              f"R {m['entity_recall']:.4f}) word accuracy {m['accuracy']:.4f} {ms:.2f} ms {gflop} GFLOP "
              f"({len(sents)} sentences)", flush=True)
    return r


def tag_peer(args, name, r, tdir, model_dir, tmp):
    """The PyTorch peer of a tagging task: word tags from eval_task.py --words; agreement over words."""
    sents = r.pop("sents")
    sel = list(range(len(sents)))
    if args.pytorch_rows and len(sents) > args.pytorch_rows:
        k = len(sents) / args.pytorch_rows
        sel = [int(i * k) for i in range(args.pytorch_rows)]
    wf = os.path.join(tmp, "words.json")
    with open(wf, "w", encoding="utf-8") as f:
        json.dump([sents[i][0] for i in sel], f)
    pt = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "train", "eval_task.py"), "--model",
                         model_dir, "--task-dir", tdir, "--words", wf, "--skips", ",".join(r["skips"]),
                         "--threads", str(args.threads)], capture_output=True, text=True)
    if pt.returncode != 0:
        print(f"{name}: PyTorch evaluation failed: {pt.stderr[-400:]}")
        return
    pj = json.loads(pt.stdout)
    gold = [sents[i][1] for i in sel]
    for s, v in r["skips"].items():
        pl = pj["skips"][s]
        sp = [v["server_pred"][i] for i in sel]
        n = sum(len(x) for x in pl)
        agree = sum(a == b for x, y in zip(pl, sp) for a, b in zip(x, y)) / max(1, n)
        v["pytorch_entity_f1"] = tagging.entity_metrics(pl, gold)["entity_f1"]
        v["pytorch_rows"] = len(pl)
        v["server_entity_f1_same_rows"] = tagging.entity_metrics(sp, gold)["entity_f1"]
        v["label_agreement"] = agree
        print(f"{name} skip {s}: PyTorch entity F1 {v['pytorch_entity_f1']:.4f} on {len(pl)} sentences, "
              f"word label agreement {agree:.4f}", flush=True)


def machine(args):
    """CPU model (with its family and model numbers: a hypervisor's "AMD EPYC" alone does not name the core), OpenBLAS
    core and CPU count as adapterd reports them, server threads, load average."""
    cpu, fam = "", {}
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                k, _, v = ln.partition(":")
                k = k.strip()
                if k == "model name" and not cpu:
                    cpu = v.strip()
                elif k in ("cpu family", "model") and k not in fam:
                    fam[k] = v.strip()
    except OSError:
        pass
    if fam:
        cpu += " (family %s model %s)" % (fam.get("cpu family", "?"), fam.get("model", "?"))
    v = json.loads(subprocess.run([args.adapterd, "version"], capture_output=True, text=True).stdout or "{}")
    return {"cpu": cpu, "blas_core": v.get("blas_core"), "cpus": v.get("cpus"), "server_threads": args.threads,
            "loadavg_start": os.getloadavg()[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", default=os.path.join(ROOT, "examples", "registry"))
    ap.add_argument("--adapterd", default=os.path.join(ROOT, "build", "tools", "adapterd"))
    ap.add_argument("--data", default=os.environ.get("ADAPTERD_DATA_DIR",
                                                     os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--tasks", default=None, help="comma-separated (default: every task with a held-out split)")
    ap.add_argument("--rows", type=int, default=None, help="at most N rows per split (evenly spaced)")
    ap.add_argument("--no-pytorch", action="store_true")
    ap.add_argument("--pytorch-rows", type=int, default=None,
                    help="PyTorch peer on at most N of the rows (evenly spaced); the server sees them all")
    ap.add_argument("--yardsticks", default=None, help="folder with <task>-full.json results (tools/train)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default=None, choices=("fp32", "bf16", "int8"),
                    help="serve the backbone in this precision (default: the model's, else fp32)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--check", default=None)
    ap.add_argument("--tol", type=float, default=1.0, help="points of accuracy allowed by --check")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.data, "datasets")):
        print(f"quality.py: no data in {args.data}; skipping")
        sys.exit(77)
    tasks_dir = os.path.join(args.registry, "tasks")
    names = sorted(os.listdir(tasks_dir)) if not args.tasks else args.tasks.split(",")
    names = [n for n in names if n.split("-")[0] in SPLITS or n.split("-")[0] in TAGGING]
    model_dir = None
    meds = {}  # task -> its median-length input, the multi-task request picks among them
    results = {"registry": os.path.relpath(args.registry, ROOT), "rows_limit": args.rows, "tasks": {},
               "machine": machine(args)}
    print(f"quality.py: {json.dumps(results['machine'])}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_server(args, tmp)
        try:
            ms = get(port, "/v1/models")
            ms = ms.get("models", ms) if isinstance(ms, dict) else ms
            results["precision"] = {m.get("name"): {"precision": m.get("precision"), "kernel": m.get("kernel")}
                                    for m in ms}
            print(f"quality.py: served precision {json.dumps(results['precision'])}", flush=True)
            info = get(port, "/v1/tasks")
            by_name = {t["name"]: t for t in info.get("tasks", info if isinstance(info, list) else [])}
            for name in names:
                base = name.split("-")[0]
                t = by_name.get(name, {})
                if model_dir is None and t.get("model"):
                    model_dir = os.path.join(args.registry, "models", t["model"])
                if base in TAGGING:
                    results["tasks"][name] = tag_task(args, port, name, t)
                    continue
                rows = read_tsv(os.path.join(args.data, "datasets", SPLITS[base]), args.rows)
                sk = t.get("skips", {"min": 0, "max": 0})
                labels = t.get("labels")
                gold = [lab for _, lab in rows]
                texts = [x for x, _ in rows]
                r = {"split": SPLITS[base], "rows": len(rows), "skips": {}}
                med = sorted(texts, key=len)[len(texts) // 2]
                for s in range(sk["min"], sk["max"] + 1):
                    pred = []
                    for i in range(0, len(texts), 32):
                        out = post(port, {"inputs": texts[i:i + 32], "tasks": [name], "skip": s})
                        pred += [res["tasks"][name]["label"] for res in out["results"]]
                    acc, f1 = metrics(pred, gold, labels or sorted(set(gold)))
                    ms, gflop = latency(port, name, med, s)
                    r["skips"][str(s)] = {"accuracy": acc, "macro_f1": f1, "server_pred": pred,
                                          "median_ms_1_input": ms, "gflop_1_input": gflop}
                    print(f"{name} skip {s}: accuracy {acc:.4f} macro-F1 {f1:.4f} "
                          f"{ms:.2f} ms {gflop} GFLOP (median input, {len(rows)} rows)", flush=True)
                meds[name] = med
                results["tasks"][name] = r
                if model_dir is None:
                    model_dir = os.path.join(args.registry, "models", t.get("model", ""))
            multi = [n for n in MULTI if n in results["tasks"]]
            if len(multi) > 1:
                results["multitask"] = multitask(port, multi, results["tasks"], meds)
        finally:
            proc.terminate()
            proc.wait()
        for name, r in results["tasks"].items():
            base = name.split("-")[0]
            if args.yardsticks and base in YARD:
                yp = os.path.join(args.yardsticks, YARD[base] + ".json")
                if os.path.exists(yp):
                    y = json.load(open(yp))
                    r["full_finetune"] = {"accuracy": y["skips"]["0"]["accuracy"],
                                          "macro_f1": y["skips"]["0"]["macro_f1"], "rows": y["eval_rows"]}
            if args.no_pytorch:
                continue
            if base in TAGGING:
                tag_peer(args, name, r, os.path.join(tasks_dir, name, "1"), model_dir, tmp)
                continue
            tf = os.path.join(tmp, "texts.txt")
            rows = read_tsv(os.path.join(args.data, "datasets", SPLITS[base]), args.rows)
            sel = list(range(len(rows)))
            if args.pytorch_rows and len(rows) > args.pytorch_rows:
                k = len(rows) / args.pytorch_rows
                sel = [int(i * k) for i in range(args.pytorch_rows)]
            rows = [rows[i] for i in sel]
            with open(tf, "w", encoding="utf-8") as f:
                for x, _ in rows:
                    f.write(x + "\n")
            tdir = os.path.join(tasks_dir, name, "1")
            skips = ",".join(r["skips"])
            pt = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "train", "eval_task.py"),
                                 "--model", model_dir, "--task-dir", tdir, "--texts", tf, "--skips", skips,
                                 "--threads", str(args.threads)], capture_output=True, text=True)
            if pt.returncode != 0:
                print(f"{name}: PyTorch evaluation failed: {pt.stderr[-400:]}")
                continue
            pj = json.loads(pt.stdout)
            for s, v in r["skips"].items():
                pl = [pj["labels"][k] for k in pj["skips"][s]]
                sp = [v["server_pred"][i] for i in sel]
                agree = sum(a == b for a, b in zip(pl, sp)) / len(pl)
                acc, f1 = metrics(pl, [lab for _, lab in rows], pj["labels"])
                v["pytorch_accuracy"] = acc
                v["pytorch_rows"] = len(pl)
                v["server_accuracy_same_rows"] = metrics(sp, [lab for _, lab in rows], pj["labels"])[0]
                v["label_agreement"] = agree
                print(f"{name} skip {s}: PyTorch accuracy {acc:.4f} on {len(pl)} rows, label agreement {agree:.4f}",
                      flush=True)
    results["machine"]["loadavg_end"] = os.getloadavg()[0]
    for r in results["tasks"].values():
        r.pop("sents", None)
        for v in r["skips"].values():
            v.pop("server_pred", None)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.check:
        ref = json.load(open(args.check))
        bad = 0
        for name, r in results["tasks"].items():
            for s, v in r["skips"].items():
                want = ref["tasks"].get(name, {}).get("skips", {}).get(s)
                if want is None:
                    continue
                key = "entity_f1" if "entity_f1" in want else "accuracy"
                d = abs(v[key] - want[key]) * 100
                status = "ok" if d <= args.tol else "FAIL"
                bad += status == "FAIL"
                print(f"check {name} skip {s}: {key} {v[key]:.4f} vs committed {want[key]:.4f} ({status})")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
