/* trace.h - OpenTelemetry traces of requests (see trace.c for why it is built this way): the W3C Trace
 * Context a request brings (traceparent, tracestate), the sampler, a request's spans recorded in its own
 * state and handed, encoded, to one exporter thread that posts them over OTLP/HTTP (protobuf).
 *
 *     srv_tracer *t;                           one per server, NULL when tracing is off
 *     srv__trace_begin(t, &r->trace, tp, ts);  at a request's first byte: context, ids, the sampling decision
 *     srv__trace_mark(&r->trace, SRV_TRACE_ADMITTED); ...   steps, on whatever thread runs them
 *     srv__trace_end(t, &r->trace, &end, job); at its answer: its spans encoded and queued (never blocks)
 *
 * The engine never sees any of it: the scheduler hands the batch to srv__trace_batch after a pass. */
#ifndef ADAPTERD_SERVER_TRACE_H
#define ADAPTERD_SERVER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "engine/status.h"
#include "server/server.h"

struct srv_job;

/* Bytes of a tracestate kept (the spec asks that at least 512 be propagated) and of a traceparent. */
#define SRV_TRACE_STATE_MAX 513
#define SRV_TRACEPARENT_LEN 55

/* A W3C traceparent, parsed. */
typedef struct {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t flags;               /* bit 0: sampled; a version 00 parent's other bits are not propagated */
} srv_trace_parent;

/* Parses the traceparent header value s (n bytes) strictly, per W3C Trace Context: version 00 is exactly
 * "00-<32 hex>-<16 hex>-<2 hex>" in lowercase, with neither id all zeros; a later version (not ff) is read
 * by the same rule on its first 55 bytes, which must end the value or be followed by '-'. Returns 0 with
 * *out set, or -1 (the caller then starts a new trace). Pure: the fuzz target drives it. */
int srv__trace_parse_traceparent(const char *s, size_t n, srv_trace_parent *out);
/* Whether the tracestate header value s (n bytes) is valid per W3C Trace Context (at most 32 list
 * members key=value, keys and values of the spec's characters and lengths, no duplicate key) and fits
 * SRV_TRACE_STATE_MAX; an invalid one is dropped, not propagated. Pure. */
bool srv__trace_state_valid(const char *s, size_t n);

/* Samplers of OTEL_TRACES_SAMPLER. */
typedef enum {
    SRV_SAMPLE_ALWAYS_ON,
    SRV_SAMPLE_ALWAYS_OFF,
    SRV_SAMPLE_RATIO,            /* traceidratio: the trace id's last 7 bytes below ratio x 2^56 */
    SRV_SAMPLE_PB_ALWAYS_ON,     /* parentbased_*: a caller's sampled flag decides, else the root sampler */
    SRV_SAMPLE_PB_ALWAYS_OFF,
    SRV_SAMPLE_PB_RATIO,
} srv_sampler;

/* "always_on", ..., "parentbased_traceidratio" -> the sampler; -1 for another name. */
int srv__trace_sampler_parse(const char *name);
/* The decision for a span of trace_id with parent (NULL: a root span). Pure. */
bool srv__trace_sample(srv_sampler s, double ratio, const uint8_t trace_id[16], const srv_trace_parent *parent);

/* Steps of a request, stamped (srv__now()) by the thread that runs each. */
typedef enum {
    SRV_TRACE_ADMITTED,          /* admission done (HTTP: the body had arrived) */
    SRV_TRACE_DECODE0, SRV_TRACE_DECODED,
    SRV_TRACE_LOAD0, SRV_TRACE_LOADED,   /* the first load began, the last ended; 0: none */
    SRV_TRACE_PREP0, SRV_TRACE_PREPARED, /* the prepare that built the job: acquisition, skips, tokenizing */
    SRV_TRACE_N_MARKS
} srv_trace_mark_id;

/* One request's trace: lives in its edge's request (srv_request, srv_grpc_call); one thread at a time. */
typedef struct srv_trace_req {
    bool on;                     /* a tracer runs: the context is answered (traceparent) */
    bool sampled;                /* recorded: marks are stamped and spans exported */
    bool has_parent;             /* the caller sent a valid traceparent */
    uint8_t trace_id[16];
    uint8_t span_id[8];          /* the server span's */
    uint8_t parent_id[8];        /* the caller's span (has_parent) */
    char traceparent[SRV_TRACEPARENT_LEN + 1]; /* the answer's header: this trace, the server span, the decision */
    char state[SRV_TRACE_STATE_MAX];            /* the caller's tracestate when valid, else "" */
    double mark[SRV_TRACE_N_MARKS];
} srv_trace_req;

