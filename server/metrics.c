/* metrics.c - Prometheus counters and histograms, updated with relaxed atomics from any thread and
 * rendered as text on /metrics. Per-task series live in a table keyed by task name (tasks come and
 * go while serving): a lookup takes a mutex, the counters themselves are atomics. Registry figures
 * (residency, loads, evictions) are read from the store at render.
 *
 * Bounded per-task output: a task used once carries ~20 series (requests, a 17-line histogram, skips),
 * 4 MB per scrape at 3,000 tasks, the cardinality Prometheus' guidance warns against. The render shows
 * the K busiest tasks (by requests, --metrics-tasks, default 100) under their names and sums every other
 * task into one task="(other)" set of series ("(" is never in a task name), so a scrape's size does not
 * grow with the registry; adapterd_task_series_other says how many tasks were summed there. A registry
 * of at most K tasks renders exactly as before. Counters are never moved between names: a task that
 * enters the top K shows its whole count and (other) loses it, which rate() reads as a counter reset of
 * (other) only. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

#include "engine/platform.h"
#include "proto/grpc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static const char *const route_names[] = {
#define SRV__ROUTE_NAME(name, path) path,
    SRV_ROUTE_LIST(SRV__ROUTE_NAME)
#undef SRV__ROUTE_NAME
};

/* Every status the server sends (http_status.c's table, 201 for uploads, 499 for a client that left);
 * tests/server/test_metrics.c checks the table's statuses are all here. */
static const unsigned codes[] = {200, 201, 400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 499, 500, 503, 507};
#define N_CODES (sizeof codes / sizeof codes[0])
#define N_LAT 14
static const double lat_b[N_LAT] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define N_CNT 10
static const double cnt_b[N_CNT] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
#define N_LOOP 12
static const double loop_b[N_LOOP] = {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};
static const char *const rescan_kinds[] = {"full", "tasks"}; /* srv_rescan_kind's order */
#define N_TOK 10
static const double tok_b[N_TOK] = {16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536};
/* The backbone precisions a batch can run in (eng_model_precision's names). */
static const char *const precisions[] = {"fp32", "bf16", "int8"};
#define N_PREC (sizeof precisions / sizeof precisions[0])
#define MAX_SKIP 64        /* skips above share the last series */
#define HIST_MAX_BOUNDS 15 /* bucket bounds of the largest histogram */
#define SERIES_LABEL_MAX 320 /* bytes of a task label (names are at most SRV_NAME_MAX) */

/* Protocols counted apart (their codecs' names); more are not counted. */
#define PROTOCOLS_MAX 16

typedef struct {
    atomic_uint_fast64_t b[HIST_MAX_BOUNDS + 1]; /* per bucket + overflow; cumulative only at render */
    atomic_uint_fast64_t count;
    _Atomic double sum;
} hist;

/* A histogram bucket's exemplar: the last sampled request that fell in it (OpenMetrics). A seqlock:
 * odd seq while one writer fills it (a second writer meanwhile skips: an exemplar is a sample, not a
 * count); the renderer keeps a copy only when seq was even and unchanged around it. */
typedef struct {
    atomic_uint_fast64_t seq;
    atomic_uint_fast64_t id[2];              /* the trace id, 16 bytes */
    _Atomic double v, ts;                    /* the value observed; when, Unix seconds */
} exemplar;

struct srv_metrics {
    atomic_uint_fast64_t requests[SRV_ROUTE_COUNT][N_CODES + 1];
    hist latency[SRV_ROUTE_COUNT];
    atomic_uint_fast64_t grpc[PROTO_GRPC_N_METHODS][PROTO_GRPC_N_CODES]; /* gRPC calls by method and status */
    struct {
        _Atomic(const char *) name;        /* a codec's name (static), claimed once by the first request */
        atomic_uint_fast64_t count;
    } protocols[PROTOCOLS_MAX];            /* requests decoded by the front door, by protocol */
    hist grpc_latency[PROTO_GRPC_N_METHODS];
    exemplar latency_ex[SRV_ROUTE_COUNT][N_LAT + 1];
    exemplar grpc_ex[PROTO_GRPC_N_METHODS][N_LAT + 1];
    hist queue_wait, lazy_load, batch_requests, batch_inputs, batch_tokens, batch_seconds;
    atomic_uint_fast64_t tokens, batches;
    atomic_uint_fast64_t prec_tokens[N_PREC], prec_batches[N_PREC];
    _Atomic double prec_seconds[N_PREC];
    atomic_uint_fast64_t adaptive_jobs, adaptive_layers, latency_refused;
    hist loop_busy;                        /* event loop turns: callbacks' time between two waits */
    atomic_uint_fast64_t loop_busy_max_ns; /* the longest turn since the previous render */
    atomic_uint_fast64_t loop_cpu_max_ns;  /* its CPU time: the most CPU one turn took since then */
    atomic_uint_fast64_t watch_max_ns;     /* the most CPU a watch callback took since then */
    hist rescan[2];                        /* by srv_rescan_kind: wall time */
    _Atomic double rescan_cpu[2];
    pthread_mutex_t tmu;                   /* the task table */
    struct task_series **tasks;            /* open addressing, (cap) */
    int n_tasks, cap;
    store_registry *reg;
    int task_series_max;                   /* K: tasks rendered under their own name */
};

