/* job.h - one inference job: a request's inputs x tasks, tokenized, with a skip per task. front.c
 * builds it, the scheduler (scheduler.c) batches it, a worker runs it and respond.c turns its outputs
 * into the response body with the request's codec; the loop then hands it to its edge. */
#ifndef ADAPTERD_SERVER_JOB_H
#define ADAPTERD_SERVER_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include "adapters_store/store.h"
#include "engine/run.h"
#include "engine/tokenizer.h"
#include "inbox.h"
#include "proto/proto.h"
#include "tenant.h"
#include "trace.h"

/* Why a task ran at its skip; the response names it ("skip_source"). */
typedef enum {
    SRV_SKIP_DEFAULT,    /* the task's default: adaptive mode may raise it */
    SRV_SKIP_REQUEST,    /* "skip" */
    SRV_SKIP_BUDGET,     /* "budget" */
    SRV_SKIP_LATENCY,    /* chosen for "latency_ms" through the cost model */
    SRV_SKIP_ADAPTIVE,   /* raised by the scheduler because the queue wait exceeded its target */
} srv_skip_source;

/* Wire name: "default", "request", "budget", "latency", "adaptive". */
const char *srv__skip_source_name(srv_skip_source s);

/* A task of the job under a rollout (server/rollout.c): which rollout, and the version the job runs. */
typedef struct {
    store_rollout ro;            /* mode NONE: the task has none (or the request named a version) */
    store_task *alt;             /* canary: the version not chosen yet, held until the token ids decide; NULL after */
    bool candidate;              /* canary: the candidate answers this request */
} srv_job_rollout;

/* A shadow: the candidate of task `of`'s rollout as one more task stream of the job. */
typedef struct {
    int of;                      /* the task (index in tasks) it shadows */
    store_task *cand;            /* a reference */
    store_rollout ro;
} srv_shadow;

/* Owned by its request; the scheduler borrows it from submission until the loop hands it back. */
typedef struct srv_job {
    srv_inbox_node inbox;        /* the scheduler's inbox (any thread -> loop) */
    struct srv_job *next;        /* the scheduler's FIFO and batches (loop, then one worker) */
    const struct srv_edge *edge; /* the edge its request came through (front.h): told when the job is done */
    void *edge_ctx;              /* the edge's request; NULL once abandoned at the drain deadline */
    const proto_codec *codec;    /* the request's protocol: the answer's encoder and error shape */
    const proto_predict_req *preq; /* &req once prepared (NULL in a job built by hand) */
    proto_predict_req req;       /* the decoded request, a copy of its front's taken once the job is built: it
                                  * shares the front's buffers, owned by the front until an abandon (owns_req) */
    bool owns_req;               /* abandoned at the drain deadline: req's buffers are the job's to free */
    const char *request_id;      /* id below, for the body */
    char id[72];                 /* the request's id, copied: the job may outlive its request */
    double t_request;            /* the request's first byte, seconds, monotonic */
    srv_tenant_class tenant;     /* its caller's fair-share queue, weight and priority (tenant.h) */
    bool embed;                  /* the encoder alone, no task (eng_encode); batched only with embeds */
    store_model *model;          /* the tasks' model (borrowed from them), or an embed's (model_ref) */
    int n_inputs, n_tasks;
    store_task **tasks;          /* (n_tasks) references, released with the job */
    eng_task_req *treqs;         /* (n_tasks + n_shadow) engine task + skip, shared by all inputs: the request's tasks,
                                  * then its shadows */
    srv_skip_source *skip_src;   /* (n_tasks) */
    int adaptive_raised;         /* layers the scheduler added over all tasks (0: none) */
    double latency_ms, predicted_ms; /* "latency_ms" and the cost model's prediction; -1 when not asked */
    eng_cost_model *cost;        /* the model's cost model (server-owned), told each pass's time; NULL: none */
    double load_ms;              /* time the request waited for its tasks to load; 0: none */
    eng_tok_encoding *enc;       /* (n_inputs) the sequences the engine runs: one per input, or an input's windows */
    int *truncated;              /* (n_texts) 1 when the input was cut */
    const proto_text *texts;     /* (n_texts) borrowed from the decoded request */
    int tokens;                  /* total tokens of the sequences */
    /* long inputs read in windows (predict.c): n_inputs counts sequences, n_texts the request's inputs;
     * input i is sequences win_first[i] .. win_first[i + 1] - 1. win_first NULL: one sequence each
     * (n_texts == n_inputs) */
    int n_texts;
    int *win_first;              /* (n_texts + 1) or NULL */
    int *text_tokens;            /* (n_texts) tokens of each whole input (untruncated), or NULL */
    proto_long *tlong;           /* (n_tasks) how each task reads a long single text ("long"), or NULL: the first window */
    /* rollouts: per task (NULL: none touches the job); shadows sorted by percent, largest first, so the
     * ones a sequence runs are a prefix: sequence s runs seq_tasks[s] entries of treqs (NULL: n_tasks) */
    struct srv_rollouts *rollouts;
    srv_job_rollout *ro;         /* (n_tasks) or NULL */
    srv_shadow *shadows;         /* (n_shadow) */
    int n_shadow;
    int *seq_tasks;              /* (n_inputs) or NULL */
    bool shadow_dropped;         /* the scheduler dropped the shadows (load, max_share): every sequence runs n_tasks */
    /* embed jobs: n_tasks 0; the model reference is the job's own */
    store_model *model_ref;
    const char *model_id;        /* the model's name as the answer says it (models.c), server-owned; NULL: its registry name */
    proto_pooling pooling;       /* resolved: never PROTO_POOL_DEFAULT */
    double t_submit, t_start, t_end;       /* seconds, monotonic; t_start 0: never ran */
    int batch_requests, batch_inputs, batch_tokens, batch_outputs; /* of its first pass */
    /* a job split across passes (scheduler.c, under the light-tenant cap): sequences seq_done ..
     * n_inputs - 1 are still to run, the pass it is in runs part_first .. part_first + part_n - 1, and
     * part_outs (its outputs, input-major as respond wants them) gathers the parts run; NULL: never split */
    int seq_done, part_first, part_n;
    eng_task_out *part_outs;
    /* result, written by the worker, read after the loop hands the job back */
    unsigned status;
    char *body;
    size_t body_len;
    size_t head_len;             /* v2 binary answer: the bytes of JSON before the tensors' (Inference-Header-Content-Length); 0: JSON only */
    eng_status fail_code;        /* a failed job: the error (status and body follow from it); 0: none */
    char fail_msg[256];
    srv_trace_job trace;         /* its request's trace ids and what the worker stamped (trace.h) */
} srv_job;

/* Task streams sequence s runs: its tasks, and the shadows sampled for it unless they were dropped. */
static inline int srv__job_seq_tasks(const srv_job *j, int s) {
    return j->seq_tasks && !j->shadow_dropped ? j->seq_tasks[s] : j->n_tasks;
}

/* Releases the job's encodings, task references and body; NULL does nothing. */
void srv__job_free(srv_job *j);

#endif
