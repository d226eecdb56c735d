/* run.h - many tasks on many inputs in one pass: share the trunk, fan out, batch through one GEMM.
 *
 * For every input, the layers below a task's first adapter layer (its AdapterDrop skip, or the
 * first layer holding its adapters) are computed once, on the input's shared "trunk" stream. At a
 * task's start layer its own stream splits off as a copy of the trunk rows. Tasks that start at
 * the same layer share the trunk until there. At every layer, all live streams of all inputs are
 * packed into one row block, ordered [trunks | streams of task A | streams of task B | ...], and run
 * through the layer's backbone weights in one GEMM per projection; each task's adapter products
 * run once over all of that task's rows. Attention stays per stream.
 *
 * The results of a task are those of running it alone with the same skip (tests check 1e-5).
 *
 * Usage:
 *     eng_task_req reqs[] = {{sentiment, 0}, {topic, 5}};
 *     eng_input in = {.ids = ids, .len = n, .tasks = reqs, .n_tasks = 2};
 *     eng_task_out outs[2];
 *     if (eng_run(model, state, &in, 1, outs, NULL, &err) == 0) { ...; eng_task_outs_free(outs, 2); } */
#ifndef ADAPTERD_ENGINE_RUN_H
#define ADAPTERD_ENGINE_RUN_H

#include <stdatomic.h>
#include <stdint.h>

#include "engine/task.h"
#include "engine/model.h"

typedef struct {
    const eng_task *task;
    int skip; /* AdapterDrop: layers 0..skip-1 run without this task's adapters (0..L) */
} eng_task_req;

typedef struct eng_input {
    const int32_t *ids;      /* (len) */
    const int32_t *type_ids; /* (len) or NULL */
    int len;
    const eng_task_req *tasks;
    int n_tasks;
} eng_input;

typedef struct {
    float *logits;   /* (n_rows, num_labels); malloc'd, release with eng_task_outs_free */
    int n_rows;      /* 1 for sequence-level heads, len for tagging / QA */
    int num_labels;
    int start_layer; /* first layer run with this task's adapters (L: none) */
} eng_task_out;

/* What the plan did, for --explain and metrics. Arrays have n_layers entries; malloc'd by eng_run
 * when stats is not NULL, released with eng_plan_stats_free. */
typedef struct {
    int n_layers;
    int *rows;          /* packed rows per layer */
    int *streams;       /* live streams per layer (trunks + task streams) */
    int *trunks;        /* of which trunks */
    double *ms;         /* wall time per layer */
    double *gflop;      /* backbone + attention + adapter work per layer, in GFLOP */
    double heads_ms, embed_ms, total_ms;
    int tokens;         /* input tokens */
} eng_plan_stats;

/* Runs every task of every input. outs has one entry per (input, task) in order. Returns 0, or a
 * negative eng_status (ENG_INVALID_ARGUMENT for bad ids, lengths or skips, naming the input and
 * task; ENG_NO_MEMORY), in which case outs hold nothing to free. */
int eng_run(const eng_model *m, eng_state *st, const eng_input *inputs, int n_inputs, eng_task_out *outs,
            eng_plan_stats *stats, eng_err *err);

void eng_task_outs_free(eng_task_out *outs, int n);
void eng_plan_stats_free(eng_plan_stats *s);

/* ---- budgets ----
 * A request may give each task a skip, a budget level, or a latency target; all end as skips within
 * each task's allowed range (eng_task_skips). */

/* Budget level in [0, 1] -> skip: 1 is full quality (the range's min), 0 the cheapest (its max),
 * linear in between, rounded to the nearest layer. */
int eng_skip_for_budget(const eng_task *t, double budget);

