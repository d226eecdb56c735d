#!/usr/bin/python3
"""Write adapter / head / fusion checkpoints exactly as AdapterHub `adapters` 1.x and PEFT save them, on a given
backbone, plus the float64 oracle's expected outputs for the engine's parity tests.

    gen_adapters.py --backbone tests/fixtures/models/bert-tiny --case seq_bn_bin,lora_ah --skips 0,1 --out DIR
    gen_adapters.py --backbone DIR --case all --out DIR          # every case that fits the backbone's arch
    gen_adapters.py --list

Each case is one task directory DIR/<case>/ (the C side depends on this layout):

    setup.json       {"backbone": "<path relative to tests/fixtures, or absolute>", "format": "adapterhub"|"peft",
                      "adapters": ["adapters/<name>", ...] (Stack order), "fusion": "fusion" | null,
                      "head": "<dir with head_config.json + weights>" | null (PEFT: null, head in modules_to_save),
                      "skips": [0, k], "notes": "..."}
    adapters/<name>/ as the library saves it (AdapterHub: adapter_config.json + pytorch_adapter.bin | adapter.safetensors
                     [+ head_config.json + pytorch_model_head.bin | model_head.safetensors]; PEFT: adapter_config.json
                     + adapter_model.safetensors)
    fusion/          adapter_fusion_config.json + pytorch_model_adapter_fusion.bin (fusion cases)
    head/            head_config.json + pytorch_model_head.bin (fusion cases: the head saved on its own)
    expected/skip<N>.safetensors
                     input_ids I32 [T_total], token_type_ids I32 [T_total], seq_lens I32 [n_seq]  (sequences back to
                     back, no padding), logits F32 [n_seq, num_labels] (tagging/QA: [T_total, num_labels]),
                     hidden F32 [T_total, H] (last hidden state with the adapters), and for fusion cases
                     fusion_mean_attn F32 [n_fusion_layers, N] (mean attention weight of each adapter over the valid
                     tokens, fusion layers in (layer, mh_adapter < output_adapter) order).

The oracle runs each case as one right-padded batch with an attention mask, in float64 (adapters.py).  One JSON line
per case reports the max change of hidden/logits against the plain backbone + same head (a check that cannot fail is
worthless) and the skip=L self-check.
"""

import argparse
import json
import os
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import adapters as A  # noqa: E402
import gen_encoder as G  # noqa: E402
import st  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures"))
LABELS2 = ["negative", "positive"]


class Case:
    """What a builder returns: the objects to save, the active setup, the head used for logits."""

    def __init__(self, fmt="adapterhub", notes=""):
        self.fmt = fmt
        self.saves = []          # (relative dir, fn(out_dir))
        self.adapters = []       # relative dirs, Stack order
        self.fusion_dir = None
        self.head_dir = None
        self.bn_stack, self.linear, self.prefixes, self.fusion = [], [], [], None
        self.head = None
        self.notes = notes

    def setup(self, skip):
        return A.Setup(self.bn_stack, self.fusion, self.linear, self.prefixes, skip)


def model_name(cfg):
    return {"bert": "bert-base-uncased", "roberta": "roberta-base", "xlm-roberta": "xlm-roberta-base",
            "distilbert": "distilbert-base-uncased", "electra": "google/electra-small-discriminator",
            "deberta-v2": "microsoft/deberta-v3-base"}[cfg.arch]


def cls_head(cfg, rng, name, **kw):
    kw.setdefault("labels", LABELS2)
    kw.setdefault("num_labels", len(kw["labels"]))
    kw.setdefault("layers", 1)          # small fixtures: 1-layer heads except where a case asks for more
    return A.Head(name, kw.pop("head_type", "classification"), cfg, rng, **kw)


# ---------------------------------------------------------------------------------------------------------------
# Case builders.  Each takes (cfg, rng) and returns a Case.

def single_bn(preset, fmt, name, notes, head_kw=None, strength=1.0, **over):
    def build(cfg, rng):
        c = Case(notes=notes)
        bn = A.Bottleneck(name, A.bn_config(preset, **over), cfg, rng, strength=strength)
        head = cls_head(cfg, rng, name, **(head_kw or {}))
        c.bn_stack, c.head = [bn], head
        c.adapters = [f"adapters/{name}"]
        c.head_dir = f"adapters/{name}"
        c.saves.append((f"adapters/{name}", lambda d: A.save_adapterhub(d, cfg, bn, model_name(cfg), fmt, head)))
        return c
    return build