typedef struct task_series {
    char *name;
    hist latency;                          /* requests naming the task: first byte to answer */
    atomic_uint_fast64_t requests;
    atomic_uint_fast64_t skips[MAX_SKIP + 1];
} task_series;

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The series of task name, created on first use; NULL when out of memory. */
static task_series *series(srv_metrics *m, const char *name) {
    pthread_mutex_lock(&m->tmu);
    task_series *t = NULL;
    if (2 * (m->n_tasks + 1) > m->cap) {
        int nc = m->cap ? m->cap * 2 : 64;
        task_series **nt = calloc((size_t)nc, sizeof *nt);
        if (nt) {
            for (int i = 0; i < m->cap; i++)
                if (m->tasks[i]) {
                    size_t k = hash_name(m->tasks[i]->name) & (size_t)(nc - 1);
                    while (nt[k]) k = (k + 1) & (size_t)(nc - 1);
                    nt[k] = m->tasks[i];
                }
            free(m->tasks);
            m->tasks = nt, m->cap = nc;
        }
    }
    if (m->cap) {
        size_t k = hash_name(name) & (size_t)(m->cap - 1);
        while (m->tasks[k] && strcmp(m->tasks[k]->name, name)) k = (k + 1) & (size_t)(m->cap - 1);
        if (!(t = m->tasks[k]) && 2 * (m->n_tasks + 1) <= m->cap && (t = calloc(1, sizeof *t))) {
            if ((t->name = strdup(name))) {
                m->tasks[k] = t;
                m->n_tasks++;
            } else {
                free(t);
                t = NULL;
            }
        }
    }
    pthread_mutex_unlock(&m->tmu);
    return t;
}

static int cmp_series(const void *a, const void *b) {
    return strcmp((*(task_series *const *)a)->name, (*(task_series *const *)b)->name);
}

/* Busiest first (requests), then by name, so the K shown are stable between scrapes. */
static int cmp_busiest(const void *a, const void *b) {
    const task_series *x = *(task_series *const *)a, *y = *(task_series *const *)b;
    uint64_t rx = atomic_load_explicit(&x->requests, memory_order_relaxed),
             ry = atomic_load_explicit(&y->requests, memory_order_relaxed);
    return rx != ry ? (rx < ry) - (rx > ry) : strcmp(x->name, y->name);
}

/* dst += src, series by series (dst is the render's own (other) set). */
static void add_series(task_series *dst, const task_series *src) {
    atomic_fetch_add_explicit(&dst->requests, atomic_load_explicit(&src->requests, memory_order_relaxed),
                              memory_order_relaxed);
    for (int i = 0; i <= HIST_MAX_BOUNDS; i++)
        atomic_fetch_add_explicit(&dst->latency.b[i], atomic_load_explicit(&src->latency.b[i], memory_order_relaxed),
                                  memory_order_relaxed);
    atomic_fetch_add_explicit(&dst->latency.count, atomic_load_explicit(&src->latency.count, memory_order_relaxed),
                              memory_order_relaxed);
    atomic_store_explicit(&dst->latency.sum,
                          atomic_load_explicit(&dst->latency.sum, memory_order_relaxed) +
                              atomic_load_explicit(&src->latency.sum, memory_order_relaxed),
                          memory_order_relaxed);
    for (int k = 0; k <= MAX_SKIP; k++)
        atomic_fetch_add_explicit(&dst->skips[k], atomic_load_explicit(&src->skips[k], memory_order_relaxed),
                                  memory_order_relaxed);
}

static int observe(hist *h, const double *bounds, int n, double v) {
    int i = 0;
    while (i < n && v > bounds[i]) i++;
    atomic_fetch_add_explicit(&h->b[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    double old = atomic_load_explicit(&h->sum, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&h->sum, &old, old + v, memory_order_relaxed, memory_order_relaxed)) {
    }
    return i;
}

static void set_exemplar(exemplar *e, const uint8_t *trace_id, double v) {
    uint_fast64_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);
    if ((s & 1) || !atomic_compare_exchange_strong_explicit(&e->seq, &s, s + 1, memory_order_acquire, memory_order_relaxed))
        return; /* another writer is at it */
    uint64_t a = 0, b = 0;
    for (int k = 0; k < 8; k++) a = a << 8 | trace_id[k], b = b << 8 | trace_id[8 + k];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_store_explicit(&e->id[0], a, memory_order_relaxed);
    atomic_store_explicit(&e->id[1], b, memory_order_relaxed);
    atomic_store_explicit(&e->v, v, memory_order_relaxed);
    atomic_store_explicit(&e->ts, (double)ts.tv_sec + ts.tv_nsec * 1e-9, memory_order_relaxed);
    atomic_store_explicit(&e->seq, s + 2, memory_order_release);
}

static void add_double(_Atomic double *d, double v) {
    double old = atomic_load_explicit(d, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(d, &old, old + v, memory_order_relaxed, memory_order_relaxed)) {
    }
}

bool srv__metrics_precision(srv_metrics *m, const char *precision, int tokens, double seconds) {
    for (size_t p = 0; p < N_PREC; p++)
        if (precision && !strcmp(precision, precisions[p])) {
            atomic_fetch_add_explicit(&m->prec_batches[p], 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&m->prec_tokens[p], (uint64_t)(tokens > 0 ? tokens : 0), memory_order_relaxed);
            add_double(&m->prec_seconds[p], seconds > 0 ? seconds : 0);
            return true;
        }
    return false;
}

srv_metrics *srv__metrics_new(store_registry *reg) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->tmu, NULL);
    m->reg = reg;
    m->task_series_max = SRV_METRICS_TASKS_DEFAULT;
    return m;
}

void srv__metrics_set_task_series(srv_metrics *m, int k) { m->task_series_max = k < 0 ? 0 : k; }

