"""Masked-language-model pretraining of a small BERT on the blocks `data.py prep` built (training tooling only).

The encoder is tools/reference/encoder.py's functional `forward` run over trainable tensors keyed by Hugging Face's
BertModel names, so the state dict *is* the checkpoint: `export` writes it as `save_pretrained` writes a BertModel
(config.json with architectures ["BertModel"], model.safetensors in F16).  The MLM head is BertForMaskedLM's
(`cls.predictions.transform.{dense,LayerNorm}` + a decoder tied to the word embeddings + `cls.predictions.bias`);
it is kept in the training state and not exported, as the encoder is all adapterd serves.  No dropout: at this scale
and for a few epochs the model underfits rather than overfits, and dropout costs time.

Choices the measurements in the project's notes drove:
- `torch.set_flush_denormal(True)`: denormal gradients make OpenBLAS's kernels ~3x slower on this CPU.
- bf16 autocast (`--bf16`) on CPUs with AVX512-BF16; master weights and the optimizer stay float32.
- the vocabulary projection is computed for the masked positions only (15% of the tokens).
- AdamW, linear warm-up to the peak learning rate, then cosine decay to 10% of it at `--total-steps`, gradient
  clipping at 1.0, one optimizer step per `--accum` micro-batches: this is what leaves the ~6.8 loss plateau (the
  unigram distribution) that a short constant-rate run sits on.

Seeded and resumable: every `--ckpt-every` steps (and on SIGTERM/SIGINT) the parameters, optimizer, step, epoch and
position in the epoch's permutation go to WORK/pretrain/state.pt (atomically); a restart with the same command
continues from there and gives the same batches and masks.  Masks are drawn from a generator seeded by (seed, micro
step), block order from (seed, epoch).  Every `--export-every` tokens an encoder snapshot is exported to
WORK/pretrain/encoders/tok<M>M for the learning curve; WORK/pretrain/curve.csv holds the losses.
"""

import argparse
import csv
import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import data  # noqa: E402
import encoder as ref  # noqa: E402
import st  # noqa: E402
import wordpiece  # noqa: E402


def build_params(cfg, seed):
    """BertModel tensors (HF key names) with BERT's initialisation: N(0, 0.02) weights and embeddings, zero biases,
    LayerNorm 1/0; plus the MLM head."""
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, (shape, kind) in ref.param_shapes(cfg, pooler=True).items():
        if kind == "ln_w":
            t = torch.ones(shape)
        elif kind in ("ln_b", "b"):
            t = torch.zeros(shape)
        else:
            t = torch.randn(shape, generator=g) * 0.02
        P[name] = t
    P["embeddings.word_embeddings.weight"][wordpiece.PAD].zero_()
    H = cfg.hidden
    P["cls.predictions.transform.dense.weight"] = torch.randn((H, H), generator=g) * 0.02
    P["cls.predictions.transform.dense.bias"] = torch.zeros(H)
    P["cls.predictions.transform.LayerNorm.weight"] = torch.ones(H)
    P["cls.predictions.transform.LayerNorm.bias"] = torch.zeros(H)
    P["cls.predictions.bias"] = torch.zeros(cfg.vocab)
    return {k: torch.nn.Parameter(v.contiguous()) for k, v in P.items()}


def encoder_keys(P):
    return [k for k in P if not k.startswith("cls.")]


def mlm_logits(cfg, P, h):
    """BertForMaskedLM's prediction head on hidden rows h [N, H] -> [N, V]."""
    F = torch.nn.functional
    x = F.linear(h, P["cls.predictions.transform.dense.weight"], P["cls.predictions.transform.dense.bias"])
    x = F.gelu(x).float()   # torch 1.13's CPU autocast leaves layer_norm's inputs as they come
    x = F.layer_norm(x, (cfg.hidden,), P["cls.predictions.transform.LayerNorm.weight"],
                     P["cls.predictions.transform.LayerNorm.bias"], cfg.eps)
    return F.linear(x, P["embeddings.word_embeddings.weight"], P["cls.predictions.bias"])


def mask_batch(ids, vocab, gen, rate=0.15):
    """BERT masking: pick `rate` of the non-special tokens; of those 80% -> [MASK], 10% random, 10% kept.
    Returns (inputs, positions [N] flat indices, targets [N])."""
    special = ids < len(wordpiece.SPECIALS)
    r = torch.rand(ids.shape, generator=gen)
    pick = (r < rate) & ~special
    pos = pick.flatten().nonzero().squeeze(1)
    tgt = ids.flatten()[pos]
    inp = ids.clone().flatten()
    u = torch.rand(pos.shape, generator=gen)
    rnd = torch.randint(len(wordpiece.SPECIALS), vocab, pos.shape, generator=gen)
    inp[pos] = torch.where(u < 0.8, torch.full_like(tgt, wordpiece.MASK), torch.where(u < 0.9, rnd, tgt))
    return inp.view_as(ids), pos, tgt