def ah_lora(config_fn, fmt, name, notes, version=A.ADAPTERS_VERSION, strength=1.0, **over):
    def build(cfg, rng):
        c = Case(notes=notes)
        lo = A.AHLoRA(name, config_fn(**over), cfg, rng, version=version, strength=strength)
        head = cls_head(cfg, rng, name)
        c.linear, c.head = [lo], head
        c.adapters = [f"adapters/{name}"]
        c.head_dir = f"adapters/{name}"
        c.saves.append((f"adapters/{name}",
                        lambda d: A.save_adapterhub(d, cfg, lo, model_name(cfg), fmt, head, version=version)))
        return c
    return build


def fam_targets(targets_by_fam, arch):
    """PEFT target_modules for arch's naming family; DeBERTa's are BERT's with query_proj / key_proj / value_proj."""
    f = A.fam(arch)
    if f in targets_by_fam:
        return targets_by_fam[f]
    ren = {"query": "query_proj", "key": "key_proj", "value": "value_proj"}
    return [ren.get(t, t) for t in targets_by_fam["bert"]]


def peft(peft_type, targets_by_fam, notes, r=8, lora_alpha=16, use_rslora=False, init_r=6, name="peft_task",
         num_labels=2):
    def build(cfg, rng):
        c = Case(fmt="peft", notes=notes)
        conf = A.peft_config(cfg.arch, peft_type, fam_targets(targets_by_fam, cfg.arch), r=r, lora_alpha=lora_alpha,
                             use_rslora=use_rslora, init_r=init_r, base_model=model_name(cfg))
        p = A.PeftLoRA(name, conf, cfg, rng)
        head = A.HFHead(cfg, rng, num_labels)
        p.head = head.t
        c.linear, c.head = [p], head
        c.adapters = [f"adapters/{name}"]
        c.saves.append((f"adapters/{name}", lambda d: A.save_peft(d, cfg, p)))
        return c
    return build


def peft_emb_stack_case(cfg, rng):
    c = Case(notes="A seq_bn adapter with its head (AdapterHub) and, after it in the list, a PEFT folder holding only "
                   "a LoRA on the word embeddings (target_modules [word_embeddings], r 4, lora_alpha 8: scaling 2; "
                   "lora_embedding_A [4, vocab], lora_embedding_B [H, 4]; no modules_to_save): the word embedding of "
                   "token t gains B A[:, t] * 2 before the embedding LayerNorm, at skip 0 only. No head dir: the "
                   "head is the last folder's that has one.")
    bn = A.Bottleneck("sst", A.bn_config("seq_bn"), cfg, rng)
    conf = A.peft_config(cfg.arch, "LORA", ["word_embeddings"], r=4, lora_alpha=8, base_model=model_name(cfg))
    conf["modules_to_save"] = None
    pe = A.PeftLoRA("emb", conf, cfg, rng, strength=0.5)
    head = cls_head(cfg, rng, "sst", layers=2)
    c.bn_stack, c.linear, c.head = [bn], [pe], head
    c.adapters = ["adapters/sst", "adapters/emb"]
    c.saves.append(("adapters/sst", lambda d: A.save_adapterhub(d, cfg, bn, model_name(cfg), "st", head)))
    c.saves.append(("adapters/emb", lambda d: A.save_peft(d, cfg, pe)))
    return c


def prefix_case(flat, notes, name="prefix_task", P=8, bn=32, config_says_flat=None):
    def build(cfg, rng):
        c = Case(notes=notes)
        pf = A.Prefix(name, A.prefix_config(flat=flat, prefix_length=P, bottleneck_size=bn), cfg, rng)
        if config_says_flat is not None:
            pf.config = dict(pf.config, flat=config_says_flat)
        head = cls_head(cfg, rng, name)
        c.prefixes, c.head = [pf], head
        c.adapters = [f"adapters/{name}"]
        c.head_dir = f"adapters/{name}"
        c.saves.append((f"adapters/{name}", lambda d: A.save_adapterhub(d, cfg, pf, model_name(cfg), "bin", head)))
        return c
    return build


def mam_case(cfg, rng):
    name = "mam_task"
    c = Case(notes="MAM adapter: ConfigUnion(PrefixTuningConfig(prefix_length 8, bottleneck_size 32), ParBnConfig()) "
                   "under one name; prefix in every self-attention + parallel adapter (s=4, rf=2, relu) at the FFN "
                   "output. Small prefix MLP for a tiny fixture (the MAM preset has bottleneck_size 800).")
    pf = A.Prefix(name, A.prefix_config(prefix_length=8, bottleneck_size=32), cfg, rng)
    pb = A.Bottleneck(name, A.bn_config("par_bn"), cfg, rng, strength=0.5)
    head = cls_head(cfg, rng, name)
    c.prefixes, c.bn_stack, c.head = [pf], [pb], head
    c.adapters = [f"adapters/{name}"]
    c.head_dir = f"adapters/{name}"
    c.saves.append((f"adapters/{name}",
                    lambda d: A.save_adapterhub(d, cfg, pf, model_name(cfg), "bin", head, union_children=[pf, pb])))
    return c


