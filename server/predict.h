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

/* The outputs a v2 request asks for (PROTO_V2_OUT_* bits) against what task (a spec, as
 * srv__task_acquire_spec reads it) answers: 0 when it answers them all (or is unknown, or its head
 * is not known yet), else -1 with the names it answers in answers (n bytes). */
int srv__check_v2_outputs(store_registry *reg, unsigned outputs, const char *task, char *answers, size_t n);

typedef enum {
    PREPARE_READY,       /* j is ready to submit */
    PREPARE_RELOAD,      /* a task is no longer resident: load it and run the request again */
    PREPARE_FAILED,      /* *code and msg say why */
} srv_prepare_result;

/* Resolves p's tasks and skips into job j (form, dialect and req or grpc set by the caller) and
 * tokenizes; id is the request's id, t0 its first byte (srv__now), load_s the seconds it waited for
 * task loads. The job holds its task references whatever the result (srv__job_free). Any thread
 * that may tokenize (an MHD thread, or the loop for gRPC). */
srv_prepare_result srv__job_prepare(srv_server *s, srv_job *j, const proto_predict_req *p, const char *id, double t0, double load_s,
                                    eng_status *code, char *msg, size_t msz);

#endif
