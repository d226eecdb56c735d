/* budget.c - from a request's budget or latency target to per-task AdapterDrop skips.
 *
 * The cost model is deliberately simple: the plan's work in FLOPs (backbone products and attention
 * for every live stream and trunk, plus the adapters' products) times a wall-time-per-FLOP rate
 * measured on this machine at start-up. The planner's sharing is modelled exactly: trunk rows run
 * up to the latest start layer of the input's tasks, each task's stream from its start layer on. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "engine/run.h"
#include "run/cost.h"
#include "task/adapter.h"

int eng_skip_for_budget(const eng_task *t, double budget) {
    eng_skip_range r = eng_task_skips(t);
    if (budget >= 1.0) return r.min;
    if (budget <= 0.0) return r.max;
    return r.min + (int)lround((1.0 - budget) * (r.max - r.min));
}

double eng_plan_gflop(const eng_model *m, const eng_input *inputs, int n_inputs) {
    const eng_config *c = eng_model_config(m);
    double g = 0;
    for (int i = 0; i < n_inputs; i++) {
        int len = inputs[i].len, trunk_until = 0;
        for (int k = 0; k < inputs[i].n_tasks; k++) {
            const eng_task *t = inputs[i].tasks[k].task;
            int start = eng_task_first_layer(t);
            if (inputs[i].tasks[k].skip > start) start = inputs[i].tasks[k].skip;
            const eng_task_layer *ly = eng_task_layers(t);
            /* a late split shares the trunk through layer start's FFN (run/planner.c) */
            int born = eng_task_split_layer(t, inputs[i].tasks[k].skip);
            if (born > trunk_until) trunk_until = born;
            for (int l = start; l < c->n_layers; l++)
                g += (l >= born ? eng__layer_gflop(c, len) : 0) + eng__adapter_gflop(c, &ly[l], len);
        }
        g += trunk_until * eng__layer_gflop(c, len);
    }
    return g;
}

double eng_cost_predict(const eng_cost_model *cm, const eng_model *m, const eng_input *inputs, int n_inputs) {
    return eng_plan_gflop(m, inputs, n_inputs) * cm->ms_per_gflop;
}

int eng_cost_calibrate(const eng_model *m, eng_state *st, int tokens, eng_cost_model *cm, eng_err *err) {
    const eng_config *c = eng_model_config(m);
    if (tokens <= 0) tokens = 128;
    if (tokens > c->max_pos - c->pos_offset) tokens = c->max_pos - c->pos_offset;
    int32_t *ids = malloc((size_t)tokens * sizeof *ids), len = tokens;
    float *out = malloc((size_t)tokens * c->hidden * sizeof *out);
    if (!ids || !out) {
        free(ids);
        free(out);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < tokens; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)c->vocab);
    eng_batch b = {.n_seq = 1, .ids = ids, .seq_len = &len};
    double best = 1e30;
    int rc = 0;
    for (int r = 0; r < 3 && !rc; r++) { /* best of 3 after the first (warm-up) */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rc = eng_encode(m, st, &b, out, NULL, err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (r > 0 && ms < best) best = ms;
    }
    free(ids);
    free(out);
    if (rc) return rc;
    cm->hidden = c->hidden;
    cm->intermediate = c->intermediate;
    cm->n_layers = c->n_layers;
    cm->ms_per_gflop = best / (c->n_layers * eng__layer_gflop(c, tokens));
    return 0;
}

int eng_plan_for_latency(const eng_cost_model *cm, const eng_model *m, eng_input *inputs, int n_inputs,
                         eng_task_req *const *reqs, double target_ms, double *predicted_ms, eng_err *err) {
    for (;;) {
        double ms = eng_cost_predict(cm, m, inputs, n_inputs);
        *predicted_ms = ms;
        if (ms <= target_ms) return 0;
        /* raise the skip of the task with the most room left */
        int bi = -1, bk = -1, room = 0;
        for (int i = 0; i < n_inputs; i++)
            for (int k = 0; k < inputs[i].n_tasks; k++) {
                eng_skip_range r = eng_task_skips(reqs[i][k].task);
                int left = r.max - reqs[i][k].skip;
                if (left > room) room = left, bi = i, bk = k;
            }
        if (bi < 0)
            return eng_err_set(err, ENG_LIMIT, "latency target %.1f ms not reachable: %.1f ms predicted at the largest allowed skips",
                               target_ms, ms);
        reqs[bi][bk].skip++;
    }
}