def unipelt_case(cfg, rng):
    name = "unipelt"
    c = Case(notes="UniPELT: ConfigUnion(LoRAConfig(r=8, alpha=2), PrefixTuningConfig(prefix_length=10, bottleneck 32), "
                   "SeqBnConfig(reduction_factor=16)), every component with use_gating (§6): LoRA delta * gate "
                   "(alpha/r not applied), prefix K/V * mean_t sigmoid(prefix_gates(x)), bottleneck up * gate. "
                   "Gates average over the valid tokens. Keys ...attention.self.prefix_tuning.prefix_gates.unipelt.*.")
    lo = A.AHLoRA(name, A.lora_config(r=8, alpha=2, use_gating=True), cfg, rng)
    pf = A.Prefix(name, A.prefix_config(prefix_length=10, bottleneck_size=32, use_gating=True), cfg, rng)
    bn = A.Bottleneck(name, A.bn_config("seq_bn", use_gating=True), cfg, rng)
    head = cls_head(cfg, rng, name)
    c.linear, c.prefixes, c.bn_stack, c.head = [lo], [pf], [bn], head
    c.adapters = [f"adapters/{name}"]
    c.head_dir = f"adapters/{name}"
    c.saves.append((f"adapters/{name}", lambda d: A.save_adapterhub(d, cfg, lo, model_name(cfg), "bin", head,
                                                                    union_children=[lo, pf, bn])))
    return c


def stack_case(cfg, rng):
    c = Case(notes="MAD-X style Stack(lang, task) of two seq_bn adapters (§7.1); the head is saved with the task "
                   "adapter; 'adapters' lists them in Stack order.")
    lang = A.Bottleneck("lang", A.bn_config("seq_bn", reduction_factor=2), cfg, rng)
    task = A.Bottleneck("task", A.bn_config("seq_bn"), cfg, rng)
    head = cls_head(cfg, rng, "task", layers=2)
    c.bn_stack, c.head = [lang, task], head
    c.adapters = ["adapters/lang", "adapters/task"]
    c.head_dir = "adapters/task"
    c.saves.append(("adapters/lang", lambda d: A.save_adapterhub(d, cfg, lang, model_name(cfg), "bin")))
    c.saves.append(("adapters/task", lambda d: A.save_adapterhub(d, cfg, task, model_name(cfg), "bin", head)))
    return c


def fusion_strengths(cfg):
    """(fused adapters' strength, fusion query/key init scale) of the fusion cases.  At base shapes the tiny
    fixtures' values (1.5, 1.0) make an ill-conditioned case: fusion scores have no 1/sqrt(d) and reach 120-145 at
    H 768, and a relative 1e-7 perturbation of the fusion outputs moves the logits by up to 2e-4; torch's own float32
    evaluation of the fusion alone then differs from the float64 oracle by 1e-4 to 3e-2, so no float32 engine could
    meet 1e-4.  From H 256 on: adapters at 0.5 and query/key scaled by (64/H)^(1/4) (max |score| ~40 at H 768),
    where float32 fusion vs float64 is 2e-6 to 7e-6 and the fusion still moves the logits by 1.4-2.9 from the plain
    backbone.  Tiny backbones keep (1.5, 1.0), so the committed fixtures do not change."""
    return (1.5, 1.0) if cfg.hidden < 256 else (0.5, (64.0 / cfg.hidden) ** 0.25)


def fusion_case(n, preset, houlsby=False):
    def build(cfg, rng):
        c = Case(notes=f"AdapterFusion ({preset} preset, T=1) over {n} {'double_seq_bn' if houlsby else 'seq_bn'} "
                       f"adapters (§7.2); fusion in fusion/, head saved on its own in head/ (save_head); the fused "
                       f"adapters carry no head.")
        names = [f"t{j}" for j in range(n)]
        preset_bn = "double_seq_bn" if houlsby else "seq_bn"
        s_ad, s_fu = fusion_strengths(cfg)
        bns = [A.Bottleneck(nm, A.bn_config(preset_bn), cfg, rng, strength=s_ad) for nm in names]
        fu = A.Fusion(bns, preset, cfg, rng, strength=s_fu)
        head = cls_head(cfg, rng, "fusion_task", labels=["a", "b", "c"], layers=2)
        c.fusion, c.head = fu, head
        c.adapters = [f"adapters/{nm}" for nm in names]
        c.fusion_dir, c.head_dir = "fusion", "head"
        for bn in bns:
            c.saves.append((f"adapters/{bn.name}",
                            lambda d, bn=bn: A.save_adapterhub(d, cfg, bn, model_name(cfg), "bin")))
        c.saves.append(("fusion", lambda d: A.save_fusion(d, cfg, fu, model_name(cfg))))
        c.saves.append(("head", lambda d: A.save_head(d, cfg, head, model_name(cfg))))
        return c
    return build


