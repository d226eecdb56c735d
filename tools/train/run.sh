#!/bin/sh
# run.sh - the whole training pipeline: vocabulary and pretraining blocks, MLM pretraining, the encoder check
# against adapterd, every task adapter (robust AdapterDrop, the control, every adapter form, full fine-tuning
# yardsticks, an AdapterFusion), each checked against `adapterd predict`, and the example registry assembled.
#
#   tools/train/run.sh [--work DIR] [--data DIR] [--adapterd BIN] [--pretrain-steps N] [--no-pretrain]
#                      [--adapters main|all] [--jobs N] [--example DIR] [--smoke]
#
# ADAPTERD_TRAIN_NICE: niceness increment of the training processes (default 10; 0 under an outer `nice`).
# Resumable: every stage leaves its result in WORK and is skipped when rerun; pretraining resumes from its last
# checkpoint (WORK/pretrain/state.pt). WORK defaults to $ADAPTERD_TRAIN_DIR, else ../train-cache beside the
# checkout (never inside it: checkpoints and optimizer state stay out of git). --no-pretrain trains the adapters on
# the last checkpoint as it stands (another process may be pretraining: pause it with SIGSTOP, see pretrain.pid).
# --adapters main stops after the registry's main tasks (four robust adapters, the control, the fusion).
# --jobs 2 trains two adapters at a time, one thread each (two single-threaded runs use 2 cores better than one
# run on two threads: its small GEMMs leave the second thread waiting at every barrier).
# Order: the registry's tasks and the fusion first (the registry is assembled right after them, so the quality
# bench can start), then the WNUT-17 tagger, the full fine-tuning yardsticks, the other adapter forms, and the
# registry again with everything. Each stage prints its wall time and appends it to WORK/times.tsv.
# --example DIR: where the example registry's subset goes (default WORK/example; `--example examples/registry`
# rewrites the shipped one, tools/train/example.py).
# --smoke runs every stage on a few rows with a tiny encoder (CI: a minute or two); it exits 77 (skip) when torch
# or the data directory is missing.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
WORK=${ADAPTERD_TRAIN_DIR:-$ROOT/../train-cache}
DATA=${ADAPTERD_DATA_DIR:-$ROOT/../shared/data}
BIN=$ROOT/build/tools/adapterd
STEPS=12000
PRETRAIN=1
SMOKE=0
ADAPTERS=all
JOBS=1
EXAMPLE=
while [ $# -gt 0 ]; do
    case "$1" in
        --work) WORK=$2; shift 2 ;;
        --data) DATA=$2; shift 2 ;;
        --adapterd) BIN=$2; shift 2 ;;
        --pretrain-steps) STEPS=$2; shift 2 ;;
        --no-pretrain) PRETRAIN=0; shift ;;
        --adapters) ADAPTERS=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --example) EXAMPLE=$2; shift 2 ;;
        --smoke) SMOKE=1; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
    echo "run.sh: $PY has no torch/numpy (Debian: python3-torch); skipping"; exit 77
fi
if [ ! -d "$DATA/datasets/sst2" ] || [ ! -d "$DATA/datasets/wiki_en_unlabelled" ]; then
    echo "run.sh: no training data in $DATA; skipping"; exit 77
fi
if [ ! -x "$BIN" ]; then
    echo "run.sh: $BIN not built" >&2; exit 1
fi
export ADAPTERD_DATA_DIR="$DATA"
# the training processes' niceness increment (default 10); 0 when run.sh itself is started under nice
NICE=${ADAPTERD_TRAIN_NICE:-10}
# torch's OpenMP threads spin at barriers by default; on a shared CPU a descheduled partner makes the spinning
# one burn its share: measured here under a load average of 8, 500-700 tokens/s spinning, 2,100-2,200 passive
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
T="$ROOT/tools/train"
if [ "$SMOKE" = 1 ]; then
    # a smoke run starts from nothing, so every stage runs; it only ever clears a directory it made itself
    if [ -d "$WORK" ] && [ -n "$(ls -A "$WORK")" ] && [ ! -f "$WORK/.smoke" ]; then
        echo "run.sh: --smoke refuses to clear $WORK (not a smoke directory)" >&2; exit 2
    fi
    rm -rf "$WORK"
    mkdir -p "$WORK"
    touch "$WORK/.smoke"
fi
mkdir -p "$WORK"
log() { echo "run.sh: $*"; }

