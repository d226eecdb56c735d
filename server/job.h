/* job.h - one inference job: a request's inputs x tasks, tokenized, with a skip per task. predict.c
 * builds it, the scheduler (scheduler.c) batches it, a worker runs it and respond.c turns its outputs
 * into the response body; the loop then resumes the request's connection. */
#ifndef ADAPTERD_SERVER_JOB_H
#define ADAPTERD_SERVER_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include "adapters_store/store.h"
#include "engine/run.h"
#include "engine/tokenizer.h"
#include "inbox.h"
#include "proto/proto.h"

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

/* The form of the answer. */
typedef enum {
    SRV_ANSWER_V1,       /* POST /v1/predict */
    SRV_ANSWER_V2,       /* KServe v2 infer */
    SRV_ANSWER_GRPC,     /* KServe v2's gRPC ModelInfer: the body is the prefixed ModelInferResponse (grpc_raw) */
    SRV_ANSWER_EMBED,    /* POST /v1/embed: the encoder alone, no task (eng_encode); batched only with embeds */
    SRV_ANSWER_TEI_PREDICT, /* TEI's POST /predict: one task's labels by score */
    SRV_ANSWER_TEI_RERANK,  /* TEI's POST /rerank: texts by score */
} srv_answer_form;

/* Owned by its request; the scheduler borrows it from submission until the loop hands it back. */
typedef struct srv_job {
    srv_inbox_node inbox;        /* the scheduler's inbox (any thread -> loop) */
    struct srv_job *next;        /* the scheduler's FIFO and batches (loop, then one worker) */
    struct srv_request *req;     /* NULL once abandoned at the drain deadline (the scheduler frees it) */
    struct srv_grpc_call *grpc;  /* a gRPC ModelInfer's call instead of req (server/grpc_calls.c), or NULL */
    const char *request_id;      /* id below, for the body */
    char id[72];                 /* the request's id, copied: the job may outlive its request */
    proto_predict_req *owned_req; /* an abandoned job's parsed request (texts point into it), or NULL */
    double t_request;            /* the request's first byte, seconds, monotonic */
    store_model *model;          /* borrowed from the tasks (each holds a reference) */
    int n_inputs, n_tasks;
    store_task **tasks;          /* (n_tasks) references, released with the job */
    eng_task_req *treqs;         /* (n_tasks) engine task + skip, shared by all inputs */
    srv_skip_source *skip_src;   /* (n_tasks) */
    int adaptive_raised;         /* layers the scheduler added over all tasks (0: none) */
    double latency_ms, predicted_ms; /* "latency_ms" and the cost model's prediction; -1 when not asked */
    eng_cost_model *cost;        /* the model's cost model (server-owned), told each pass's time; NULL: none */
    double load_ms;              /* time the request waited for its tasks to load; 0: none */
    eng_tok_encoding *enc;       /* (n_inputs) */
    int *truncated;              /* (n_inputs) 1 when the input was cut */
    const proto_text *texts;     /* (n_inputs) borrowed from the parsed request */
    int tokens;                  /* total tokens of the inputs */
    bool ret_scores, ret_logits, ret_explain;
    proto_aggregation aggregation; /* tagging: "aggregation" */
    unsigned v2_outputs;         /* v2: the output tensors asked for; 0: all */
    const char *v2_id;           /* v2: the client's "id", borrowed from the parsed request; NULL: none */
    unsigned v2_binary;          /* v2: the outputs answered as binary data (PROTO_V2_OUT_* bits) */
    bool grpc_raw;               /* SRV_ANSWER_GRPC: every output in raw_output_contents (proto_grpc_infer_target.raw) */
    bool tei_batch, tei_raw, tei_return_text; /* TEI /predict, /rerank: the request's "inputs" shape and flags */
    srv_answer_form form;
    /* embed jobs: n_tasks 0; the model reference is the job's own */
    store_model *model_ref;
    proto_pooling pooling;       /* resolved: never PROTO_POOL_DEFAULT */
    bool normalize;
    int dimensions;              /* keep the first N values of each vector; 0: all */
    bool openai, base64;         /* answer in OpenAI's embeddings shape (base64: the vectors as base64) */
    proto_dialect dialect;       /* the error shape of the route that made the job */
    double t_submit, t_start, t_end;       /* seconds, monotonic; t_start 0: never ran */
    int batch_requests, batch_inputs, batch_tokens, batch_outputs;
    /* result, written by the worker, read after the loop resumes the connection */
    unsigned status;
    char *body;
    size_t body_len;
    size_t head_len;             /* v2 binary answer: the bytes of JSON before the tensors' (Inference-Header-Content-Length); 0: JSON only */
} srv_job;

/* Releases the job's encodings, task references and body; NULL does nothing. */
void srv__job_free(srv_job *j);

#endif