def mlm_loss(cfg, P, inp, pos, tgt, bf16):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        W = {k: P[k] for k in encoder_keys(P)}
        h, _ = ref.forward(cfg, W, inp, None, None, dtype=torch.float32, fused=True)
        hm = h.reshape(-1, cfg.hidden)[pos]
        logits = mlm_logits(cfg, P, hm)
    logits = logits.float()
    loss = torch.nn.functional.cross_entropy(logits, tgt)
    acc = (logits.argmax(-1) == tgt).float().mean()
    return loss, acc


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, (step - args.warmup) / max(1, args.total_steps - args.warmup))
    lo = args.lr * args.min_lr_frac
    return lo + 0.5 * (args.lr - lo) * (1 + math.cos(math.pi * t))


def export(cfg, P, out_dir, tok_dir, dtype=torch.float16, meta=None):
    """Write the encoder as Hugging Face saves a BertModel, plus the tokenizer files."""
    os.makedirs(out_dir, exist_ok=True)
    T = {k: P[k].detach().to(dtype).contiguous() for k in encoder_keys(P)}
    st.save_file(T, os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
    d = ref.hf_config(cfg, torch_dtype={torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype])
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(d, f, indent=2, sort_keys=True)
        f.write("\n")
    for fn in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(tok_dir, fn), "rb") as a, open(os.path.join(out_dir, fn), "wb") as b:
            b.write(a.read())
    if meta is not None:
        with open(os.path.join(out_dir, "training.json"), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")


def save_state(path, P, opt, prog):
    tmp = path + ".tmp"
    torch.save({"params": {k: v.detach() for k, v in P.items()}, "opt": opt.state_dict(), "prog": prog}, tmp)
    os.replace(tmp, path)


def evaluate(cfg, P, val, args):
    g = torch.Generator().manual_seed(12345)
    tot_l, tot_a, n = 0.0, 0.0, 0
    with torch.no_grad():
        for i in range(0, val.shape[0], args.batch):
            ids = torch.from_numpy(val[i:i + args.batch].astype(np.int64))
            inp, pos, tgt = mask_batch(ids, cfg.vocab, g)
            l, a = mlm_loss(cfg, P, inp, pos, tgt, args.bf16)
            tot_l += l.item() * len(tgt)
            tot_a += a.item() * len(tgt)
            n += len(tgt)
    return tot_l / max(1, n), tot_a / max(1, n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=data.default_work_dir())
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32, help="sequences per micro-batch")
    ap.add_argument("--accum", type=int, default=2, help="micro-batches per optimizer step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--total-steps", type=int, default=10000, help="length of the cosine schedule")
    ap.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps in total")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--export-every", type=float, default=5e6, help="tokens between encoder snapshots")
    ap.add_argument("--export-only", metavar="DIR", help="write the last checkpoint's encoder to DIR and exit")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    out = os.path.join(args.work, "pretrain")
    os.makedirs(out, exist_ok=True)
    if not args.export_only:
        with open(os.path.join(args.work, "pretrain.pid"), "w") as f:
            f.write(f"{os.getpid()}\n")
    tok_dir = os.path.join(args.work, "tokenizer")
    train = np.load(os.path.join(args.work, "train_blocks.npy"), mmap_mode="r")
    val = np.load(os.path.join(args.work, "val_blocks.npy"))
    vocab = len(wordpiece.WordPiece.from_dir(tok_dir).vocab)
    L = train.shape[1]
    cfg = ref.make_cfg("bert", args.hidden, args.layers, args.heads, args.inter, vocab, max_pos=L)
    P = build_params(cfg, args.seed)
    decay = [v for k, v in P.items() if v.dim() >= 2]
    no_decay = [v for k, v in P.items() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.98), eps=1e-6)
    state_path = os.path.join(out, "state.pt")
    prog = {"step": 0, "tokens": 0, "epoch": 0, "pos": 0, "next_export": args.export_every, "seconds": 0.0}
    if os.path.exists(state_path):
        s = torch.load(state_path)
        with torch.no_grad():
            for k, v in s["params"].items():
                P[k].copy_(v)
        opt.load_state_dict(s["opt"])
        prog = s["prog"]
        print(f"pretrain: resumed at step {prog['step']}, {prog['tokens'] / 1e6:.2f}M tokens", flush=True)
    if args.export_only:
        export(cfg, P, args.export_only, tok_dir, meta={"step": prog["step"], "tokens": prog["tokens"],
                                                        "seed": args.seed})
        print(f"pretrain: exported step {prog['step']} to {args.export_only}", flush=True)
        return
    n_params = sum(P[k].numel() for k in encoder_keys(P))
    print(f"pretrain: {cfg}, {n_params / 1e6:.2f}M encoder parameters, {train.shape[0]} blocks of {L}, "
          f"{args.batch}x{args.accum} sequences per step, bf16={args.bf16}, threads={args.threads}", flush=True)

    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    curve_path = os.path.join(out, "curve.csv")
    new_curve = not os.path.exists(curve_path)
    curve = open(curve_path, "a", newline="")
    cw = csv.writer(curve)
    if new_curve:
        cw.writerow(["step", "tokens", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "tokens_per_s"])

    def perm_for(epoch):
        return np.random.default_rng(args.seed * 1000 + epoch).permutation(train.shape[0])

    perm = perm_for(prog["epoch"])
    run_l, run_a, run_n = 0.0, 0.0, 0
    t_log, tok_log = time.time(), 0
    while not stop["now"]:
        if args.steps is not None and prog["step"] >= args.steps:
            break
        lr = lr_at(prog["step"], args)
        for gr in opt.param_groups:
            gr["lr"] = lr
        opt.zero_grad(set_to_none=True)
        for micro in range(args.accum):
            if prog["pos"] + args.batch > train.shape[0]:
                prog["epoch"] += 1
                prog["pos"] = 0
                perm = perm_for(prog["epoch"])
            idx = np.sort(perm[prog["pos"]:prog["pos"] + args.batch])
            prog["pos"] += args.batch
            ids = torch.from_numpy(train[idx].astype(np.int64))
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + prog["step"] * args.accum + micro)
            inp, pos, tgt = mask_batch(ids, cfg.vocab, g)
            loss, acc = mlm_loss(cfg, P, inp, pos, tgt, args.bf16)
            (loss / args.accum).backward()
            run_l += loss.item()
            run_a += acc.item()
            run_n += 1
            prog["tokens"] += ids.numel()
            tok_log += ids.numel()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        prog["step"] += 1
        step = prog["step"]
        if step % args.log_every == 0:
            dt = time.time() - t_log
            prog["seconds"] += dt
            tps = tok_log / dt
            print(f"step {step} tokens {prog['tokens'] / 1e6:.2f}M loss {run_l / run_n:.3f} acc {run_a / run_n:.3f} "
                  f"lr {lr:.2e} {tps:.0f} tok/s epoch {prog['epoch']} ({prog['seconds'] / 3600:.2f} h)", flush=True)
            vl, va = "", ""
            if step % args.eval_every == 0:
                vl, va = evaluate(cfg, P, val, args)
                print(f"eval step {step} tokens {prog['tokens'] / 1e6:.2f}M val_loss {vl:.3f} val_acc {va:.3f}",
                      flush=True)
            cw.writerow([step, prog["tokens"], f"{run_l / run_n:.4f}", f"{run_a / run_n:.4f}",
                         f"{vl:.4f}" if vl != "" else "", f"{va:.4f}" if va != "" else "", f"{lr:.3e}", f"{tps:.0f}"])
            curve.flush()
            run_l, run_a, run_n = 0.0, 0.0, 0
            t_log, tok_log = time.time(), 0
        if prog["tokens"] >= prog["next_export"]:
            name = f"tok{int(round(prog['tokens'] / 1e6)):04d}M"
            export(cfg, P, os.path.join(out, "encoders", name), tok_dir,
                   meta={"step": step, "tokens": prog["tokens"], "seed": args.seed})
            prog["next_export"] += args.export_every
            print(f"pretrain: exported {name}", flush=True)
        if step % args.ckpt_every == 0:
            save_state(state_path, P, opt, prog)
    save_state(state_path, P, opt, prog)
    export(cfg, P, os.path.join(out, "encoders", "latest"), tok_dir,
           meta={"step": prog["step"], "tokens": prog["tokens"], "seed": args.seed})
    print(f"pretrain: stopped at step {prog['step']}, {prog['tokens'] / 1e6:.2f}M tokens; state in {state_path}",
          flush=True)
    curve.close()


if __name__ == "__main__":
    main()