# -- sizes ---------------------------------------------------------------------------------------------------
if [ "$SMOKE" = 1 ]; then
    PREP="--max-docs 200 --task-rows 200 --vocab-size 1500 --val-docs 4 --val-blocks 16"
    MODEL="--layers 6 --hidden 32 --heads 2 --inter 64 --batch 8 --accum 1 --warmup 2 --total-steps 6"
    STEPS=6
    TRAIN="--max-train 48 --max-eval 24 --epochs 1 --batch 16"
    SST2="" AGNEWS="" TREC="" EMOTION="" WNUT="" FUSION="" SST2_PICK=""
    FULL_SST2="" FULL_AGNEWS="" FULL_TREC="" FULL_EMOTION=""
    FORM_SST2="" FORM_AGNEWS="" FORM_TREC="" FORM_EMOTION=""
else
    PREP=""
    MODEL=""
    # every held-out split whole (AG News test is the largest, 7,600 rows)
    TRAIN="--max-eval 8000"
    # The registry's adapters: rows, epochs and recipe per task. Measured on an idle core (one thread, bf16), an
    # adapter trains at ~5,000 tokens/s (SST-2 phrases ~13 pieces, AG News ~55 at --max-len 64, TREC ~15, emotion
    # ~24), so every training row of SST-2 (67k) and AG News (40k) fits: ~3 and ~7 minutes per epoch. On the
    # session-5 encoder (annealed, MLM loss 5.91) adapters learn slowly at 2e-3 and with a narrow bottleneck
    # (reduction 8, d = 32); measured (emotion, 4 epochs): 56.1% at 2e-3, 66.1% at 1e-3, 76.7% at 1e-3 with
    # reduction 2 (d = 128, 8 epochs at reduction 8: 76.65%); SST-2 70.8%, 72.5%, 74.4%. AG News (85.1%) and TREC
    # (85.8%) were trained at 2e-3 with reduction 8 before that was known, and are kept. The same recipes on the
    # session-6 encoder (69.9M tokens, MLM loss 4.89): SST-2 75.7%, AG News 86.1%, TREC 86.2%, emotion 80.4%.
    # SST-2 on the session-6 encoder: 1 epoch 75.7%, 2 epochs 76.7%, 4 epochs 76.6% (one run each)
    SST2="--max-train 70000 --epochs 2 --reduction 2"
    # the registry's SST-2 task (with its embedding LoRA): seeds 13-17 were trained with 2,000 training rows held
    # out and seed 16 had the best holdout accuracy (session 11, adapter and LoRA trained together; never chosen
    # on dev); session 12's two stages keep it
    SST2_PICK="--holdout 2000 --seed 16"
    # AG News (session 10, chosen on 2,000 training rows held out, never on the test split): the Pfeiffer adapter at
    # 2e-3 x 1 epoch 88.15% on the holdout, at 1e-3 x 2 epochs 88.70%, and with a rank-8 LoRA on q, k, v beside it
    # (form pfeiffer_lora, one AdapterHub ConfigUnion) 89.15%
    AGNEWS="--max-train 40000 --epochs 2 --lr 1e-3"
    TREC="--max-train 6000 --epochs 8 --lr 2e-3"
    # emotion was undertrained at 4 epochs: 8 give 85.8% on the session-6 encoder (4: 80.4%)
    EMOTION="--max-train 16000 --epochs 8 --reduction 2"
    FUSION="--max-train 10000 --epochs 1"
    # the tagger: O weighted 0.2 in the loss; on the 20M-token encoder, 2 epochs: entity F1 1.1 unweighted at
    # 2e-3 (27 entities predicted for 1,079), 6.1 weighted at 5e-3
    WNUT="--epochs 5 --max-len 128 --lr 5e-3 --o-weight 0.2"
    # full fine-tuning yardsticks: the same rows, 1-3 epochs (the usual recipe; a step costs ~1.5 adapter steps)
    FULL_SST2="--max-train 70000 --epochs 1"
    FULL_AGNEWS="--max-train 40000 --epochs 1"
    FULL_TREC="--max-train 6000 --epochs 3"
    FULL_EMOTION="--max-train 16000 --epochs 3"
    # the other adapter forms: fewer tokens than the registry adapters (they show the forms, not the tasks)
    FORM_SST2="--max-train 30000 --epochs 1"
    FORM_AGNEWS="--max-train 6000 --epochs 1"
    FORM_TREC="--max-train 6000 --epochs 2"
    # emotion's six classes need more than one pass (session 5, one epoch: LoRA 40.7%, parallel 45.3%, prefix 38.5%)
    FORM_EMOTION="--max-train 16000 --epochs 3"
