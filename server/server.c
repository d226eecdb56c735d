/* server.c - srv_run: the libuv loop (scheduler, offloader, watch, signals), libmicrohttpd's daemon,
 * the cost models measured at start-up, and the drain on SIGTERM/SIGINT. It wires the parts
 * together and holds no route: requests enter through routes.c (HTTP) and grpc.c, inference runs
 * through the front door (infer.c or grpc_calls.c -> front.c) -> scheduler.c -> respond.c, and
 * the scheduler hands finished jobs back through the hooks below to the edge each came through, so no
 * file of the server calls back into this one. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "conn.h"
#include "embed.h"
#include "grpc.h"
#include "internal.h"
#include "models.h"
#include "offload.h"
#include "respond.h"
#include "rollout.h"
#include "routes.h"
#include "tls.h"
#include "url.h"
#include "watch.h"
#include "keys.h"

/* libmicrohttpd's limits: idle seconds before a connection closes (while it is answered: the header
 * deadline and the body rate are conn.c's), listen backlog. */
#define HTTP_IDLE_TIMEOUT_S 60
#define HTTP_LISTEN_BACKLOG 1024
/* How often conn.c's sweep looks for slow connections, ms. */
#define CONN_SWEEP_MS 250
/* How often the keys file's identity is checked (--keys): a revoked key is refused within a second. */
#define KEYS_POLL_MS 500
/* Descriptors kept beyond the connection limit (registry files, the loop, logs). */
#define FD_SPARE 256
/* Largest packed rows the start-up calibration of each model's cost model times (shape classes
 * 1, 4, 16, 64, 256, 1024 rows; a large model stops earlier, see eng_cost_calibrate); larger layers
 * are priced at the largest class's rate. */
#define COST_CALIBRATION_ROWS 1024
/* How often a drain checks whether work is left, ms. */
#define DRAIN_POLL_MS 5
/* After the drain deadline, how long the answers get to reach their clients once no connection is
 * suspended any more, seconds. */
#define DRAIN_SEND_GRACE_S 2.0

/* ---- the scheduler's hooks ---- */

static void hook_respond(void *ctx, srv_job *j, const eng_task_out *outs, const eng_plan_stats *stats) {
    (void)ctx;
    if (j->trace.sampled) j->trace.t_enc0 = srv__now();
    srv__job_respond(j, outs, stats); /* the answer in its protocol's encoding, on the worker */
    if (j->trace.sampled) j->trace.t_enc1 = srv__now();
}

static void hook_respond_embed(void *ctx, srv_job *j, const float *hidden, const float *pooled) {
    (void)ctx;
    if (j->trace.sampled) j->trace.t_enc0 = srv__now();
    srv__job_respond_embed(j, hidden, pooled);
    if (j->trace.sampled) j->trace.t_enc1 = srv__now();
}

static void hook_fail(void *ctx, srv_job *j, eng_status code, const char *msg) {
    (void)ctx;
    srv__job_fail(j, code, msg);
}

/* A rule's verdict on a rollout (rollout.c), applied on libuv's pool: store_rollout_finish writes
 * the registry state, which every replica then follows. */
typedef struct {
    uv_work_t w;
    srv_server *s;
    char task[SRV_NAME_MAX];
    uint64_t id;
    int promote, rc;
    char why[200];
    eng_err err;
} rollout_verdict;

static void verdict_work(uv_work_t *w) {
    rollout_verdict *v = w->data;
    v->rc = store_rollout_finish(v->s->reg, v->task, v->promote, v->id, NULL, &v->err);
}

static void verdict_done(uv_work_t *w, int status) {
    rollout_verdict *v = w->data;
    (void)status;
    if (v->rc) fprintf(stderr, "adapterd: rollout of task %s: the rule's %s was not applied: %s\n", v->task,
                       v->promote ? "promotion" : "abort", v->err.msg);
    else fprintf(stderr, "adapterd: audit caller=rule action=%s task=%s version=- status=200 request=- reason=\"%s\"\n",
                 v->promote ? "promote" : "abort", v->task, v->why);
    free(v);
}

