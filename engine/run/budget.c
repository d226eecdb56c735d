/* budget.c - from a request's budget or latency target to per-task AdapterDrop skips.
 *
 * A latency target is planned on the cost model (run/cost_model.c): the plan's predicted wall time,
 * per layer at the rate measured for its packed rows, corrected by the passes run. The planner's
 * sharing is modelled exactly: trunk rows run up to the latest start layer of the input's tasks, each
 * task's stream from its start layer on. */
#include <math.h>

#include "engine/run.h"
#include "run/cost.h"
#include "model/adapter.h"

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
            const eng_task_layer *ly = eng__task_layers(t);
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