fi
# stage timing: `since T0 WHAT` prints and records the seconds since T0
since() {
    dt=$(( $(date +%s) - $1 ))
    echo "run.sh: $2 took $dt s"
    printf '%s\t%s\n' "$2" "$dt" >> "$WORK/times.tsv"
}

# -- 1. vocabulary and pretraining blocks --------------------------------------------------------------------
if [ ! -f "$WORK/blocks.json" ]; then
    log "prep"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    nice "$PY" "$T/data.py" prep --work "$WORK" --data "$DATA" $PREP
    since "$t0" prep
fi

# -- 2. MLM pretraining (resumes from WORK/pretrain/state.pt) ------------------------------------------------
if [ "$PRETRAIN" = 1 ]; then
    log "pretrain to step $STEPS"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    nice -n 5 "$PY" "$T/pretrain.py" --work "$WORK" --steps "$STEPS" --total-steps "$STEPS" $MODEL
    since "$t0" pretrain
fi
ENC=$WORK/encoder
if [ "$PRETRAIN" = 0 ] && [ ! -f "$WORK/pretrain/state.pt" ] && [ -f "$ENC/model.safetensors" ]; then
    # no pretraining state: the encoder already in WORK/encoder (e.g. the shipped one, copied from
    # examples/registry/models/bert-6l-256-uncased) is the one the tasks train on
    log "no $WORK/pretrain/state.pt: training on $ENC as it is"
else
    # shellcheck disable=SC2086
    "$PY" "$T/pretrain.py" --work "$WORK" $MODEL --export-only "$ENC"
fi
"$PY" "$T/check_encoder.py" --model "$ENC" --adapterd "$BIN" --data "$DATA" --n 200

# -- 3. task adapters ----------------------------------------------------------------------------------------
AD=$WORK/tasks
mkdir -p "$AD"
# train TASK FORM NAME [args]: one run, skipped when its result exists; then checked against adapterd predict.
# Sizes: the task's (SST2 ...) for the registry's adapters, FULL_* for full fine-tuning, FORM_* with --other.
train() {
    task=$1; form=$2; name=$3; shift 3
    set_=""
    if [ "${1:-}" = --other ]; then set_=FORM_; shift; fi
    if [ "$form" = full ]; then set_=FULL_; fi
    case $task in sst2) v=SST2 ;; agnews) v=AGNEWS ;; trec) v=TREC ;; wnut) v=WNUT ;; *) v=EMOTION ;; esac
    if [ "$v" = WNUT ]; then set_=""; fi
    case $set_$v in
        SST2) per=$SST2 ;; AGNEWS) per=$AGNEWS ;; TREC) per=$TREC ;; EMOTION) per=$EMOTION ;; WNUT) per=$WNUT ;;
        FULL_SST2) per=$FULL_SST2 ;; FULL_AGNEWS) per=$FULL_AGNEWS ;; FULL_TREC) per=$FULL_TREC ;;
        FULL_EMOTION) per=$FULL_EMOTION ;; FORM_SST2) per=$FORM_SST2 ;; FORM_AGNEWS) per=$FORM_AGNEWS ;;
        FORM_TREC) per=$FORM_TREC ;; *) per=$FORM_EMOTION ;;
    esac
    if [ ! -f "$AD/$name.json" ]; then
        log "train $name ($task, $form)"
        t0=$(date +%s)
        # shellcheck disable=SC2086
        nice -n "$NICE" "$PY" "$T/adapters_train.py" --model "$ENC" --task "$task" --form "$form" --name "$name" \
            --out "$AD/$name" --threads "$THREADS" $TRAIN $per "$@"
        since "$t0" "train $name"
    fi
    if [ "$form" != full ] && [ "$form" != fusion ]; then
        # with --emb-lora the task is a Stack: the adapter and head, then the PEFT folder of the embeddings' LoRA
        stack=$AD/$name
        if [ -d "$AD/$name-embedding" ]; then stack=$stack,$AD/$name-embedding; fi
        "$PY" "$T/check_task.py" --model "$ENC" --adapter "$stack" --adapterd "$BIN" --skips 0,2 \
            --text "the match was great" --text "How far is it from Denver to Aspen ?"
    fi
}
# par A B: the stage lists A and B (functions) one after the other, or side by side with --jobs 2
THREADS=2
if [ "$JOBS" -gt 1 ]; then THREADS=1; fi
par() {
    if [ "$JOBS" -gt 1 ]; then
        "$1" & p=$!
        "$2"
        wait "$p"
    else
        "$1"
        "$2"
    fi
}
# Robust AdapterDrop adapters for the four tasks (skips 0..2: a third of the 6 layers; Pfeiffer, AG News with a LoRA
# beside it), the registry's tasks, and the control: the same SST-2 adapter without AdapterDrop, at the same skips
main_a() {
    # float16 weights keep the example registry under its 30 MB with the LoRA added
    train agnews pfeiffer_lora agnews --drop-max 2 --save-f16
    # SST-2 in two stages (SST2_PICK: the seed and holdout): the robust adapter and head, then PEFT's LoRA (r 16) on
    # the word embeddings trained beside them, frozen, at skip 0: skips >= 1 stay the adapter's own
    # shellcheck disable=SC2086
    train sst2 pfeiffer sst2-adapter --drop-max 2 --save-f16 $SST2_PICK --name sst2
    # shellcheck disable=SC2086
    train sst2 pfeiffer sst2 --drop-max 2 --frozen-adapter "$AD/sst2-adapter" --emb-lora 16 --save-f16 $SST2_PICK
    # the fusion's AG News child: a Pfeiffer adapter (named agnews too; the fusion mixes bottleneck adapters)
    train agnews pfeiffer agnews-pfeiffer --drop-max 2 --epochs 1 --lr 2e-3 --name agnews
}
main_b() {
    train emotion pfeiffer emotion --drop-max 2
    train trec pfeiffer trec --drop-max 2
    train sst2 pfeiffer sst2-control --eval-skips 2
}
par main_a main_b
# AdapterFusion for SST-2 over the five Pfeiffer adapters (pruned to k = 4, 2, 1 in the registry)
if [ ! -f "$AD/fusion-sst2.json" ]; then
    log "train fusion-sst2"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    nice -n "$NICE" "$PY" "$T/adapters_train.py" --model "$ENC" --task sst2 --form fusion --name fusion-sst2 \
        --head-name sst2-fusion --children "$AD/sst2,$AD/agnews-pfeiffer,$AD/trec,$AD/emotion,$AD/sst2-control" --fmt bin \
        --out "$AD/fusion-sst2" $TRAIN $FUSION
    since "$t0" "train fusion-sst2"