void srv__metrics_free(srv_metrics *m) {
    if (!m) return;
    for (int i = 0; i < m->cap; i++)
        if (m->tasks[i]) free(m->tasks[i]->name), free(m->tasks[i]);
    free(m->tasks);
    pthread_mutex_destroy(&m->tmu);
    free(m);
}

void srv__metrics_request_traced(srv_metrics *m, srv_route r, unsigned status, double seconds, const uint8_t *trace_id) {
    size_t c = 0;
    while (c < N_CODES && codes[c] != status) c++;
    atomic_fetch_add_explicit(&m->requests[r][c], 1, memory_order_relaxed);
    int b = observe(&m->latency[r], lat_b, N_LAT, seconds);
    if (trace_id) set_exemplar(&m->latency_ex[r][b], trace_id, seconds);
}

void srv__metrics_request(srv_metrics *m, srv_route r, unsigned status, double seconds) {
    srv__metrics_request_traced(m, r, status, seconds, NULL);
}

void srv__metrics_protocol(srv_metrics *m, const char *protocol) {
    for (int i = 0; i < PROTOCOLS_MAX; i++) {
        const char *have = atomic_load_explicit(&m->protocols[i].name, memory_order_acquire);
        if (!have && atomic_compare_exchange_strong(&m->protocols[i].name, &have, protocol)) have = protocol;
        if (have == protocol || !strcmp(have, protocol)) {
            atomic_fetch_add_explicit(&m->protocols[i].count, 1, memory_order_relaxed);
            return;
        }
    }
}

void srv__metrics_grpc(srv_metrics *m, int method, int code, double seconds, const uint8_t *trace_id) {
    if (method < 0 || method >= PROTO_GRPC_N_METHODS) method = PROTO_GRPC_UNKNOWN_METHOD;
    if (code < 0 || code >= PROTO_GRPC_N_CODES) code = PROTO_GRPC_UNKNOWN;
    atomic_fetch_add_explicit(&m->grpc[method][code], 1, memory_order_relaxed);
    int b = observe(&m->grpc_latency[method], lat_b, N_LAT, seconds);
    if (trace_id) set_exemplar(&m->grpc_ex[method][b], trace_id, seconds);
}

void srv__metrics_queue_wait(srv_metrics *m, double seconds) {
    if (seconds >= 0) observe(&m->queue_wait, lat_b, N_LAT, seconds);
}

bool srv__metrics_code_known(unsigned status) {
    for (size_t c = 0; c < N_CODES; c++)
        if (codes[c] == status) return true;
    return false;
}

void srv__metrics_lazy_load(srv_metrics *m, double seconds) { observe(&m->lazy_load, lat_b, N_LAT, seconds); }

void srv__metrics_task(srv_metrics *m, const char *name, int skip, int n_inputs, double seconds) {
    task_series *t = series(m, name);
    if (!t) return;
    atomic_fetch_add_explicit(&t->requests, 1, memory_order_relaxed);
    if (seconds >= 0) observe(&t->latency, lat_b, N_LAT, seconds);
    int sk = skip > MAX_SKIP ? MAX_SKIP : skip < 0 ? 0 : skip;
    atomic_fetch_add_explicit(&t->skips[sk], (uint_fast64_t)n_inputs, memory_order_relaxed);
}

void srv__metrics_batch(srv_metrics *m, int requests, int inputs, int tokens, double seconds) {
    atomic_fetch_add_explicit(&m->tokens, (uint_fast64_t)tokens, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->batches, 1, memory_order_relaxed);
    observe(&m->batch_requests, cnt_b, N_CNT, requests);
    observe(&m->batch_inputs, cnt_b, N_CNT, inputs);
    observe(&m->batch_tokens, tok_b, N_TOK, tokens);
    observe(&m->batch_seconds, lat_b, N_LAT, seconds);
}

void srv__metrics_adaptive(srv_metrics *m, int layers) {
    atomic_fetch_add_explicit(&m->adaptive_jobs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->adaptive_layers, (uint_fast64_t)layers, memory_order_relaxed);
}

void srv__metrics_latency_refused(srv_metrics *m) {
    atomic_fetch_add_explicit(&m->latency_refused, 1, memory_order_relaxed);
}

static void raise_max(atomic_uint_fast64_t *max, double seconds) {
    uint_fast64_t ns = (uint_fast64_t)(seconds > 0 ? seconds * 1e9 : 0), old = atomic_load_explicit(max, memory_order_relaxed);
    while (ns > old && !atomic_compare_exchange_weak_explicit(max, &old, ns, memory_order_relaxed, memory_order_relaxed)) {
    }
}

void srv__metrics_loop_busy(srv_metrics *m, double seconds, double cpu_seconds) {
    observe(&m->loop_busy, loop_b, N_LOOP, seconds > 0 ? seconds : 0);
    raise_max(&m->loop_busy_max_ns, seconds);
    raise_max(&m->loop_cpu_max_ns, cpu_seconds);
}

void srv__metrics_watch_busy(srv_metrics *m, double cpu_seconds) { raise_max(&m->watch_max_ns, cpu_seconds); }

void srv__metrics_rescan(srv_metrics *m, srv_rescan_kind kind, double seconds, double cpu_seconds) {
    observe(&m->rescan[kind], lat_b, N_LAT, seconds);
    add_double(&m->rescan_cpu[kind], cpu_seconds > 0 ? cpu_seconds : 0);
}

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap * 2 + (size_t)n;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns, b->cap = nc;
    }
}

