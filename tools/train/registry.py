"""Assemble an adapterd registry from a training work directory (training tooling).

    registry.py --work WORK --out DIR [--model-name NAME]

models/<NAME>/ is WORK/encoder (config.json, model.safetensors in F16, the tokenizer files); each trained task in
WORK/tasks becomes tasks/<public name>/1/ with its folder as saved (and the PEFT folder of its LoRA on the word
embeddings, when it was trained with one, after it in the Stack) and a task.json naming the labels and the
AdapterDrop skips.  The allowed skips come from the measured curve: the deepest skip, up to what the adapter was
trained for (--drop-max), whose held-out accuracy (entity F1 for tagging) is at least --keep (default 0.97) of the
skip-0 figure; the default skip is 0.  Writes DIR/results.json: every result JSON of WORK/tasks (paths relative to WORK), for the README
tables (bench/quality/tables.py).
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402

# trained name -> public task name; the first four are the README's tasks
PUBLIC = {
    "sst2": "sentiment", "agnews": "topic", "trec": "question", "emotion": "emotion",
    "agnews-houlsby": "topic-houlsby", "emotion-parallel": "emotion-parallel", "emotion-lora": "emotion-lora",
    "trec-peft": "question-peft", "trec-ia3": "question-ia3", "sst2-mam": "sentiment-mam",
    "emotion-prefix": "emotion-prefix", "sst2-adamix": "sentiment-adamix", "agnews-sparse": "topic-sparse",
    "wnut": "entities",
}


def skip_range(res, keep):
    """Tagging tasks are judged by entity F1, the others by accuracy."""
    sk = {int(k): v.get("entity_f1", v["accuracy"]) for k, v in res["skips"].items()}
    top = 0
    for s in range(1, res.get("drop_max", 0) + 1):
        if s in sk and sk[s] >= keep * sk[0]:
            top = s
        else:
            break
    return top


def prune_variants(args, res, d, pub, mdir):
    """<pub>-k<K>: copies of the fusion task pruned by `adapterd fusion-prune` on (the start of) the target task's
    TRAINING texts to its K most-attended adapters."""
    tr = data.TASKS[res["task"]][0]
    calib = os.path.join(args.data, "datasets", tr)
    n = len(res.get("children", []))
    for k in [int(x) for x in args.prune.split(",")]:
        if k >= n:
            continue
        dk = os.path.join(os.path.dirname(os.path.dirname(d)), f"{pub}-k{k}", "1")
        shutil.copytree(d, dk)
        with open(os.path.join(dk, "task.json")) as f:
            tj = json.load(f)
        cmd = [args.adapterd, "fusion-prune", "--model", mdir, "--fusion", os.path.join(dk, "fusion"),
               "--head", os.path.join(dk, "head"), "--calib", calib, "--keep", str(k), "--max-texts", "200",
               "--threads", "2"]
        for a in tj["adapters"]:
            cmd += ["--adapter", os.path.join(dk, a)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"fusion-prune failed: {r.stderr}")
        res.setdefault("pruned", {})[str(k)] = f"{pub}-k{k}"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model-name", default="bert-6l-256-uncased")
    ap.add_argument("--keep", type=float, default=0.97)
    ap.add_argument("--adapterd", required=True, help="for fusion-prune")
    ap.add_argument("--data", required=True, help="shared data dir: the fusion is calibrated on training texts")
    ap.add_argument("--prune", default="4,2,1", help="fusion variants kept at K adapters (when K < #adapters)")
    args = ap.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    mdir = os.path.join(args.out, "models", args.model_name)
    shutil.copytree(os.path.join(args.work, "encoder"), mdir)
    if os.path.exists(os.path.join(mdir, "training.json")):
        os.remove(os.path.join(mdir, "training.json"))
    tasks = os.path.join(args.work, "tasks")
    results = {}
    for rj in sorted(glob.glob(os.path.join(tasks, "*.json"))):
        name = os.path.basename(rj)[:-5]
        with open(rj) as f:
            res = json.load(f)
        results[name] = res
        src = os.path.join(tasks, name)
        if res["form"] == "full" or not os.path.isdir(src):
            continue
        if res["form"] == "fusion":
            pub = {"sst2": "sentiment-fusion"}.get(res["task"], res["task"] + "-fusion")
            d = os.path.join(args.out, "tasks", pub, "1")
            kids = []
            for c in res.get("children", []):
                k = os.path.basename(os.path.normpath(c))
                shutil.copytree(c, os.path.join(d, "adapters", k))
                for fn in ("head_config.json", "model_head.safetensors", "pytorch_model_head.bin"):
                    p = os.path.join(d, "adapters", k, fn)
                    if os.path.exists(p):
                        os.remove(p)
                kids.append("adapters/" + k)
            shutil.copytree(os.path.join(src, "fusion"), os.path.join(d, "fusion"))
            shutil.copytree(os.path.join(src, "head"), os.path.join(d, "head"))
            tj = {"model": args.model_name, "adapters": kids, "fusion": "fusion", "head": "head",
                  "skips": {"min": 0, "max": 0, "default": 0}, "labels": res["labels"]}
        else:
            pub = PUBLIC.get(name)
            if pub is None:
                continue
            d = os.path.join(args.out, "tasks", pub, "1")
            shutil.copytree(src, os.path.join(d, name))
            ads = [name]
            emb = res.get("embedding_lora")        # a PEFT folder beside the adapter: its LoRA on the embeddings
            if emb:
                shutil.copytree(os.path.join(tasks, emb["folder"]), os.path.join(d, emb["folder"]))
                ads.append(emb["folder"])
            top = skip_range(res, args.keep)
            tj = {"model": args.model_name, "adapters": ads, "fusion": None,
                  "head": None if res["form"] == "peft_lora" else name,
                  "skips": {"min": 0, "max": top, "default": 0}, "labels": res["labels"]}
        with open(os.path.join(d, "task.json"), "w") as f:
            json.dump(tj, f, indent=1)
            f.write("\n")
        res["public_name"] = pub
        if res["form"] == "fusion":
            prune_variants(args, res, d, pub, mdir)
    for res in results.values():   # paths relative to the work directory: the file is committed for the tables
        res["model"] = os.path.relpath(res["model"], args.work)
        if "children" in res:
            res["children"] = [os.path.relpath(c, args.work) for c in res["children"]]
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"registry.py: {len(results)} results, registry in {args.out}")


if __name__ == "__main__":
    main()
