/* cost_model.c - the latency cost model (engine/run.h): calibration, prediction, correction.
 *
 * Why per shape class. A single rate measured on one 128-token pass (what this replaced) holds for
 * 128-row products only: a short request's layers run on a handful of rows, where the packed kernel
 * is far from its peak and fixed costs (thread wake-ups, LayerNorm, attention set-up) dominate, so
 * small models and short inputs were predicted 1.6-3.4x too fast. Here every layer of a plan is
 * priced at the rate measured for its own packed row count, and the pass's fixed parts (set-up,
 * embedding, heads) are measured apart.
 *
 * Why a correction. Calibration runs once, with the cores to itself; the server then runs with
 * other workers, other processes and adapters whose kernels calibration never timed. Each pass
 * run reports its wall time (eng_cost_observe), and the class of the pass keeps an exponentially
 * weighted mean of log(measured / calibrated): logs, so that a pass twice too slow and one twice too
 * fast cancel, each step clamped so that one pass preempted for 100 ms cannot wreck the estimate. The
 * fields are atomics updated with compare-and-swap: workers of one model share them without a lock.
 *
 * The prediction walks the plan as run/planner.c runs it: per input a trunk while some task starts
 * later, per task a stream from its born layer on (a late split runs its first adapters on copied
 * rows of the trunk's layer); the rows of a layer are all live streams' rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/run.h"
#include "model/encoder.h"
#include "run/cost.h"
#include "model/adapter.h"

/* Largest calibration rows when the caller gives none. */
#define COST_DEFAULT_ROWS 256
/* Classes above 64 rows are timed only while one pass of the class below took less than this
 * (ms, all layers): a small model gets its large classes, a bert-base does not pay seconds for them. */
#define COST_CLIMB_MS 40.0
/* Sequence length of the calibration passes' segments: short sentences, as requests mostly are;
 * the per-sequence cost is measured apart, at COST_SEG_ROWS rows cut into COST_SEG_SHORT-row pieces. */
#define COST_SEG_LEN 32
#define COST_SEG_SHORT 4
#define COST_SEG_ROWS 64
/* Timed repetitions per class (the best counts), after one untimed pass. */
#define COST_REPS_SMALL 5
#define COST_REPS_LARGE 3
#define COST_LARGE_ROWS 64
/* Weight of a new pass in a class's correction once it has COST_EWMA_AFTER passes; before, the mean
 * of the passes and the calibration (log ratio 0, weighing as one pass). */
#define COST_EWMA_ALPHA 0.2
#define COST_EWMA_AFTER 5
/* A pass's log ratio is clamped to +-log(8), and its step to +-log(2) around the class's current
 * mean: a pass preempted by another process (or a worker's cold first pass) is not a new machine,
 * while a load that lasts moves the mean by up to a weight times log(2) a pass. */
#define COST_LOG_CLAMP 2.0794415416798357
#define COST_STEP_CLAMP 0.6931471805599453

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The fastest of n timings: what the machine does when nothing else runs. On a shared machine the
 * median of a few passes swings with other processes' bursts (a 1-row pass waits for descheduled
 * threads); the best is stable, and what load adds is the correction's to learn. */
static double best(const double *v, int n) {
    double b = v[0];
    for (int i = 1; i < n; i++) b = v[i] < b ? v[i] : b;
    return b;
}

/* ---- prediction ---- */

/* Nearest class (on a log scale) of a layer with `rows` packed rows. */
static int class_of(const eng_cost_model *cm, int rows) {
    int k = 0;
    while (k + 1 < cm->n_classes && (double)rows > 2.0 * cm->rows[k]) k++; /* 2x: the log midpoint of 4^k, 4^(k+1) */
    return k;
}

/* ms per GFLOP at `rows`: interpolated between the classes' rates in log(rows), flat beyond them. */
static double rate_at(const eng_cost_model *cm, int rows) {
    if (rows <= cm->rows[0]) return cm->ms_per_gflop[0];
    int n = cm->n_classes;
    if (rows >= cm->rows[n - 1]) return cm->ms_per_gflop[n - 1];
    int k = 0;
    while (rows > cm->rows[k + 1]) k++;
    double t = (log(rows) - log(cm->rows[k])) / (log(cm->rows[k + 1]) - log(cm->rows[k]));
    return exp((1 - t) * log(cm->ms_per_gflop[k]) + t * log(cm->ms_per_gflop[k + 1]));
}

