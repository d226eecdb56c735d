/* internal.h - what the server's files share: the request, the job, the scheduler and metrics.
 * Not installed; srv__ names are internal. */
#ifndef ADAPTERD_SERVER_INTERNAL_H
#define ADAPTERD_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "engine/run.h"
#include "proto/proto.h"
#include "server/server.h"
#include "adapters_store/store.h"
#include "engine/tokenizer.h"

/* Routes, for dispatch and metrics labels. */
#define SRV_ROUTE_LIST(X)                  \
    X(PREDICT, "/v1/predict")              \
    X(TASKS, "/v1/tasks")                  \
    X(TASK, "/v1/tasks/{name}")            \
    X(MODELS, "/v1/models")                \
    X(HEALTHZ, "/healthz")                 \
    X(READYZ, "/readyz")                   \
    X(METRICS, "/metrics")                 \
    X(OPENAPI, "/openapi.json")            \
    X(V2_LIVE, "/v2/health/live")          \
    X(V2_READY, "/v2/health/ready")        \
    X(V2_MODEL, "/v2/models/{task}")       \
    X(V2_MODEL_READY, "/v2/models/{task}/ready") \
    X(V2_INFER, "/v2/models/{task}/infer") \
    X(ADMIN_VERSIONS, "/v1/tasks/{name}/versions") \
    X(ADMIN_VERSION, "/v1/tasks/{name}/versions/{version}") \
    X(ADMIN_ACTIVATE, "/v1/tasks/{name}:activate") \
    X(ADMIN_TASK, "DELETE /v1/tasks/{name}") \
    X(V2_REPO_INDEX, "/v2/repository/index") \
    X(V2_REPO_LOAD, "/v2/repository/models/{task}/load") \
    X(V2_REPO_UNLOAD, "/v2/repository/models/{task}/unload") \
    X(UNKNOWN, "other")

typedef enum {
#define SRV__ROUTE_ENUM(name, path) SRV_ROUTE_##name,
    SRV_ROUTE_LIST(SRV__ROUTE_ENUM)
#undef SRV__ROUTE_ENUM
        SRV_ROUTE_COUNT
} srv_route;

typedef struct srv_server srv_server;

/* Why a task ran at its skip; the response names it ("skip_source"). */
typedef enum {
    SRV_SKIP_DEFAULT,    /* the task's default: adaptive mode may raise it */
    SRV_SKIP_REQUEST,    /* "skip" */
    SRV_SKIP_BUDGET,     /* "budget" */
    SRV_SKIP_LATENCY,    /* chosen for "latency_ms" through the cost model */
    SRV_SKIP_ADAPTIVE,   /* raised by the scheduler because the queue wait exceeded its target */
} srv_skip_source;

const char *srv__skip_source_name(srv_skip_source s);

/* One inference job: one request's inputs x tasks, tokenized. Owned by its srv_request; the
 * scheduler borrows it from submission until the loop resumes the connection. */
typedef struct srv_job {
    struct srv_job *next;        /* scheduler queues (one at a time) */
    struct srv_request *req;
    store_model *model;          /* borrowed from the tasks (each holds a reference) */
    int n_inputs, n_tasks;
    store_task **tasks;          /* (n_tasks) references, released with the job */
    eng_task_req *treqs;         /* (n_tasks) engine task + skip, shared by all inputs */
    srv_skip_source *skip_src;   /* (n_tasks) */
    int adaptive_raised;         /* layers the scheduler added over all tasks (0: none) */
    double latency_ms, predicted_ms; /* "latency_ms" and the cost model's prediction; -1 when not asked */
    eng_tok_encoding *enc;       /* (n_inputs) */
    int *truncated;              /* (n_inputs) */
    const proto_text *texts;     /* (n_inputs) borrowed from the parsed request */
    int tokens;                  /* total tokens of the inputs */
    int ret_scores, ret_logits, ret_explain;
    int v2;                      /* answer in KServe v2 form */
    double t_submit, t_start, t_end;       /* seconds, monotonic */
    int batch_requests, batch_inputs, batch_tokens, batch_outputs;
    /* result, written by the worker, read after the loop resumes the connection */
    unsigned status;
    char *body;
    size_t body_len;
} srv_job;

/* Work a request hands to libuv's thread pool (admin uploads, task loads): the connection is
 * suspended meanwhile (offload.c). */
typedef struct srv_offload {
    struct srv_request *next;    /* the offloader's inbox */
    int state;                   /* 0 idle, 1 queued or running, 2 done (resume pending) */
    void (*fn)(struct srv_request *r); /* runs on a pool thread */
    uv_work_t work;
    unsigned status;             /* the answer fn built; 0: run the request again (tasks loaded) */
    char *body;
    size_t len;
    store_task **held;           /* (n_held) references loaded for this request, kept until it ends */
    int n_held, rounds;
    char name[160], version[40]; /* admin: the route's task and version */
    int activate;
} srv_offload;

typedef struct srv_request {
    srv_server *srv;
    struct MHD_Connection *conn;
    srv_route route;
    int method_ok;
    char id[72];
    double t0;
    char *body;
    size_t body_len, body_cap;
    int too_large;
    int suspended;
    proto_predict_req preq;
    srv_job *job;
    unsigned status;             /* sent status, for the access log and metrics */
    int counted;                 /* already in the request metrics (counted when queued) */
    size_t bytes_out;
    char method[8];
    char path[128];
    int admin;                   /* an admin route (admin.c) */
    srv_offload off;
} srv_request;