/* " # {trace_id=\"...\"} value timestamp" when e holds an exemplar (a consistent copy), else "". */
static void exemplar_text(const exemplar *e, char *out, size_t n) {
    out[0] = '\0';
    exemplar *x = (exemplar *)e; /* read only */
    uint_fast64_t s = atomic_load_explicit(&x->seq, memory_order_acquire);
    if (!s || (s & 1)) return;
    uint64_t a = atomic_load_explicit(&x->id[0], memory_order_relaxed), b = atomic_load_explicit(&x->id[1], memory_order_relaxed);
    double v = atomic_load_explicit(&x->v, memory_order_relaxed), ts = atomic_load_explicit(&x->ts, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&x->seq, memory_order_relaxed) != s) return; /* rewritten meanwhile: none this time */
    snprintf(out, n, " # {trace_id=\"%016llx%016llx\"} %.9g %.3f", (unsigned long long)a, (unsigned long long)b, v, ts);
}

/* A histogram; ex (n + 1 buckets) adds each bucket's exemplar, for OpenMetrics scrapes. */
static void put_hist_ex(buf *b, const char *name, const char *labels, const hist *h, const double *bounds, int n,
                        const exemplar *ex) {
    uint64_t cum = 0;
    char e[128] = "";
    for (int i = 0; i < n; i++) {
        cum += atomic_load_explicit(&h->b[i], memory_order_relaxed);
        if (ex) exemplar_text(&ex[i], e, sizeof e);
        put(b, "%s_bucket{%s%sle=\"%g\"} %llu%s\n", name, labels, *labels ? "," : "", bounds[i], (unsigned long long)cum, e);
    }
    cum += atomic_load_explicit(&h->b[n], memory_order_relaxed);
    if (ex) exemplar_text(&ex[n], e, sizeof e);
    put(b, "%s_bucket{%s%sle=\"+Inf\"} %llu%s\n", name, labels, *labels ? "," : "", (unsigned long long)cum, e);
    put(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, atomic_load_explicit(&h->sum, memory_order_relaxed),
        name, labels, (unsigned long long)atomic_load_explicit(&h->count, memory_order_relaxed));
}

static void put_hist(buf *b, const char *name, const char *labels, const hist *h, const double *bounds, int n) {
    put_hist_ex(b, name, labels, h, bounds, n, NULL);
}

