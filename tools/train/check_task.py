"""Check a saved task against adapterd: `adapterd predict` logits vs the float64 oracle reading the same files.

    check_task.py --model ENC --adapter DIR [--adapter DIR ...] [--fusion DIR --head DIR] --adapterd BIN
                  [--skips 0,1,2] [--text T ...] [--atol 2e-3]

The oracle is tools/reference/adapters.py's `LoadedTask` (its own readers of AdapterHub / PEFT folders, float64),
so this checks the trained files, not the training code.  AdaMix folders (`deepspeed_experts` keys) are merged by
averaging the experts into a temporary folder first, as AdaMix's inference does.  Exit status 1 on any difference
above --atol (adapterd computes in float32; measured differences are ~1e-5).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import adapters as A  # noqa: E402
import check_encoder  # noqa: E402
import st  # noqa: E402
import wordpiece  # noqa: E402


def merged_adamix(folder, tmp):
    """Copy of an AdaMix folder with each projection's experts averaged into the plain key."""
    cfg = A.read_json(os.path.join(folder, "adapter_config.json"))
    if "adamix" not in cfg.get("config", {}):
        return folder
    out = os.path.join(tmp, os.path.basename(os.path.normpath(folder)))
    shutil.copytree(folder, out)
    path = os.path.join(out, "adapter.safetensors")
    sd, _ = st.load_file(path)
    groups, plain = {}, {}
    for k, v in sd.items():
        m = re.match(r"^(.*)deepspeed_experts\.(\d+)\.(weight|bias)$", k)
        if m:
            groups.setdefault(m.group(1) + m.group(3), []).append(v.double())
        else:
            plain[k] = v
    for k, vs in groups.items():
        plain[k] = (sum(vs) / len(vs)).float()
    st.save_file(plain, path)
    del cfg["config"]["adamix"]
    A.write_json(os.path.join(out, "adapter_config.json"), cfg)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", action="append", required=True, help="folder; DIR1,DIR2 is a Stack")
    ap.add_argument("--fusion")
    ap.add_argument("--head")
    ap.add_argument("--adapterd", required=True)
    ap.add_argument("--skips", default="0")
    ap.add_argument("--text", action="append")
    ap.add_argument("--atol", type=float, default=2e-3)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = A.E.cfg_from_hf(json.load(f))
    _, W = A.load_backbone(args.model)
    tok = wordpiece.WordPiece.from_dir(args.model)
    dirs = [d for a in args.adapter for d in a.split(",")]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        task = A.LoadedTask(cfg, [merged_adamix(d, tmp) for d in dirs], args.fusion, args.head)
        for skip in [int(s) for s in args.skips.split(",")]:
            for t in args.text or check_encoder.TEXTS:
                ids = torch.tensor([tok.encode_single(t, cfg.max_pos)])
                h, pooled = A.forward(cfg, W, ids, torch.ones_like(ids), torch.zeros_like(ids), task.setup(skip))
                want = task.head.forward(h, pooled)[0]
                cmd = [args.adapterd, "predict", "--model", args.model, "--skip", str(skip), "--text", t,
                       "--threads", "1"]
                for a in args.adapter:
                    cmd += ["--adapter", a]
                if args.fusion:
                    cmd += ["--fusion", args.fusion]
                if args.head:
                    cmd += ["--head", args.head]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"FAIL adapterd predict: {r.stderr.strip()}")
                    ok = False
                    continue
                got = next(iter(json.loads(r.stdout)["tasks"].values()))
                gl = torch.tensor(got["logits"], dtype=torch.float64)
                d = (gl - want).abs().max().item() if gl.shape == want.shape else float("inf")
                same = gl.shape == want.shape and bool((gl.argmax(-1) == want.argmax(-1)).all())
                good = d <= args.atol and same
                ok = ok and good
                label = got["label"] if "label" in got else " ".join(got.get("labels", []) or [t["label"] for t in got.get("tokens", [])])  # multi-label; tagging: per token
                print(f"{'ok  ' if good else 'FAIL'} skip {skip} max|dlogit| {d:.2e} label {label}: {t!r}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
