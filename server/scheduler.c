/* scheduler.c - dynamic batching: the libuv loop packs queued jobs into batches, engine workers run
 * each batch as one eng_run and hand its outputs to the caller's hooks (respond.c encodes them).
 *
 * Why this shape. The engine is fastest on one large packed pass (one GEMM per projection over all
 * rows of all inputs and tasks), so jobs wait briefly to share a pass. When a batch closes is a
 * pure function (batch_rule.h, where the rule and its reasons are written down): tokens reach
 * max_batch_tokens, or no job arrived for a quiet window, or the hold ran out; a finished batch
 * counts as an arrival. Without that last point, closed-loop clients (each sends its next request
 * when its answer comes) would have the next batch close at once on only the jobs that queued
 * during the last one, and the queue would settle into two alternating half batches, each waiting
 * for the other (seen under CPU contention: p50 1.4x, throughput 0.7x).
 * Only the loop touches the queue; the HTTP threads reach it through an inbox (inbox.h) and workers
 * answer through another, so no lock is held while anything computes. A batch holds jobs of one
 * model (tasks of different models cannot share a pass), and either task jobs (eng_run) or embed
 * jobs (POST /v1/embed: the encoder alone, eng_encode), never both: an embed has no task, and
 * eng_encode gives every row's last hidden state, which eng_run does not.
 *
 * Tenants (tenant.h): every job carries its tenant's slot, share and priority. The queue is one FIFO
 * per (class, slot), and a batch is filled by weighted fair queuing across the slots of a class
 * (start-time fair queuing with the tags computed when a slot is looked at): a slot's next job has
 * the tag max(V, F[slot]); taking it sets V to that tag and F[slot] to tag + cost / share, cost =
 * tokens x (tasks, or 1 for an embed), share 0 read as 1. Each step of a batch takes the smallest
 * tag (ties: the earlier submitted), so backlogged slots get work in proportion to their shares, a
 * slot that was idle starts at V (no credit for idleness, no debt beyond its last job), and a slot
 * with one job waiting behind another's flood has the smallest tag and goes into the next batch.
 * A job of another model or kind, or one that does not fit, is passed over and its slot's next job
 * is looked at, as the single FIFO did; F and V reset to 0 when a class empties (the idle rule of
 * start-time fair queuing: every slot starts equal again), so they do not grow for the server's life. Interactive before batch: the batch class
 * gives a batch its first job only when no interactive job waits, and otherwise fills the room the
 * interactive jobs leave. A step is O(active slots), with no allocation: the queues are fixed
 * arrays over SRV_TENANTS_MAX slots. With every job in slot 0, interactive (no keys file), this is
 * the single FIFO of before, job for job.
 *
 * The light-tenant cap. Ordering alone cannot keep a flood from a light tenant's latency: a pass
 * cannot be stopped, so a light tenant's request waits for the pass in flight, then runs in one the
 * flood fills up to max_batch_tokens (measured, bench/tenants/fairness.sh: a quiet tenant's p99 12x
 * its idle p99 under a flood with fair queuing alone). So while two or more tenants are recent (a job
 * in the last 5 s) and one of them is light (its jobs arrive to an empty queue of its own),
 * each tenant's part of a pass is at most the recent tenants' typical jobs summed, split by their
 * shares: the flood's passes shrink to about one of its typical jobs, and the light tenant's pass
 * holds its job beside a share-sized part of the flood. The flood pays with smaller passes (less
 * batching) only while a light tenant is active; two tenants that both keep a backlog get full passes
 * split by fair queuing. A pass always takes its first job, so a single job larger than its cap still
 * is cut (a flood of big multi-input requests would otherwise cost a light tenant one whole of them):
 * see "Split jobs" below.
 * With two or more workers (--workers), while the cap applies the last idle worker takes no pass
 * without a light tenant's job: a light tenant's request then starts at once on it instead of waiting
 * for the pass in flight, whatever the flood's requests' size. (With one worker nothing is kept.)
 *
 * Split jobs. Only while the cap applies, a task job of several sequences whose rest does not fit its
 * slot's room in the pass (or the tokens left) runs a prefix of its sequences that fits, at least one
 * when it is the pass's first job; its rest goes back to the head of its slot's queue when that pass
 * ends and runs in a later pass, so with one worker a light tenant waits for a part, not for a whole
 * 8-input job (split_fit, take_part, requeue_rest). Its outputs gather in job->part_outs and it is
 * answered once, when its last part has run; its skips (adaptive), shadow choice, t_start and batch_*
 * are fixed by its first part. A job has at most one part in flight (its rest is queued only when the
 * part is done), so two workers never run one job. A rest that comes back after the drain deadline
 * fails as a queued job does (its request was already answered by the abandon hook). Not split: embed
 * jobs, jobs that explain (the stats are one pass's), single-sequence jobs, and anything while no cap
 * applies, so an uncontended server runs whole jobs in the same passes as before.
 *
 * Admission: `admitted` counts requests from admission to completion (`depth`, the jobs among them
 * from submission to completion). The HTTP side asks for a place
 * (srv__sched_admit) before it parses a body, holds it while the request is prepared and while its
 * tasks load on the pool, and hands it to the job at srv__sched_submit; beyond max_queue the answer
 * is 429 at the cost of one atomic add, so a flood costs no parse, no tokenization and no load, and
 * memory held by waiting requests is bounded. Batch first: a batch-class request is refused once
 * floor(3/4 x max_queue) places (at least 1) are held by requests of either class; an interactive one
 * only at max_queue. The last quarter is the interactive class's reserve, and one shared counter is
 * enough for it (srv__sched_release need not know the class of the place it gives back).
 *
 * Load-adaptive skips (--adaptive-skips, --target-queue-ms): when a batch closes, the wait of its
 * oldest job steers a level per class: over the target, one layer up, under half of it one down (the
 * gap keeps the levels from flapping). A step up raises the batch level while batch work waits or
 * runs in this batch and that level is below the model's layers, else the interactive one (the batch
 * level never below it); a step down lowers the interactive level first. Each task of the batch that
 * runs at its default skip (the request chose no skip, budget or latency) runs at default + its
 * class's level, capped at its allowed maximum, and the response names the skip with "skip_source":
 * "adaptive". With no batch job the interactive level moves as the single level did. Only the loop
 * writes the levels. */
