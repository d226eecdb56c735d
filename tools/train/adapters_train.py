"""Train one task on a frozen encoder in one adapter form (or fine-tune the whole encoder), save it as the library
would, and evaluate it (training tooling, never part of the product).

    adapters_train.py --model ENC --task sst2 --form pfeiffer --name sst2 --out DIR [--drop-max 2] [...]

The adapter math is tools/reference/adapters.py's: its classes (Bottleneck, AHLoRA, PeftLoRA, Prefix, Fusion, Head,
HFHead) hold the trainable tensors and its `forward` runs the encoder with them, so what is trained is exactly what
its savers write and its readers (and adapterd) read back.  That module computes in float64 through a module-level
dtype `F64`; training sets it to float32 (and runs under bf16 autocast), which every reader then inherits in this
process only.  Because the classes cast with `.to(F64)`, which returns the tensor itself when the dtype already
matches, their float32 working copies are the trainable leaves.

Forms (`--form`):
  pfeiffer   AdapterHub seq_bn (Pfeiffer), reduction factor 8, + 2-layer tanh classification head
  houlsby    AdapterHub double_seq_bn (Houlsby), reduction factor 16, + head
  parallel   AdapterHub par_bn (He et al.), + head
  lora       AdapterHub LoRA r 8 alpha 16 on q, v + head
  ia3        AdapterHub (IA)^3 on k, v, intermediate + head
  prefix     AdapterHub prefix tuning (30 positions, reparametrised through a 64-wide MLP) + head
  mam        AdapterHub MAM union: prefix tuning + parallel adapter, + head
  pfeiffer_lora  AdapterHub ConfigUnion of seq_bn (as pfeiffer) and LoRA (r --lora-r, alpha 2r) on the attention
             matrices --lora-matrices (default q,k,v): the FFN adapter plus a change to where each token attends
  peft_lora  PEFT LoRA (r --lora-r 8, alpha 2r) on --peft-targets (query, value), classifier in modules_to_save
             (BertForSequenceClassification)
  adamix     AdaMix: seq_bn with 4 experts of the down projection and a shared up projection, one expert picked at
             random per batch and layer (stochastic routing) with a consistency loss between two routes, averaged
             at inference; saved as `deepspeed_experts.<m>` keys + config["adamix"]
  sparse     SparseAdapter: seq_bn at reduction factor 4 trained dense, then pruned by magnitude to --sparsity
             (default 0.8) zeros per matrix and trained on with the mask fixed; zeros are stored as such and
             adapterd keeps such matrices in CSR
  full       full fine-tuning of the encoder + head (the yardstick; not saved)
  fusion     AdapterFusion (dynamic preset) over --children adapter folders (bottlenecks, frozen) + a new head

`--adapter-ln before|after|both` (pfeiffer, houlsby) adds AdapterHub's adapter-internal LayerNorms (`ln_before`,
`ln_after`: `adapter_norm_before` / `adapter_norm_after` keys), trainable, initialised as nn.LayerNorm is (1, 0).
With `before` the zero-initialised adapter still starts as the identity; with `after` it does not (the new
LayerNorm normalises the sublayer's output before the original one).

`--holdout N` (sentence tasks) takes N random training rows out of training and reports accuracy on them beside the
held-out split's (`holdout` in the result JSON): choose between recipes on those, never on the held-out split. SST-2's
training rows are phrases of the same sentences, so its holdout flatters every recipe alike.

Tasks (`--task`): the sentence classification tasks of data.TASKS (AdapterHub's 2-layer tanh classification head
on [CLS]) and `wnut`, WNUT-17 named-entity tagging: BIO tags of six entity types, each word's label on its first word
piece (the other pieces are ignored by the loss and by the evaluation), a 1-layer tagging head on every token as
AdapterHub's add_tagging_head makes it, evaluated by entity F1 under seqeval's default (conlleval) chunk rules on the
WNUT-17 test sentences.

Two stages for a task whose embedding LoRA only helps at skip 0 (`--frozen-adapter DIR --emb-lora R`): the
adapter and head saved in DIR (a robust AdapterDrop run) are read back and frozen, and only the embedding LoRA
trains, at skip 0; the run saves the adapter again unchanged beside OUT-embedding.  Every skip >= 1 is then exactly
that adapter's, and skip 0 adds the vocabulary update on top of it.

`--teacher DIR[,DIR]` distils from a trained task (read as a Stack, run at skip 0, frozen) at every skip the student
trains: (1 - a) cross-entropy + a T^2 KL(teacher || student), a = --distill, T = --temperature.  `--leave-out I,J`
(pfeiffer, houlsby) leaves layers without the adapter (AdapterHub's leave_out).

Robust AdapterDrop (`--drop-max K`): each batch runs with the adapters of layers 0..s-1 dropped, s uniform in
0..K, so one adapter serves every skip 0..K (Rücklé et al., 2021).  The result JSON holds PyTorch accuracy and
macro-F1 on the task's held-out split at every skip 0..--eval-skips.
"""