char *srv__metrics_render(srv_metrics *m, const srv_metrics_live *live, size_t *len) {
    buf b = {.cap = 16384};
    if (!(b.s = malloc(b.cap))) return NULL;
    put(&b, "# HELP adapterd_requests_total HTTP requests by route and status.\n# TYPE adapterd_requests_total counter\n");
    for (int r = 0; r < SRV_ROUTE_COUNT; r++)
        for (size_t c = 0; c <= N_CODES; c++) {
            uint64_t v = atomic_load_explicit(&m->requests[r][c], memory_order_relaxed);
            if (!v) continue;
            if (c < N_CODES) put(&b, "adapterd_requests_total{route=\"%s\",code=\"%u\"} %llu\n", route_names[r], codes[c], (unsigned long long)v);
            else put(&b, "adapterd_requests_total{route=\"%s\",code=\"other\"} %llu\n", route_names[r], (unsigned long long)v);
        }
    put(&b, "# HELP adapterd_request_duration_seconds Time from first byte to response, by route.\n"
            "# TYPE adapterd_request_duration_seconds histogram\n");
    for (int r = 0; r < SRV_ROUTE_COUNT; r++) {
        if (!atomic_load_explicit(&m->latency[r].count, memory_order_relaxed)) continue;
        char l[64];
        snprintf(l, sizeof l, "route=\"%s\"", route_names[r]);
        put_hist_ex(&b, "adapterd_request_duration_seconds", l, &m->latency[r], lat_b, N_LAT,
                    live->openmetrics ? m->latency_ex[r] : NULL);
    }
    put(&b, "# HELP adapterd_decoded_requests_total Inference requests decoded by the front door, by protocol (its codec).\n"
            "# TYPE adapterd_decoded_requests_total counter\n");
    for (int i = 0; i < PROTOCOLS_MAX; i++) {
        const char *name = atomic_load_explicit(&m->protocols[i].name, memory_order_acquire);
        if (name)
            put(&b, "adapterd_decoded_requests_total{protocol=\"%s\"} %llu\n", name,
                (unsigned long long)atomic_load_explicit(&m->protocols[i].count, memory_order_relaxed));
    }
    put(&b, "# HELP adapterd_grpc_requests_total gRPC calls (--grpc-port) by method and grpc-status.\n"
            "# TYPE adapterd_grpc_requests_total counter\n");
    for (int g = 0; g < PROTO_GRPC_N_METHODS; g++)
        for (int c = 0; c < PROTO_GRPC_N_CODES; c++) {
            uint64_t v = atomic_load_explicit(&m->grpc[g][c], memory_order_relaxed);
            if (v)
                put(&b, "adapterd_grpc_requests_total{method=\"%s\",code=\"%s\"} %llu\n", proto_grpc_method_name((proto_grpc_method)g),
                    proto_grpc_code_name(c), (unsigned long long)v);
        }
    put(&b, "# HELP adapterd_grpc_request_duration_seconds gRPC calls: first byte to answer, by method.\n"
            "# TYPE adapterd_grpc_request_duration_seconds histogram\n");
    for (int g = 0; g < PROTO_GRPC_N_METHODS; g++) {
        if (!atomic_load_explicit(&m->grpc_latency[g].count, memory_order_relaxed)) continue;
        char l[64];
        snprintf(l, sizeof l, "method=\"%s\"", proto_grpc_method_name((proto_grpc_method)g));
        put_hist_ex(&b, "adapterd_grpc_request_duration_seconds", l, &m->grpc_latency[g], lat_b, N_LAT,
                    live->openmetrics ? m->grpc_ex[g] : NULL);
    }
    put(&b, "# HELP adapterd_queue_wait_seconds Time a job waited for its batch.\n# TYPE adapterd_queue_wait_seconds histogram\n");
    put_hist(&b, "adapterd_queue_wait_seconds", "", &m->queue_wait, lat_b, N_LAT);
    put(&b, "# HELP adapterd_lazy_load_seconds Time a request waited for its tasks to load (--adapter-memory).\n"
            "# TYPE adapterd_lazy_load_seconds histogram\n");
    put_hist(&b, "adapterd_lazy_load_seconds", "", &m->lazy_load, lat_b, N_LAT);
    put(&b, "# HELP adapterd_batch_requests Requests per engine batch.\n# TYPE adapterd_batch_requests histogram\n");
    put_hist(&b, "adapterd_batch_requests", "", &m->batch_requests, cnt_b, N_CNT);
    put(&b, "# HELP adapterd_batch_inputs Inputs per engine batch.\n# TYPE adapterd_batch_inputs histogram\n");
    put_hist(&b, "adapterd_batch_inputs", "", &m->batch_inputs, cnt_b, N_CNT);
    put(&b, "# HELP adapterd_batch_tokens Tokens per engine batch.\n# TYPE adapterd_batch_tokens histogram\n");
    put_hist(&b, "adapterd_batch_tokens", "", &m->batch_tokens, tok_b, N_TOK);
    put(&b, "# HELP adapterd_batch_seconds Engine time per batch.\n# TYPE adapterd_batch_seconds histogram\n");
    put_hist(&b, "adapterd_batch_seconds", "", &m->batch_seconds, lat_b, N_LAT);
    put(&b, "# HELP adapterd_tokens_total Input tokens run through the engine.\n# TYPE adapterd_tokens_total counter\n"
            "adapterd_tokens_total %llu\n",
        (unsigned long long)atomic_load_explicit(&m->tokens, memory_order_relaxed));
    /* per precision of the backbone: tokens / seconds is the throughput each precision gets here */
    static const char *const prec_help[3] = {
        "# HELP adapterd_inference_batches_total Engine batches run, by the precision of the backbone's Linear layers.\n"
        "# TYPE adapterd_inference_batches_total counter\n",
        "# HELP adapterd_inference_tokens_total Input tokens run through the engine, by backbone precision.\n"
        "# TYPE adapterd_inference_tokens_total counter\n",
        "# HELP adapterd_inference_seconds_total Engine time of batches, by backbone precision.\n"
        "# TYPE adapterd_inference_seconds_total counter\n"};
    for (int k = 0; k < 3; k++) {
        put(&b, "%s", prec_help[k]);
        for (size_t p = 0; p < N_PREC; p++) {
            const char *name = k == 0 ? "batches" : k == 1 ? "tokens" : "seconds";
            if (k < 2)
                put(&b, "adapterd_inference_%s_total{precision=\"%s\"} %llu\n", name, precisions[p],
                    (unsigned long long)atomic_load_explicit(k ? &m->prec_tokens[p] : &m->prec_batches[p],
                                                             memory_order_relaxed));
            else
                put(&b, "adapterd_inference_seconds_total{precision=\"%s\"} %.9g\n", precisions[p],
                    atomic_load_explicit(&m->prec_seconds[p], memory_order_relaxed));
        }
    }
    /* per-task series, in name order */
    pthread_mutex_lock(&m->tmu);
    int nt = 0;
    task_series **ts = calloc((size_t)m->n_tasks + 1, sizeof *ts);
    for (int i = 0; ts && i < m->cap; i++)
        if (m->tasks[i]) ts[nt++] = m->tasks[i]; /* series are never freed before the metrics */
    pthread_mutex_unlock(&m->tmu);
    /* beyond K: the K busiest by name, then (other), the sum of the rest */
    int n_other = 0;
    task_series *other = NULL;
    if (nt > m->task_series_max) {
        qsort(ts, (size_t)nt, sizeof *ts, cmp_busiest);
        n_other = nt - m->task_series_max;
        if (!(other = calloc(1, sizeof *other))) b.oom = 1;
        for (int i = m->task_series_max; other && i < nt; i++) add_series(other, ts[i]);
        nt = m->task_series_max;
    }
    if (nt) qsort(ts, (size_t)nt, sizeof *ts, cmp_series);
    int n_named = nt;
    if (other) ts[nt++] = other, other->name = "(other)"; /* after the names: ts has room for every series */
    put(&b, "# HELP adapterd_task_requests_total Requests naming each task.\n# TYPE adapterd_task_requests_total counter\n");
    for (int i = 0; i < nt; i++)
        put(&b, "adapterd_task_requests_total{task=\"%s\"} %llu\n", ts[i]->name,
            (unsigned long long)atomic_load_explicit(&ts[i]->requests, memory_order_relaxed));
    put(&b, "# HELP adapterd_task_request_duration_seconds Time from first byte to answer of requests naming each task.\n"
            "# TYPE adapterd_task_request_duration_seconds histogram\n");
    for (int i = 0; i < nt; i++) {
        char l[SERIES_LABEL_MAX];
        snprintf(l, sizeof l, "task=\"%s\"", ts[i]->name);
        put_hist(&b, "adapterd_task_request_duration_seconds", l, &ts[i]->latency, lat_b, N_LAT);
    }
    put(&b, "# HELP adapterd_task_skip_total Inputs run per task and AdapterDrop skip.\n# TYPE adapterd_task_skip_total counter\n");
    for (int i = 0; i < nt; i++)
        for (int k = 0; k <= MAX_SKIP; k++) {
            uint64_t v = atomic_load_explicit(&ts[i]->skips[k], memory_order_relaxed);
            if (v) put(&b, "adapterd_task_skip_total{task=\"%s\",skip=\"%d\"} %llu\n", ts[i]->name, k, (unsigned long long)v);
        }
    put(&b, "# HELP adapterd_task_series_other Tasks used whose series are summed in task=\"(other)\" (beyond the "
            "--metrics-tasks busiest).\n# TYPE adapterd_task_series_other gauge\nadapterd_task_series_other %d\n",
        n_other);
    /* the registry: residency, loads, evictions. One line per registered task while they are at most
     * K; beyond, the K busiest (the names above) and task="(other)": how many of the rest are loaded
     * (45 bytes a task: 450 KB a scrape at 10,000 tasks otherwise) */
    put(&b, "# HELP adapterd_task_resident 1 when the task's current version is loaded in memory; task=\"(other)\": how many "
            "of the tasks not named (beyond the --metrics-tasks busiest) are.\n# TYPE adapterd_task_resident gauge\n");
    store_task **all = NULL;
    int n_all = m->reg ? store_tasks_acquire(m->reg, &all) : 0;
    if (n_all <= m->task_series_max) {
        for (int i = 0; i < n_all; i++)
            put(&b, "adapterd_task_resident{task=\"%s\"} %d\n", store_task_name(all[i]), store_task_resident(all[i]));
    } else {
        int resident = 0, shown = 0;
        for (int i = 0; i < n_all; i++) resident += store_task_resident(all[i]) != 0;
        for (int i = 0, k = 0; i < n_named; i++) { /* both in name order: one merge */
            while (k < n_all && strcmp(store_task_name(all[k]), ts[i]->name) < 0) k++;
            if (k == n_all || strcmp(store_task_name(all[k]), ts[i]->name)) continue; /* used, since deleted */
            int on = store_task_resident(all[k]) != 0;
            shown += on;
            put(&b, "adapterd_task_resident{task=\"%s\"} %d\n", ts[i]->name, on);
        }
        put(&b, "adapterd_task_resident{task=\"(other)\"} %d\n", resident - shown);
    }
    store_tasks_release(all, n_all);
    free(ts);
    free(other);
    /* the CPU: its level, the level the kernels run at, and each precision's kernel family */
    put(&b, "# HELP adapterd_cpu_info 1, labelled with the CPU's vector level (detected), the level the engine's kernels "
            "run at (below --cpu-level / ADAPTERD_CPU_LEVEL) and the kernel family of each backbone precision.\n"
            "# TYPE adapterd_cpu_info gauge\n"
            "adapterd_cpu_info{detected=\"%s\",level=\"%s\",fp32=\"%s\",bf16=\"%s\",int8=\"%s\"} 1\n",
        eng_cpu_level_detected(), eng_cpu_level(), eng_kernel_family("fp32"), eng_kernel_family("bf16"),
        eng_kernel_family("int8"));
    /* the backbones: one series per model, its precision and kernel as labels */
    int n_models = m->reg ? store_n_models(m->reg) : 0;
    for (int pass = 0; pass < 2; pass++) {
        put(&b, pass ? "# HELP adapterd_model_packed_bytes Bytes of each model's packed backbone Linear weights, in its "
                       "precision.\n# TYPE adapterd_model_packed_bytes gauge\n"
                     : "# HELP adapterd_model_info 1 per backbone model served, labelled with the precision of its Linear "
                       "layers and the kernel that runs them.\n# TYPE adapterd_model_info gauge\n");
        for (int i = 0; i < n_models; i++) {
            store_model *sm = store_model_acquire_at(m->reg, i);
            if (!sm) continue;
            eng_model_precision_info pi = eng_model_precision(store_model_engine(sm));
            if (pass)
                put(&b, "adapterd_model_packed_bytes{model=\"%s\"} %zu\n", store_model_name(sm), pi.packed_bytes);
            else
                put(&b, "adapterd_model_info{model=\"%s\",precision=\"%s\",kernel=\"%s\"} 1\n", store_model_name(sm),
                    pi.name, pi.kernel);
            store_model_release(sm);
        }
    }
    store_stats st = {0};
    if (m->reg) store_get_stats(m->reg, &st);
    put(&b, "# HELP adapterd_tasks_registered Tasks in the registry.\n# TYPE adapterd_tasks_registered gauge\n"
            "adapterd_tasks_registered %d\n", st.n_tasks);
    put(&b, "# HELP adapterd_task_versions Versions listed in the registry.\n# TYPE adapterd_task_versions gauge\n"
            "adapterd_task_versions %d\n", st.n_versions);
    put(&b, "# HELP adapterd_tasks_resident Task versions loaded in memory.\n# TYPE adapterd_tasks_resident gauge\n"
            "adapterd_tasks_resident %d\n", st.n_resident);
    put(&b, "# HELP adapterd_adapter_bytes Bytes of task weights loaded.\n# TYPE adapterd_adapter_bytes gauge\n"
            "adapterd_adapter_bytes %zu\n", st.resident_bytes);
    put(&b, "# HELP adapterd_adapter_memory_budget_bytes --adapter-memory (0: no budget).\n"
            "# TYPE adapterd_adapter_memory_budget_bytes gauge\nadapterd_adapter_memory_budget_bytes %zu\n", st.budget);
    put(&b, "# HELP adapterd_adapter_loads_total Task versions loaded (lazily, by upload, activation or watch).\n"
            "# TYPE adapterd_adapter_loads_total counter\nadapterd_adapter_loads_total %llu\n", (unsigned long long)st.loads);
    put(&b, "# HELP adapterd_adapter_load_failures_total Loads that failed validation.\n"
            "# TYPE adapterd_adapter_load_failures_total counter\nadapterd_adapter_load_failures_total %llu\n",
        (unsigned long long)st.load_failures);
    put(&b, "# HELP adapterd_adapter_evictions_total Versions evicted to stay within the memory budget.\n"
            "# TYPE adapterd_adapter_evictions_total counter\nadapterd_adapter_evictions_total %llu\n",
        (unsigned long long)st.evictions);
    put(&b, "# HELP adapterd_adapter_unloads_total Old versions freed when their last request ended.\n"
            "# TYPE adapterd_adapter_unloads_total counter\nadapterd_adapter_unloads_total %llu\n",
        (unsigned long long)st.unloads);
    put(&b, "# HELP adapterd_adapter_load_seconds Time to load and validate a task version.\n"
            "# TYPE adapterd_adapter_load_seconds summary\nadapterd_adapter_load_seconds_sum %.9g\n"
            "adapterd_adapter_load_seconds_count %llu\n", st.load_seconds_sum, (unsigned long long)st.loads);
    put(&b, "# HELP adapterd_adapter_load_seconds_max Longest load.\n# TYPE adapterd_adapter_load_seconds_max gauge\n"
            "adapterd_adapter_load_seconds_max %.9g\n", st.load_seconds_max);
    put(&b, "# HELP adapterd_registry_changed_versions_total Listed versions whose files changed on disk (not reloaded).\n"
            "# TYPE adapterd_registry_changed_versions_total counter\nadapterd_registry_changed_versions_total %llu\n",
        (unsigned long long)st.changed);
    put(&b, "# HELP adapterd_queue_depth Jobs waiting or running.\n# TYPE adapterd_queue_depth gauge\nadapterd_queue_depth %d\n",
        live->queue_depth);
    put(&b, "# HELP adapterd_admitted_requests Requests holding a place of --max-queue: being prepared, waiting for task "
            "loads, queued or running (429 beyond).\n# TYPE adapterd_admitted_requests gauge\nadapterd_admitted_requests %d\n",
        live->admitted);
    put(&b, "# HELP adapterd_adaptive_raises_total Requests whose default skips adaptive mode raised.\n"
            "# TYPE adapterd_adaptive_raises_total counter\nadapterd_adaptive_raises_total %llu\n",
        (unsigned long long)atomic_load_explicit(&m->adaptive_jobs, memory_order_relaxed));
    put(&b, "# HELP adapterd_adaptive_layers_total Layers added to tasks' skips by adaptive mode, summed over requests.\n"
            "# TYPE adapterd_adaptive_layers_total counter\nadapterd_adaptive_layers_total %llu\n",
        (unsigned long long)atomic_load_explicit(&m->adaptive_layers, memory_order_relaxed));
    put(&b, "# HELP adapterd_adaptive_level Layers adaptive mode currently adds to default skips.\n"
            "# TYPE adapterd_adaptive_level gauge\nadapterd_adaptive_level %d\n",
        live->adaptive_level);
    put(&b, "# HELP adapterd_latency_refused_total Requests refused because latency_ms could not be met.\n"
            "# TYPE adapterd_latency_refused_total counter\nadapterd_latency_refused_total %llu\n",
        (unsigned long long)atomic_load_explicit(&m->latency_refused, memory_order_relaxed));
    /* the event loop's turns: a long one delays every answer, upload and file event behind it */
    put(&b, "# HELP adapterd_loop_busy_seconds Time each turn of the event loop spent in callbacks between two waits for "
            "events (a stall: what arrived meanwhile waited).\n# TYPE adapterd_loop_busy_seconds histogram\n");
    put_hist(&b, "adapterd_loop_busy_seconds", "", &m->loop_busy, loop_b, N_LOOP);
    put(&b, "# HELP adapterd_loop_busy_max_seconds The longest turn of the event loop since the previous scrape (wall time: "
            "with the loop's thread preempted too).\n# TYPE adapterd_loop_busy_max_seconds gauge\n"
            "adapterd_loop_busy_max_seconds %.9g\n",
        (double)atomic_exchange_explicit(&m->loop_busy_max_ns, 0, memory_order_relaxed) / 1e9);
    put(&b, "# HELP adapterd_loop_busy_cpu_max_seconds The most CPU time one turn of the event loop took since the previous "
            "scrape.\n# TYPE adapterd_loop_busy_cpu_max_seconds gauge\nadapterd_loop_busy_cpu_max_seconds %.9g\n",
        (double)atomic_exchange_explicit(&m->loop_cpu_max_ns, 0, memory_order_relaxed) / 1e9);
    put(&b, "# HELP adapterd_watch_loop_max_seconds The most CPU time the registry watch took on the event loop in one callback "
            "since the previous scrape (CPU, not wall: a preempted loop is not the watch's cost).\n"
            "# TYPE adapterd_watch_loop_max_seconds gauge\nadapterd_watch_loop_max_seconds %.9g\n",
        (double)atomic_exchange_explicit(&m->watch_max_ns, 0, memory_order_relaxed) / 1e9);
    put(&b, "# HELP adapterd_registry_rescan_seconds Wall time of registry rescans: full (periodic, every folder) or tasks "
            "(the folders file events named).\n# TYPE adapterd_registry_rescan_seconds histogram\n");
    for (int k = 0; k < 2; k++) {
        char l[32];
        snprintf(l, sizeof l, "kind=\"%s\"", rescan_kinds[k]);
        put_hist(&b, "adapterd_registry_rescan_seconds", l, &m->rescan[k], lat_b, N_LAT);
    }
    put(&b, "# HELP adapterd_registry_rescan_cpu_seconds_total CPU time of registry rescans (their thread's).\n"
            "# TYPE adapterd_registry_rescan_cpu_seconds_total counter\n");
    for (int k = 0; k < 2; k++)
        put(&b, "adapterd_registry_rescan_cpu_seconds_total{kind=\"%s\"} %.9g\n", rescan_kinds[k],
            atomic_load_explicit(&m->rescan_cpu[k], memory_order_relaxed));
    put(&b, "# HELP adapterd_ready 1 when serving, 0 when starting or draining.\n# TYPE adapterd_ready gauge\n"
            "adapterd_ready %d\n", live->ready ? 1 : 0);
    if (live->tracing) {
        put(&b, "# HELP adapterd_trace_spans_exported_total Spans the trace collector accepted.\n"
                "# TYPE adapterd_trace_spans_exported_total counter\nadapterd_trace_spans_exported_total %llu\n",
            (unsigned long long)live->trace_exported);
        put(&b, "# HELP adapterd_trace_spans_dropped_total Spans not exported, by reason: queue_full (the collector slow "
                "or gone, the queue at --trace-max-queue), export_failed (refused, or retries ran out).\n"
                "# TYPE adapterd_trace_spans_dropped_total counter\n"
                "adapterd_trace_spans_dropped_total{reason=\"queue_full\"} %llu\n"
                "adapterd_trace_spans_dropped_total{reason=\"export_failed\"} %llu\n",
            (unsigned long long)live->trace_dropped_queue, (unsigned long long)live->trace_dropped_export);
        put(&b, "# HELP adapterd_trace_export_errors_total Export attempts that failed (an HTTP error or no connection).\n"
                "# TYPE adapterd_trace_export_errors_total counter\nadapterd_trace_export_errors_total %llu\n",
            (unsigned long long)live->trace_export_errors);
        put(&b, "# HELP adapterd_trace_spans_queued Spans waiting for export.\n# TYPE adapterd_trace_spans_queued gauge\n"
                "adapterd_trace_spans_queued %llu\n",
            (unsigned long long)live->trace_queued);
    }
    if (live->tls)
        put(&b, "# HELP adapterd_tls_reloads_total Certificate reloads taken (--tls-cert's files changed).\n"
                "# TYPE adapterd_tls_reloads_total counter\nadapterd_tls_reloads_total %llu\n"
                "# HELP adapterd_tls_reload_errors_total Reloads refused (unreadable, key not matching): the last good pair stays.\n"
                "# TYPE adapterd_tls_reload_errors_total counter\nadapterd_tls_reload_errors_total %llu\n"
                "# HELP adapterd_tls_cert_not_after_seconds The served certificate's notAfter, Unix seconds.\n"
                "# TYPE adapterd_tls_cert_not_after_seconds gauge\nadapterd_tls_cert_not_after_seconds %.0f\n"
                "# HELP adapterd_tls_handshakes_total TLS handshakes begun (the server's certificate chosen), by port.\n"
                "# TYPE adapterd_tls_handshakes_total counter\nadapterd_tls_handshakes_total{port=\"http\"} %llu\n"
                "adapterd_tls_handshakes_total{port=\"grpc\"} %llu\n",
            (unsigned long long)live->tls_reloads, (unsigned long long)live->tls_reload_errors, live->tls_not_after,
            (unsigned long long)live->tls_handshakes[0], (unsigned long long)live->tls_handshakes[1]);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.len;
    return b.s;
}

