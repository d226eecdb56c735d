/* metrics.h - Prometheus counters and histograms. Callers hand values in (a status, a duration, a
 * task's skip); the metrics never call back into the scheduler or the server: what only they know
 * at render time (queue depth, readiness) comes in a srv_metrics_live struct. */
#ifndef ADAPTERD_SERVER_METRICS_H
#define ADAPTERD_SERVER_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adapters_store/store.h"
#include "route.h"

typedef struct srv_metrics srv_metrics;

/* reg is read at render (residency, loads, evictions) and must outlive the metrics; with NULL those
 * figures read 0. Returns NULL when out of memory. */
srv_metrics *srv__metrics_new(store_registry *reg);
void srv__metrics_free(srv_metrics *m);
/* Tasks whose series the render shows under their own name: the k busiest (by requests); the rest are
 * summed into task="(other)". SRV_METRICS_TASKS_DEFAULT until set (--metrics-tasks); 0: (other) only. */
#define SRV_METRICS_TASKS_DEFAULT 100
void srv__metrics_set_task_series(srv_metrics *m, int k);

/* Any thread: one answered request. */
void srv__metrics_request(srv_metrics *m, srv_route r, unsigned status, double seconds);
/* The same, of a sampled request of trace trace_id (16 bytes; NULL: none): its bucket's exemplar
 * (OpenMetrics) becomes this request, so a dashboard's slow bucket opens a trace. */
void srv__metrics_request_traced(srv_metrics *m, srv_route r, unsigned status, double seconds, const uint8_t *trace_id);
/* Any thread: one job finished after waiting `seconds` for its batch (negative: it never ran). */
void srv__metrics_queue_wait(srv_metrics *m, double seconds);
/* Any thread: one job ran task `name` at `skip` on n_inputs inputs; its request took `seconds` from
 * first byte to answer (negative: not known). */
void srv__metrics_task(srv_metrics *m, const char *name, int skip, int n_inputs, double seconds);
/* Any thread: the requests that ran task name so far and the sum of their seconds (first byte to
 * answer), for KServe's statistics extension; 0 and 0 for a task that never ran. */
void srv__metrics_task_totals(srv_metrics *m, const char *name, uint64_t *count, double *seconds);
/* Any thread: the front door decoded one request of protocol (a codec's name, a static string):
 * adapterd_decoded_requests_total{protocol}. */
void srv__metrics_protocol(srv_metrics *m, const char *protocol);
/* Loop thread: one gRPC call of method (a proto_grpc_method) answered with gRPC status code after
 * `seconds` (adapterd_grpc_requests_total{method, code}, adapterd_grpc_request_duration_seconds). */
void srv__metrics_grpc(srv_metrics *m, int method, int code, double seconds, const uint8_t *trace_id);
/* Any thread: a request waited `seconds` for its tasks to load (memory budget). */
void srv__metrics_lazy_load(srv_metrics *m, double seconds);
/* Whether status has its own label value (else it is counted as "other"). */
bool srv__metrics_code_known(unsigned status);
void srv__metrics_batch(srv_metrics *m, int requests, int inputs, int tokens, double seconds);
/* Any thread: one engine batch of `tokens` input tokens took `seconds` on a backbone whose Linear
 * layers run in `precision` ("fp32", "bf16", "int8"). Returns false (nothing counted) for another name. */
bool srv__metrics_precision(srv_metrics *m, const char *precision, int tokens, double seconds);
/* Adaptive mode raised one job's skips by `layers` in all. */
void srv__metrics_adaptive(srv_metrics *m, int layers);
/* A "latency_ms" the cost model said cannot be met (answered 422). */
void srv__metrics_latency_refused(srv_metrics *m);
/* Loop thread: one turn of the event loop ran callbacks for `seconds` of wall time (cpu_seconds of its
 * thread's CPU: less when the thread was preempted) between two waits for events: how long an event
 * that arrived meanwhile waited, at most. */
void srv__metrics_loop_busy(srv_metrics *m, double seconds, double cpu_seconds);
/* Loop thread: one callback of the registry watch (watch.c) took `cpu_seconds` of the loop's CPU time. */
void srv__metrics_watch_busy(srv_metrics *m, double cpu_seconds);
/* Kinds of registry rescan (watch.c): every folder (periodic), or the task folders file events named. */
typedef enum { SRV_RESCAN_FULL, SRV_RESCAN_TASKS } srv_rescan_kind;
/* Any thread: one rescan of `kind` took `seconds` of wall time and `cpu_seconds` of its thread's CPU. */
void srv__metrics_rescan(srv_metrics *m, srv_rescan_kind kind, double seconds, double cpu_seconds);

/* Gauges the caller owns, read once per render. */
typedef struct {
    int queue_depth;         /* jobs waiting or running */
    int admitted;            /* requests holding a place of --max-queue (being prepared, loading, queued, running) */
    int adaptive_level;      /* layers adaptive mode currently adds */
    bool ready;              /* serving: not starting, not draining */
    bool openmetrics;        /* the scrape asked for OpenMetrics: latency buckets carry exemplars */
    bool tracing;            /* a tracer runs: the trace counters below are rendered */
    uint64_t trace_exported, trace_dropped_queue, trace_dropped_export, trace_export_errors, trace_queued;
    bool tls;                /* --tls-cert given: the three below are rendered */
    uint64_t tls_reloads, tls_reload_errors; /* tls.c: reloads taken, reloads refused */
    double tls_not_after;    /* the loaded certificate's notAfter, Unix seconds */
    uint64_t tls_handshakes[2]; /* full handshakes begun on the HTTP port [0] and the gRPC port [1] */
} srv_metrics_live;

/* Renders the Prometheus text; malloc'd (the caller frees), NULL when out of memory. */
char *srv__metrics_render(srv_metrics *m, const srv_metrics_live *live, size_t *len);
/* Turns rendered Prometheus text (malloc'd, len bytes, taken) into OpenMetrics text: counter families
 * named without their _total suffix in HELP and TYPE, and the closing "# EOF". Returns the new text
 * (malloc'd, *len updated), or NULL when out of memory (text freed). */
char *srv__metrics_openmetrics(char *text, size_t *len);

#endif