#define _GNU_SOURCE
#include "scheduler.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_rule.h"
#include "clock.h"
#include "inbox.h"

typedef struct srv_batch {
    srv_inbox_node done;     /* the workers' inbox of finished batches */
    srv_job *jobs;           /* linked through job->next */
    int n_jobs;
    struct srv_worker *worker; /* the worker that runs it */
    double seconds;          /* engine time of the pass, set by the worker */
} srv_batch;

typedef struct srv_worker {
    srv_sched *q;
    pthread_t th;
    eng_state *st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_batch *batch;        /* handed over by the loop; NULL when idle */
    bool busy;               /* loop's view: a batch is assigned and not yet reported done */
    srv_batch *running;      /* loop's view: that batch (its jobs stay linked until done) */
    long passes;             /* the worker's: batches it ran */
    bool stop;
} srv_worker;

/* Priority classes, served in this order (tenant.h's srv_priority indexes them). */
#define SRV_CLASSES 2

/* One tenant slot's waiting jobs of one class, oldest first. */
typedef struct {
    srv_job *head, *tail;
} srv_fifo;

/* One class's fair queue (see the top of the file). Fixed arrays over the slots: no allocation
 * when a job arrives, and a pick walks the active slots only. */
typedef struct {
    srv_fifo fifo[SRV_TENANTS_MAX];
    double vfinish[SRV_TENANTS_MAX]; /* the slot's virtual finish: its next job's tag is max(vtime, this) */
    int active[SRV_TENANTS_MAX];     /* slots with a waiting job, unordered */
    int n_active;
    int n_jobs;                      /* jobs waiting in the class */
    double vtime;                    /* the class's virtual time: the tag of the last job taken */
} srv_class_q;

struct srv_sched {
    srv_sched_params p;
    srv_sched_hooks hooks;
    uv_loop_t *loop;
    srv_inbox inbox;              /* submitted jobs, from the HTTP threads */
    srv_inbox done;               /* finished batches, from the workers */
    uv_timer_t timer;
    atomic_int admitted;          /* places of max_queue held: requests admitted and not done */
    atomic_int depth;             /* jobs submitted and not done */
    int batch_places;             /* a batch-class request is admitted only while fewer places are held */
    /* loop-owned fair queues, one per class */
    srv_class_q cls[SRV_CLASSES];
    int n_waiting;                /* jobs in all of them */
    /* per slot, for the light-tenant cap (see the top of the file): when it last submitted, its
     * jobs' typical work (moving average of tokens x tasks), its share, its work waiting now */
    double slot_seen[SRV_TENANTS_MAX], slot_work[SRV_TENANTS_MAX], slot_share[SRV_TENANTS_MAX], slot_waiting[SRV_TENANTS_MAX];
    bool slot_light[SRV_TENANTS_MAX]; /* its last job found no other job of its own waiting */
    int pending_tokens;
    double last_arrival;          /* seconds, monotonic: when the inbox last brought a job */
    double last_done;             /* when a batch last finished (its answers went out) */
    double last_pass_s;           /* that batch's engine time */
    int n_workers;
    srv_worker *workers;
    bool cancelled;               /* the drain deadline passed: fail what arrives, start nothing */
    eng_status cancel_code;
    char cancel_msg[256];
    bool inbox_live, done_live;   /* initialised, so destroyed with the scheduler */
    atomic_int adapt_level;       /* layers adaptive mode adds to interactive jobs; written by the loop only */
    atomic_int adapt_level_batch; /* ... to batch jobs; never below adapt_level */
    double task_rows, shadow_rows;/* decaying sums of the rows run for requests' tasks and for shadows (shed_shadows) */
};

int srv__sched_depth(srv_sched *q) { return atomic_load(&q->depth); }
int srv__sched_admitted(srv_sched *q) { return atomic_load(&q->admitted); }
int srv__sched_adaptive_level(srv_sched *q) { return atomic_load(&q->adapt_level); }
int srv__sched_adaptive_level_class(srv_sched *q, srv_priority prio) {
    return atomic_load(prio == SRV_PRIO_BATCH ? &q->adapt_level_batch : &q->adapt_level);
}

int srv__sched_batch_places(int max_queue) {
    int n = max_queue / 4 * 3 + max_queue % 4 * 3 / 4; /* floor(3 * max_queue / 4) without overflow */
    return n > 0 ? n : 1;
}

int srv__sched_admit(srv_sched *q, srv_priority prio) {
    /* the last quarter of the places is the interactive class's reserve (see the top of the file) */
    int limit = prio == SRV_PRIO_BATCH ? q->batch_places : q->p.max_queue;
    if (atomic_fetch_add(&q->admitted, 1) >= limit) {
        atomic_fetch_sub(&q->admitted, 1);
        return ENG_BUSY;
    }
    return 0;
}

void srv__sched_release(srv_sched *q) {
    int was = atomic_fetch_sub(&q->admitted, 1);
    assert(was > 0);
    (void)was;
}

