/* grpc.h - KServe v2's GRPCInferenceService on --grpc-port: HTTP/2 (nghttp2) connections on the
 * server's libuv loop (grpc.c) and the calls they carry (grpc_calls.c, the gRPC edge of the front door:
 * ModelInfer goes through front.c as every protocol's inference does, so admission, limits, batching
 * and metrics are one). Loop thread. */
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
    bool bad_method, bad_ctype, bad_encoding, bad_timeout; /* found in the headers: answered at once */
    char auth[320];                /* the "authorization" metadata (RepositoryIndex's admin token), cut; "" when none */
    /* The request's bytes (prefix + message), allocated whole (want bytes) once the prefix declared
     * the message's length, from the connection's budget (--grpc-buffer-bytes): valid from dispatch
     * until the call is answered, when grpc.c frees it. */
    uint8_t *msg;
    size_t len;                    /* bytes of the request received (prefix included) */
    size_t want;                   /* prefix + the declared message length; 0 until the prefix arrived */
    uint8_t head[PROTO_GRPC_PREFIX]; /* the prefix while it arrives */
    bool ended;                    /* the request's END_STREAM arrived */
    bool answered;                 /* trailers queued (or the stream is gone): the answer is given */
    bool active;                   /* counted in srv_server.active (between dispatch and answer) */
    uint8_t *out;                  /* the answer's DATA (prefix + message), or NULL for a trailers-only answer */
    size_t out_len, out_off;
    int status;                    /* grpc-status */
    char message[512];             /* grpc-message, not escaped yet */
    /* the methods' side (grpc_calls.c) */
    srv_front front;               /* ModelInfer: its way to the engine (admission from its headers on, request, tasks, job) */
    srv_job *job;                  /* submitted and not done yet */
    bool loading;                  /* on a prep thread or libuv's pool: the call stays until it comes back */
    struct srv_grpc_call *prep_next; /* the prep threads' queue */
    srv_inbox_node inbox;          /* prepared calls back to the loop */
    uv_work_t work;                /* a task load on libuv's pool */
    srv_front_step step;           /* ModelInfer: what its last prepare or load said */
    int pend_status;               /* the other methods: the answer a prep thread made */
    char pend_msg[512];
    uint8_t *pend_out;
    size_t pend_len;
    /* its trace (trace.h): the caller's traceparent and tracestate metadata as they came, then the context */
    char tp_in[64];
    char ts_in[SRV_TRACE_STATE_MAX];
    srv_trace_req trace;
    struct srv_job *traced_job;    /* ModelInfer: its job once done (grpc_calls.c's done hook), for its spans */
} srv_grpc_call;

/* What the transport calls on the methods' side (grpc_calls.c), so neither file calls the other back. */
typedef struct {
    /* The call's headers are complete (c->method known), no byte of its message was taken yet, and
     * the transport's own checks passed (content-type, :method, the method's name, grpc-timeout, the
     * connection's reserve). Returns 0 to take the call's message, or nonzero after answering the
     * call (srv__grpc_answer): its message is then never buffered, its DATA is dropped and the
     * stream reset (NO_ERROR). A ModelInfer takes its --max-queue place here (c->front.admitted). */
    int (*begin)(srv_grpc_call *c);
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

/* ---- without the network (tests/fuzz/fuzz_grpc_session.c) ---- */

/* The transport on s's loop with no listener and no sweep; NULL when out of memory. Freed by
 * srv__grpc_free once its connections are closed and the loop ran their handles' closes. */
srv_grpc *srv__grpc_new(srv_server *s, srv_grpc_hooks hooks);
/* A connection whose client's bytes come from srv__grpc_mem_recv and whose server bytes go to
 * out(ud, bytes, n), synchronously. refuse: non-NULL, a connection refused with that message (as
 * one beyond --max-connections-per-ip); reserve: one beyond --max-connections. NULL when out of
 * memory. */
srv_grpc_conn *srv__grpc_mem_open(srv_grpc *g, const char *refuse, bool reserve,
                                  void (*out)(void *ud, const uint8_t *p, size_t n), void *ud);
/* Feeds n bytes the client sent, as a socket read would; returns 0, or -1 once the connection is
 * closed (the session failed, or it ended). */
int srv__grpc_mem_recv(srv_grpc_conn *c, const uint8_t *p, size_t n);
/* Bytes of request messages c's calls hold (never above --grpc-buffer-bytes). */
size_t srv__grpc_conn_buffered(const srv_grpc_conn *c);
/* Closes c (its calls leave their streams) and frees it. */
void srv__grpc_mem_close(srv_grpc_conn *c);

/* grpc.c for grpc_calls.c: queue call c's answer (status, message; out, len: the DATA, NULL for a
 * trailers-only answer, taken over) and send it; when the stream is gone, only frees out. Frees
 * c->msg (unless a prep thread has the call: then when it is back) and gives back the call's
 * --max-queue place when no job holds it (c->front.admitted). A call
 * answered before its request ended has its stream reset (NO_ERROR) after the answer, so its
 * client stops sending. */
void srv__grpc_answer(srv_grpc_call *c, int status, const char *message, uint8_t *out, size_t len);
/* The server a call belongs to. */
srv_server *srv__grpc_server(const srv_grpc *g);
/* The call's message is no longer needed (decoded): freed, its bytes back in its connection's budget. */
void srv__grpc_call_drop_msg(srv_grpc_call *c);
/* A call no longer needed by its job or its stream is freed (timer closed first). */
void srv__grpc_call_release(srv_grpc_call *c);

/* The gRPC status for an HTTP status of adapterd's table (http_status.h), so both protocols refuse
 * alike: 400/413/415/422 INVALID_ARGUMENT (413 of a message: RESOURCE_EXHAUSTED), 401 UNAUTHENTICATED,
 * 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, else INTERNAL. */
int srv__grpc_status_of_http(unsigned http);

/* grpc_calls.c: joins the prep threads (after the loop stopped, before its handles close), then frees
 * what they used (after the loop closed its handles). Nothing when gRPC is off. */
void srv__grpc_calls_stop(srv_server *s);
void srv__grpc_calls_free(srv_server *s);

#endif
