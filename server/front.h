/* front.h - the front door: the one path every inference request takes to the engine, whatever
 * protocol carried it (see front.c). */
#ifndef ADAPTERD_SERVER_FRONT_H
#define ADAPTERD_SERVER_FRONT_H

#include <stdbool.h>

#include "adapters_store/store.h"
#include "job.h"
#include "proto/proto.h"
#include "scheduler.h"

typedef struct srv_server srv_server;

/* Bytes of the message of a request refused on its way to the engine. */
#define SRV_FRONT_MSG_MAX 600

/* The edge a request came through, told what becomes of its job. Loop thread. */
typedef struct srv_edge {
    /* j is answered (j->status, j->body) or failed (also j->fail_code, j->fail_msg) and the scheduler is
     * done with it; the edge sends the answer and frees the job when it is its own. */
    void (*done)(srv_server *s, srv_job *j);
    /* Drain deadline: j is in a pass that cannot be stopped; answer its request 503 now (the job takes
     * over the request's decoded inputs, srv__front_abandon). done still follows when the pass ends. */
    void (*abandon)(srv_server *s, srv_job *j);
} srv_edge;

/* One request on its way in. Lives in its edge's request (srv_request, srv_grpc_call); only one thread
 * touches it at a time (the edge's thread, then the pool during a load, then the edge's again). */
typedef struct srv_front {
    srv_server *s;
    srv_sched *sched;            /* s's scheduler, where the admission place is taken and given back */
    const proto_codec *codec;    /* the protocol: decoder, encoder, error shape */
    const srv_edge *edge;
    void *edge_ctx;              /* the edge's request, handed back through the job (srv_job.edge_ctx) */
    const char *id;              /* the request id (the edge's storage) */
    double t0;                   /* first byte, srv__now() */
    srv_tenant_class tenant;     /* the caller's class (tenant.h), copied into the job */
    const char *auth;            /* --keys: the request's "Bearer <key>" (the edge's storage), or NULL */
    struct srv_keyset *keys;     /* --keys: the snapshot the key was found in, held until srv__front_clear */
    const struct srv_tenant *who;/* --keys: the key's tenant (in keys); NULL: none or the operator */
    int retry_after;             /* a quota refusal: whole seconds to wait */
    proto_predict_req req;       /* decoded (srv__front_decode) */
    bool decoded, admitted, acquired;
    store_task **tasks;          /* (n_tasks) held from the one acquisition until the job takes them */
    int n_tasks;
    srv_job_rollout *ro;         /* (n_tasks) the tasks' rollouts, acquired with them (their candidates held in
                                  * alt); NULL: no task has one. The job takes them */
    store_model *model;          /* an embedding's model, acquired (the job takes it) */
    const char *model_id;        /* its name as answered (models.c: the name asked, or its first served name) */
    int rounds;                  /* loads gone round (a task replaced after its load failed) */
    double load_s;               /* seconds spent loading the request's tasks */
    srv_job *job;                /* built by srv__front_prepare, owned here until srv__front_submit */
    srv_trace_req *trace;        /* the edge's request's trace (trace.h): its steps are stamped here; NULL: none */
    eng_status code;             /* a refusal: why (srv__front_* returned failure) */
    char msg[SRV_FRONT_MSG_MAX];
} srv_front;

typedef enum {
    SRV_FRONT_READY,             /* f->job is built: submit it */
    SRV_FRONT_LOAD,              /* tasks must be loaded first: srv__front_load on a pool thread, then prepare again */
    SRV_FRONT_FAILED,            /* f->code and f->msg say why */
} srv_front_step;

/* Starts f (zeroed, or cleared) for a request of codec's protocol through edge (ctx: the edge's request;
 * id and t0 its id and first byte). */
void srv__front_init(srv_front *f, srv_server *s, const proto_codec *codec, const srv_edge *edge, void *ctx, const char *id,
                     double t0);
/* Admission, before any work is spent on the request: with --keys, f->auth is a known key (else
 * ENG_UNAUTHENTICATED) within its tenant's quotas (else ENG_BUSY with f->retry_after), and f->tenant
 * is its class; the server is ready and a --max-queue place is free. Returns 0 (f holds the place
 * until its job takes it or srv__front_clear), or -1 with f->code ENG_UNAUTHENTICATED /
 * ENG_UNAVAILABLE / ENG_BUSY and f->msg. Any thread. */
int srv__front_admit(srv_front *f);
/* Gives f's admission place back, if it holds one (its request was answered without a job). Inline:
 * the edges' senders (http.c, grpc.c) call it without depending on the front door's file. */
static inline void srv__front_release(srv_front *f) {
    if (!f->admitted) return;
    f->admitted = false;
    srv__sched_release(f->sched);
}
/* Decodes w with the codec into f->req. Returns 0, or -1 with f->code and f->msg (the codec's status:
 * ENG_MALFORMED, ENG_INVALID_ARGUMENT, ENG_LIMIT, ENG_NO_MEMORY). Any thread but the loop. */
int srv__front_decode(srv_front *f, const proto_wire *w);
/* The decoded request's tasks (or model) acquired once, as one snapshot held until the answer; then its
 * job: skips, tokenization, latency plan. Any thread but the loop; never blocks on a load. */
srv_front_step srv__front_prepare(srv_front *f);
/* Pool thread: loads the held tasks that are not resident. Returns 0 (prepare again), or -1 with
 * f->code and f->msg. A task whose current version failed to load and was replaced by the store is
 * swapped for its replacement (bounded rounds), the only case a task is acquired again. */
int srv__front_load(srv_front *f);
/* Hands f's job (SRV_FRONT_READY) to the scheduler with f's admission. f still owns the job (the
 * scheduler borrows it until the edge's done hook, where its answer is read). Any thread. */
void srv__front_submit(srv_front *f);
/* Drain deadline (the edge's abandon hook): the job takes over the buffers of f's decoded request,
 * which its worker still reads (through the job's own copy of the struct); f forgets the job. */
void srv__front_abandon(srv_front *f, srv_job *j);
/* Releases what f holds (admission, task and model references, the request, an unsubmitted job).
 * Safe on a zeroed f and twice. */
void srv__front_clear(srv_front *f);

/* A new reference to the version a request names: "name" is the current version, "name@version" that
 * version (any listed version that is not failed). spec is len bytes. NULL when there is none. */
store_task *srv__task_acquire_spec(store_registry *reg, const char *spec, size_t len);

/* With --keys, whether f's tenant may predict with the task spec names (len bytes); true without. */
bool srv__front_in_scope(const srv_front *f, const char *spec, size_t len);

/* The message for a name that is not a task, into msg (msz bytes): what a task outside a key's scope
 * gets too, byte for byte (no existence leak). Returns ENG_NOT_FOUND. */
eng_status srv__unknown_task_plain(const char *name, size_t nlen, char *msg, size_t msz);
/* The message for a task that is not served (unknown, or on disk with no version that loads: then
 * why, from its newest failed version) into msg (msz bytes). Returns ENG_NOT_FOUND. */
eng_status srv__unknown_task(srv_server *s, const char *name, size_t nlen, char *msg, size_t msz);

#endif