void srv__sched_submit(srv_sched *q, srv_job *j) {
    j->next = NULL;
    j->t_submit = srv__now();
    atomic_fetch_add(&q->depth, 1);
    srv__inbox_push(&q->inbox, &j->inbox);
}

/* ---- workers ---- */

/* The sequences of j its pass runs: part_begin .. part_end - 1 (all of them unless it was split). */
static int part_begin(const srv_job *j) { return j->part_n ? j->part_first : 0; }
static int part_end(const srv_job *j) { return j->part_n ? j->part_first + j->part_n : j->n_inputs; }

/* A split job's part ran (outs: its n outputs): they move into j->part_outs, and the last part answers
 * the job with all of them. Worker thread; the parts of a job run one after another (see the top of
 * the file), so part_outs has one writer at a time, handed on through the loop's inboxes. */
static void keep_part(srv_sched *q, srv_job *j, eng_task_out *outs, int n) {
    int n_out = 0, at = 0;
    for (int i = 0; i < j->n_inputs; i++) {
        if (i == part_begin(j)) at = n_out;
        n_out += srv__job_seq_tasks(j, i);
    }
    if (!j->part_outs && !(j->part_outs = calloc((size_t)n_out, sizeof *j->part_outs))) {
        j->seq_done = j->n_inputs;
        q->hooks.fail(q->hooks.ctx, j, ENG_NO_MEMORY, "out of memory");
        return;
    }
    for (int i = 0; i < n; i++) {
        j->part_outs[at + i] = outs[i];
        outs[i].logits = NULL; /* the job's now */
    }
    j->seq_done = part_end(j);
    if (j->seq_done < j->n_inputs) return;
    q->hooks.respond(q->hooks.ctx, j, j->part_outs, NULL);
    eng_task_outs_free(j->part_outs, n_out);
    free(j->part_outs);
    j->part_outs = NULL;
}

/* Runs jobs as one eng_run; on an engine error with several jobs, runs each alone so one bad
 * request cannot fail the others. The pass's time goes to the model's cost model when observe is
 * set (not on a worker's first pass, which grows its scratch buffers). Worker thread. */
static void run_jobs(srv_sched *q, eng_state *st, srv_job *jobs, int n_jobs, bool observe) {
    int n_in = 0, n_out = 0, toks = 0, want_stats = 0;
    for (srv_job *j = jobs; j; j = j->next) {
        int a = part_begin(j), e = part_end(j);
        n_in += e - a;
        for (int i = a; i < e; i++) n_out += srv__job_seq_tasks(j, i), toks += (int)j->enc[i].n; /* its tasks, and its shadows */
        want_stats |= j->preq && j->preq->ret_explain;
    }
    eng_input *in = calloc((size_t)n_in, sizeof *in);
    eng_task_out *outs = calloc((size_t)n_out, sizeof *outs);
    eng_plan_stats stats = {0};
    eng_err err = {0};
    double t_start = srv__now();
    if (!in || !outs) {
        for (srv_job *j = jobs; j; j = j->next) j->seq_done = j->n_inputs, q->hooks.fail(q->hooks.ctx, j, ENG_NO_MEMORY, "out of memory");
        free(in), free(outs);
        return;
    }
    int k = 0;
    for (srv_job *j = jobs; j; j = j->next) {
        if (part_begin(j) == 0) { /* a split job's wait and batch are its first part's */
            j->t_start = t_start;
            j->batch_requests = n_jobs, j->batch_inputs = n_in, j->batch_tokens = toks, j->batch_outputs = n_out;
        }
        for (int i = part_begin(j); i < part_end(j); i++)
            in[k++] = (eng_input){.ids = j->enc[i].ids, .type_ids = j->enc[i].type_ids, .len = (int)j->enc[i].n,
                                  .tasks = j->treqs, .n_tasks = srv__job_seq_tasks(j, i)};
    }
    int rc = eng_run(store_model_engine(jobs->model), st, in, n_in, outs, want_stats ? &stats : NULL, &err);
    if (q->p.tracer && (rc == 0 || n_jobs == 1)) { /* a failed pass of several runs again job by job: those are the spans */
        eng_model_precision_info pi = eng_model_precision(store_model_engine(jobs->model));
        srv__trace_batch(q->p.tracer, jobs, n_jobs, n_in, toks, t_start, srv__now(), store_model_name(jobs->model), pi.name,
                         pi.kernel, rc == 0);
    }
    /* the pass's wall time corrects its model's cost model (one model per batch, so one cost model) */
    if (rc == 0 && observe && jobs->cost)
        eng_cost_observe(jobs->cost, store_model_engine(jobs->model), in, n_in, (srv__now() - t_start) * 1e3);
    if (rc == 0) {
        double dt = srv__now() - t_start;
        srv__metrics_batch(q->p.metrics, n_jobs, n_in, toks, dt);
        srv__metrics_precision(q->p.metrics, eng_model_precision(store_model_engine(jobs->model)).name, toks, dt);
        size_t off = 0;
        for (srv_job *j = jobs; j; j = j->next) {
            int n_part = 0;
            for (int i = part_begin(j); i < part_end(j); i++) n_part += srv__job_seq_tasks(j, i);
            if (part_begin(j) == 0 && part_end(j) == j->n_inputs) {
                j->seq_done = j->n_inputs;
                q->hooks.respond(q->hooks.ctx, j, outs + off, want_stats ? &stats : NULL);
            } else {
                keep_part(q, j, outs + off, n_part);
            }
            off += (size_t)n_part;
        }
        eng_task_outs_free(outs, n_out);
        if (want_stats) eng_plan_stats_free(&stats);
    } else if (n_jobs > 1) {
        for (srv_job *j = jobs, *nx; j; j = nx) {
            nx = j->next;
            j->next = NULL;
            run_jobs(q, st, j, 1, observe);
            j->next = nx;
        }
    } else {
        jobs->seq_done = jobs->n_inputs; /* failed: no rest runs */
        q->hooks.fail(q->hooks.ctx, jobs, (eng_status)rc, err.msg);
    }
    free(in), free(outs);
}

