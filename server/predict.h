/* predict.h - the inference routes up to the scheduler (see predict.c). */
#ifndef ADAPTERD_SERVER_PREDICT_H
#define ADAPTERD_SERVER_PREDICT_H

#include "internal.h"

/* MHD thread, body complete: POST /v1/predict (task NULL) or /v2/models/{task}/infer (task, task_len
 * from the URL). Answers errors at once; otherwise suspends the connection and submits a job (or
 * offloads the loads of tasks that are not resident and runs again when they are). Also the entry
 * for a request resumed after such loads. */
enum MHD_Result srv__predict(srv_request *r, const char *task, size_t task_len);

/* Returns a new reference to the version a request names: "name" is the current version,
 * "name@version" that version (any listed version that is not failed: a canary or an A/B check).
 * spec is len bytes. NULL when there is no such task or version. */
store_task *srv__task_acquire_spec(store_registry *reg, const char *spec, size_t len);

/* Tokenizes p's inputs for job j (j->model set; j->enc and j->truncated allocated for
 * p->n_inputs): texts with the model's tokenizer (truncated to the model's limit, or
 * --max-seq-len, when p->truncate), ids inputs as given after checking them against the model.
 * Adds up j->tokens. Returns 0, or -1 with *code and msg set. MHD thread. */
int srv__job_tokenize(srv_server *s, srv_job *j, const proto_predict_req *p, eng_status *code, char *msg, size_t msz);

#endif