ALL_FAMS = ("bert", "distilbert")

# name -> (builder, families it applies to, skips override or None)
CASES = {}


def reg(name, builder, fams=ALL_FAMS):
    CASES[name] = (builder, fams)


# 1-2: the two classic bottleneck adapters with a 2-layer tanh classification head, .bin and safetensors
reg("seq_bn_bin", single_bn("seq_bn", "bin", "sst", "Pfeiffer (seq_bn preset) + classification head (2 layers, tanh), "
                            "saved with torch.save (default).", head_kw=dict(layers=2)))
reg("double_seq_bn_bin", single_bn("double_seq_bn", "bin", "sst", "Houlsby (double_seq_bn preset: mh_adapter + "
                                   "output_adapter, swish) + classification head (2 layers, tanh), torch.save.",
                                   head_kw=dict(layers=2)))
reg("seq_bn_st", single_bn("seq_bn", "st", "sst", "Pfeiffer + head (2 layers, tanh), saved with use_safetensors=True.",
                            head_kw=dict(layers=2)))
reg("double_seq_bn_st", single_bn("double_seq_bn", "st", "sst", "Houlsby + head (2 layers, tanh), safetensors.",
                                  head_kw=dict(layers=2)))
# 3: parallel, scaled parallel, every bottleneck flag
reg("par_bn", single_bn("par_bn", "bin", "par", "par_bn preset: parallel adapter fed the sub-block input x, s=4.0, "
                        "rf=2, relu (§2.4).", strength=0.5))
reg("scaled_par_bn", single_bn("scaled_par_bn", "st", "spar", "scaled_par_bn: parallel with a learned scalar scaling "
                               "(key ...adapters.spar.scaling [1]), safetensors.", strength=0.5))
reg("seq_bn_ln_before_after", single_bn(
    "seq_bn", "bin", "lnba", "seq_bn with ln_before + ln_after (adapter LNs eps 1e-5; ln_before makes the Linear "
    "adapter_down.1 and adds adapter_norm_before.* sharing storage with adapter_down.0.*; .bin only, safetensors would "
    "refuse shared tensors), non_linearity gelu (exact, the config has a version).",
    ln_before=True, ln_after=True, non_linearity="gelu"))
reg("seq_bn_gating", single_bn(
    "seq_bn", "st", "gated", "seq_bn with use_gating (gate Linear(H,1), sigmoid, mean over the valid tokens), "
    "non_linearity tanh, per-layer reduction_factor {'0': 8, 'default': 16}.",
    use_gating=True, non_linearity="tanh", reduction_factor={"0": 8, "default": 16}))
reg("seq_bn_residual_after_ln", single_bn(
    "seq_bn", "st", "rafter", "seq_bn with residual_before_ln false (adapter residual taken after the original LN), "
    "float scaling 0.5 (not saved, from the config), swish.", residual_before_ln=False, scaling=0.5,
    non_linearity="swish"))
reg("seq_bn_post_add", single_bn(
    "seq_bn", "bin", "postadd", "seq_bn with residual_before_ln \"post_add\" (residual = h + x), "
    "adapter_residual_before_ln true and ln_after true (o = LN_after(up + r)), relu.",
    residual_before_ln="post_add", adapter_residual_before_ln=True, ln_after=True))
reg("seq_bn_plus", single_bn(
    "seq_bn", "st", "plus", "AdapterPlus-like: original_ln_before true, original_ln_after false (no final LN), "
    "residual_before_ln false, scaling \"channel\" (key ...scaling [H]), gelu, also at mh_adapter.",
    original_ln_after=False, residual_before_ln=False, scaling="channel", non_linearity="gelu", mh_adapter=True,
    strength=0.5))
reg("double_seq_bn_tanh_gate", single_bn(
    "double_seq_bn", "bin", "hgate", "double_seq_bn with tanh, use_gating and ln_after; original_ln_before false.",
    non_linearity="tanh", use_gating=True, ln_after=True))
reg("par_bn_ln_after_false", single_bn(
    "par_bn", "bin", "parnoln", "par_bn with original_ln_after false: out = o + h (no x residual, no LN: exactly as "
    "coded, §2.4) at the FFN output, with ln_after true.", original_ln_after=False, ln_after=True, strength=0.3))
# 4: AdapterHub LoRA and (IA)^3
reg("lora_ah", ah_lora(A.lora_config, "st", "lora", "AdapterHub LoRA r=8 alpha=16 (scaling 2) on q,v + "
                       "intermediate_lora + output_lora; keys ...loras.lora.lora_A / .lora_B (no .weight).",
                       r=8, alpha=16, intermediate_lora=True, output_lora=True))