/* Embed jobs: one eng_encode over every input of every job, packed; same fallback as run_jobs. */
static void run_embeds(srv_sched *q, eng_state *st, srv_job *jobs, int n_jobs) {
    const eng_model *m = store_model_engine(jobs->model);
    int H = eng_model_config(m)->hidden, n_in = 0, toks = 0, want_pooled = 0;
    for (srv_job *j = jobs; j; j = j->next) {
        n_in += j->n_inputs;
        toks += j->tokens;
        want_pooled |= j->pooling == PROTO_POOL_POOLER;
    }
    int32_t *ids = malloc((size_t)toks * sizeof *ids), *types = malloc((size_t)toks * sizeof *types);
    int32_t *lens = malloc((size_t)n_in * sizeof *lens);
    float *hidden = malloc((size_t)toks * H * sizeof *hidden);
    float *pooled = want_pooled ? malloc((size_t)n_in * H * sizeof *pooled) : NULL;
    double t_start = srv__now();
    eng_err err = {0};
    int rc = ENG_NO_MEMORY;
    if (ids && types && lens && hidden && (!want_pooled || pooled)) {
        int t = 0, s = 0;
        for (srv_job *j = jobs; j; j = j->next) {
            j->t_start = t_start;
            j->batch_requests = n_jobs, j->batch_inputs = n_in, j->batch_tokens = toks, j->batch_outputs = n_in;
            for (int i = 0; i < j->n_inputs; i++) {
                const eng_tok_encoding *e = &j->enc[i];
                memcpy(ids + t, e->ids, e->n * sizeof *ids);
                memcpy(types + t, e->type_ids, e->n * sizeof *types);
                t += (int)e->n;
                lens[s++] = (int32_t)e->n;
            }
        }
        eng_batch b = {.n_seq = n_in, .ids = ids, .type_ids = types, .seq_len = lens};
        rc = eng_encode(m, st, &b, hidden, pooled, &err);
    }
    if (q->p.tracer && (rc == 0 || n_jobs == 1)) {
        eng_model_precision_info pi = eng_model_precision(m);
        srv__trace_batch(q->p.tracer, jobs, n_jobs, n_in, toks, t_start, srv__now(), store_model_name(jobs->model), pi.name,
                         pi.kernel, rc == 0);
    }
    if (rc == 0) {
        double dt = srv__now() - t_start;
        srv__metrics_batch(q->p.metrics, n_jobs, n_in, toks, dt);
        srv__metrics_precision(q->p.metrics, eng_model_precision(m).name, toks, dt);
        size_t row = 0, seq = 0;
        for (srv_job *j = jobs; j; j = j->next) {
            q->hooks.respond_embed(q->hooks.ctx, j, hidden + row * H, pooled ? pooled + seq * H : NULL);
            row += (size_t)j->tokens;
            seq += (size_t)j->n_inputs;
        }
    } else if (n_jobs > 1 && rc != ENG_NO_MEMORY) {
        for (srv_job *j = jobs, *nx; j; j = nx) {
            nx = j->next;
            j->next = NULL;
            run_embeds(q, st, j, 1);
            j->next = nx;
        }
    } else {
        for (srv_job *j = jobs; j; j = j->next)
            q->hooks.fail(q->hooks.ctx, j, (eng_status)rc, rc == ENG_NO_MEMORY && !err.msg[0] ? "out of memory" : err.msg);
    }
    free(ids), free(types), free(lens), free(hidden), free(pooled);
}

static void *worker_main(void *arg) {
    srv_worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->batch && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        srv_batch *b = w->batch;
        w->batch = NULL;
        pthread_mutex_unlock(&w->mu);
        if (!b) break;
        double t0 = srv__now();
        if (b->jobs->embed) run_embeds(w->q, w->st, b->jobs, b->n_jobs);
        else run_jobs(w->q, w->st, b->jobs, b->n_jobs, w->passes++ > 0);
        b->seconds = srv__now() - t0;
        /* the batch itself is the done record: no allocation on this path */
        srv__inbox_push(&w->q->done, &b->done);
    }
    return NULL;
}

/* ---- loop side ---- */

static void schedule(srv_sched *q);

static srv_worker *idle_worker(srv_sched *q, int *n_idle) {
    srv_worker *w = NULL;
    *n_idle = 0;
    for (int i = 0; i < q->n_workers; i++)
        if (!q->workers[i].busy) {
            if (!w) w = &q->workers[i];
            ++*n_idle;
        }
    return w;
}

/* A job's class and slot, as indexes (a bad slot is the front door's error: it queues as slot 0). */
static int job_class(const srv_job *j) { return j->tenant.priority == SRV_PRIO_BATCH ? SRV_PRIO_BATCH : SRV_PRIO_INTERACTIVE; }
static int job_slot(const srv_job *j) {
    assert(j->tenant.slot >= 0 && j->tenant.slot < SRV_TENANTS_MAX);
    return j->tenant.slot >= 0 && j->tenant.slot < SRV_TENANTS_MAX ? j->tenant.slot : 0;
}

/* A job's tokens still to run: all of them, or a split job's rest. */
static int job_tokens_left(const srv_job *j) {
    if (j->seq_done <= 0) return j->tokens;
    int t = 0;
    for (int i = j->seq_done; i < j->n_inputs; i++) t += (int)j->enc[i].n;
    return t;
}