/* ---- metrics (metrics.c): lock-free counters, one text rendering ---- */
typedef struct srv_metrics srv_metrics;
srv_metrics *srv__metrics_new(store_registry *reg);
void srv__metrics_free(srv_metrics *m);
void srv__metrics_request(srv_metrics *m, srv_route r, unsigned status, double seconds);
void srv__metrics_job(srv_metrics *m, const srv_job *j);
void srv__metrics_batch(srv_metrics *m, int requests, int inputs, int tokens, double seconds);
/* Adaptive mode: the scheduler raised one job's skips by `layers` in all (level: the controller's). */
void srv__metrics_adaptive(srv_metrics *m, int layers, int level);
/* A "latency_ms" the cost model said cannot be met (answered 422). */
void srv__metrics_latency_refused(srv_metrics *m);
/* Renders the Prometheus text; malloc'd, NULL when out of memory. */
char *srv__metrics_render(srv_metrics *m, srv_server *s, size_t *len);

/* ---- scheduler (sched.c) ---- */
typedef struct srv_sched srv_sched;
srv_sched *srv__sched_new(srv_server *s, uv_loop_t *loop, eng_err *err);
/* Stops the workers (after the loop ended) and frees. */
void srv__sched_free(srv_sched *q);
/* From any thread: hands a job to the loop. Returns 0, or ENG_BUSY when max_queue jobs are already
 * waiting or running (the job is then not taken). */
int srv__sched_submit(srv_sched *q, srv_job *j);
/* Loop thread: flush everything queued now (drain). */
void srv__sched_flush(srv_sched *q);
int srv__sched_depth(srv_sched *q);    /* jobs submitted and not finished */
int srv__sched_queued(srv_sched *q);   /* jobs not yet in a batch */
int srv__sched_adaptive_level(srv_sched *q); /* layers adaptive mode currently adds (0: none) */

/* Runs one job's share of a finished batch into its response (sched.c, worker thread). */

/* ---- the server (server.c) ---- */
struct srv_server {
    srv_config cfg;
    store_registry *reg;
    struct MHD_Daemon *mhd;
    uv_loop_t loop;
    srv_sched *sched;
    srv_metrics *metrics;
    /* cost models measured at start-up, one per model (read-only once serving); the server holds a
     * reference to each model so a key can never be reused by another model */
    int n_costs;
    store_model **cost_models;       /* (n_costs) references */
    eng_cost_model *costs;           /* (n_costs) */
    struct srv_offloader *offl;   /* offload.c */
    struct srv_watch *watch;      /* watch.c; NULL when off */
    atomic_int ready;
    atomic_int draining;
    atomic_int active;           /* requests between first byte and completion */
    atomic_uint_fast64_t next_id;
    char id_prefix[16];
};

/* Loop thread: a job is done; resume its connection. */
void srv__job_done(srv_server *s, srv_job *j);
/* Worker: build the response of a failed job. */
void srv__job_fail(srv_job *j, eng_status code, const char *msg);

double srv__now(void);

/* ---- responses (server.c), for the other route files ---- */
enum MHD_Result srv__send_json(srv_request *r, unsigned status, char *json, size_t len);
enum MHD_Result srv__send_error(srv_request *r, eng_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- offload (offload.c): thread-pool work for a suspended connection ---- */
typedef struct srv_offloader srv_offloader;
srv_offloader *srv__offload_new(uv_loop_t *loop);
void srv__offload_free(srv_offloader *o);
/* MHD thread: suspends r's connection and runs fn(r) on libuv's pool; when it returns the loop
 * resumes the connection and on_request sees r->off.state == 2. */
void srv__offload(srv_server *s, srv_request *r, void (*fn)(srv_request *r));
/* Lowers the calling pool thread's priority to nice 19 once: loads yield the CPU to inference. */
void srv__pool_thread_nice(void);
/* Releases what an offload held; with the request. */
void srv__offload_clear(srv_request *r);
/* Lazy loading: 1 when a task the parsed request names (all when none) is not resident. */
int srv__tasks_missing(srv_request *r);
/* Offloads the loads of the missing tasks; the request runs again when they are resident. */
enum MHD_Result srv__load_then_retry(srv_request *r);

/* ---- admin (admin.c) ---- */
/* First call: 1 when url/method is an admin route (sets r->route and r->admin). */
int srv__admin_claims(srv_request *r, const char *url, const char *method);
/* Last call (body complete): answers or offloads the admin request. */
enum MHD_Result srv__admin_dispatch(srv_request *r, const char *url, const char *method);

/* ---- directory watch (watch.c) ---- */
typedef struct srv_watch srv_watch;
/* Loop thread: watches <registry>/tasks; returns NULL (and logs) when it cannot. */
srv_watch *srv__watch_start(srv_server *s);
/* Loop thread: stops; the handles close on the loop's last run. */
void srv__watch_stop(srv_watch *w);

/* The cost model measured for model m at start-up, or NULL (a model loaded later has none). */
const eng_cost_model *srv__cost_model(const srv_server *s, const store_model *m);

#endif