import argparse
import collections
import json
import math
import os
import random
import shutil
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import adapters as A  # noqa: E402
import data  # noqa: E402
import encoder as E  # noqa: E402
import st  # noqa: E402
import tagging  # noqa: E402
import wordpiece  # noqa: E402

A.F64 = torch.float32   # train and evaluate in float32 (see the module comment)

AH_FORMS = ("pfeiffer", "pfeiffer_lora", "houlsby", "parallel", "lora", "ia3", "prefix", "mam", "adamix", "sparse")
TAGGING = ("wnut",)


# ---------------------------------------------------------------------------------------------------------------
# Data

def load_split(data_dir, task, split, tok, max_len, limit=None, seed=0):
    tr, ev, labels = data.TASKS[task]
    rows = data.read_tsv(data.ds(data_dir, tr if split == "train" else ev))
    if limit and len(rows) > limit:
        rng = random.Random(seed)
        rows = rng.sample(rows, limit)
    lid = {l: i for i, l in enumerate(labels)}
    return [(tok.encode_single(t, max_len), lid[l]) for t, l in rows], labels


def load_tagging(data_dir, split, tok, max_len, limit=None, seed=0):
    """WNUT-17 sentences as (ids, token labels, first-piece position of each word or None, gold word tags).  A word's
    pieces are the word pieces of its pre-tokens; its label goes on the first piece and the others get -100 (ignored),
    as token classification is usually trained (label_all_tokens off).  A sentence longer than max_len pieces is cut
    at a word boundary; the words cut off (and the rare word that normalizes to nothing) have no position and count
    as predicted O."""
    rel = data.WNUT_TRAIN if split == "train" else data.WNUT_TEST
    sents = data.read_conll(data.ds(data_dir, rel))
    if limit and len(sents) > limit:
        sents = random.Random(seed).sample(sents, limit)
    return tag_rows(sents, tok, max_len), list(data.WNUT_LABELS)


def tag_rows(sents, tok, max_len):
    """load_tagging's rows of [(words, tags)] (tags may be None: no labels)."""
    lid = {l: i for i, l in enumerate(data.WNUT_LABELS)}
    rows = []
    for words, tags in sents:
        ids, labs, first, full = [wordpiece.CLS], [-100], [], False
        for w, t in zip(words, tags or ["O"] * len(words)):
            pieces = [p for pt in wordpiece.pre_tokenize(w) for p in tok.word_ids(pt)]
            full = full or len(ids) + len(pieces) > max_len - 1
            if full or not pieces:
                first.append(None)
                continue
            first.append(len(ids))
            ids += pieces
            labs += [lid[t]] + [-100] * (len(pieces) - 1)
        rows.append((ids + [wordpiece.SEP], labs + [-100], first, tags))
    return rows


def batches(rows, bs, shuffle, rng):
    """Length-bucketed batches: rows sorted by length within windows of 50 batches, batch order shuffled."""
    idx = list(range(len(rows)))
    if shuffle:
        rng.shuffle(idx)
    out = []
    win = bs * 50
    for w in range(0, len(idx), win):
        chunk = sorted(idx[w:w + win], key=lambda j: len(rows[j][0]))
        out += [chunk[i:i + bs] for i in range(0, len(chunk), bs)]
    if shuffle:
        rng.shuffle(out)
    return out


def collate(rows, b):
    T = max(len(rows[j][0]) for j in b)
    ids = torch.zeros((len(b), T), dtype=torch.int64)
    mask = torch.zeros((len(b), T), dtype=torch.int64)
    for r, j in enumerate(b):
        s = rows[j][0]
        ids[r, :len(s)] = torch.tensor(s)
        mask[r, :len(s)] = 1
    if isinstance(rows[b[0]][1], list):           # tagging: one label per token, -100 where none
        y = torch.full((len(b), T), -100, dtype=torch.int64)
        for r, j in enumerate(b):
            y[r, :len(rows[j][1])] = torch.tensor(rows[j][1])
    else:
        y = torch.tensor([rows[j][1] for j in b])
    return ids, mask, y


# ---------------------------------------------------------------------------------------------------------------
# Model pieces