/* A job's work: the rows its pass computes (a split job's rest), one stream per task (at least 1). */
static double job_work(const srv_job *j) {
    double work = (double)job_tokens_left(j) * (j->n_tasks > 0 ? j->n_tasks : 1);
    return work > 0 ? work : 1.0;
}
static double job_share(const srv_job *j) { return j->tenant.share > 0 ? j->tenant.share : 1.0; }

/* The virtual time a job advances its slot by: the work it brings to the pass (all of it, or a split
 * job's part) over its share; a job built by hand has share 0, read as 1. */
static double job_vcost(const srv_job *j, double work) { return work / job_share(j); }

/* Loop thread: j joins the back of its slot's queue in its class. */
static void enqueue(srv_sched *q, srv_job *j) {
    srv_class_q *k = &q->cls[job_class(j)];
    int s = job_slot(j);
    srv_fifo *f = &k->fifo[s];
    j->next = NULL;
    if (f->tail) f->tail->next = j;
    else {
        f->head = j;
        k->active[k->n_active++] = s;
    }
    f->tail = j;
    k->n_jobs++;
    q->n_waiting++;
    q->pending_tokens += j->tokens;
    double w = job_work(j);
    q->slot_work[s] = q->slot_seen[s] > 0 ? 0.8 * q->slot_work[s] + 0.2 * w : w;
    q->slot_seen[s] = srv__now();
    q->slot_share[s] = job_share(j);
    q->slot_waiting[s] += w;
    q->slot_light[s] = q->slot_waiting[s] <= 1.5 * q->slot_work[s];
}

/* The light-tenant cap (see the top of the file): fills cap[slot] with the work each slot may put in
 * the next pass, or returns false when no cap applies. A slot is recent when it submitted in the last
 * SRV_RECENT_S; the cap applies when two or more slots are recent and one of them is light (its last
 * job arrived to no other of its own, and at most one typical job of its own waits: the tail of a
 * backlog is not light). Then each slot's part of a pass is at most the recent slots'
 * typical jobs summed, split by their shares. O(SRV_TENANTS_MAX), once per pass. */
#define SRV_RECENT_S 5.0 /* long enough for a tenant sending every few seconds; the flood pays its smaller passes that long after */
static bool light_caps(const srv_sched *q, double now, double *cap, bool *light_waits) {
    double work = 0, shares = 0;
    int recent = 0;
    bool light = false;
    *light_waits = false;
    for (int s = 0; s < SRV_TENANTS_MAX; s++) {
        if (q->slot_seen[s] <= 0 || now - q->slot_seen[s] > SRV_RECENT_S) continue;
        recent++;
        work += q->slot_work[s];
        shares += q->slot_share[s];
        bool l = q->slot_light[s] && q->slot_waiting[s] <= q->slot_work[s] * 1.5;
        light |= l;
        *light_waits |= l && q->slot_waiting[s] > 0;
    }
    if (recent < 2 || !light) return false;
    for (int s = 0; s < SRV_TENANTS_MAX; s++) cap[s] = work * q->slot_share[s] / shares;
    return true;
}

/* Split jobs (see the top of the file): the sequences of j's rest that go into a pass with `tokens`
 * tokens and `work` of its slot's cap left, a prefix; at least one when it is the pass's first job
 * (a pass always takes its first job). Jobs that are never split fit whole or not at all. */
static int split_fit(const srv_job *j, int tokens, double work, bool first) {
    int rest = j->n_inputs - j->seq_done;
    if (j->embed || (j->preq && j->preq->ret_explain) || j->n_inputs < 2) /* not split */
        return first || (job_tokens_left(j) <= tokens && job_work(j) <= work) ? rest : 0;
    double per = j->n_tasks > 0 ? j->n_tasks : 1;
    int n = 0, t = 0;
    double w = 0;
    while (n < rest) {
        int len = (int)j->enc[j->seq_done + n].n;
        if (t + len > tokens || w + len * per > work) break;
        t += len, w += len * per, n++;
    }
    return n == 0 && first ? 1 : n;
}

/* j goes into the pass with n sequences of its rest (all of them, or a split job's part); returns
 * that part's work. */
static double take_part(srv_job *j, int n) {
    j->part_first = j->seq_done;
    j->part_n = n;
    double per = j->n_tasks > 0 ? j->n_tasks : 1, w = 0;
    if (j->part_first == 0 && n == j->n_inputs) return job_work(j); /* whole, as before */
    for (int i = j->part_first; i < j->part_first + n; i++) w += (double)j->enc[i].n * per;
    return w > 0 ? w : 1.0;
}

/* Tokens of the part of j in its pass. */
static int part_tokens(const srv_job *j) {
    if (j->part_first == 0 && j->part_n == j->n_inputs) return j->tokens;
    int t = 0;
    for (int i = j->part_first; i < j->part_first + j->part_n; i++) t += (int)j->enc[i].n;
    return t;
}

/* Loop thread: a split job's rest, when its part is done, goes back to the head of its slot's queue
 * (it is the oldest of its slot), with its tokens and work waiting again. */
static void requeue_rest(srv_sched *q, srv_job *j) {
    srv_class_q *k = &q->cls[job_class(j)];
    int s = job_slot(j);
    srv_fifo *f = &k->fifo[s];
    if (!f->head) {
        k->active[k->n_active++] = s;
        f->tail = j;
    }
    j->next = f->head;
    f->head = j;
    j->part_n = 0;
    k->n_jobs++;
    q->n_waiting++;
    q->pending_tokens += job_tokens_left(j);
    q->slot_waiting[s] += job_work(j);
}

/* Submission time of the oldest waiting job (each slot's head is its oldest), for the batch rule's
 * hold. O(active slots). */
