#!/usr/bin/python3
"""The PyTorch peer of bench/multitask: T tasks on the same inputs, run AdapterHub-style.

    peer_torch.py --model DIR --tasks DIR [--threads 2] [--omp-wait-policy PASSIVE] [--counts 1,2,4,8,16]
                  [--skips 0,5] [--batch 8] [--len 128] [--reps 3] [--batch-reps 2] [--fusion-ks 8,4,2]
                  [--check] [--long-doc 4096 --long-window 384 --long-stride 128 --long-tasks 8 --long-skip 5]

What AdapterHub `adapters` 1.x does for `model.active_adapters = Parallel(t0, ..., tT-1)` with AdapterDrop
`skip_layers = range(skip)` (methods/bottleneck.py `compose_parallel`, `bottleneck_layer_forward`): every layer
runs the whole backbone on the current batch; the bottleneck sites of skipped layers are plain LN(h + x); at the
first site where the Parallel setup is active (here: layer `skip`, output_adapter, after that layer's FFN), the
batch is replicated T times (`hidden_states.repeat(T, 1, 1)`, `context.adapters_parallelized`), so every later
layer runs its backbone on T x B sequences, and each site applies adapter j to its slice j; the Parallel heads
take their slices. AdapterFusion (`Fuse` of the kept children) computes every child's up-projection, stacks them
(B, S, k, H) and applies the key and value Linear to every child's output, as `BertFusion` does. Pfeiffer
(`seq_bn`) math from tools/reference/adapters.py (the oracle, read from the saved files by its readers), here in
float32 with torch's fused LayerNorm/GELU as HF's modules use them.

Settings as tools/reference/bench_encoder.py gives the encoder peer: float32, torch.inference_mode(),
torch.set_num_threads(N), OpenMP and OpenBLAS limited to N threads before torch loads, OMP_WAIT_POLICY=PASSIVE
by default (idle OpenMP threads otherwise spin against OpenBLAS's pthreads on the same cores), OPENBLAS_CORETYPE
left to the caller. Prints one JSON line per measurement (median ms), like bench_multitask --json.
--check compares the float32 Parallel outputs against the float64 oracle (adapters.forward, one task at a time).
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "..", "tools", "reference")


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--omp-wait-policy", default="PASSIVE", choices=("PASSIVE", "ACTIVE", "inherit"))
    ap.add_argument("--counts", default="1,2,4,8,16")
    ap.add_argument("--skips", default="0,5")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--len", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch-reps", type=int, default=2)
    ap.add_argument("--fusion-ks", default="8,4,2")
    ap.add_argument("--check", action="store_true")
    # bench/long: a document of --long-doc tokens in the server's windows, each task run alone over them
    ap.add_argument("--long-doc", type=int, default=0)
    ap.add_argument("--long-window", type=int, default=384)
    ap.add_argument("--long-stride", type=int, default=128)
    ap.add_argument("--long-tasks", type=int, default=8)
    ap.add_argument("--long-skip", type=int, default=5)
    return ap.parse_args(argv)


def ints(s):
    return [int(x) for x in s.split(",") if x != ""]


def openblas_info():
    for name in ("libopenblas.so.0", "libopenblasp.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return {"openblas_core": lib.openblas_get_corename().decode(),
                    "openblas_threads": lib.openblas_get_num_threads()}
        except (OSError, AttributeError):
            continue
    return {"openblas_core": None}


def main(argv=None):
    a = parse(argv)
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    os.environ["MKL_NUM_THREADS"] = str(a.threads)
    if a.omp_wait_policy != "inherit":
        os.environ["OMP_WAIT_POLICY"] = a.omp_wait_policy
    import torch  # noqa: E402  (after the thread variables)
    sys.path.insert(0, REF)
    import adapters as A  # noqa: E402
    import encoder as E  # noqa: E402
    import st  # noqa: E402

    torch.set_num_threads(a.threads)
    F = torch.nn.functional
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = E.cfg_from_hf(json.load(f))
    W = {k: v.to(torch.float32).contiguous() for k, v in E.canonical_weights(cfg, st.load_dir(a.model)).items()}
    H, L, nH = cfg.hidden, cfg.layers, cfg.heads
    hd = H // nH

    def seq_bn(bn, i):
        c = bn.config
        assert c["original_ln_before"] and c["original_ln_after"] and c["residual_before_ln"] is True \
            and not c["ln_before"] and not c["ln_after"] and not c["use_gating"] and not c["is_parallel"] \
            and not isinstance(c["scaling"], str) and not c["mh_adapter"], "the peer runs the seq_bn preset only"
        p = bn.p[(i, "output_adapter")]
        return (p["down.weight"].contiguous(), p["down.bias"], p["up.weight"].contiguous(), p["up.bias"],
                float(c["scaling"]), c["non_linearity"])

    def load_task(folder):
        name, comps, head = A.read_adapterhub(folder, cfg)
        return {"name": name, "bn": comps[0], "head": head}

    max_t = max(ints(a.counts))
    tasks = [load_task(os.path.join(a.tasks, "task%02d" % j)) for j in range(max_t)]
    for t in tasks:
        t["w"] = [seq_bn(t["bn"], i) if t["bn"].has(i, "output_adapter") else None for i in range(L)]
        t["hw"] = [(w.contiguous(), b) for _, w, b in t["head"].linears]
    fdir = os.path.join(a.tasks, "fusion8")
    children = [load_task(os.path.join(fdir, "adapters", "t%d" % j))["bn"] for j in range(8)]
    fusion = A.read_fusion(os.path.join(fdir, "fusion"), cfg, children)
    fhead = A.read_head(os.path.join(fdir, "head"), cfg)
    fhead_w = [(w.contiguous(), b) for _, w, b in fhead.linears]

    def lw(i, role):
        p = f"encoder.layer.{i}."
        n = dict(q="attention.self.query", k="attention.self.key", v="attention.self.value",
                 o="attention.output.dense", ln1="attention.output.LayerNorm", f1="intermediate.dense",
                 f2="output.dense", ln2="output.LayerNorm")[role]
        return W[p + n + ".weight"], W[p + n + ".bias"]

    def LN(z, role, i):
        w, b = lw(i, role)
        return F.layer_norm(z, (H,), w, b, cfg.eps)

    def attn_block(i, x, add_mask):
        B, S, _ = x.shape

        def heads(t):
            return t.view(B, S, nH, hd).transpose(1, 2)
        q, k, v = (heads(F.linear(x, *lw(i, r))) for r in "qkv")
        s = torch.matmul(q, k.transpose(-1, -2)) / (hd ** 0.5) + add_mask[:, None, None, :]
        ctx = torch.matmul(torch.softmax(s, dim=-1), v).transpose(1, 2).reshape(B, S, H)
        return F.linear(ctx, *lw(i, "o"))

    def act(name, z):
        return E._fused_activation(name, z)

    def bn_apply(wts, h, x, i):
        """Pfeiffer site: residual = h; t = LN(h + x); o = up(act(down(t))) * s + h; LN2(o + x)."""
        wd, bd, wu, bu, s, nl = wts
        t = LN(h + x, "ln2", i)
        up = F.linear(act(nl, F.linear(t, wd, bd)), wu, bu)
        if s != 1.0:
            up = up * s
        return LN(up + h + x, "ln2", i)

    def fuse_apply(kept, h, x, i):
        """compose_fuse (dynamic preset: query/key/value, value_before_softmax, residual after, T = 1)."""
        c = fusion.config
        fp = fusion.p[(i, "output_adapter")]
        last = fusion.adapters[-1]
        t = LN(h + x, "ln2", i)                    # last child's pre_forward: adapter input and query (after LN)
        residual = h
        ups = []
        for j in kept:
            wd, bd, wu, bu, s, nl = seq_bn(fusion.adapters[j], i)
            up = F.linear(act(nl, F.linear(t, wd, bd)), wu, bu)
            ups.append(up * s if s != 1.0 else up)
        U = torch.stack(ups, dim=2)                                  # (B, S, k, H)
        Q = F.linear(t, fp["query.weight"], fp["query.bias"])
        K = F.linear(U, fp["key.weight"], fp["key.bias"])
        V = F.linear(U, fp["value.weight"]) if c["value"] and c["value_before_softmax"] else U
        p = torch.softmax(torch.matmul(Q.unsqueeze(2), K.transpose(-2, -1)).squeeze(2), dim=-1)
        ctx = torch.matmul(p.unsqueeze(2), V).squeeze(2)
        if c["value"] and not c["value_before_softmax"]:
            ctx = F.linear(ctx, fp["value.weight"])
        ctx = ctx + residual
        assert last.config["original_ln_after"]
        return LN(ctx + x, "ln2", i)

    def head_apply(hw, act_name, hidden):
        z = hidden[:, 0]
        for j, (w, b) in enumerate(hw):
            z = F.linear(z, w, b)
            if j < len(hw) - 1:
                z = act(act_name, z) if act_name != "tanh" else torch.tanh(z)
        return z

    def run_parallel(ids, T, skip, sel=None):
        """Parallel(task0..T-1) (or of the tasks sel) with skip_layers = range(skip); returns the list of T logits
        (B, labels)."""
        sel = list(sel) if sel is not None else list(range(T))
        T = len(sel)
        B, S = ids.shape
        x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:S][None] \
            + W["embeddings.token_type_embeddings.weight"][0][None, None]
        x = F.layer_norm(x, (H,), W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], cfg.eps)
        mask = torch.zeros(B, S)
        par = False
        for i in range(L):
            a_ = LN(attn_block(i, x, mask) + x, "ln1", i)
            f = F.linear(act(cfg.act, F.linear(a_, *lw(i, "f1"))), *lw(i, "f2"))
            if i < skip:
                x = LN(f + a_, "ln2", i)
                continue
            if not par:                                  # compose_parallel: replicate at the first active site
                f, a_ = f.repeat(T, 1, 1), a_.repeat(T, 1, 1)
                mask = mask.repeat(T, 1)
                par = True
            x = torch.cat([bn_apply(tasks[t]["w"][i], f[j * B:(j + 1) * B], a_[j * B:(j + 1) * B], i)
                           for j, t in enumerate(sel)])
        if not par:
            x = x.repeat(T, 1, 1)
        return [head_apply(tasks[t]["hw"], tasks[t]["head"].config["activation_function"], x[j * B:(j + 1) * B])
                for j, t in enumerate(sel)]

    def run_fusion(ids, kept, skip):
        B, S = ids.shape
        x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:S][None] \
            + W["embeddings.token_type_embeddings.weight"][0][None, None]
        x = F.layer_norm(x, (H,), W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], cfg.eps)
        mask = torch.zeros(B, S)
        for i in range(L):
            a_ = LN(attn_block(i, x, mask) + x, "ln1", i)
            f = F.linear(act(cfg.act, F.linear(a_, *lw(i, "f1"))), *lw(i, "f2"))
            x = fuse_apply(kept, f, a_, i) if i >= skip and fusion.has(i, "output_adapter") else LN(f + a_, "ln2", i)
        return head_apply(fhead_w, fhead.config["activation_function"], x)

    g = torch.Generator().manual_seed(42)
    ids_all = torch.randint(1000, cfg.vocab, (a.batch, a.len), generator=g)
    ids_all[:, 0], ids_all[:, -1] = 101, 102
    info = {"kind": "setup", "peer": "pytorch-adapterhub-style", "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}
    info.update(openblas_info())
    print(json.dumps(info), flush=True)

    if a.check:
        # float32 Parallel vs the float64 oracle, task by task (2 inputs of 16 tokens, T = 3, skip 5)
        ids = ids_all[:2, :16].clone()
        cfg64 = cfg
        W64 = {k: v.to(torch.float64) for k, v in W.items()}
        with torch.inference_mode():
            got = run_parallel(ids, 3, 5)
            worst = 0.0
            for j in range(3):
                h, pooled = A.forward(cfg64, W64, ids, torch.ones_like(ids), torch.zeros_like(ids),
                                      A.Setup([tasks[j]["bn"]], skip=5))
                ref = tasks[j]["head"].forward(h, pooled)
                worst = max(worst, float((got[j].double() - ref).abs().max()))
            fgot = run_fusion(ids, list(range(8)), 0)
            h, pooled = A.forward(cfg64, W64, ids, torch.ones_like(ids), torch.zeros_like(ids),
                                  A.Setup(fusion=fusion, skip=0))
            fworst = float((fgot.double() - fhead.forward(h, pooled)).abs().max())
        print(json.dumps({"kind": "check", "parallel_vs_oracle_max_abs": worst, "fusion_vs_oracle_max_abs": fworst}),
              flush=True)

    def timeit(fn, reps, warm):
        ts = []
        with torch.inference_mode():
            for r in range(warm + reps):
                t0 = time.perf_counter()
                fn()
                dt = (time.perf_counter() - t0) * 1e3
                if r >= warm:
                    ts.append(dt)
        return statistics.median(ts)

    if a.long_doc:
        # the server's windows of a single text (engine/tokenizer.h eng_tok_plan_text): [CLS] + room tokens + [SEP],
        # consecutive windows sharing --long-stride tokens, the last one shorter; each task alone over all of them
        # (what a pipeline per task does), the full windows as one batch and the last as another
        room, step = a.long_window - 2, a.long_window - 2 - a.long_stride
        nw = 1 if a.long_doc <= room else 1 + -(-(a.long_doc - room) // step)
        last = min(room, a.long_doc - (nw - 1) * step) + 2
        gl = torch.Generator().manual_seed(43)
        full_ids = torch.randint(1000, cfg.vocab, (nw - 1, a.long_window), generator=gl)
        last_ids = torch.randint(1000, cfg.vocab, (1, last), generator=gl)
        for t_ in (full_ids, last_ids):
            t_[:, 0], t_[:, -1] = 101, 102

        def long_run():
            for j in range(a.long_tasks):
                if nw > 1:
                    run_parallel(full_ids, 1, a.long_skip, [j])
                run_parallel(last_ids, 1, a.long_skip, [j])
        ms = timeit(long_run, a.reps, 0)
        print(json.dumps({"kind": "long", "doc_tokens": a.long_doc, "window": a.long_window, "stride": a.long_stride,
                          "windows": nw, "tokens": (nw - 1) * a.long_window + last, "tasks": a.long_tasks,
                          "skip": a.long_skip, "reps": a.reps, "ms": round(ms, 2)}), flush=True)
        return 0

    for skip in ints(a.skips):
        for T in ints(a.counts):
            for wl, n_in, reps, warm in (("latency", 1, a.reps, 1), ("throughput", a.batch, a.batch_reps, 0)):
                ids = ids_all[:n_in]
                ms = timeit(lambda: run_parallel(ids, T, skip), reps, warm)
                print(json.dumps({"kind": "multitask", "workload": wl, "T": T, "skip": skip, "inputs": n_in,
                                  "ms": round(ms, 3)}), flush=True)
    for skip in ints(a.skips):
        for k in ints(a.fusion_ks):
            for wl, n_in, reps, warm in (("latency", 1, a.reps, 1), ("throughput", a.batch, a.batch_reps, 0)):
                ids = ids_all[:n_in]
                kept = list(range(k))
                ms = timeit(lambda: run_fusion(ids, kept, skip), reps, warm)
                print(json.dumps({"kind": "fusion", "workload": wl, "k": k, "n": 8, "skip": skip, "inputs": n_in,
                                  "ms": round(ms, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
