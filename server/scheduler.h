/* scheduler.h - the dynamic batcher on the libuv loop and the engine workers (see scheduler.c for why it
 * is built this way). It knows jobs, the engine and the metrics; what happens to a job's outputs
 * and to a finished job is the caller's, through srv_sched_hooks, so the scheduler never calls
 * back into the HTTP side. */
#ifndef ADAPTERD_SERVER_SCHEDULER_H
#define ADAPTERD_SERVER_SCHEDULER_H

#include <stdbool.h>
#include <uv.h>

#include "engine/status.h"
#include "job.h"
#include "metrics.h"

typedef struct {
    /* Worker thread: job j ran; build its response from outs ((n_inputs, n_tasks), input-major) and
     * stats (NULL unless some job of the batch asked to explain). A job split across passes (scheduler.c)
     * is answered once, by the worker of its last part, with all its outputs (it never explains). */
    void (*respond)(void *ctx, srv_job *j, const eng_task_out *outs, const eng_plan_stats *stats);
    /* Worker thread: embed job j ran; hidden (j->tokens, H) is its rows of the last hidden state,
     * pooled (j->n_inputs, H) its pooler outputs (NULL unless a job of the batch pools with it). */
    void (*respond_embed)(void *ctx, srv_job *j, const float *hidden, const float *pooled);
    /* Worker thread: job j failed with code; build its error response. */
    void (*fail)(void *ctx, srv_job *j, eng_status code, const char *msg);
    /* Loop thread: j is done (answered or failed) and no longer the scheduler's. */
    void (*done)(void *ctx, srv_job *j);
    /* Loop thread, at srv__sched_cancel: j is in a pass that cannot be interrupted; its request is
     * answered now and lets go of it. done still follows when the pass ends. */
    void (*abandon)(void *ctx, srv_job *j);
    void *ctx;
} srv_sched_hooks;

typedef struct {
    int workers;             /* engine workers, each with its own eng_state */
    int threads;             /* engine threads per worker */
    int max_queue;           /* jobs waiting or running beyond which submit refuses */
    int max_batch_tokens;
    int max_wait_us;
    bool adaptive_skips;
    int target_queue_ms;
    srv_metrics *metrics;    /* batches and adaptive raises are counted here */
    struct srv_tracer *tracer; /* each pass with a sampled request becomes a batch span (trace.c); NULL: off */
} srv_sched_params;

typedef struct srv_sched srv_sched;

/* Loop thread: creates the scheduler's handles on loop and starts the workers. Returns 0, or a
 * negative status with err set. Either way a non-NULL *out is released in two steps: srv__sched_stop
 * once the loop has stopped running (joins the workers), then srv__sched_free once the loop has
 * closed its handles (they live inside the scheduler). */
int srv__sched_start(uv_loop_t *loop, const srv_sched_params *p, srv_sched_hooks hooks, srv_sched **out, eng_err *err);
void srv__sched_stop(srv_sched *q);
void srv__sched_free(srv_sched *q);
/* Admission, before any work is spent on a request (its body is not parsed yet): any thread takes
 * one of the max_queue places. Returns 0, or ENG_BUSY when every place is held by a request being
 * prepared, waiting for a task load, queued or running. A place taken is given back with
 * srv__sched_release, or passed on to a job with srv__sched_submit. prio: the request's class
 * (tenant.h): a SRV_PRIO_BATCH request is refused already once srv__sched_batch_places(max_queue)
 * places are held (by requests of either class), so the rest stays free for interactive ones. */
int srv__sched_admit(srv_sched *q, srv_priority prio);
/* Pure: the places below which a batch request is admitted, floor(3 * max_queue / 4), at least 1. */
int srv__sched_batch_places(int max_queue);
void srv__sched_release(srv_sched *q);
/* Any thread: hands a job to the loop; the job takes over the caller's admission (the place is
 * given back when the done hook has seen the job). Never refuses. */
void srv__sched_submit(srv_sched *q, srv_job *j);
/* Loop thread, the drain deadline: every job not yet in a pass fails with (code, msg) and goes to
 * the done hook now, every job in a pass goes to the abandon hook, and jobs that arrive later fail
 * at once. No new pass starts. */
int srv__sched_cancel(srv_sched *q, eng_status code, const char *msg); /* returns the jobs abandoned in a pass */
int srv__sched_depth(srv_sched *q);          /* any thread: jobs submitted and not done */
int srv__sched_admitted(srv_sched *q);       /* any thread: places of max_queue held (requests admitted and not done) */
int srv__sched_adaptive_level(srv_sched *q); /* any thread: layers adaptive mode currently adds (interactive jobs) */
/* Any thread: layers adaptive mode currently adds to jobs of class prio (a batch job's level is never
 * below an interactive job's). */
int srv__sched_adaptive_level_class(srv_sched *q, srv_priority prio);

#endif
