/* grpc.h - KServe v2's GRPCInferenceService on --grpc-port: HTTP/2 (nghttp2) connections on the
 * server's libuv loop (grpc.c) and the calls they carry (grpc_calls.c). ModelInfer runs as a job of
 * the same scheduler as REST's infer (srv__job_prepare, srv__sched_submit), so admission, limits,
 * batching and metrics are one; its answer is encoded on the worker (respond.c, SRV_ANSWER_GRPC).
 * Loop thread. */
#ifndef ADAPTERD_SERVER_GRPC_H
#define ADAPTERD_SERVER_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "internal.h"
#include "proto/grpc.h"

typedef struct srv_grpc srv_grpc;
typedef struct srv_grpc_conn srv_grpc_conn;

/* One call (an HTTP/2 stream), from its HEADERS to its answer. Owned by grpc.c; a ModelInfer call
 * keeps living while its job is the scheduler's, even after its stream closed (conn NULL). */
typedef struct srv_grpc_call {
    srv_grpc *g;
    srv_grpc_conn *conn;           /* NULL once the stream closed (the client left or the answer went out) */
    struct srv_grpc_call *prev, *next; /* g's list of every call */
    int32_t stream_id;
    proto_grpc_method method;
    char id[SRV_REQUEST_ID_MAX];   /* request id, as REST's */
    double t0;                     /* first byte, srv__now() */
    double deadline;               /* grpc-timeout, absolute (srv__now()); 0: none */
    uv_timer_t timer;              /* the deadline; closing it frees the call */
    bool bad_method, bad_ctype, bad_encoding, bad_timeout; /* found in the headers: answered at the end of the request */
    char auth[320];                /* the "authorization" metadata (RepositoryIndex's admin token), cut; "" when none */
    uint8_t *msg;                  /* the request's bytes (prefix + message), at most --max-body-bytes + prefix */
    size_t len, cap;
    bool too_large;
    bool answered;                 /* trailers queued (or the stream is gone): the answer is given */
    bool active;                   /* counted in srv_server.active (between dispatch and answer) */
    uint8_t *out;                  /* the answer's DATA (prefix + message), or NULL for a trailers-only answer */
    size_t out_len, out_off;
    int status;                    /* grpc-status */
    char message[512];             /* grpc-message, not escaped yet */
    /* ModelInfer */
    bool admitted;                 /* holds a --max-queue place no job took over */
    proto_predict_req preq;        /* the parsed request (the job's texts point into it) */
    proto_grpc_infer_target target;
    srv_job *job;                  /* submitted and not done yet */
    int rounds;                    /* task loads gone round */
    double load_s;
    uv_work_t work;                /* a task load on libuv's pool */
    store_task **held;             /* (n_held) references the task load took, kept until the call ends */
    int n_held;
    bool loading;
    int load_rc;
    char load_msg[256];
} srv_grpc_call;

/* What the transport calls on the methods' side (grpc_calls.c), so neither file calls the other back. */
typedef struct {
    void (*dispatch)(srv_grpc_call *c); /* the call's request is complete: answer it, now or later */
    void (*deadline)(srv_grpc_call *c); /* its grpc-timeout passed before it was answered */
} srv_grpc_hooks;

/* Starts listening on cfg.host:cfg.grpc_port on s's loop. Returns 0, or a negative status with err
 * set (the port is taken, out of memory); either way a non-NULL *out goes to srv__grpc_free. */
int srv__grpc_start(srv_server *s, srv_grpc_hooks hooks, srv_grpc **out, eng_err *err);
/* grpc_calls.c: srv__grpc_start with the service's methods as hooks. */
int srv__grpc_serve(srv_server *s, srv_grpc **out, eng_err *err);
/* SIGTERM: stops accepting, sends GOAWAY on every connection; their calls under way finish, each
 * connection closes once its last answer went out. NULL does nothing. */
void srv__grpc_drain(srv_grpc *g);
/* After the loop closed its handles: frees what is left. NULL does nothing. */
void srv__grpc_free(srv_grpc *g);

/* grpc.c for grpc_calls.c: queue call c's answer (status, message; out, len: the DATA, NULL for a
 * trailers-only answer, taken over) and send it; when the stream is gone, only frees out. */
void srv__grpc_answer(srv_grpc_call *c, int status, const char *message, uint8_t *out, size_t len);
/* The server a call belongs to. */
srv_server *srv__grpc_server(const srv_grpc *g);
/* A call no longer needed by its job or its stream is freed (timer closed first). */
void srv__grpc_call_release(srv_grpc_call *c);

/* The gRPC status for an HTTP status of adapterd's table (http_status.h), so both protocols refuse
 * alike: 400/413/415/422 INVALID_ARGUMENT (413 of a message: RESOURCE_EXHAUSTED), 401 UNAUTHENTICATED,
 * 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, else INTERNAL. */
int srv__grpc_status_of_http(unsigned http);

/* Loop thread, the scheduler's done hook for a gRPC job: metrics, then the answer. */
void srv__grpc_job_done(srv_server *s, srv_job *j);
/* Loop thread, drain deadline: answer UNAVAILABLE now; the job takes over the parsed request. */
void srv__grpc_job_abandon(srv_server *s, srv_job *j);

#endif