/* Loop thread: j's rollouts counted (a canary's version answered, or failed) and their rules asked. */
static void rollouts_done(srv_server *s, srv_job *j) {
    for (int k = 0; j->ro && k < j->n_tasks; k++) {
        const srv_job_rollout *r = &j->ro[k];
        if (r->ro.mode == STORE_ROLLOUT_NONE) continue;
        const char *name = store_task_name(j->tasks[k]);
        if (r->ro.mode == STORE_ROLLOUT_CANARY)
            srv__rollout_served(s->rollouts, name, &r->ro, r->candidate, j->fail_code != 0,
                                j->t_end > 0 ? (j->t_end - j->t_request) * 1e3 : -1);
        char why[200] = "";
        int verdict = srv__rollout_verdict(s->rollouts, name, &r->ro, why, sizeof why);
        if (!verdict) continue;
        rollout_verdict *v = calloc(1, sizeof *v);
        if (!v) continue;
        v->s = s, v->id = r->ro.id, v->promote = verdict > 0, v->w.data = v;
        snprintf(v->task, sizeof v->task, "%s", name);
        snprintf(v->why, sizeof v->why, "%s", why);
        if (uv_queue_work(&s->loop, &v->w, verdict_work, verdict_done)) free(v);
    }
}

/* Loop thread: the job is answered; count it and hand it to the edge its request came through (HTTP
 * resumes the connection, gRPC sends the call's answer). A job abandoned at the drain deadline has
 * no request any more: its edge frees it. */
static void hook_done(void *ctx, srv_job *j) {
    srv_server *s = ctx;
    if (j->ro) rollouts_done(s, j);
    if (j->edge_ctx) {
        srv__metrics_queue_wait(s->metrics, j->t_start > 0 ? j->t_start - j->t_submit : -1);
        if (s->keys && j->tenant.slot > 0 && j->t_start > 0)
            srv__keys_count_queue_wait(s->keys, j->tenant.slot, j->t_start - j->t_submit);
        for (int k = 0; k < j->n_tasks; k++)
            srv__metrics_task(s->metrics, store_task_name(j->tasks[k]), j->treqs[k].skip, j->n_inputs,
                              j->t_end > 0 ? j->t_end - j->t_request : -1);
    }
    j->edge->done(s, j);
}

/* Loop thread, drain deadline: j's pass goes on, but its request answers 503 now (the edge's hook;
 * the job takes over what the worker still reads from the request). */
static void hook_abandon(void *ctx, srv_job *j) { j->edge->abandon(ctx, j); }

/* ---- the loop ---- */

typedef struct {
    srv_server *s;
    uv_signal_t sigterm, sigint;
    uv_timer_t drain_timer, sweep_timer, keys_timer;
    uv_prepare_t busy;       /* the loop's busy time per turn (adapterd_loop_busy_seconds) */
    uint64_t busy_t, busy_idle;
    double busy_cpu;
    double drain_start;
    double deadline_hit;     /* when the drain deadline passed; 0 before */
    double unsuspended;      /* after the deadline, since when no connection is suspended; 0: one is */
} srv_loop_ctx;

/* The drain, every DRAIN_POLL_MS. Before the deadline queued jobs keep their batching schedule:
 * draining does not change answers, it only stops new work. At the deadline every request still
 * waiting on the scheduler answers 503 (queued jobs fail, jobs in a pass are abandoned), offloaded
 * work is waited for (an upload being checked may still land: its client gets the true answer),
 * and the loop stops once no connection is suspended (libmicrohttpd refuses to stop with one) and
 * the answers went out, or DRAIN_SEND_GRACE_S after the last connection resumed (counted from the
 * deadline, a slow upload's answer was cut: the version landed, its client got an empty reply). */
static void drain_check(uv_timer_t *t) {
    srv_loop_ctx *c = t->data;
    srv_server *s = c->s;
    int in_flight = atomic_load(&s->active); /* requests; a queued job is one of them */
    double now = srv__now();
    if (!c->deadline_hit) {
        if (in_flight == 0) {
            uv_stop(t->loop);
        } else if ((now - c->drain_start) * 1e3 > s->cfg.drain_timeout_ms) {
            c->deadline_hit = now;
            int in_pass = srv__sched_cancel(s->sched, ENG_UNAVAILABLE,
                                            "the server stopped at its drain deadline before this request ran; retry on another replica");
            fprintf(stderr, "adapterd: drain timeout with %d requests in flight (%d in an engine pass); the ones waiting for the "
                            "engine answer 503, uploads and loads under way finish first\n",
                    in_flight, in_pass);
        }
        return;
    }
    if (atomic_load(&s->n_suspended) != 0) {
        c->unsuspended = 0;
        return;
    }
    if (!c->unsuspended) c->unsuspended = now;
    if (in_flight == 0 || now - c->unsuspended > DRAIN_SEND_GRACE_S) uv_stop(t->loop);
}