reg("lora_ah_v101", ah_lora(A.lora_config, "bin", "lora_old", "AdapterHub LoRA saved by adapters 1.0.1 "
                            "(version adapters.1.0.1), r=8 alpha=16: the §8 compat rule forces alpha=r on load, so "
                            "the effective scaling is 1.0, not 2.", version="adapters.1.0.1", r=8, alpha=16))
reg("ia3", ah_lora(A.ia3_config, "bin", "ia3", "(IA)^3 (IA3Config): k, v and intermediate.dense (pre-activation) "
                   "outputs scaled by lora_B*alpha, bias included; alpha=2 to check scaling=alpha (not alpha/r).",
                   alpha=2))
# 5: PEFT
reg("peft_lora", peft("LORA", {"bert": ["query", "value", "attention.output.dense"],
                               "distilbert": ["q_lin", "v_lin", "out_lin", "lin1"]},
                      "PEFT LoRA r=8 lora_alpha=16 (scaling 2) incl. the attention output dense; head in "
                      "modules_to_save (BERT classifier(pooler_output); RoBERTa classifier.dense/out_proj on h[:,0]; "
                      "DistilBERT classifier(relu(pre_classifier(h[:,0]))))."))
reg("peft_rslora", peft("LORA", {"bert": ["query", "key", "value", "intermediate.dense"],
                                 "distilbert": ["q_lin", "k_lin", "v_lin", "lin2"]},
                        "PEFT rsLoRA: use_rslora true, r=4, lora_alpha=8 -> scaling 8/sqrt(4) = 4.",
                        r=4, lora_alpha=8, use_rslora=True))
reg("peft_adalora", peft("ADALORA", {"bert": ["query", "value", "attention.output.dense"],
                                     "distilbert": ["q_lin", "v_lin", "out_lin"]},
                         "PEFT AdaLoRA (init_r 6, lora_alpha 2, rank_pattern null as in the real agnews file): keys "
                         "lora_A [6,in], lora_B [out,6], lora_E [6,1] without .weight; ranknum not saved; "
                         "delta = x (A*E)^T B^T * lora_alpha / (init_r + 1e-5).", lora_alpha=2, init_r=6))
reg("peft_lora_embedding", peft("LORA", {"bert": ["query", "value", "word_embeddings"],
                                         "distilbert": ["q_lin", "v_lin", "word_embeddings"]},
                                "PEFT LoRA r=8 lora_alpha=16 on query, value and the word embeddings (lora.Embedding: "
                                "lora_embedding_A [8, vocab], lora_embedding_B [H, 8], no .weight; e(t) += B A[:, t] "
                                "* 2 before the embedding LayerNorm, at skip 0 only); head in modules_to_save."))
reg("peft_embedding_stack", peft_emb_stack_case)
# 6: prefix tuning, MAM
reg("prefix", prefix_case(False, "Prefix tuning reparametrised (P=8, bottleneck 32, tanh): keys "
                          "<base>.prefix_tuning.prefix_tunings.prefix_task.self_prefix.{wte,control_trans.0,"
                          "control_trans.2}.*, plus the per-layer .pool. alias keys (same storages) the library's "
                          "save_adapter writes into .bin; a loader takes the keys without .pool."))
reg("prefix_flat", prefix_case(True, "Prefix tuning flat (P=8): one control_trans vector [P*L*2*H] (+ .pool. "
                               "aliases), layer i key = channel 2i, value = 2i+1 (§5)."))
reg("prefix_ejected", prefix_case(True, "Prefix after eject_prefix_tuning + save_adapter: flat control_trans "
                                  "weights while the saved config still says \"flat\": false (§5 [inferred]); a "
                                  "loader must detect flat vs reparametrised from the key names.",
                                  config_says_flat=False))
reg("mam", mam_case)
reg("unipelt", unipelt_case)
# 7: heads
reg("head_multilabel", single_bn("seq_bn", "st", "ml", "multilabel_classification head (3 labels; logits are raw, "
                                 "scores = sigmoid).", head_kw=dict(head_type="multilabel_classification",
                                                                    labels=["sports", "politics", "tech"])))
reg("head_regression", single_bn("seq_bn", "st", "reg", "classification head with num_labels 1 (regression), "
                                 "1 layer.", head_kw=dict(labels=["LABEL_0"], layers=1)))
reg("head_tagging", single_bn("seq_bn", "bin", "ner", "tagging head (1 layer, per token): logits [T_total, 5].",
                              head_kw=dict(head_type="tagging", layers=1,
                                           labels=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])))
reg("head_qa", single_bn("seq_bn", "bin", "squad", "question_answering head (1 layer, num_labels 2 = start/end "
                         "logits per token): logits [T_total, 2].",
                         head_kw=dict(head_type="question_answering", layers=1, labels=["start", "end"])))