fi
"$PY" "$T/check_task.py" --model "$ENC" --adapter "$AD/sst2" --adapter "$AD/agnews-pfeiffer" --adapter "$AD/trec" \
    --adapter "$AD/emotion" --adapter "$AD/sst2-control" --fusion "$AD/fusion-sst2/fusion" \
    --head "$AD/fusion-sst2/head" --adapterd "$BIN" --text "the match was great"
# The registry of the main tasks now, so that the quality bench can start on it while the rest trains
t0=$(date +%s)
"$PY" "$T/registry.py" --work "$WORK" --out "$WORK/registry" --adapterd "$BIN" --data "$DATA"
since "$t0" "registry (main tasks)"
if [ "$ADAPTERS" = main ]; then
    log "done (main tasks): registry in $WORK/registry"
    exit 0
fi
# WNUT-17 named-entity tagging (robust AdapterDrop as the others); the full fine-tuning yardsticks (same encoder,
# same rows as the registry's adapters); one task each in the other forms
rest_a() {
    train agnews full agnews-full
    train sst2 full sst2-full
    train wnut pfeiffer wnut --drop-max 2
    train agnews houlsby agnews-houlsby --other --drop-max 2
    train sst2 mam sst2-mam --other --drop-max 2 --fmt bin
    train sst2 adamix sst2-adamix --other --drop-max 2
}
rest_b() {
    train emotion full emotion-full
    train trec full trec-full
    train emotion parallel emotion-parallel --other --drop-max 2
    train emotion lora emotion-lora --other --drop-max 2
    train trec peft_lora trec-peft --other --drop-max 2
    train trec ia3 trec-ia3 --other --drop-max 2
    # prefix tuning at its default 5e-3 never left the class prior on the session-6 encoder (35.2%); 1e-3: 44.9%
    train emotion prefix emotion-prefix --other --drop-max 2 --lr 1e-3
    train agnews sparse agnews-sparse --other --drop-max 2
}
par rest_a rest_b

# -- 4. the example registry ---------------------------------------------------------------------------------
t0=$(date +%s)
"$PY" "$T/registry.py" --work "$WORK" --out "$WORK/registry" --adapterd "$BIN" --data "$DATA"
since "$t0" "registry (all)"
"$PY" "$T/example.py" --registry "$WORK/registry" --out "${EXAMPLE:-$WORK/example}"
log "done: registry in $WORK/registry, results in $AD/*.json, stage wall times in $WORK/times.tsv"