static double oldest_submit(const srv_sched *q) {
    double t = INFINITY;
    for (int c = 0; c < SRV_CLASSES; c++)
        for (int i = 0; i < q->cls[c].n_active; i++) {
            const srv_job *h = q->cls[c].fifo[q->cls[c].active[i]].head;
            if (h->t_submit < t) t = h->t_submit;
        }
    return t;
}

/* Fills a batch by weighted fair queuing (see the top of the file): the interactive class first,
 * then the room it leaves to the batch class. In a class, each step takes the slot whose next
 * candidate has the smallest tag (ties: the earlier submitted); a candidate of another model or
 * kind, or one that does not fit the tokens left, is passed over and the slot's next job becomes
 * its candidate, so a slot's jobs keep their order. The first job taken sets the model and kind;
 * the batch is full at max_batch_tokens. cap (the light-tenant cap, light_caps; NULL: none) bounds
 * each slot's work in the batch. Each step is O(active slots); a slot's tags only grow, so with one
 * slot this is today's FIFO scan. */
static srv_batch *take_batch(srv_sched *q, const double *cap) {
    srv_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    srv_job *first = NULL, *last = NULL;
    int toks = 0, left = 0, max = q->p.max_batch_tokens; /* left: tokens that left the queue (a split job's rest) */
    double part[SRV_TENANTS_MAX] = {0}; /* each slot's work taken, against cap (the light-tenant cap; NULL: none) */
    bool held = false; /* an interactive slot reached its cap */
    for (int c = 0; c < SRV_CLASSES && toks < max && !held; c++) {
        srv_class_q *k = &q->cls[c];
        srv_job **cur[SRV_TENANTS_MAX]; /* per active slot: the link to its candidate; NULL once capped */
        for (int i = 0; i < k->n_active; i++) cur[i] = &k->fifo[k->active[i]].head;
        while (toks < max) {
            int best = -1;
            double bt = 0;
            for (int i = 0; i < k->n_active; i++) {
                if (!cur[i] || !*cur[i]) continue;
                double t = fmax(k->vtime, k->vfinish[k->active[i]]);
                if (best < 0 || t < bt || (t == bt && (*cur[i])->t_submit < (*cur[best])->t_submit)) best = i, bt = t;
            }
            if (best < 0) break;
            srv_job *j = *cur[best];
            int s = k->active[best], n = j->n_inputs - j->seq_done; /* sequences it brings: all of its rest */
            bool other = first && (j->model != first->model || j->embed != first->embed);
            if (cap && !other) n = split_fit(j, max - toks, cap[s] - part[s], !first); /* the pass's first: at least one */
            if (other || (first && (!cap || n == 0) && toks + job_tokens_left(j) > max)) {
                cur[best] = &j->next; /* passed over: it keeps its place and its slot's tag */
                continue;
            }
            if (n == 0) { /* only under the cap, and never the pass's first job */
                cur[best] = NULL; /* the slot's part of this pass is full: its jobs keep their order */
                held |= c == SRV_PRIO_INTERACTIVE; /* and no batch job takes the room it leaves */
                continue;
            }
            double wleft = job_work(j), work = take_part(j, n);
            part[s] += work;
            q->slot_waiting[s] -= wleft;
            if (q->slot_waiting[s] < 0.5) q->slot_waiting[s] = 0; /* rounding of the running sum */
            srv_fifo *f = &k->fifo[s];
            *cur[best] = j->next; /* unlink j; the cursor now points at the job after it */
            if (f->tail == j) f->tail = cur[best] == &f->head ? NULL : SRV_CONTAINER_OF(cur[best], srv_job, next);
            j->next = NULL;
            if (j->part_n < j->n_inputs - j->seq_done) cur[best] = NULL; /* split: its rest goes before the slot's next job */
            k->vfinish[s] = bt + job_vcost(j, work);
            k->vtime = bt;
            k->n_jobs--;
            q->n_waiting--;
            if (last) last->next = j;
            else b->jobs = first = j;
            last = j;
            b->n_jobs++;
            left += job_tokens_left(j);
            toks += part_tokens(j);
        }
        for (int i = k->n_active - 1; i >= 0; i--) /* slots emptied by this batch leave the active list */
            if (!k->fifo[k->active[i]].head) k->active[i] = k->active[--k->n_active];
        /* an empty class forgets its history, as start-time fair queuing does when idle (the virtual
         * time jumps to the largest finish, so every slot starts equal); restarting both at 0 is the
         * same and keeps the clock from growing for the server's life */
        if (k->n_jobs == 0) {
            k->vtime = 0;
            memset(k->vfinish, 0, sizeof k->vfinish);
        }
    }
    q->pending_tokens -= left;
    return b;
}

static void timer_cb(uv_timer_t *t) { schedule(t->data); }

/* Adaptive mode (see the top of the file): steer the two levels by the batch's oldest wait, then
 * raise the default-skip tasks of the batch's jobs, each by its class's level. An up-step raises the
 * batch level while batch work waits or runs in this batch and the level is under the model's
 * layers; otherwise the interactive one (and the batch level follows it, never below). A down-step
 * lowers the interactive level first. With no batch job ever, the interactive level moves as the
 * single level did. Loop thread, before the batch reaches a worker. */