/* ---- the cost model ----
 * Predicted wall time of a plan, measured on this machine for this model (so for its precision and
 * size) at start-up, and corrected by the passes actually run. A pass costs a fixed part (set-up,
 * the embedding, one head per task output) plus, per layer, the layer's work in GFLOP (backbone
 * products and attention of every live stream, the adapters of every task group) times a rate that
 * depends on the layer's packed rows (a 4-row product runs far below the kernel's peak, a 256-row one
 * near it), plus a cost per sequence in the layer (attention set-up). The rate is measured per shape
 * class (rows 1, 4, 16, 64, 256, ...: all layers on that many rows, best of a few passes) and
 * interpolated between classes on a log scale. What calibration misses (load from other processes,
 * cache effects of real batches, adapter kernels) is learnt from the passes run: per class, an
 * exponentially weighted mean of log(measured / calibrated prediction), each pass's step clamped. */

/* Shape classes: rows 4^k, k < ENG_COST_CLASSES. */
#define ENG_COST_CLASSES 6

typedef struct {
    int n_classes;                          /* classes measured: rows 4^k up to the calibration's rows, or
                                             * fewer when a pass of 64 rows or more already took 40 ms */
    int rows[ENG_COST_CLASSES];             /* packed rows of each class's timed passes */
    double ms_per_gflop[ENG_COST_CLASSES];  /* best wall time of one layer per GFLOP at those rows */
    double embed_ms_per_row;                /* the embedding, per input token */
    double pass_ms;                         /* fixed cost of a pass beyond its layers and embedding */
    double head_ms;                         /* one task output's pooler and head */
    double seq_ms;                          /* one sequence (stream) in one layer: attention set-up */
    double calibration_ms;                  /* how long the calibration took */
    /* corrections learnt from passes run (eng_cost_observe): any thread, lock-free */
    _Atomic double log_ratio[ENG_COST_CLASSES]; /* mean log(measured / calibrated), exponentially weighted */
    atomic_int n_observed[ENG_COST_CLASSES];  /* passes observed, counted up to a few (0: none yet) */
} eng_cost_model;

/* Measures cm on m with st's threads (run it with the cores as the workers will have them): every
 * shape class up to `rows` packed rows (0: 256), the embedding, a pass's fixed cost and a head. A
 * few hundred ms on a bert-base model. Corrections start empty. Returns 0 or a negative eng_status. */
int eng_cost_calibrate(const eng_model *m, eng_state *st, int rows, eng_cost_model *cm, eng_err *err);

/* Work of a plan in GFLOP, and its predicted wall time in ms, for the inputs' current skips:
 * eng_cost_predict applies the correction of the plan's shape class (the class of its largest layer;
 * a class with no pass observed yet borrows the nearest observed one), eng_cost_predict_calibrated
 * does not. Any thread. */
double eng_plan_gflop(const eng_model *m, const eng_input *inputs, int n_inputs);
double eng_cost_predict(const eng_cost_model *cm, const eng_model *m, const eng_input *inputs, int n_inputs);
double eng_cost_predict_calibrated(const eng_cost_model *cm, const eng_model *m, const eng_input *inputs, int n_inputs);

/* A pass of these inputs (eng_run) took measured_ms: updates the correction of its shape class.
 * Any thread, concurrently with predictions and other observations (no lock). */
void eng_cost_observe(eng_cost_model *cm, const eng_model *m, const eng_input *inputs, int n_inputs, double measured_ms);

/* The factor eng_cost_predict applies to a plan whose largest layer has `rows` packed rows (1 when
 * nothing was observed). */
double eng_cost_correction(const eng_cost_model *cm, int rows);

/* Raises skips (within each task's range, one layer at a time, always on the task with the most
 * room left) until the predicted time is at most target_ms. The inputs' task arrays are updated in
 * place. Returns 0 when the target is met, or ENG_LIMIT when even the largest allowed skips predict
 * more (skips are then at their maxima and *predicted_ms says by how much). */
int eng_plan_for_latency(const eng_cost_model *cm, const eng_model *m, eng_input *inputs, int n_inputs,
                         eng_task_req *const *reqs, double target_ms, double *predicted_ms, eng_err *err);

#endif