/* Calibrated prediction; *max_rows gets the plan's largest layer's rows. */
static double predict(const eng_cost_model *cm, const eng_model *m, const eng_input *inputs, int n_inputs,
                      int *max_rows) {
    const eng_config *c = eng_model_config(m);
    int L = c->n_layers, top = 0, n_tokens = 0, n_outs = 0;
    double ms = cm->pass_ms;
    for (int l = 0; l < L; l++) {
        long rows = 0, segs = 0;
        double g = 0;
        for (int i = 0; i < n_inputs; i++) {
            int len = inputs[i].len, trunk_until = 0;
            for (int k = 0; k < inputs[i].n_tasks; k++) {
                const eng_task_req *r = &inputs[i].tasks[k];
                int start = eng_task_first_layer(r->task), born = eng_task_split_layer(r->task, r->skip);
                if (r->skip > start) start = r->skip;
                if (born > trunk_until) trunk_until = born;
                if (born <= l && born < L) rows += len, segs++, g += eng__layer_gflop(c, len);
                if (l >= start) g += eng__adapter_gflop(c, &eng__task_layers(r->task)[l], len);
            }
            if (trunk_until > l) rows += len, segs++, g += eng__layer_gflop(c, len);
        }
        if (rows > top) top = (int)rows;
        if (rows) ms += g * rate_at(cm, (int)rows) + segs * cm->seq_ms;
    }
    for (int i = 0; i < n_inputs; i++) n_tokens += inputs[i].len, n_outs += inputs[i].n_tasks;
    *max_rows = top;
    return ms + n_tokens * cm->embed_ms_per_row + n_outs * cm->head_ms;
}

double eng_cost_correction(const eng_cost_model *cm, int rows) {
    int k = class_of(cm, rows);
    /* nearest class with passes observed, looking below first at equal distance */
    for (int d = 0; d < cm->n_classes; d++)
        for (int s = -1; s <= 1; s += 2) {
            int q = k + s * d;
            if (q >= 0 && q < cm->n_classes && atomic_load(&((eng_cost_model *)cm)->n_observed[q]) > 0)
                return exp(atomic_load(&((eng_cost_model *)cm)->log_ratio[q]));
        }
    return 1.0;
}

double eng_cost_predict_calibrated(const eng_cost_model *cm, const eng_model *m, const eng_input *inputs,
                                   int n_inputs) {
    int top;
    return predict(cm, m, inputs, n_inputs, &top);
}

double eng_cost_predict(const eng_cost_model *cm, const eng_model *m, const eng_input *inputs, int n_inputs) {
    int top;
    double ms = predict(cm, m, inputs, n_inputs, &top);
    return ms * eng_cost_correction(cm, top);
}

void eng_cost_observe(eng_cost_model *cm, const eng_model *m, const eng_input *inputs, int n_inputs,
                      double measured_ms) {
    int top;
    double pred = predict(cm, m, inputs, n_inputs, &top);
    if (!(pred > 0) || !(measured_ms > 0)) return;
    double x = log(measured_ms / pred);
    x = x > COST_LOG_CLAMP ? COST_LOG_CLAMP : x < -COST_LOG_CLAMP ? -COST_LOG_CLAMP : x;
    int k = class_of(cm, top);
    /* counted only while it weighs the mean: a server's billions of passes never wrap it */
    int n = atomic_load(&cm->n_observed[k]);
    n = (n < COST_EWMA_AFTER ? atomic_fetch_add(&cm->n_observed[k], 1) : n) + 1;
    double a = n < COST_EWMA_AFTER ? 1.0 / (n + 1) : COST_EWMA_ALPHA;
    double old = atomic_load(&cm->log_ratio[k]), d;
    do {
        d = x - old;
        d = d > COST_STEP_CLAMP ? COST_STEP_CLAMP : d < -COST_STEP_CLAMP ? -COST_STEP_CLAMP : d;
    } while (!atomic_compare_exchange_weak(&cm->log_ratio[k], &old, old + a * d));
}

/* ---- calibration ---- */

/* Times every layer on `rows` rows cut into segments of COST_SEG_LEN (the model's limit if lower),
 * embedded from ids (untimed, before each repetition, so each pass sees real activations). Returns
 * the best ms of one layer, or a negative status. */
static int time_layers(const eng_model *m, eng_state *st, int rows, int seg, int32_t *ids, int32_t *lens, eng_seg *segs,
                       float *x, double *layer_ms, double *gflop, int *n_segs, double *embed_ms, eng_err *err) {
    const eng_config *c = eng_model_config(m);
    int n_seg = 0;
    if (seg > c->max_pos - c->pos_offset) seg = c->max_pos - c->pos_offset;
    *gflop = 0;
    for (int r = 0; r < rows; r += seg) {
        int len = rows - r < seg ? rows - r : seg;
        lens[n_seg] = len;
        segs[n_seg++] = (eng_seg){r, len};
        *gflop += eng__layer_gflop(c, len);
    }
    eng_batch b = {.n_seq = n_seg, .ids = ids, .seq_len = lens};
    int reps = rows > COST_LARGE_ROWS ? COST_REPS_LARGE : COST_REPS_SMALL, rc = 0;
    double t[COST_REPS_SMALL + 1], te[COST_REPS_SMALL + 1];
    for (int r = 0; r <= reps && !rc; r++) {
        double t0 = now_ms();
        if ((rc = eng__embed(m, st, &b, x, err))) break;
        double t1 = now_ms();
        for (int l = 0; l < c->n_layers && !rc; l++)
            rc = eng__layer_forward(m, st, l, x, rows, segs, n_seg, NULL, 0, NULL, 0, NULL, err);
        if (r > 0) te[r - 1] = t1 - t0, t[r - 1] = (now_ms() - t1) / c->n_layers; /* r == 0 warms up */
    }
    if (rc) return rc;
    *layer_ms = best(t, reps);
    *embed_ms = best(te, reps);
    *n_segs = n_seg;
    return 0;
}

