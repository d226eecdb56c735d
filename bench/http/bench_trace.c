/* bench_trace.c - what tracing costs a request on its own threads (server/trace.c), CPU time of the calling
 * thread, so the number holds on a shared machine where wrk's throughput does not: the context parsed from a
 * caller's traceparent, the ids, the sampling decision, seven steps stamped, one batch span per 8 requests
 * (made on the worker), and the request's spans encoded and queued at its answer. Modes: tracing off (no
 * tracer), a tracer that samples nothing (always_off: context parsed and answered), and one that samples every
 * request (always_on). The exporter is idle meanwhile (a 1 h delay), so its thread's work is not counted here:
 * it is one POST per --trace-max-export-batch spans, off the request path.
 *
 *   bench_trace [N]      N requests per mode (default 50000); prints ns per request and bytes queued */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "job.h"
#include "trace.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double run(srv_tracer *t, int n) {
    static const char *const tasks[] = {"cls_lora", "peft", "ml", "reg"};
    srv_trace_req *r = calloc(1, sizeof *r);
    srv_job *jobs = calloc(8, sizeof *jobs);
    if (!r || !jobs) exit(1);
    double t0 = cpu_now();
    for (int i = 0; i < n; i++) {
        srv_trace_req *q = r;
        srv__trace_begin(t, q, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=abc");
        double now = srv__now();
        for (int m = 0; m < SRV_TRACE_N_MARKS; m++)
            if (m != SRV_TRACE_LOAD0 && m != SRV_TRACE_LOADED) srv__trace_mark(q, (srv_trace_mark_id)m);
        srv_job *j = &jobs[i % 8];
        memset(j, 0, sizeof *j);
        j->n_inputs = j->n_texts = 1, j->tokens = 11, j->t_submit = now, j->t_start = now, j->t_end = now;
        j->batch_requests = 8, j->batch_inputs = 8, j->batch_tokens = 88;
        j->trace.sampled = q->sampled;
        memcpy(j->trace.trace_id, q->trace_id, 16), memcpy(j->trace.span_id, q->span_id, 8);
        if (i % 8 == 7) { /* the worker's batch span over the last 8 */
            for (int k = 0; k < 7; k++) jobs[k].next = &jobs[k + 1];
            jobs[7].next = NULL;
            srv__trace_batch(t, jobs, 8, 8, 88, now, now, "bench", "fp32", "avx512", true);
        }
        j->trace.t_enc0 = j->trace.t_enc1 = now;
        srv_trace_end e = {.method = "POST", .path = "/v1/predict", .route = "/v1/predict", .http_status = 200,
                           .request_id = "bench-1", .protocol = "adapterd", .tasks = tasks, .n_tasks = 4, .t0 = now};
        srv__trace_end(t, q, &e, j);
    }
    double dt = cpu_now() - t0;
    free(r), free(jobs);
    return dt / n * 1e9;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50000;
    /* always_on twice: every span queued (memory grows, its page faults counted), and with a queue of 64
     * spans (every request's buffer encoded, then dropped and freed: the steady state's allocator reuse) */
    static const char *const modes[] = {"off", "always_off", "always_on", "always_on"};
    printf("| tracing | CPU ns / request | spans queued | dropped |\n|---|---|---|---|\n");
    for (int m = 0; m < 4; m++) {
        srv_tracer *t = NULL;
        if (m) {
            srv_config c = srv_default_config();
            snprintf(c.trace_endpoint, sizeof c.trace_endpoint, "http://127.0.0.1:9/v1/traces");
            snprintf(c.trace_sampler, sizeof c.trace_sampler, "%s", modes[m]);
            c.trace_schedule_delay_ms = 3600000;
            c.trace_max_queue = m == 3 ? 64 : n * 8 + 8;
            c.trace_max_export_batch = c.trace_max_queue;
            eng_err err = {0};
            if (srv__tracer_start(&c, &t, &err)) {
                fprintf(stderr, "bench_trace: %s\n", err.msg);
                return 1;
            }
        }
        run(t, n / 10); /* warm: the first blobs' allocations */
        double ns = run(t, n);
        srv_trace_counts tc;
        srv__trace_counts(t, &tc);
        printf("| %s%s | %.0f | %llu | %llu |\n", modes[m], m == 3 ? ", queue full" : "", ns, (unsigned long long)tc.queued, (unsigned long long)tc.dropped_queue);
        srv__tracer_free(t);
    }
    return 0;
}