/* What the batch a job rode in left on it (scheduler worker, srv__trace_batch), read at the request's end. */
typedef struct {
    bool sampled;                /* the request is recorded (copied from its srv_trace_req at submit) */
    uint8_t trace_id[16], span_id[8];     /* the request's trace and server span: the batch links to them */
    uint8_t batch_trace_id[16], batch_span_id[8]; /* the batch span, once it ran; zeros before */
    double t_pass_end;           /* the engine pass ended; its answer's encoding follows */
    double t_enc0, t_enc1;       /* the encoder of its answer (respond.c, on the worker) */
} srv_trace_job;

static inline void srv__trace_mark(srv_trace_req *r, srv_trace_mark_id m) {
    if (r && r->sampled) r->mark[m] = srv__now();
}
/* Stamps m only the first time (a load that goes round). */
static inline void srv__trace_mark_first(srv_trace_req *r, srv_trace_mark_id m) {
    if (r && r->sampled && !r->mark[m]) r->mark[m] = srv__now();
}

typedef struct srv_tracer srv_tracer;

/* Starts the tracer for c (its trace-* options, which default to the OTEL_* variables): NULL in *out
 * and 0 when no endpoint is set (tracing off). Returns 0, or a negative status with err naming the
 * option (an endpoint that is not http:// or https://, out of memory, no thread). The exporter thread
 * runs until srv__tracer_free. */
int srv__tracer_start(const srv_config *c, srv_tracer **out, eng_err *err);
/* Exports what is queued (one try per batch, for at most the export timeout and 2 s), stops the thread, frees. NULL: nothing. */
void srv__tracer_free(srv_tracer *t);

/* Any thread: r's context from the caller's header values (NULL when absent): the caller's trace
 * continued, or a new one; r's server span id; the sampler's decision; the traceparent to answer. With
 * t NULL r is off (nothing answered, nothing recorded). */
void srv__trace_begin(srv_tracer *t, srv_trace_req *r, const char *traceparent, const char *tracestate);

/* A request's end, as its edge saw it. */
typedef struct {
    const char *method;          /* HTTP: "POST"; NULL for gRPC */
    const char *path;            /* HTTP: url.path */
    const char *route;           /* HTTP: the route's template ("/v1/predict"); NULL: not known */
    unsigned http_status;        /* HTTP: the status answered (499: the client left) */
    const char *rpc_method;      /* gRPC: "ModelInfer"; NULL for HTTP */
    int grpc_status;             /* gRPC: the status answered */
    const char *request_id;
    const char *protocol;        /* the codec's name when the request was decoded, or NULL */
    const char *message;         /* an error's message, or NULL */
    const char *const *tasks;    /* the tasks it named (when it has no job), or NULL */
    int n_tasks;
    double t0;                   /* its first byte, srv__now() */
} srv_trace_end;

/* Any thread: the request's server span and its steps (admission, decode, load, tokenize, queue, engine
 * linked to its batch, encode), encoded and queued for the exporter; dropped and counted when the queue
 * is full. j: the request's job once done (answered), else NULL. Never blocks. Nothing when r is not sampled. */
void srv__trace_end(srv_tracer *t, const srv_trace_req *r, const srv_trace_end *e, const struct srv_job *j);

/* Worker thread, after an engine pass over jobs (a list by ->next) of n_jobs requests, n_in inputs and
 * tokens tokens that ran [t_start, t_end] on a model of precision and kernel (static strings): when one
 * of the jobs is sampled, one batch span linked to each sampled request, whose jobs learn its ids. */
void srv__trace_batch(srv_tracer *t, struct srv_job *jobs, int n_jobs, int n_in, int tokens, double t_start, double t_end,
                      const char *model, const char *precision, const char *kernel, bool ok);

/* Counters for /metrics. Any thread. */
typedef struct {
    uint64_t exported;           /* spans the collector accepted */
    uint64_t dropped_queue;      /* spans dropped because the queue was full (collector slow or gone) */
    uint64_t dropped_export;     /* spans dropped after their export failed (retries exhausted, or refused) */
    uint64_t export_errors;      /* failed export attempts (HTTP status or connection error) */
    uint64_t queued;             /* spans waiting now */
} srv_trace_counts;
void srv__trace_counts(const srv_tracer *t, srv_trace_counts *out);

/* Lowercase hex of n bytes into out (2n + 1 bytes). */
void srv__trace_hex(const uint8_t *b, size_t n, char *out);

#endif
