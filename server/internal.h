/* internal.h - the request and the server, the two structs the HTTP side of the server shares
 * (routes.c, http.c, infer.c, front.c, predict.c, embed.c, models.c, admin.c, docs.c, offload.c, watch.c,
 * server.c). The scheduler, the metrics and respond.c do not see them: they work on jobs (job.h) and
 * values. Not installed; srv__ names are internal. */
#ifndef ADAPTERD_SERVER_INTERNAL_H
#define ADAPTERD_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "adapters_store/store.h"
#include "engine/run.h"
#include "front.h"
#include "inbox.h"
#include "job.h"
#include "metrics.h"
#include "proto/proto.h"
#include "route.h"
#include "scheduler.h"
#include "server/server.h"
#include "trace.h"

typedef struct srv_server srv_server;
typedef struct srv_request srv_request;

/* Where a request's offloaded work is (offload.c). */
typedef enum {
    SRV_OFFLOAD_IDLE,        /* none, or its answer was taken */
    SRV_OFFLOAD_RUNNING,     /* queued for or running on libuv's pool */
    SRV_OFFLOAD_DONE,        /* finished; the connection's resume is pending */
} srv_offload_state;

/* Bytes of a task name and a version in admin routes, the terminating NUL included. */
#define SRV_NAME_MAX 160
#define SRV_VERSION_MAX 40

/* Work a request hands to libuv's thread pool (admin uploads, task loads): the connection is
 * suspended meanwhile (offload.c). */
typedef struct {
    srv_inbox_node inbox;        /* the offloader's inbox */
    srv_offload_state state;     /* written by the thread that owns the request at the time */
    void (*fn)(srv_request *r);  /* runs on a pool thread */
    uv_work_t work;
    unsigned status;             /* the answer fn built; 0: run the request again (tasks loaded) */
    char *body;
    size_t len;
    char name[SRV_NAME_MAX], version[SRV_VERSION_MAX]; /* admin: the route's task and version */
    store_rollout rollout;       /* admin :rollout: the rollout asked for */
    bool activate;               /* admin: ?activate=true on upload, pin (true) or unpin */
} srv_offload;

/* Bytes of a request id, of the method and of the path kept for the access log. */
#define SRV_REQUEST_ID_MAX 72
#define SRV_METHOD_MAX 8
#define SRV_PATH_MAX 128

/* One HTTP request, from its first byte to on_completed (routes.c). Only one thread touches it at
 * a time: the MHD thread until it suspends the connection, then the scheduler or the pool, then
 * the MHD thread again after the resume. */
struct srv_request {
    srv_server *srv;
    struct MHD_Connection *conn;
    srv_route route;
    proto_dialect dialect;       /* the error shape of the route its path named (srv__route_dialect) */
    bool method_ok;
    char id[SRV_REQUEST_ID_MAX];
    double t0;
    char *body;
    size_t body_len, body_cap;
    bool too_large;
    int upload_errno;            /* the upload's body file could not be written (ENOSPC, EFBIG, ...): 507 or 500 */
    bool suspended;
    bool abandoned;              /* its job was given up at the drain deadline: answer 503 */
    srv_front front;             /* an inference route's way to the engine (front.h): admission, request, tasks, job */
    unsigned status;             /* sent status, for the access log and metrics */
    bool counted;                /* already in the request metrics (counted when queued) */
    size_t bytes_out;
    char method[SRV_METHOD_MAX];
    char path[SRV_PATH_MAX];
    bool admin;                  /* an admin route (admin.c) */
    char caller[64];             /* admin: who called, for the audit line ("operator", a tenant's name, "-": no key) */
    char verb[32];               /* admin: /v1/tasks/{name}:verb */
    size_t dropped;              /* body bytes of a route that takes none, read and dropped */
    int upload_fd;               /* admin upload: the body streams into this file (upload_path) */
    char *upload_path;           /* malloc'd; NULL when the body is not streamed to a file */
    srv_offload off;
    const char *model_id;        /* the name of the model the request resolved, as answered (models.c) */
    srv_trace_req trace;         /* its trace context and steps (trace.h); answered in its headers */
};

typedef struct srv_offloader srv_offloader;
typedef struct srv_watch srv_watch;
typedef struct srv_conns srv_conns;
typedef struct srv_grpc_prep srv_grpc_prep;
typedef struct srv_model_files srv_model_files;
typedef struct srv_model_names srv_model_names;

struct srv_server {
    srv_config cfg;
    store_registry *reg;
    struct MHD_Daemon *mhd;
    uv_loop_t loop;
    srv_sched *sched;
    srv_metrics *metrics;
    struct srv_rollouts *rollouts;   /* rollout.c: the live comparisons of rollouts' candidates */
    /* cost models measured at start-up, one per model (their corrections are updated lock-free by
     * the workers); the server holds a reference to each model so a key can never be reused by
     * another model */
    int n_costs;
    store_model **cost_models;       /* (n_costs) references */
    eng_cost_model *costs;           /* (n_costs) */
    srv_model_files *model_files;    /* embed.c: each model's pooling and prompts, read at start-up */
    int n_model_files;
    srv_offloader *offl;             /* offload.c */
    srv_conns *conns;                /* conn.c: header deadline, body rate, health reserve */
    srv_watch *watch;                /* watch.c; NULL when off */
    struct srv_grpc *grpc;           /* grpc.c: the gRPC listener and its connections; NULL when --grpc-port is 0 */
    struct srv_grpc_prep *grpc_prep; /* grpc_calls.c: the threads that prepare gRPC calls; NULL when --grpc-port is 0 */
    struct srv_keys *keys;           /* keys.c: --keys, the tenants; NULL without */
    srv_tracer *tracer;              /* trace.c: OpenTelemetry spans; NULL when no --trace-endpoint */
    struct srv_tls *tls;             /* tls.c: --tls-cert's credentials; NULL: plain ports */
    srv_model_names *names;          /* models.c: --served-model-name, read at start; NULL: none */
    long long started;               /* Unix seconds at start: the models' "created" in OpenAI's answers */
    atomic_bool ready;
    atomic_bool draining;
    atomic_int active;               /* requests between first byte and completion: the in-flight count */
    atomic_int n_suspended;          /* connections suspended and not yet resumed (MHD must see none at stop) */
    atomic_uint_fast64_t next_id;
    char id_prefix[16];
};

/* The cost model measured for model m at start-up (server.c), or NULL (a model loaded later has none). */
static inline eng_cost_model *srv__cost_model(const srv_server *s, const store_model *m) {
    for (int i = 0; i < s->n_costs; i++)
        if (s->cost_models[i] == m) return &s->costs[i];
    return NULL;
}

#endif