/* Just before each wait for events: the time since the previous one, less what the loop spent
 * waiting inside it (libuv's idle-time metric), is what the turn spent in callbacks. Exact for every
 * turn, unlike a timer's lateness, which misses a stall that ends before the timer is due. */
static void on_prepare(uv_prepare_t *h) {
    srv_loop_ctx *c = h->data;
    uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(h->loop);
    struct timespec ts;
    double cpu = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) ? 0 : (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (c->busy_t)
        srv__metrics_loop_busy(c->s->metrics, (double)((now - c->busy_t) - (idle - c->busy_idle)) / 1e9, cpu - c->busy_cpu);
    c->busy_t = now, c->busy_idle = idle, c->busy_cpu = cpu;
}

static void sweep(uv_timer_t *t) {
    srv_loop_ctx *c = t->data;
    srv__conns_sweep(c->s->conns);
}

/* --keys: the file's identity checked twice a second, so a revoked key is refused within a second. */
static void keys_poll(uv_timer_t *t) {
    srv_loop_ctx *c = t->data;
    srv__keys_poll(c->s->keys);
}

/* Every connection needs a descriptor: raise the soft limit toward the hard one when the
 * connection limit would not fit (a default of 1024 would refuse connections long before 4096). */
static void raise_fd_limit(int want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    rlim_t need = (rlim_t)want + FD_SPARE;
    if (rl.rlim_cur >= need) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need)
        fprintf(stderr, "adapterd: only %llu file descriptors for %d connections\n", (unsigned long long)rl.rlim_cur, want);
}

static void on_signal(uv_signal_t *h, int signum) {
    srv_loop_ctx *c = h->data;
    if (atomic_exchange(&c->s->draining, true)) return;
    srv__tls_stop(c->s->tls);
    srv__grpc_drain(c->s->grpc); /* GOAWAY: in-flight calls finish, no new ones */
    fprintf(stderr, "adapterd: %s: draining (%d requests in flight)\n", signum == SIGTERM ? "SIGTERM" : "SIGINT",
            atomic_load(&c->s->active));
    c->drain_start = srv__now();
    uv_timer_start(&c->drain_timer, drain_check, 0, DRAIN_POLL_MS);
}

/* Measures each model's cost model on this machine (eng_cost_calibrate: every shape class, with a
 * worker's threads) for "latency_ms". Runs before the workers start, so the measurement has the
 * cores to itself; the workers then correct it from the passes they run. */
static int calibrate_costs(srv_server *s, eng_err *err) {
    int n = store_n_models(s->reg), rc = 0;
    s->cost_models = calloc((size_t)n + 1, sizeof *s->cost_models);
    s->costs = calloc((size_t)n + 1, sizeof *s->costs);
    eng_state *st = eng_state_new(s->cfg.threads);
    if (!s->cost_models || !s->costs || !st) {
        eng_state_free(st);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n && !rc; i++) {
        store_model *m = store_model_acquire_at(s->reg, i);
        if (!m) continue;
        double t0 = srv__now();
        if ((rc = eng_cost_calibrate(store_model_engine(m), st, COST_CALIBRATION_ROWS, &s->costs[s->n_costs], err))) {
            eng_err_prefix(err, "cost model of %s", store_model_name(m));
            store_model_release(m);
            break;
        }
        const eng_cost_model *cm = &s->costs[s->n_costs];
        fprintf(stderr,
                "adapterd: cost model %s (%s): %.3f ms/GFLOP on %d-row layers, %.3f on %d; %.3f ms per pass, %.3f per "
                "head (measured in %.0f ms)\n",
                store_model_name(m), eng_model_precision(store_model_engine(m)).name, cm->ms_per_gflop[0], cm->rows[0],
                cm->ms_per_gflop[cm->n_classes - 1], cm->rows[cm->n_classes - 1], cm->pass_ms, cm->head_ms,
                (srv__now() - t0) * 1e3);
        s->cost_models[s->n_costs++] = m;
    }
    eng_state_free(st);
    return rc;
}