static void adapt(srv_sched *q, srv_batch *b, double oldest_wait_ms) {
    int li = atomic_load(&q->adapt_level), lb = atomic_load(&q->adapt_level_batch), target = q->p.target_queue_ms;
    int L = eng_model_config(store_model_engine(b->jobs->model))->n_layers;
    bool batch_work = q->cls[SRV_PRIO_BATCH].n_jobs > 0;
    for (srv_job *j = b->jobs; j && !batch_work; j = j->next) batch_work = job_class(j) == SRV_PRIO_BATCH;
    if (oldest_wait_ms > target) {
        if (batch_work && lb < L) lb++;
        else if (li < L) li++, lb = lb > li ? lb : li;
    } else if (oldest_wait_ms < target / 2.0) {
        if (li > 0) li--;
        else if (lb > 0) lb--;
    }
    atomic_store(&q->adapt_level, li);
    atomic_store(&q->adapt_level_batch, lb);
    for (srv_job *j = b->jobs; j; j = j->next) {
        int level = job_class(j) == SRV_PRIO_BATCH ? lb : li, raised = 0;
        if (level == 0 || j->part_first > 0) continue; /* a split job's skips are its first part's */
        for (int k = 0; k < j->n_tasks; k++) {
            if (j->skip_src[k] != SRV_SKIP_DEFAULT) continue;
            int hi = store_task_skip_max(j->tasks[k]), want = j->treqs[k].skip + level;
            if (want > hi) want = hi;
            if (want <= j->treqs[k].skip) continue;
            raised += want - j->treqs[k].skip;
            j->treqs[k].skip = want;
            j->skip_src[k] = SRV_SKIP_ADAPTIVE;
        }
        if (raised) {
            j->adaptive_raised = raised;
            srv__metrics_adaptive(q->p.metrics, raised);
        }
    }
}

/* Shadows (rollout.c) are the first work dropped: every one of the batch's when jobs are left
 * waiting after it was taken or adaptive mode is raising skips (the queue is behind); else a job's
 * shadows run while the shadow rows run so far (a decaying sum, about the last 200 passes) are within
 * its rollouts' smallest max_share of the task rows run so far, so shadows cost at most that share
 * over time (a job may overdraw by its own rows, then the next ones wait for the share to recover).
 * Rows here are tokens x task streams. A dropped shadow leaves its job's answer as it would be
 * without it. Loop thread. */
static void shed_shadows(srv_sched *q, srv_batch *b) {
    bool behind = q->n_waiting > 0 || atomic_load(&q->adapt_level) > 0 || atomic_load(&q->adapt_level_batch) > 0;
    q->task_rows *= 0.995, q->shadow_rows *= 0.995;
    for (srv_job *j = b->jobs; j; j = j->next) {
        if (j->part_first > 0) continue; /* a split job's shadows were decided (and counted) with its first part */
        q->task_rows += (double)j->tokens * (j->n_tasks > 0 ? j->n_tasks : 1);
        if (!j->n_shadow) continue;
        double mine = 0, share = 1;
        for (int i = 0; i < j->n_inputs; i++) mine += (double)j->enc[i].n * (j->seq_tasks[i] - j->n_tasks);
        for (int m = 0; m < j->n_shadow; m++) share = fmin(share, j->shadows[m].ro.max_share > 0 ? j->shadows[m].ro.max_share : 0.25);
        if (behind || q->shadow_rows > share * q->task_rows) j->shadow_dropped = true;
        else q->shadow_rows += mine;
    }
}

