/* job.c - see job.h. */
#include "job.h"

#include <stdlib.h>

const char *srv__skip_source_name(srv_skip_source s) {
    switch (s) {
    case SRV_SKIP_DEFAULT: return "default";
    case SRV_SKIP_REQUEST: return "request";
    case SRV_SKIP_BUDGET: return "budget";
    case SRV_SKIP_LATENCY: return "latency";
    case SRV_SKIP_ADAPTIVE: return "adaptive";
    }
    return "default";
}

void srv__job_free(srv_job *j) {
    if (!j) return;
    if (j->part_outs) {
        int n_out = 0;
        for (int i = 0; i < j->n_inputs; i++) n_out += srv__job_seq_tasks(j, i);
        eng_task_outs_free(j->part_outs, n_out);
        free(j->part_outs);
    }
    for (int i = 0; j->enc && i < j->n_inputs; i++) eng_tok_encoding_free(&j->enc[i]);
    for (int k = 0; j->tasks && k < j->n_tasks; k++) store_task_release(j->tasks[k]);
    store_model_release(j->model_ref);
    for (int k = 0; j->ro && k < j->n_tasks; k++) store_task_release(j->ro[k].alt);
    for (int k = 0; k < j->n_shadow; k++) store_task_release(j->shadows[k].cand);
    free(j->ro), free(j->shadows), free(j->seq_tasks);
    free(j->enc), free(j->truncated), free(j->win_first), free(j->text_tokens), free(j->tlong), free(j->tasks), free(j->treqs), free(j->skip_src), free(j->body);
    if (j->owns_req) proto_predict_free(&j->req);
    free(j);
}