reg("head_pooler", single_bn("double_seq_bn", "bin", "pool", "classification head with use_pooler true (input = "
                             "the backbone's pooler_output), 3 layers, activation_function null (Linear indices "
                             "1, 3, 5), 4 labels.",
                             head_kw=dict(use_pooler=True, layers=3, activation=None,
                                          labels=["w", "x", "y", "z"])), fams=("bert",))
reg("head_relu_nobias", single_bn("seq_bn", "st", "nb", "classification head 2 layers relu, bias false on the "
                                  "last Linear (no heads.nb.4.bias).",
                                  head_kw=dict(activation="relu", bias=False)))
# 8: Stack and Fusion
reg("stack_madx", stack_case)
reg("fusion_dynamic_n3", fusion_case(3, "dynamic"))
reg("fusion_static_n4", fusion_case(4, "static"))
reg("fusion_dynamic_n8", fusion_case(8, "dynamic"))
reg("fusion_dynamic_houlsby_n3", fusion_case(3, "dynamic", houlsby=True))

# DeBERTa-v2 (its own naming family): the cases whose sites it has. Not prefix tuning (no place for a prefix in
# relative attention), not the embedding LoRA cases, not the pooler head (no pooler).
for _n in ("seq_bn_bin", "double_seq_bn_bin", "seq_bn_st", "double_seq_bn_st", "par_bn", "seq_bn_gating", "lora_ah",
           "ia3", "peft_lora", "peft_rslora", "peft_adalora", "stack_madx", "fusion_dynamic_n3"):
    CASES[_n] = (CASES[_n][0], CASES[_n][1] + ("deberta",))

# ---------------------------------------------------------------------------------------------------------------
# Inputs and expected outputs

def make_inputs(cfg, big, seed, lens=None):
    """Several sequences of mixed lengths (one of them a sentence pair, one of length 1).  `lens` overrides the
    default lengths (the third sequence is the pair when there are three or more)."""
    gen = torch.Generator().manual_seed(seed)
    top = G.max_len(cfg)
    lens = [min(top, n) for n in (lens or ([1, 7, 128, 37, 64, 20] if big else [1, 6, 19, 11]))]
    ids, types = [], []
    for j, n in enumerate(lens):
        a, t = G.make_sequence(cfg, gen, n, pair=(j == 2))
        ids.append(a)
        types.append(t)
    return ids, types


def run(cfg, W, case, skip, ids_list, types_list, stats=None):
    ids, types, mask = G.pad_batch(cfg, ids_list, types_list)
    with torch.no_grad():
        h, pooled = A.forward(cfg, W, ids, mask, types, case.setup(skip), stats)
        logits = case.head.forward(h, pooled)
    lens = [len(x) for x in ids_list]
    hidden = torch.cat([h[b, :n] for b, n in enumerate(lens)])
    if case.head.per_token:
        logits = torch.cat([logits[b, :n] for b, n in enumerate(lens)])
    return hidden, logits, mask


def run_plain_encoder(cfg, W, head, ids_list, types_list):
    """The plain backbone through encoder.py's own forward (independent of adapters.py's hooks) + the same head."""
    ids, types, mask = G.pad_batch(cfg, ids_list, types_list)
    with torch.no_grad():
        h, pooled = A.encoder_module(cfg.arch).forward(cfg, W, ids, mask, types, torch.float64)
        logits = head.forward(h, pooled)
    lens = [len(x) for x in ids_list]
    if head.per_token:
        logits = torch.cat([logits[b, :n] for b, n in enumerate(lens)])
    return torch.cat([h[b, :n] for b, n in enumerate(lens)]), logits


def fusion_mean_attn(stats, mask):
    rows = []
    for _, probs in stats:                                   # probs (B, T, N)
        m = mask.to(probs.dtype)[:, :, None]
        rows.append((probs * m).sum((0, 1)) / m.sum())
    return torch.stack(rows)


def backbone_ref(path):
    p = os.path.abspath(path)
    if p.startswith(FIXTURES_ROOT + os.sep):
        return os.path.relpath(p, FIXTURES_ROOT)
    return p


def case_seed(name, arch):
    return zlib.crc32(f"{arch}/{name}".encode()) & 0x7FFFFFFF