static void close_cb(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

int srv_run(const srv_config *cfg, store_registry *reg, eng_err *err) {
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    s->cfg = *cfg;
    s->reg = reg;
    s->started = (long long)time(NULL);
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd) rnd = (uint32_t)time(NULL);
    snprintf(s->id_prefix, sizeof s->id_prefix, "%08x", rnd);
    int rc = 0;
    srv_loop_ctx ctx = {.s = s};
    /* HTTPS through libmicrohttpd's GnuTLS, the certificate from tls.c's callback so a reload reaches
     * the next handshake */
    struct MHD_OptionItem tls_opts[4] = {{MHD_OPTION_END, 0, NULL}};
    if (uv_loop_init(&s->loop)) {
        free(s);
        return eng_err_set(err, ENG_INTERNAL, "cannot create the event loop");
    }
    uv_loop_configure(&s->loop, UV_METRICS_IDLE_TIME); /* for on_prepare; 0 idle time without it */
    /* a served name that cannot be honoured stops the start, before anything listens */
    if ((rc = srv__model_names_new(cfg->served_model_name, reg, &s->names, err))) goto done;
    if (!(s->metrics = srv__metrics_new(reg))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    srv__metrics_set_task_series(s->metrics, cfg->metrics_tasks);
    /* --tls-cert: both ports' credentials, read before the slow steps so a bad file stops the start at
     * once (cmd_serve checked them already; this is the copy the server serves and re-reads) */
    if (cfg->tls_cert[0] || cfg->tls_key[0] || cfg->tls_client_ca[0]) {
        if ((rc = srv__tls_start(cfg, &s->loop, &s->tls, err))) goto done;
        srv__tls_mhd_options(s->tls, tls_opts);
    }
    if (!(s->rollouts = srv__rollouts_new(cfg->rollout_samples, cfg->rollout_sample_text))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    if ((rc = calibrate_costs(s, err))) goto done;
    if (srv__model_files_load(s)) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    if (!(s->offl = srv__offload_new(&s->loop))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    if (cfg->keys[0]) {
        char msg[600];
        if (!(s->keys = srv__keys_open(cfg->keys, msg, sizeof msg))) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "--keys: %s", msg);
            goto done;
        }
    }
    if ((rc = srv__tracer_start(cfg, &s->tracer, err))) goto done;
    if (s->tracer) {
        fprintf(stderr, "adapterd: tracing to %s (sampler %s%s%s)\n", cfg->trace_endpoint,
                cfg->trace_sampler[0] ? cfg->trace_sampler : "parentbased_always_on", cfg->trace_sampler_arg[0] ? " " : "",
                cfg->trace_sampler_arg);
        /* the SDKs' other protocols: said once, since the collector's gRPC port would refuse every export */
        const char *proto = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
        if (!proto) proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL");
        if (proto && strcmp(proto, "http/protobuf"))
            fprintf(stderr, "adapterd: OTEL_EXPORTER_OTLP_PROTOCOL=%s is not served: traces go as http/protobuf (a "
                            "collector's OTLP/HTTP port, 4318)\n", proto);
    }
    if (cfg->watch) s->watch = srv__watch_start(s);
    srv_sched_params sp = {.workers = cfg->workers, .threads = cfg->threads, .max_queue = cfg->max_queue,
                           .max_batch_tokens = cfg->max_batch_tokens, .max_wait_us = cfg->max_wait_us,
                           .adaptive_skips = cfg->adaptive_skips, .target_queue_ms = cfg->target_queue_ms,
                           .metrics = s->metrics, .tracer = s->tracer};
    srv_sched_hooks hooks = {.respond = hook_respond, .respond_embed = hook_respond_embed, .fail = hook_fail, .done = hook_done,
                             .abandon = hook_abandon, .ctx = s};
    if ((rc = srv__sched_start(&s->loop, &sp, hooks, &s->sched, err))) goto done;
    uv_signal_init(&s->loop, &ctx.sigterm);
    uv_signal_init(&s->loop, &ctx.sigint);
    uv_timer_init(&s->loop, &ctx.drain_timer);
    uv_timer_init(&s->loop, &ctx.sweep_timer);
    ctx.sigterm.data = ctx.sigint.data = ctx.drain_timer.data = ctx.sweep_timer.data = &ctx;
    uv_signal_start(&ctx.sigterm, on_signal, SIGTERM);
    uv_signal_start(&ctx.sigint, on_signal, SIGINT);
    uv_prepare_init(&s->loop, &ctx.busy);
    ctx.busy.data = &ctx;
    uv_prepare_start(&ctx.busy, on_prepare);
    uv_unref((uv_handle_t *)&ctx.busy);

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    if (uv_inet_pton(AF_INET, cfg->host, &addr.sin_addr)) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "host: '%s' is not an IPv4 address", cfg->host);
        goto done;
    }
    srv_conn_params cp = {.max_connections = cfg->max_connections, .reserve = cfg->health_reserve,
                          .max_per_ip = cfg->max_connections_per_ip, .header_timeout_s = cfg->header_timeout_ms / 1e3,
                          .min_body_rate = cfg->min_body_rate};
    if (!(s->conns = srv__conns_new(&cp))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    raise_fd_limit(cfg->max_connections + cfg->health_reserve);
    uv_timer_start(&ctx.sweep_timer, sweep, CONN_SWEEP_MS, CONN_SWEEP_MS);
    if (s->keys) {
        uv_timer_init(&s->loop, &ctx.keys_timer);
        ctx.keys_timer.data = &ctx;
        uv_timer_start(&ctx.keys_timer, keys_poll, KEYS_POLL_MS, KEYS_POLL_MS);
    }
    /* http_threads > 1: MHD's own pool, each thread with its own epoll set, so parsing and tokenizing
     * run in parallel; every handler path is thread-safe (atomics, the store's and scheduler's mutexes).
     * The cap per address is conn.c's accept policy (srv__conns_accept_policy), not MHD's own
     * per-IP limit, which would count HTTP's connections alone: gRPC's are counted there too. */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | (s->tls ? MHD_USE_TLS : 0);
    s->mhd = MHD_start_daemon(flags, (uint16_t)cfg->port,
                              srv__conns_accept_policy, s->conns, srv__on_request, s, MHD_OPTION_SOCK_ADDR,
                              (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, srv__on_completed, s,
                              MHD_OPTION_UNESCAPE_CALLBACK, srv__url_unescape, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)HTTP_IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)(cfg->max_connections + cfg->health_reserve),
                              MHD_OPTION_NOTIFY_CONNECTION, srv__conns_notify, s->conns,
                              MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)HTTP_LISTEN_BACKLOG,
                              MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->http_threads > 1 ? cfg->http_threads : 0),
                              MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!s->mhd) {
        rc = eng_err_set(err, ENG_UNAVAILABLE, "cannot listen on %s:%d (%s)", cfg->host, cfg->port, strerror(errno));
        goto done;
    }
    /* gRPC listens before the port file says the server is up, so a client that waits for the file
     * finds both ports */
    if (cfg->grpc_port && (rc = srv__grpc_serve(s, &s->grpc, err))) goto done;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : cfg->port;
    if (cfg->port_file[0]) {
        char tmp[sizeof cfg->port_file + sizeof ".tmp"];
        snprintf(tmp, sizeof tmp, "%s.tmp", cfg->port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, cfg->port_file)) {
            rc = eng_err_set(err, ENG_IO, "cannot write the port file %s", cfg->port_file);
            goto done;
        }
    }
    fprintf(stderr,
            "adapterd: listening on %s://%s:%d (%d tasks, %d http thread(s), %d worker(s) x %d threads, batch %d tokens / "
            "%d us, queue %d%s)\n",
            s->tls ? "https" : "http", cfg->host, port, store_n_tasks(reg), cfg->http_threads, cfg->workers, cfg->threads,
            cfg->max_batch_tokens, cfg->max_wait_us, cfg->max_queue, cfg->adaptive_skips ? ", adaptive skips" : "");
    atomic_store(&s->ready, true);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    atomic_store(&s->ready, false);
    fprintf(stderr, "adapterd: drained, stopping\n");