int eng_cost_calibrate(const eng_model *m, eng_state *st, int rows, eng_cost_model *cm, eng_err *err) {
    const eng_config *c = eng_model_config(m);
    double t_begin = now_ms();
    if (rows <= 0) rows = COST_DEFAULT_ROWS;
    memset(cm, 0, sizeof *cm);
    for (int k = 0; k < ENG_COST_CLASSES; k++) {
        atomic_init(&cm->log_ratio[k], 0.0);
        atomic_init(&cm->n_observed[k], 0);
    }
    for (int r = 1; r <= rows && cm->n_classes < ENG_COST_CLASSES; r *= 4) cm->rows[cm->n_classes++] = r;
    int top = cm->rows[cm->n_classes - 1], H = c->hidden;
    int32_t *ids = malloc((size_t)top * sizeof *ids), *lens = malloc((size_t)top * sizeof *lens);
    eng_seg *segs = malloc((size_t)top * sizeof *segs);
    float *x = malloc((size_t)top * H * sizeof *x), *pooled = malloc((size_t)H * sizeof *pooled);
    int rc = 0;
    if (!ids || !lens || !segs || !x || !pooled) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    /* ordinary ids away from the special ones at the start of most vocabularies */
    for (int i = 0; i < top && !rc; i++) ids[i] = (int32_t)((i * 7919u + 1000u) % (unsigned)c->vocab);
    double embed_ms = 0, one_layer_ms = 0, ms, g, e, ms2, g2;
    int ns, ns2;
    /* the cost of a sequence (attention set-up, per-sequence kernels): the same rows in short and
     * in long sequences; the products are the same, the attention FLOPs are priced at the rate */
    int sr = COST_SEG_ROWS < top ? COST_SEG_ROWS : top;
    if (!rc) rc = time_layers(m, st, sr, COST_SEG_LEN, ids, lens, segs, x, &ms, &g, &ns, &e, err); /* also warms up */
    if (!rc) rc = time_layers(m, st, sr, COST_SEG_LEN, ids, lens, segs, x, &ms, &g, &ns, &e, err);
    if (!rc) rc = time_layers(m, st, sr, COST_SEG_SHORT, ids, lens, segs, x, &ms2, &g2, &ns2, &e, err);
    if (!rc && ns2 > ns) {
        double per = (ms2 - ms - (g2 - g) * (ms / g)) / (ns2 - ns);
        cm->seq_ms = per > 0 ? per : 0;
    }
    int n = cm->n_classes;
    for (int k = 0; k < n && !rc; k++) {
        if ((rc = time_layers(m, st, cm->rows[k], COST_SEG_LEN, ids, lens, segs, x, &ms, &g, &ns, &e, err))) break;
        double rest = ms - ns * cm->seq_ms;
        cm->ms_per_gflop[k] = (rest > 0.1 * ms ? rest : 0.1 * ms) / g;
        if (k == 0) one_layer_ms = ms;
        embed_ms = e / cm->rows[k];
        cm->n_classes = k + 1;
        if (cm->rows[k] >= COST_SEG_ROWS && ms * c->n_layers > COST_CLIMB_MS) break;
    }
    if (!rc) {
        cm->embed_ms_per_row = embed_ms;
        /* a whole one-token pass, minus its layers and embedding, is the fixed part */
        int32_t one = ids[0], len = 1;
        eng_batch b = {.n_seq = 1, .ids = &one, .seq_len = &len};
        double t[COST_REPS_SMALL], th[COST_REPS_SMALL];
        eng_seg s0 = {0, 1};
        for (int r = 0; r < COST_REPS_SMALL && !rc; r++) {
            double t0 = now_ms();
            rc = eng_encode(m, st, &b, x, NULL, err);
            double t1 = now_ms();
            if (!rc) rc = eng__pooler_forward(m, st, x, &s0, 1, pooled, err);
            t[r] = t1 - t0, th[r] = now_ms() - t1;
        }
        if (!rc) {
            double fixed = best(t, COST_REPS_SMALL) - c->n_layers * one_layer_ms - cm->embed_ms_per_row;
            cm->pass_ms = fixed > 0 ? fixed : 0;
            cm->head_ms = best(th, COST_REPS_SMALL);
        }
    }
    free(ids), free(lens), free(segs), free(x), free(pooled);
    cm->calibration_ms = now_ms() - t_begin;
    return rc;
}
