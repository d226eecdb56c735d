/* respond.h - from a job's engine outputs to its response body (worker thread). */
#ifndef ADAPTERD_SERVER_RESPOND_H
#define ADAPTERD_SERVER_RESPOND_H

#include "engine/run.h"
#include "job.h"
#include "proto/proto.h"
#include "server/answer.h" /* srv__wire_head_kind */

/* Encodes job j's answer from outs ((n_inputs, n_tasks), input-major) and stats (NULL: no explain)
 * into j->body / j->status; when out of memory the body is a 500 error. */
void srv__job_respond(srv_job *j, const eng_task_out *outs, const eng_plan_stats *stats);

/* Encodes embed job j's answer (pooling and normalization as the job says) from hidden (j->tokens, H),
 * the last hidden state of its inputs' rows, and pooled (n_inputs, H), the pooler output (NULL
 * unless the job pools with "pooler"); when out of memory the body is a 500 error. */
void srv__job_respond_embed(srv_job *j, const float *hidden, const float *pooled);

/* Replaces j's body with the error for code (msg, or the table's description when empty). */
void srv__job_fail(srv_job *j, eng_status code, const char *msg);

#endif