done:
    /* stopped here on every path: a start that failed after the watch began would otherwise leave its
     * rescan re-queueing itself on the pool, and the loop below would never end */
    srv__watch_stop(s->watch);
    if (s->mhd) MHD_stop_daemon(s->mhd);
    /* workers may still report batches after a drain timeout: join them before closing handles,
     * and free the scheduler (whose handles these are) only once they are closed */
    srv__sched_stop(s->sched);
    srv__grpc_calls_stop(s); /* nothing may push to the loop's inboxes once their handles close */
    uv_walk(&s->loop, close_cb, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    srv__sched_free(s->sched);
    srv__grpc_free(s->grpc);
    srv__grpc_calls_free(s);
    srv__offload_free(s->offl);
    srv__model_files_free(s);
    srv__conns_free(s->conns);
    srv__tls_free(s->tls);
    srv__metrics_free(s->metrics);
    srv__rollouts_free(s->rollouts);
    srv__model_names_free(s->names);
    srv__keys_free(s->keys);
    srv__tracer_free(s->tracer); /* after every thread that ends requests or runs passes stopped: exports what is left */
    for (int i = 0; i < s->n_costs; i++) store_model_release(s->cost_models[i]);
    free(s->cost_models), free(s->costs);
    free(s);
    return rc;
}