static void schedule(srv_sched *q) {
    srv_worker *w;
    int n_idle;
    if (q->cancelled) return;
    while (q->n_waiting && (w = idle_worker(q, &n_idle))) {
        double now = srv__now(), cap[SRV_TENANTS_MAX]; /* the light-tenant cap of this pass, when it applies */
        bool light_waits, capped = light_caps(q, now, cap, &light_waits);
        if (capped && !light_waits && q->n_workers > 1 && n_idle == 1)
            return; /* the last idle worker is kept for the light tenant (see the top of the file) */
        srv_batch_clock c = {.now = now, .head_submit = oldest_submit(q), .last_arrival = q->last_arrival,
                             .last_done = q->last_done, .last_pass_s = q->last_pass_s,
                             /* capped, a pass is as full as it gets at once: no hold for more */
                             .pending_tokens = capped ? q->p.max_batch_tokens : q->pending_tokens,
                             .max_batch_tokens = q->p.max_batch_tokens,
                             .max_wait_us = q->p.max_wait_us};
        double wait_us = srv__batch_wait_us(&c);
        if (wait_us > 0) {
            /* the loop's clock is cached per iteration; refresh it or the timer fires late */
            uv_update_time(q->loop);
            uint64_t ms = (uint64_t)ceil(wait_us / 1000.0);
            uv_timer_start(&q->timer, timer_cb, ms ? ms : 1, 0);
            return;
        }
        srv_batch *b = take_batch(q, capped ? cap : NULL);
        if (!b) {
            uv_timer_start(&q->timer, timer_cb, 1, 0); /* out of memory: retry shortly */
            return;
        }
        shed_shadows(q, b);
        if (q->p.adaptive_skips) {
            double oldest = INFINITY; /* the batch's oldest job: its wait steers the levels */
            for (srv_job *j = b->jobs; j; j = j->next)
                if (j->part_first == 0) oldest = fmin(oldest, j->t_submit); /* a split job's rest waited for its part, not in the queue */
            if (oldest < INFINITY) adapt(q, b, (c.now - oldest) * 1e3);
        }
        w->busy = true;
        w->running = b;
        b->worker = w;
        pthread_mutex_lock(&w->mu);
        w->batch = b;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

/* A split job that will not finish: the outputs of its parts are dropped. Loop thread, no part in flight. */
static void drop_parts(srv_job *j) {
    if (!j->part_outs) return;
    int n_out = 0;
    for (int i = 0; i < j->n_inputs; i++) n_out += srv__job_seq_tasks(j, i);
    eng_task_outs_free(j->part_outs, n_out);
    free(j->part_outs);
    j->part_outs = NULL;
}

/* A job that will not run (the drain deadline passed): failed and handed back. */
static void cancel_job(srv_sched *q, srv_job *j) {
    j->next = NULL;
    drop_parts(j); /* a split job's rest */
    q->hooks.fail(q->hooks.ctx, j, q->cancel_code, q->cancel_msg);
    atomic_fetch_sub(&q->depth, 1);
    atomic_fetch_sub(&q->admitted, 1);
    q->hooks.done(q->hooks.ctx, j);
}

static void inbox_cb(srv_inbox *in, srv_inbox_node *first) {
    srv_sched *q = in->data;
    for (srv_inbox_node *n = first, *nx; n; n = nx) {
        nx = n->next;
        srv_job *j = SRV_CONTAINER_OF(n, srv_job, inbox);
        if (q->cancelled) {
            cancel_job(q, j);
            continue;
        }
        enqueue(q, j);
    }
    q->last_arrival = srv__now();
    schedule(q);
}

static void done_cb(srv_inbox *in, srv_inbox_node *first) {
    srv_sched *q = in->data;
    for (srv_inbox_node *n = first, *nx; n; n = nx) {
        nx = n->next;
        srv_batch *b = SRV_CONTAINER_OF(n, srv_batch, done);
        for (srv_job *j = b->jobs, *jn; j; j = jn) {
            jn = j->next;
            j->next = NULL;
            if (j->seq_done > 0 && j->seq_done < j->n_inputs) { /* a split job's part ran: its rest waits again */
                if (!q->cancelled) {
                    requeue_rest(q, j);
                    continue;
                }
                drop_parts(j);
                q->hooks.fail(q->hooks.ctx, j, q->cancel_code, q->cancel_msg); /* the drain deadline passed */
            }
            atomic_fetch_sub(&q->depth, 1);
            atomic_fetch_sub(&q->admitted, 1);
            q->hooks.done(q->hooks.ctx, j);
        }
        b->worker->busy = false;
        b->worker->running = NULL;
        q->last_pass_s = b->seconds;
        free(b);
    }
    q->last_done = srv__now();
    schedule(q);
}

int srv__sched_cancel(srv_sched *q, eng_status code, const char *msg) {
    if (q->cancelled) return 0;
    q->cancelled = true;
    q->cancel_code = code;
    snprintf(q->cancel_msg, sizeof q->cancel_msg, "%s", msg);
    uv_timer_stop(&q->timer);
    for (int c = 0; c < SRV_CLASSES; c++) {
        srv_class_q *k = &q->cls[c];
        for (int i = 0; i < k->n_active; i++) {
            srv_fifo *f = &k->fifo[k->active[i]];
            for (srv_job *j = f->head, *nx; j; j = nx) {
                nx = j->next;
                cancel_job(q, j);
            }
            f->head = f->tail = NULL;
        }
        k->n_active = k->n_jobs = 0;
    }
    q->n_waiting = 0;
    q->pending_tokens = 0;
    memset(q->slot_waiting, 0, sizeof q->slot_waiting);
    /* the batches in a pass: the loop only reads their job lists, which the worker does not change */
    int abandoned = 0;
    for (int i = 0; i < q->n_workers; i++)
        if (q->workers[i].running)
            for (srv_job *j = q->workers[i].running->jobs; j; j = j->next) q->hooks.abandon(q->hooks.ctx, j), abandoned++;
    return abandoned;
}

int srv__sched_start(uv_loop_t *loop, const srv_sched_params *p, srv_sched_hooks hooks, srv_sched **out, eng_err *err) {
    srv_sched *q = *out = calloc(1, sizeof *q);
    if (!q) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    q->p = *p;
    q->hooks = hooks;
    q->loop = loop;
    q->batch_places = srv__sched_batch_places(p->max_queue);
    q->inbox_live = srv__inbox_init(&q->inbox, loop, inbox_cb, q) == 0;
    q->done_live = q->inbox_live && srv__inbox_init(&q->done, loop, done_cb, q) == 0;
    if (!q->done_live) return eng_err_set(err, ENG_INTERNAL, "cannot create the scheduler's event handles");
    uv_timer_init(loop, &q->timer);
    q->timer.data = q;
    if (!(q->workers = calloc((size_t)p->workers, sizeof *q->workers)))
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory starting the engine workers");
    for (int i = 0; i < p->workers; i++) {
        srv_worker *w = &q->workers[i];
        w->q = q;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        q->n_workers++; /* its mutex and condition exist: destroyed by srv__sched_free */
        if (!(w->st = eng_state_new(p->threads))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory starting the engine workers");
        if (pthread_create(&w->th, NULL, worker_main, w)) {
            eng_state_free(w->st);
            w->st = NULL;
            return eng_err_set(err, ENG_INTERNAL, "cannot start engine worker %d", i);
        }
    }
    return 0;
}

void srv__sched_stop(srv_sched *q) {
    for (int i = 0; q && i < q->n_workers; i++) {
        srv_worker *w = &q->workers[i];
        if (!w->st) continue;
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        eng_state_free(w->st);
        w->st = NULL;
    }
    if (q) q->cancelled = true; /* no pass starts from here on */
    /* passes that ended after the loop stopped: their jobs were abandoned and are freed by the done
     * hook (the loop no longer runs, this thread is its owner) */
    if (q && q->done_live) srv__inbox_run(&q->done);
}

void srv__sched_free(srv_sched *q) {
    if (!q) return;
    srv__sched_stop(q);
    for (int i = 0; i < q->n_workers; i++) {
        pthread_mutex_destroy(&q->workers[i].mu);
        pthread_cond_destroy(&q->workers[i].cv);
    }
    free(q->workers);
    if (q->inbox_live) srv__inbox_destroy(&q->inbox);
    if (q->done_live) srv__inbox_destroy(&q->done);
    free(q);
}