void srv__metrics_task_totals(srv_metrics *m, const char *name, uint64_t *count, double *seconds) {
    *count = 0, *seconds = 0;
    pthread_mutex_lock(&m->tmu);
    if (m->cap) {
        size_t k = hash_name(name) & (size_t)(m->cap - 1);
        while (m->tasks[k] && strcmp(m->tasks[k]->name, name)) k = (k + 1) & (size_t)(m->cap - 1);
        if (m->tasks[k]) {
            *count = atomic_load_explicit(&m->tasks[k]->requests, memory_order_relaxed);
            *seconds = atomic_load_explicit(&m->tasks[k]->latency.sum, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&m->tmu);
}

char *srv__metrics_openmetrics(char *text, size_t *len) {
    buf b = {.cap = *len + 64};
    if (!(b.s = malloc(b.cap))) {
        free(text);
        return NULL;
    }
    const char *p = text, *end = text + *len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        int name_at = !strncmp(p, "# HELP ", 7) || !strncmp(p, "# TYPE ", 7) ? 7 : 0;
        const char *sp = name_at ? memchr(p + name_at, ' ', n - name_at) : NULL;
        /* a counter family: its HELP and TYPE lines name it without "_total" (its samples keep it) */
        bool counter = false;
        if (sp && sp - p > name_at + 6 && !memcmp(sp - 6, "_total", 6)) {
            size_t nm = (size_t)(sp - (p + name_at));
            const char *t = p[2] == 'T' ? p : nl ? nl + 1 : end; /* the TYPE line: this one or the next */
            counter = t + 7 + nm + 8 <= end && !strncmp(t, "# TYPE ", 7) && !memcmp(t + 7, p + name_at, nm) &&
                      !memcmp(t + 7 + nm, " counter", 8);
        }
        if (counter) put(&b, "%.*s%.*s\n", (int)(sp - 6 - p), p, (int)(p + n - sp), sp);
        else put(&b, "%.*s\n", (int)n, p);
        p += n + 1;
    }
    put(&b, "# EOF\n");
    free(text);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.len;
    return b.s;
}