def load_encoder(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = E.cfg_from_hf(json.load(f))
    W = {k: v.to(torch.float32) for k, v in E.canonical_weights(cfg, st.load_dir(model_dir)).items()}
    return cfg, W


def leaves(obj):
    """Every tensor an oracle object holds, as (dict, key) slots."""
    out = []
    p = getattr(obj, "p", None)
    if isinstance(p, dict):
        for k, t in p.items():
            if isinstance(t, dict):
                out += [(t, n) for n in t]
            else:
                out.append((p, k))
    return out


def make_trainable(objs):
    params = []
    for o in objs:
        for d, k in leaves(o):
            d[k] = d[k].detach().clone().requires_grad_(True)
            params.append(d[k])
        if hasattr(o, "_p64"):                       # the float32 working copies are the same tensors
            o._p64 = {k: dict(t) for k, t in o.p.items()}
        if isinstance(o, A.Prefix):
            for i, (w, b) in list(o.gates.items()):
                w, b = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
                o.gates[i] = (w, b)
                params += [w, b]
    return params


def head_trainable(head):
    params = []
    if isinstance(head, A.Head):
        lins = []
        for idx, w, b in head.linears:
            w = w.clone().requires_grad_(True)
            b = None if b is None else b.clone().requires_grad_(True)
            lins.append((idx, w, b))
            params += [w] + ([b] if b is not None else [])
        head.linears = lins
    else:
        for k in head.t:
            head.t[k] = head.t[k].clone().requires_grad_(True)
            params.append(head.t[k])
    return params


class AdaMix:
    """AdaMix as its authors' recipe runs it (microsoft/AdaMix, `--sharing_down 0 --sharing_up 1
    --use_consistency_loss 1 --inference_level 3`): M experts of the down projection of a seq_bn adapter, all
    starting from the same initialisation, and one up projection shared by them. Training routes each batch through
    one random expert per layer (stochastic routing), twice, and adds a consistency loss between the two routes
    (`consistency`); inference, and the saved merge, use the experts' average. Without the shared up projection and
    the consistency loss the experts drift apart and their average is no adapter at all (measured on SST-2: 64.1%
    against 75.1% for one Pfeiffer adapter)."""

    def __init__(self, bn, m, rng):
        self.bn, self.m, self.rng = bn, m, rng
        self.experts = {}
        for key, t in bn.p.items():
            for part in ("weight", "bias"):
                self.experts[(key, f"down.{part}")] = [t[f"down.{part}"].detach().clone().requires_grad_(True)
                                                       for _ in range(m)]
                self.experts[(key, f"up.{part}")] = [t[f"up.{part}"]]      # shared: make_trainable made it a leaf

    def params(self):
        return [e for es in self.experts.values() for e in es]

    def route(self, train):
        for (key, n), es in self.experts.items():
            self.bn._p64[key][n] = es[self.rng.randrange(len(es))] if train else torch.stack(es).mean(0)

    def merged(self):
        with torch.no_grad():
            for (key, n), es in self.experts.items():
                self.bn.p[key][n] = torch.stack(es).mean(0)

    @staticmethod
    def consistency(a, b):
        """The symmetric KL divergence between the label distributions of two routes (AdaMix's consistency
        regularisation), per row, averaged."""
        la, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
        kl = torch.nn.functional.kl_div
        return 0.5 * (kl(la, lb, log_target=True, reduction="batchmean") +
                      kl(lb, la, log_target=True, reduction="batchmean"))

    def state_dict(self, arch):
        """The MixtureSoup layout: `<proj>.deepspeed_experts.<m>.<param>`; the shared up projection is a soup of
        one expert, as the AdaMix code saves it with --sharing_up 1."""
        sd = self.bn.state_dict(arch)
        out = collections.OrderedDict()
        for k, v in sd.items():
            base = None
            for p, n in (("adapter_down.0.", "down"), ("adapter_up.", "up")):
                i = k.find(p)
                if i >= 0 and k[i + len(p):] in ("weight", "bias"):
                    base = (k[:i + len(p)], k[i + len(p):], n)
            if base is None:
                out[k] = v
                continue
            key = self._key_for(k)
            for m, e in enumerate(self.experts[(key, f"{base[2]}.{base[1]}")]):
                out[f"{base[0]}deepspeed_experts.{m}.{base[1]}"] = e.detach()
        return out

    def _key_for(self, k):
        i = int(k.split("layer.")[1].split(".")[0])
        loc = "mh_adapter" if ".attention.output.adapters." in k else "output_adapter"
        return (i, loc)


class Task:
    """Everything trainable for one run: the Setup pieces, the head, and how to save them."""

    def __init__(self, args, cfg, W, labels, rng):
        self.args, self.cfg, self.W, self.labels = args, cfg, W, labels
        f = args.form
        g = A.Rng(args.seed)
        name = args.name
        self.bn, self.linear, self.prefixes, self.fusion, self.adamix = [], [], [], None, None
        self.union = None
        self.params = []
        n = len(labels)
        ln = dict(ln_before=args.adapter_ln in ("before", "both"), ln_after=args.adapter_ln in ("after", "both"))
        if args.leave_out:
            if f not in ("pfeiffer", "houlsby"):
                raise SystemExit(f"--leave-out: form {f} is not wired for it (pfeiffer, houlsby)")
            ln["leave_out"] = [int(i) for i in args.leave_out.split(",")]
        if args.adapter_ln != "none" and f not in ("pfeiffer", "pfeiffer_lora", "houlsby"):
            raise SystemExit(f"--adapter-ln: form {f} is not wired for it (pfeiffer, pfeiffer_lora, houlsby)")
        if args.save_f16 and (f not in AH_FORMS or f == "adamix"):
            raise SystemExit(f"--save-f16: form {f} is not wired for it")
        if f in ("pfeiffer", "pfeiffer_lora"):
            self.bn = [A.Bottleneck(name, A.bn_config("seq_bn", reduction_factor=args.reduction or 8, **ln), cfg, g,
                                    zero=True)]
            if f == "pfeiffer_lora":
                r = args.lora_r
                self.linear = [A.AHLoRA(name, A.lora_config(r=r, alpha=2 * r, attn_matrices=args.lora_matrices.split(",")),
                                        cfg, g, zero=True)]
                self.union = self.bn + self.linear
        elif f == "houlsby":
            self.bn = [A.Bottleneck(name, A.bn_config("double_seq_bn", reduction_factor=args.reduction or 16, **ln),
                                    cfg, g, zero=True)]
        elif f == "parallel":
            self.bn = [A.Bottleneck(name, A.bn_config("par_bn", reduction_factor=4), cfg, g, zero=True)]
        elif f in ("adamix", "sparse"):
            self.bn = [A.Bottleneck(name, A.bn_config("seq_bn", reduction_factor=8 if f == "adamix" else 4), cfg, g,
                                    zero=True)]
        elif f == "lora":
            self.linear = [A.AHLoRA(name, A.lora_config(r=8, alpha=16), cfg, g, zero=True)]
        elif f == "ia3":
            self.linear = [A.AHLoRA(name, A.ia3_config(), cfg, g, zero=True)]
        elif f == "prefix":
            self.prefixes = [A.Prefix(name, A.prefix_config(prefix_length=30, bottleneck_size=64), cfg, g, zero=True)]
        elif f == "mam":
            self.prefixes = [A.Prefix(name, A.prefix_config(prefix_length=30, bottleneck_size=64), cfg, g, zero=True)]
            self.bn = [A.Bottleneck(name, A.bn_config("par_bn", reduction_factor=4), cfg, g, zero=True)]
            self.union = self.prefixes + self.bn
        elif f == "peft_lora":
            c = A.peft_config(cfg.arch, target_modules=args.peft_targets.split(","), r=args.lora_r,
                              lora_alpha=2 * args.lora_r, base_model=args.base_model_name)
            c["inference_mode"] = True
            self.linear = [A.PeftLoRA(name, c, cfg, g, zero=True)]
        elif f == "fusion":
            kids = []
            for d in args.children.split(","):
                _, comps, _ = A.read_adapterhub(d, cfg)
                kids += [o for o in comps if isinstance(o, A.Bottleneck)]
            self.children = args.children.split(",")
            self.fusion = A.Fusion(kids, "dynamic", cfg, g, strength=0.1)
            self.fusion.p = {k: dict(t) for k, t in self.fusion.p.items()}
            self.params += make_trainable([self.fusion])
        elif f == "full":
            def trains(k):
                emb = k.startswith("embeddings.")
                return not (emb and args.freeze_embeddings) and (emb or not args.only_embeddings)
            self.W = {k: v.clone().requires_grad_(trains(k)) for k, v in W.items()}
            self.params += [v for v in self.W.values() if v.requires_grad]
        else:
            raise SystemExit(f"unknown form {f}")
        for bn in self.bn:                          # adapter-internal LayerNorms start as nn.LayerNorm does
            for t in bn.p.values():
                for k in ("ln_before", "ln_after"):
                    if k + ".weight" in t:
                        t[k + ".weight"].fill_(1.0)
                        t[k + ".bias"].zero_()
        self.params += make_trainable(self.bn + self.linear + self.prefixes)
        if f == "adamix":
            self.adamix = AdaMix(self.bn[0], args.experts, rng)
            self.params = self.adamix.params()
        if args.task in TAGGING:
            if f in ("peft_lora", "fusion", "full"):
                raise SystemExit(f"--task {args.task}: form {f} is not wired for tagging")
            self.head = A.Head(args.head_name or name, "tagging", cfg, g, num_labels=n, layers=1,
                               activation="tanh", labels=labels)
        elif f == "peft_lora":
            self.head = A.HFHead(cfg, g, num_labels=n)
            self.head.t["classifier.weight"] = torch.randn((n, cfg.hidden), generator=g.g) * 0.02
            self.head.t["classifier.bias"] = torch.zeros(n)
        else:
            self.head = A.Head(args.head_name or name, "classification", cfg, g, num_labels=n, layers=2,
                               activation="tanh", labels=labels)
        self.params += head_trainable(self.head)
        self.mask = None
        if args.frozen_adapter:
            # the adapter and head saved in that folder, frozen: only the embedding LoRA below trains
            if f not in ("pfeiffer", "houlsby", "parallel"):
                raise SystemExit(f"--frozen-adapter: form {f} is not wired for it")
            if not args.emb_lora:
                raise SystemExit("--frozen-adapter trains the embedding LoRA only: give --emb-lora R")
            _, comps, head = A.read_adapterhub(args.frozen_adapter, cfg)
            if len(comps) != 1 or not isinstance(comps[0], A.Bottleneck):
                raise SystemExit(f"--frozen-adapter {args.frozen_adapter}: not one bottleneck adapter")
            if head is None or A.head_labels(head) != list(labels):
                raise SystemExit(f"--frozen-adapter {args.frozen_adapter}: no head, or not the labels {labels}")
            self.bn, self.linear, self.prefixes, self.union = comps, [], [], None
            self.head, self.params = head, []
            self.frozen_params = sum(d[k].numel() for d, k in leaves(comps[0])) + \
                sum(w.numel() + (0 if b is None else b.numel()) for _, w, b in head.linears)
        # --emb-lora: PEFT's LoRA on the word embeddings (the reference's PeftLoRA computes and saves it); for
        # peft_lora in the task's own PEFT folder, else in a headless one of its own (saved as OUT-embedding)
        self.emb_lora = None
        if args.emb_lora:
            r = args.emb_lora
            if f == "peft_lora":
                if r != args.lora_r:
                    raise SystemExit("--emb-lora with peft_lora: one PEFT folder has one rank (give --lora-r the same)")
                pe = self.linear[0]
                pe.config["target_modules"] = list(pe.config["target_modules"]) + ["word_embeddings"]
            else:
                conf = A.peft_config(cfg.arch, "LORA", ["word_embeddings"], r=r, lora_alpha=2 * r,
                                     base_model=args.base_model_name, task_type="FEATURE_EXTRACTION")
                conf["modules_to_save"] = None
                pe = A.PeftLoRA(name + "-embedding", conf, cfg, A.Rng(0))
            # PEFT's initialisation: A zeros, B normal; scaling alpha / r, the folder's (2)
            pe.emb = {"A": torch.zeros(r, cfg.vocab, requires_grad=True),
                      "B": torch.randn((cfg.hidden, r), generator=g.g).requires_grad_(True)}
            pe.emb_scaling = pe.scaling
            self.params += list(pe.emb.values())
            self.emb_lora = pe

    def setup(self, skip, train):
        for p in self.prefixes:
            p.kv = p._compute()
        if self.adamix is not None:
            self.adamix.route(train)
        own = [self.emb_lora] if self.emb_lora is not None and self.emb_lora not in self.linear else []
        return A.Setup(self.bn, self.fusion, self.linear + own, self.prefixes, skip)

    def logits(self, ids, mask, skip, train):
        A.DROPOUT = self.args.dropout if train else 0.0
        s = self.setup(skip, train)
        h, pooled = A.forward(self.cfg, self.W, ids, mask, torch.zeros_like(ids), s)
        return self.head.forward(h, pooled)

    def n_trainable(self):
        return sum(p.numel() for p in self.params)

    # -- sparse --
    def prune(self, sparsity):
        masks = []
        with torch.no_grad():
            for key, t in self.bn[0].p.items():
                for n in ("down.weight", "up.weight"):
                    w = t[n]
                    k = int(sparsity * w.numel())
                    thr = w.abs().flatten().kthvalue(k).values if k > 0 else -1.0
                    m = (w.abs() > thr).to(w.dtype)
                    w.mul_(m)
                    masks.append((w, m))
        self.mask = masks

    def apply_mask(self):
        if self.mask:
            with torch.no_grad():
                for w, m in self.mask:
                    w.mul_(m)

    # -- saving --
    def save(self, out):
        args, cfg = self.args, self.cfg
        f = args.form
        mn = args.base_model_name
        if os.path.exists(out):
            shutil.rmtree(out)
        if f == "full":
            return
        if self.emb_lora is not None:               # already rounded (round_f16): the cast is exact
            e = self.emb_lora
            e.emb = {k: (v.detach().half() if args.save_f16 else v.detach()) for k, v in e.emb.items()}
            if f != "peft_lora":
                shutil.rmtree(out + "-embedding", ignore_errors=True)
                A.save_peft(out + "-embedding", cfg, e)
        if f == "peft_lora":
            pe = self.linear[0]
            pe.head = {k: v.detach() for k, v in self.head.t.items()}
            pe.config["base_model_name_or_path"] = mn
            A.save_peft(out, cfg, pe)
            return
        self.detach_all()
        if f == "fusion":
            A.save_fusion(os.path.join(out, "fusion"), cfg, self.fusion, mn, fmt="bin")
            A.save_head(os.path.join(out, "head"), cfg, self.head, mn, fmt="bin")
            return
        fmt = args.fmt
        if f == "adamix":
            a = self.bn[0]
            env = A.envelope(cfg, cfg.arch, a.name, dict(a.config, adamix={"num_experts": args.experts,
                                                                          "merge": "average"}), mn)
            os.makedirs(out, exist_ok=True)
            A.write_json(os.path.join(out, "adapter_config.json"), env)
            sd = self.adamix.state_dict(cfg.arch)
            st.save_file(dict(sd), os.path.join(out, "adapter.safetensors"))
            A.save_head(out, cfg, self.head, mn, fmt="safetensors")
            return
        if args.save_f16:                           # already rounded (round_f16): the cast is exact
            for o in self.bn + self.linear + self.prefixes:
                for d, k in leaves(o):
                    d[k] = d[k].half()
        adapter = (self.bn + self.linear + self.prefixes)[0]
        A.save_adapterhub(out, cfg, adapter, mn, fmt=fmt, head=self.head, union_children=self.union)

    def round_f16(self):
        """--save-f16: the adapter's tensors rounded to float16 before the evaluation, so that the figures are those
        of the saved file (as `save_adapter` writes a model loaded in float16)."""
        with torch.no_grad():
            for o in self.bn + self.linear + self.prefixes:
                for d, k in leaves(o):
                    d[k].copy_(d[k].half().float())
            for t in (self.emb_lora.emb.values() if self.emb_lora is not None else ()):
                t.copy_(t.half().float())

    def detach_all(self):
        for o in self.bn + self.linear + self.prefixes + ([self.fusion] if self.fusion else []):
            for d, k in leaves(o):
                d[k] = d[k].detach()
            if isinstance(o, A.Prefix):
                o.gates = {i: (w.detach(), b.detach()) for i, (w, b) in o.gates.items()}
        if isinstance(self.head, A.Head):
            self.head.linears = [(i, w.detach(), None if b is None else b.detach()) for i, w, b in self.head.linears]


# ---------------------------------------------------------------------------------------------------------------
# Metrics

def metrics(pred, gold, n):
    acc = sum(int(p == g) for p, g in zip(pred, gold)) / max(1, len(gold))
    f1s = []
    for c in range(n):
        tp = sum(1 for p, g in zip(pred, gold) if p == c and g == c)
        fp = sum(1 for p, g in zip(pred, gold) if p == c and g != c)
        fn = sum(1 for p, g in zip(pred, gold) if p != c and g == c)
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return acc, sum(f1s) / n


def word_tags(row, pred, labels):
    """Predicted tag of each word of a tagging row: its first piece's, O when it has none."""
    return [labels[pred[pos]] if pos is not None else "O" for pos in row[2]]


def evaluate(task, rows, skip, bs=64):
    pred = [None] * len(rows)
    with torch.no_grad():
        for b in batches(rows, bs, False, None):
            ids, mask, _ = collate(rows, b)
            lg = task.logits(ids, mask, skip, False)
            for j, p in zip(b, lg.argmax(-1).tolist()):
                pred[j] = p
    return pred


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="encoder directory (HF BertModel)")
    ap.add_argument("--data", default=data.default_data_dir())
    ap.add_argument("--task", required=True, choices=sorted(data.TASKS) + list(TAGGING))
    ap.add_argument("--form", required=True)
    ap.add_argument("--name", required=True, help="adapter (and head) name")
    ap.add_argument("--head-name", default=None)
    ap.add_argument("--out", required=True, help="folder written as the library saves it (replaced)")
    ap.add_argument("--result", default=None, help="result JSON (default OUT.json)")
    ap.add_argument("--children", default=None, help="fusion: comma-separated adapter folders")
    ap.add_argument("--base-model-name", default="adapterd-bert-small-uncased")
    ap.add_argument("--fmt", default="safetensors", choices=("bin", "safetensors"))
    ap.add_argument("--drop-max", type=int, default=0, help="robust AdapterDrop: random skip 0..K per batch")
    ap.add_argument("--eval-skips", type=int, default=None, help="evaluate skips 0..N (default drop-max)")
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--max-train", type=int, default=20000)
    ap.add_argument("--max-eval", type=int, default=None)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--reduction", type=int, default=None,
                    help="pfeiffer, houlsby: bottleneck reduction factor (default 8, 16)")
    ap.add_argument("--holdout", type=int, default=0,
                    help="hold N training rows out of training and report accuracy on them too (choosing recipes)")
    ap.add_argument("--adapter-ln", default="none", choices=("none", "before", "after", "both"),
                    help="pfeiffer, houlsby: trainable LayerNorms inside the adapter (AdapterHub ln_before / ln_after)")
    ap.add_argument("--leave-out", default=None, metavar="I,J",
                    help="pfeiffer, houlsby: layers without the adapter (AdapterHub's leave_out)")
    ap.add_argument("--lora-r", type=int, default=8, help="pfeiffer_lora, peft_lora: LoRA rank (alpha is twice it)")
    ap.add_argument("--peft-targets", default="query,value",
                    help="peft_lora: target_modules (PEFT's names: query, key, value, dense, ...)")
    ap.add_argument("--lora-matrices", default="q,k,v", help="pfeiffer_lora: attention matrices LoRA adapts")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="training only: the frozen backbone's hidden and attention dropout (BERT's 0.1), as under "
                         "model.train(); also the head's input")
    ap.add_argument("--freeze-embeddings", action="store_true",
                    help="full: fine-tune every layer but keep the embeddings frozen (what adapters cannot change)")
    ap.add_argument("--only-embeddings", action="store_true",
                    help="full: fine-tune only the embeddings (and the head), every layer frozen")
    ap.add_argument("--emb-lora", type=int, default=0,
                    help="PEFT's LoRA of rank R (alpha 2R) on the word embeddings beside the adapter, active at skip 0 "
                         "only (AdapterDrop drops it first); saved as a PEFT folder OUT-embedding (peft_lora: in "
                         "the same folder)")
    ap.add_argument("--frozen-adapter", default=None, metavar="DIR",
                    help="with --emb-lora: train only the embedding LoRA, at skip 0, beside the adapter and head saved "
                         "in DIR (AdapterHub, kept frozen and saved again): every skip >= 1 stays that adapter's")
    ap.add_argument("--teacher", default=None, metavar="DIR[,DIR]",
                    help="distil from this trained task (its folders as a Stack, run at skip 0, frozen): the loss is "
                         "(1 - a) * cross-entropy + a * T^2 * KL(teacher || student) at temperature T")
    ap.add_argument("--distill", type=float, default=0.5, help="--teacher: the weight a of the teacher's term")
    ap.add_argument("--temperature", type=float, default=2.0, help="--teacher: T")
    ap.add_argument("--save-f16", action="store_true",
                    help="AdapterHub forms (safetensors): store the adapter's weights in float16 (the head stays float32)")
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--consistency", type=float, default=1.0, help="adamix: weight of the consistency loss")
    ap.add_argument("--sparsity", type=float, default=0.8)
    ap.add_argument("--o-weight", type=float, default=1.0,
                    help="tagging: loss weight of the O tag (below 1 trades precision for recall on rare entities)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.time()
    cfg, W = load_encoder(args.model)
    tok = wordpiece.WordPiece.from_dir(args.model)
    if args.task in TAGGING:
        train, labels = load_tagging(args.data, "train", tok, args.max_len, args.max_train, args.seed)
        dev, _ = load_tagging(args.data, "eval", tok, args.max_len, args.max_eval, args.seed)
    else:
        train, labels = load_split(args.data, args.task, "train", tok, args.max_len, args.max_train, args.seed)
        dev, _ = load_split(args.data, args.task, "eval", tok, args.max_len, args.max_eval, args.seed)
    hold = []
    if args.holdout:
        # rows taken out of training to choose between recipes on, so that the choice never sees the held-out split
        if args.task in TAGGING or args.holdout >= len(train):
            raise SystemExit(f"--holdout {args.holdout}: only for sentence tasks, and fewer than the training rows")
        random.Random(args.seed + 1).shuffle(train)
        train, hold = train[:-args.holdout], train[-args.holdout:]
    task = Task(args, cfg, W, labels, rng)
    teacher = None
    if args.teacher:
        if args.task in TAGGING:
            raise SystemExit("--teacher: sentence tasks only")
        teacher = A.LoadedTask(cfg, args.teacher.split(","))
        if teacher.labels != list(labels):
            raise SystemExit(f"--teacher {args.teacher}: labels {teacher.labels}, the task's are {labels}")
    # default rates: 1e-3 for bottleneck and LoRA adapters. On the plateau encoder of session 4, 2e-3 did better
    # (1e-3 left SST-2 at train loss 0.53 after an epoch); on the annealed one of session 5, 2e-3 stalls: emotion
    # (4 epochs) 56.1% at 2e-3 against 66.1% at 1e-3, SST-2 70.8% against 72.5%. Higher rates for the forms with
    # few parameters far from the output, 1e-4 for full fine-tuning.
    lr = args.lr or {"full": 1e-4, "prefix": 5e-3, "ia3": 5e-3}.get(args.form, 1e-3)
    opt = torch.optim.AdamW(task.params, lr=lr, weight_decay=0.01 if args.form == "full" else 0.0)
    n_steps = max(1, int(math.ceil(len(train) / args.batch) * args.epochs))
    warm = max(1, n_steps // 16)
    prune_at = n_steps // 2 if args.form == "sparse" else None
    cw = None
    if args.task in TAGGING and args.o_weight != 1.0:
        cw = torch.ones(len(labels))
        cw[labels.index("O")] = args.o_weight
    print(f"train {args.task}/{args.form} '{args.name}': {len(train)} rows, {n_steps} steps of {args.batch}, lr {lr}, "
          f"drop-max {args.drop_max}, {task.n_trainable()} trainable parameters", flush=True)
    step, seen_tok = 0, 0
    run_l, run_n = 0.0, 0
    done = False
    while not done:
        for b in batches(train, args.batch, True, rng):
            if step >= n_steps:
                done = True
                break
            if prune_at is not None and step == prune_at:
                task.prune(args.sparsity)
                print(f"pruned to {args.sparsity:.0%} zeros at step {step}", flush=True)
            for gr in opt.param_groups:
                gr["lr"] = lr * min((step + 1) / warm, max(0.0, (n_steps - step) / max(1, n_steps - warm)))
            ids, mask, y = collate(train, b)
            skip = rng.randint(0, args.drop_max) if args.drop_max and not args.frozen_adapter else 0
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                lg = task.logits(ids, mask, skip, True)
            loss = torch.nn.functional.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), y.reshape(-1),
                                                     weight=cw, ignore_index=-100)
            if task.adamix is not None:
                # a second route through other experts: its loss, and the consistency between the two
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                    lg2 = task.logits(ids, mask, skip, True)
                loss2 = torch.nn.functional.cross_entropy(lg2.float().reshape(-1, lg2.shape[-1]), y.reshape(-1),
                                                          weight=cw, ignore_index=-100)
                loss = 0.5 * (loss + loss2) + args.consistency * AdaMix.consistency(
                    lg.float().reshape(-1, lg.shape[-1]), lg2.float().reshape(-1, lg2.shape[-1]))
            if teacher is not None:
                with torch.no_grad():
                    A.DROPOUT = 0.0                 # the teacher as it serves
                    h, pooled = A.forward(cfg, W, ids, mask, torch.zeros_like(ids), teacher.setup(0))
                    tl = teacher.head.forward(h, pooled).float()
                T = args.temperature
                kl = torch.nn.functional.kl_div(torch.log_softmax(lg.float() / T, -1), torch.log_softmax(tl / T, -1),
                                                log_target=True, reduction="batchmean")
                loss = (1 - args.distill) * loss + args.distill * T * T * kl
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(task.params, 1.0)
            opt.step()
            task.apply_mask()
            step += 1
            seen_tok += int(mask.sum())
            run_l += loss.item()
            run_n += 1
            if step % 50 == 0 or step == n_steps:
                dt = time.time() - t0
                print(f"  step {step}/{n_steps} loss {run_l / run_n:.4f} {seen_tok / dt:.0f} tok/s {dt:.0f} s",
                      flush=True)
                run_l, run_n = 0.0, 0
    if task.adamix is not None:
        task.adamix.merged()
    if args.save_f16:
        task.round_f16()
    train_s = time.time() - t0
    res = {"task": args.task, "form": args.form, "name": args.name, "model": os.path.abspath(args.model),
           "drop_max": args.drop_max, "epochs": args.epochs, "train_rows": len(train), "eval_rows": len(dev),
           "trainable_params": task.n_trainable(), "train_seconds": round(train_s, 1), "lr": lr,
           "labels": labels, "seed": args.seed, "skips": {}}
    if cw is not None:
        res["o_weight"] = args.o_weight
    if args.form == "fusion":
        res["children"] = [os.path.abspath(c) for c in args.children.split(",")]
    if args.emb_lora and args.form != "peft_lora":
        res["embedding_lora"] = {"r": args.emb_lora, "folder": os.path.basename(args.out.rstrip("/")) + "-embedding"}
    if teacher is not None:
        res["teacher"] = {"folders": [os.path.basename(os.path.normpath(d)) for d in args.teacher.split(",")],
                          "weight": args.distill, "temperature": args.temperature}
    if args.frozen_adapter:
        res["frozen_adapter"] = os.path.basename(os.path.normpath(args.frozen_adapter))
        res["frozen_params"] = task.frozen_params
    if task.mask:
        z = sum(int((w == 0).sum()) for w, _ in task.mask)
        res["sparsity"] = z / sum(w.numel() for w, _ in task.mask)
    gold = [r[1] for r in dev]
    top = args.eval_skips if args.eval_skips is not None else args.drop_max
    for s in range(0, top + 1):
        pred = evaluate(task, dev, s)
        if args.task in TAGGING:
            m = tagging.entity_metrics([word_tags(r, p, labels) for r, p in zip(dev, pred)], [r[3] for r in dev])
            res["skips"][str(s)] = m
            print(f"eval {args.task}/{args.form} skip {s}: entity F1 {m['entity_f1']:.4f} (P {m['entity_precision']:.4f}"
                  f" R {m['entity_recall']:.4f}, {m['entities_pred']} predicted, {m['entities_gold']} gold) "
                  f"word accuracy {m['accuracy']:.4f}", flush=True)
            continue
        acc, f1 = metrics(pred, gold, len(labels))
        res["skips"][str(s)] = {"accuracy": acc, "macro_f1": f1}
        print(f"eval {args.task}/{args.form} skip {s}: accuracy {acc:.4f} macro-F1 {f1:.4f}", flush=True)
        if hold:
            acc, f1 = metrics(evaluate(task, hold, s), [r[1] for r in hold], len(labels))
            res.setdefault("holdout", {"rows": len(hold), "skips": {}})["skips"][str(s)] = \
                {"accuracy": acc, "macro_f1": f1}
            print(f"holdout {args.task}/{args.form} skip {s}: accuracy {acc:.4f} macro-F1 {f1:.4f} "
                  f"({len(hold)} training rows held out)", flush=True)
    task.save(args.out)
    with open(args.result or args.out.rstrip("/") + ".json", "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
