#!/bin/sh
# run.sh - the whole training pipeline: vocabulary and pretraining blocks, MLM pretraining, the encoder check
# against adapterd, every task adapter (robust AdapterDrop, the control, every adapter form, full fine-tuning
# yardsticks, an AdapterFusion), each checked against `adapterd predict`, and the example registry assembled.
#
#   tools/train/run.sh [--work DIR] [--data DIR] [--adapterd BIN] [--pretrain-steps N] [--no-pretrain]
#                      [--adapters main|all] [--smoke]
#
# Resumable: every stage leaves its result in WORK and is skipped when rerun; pretraining resumes from its last
# checkpoint (WORK/pretrain/state.pt). WORK defaults to $ADAPTERD_TRAIN_DIR, else ../train-cache beside the
# checkout (never inside it: checkpoints and optimizer state stay out of git). --no-pretrain trains the adapters on
# the last checkpoint as it stands (another process may be pretraining: pause it with SIGSTOP, see pretrain.pid).
# --adapters main stops after the registry's main tasks (four robust Pfeiffer adapters, the control, the fusion).
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
while [ $# -gt 0 ]; do
    case "$1" in
        --work) WORK=$2; shift 2 ;;
        --data) DATA=$2; shift 2 ;;
        --adapterd) BIN=$2; shift 2 ;;
        --pretrain-steps) STEPS=$2; shift 2 ;;
        --no-pretrain) PRETRAIN=0; shift ;;
        --adapters) ADAPTERS=$2; shift 2 ;;
        --smoke) SMOKE=1; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
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
    SST2="" AGNEWS="" TREC="" EMOTION=""
else
    PREP=""
    MODEL=""
    TRAIN="--max-eval 2000"
    # rows and epochs per task: about 0.3-0.7M training tokens each
    SST2="--max-train 20000 --epochs 1"
    AGNEWS="--max-train 10000 --epochs 1"
    TREC="--max-train 6000 --epochs 4"
    EMOTION="--max-train 16000 --epochs 2"
fi

# -- 1. vocabulary and pretraining blocks --------------------------------------------------------------------
if [ ! -f "$WORK/blocks.json" ]; then
    log "prep"
    # shellcheck disable=SC2086
    nice "$PY" "$T/data.py" prep --work "$WORK" --data "$DATA" $PREP
fi

# -- 2. MLM pretraining (resumes from WORK/pretrain/state.pt) ------------------------------------------------
if [ "$PRETRAIN" = 1 ]; then
    log "pretrain to step $STEPS"
    # shellcheck disable=SC2086
    nice -n 5 "$PY" "$T/pretrain.py" --work "$WORK" --steps "$STEPS" --total-steps "$STEPS" $MODEL
fi
ENC=$WORK/encoder
# shellcheck disable=SC2086
"$PY" "$T/pretrain.py" --work "$WORK" $MODEL --export-only "$ENC"
"$PY" "$T/check_encoder.py" --model "$ENC" --adapterd "$BIN" --data "$DATA" --n 200

# -- 3. task adapters ----------------------------------------------------------------------------------------
AD=$WORK/tasks
mkdir -p "$AD"
# train TASK FORM NAME [args]: one run, skipped when its result exists; then checked against adapterd predict.
train() {
    task=$1; form=$2; name=$3; shift 3
    case $task in sst2) per=$SST2 ;; agnews) per=$AGNEWS ;; trec) per=$TREC ;; *) per=$EMOTION ;; esac
    if [ ! -f "$AD/$name.json" ]; then
        log "train $name ($task, $form)"
        # shellcheck disable=SC2086
        nice "$PY" "$T/adapters_train.py" --model "$ENC" --task "$task" --form "$form" --name "$name" \
            --out "$AD/$name" $TRAIN $per "$@"
    fi
    if [ "$form" != full ] && [ "$form" != fusion ]; then
        "$PY" "$T/check_task.py" --model "$ENC" --adapter "$AD/$name" --adapterd "$BIN" --skips 0,2 \
            --text "the match was great" --text "How far is it from Denver to Aspen ?"
    fi
}
# Robust AdapterDrop Pfeiffer adapters for the four tasks (skips 0..2: a third of the 6 layers), the registry's tasks
train sst2 pfeiffer sst2 --drop-max 2
train agnews pfeiffer agnews --drop-max 2
train trec pfeiffer trec --drop-max 2
train emotion pfeiffer emotion --drop-max 2
# The control: the same SST-2 adapter without AdapterDrop, evaluated at the same skips
train sst2 pfeiffer sst2-control --eval-skips 2
# AdapterFusion for SST-2 over the five Pfeiffer adapters (pruned to k = 4, 2, 1 in the registry)
if [ ! -f "$AD/fusion-sst2.json" ]; then
    log "train fusion-sst2"
    # shellcheck disable=SC2086
    nice "$PY" "$T/adapters_train.py" --model "$ENC" --task sst2 --form fusion --name fusion-sst2 \
        --head-name sst2-fusion --children "$AD/sst2,$AD/agnews,$AD/trec,$AD/emotion,$AD/sst2-control" --fmt bin \
        --out "$AD/fusion-sst2" $TRAIN $SST2
fi
"$PY" "$T/check_task.py" --model "$ENC" --adapter "$AD/sst2" --adapter "$AD/agnews" --adapter "$AD/trec" \
    --adapter "$AD/emotion" --adapter "$AD/sst2-control" --fusion "$AD/fusion-sst2/fusion" \
    --head "$AD/fusion-sst2/head" --adapterd "$BIN" --text "the match was great"
if [ "$ADAPTERS" = main ]; then
    "$PY" "$T/registry.py" --work "$WORK" --out "$WORK/registry" --adapterd "$BIN" --data "$DATA"
    log "done (main tasks): registry in $WORK/registry"
    exit 0
fi
# One task each in the other forms
train agnews houlsby agnews-houlsby --drop-max 2
train emotion parallel emotion-parallel --drop-max 2
train emotion lora emotion-lora --drop-max 2
train trec peft_lora trec-peft --drop-max 2
train trec ia3 trec-ia3 --drop-max 2
train sst2 mam sst2-mam --drop-max 2 --fmt bin
train emotion prefix emotion-prefix --drop-max 2
train sst2 adamix sst2-adamix --drop-max 2
train agnews sparse agnews-sparse --drop-max 2
# Full fine-tuning yardsticks (same encoder, same rows)
for task in sst2 agnews trec emotion; do
    train "$task" full "$task-full"
done

# -- 4. the example registry ---------------------------------------------------------------------------------
"$PY" "$T/registry.py" --work "$WORK" --out "$WORK/registry" --adapterd "$BIN" --data "$DATA"
log "done: registry in $WORK/registry, results in $AD/*.json"