def generate(backbone, name, out_root, skips, bb=None, lens=None, selfcheck=True):
    """One synthesized case.  bb: (cfg, W) of the backbone already loaded; lens: input lengths (make_inputs);
    selfcheck False leaves out the plain-backbone and skip=L runs (half the time at base shapes)."""
    cfg, W = bb or A.load_backbone(backbone)
    builder, fams = CASES[name]
    if A.fam(cfg.arch) not in fams:
        raise ValueError(f"case {name} does not apply to {cfg.arch}")
    seed = case_seed(name, cfg.arch)
    case = builder(cfg, A.Rng(seed))
    out = os.path.join(out_root, name)
    if os.path.isdir(out):
        import shutil
        shutil.rmtree(out)
    for rel, fn in case.saves:
        fn(os.path.join(out, rel))
    setup = {"backbone": backbone_ref(backbone), "format": case.fmt, "adapters": case.adapters,
             "fusion": case.fusion_dir, "head": case.head_dir, "skips": list(skips), "notes": case.notes}
    with open(os.path.join(out, "setup.json"), "w") as f:
        f.write(json.dumps(setup, indent=2) + "\n")
    os.makedirs(os.path.join(out, "expected"), exist_ok=True)
    big = cfg.hidden >= 256
    ids_list, types_list = make_inputs(cfg, big, seed + 1, lens)
    return write_expected(cfg, W, case, name, backbone, out, skips, ids_list, types_list, selfcheck)


def write_expected(cfg, W, case, name, backbone, out, skips, ids_list, types_list, selfcheck=True):
    """expected/skip<N>.safetensors for each skip; returns the report dict (see generate)."""
    rep = {"case": name, "arch": cfg.arch, "backbone": backbone_ref(backbone),
           "tokens": int(sum(len(x) for x in ids_list)), "skips": {}}
    h0 = l0 = None
    if selfcheck:
        h0, l0 = run_plain_encoder(cfg, W, case.head, ids_list, types_list)
        hL, lL, _ = run(cfg, W, case, cfg.layers, ids_list, types_list)
        rep["skipL_vs_plain"] = float(max((hL - h0).abs().max(), (lL - l0).abs().max()))
    for skip in skips:
        stats = [] if case.fusion is not None else None
        h, lg, mask = run(cfg, W, case, skip, ids_list, types_list, stats)
        t = {"input_ids": torch.cat(ids_list).to(torch.int32), "token_type_ids": torch.cat(types_list).to(torch.int32),
             "seq_lens": torch.tensor([len(x) for x in ids_list], dtype=torch.int32),
             "logits": lg.to(torch.float32), "hidden": h.to(torch.float32)}
        if stats:
            t["fusion_mean_attn"] = fusion_mean_attn(stats, mask).to(torch.float32)
        st.save_file(t, os.path.join(out, "expected", f"skip{skip}.safetensors"),
                     {"case": name, "arch": cfg.arch, "skip": str(skip),
                      "reference": "float64 padded batch, rounded to f32"})
        r = rep["skips"][str(skip)] = {}
        if selfcheck:
            r.update(max_dhidden=round(float((h - h0).abs().max()), 4),
                     max_dlogits=round(float((lg - l0).abs().max()), 4))
        r.update(max_abs_hidden=round(float(h.abs().max()), 3), max_abs_logits=round(float(lg.abs().max()), 3))
        if not torch.isfinite(h).all() or not torch.isfinite(lg).all():
            raise RuntimeError(f"{name}: non-finite outputs")
    return rep


def generate_loaded(backbone, name, out_root, skips, adapter_dirs, fusion_dir=None, head_dir=None, bb=None,
                    lens=None, notes=""):
    """A case from folders saved elsewhere (real AdapterHub / PEFT files): the oracle reads them with
    adapters.LoadedTask, and setup.json points at them by absolute path (nothing is copied).  With an AdapterHub
    head, setup.json also lists the label names in logit order ("labels"), from label2id."""
    cfg, W = bb or A.load_backbone(backbone)
    adapter_dirs = [os.path.abspath(d) for d in adapter_dirs]
    fusion_dir = os.path.abspath(fusion_dir) if fusion_dir else None
    head_dir = os.path.abspath(head_dir) if head_dir else None
    task = A.LoadedTask(cfg, adapter_dirs, fusion_dir, head_dir)
    out = os.path.join(out_root, name)
    if os.path.isdir(out):
        import shutil
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "expected"))
    setup = {"backbone": backbone_ref(backbone), "format": task.fmt, "adapters": adapter_dirs, "fusion": fusion_dir,
             "head": head_dir, "skips": list(skips), "notes": notes or "read from saved files by adapters.LoadedTask"}
    if isinstance(task.head, A.Head):
        setup["labels"] = task.labels
    with open(os.path.join(out, "setup.json"), "w") as f:
        f.write(json.dumps(setup, indent=2) + "\n")
    seed = case_seed(name, cfg.arch)
    ids_list, types_list = make_inputs(cfg, cfg.hidden >= 256, seed + 1, lens)
    rep = write_expected(cfg, W, task, name, backbone, out, skips, ids_list, types_list, True)
    rep["task"] = {"names": task.names, "format": task.fmt, "labels": task.labels,
                   "components": sorted({type(o).__name__ for o in task.bn_stack + task.linear + task.prefixes})
                   + (["Fusion"] if task.fusion else [])}
    return rep


