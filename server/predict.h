/* predict.h - the job of a request that runs tasks (see predict.c). */
#ifndef ADAPTERD_SERVER_PREDICT_H
#define ADAPTERD_SERVER_PREDICT_H

#include "internal.h"

/* Builds j (its tasks, held and resident, set by front.c) from f's decoded request: skips, checks,
 * tokenization, latency plan. Returns 0, or -1 with f->code and f->msg set. */
int srv__predict_job(srv_front *f, srv_job *j);

/* Tokenizes p's inputs for job j (j->model set; j->enc and j->truncated allocated for
 * p->n_inputs): texts with the model's tokenizer (truncated to the model's limit, or
 * --max-seq-len, when p->truncate), ids inputs as given after checking them against the model.
 * Adds up j->tokens. Returns 0, or -1 with *code and msg set. */
int srv__job_tokenize(srv_server *s, srv_job *j, const proto_predict_req *p, eng_status *code, char *msg, size_t msz);

#endif