def recheck_from_files(case_dir, bb):
    """Re-read a case's saved folders with adapters.LoadedTask (setup.json paths relative to the case, or absolute)
    and recompute every expected file's logits from its inputs: {skip: max |recomputed - expected|}."""
    cfg, W = bb
    with open(os.path.join(case_dir, "setup.json")) as f:
        s = json.load(f)
    rel = lambda p: p if p is None or os.path.isabs(p) else os.path.join(case_dir, p)  # noqa: E731
    task = A.LoadedTask(cfg, [rel(d) for d in s["adapters"]], rel(s["fusion"]), rel(s["head"]))
    out = {}
    for fn in sorted(os.listdir(os.path.join(case_dir, "expected"))):
        t, meta = st.load_file(os.path.join(case_dir, "expected", fn))
        lens = t["seq_lens"].tolist()
        ids = list(torch.split(t["input_ids"].to(torch.int64), lens))
        types = list(torch.split(t["token_type_ids"].to(torch.int64), lens))
        _, lg, _ = run(cfg, W, task, int(meta["skip"]), ids, types)
        out[int(meta["skip"])] = float((lg.to(torch.float32) - t["logits"]).abs().max())
        if "labels" in s and s["labels"] != task.labels:
            raise RuntimeError(f"{case_dir}: labels {task.labels} != setup.json {s['labels']}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbone", help="model directory (config.json + model.safetensors), e.g. from gen_encoder.py")
    ap.add_argument("--case", default="all", help="comma list of case names, or 'all' (those that fit the arch)")
    ap.add_argument("--exclude", default="", help="comma list of case names to leave out of --case all")
    ap.add_argument("--skips", default="0,1", help="AdapterDrop skip counts to write expected outputs for")
    ap.add_argument("--out", help="directory that receives one sub-directory per case")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--lens", default="", help="comma list of input lengths (default 1,7,128,37,64,20 at hidden "
                    ">= 256, else 1,6,19,11); the third sequence is a sentence pair")
    ap.add_argument("--fast", action="store_true", help="leave out the plain-backbone and skip=L self-checks")
    ap.add_argument("--load", action="append", default=[], metavar="DIR",
                    help="read a saved AdapterHub / PEFT folder instead of synthesizing (repeat: Stack order, or the "
                    "fused adapters with --fusion-dir); writes the case --name")
    ap.add_argument("--fusion-dir", help="with --load: saved AdapterFusion folder")
    ap.add_argument("--head-dir", help="with --load: saved head folder (else the head saved with the last adapter)")
    ap.add_argument("--name", help="with --load: the case directory name")
    ap.add_argument("--notes", default="", help="with --load: setup.json notes")
    ap.add_argument("--recheck", action="store_true", help="after writing each case, re-read its files with "
                    "adapters.LoadedTask and require the same logits (reader self-check)")
    a = ap.parse_args(argv)
    if a.list:
        for n, (_, fams) in CASES.items():
            print(n, ",".join(fams))
        return 0
    if not a.backbone or not a.out:
        ap.error("--backbone and --out are required")
    skips = [int(s) for s in a.skips.split(",") if s != ""]
    lens = [int(n) for n in a.lens.split(",") if n != ""] or None
    bb = A.load_backbone(a.backbone)
    if a.load:
        if not a.name:
            ap.error("--load needs --name")
        rep = generate_loaded(a.backbone, a.name, a.out, skips, a.load, a.fusion_dir, a.head_dir, bb, lens, a.notes)
        if a.recheck:
            rep["recheck"] = recheck_from_files(os.path.join(a.out, a.name), bb)
        print(json.dumps(rep), flush=True)
        return 0
    with open(os.path.join(a.backbone, "config.json")) as f:
        arch_fam = A.fam(json.load(f)["model_type"])
    names = [n for n, (_, fams) in CASES.items() if arch_fam in fams] if a.case == "all" else a.case.split(",")
    names = [n for n in names if n not in a.exclude.split(",")]
    bad = [n for n in names if n not in CASES]
    if bad:
        ap.error(f"unknown cases {bad}; see --list")
    for n in names:
        rep = generate(a.backbone, n, a.out, skips, bb, lens, not a.fast)
        if rep.get("skipL_vs_plain", 0) > 1e-10:
            raise RuntimeError(f"{n}: skip=L differs from the plain backbone by {rep['skipL_vs_plain']}")
        if a.recheck:
            rep["recheck"] = recheck_from_files(os.path.join(a.out, n), bb)
            if max(rep["recheck"].values()) != 0:
                raise RuntimeError(f"{n}: re-reading the saved files gives other logits: {rep['recheck']}")
        print(json.dumps(rep), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
