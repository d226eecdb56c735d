/* sched.c - dynamic batching: the libuv loop packs queued jobs into batches, engine workers run
 * each batch as one eng_run and encode the responses.
 *
 * Why this shape. The engine is fastest on one large packed pass (one GEMM per projection over all
 * rows of all inputs and tasks), so jobs wait briefly to share a pass: a batch closes, once a worker
 * is free, when its tokens reach max_batch_tokens, or when no job has arrived for a quiet window
 * (the burst of follow-up requests that a finished batch triggers is taken whole instead of being
 * cut in two by the age of its first job), or at the latest 20 windows after its oldest job arrived
 * or the previous batch finished, whichever is later. The window is max_wait_us; within 1% of the
 * last pass's engine time after that pass ended, it is that 1% when longer (64 requests x 8 tasks
 * on bert-base take ~4 s, and their follow-ups, parsed and tokenized on 2 cores, arrive over
 * several ms with gaps above 1 ms). A finished batch counts as an arrival: with
 * closed-loop clients (each sends its next request when its answer comes), closing the next batch
 * at once would take only the jobs that queued during the last one, and the queue would settle
 * into two alternating half batches, each waiting for the other (seen under CPU contention: p50
 * 1.4x, throughput 0.7x).
 * Only the loop touches the queue; the HTTP thread reaches it through an inbox (mutex + uv_async)
 * and workers answer through uv_async_send, so no lock is held while anything computes. A batch
 * holds jobs of one model (tasks of different models cannot share a pass).
 *
 * Admission: `depth` counts jobs from submission to completion; beyond max_queue srv__sched_submit
 * refuses (429), so memory held by waiting requests is bounded.
 *
 * Load-adaptive skips (--adaptive-skips, --target-queue-ms): when a batch closes, the wait of its
 * oldest job steers a level: one layer up when the wait is over the target, one down when it is
 * under half of it (the gap keeps the level from flapping). Each task of the batch that runs at its
 * default skip (the request chose no skip, budget or latency) runs at default + level, capped at its
 * allowed maximum, and the response names the skip with "skip_source": "adaptive". Only the loop
 * reads or writes the level. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_status.h"
#include "internal.h"

typedef struct srv_batch {
    struct srv_batch *next;
    srv_job *jobs;           /* linked through job->next */
    int n_jobs;
    void *worker;            /* the srv_worker that runs it */
    double seconds;          /* engine time of the pass, set by the worker */
} srv_batch;

typedef struct {
    srv_sched *q;
    pthread_t th;
    eng_state *st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_batch *batch;        /* handed over by the loop; NULL when idle */
    int busy;                /* loop's view: a batch is assigned and not yet reported done */
    int stop;
} srv_worker;

struct srv_sched {
    srv_server *s;
    uv_loop_t *loop;
    uv_async_t inbox_async, done_async;
    uv_timer_t timer;
    pthread_mutex_t inbox_mu;
    srv_job *inbox_head, *inbox_tail;
    pthread_mutex_t done_mu;
    srv_batch *done;
    atomic_int depth;
    atomic_int queued;
    /* loop-owned FIFO */
    srv_job *head, *tail;
    int pending_tokens;
    double last_arrival;          /* seconds, monotonic: when the inbox last brought a job */
    double last_done;             /* when a batch last finished (its answers went out) */
    double last_pass_s;           /* that batch's engine time */
    int n_workers;
    srv_worker *workers;
    int flush;
    atomic_int adapt_level;  /* layers adaptive mode adds; written by the loop only */
};

double srv__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int srv__sched_depth(srv_sched *q) { return atomic_load(&q->depth); }
int srv__sched_queued(srv_sched *q) { return atomic_load(&q->queued); }
int srv__sched_adaptive_level(srv_sched *q) { return atomic_load(&q->adapt_level); }

int srv__sched_submit(srv_sched *q, srv_job *j) {
    if (atomic_fetch_add(&q->depth, 1) >= q->s->cfg.max_queue) {
        atomic_fetch_sub(&q->depth, 1);
        return ENG_BUSY;
    }
    atomic_fetch_add(&q->queued, 1);
    j->next = NULL;
    j->t_submit = srv__now();
    pthread_mutex_lock(&q->inbox_mu);
    if (q->inbox_tail) q->inbox_tail->next = j;
    else q->inbox_head = j;
    q->inbox_tail = j;
    pthread_mutex_unlock(&q->inbox_mu);
    uv_async_send(&q->inbox_async);
    return 0;
}

/* ---- results ---- */

static proto_head_kind head_kind(const eng_head *h) {
    switch (h->type) {
    case ENG_HEAD_MULTILABEL: return PROTO_HEAD_MULTILABEL;
    case ENG_HEAD_REGRESSION: return PROTO_HEAD_REGRESSION;
    case ENG_HEAD_TAGGING: return PROTO_HEAD_TAGGING;
    case ENG_HEAD_QA: return PROTO_HEAD_QA;
    default: return PROTO_HEAD_CLASSIFICATION;
    }
}

/* Best QA span: tokens of the context (the pair when there is one), end within 30 tokens of start;
 * score = p_start * p_end with softmax over the context tokens. */
static void qa_span(const eng_tok_encoding *e, const proto_text *t, const float *lg, proto_task_result *r) {
    int ctx = t->pair ? 1 : 0, n = (int)e->n, maxlen = 30;
    float ms = -INFINITY, me = -INFINITY;
    for (int i = 0; i < n; i++)
        if (e->seq_ids[i] == ctx) {
            if (lg[2 * i] > ms) ms = lg[2 * i];
            if (lg[2 * i + 1] > me) me = lg[2 * i + 1];
        }
    if (ms == -INFINITY) return;
    double zs = 0, ze = 0;
    for (int i = 0; i < n; i++)
        if (e->seq_ids[i] == ctx) zs += exp(lg[2 * i] - ms), ze += exp(lg[2 * i + 1] - me);
    float best = -INFINITY;
    int bs = -1, be = -1;
    for (int i = 0; i < n; i++) {
        if (e->seq_ids[i] != ctx) continue;
        for (int k = i; k < n && k < i + maxlen && e->seq_ids[k] == ctx; k++) {
            float sc = lg[2 * i] + lg[2 * k + 1];
            if (sc > best) best = sc, bs = i, be = k;
        }
    }
    if (bs < 0) return;
    const char *src = ctx ? t->pair : t->text;
    r->has_answer = 1;
    r->ans_start = e->offsets[2 * bs];
    r->ans_end = e->offsets[2 * be + 1];
    r->ans_score = (float)(exp(lg[2 * bs] - ms) / zs * exp(lg[2 * be + 1] - me) / ze);
    int32_t b0 = e->byte_offsets[2 * bs], b1 = e->byte_offsets[2 * be + 1];
    r->ans_text = src + b0;
    r->ans_text_len = b1 > b0 ? (size_t)(b1 - b0) : 0;
}

/* This request's share of the batch plan (see proto_explain). Its rows, streams and trunks per layer
 * follow the planner's rules exactly: an input's trunk lives below the latest start layer of its
 * tasks, a task's stream from its start layer (max of its first adapter layer and its skip) on.
 * Times are the batch's, attributed by rows (layers), tokens (embedding) and outputs (heads).
 * rows, streams, trunks: (L) ints; ms: (L). Returns 0 or -1 when out of memory. */
static int explain_share(const srv_job *j, const eng_plan_stats *st, int *rows, int *streams, int *trunks, double *ms,
                         proto_explain *ex) {
    int L = st->n_layers;
    for (int i = 0; i < j->n_inputs; i++) {
        int len = (int)j->enc[i].n, trunk_until = 0;
        for (int k = 0; k < j->n_tasks; k++) {
            int start = eng_task_first_layer(j->treqs[k].task);
            if (j->treqs[k].skip > start) start = j->treqs[k].skip;
            if (start > trunk_until) trunk_until = start;
            for (int l = start; l < L; l++) rows[l] += len, streams[l]++;
        }
        for (int l = 0; l < trunk_until && l < L; l++) rows[l] += len, streams[l]++, trunks[l]++;
    }
    double layers_ms = 0, batch_gflop = 0;
    for (int l = 0; l < L; l++) {
        ms[l] = st->rows[l] > 0 ? st->ms[l] * rows[l] / st->rows[l] : 0;
        layers_ms += ms[l];
        batch_gflop += st->gflop[l];
    }
    eng_input *in = calloc((size_t)j->n_inputs, sizeof *in);
    if (!in) return -1;
    for (int i = 0; i < j->n_inputs; i++)
        in[i] = (eng_input){.ids = j->enc[i].ids, .len = (int)j->enc[i].n, .tasks = j->treqs, .n_tasks = j->n_tasks};
    double gflop = eng_plan_gflop(store_model_engine(j->model), in, j->n_inputs);
    free(in);
    int outs = j->n_inputs * j->n_tasks;
    *ex = (proto_explain){
        .n_layers = L, .rows = rows, .streams = streams, .trunks = trunks, .ms = ms,
        .batch_rows = st->rows, .batch_streams = st->streams, .batch_ms = st->ms,
        .embed_ms = st->tokens > 0 ? st->embed_ms * j->tokens / st->tokens : 0,
        .heads_ms = j->batch_outputs > 0 ? st->heads_ms * outs / j->batch_outputs : 0,
        .gflop = gflop, .share = batch_gflop > 0 ? gflop / batch_gflop : 0, .batch_gflop = batch_gflop,
        .batch_total_ms = st->total_ms, .batch_requests = j->batch_requests, .batch_inputs = j->batch_inputs,
        .batch_tokens = j->batch_tokens};
    ex->total_ms = ex->embed_ms + layers_ms + ex->heads_ms;
    return 0;
}

/* Encodes job j's answer from outs (n_inputs * n_tasks, input-major). Worker thread. */
static void job_respond(srv_server *s, srv_job *j, const eng_task_out *outs, const eng_plan_stats *stats) {
    size_t nr = (size_t)j->n_inputs * j->n_tasks;
    proto_task_result *res = calloc(nr, sizeof *res);
    float **bufs = calloc(nr, sizeof *bufs);
    proto_tag **tags = calloc(nr, sizeof *tags);
    int *tokens = calloc((size_t)j->n_inputs, sizeof *tokens);
    int bad = !res || !bufs || !tags || !tokens;
    for (int i = 0; !bad && i < j->n_inputs; i++) {
        const eng_tok_encoding *e = &j->enc[i];
        tokens[i] = (int)e->n;
        for (int k = 0; !bad && k < j->n_tasks; k++) {
            size_t idx = (size_t)i * j->n_tasks + k;
            const eng_task_out *o = &outs[idx];
            const store_task *t = j->tasks[k];
            const eng_head *h = store_task_head(t);
            proto_task_result *r = &res[idx];
            r->task = store_task_name(t);
            r->version = store_task_version(t);
            r->kind = head_kind(h);
            r->skip = j->treqs[k].skip;
            r->skip_source = srv__skip_source_name(j->skip_src[k]);
            r->n_labels = store_task_num_labels(t);
            r->labels = store_task_labels(t);
            r->n_rows = o->n_rows;
            r->logits = j->ret_logits ? o->logits : NULL;
            size_t nv = (size_t)o->n_rows * o->num_labels;
            if (!(bufs[idx] = malloc(nv * sizeof(float)))) {
                bad = 1;
                break;
            }
            eng_head_probs(h, o->logits, o->n_rows, bufs[idx]);
            const float *p = bufs[idx];
            switch (r->kind) {
            case PROTO_HEAD_CLASSIFICATION:
                r->scores = p;
                r->label = eng_argmax(p, o->num_labels);
                r->score = p[r->label];
                break;
            case PROTO_HEAD_MULTILABEL:
                r->scores = p;
                break;
            case PROTO_HEAD_REGRESSION:
                r->value = o->logits[0];
                break;
            case PROTO_HEAD_TAGGING: {
                int n = (int)e->n < o->n_rows ? (int)e->n : o->n_rows;
                if (!(tags[idx] = calloc((size_t)n + 1, sizeof *tags[idx]))) {
                    bad = 1;
                    break;
                }
                for (int row = 0; row < n; row++) {
                    if (e->special_mask[row]) continue;
                    const float *pr = p + (size_t)row * o->num_labels;
                    int lb = eng_argmax(pr, o->num_labels);
                    tags[idx][r->n_tags++] = (proto_tag){e->offsets[2 * row], e->offsets[2 * row + 1],
                                                         e->seq_ids[row] > 0 ? e->seq_ids[row] : 0, lb, pr[lb]};
                }
                r->tags = tags[idx];
                break;
            }
            case PROTO_HEAD_QA:
                if (o->num_labels == 2 && o->n_rows == (int)e->n) qa_span(e, &j->texts[i], o->logits, r);
                break;
            }
        }
    }
    proto_explain ex = {0};
    int *xrows = NULL;
    double *xms = NULL;
    if (stats && j->ret_explain && !bad) {
        int L = stats->n_layers;
        xrows = calloc((size_t)3 * L + 1, sizeof *xrows);
        xms = calloc((size_t)L + 1, sizeof *xms);
        if (!xrows || !xms || explain_share(j, stats, xrows, xrows + L, xrows + 2 * L, xms, &ex)) bad = 1;
    }
    if (!bad) {
        j->t_end = srv__now();
        proto_predict_resp pr = {.request_id = j->req->id,
                                 .model = store_model_name(j->model),
                                 .n_inputs = j->n_inputs,
                                 .n_tasks = j->n_tasks,
                                 .results = res,
                                 .tokens = tokens,
                                 .truncated = j->truncated,
                                 .ret_scores = j->ret_scores,
                                 .queue_ms = (j->t_start - j->t_submit) * 1e3,
                                 .inference_ms = (j->t_end - j->t_start) * 1e3,
                                 .total_ms = (j->t_end - j->req->t0) * 1e3,
                                 .batch_requests = j->batch_requests,
                                 .batch_inputs = j->batch_inputs,
                                 .batch_tokens = j->batch_tokens,
                                 .latency_target_ms = j->latency_ms,
                                 .predicted_ms = j->predicted_ms,
                                 .explain = stats && j->ret_explain ? &ex : NULL};
        j->body = j->v2 ? proto_v2_infer_encode(&pr, &j->body_len) : proto_predict_encode(&pr, &j->body_len);
        j->status = 200;
        bad = !j->body;
    }
    if (bad) srv__job_fail(j, ENG_NO_MEMORY, "out of memory building the response");
    for (size_t i = 0; i < nr && bufs; i++) free(bufs[i]);
    for (size_t i = 0; i < nr && tags; i++) free(tags[i]);
    free(bufs), free(tags), free(res), free(tokens), free(xrows), free(xms);
    (void)s;
}

/* Runs jobs as one eng_run; on an engine error with several jobs, runs each alone so one bad
 * request cannot fail the others. Worker thread. */
static void run_jobs(srv_server *s, eng_state *st, srv_job *jobs, int n_jobs) {
    int n_in = 0, n_out = 0, toks = 0, want_stats = 0;
    for (srv_job *j = jobs; j; j = j->next) {
        n_in += j->n_inputs;
        n_out += j->n_inputs * j->n_tasks;
        toks += j->tokens;
        want_stats |= j->ret_explain;
    }
    eng_input *in = calloc((size_t)n_in, sizeof *in);
    eng_task_out *outs = calloc((size_t)n_out, sizeof *outs);
    eng_plan_stats stats = {0};
    eng_err err = {0};
    double t_start = srv__now();
    if (!in || !outs) {
        for (srv_job *j = jobs; j; j = j->next) srv__job_fail(j, ENG_NO_MEMORY, "out of memory");
        free(in), free(outs);
        return;
    }
    int k = 0;
    for (srv_job *j = jobs; j; j = j->next) {
        j->t_start = t_start;
        j->batch_requests = n_jobs, j->batch_inputs = n_in, j->batch_tokens = toks, j->batch_outputs = n_out;
        for (int i = 0; i < j->n_inputs; i++)
            in[k++] = (eng_input){.ids = j->enc[i].ids, .type_ids = j->enc[i].type_ids, .len = (int)j->enc[i].n,
                                  .tasks = j->treqs, .n_tasks = j->n_tasks};
    }
    int rc = eng_run(store_model_engine(jobs->model), st, in, n_in, outs, want_stats ? &stats : NULL, &err);
    if (rc == 0) {
        srv__metrics_batch(s->metrics, n_jobs, n_in, toks, srv__now() - t_start);
        size_t off = 0;
        for (srv_job *j = jobs; j; j = j->next) {
            job_respond(s, j, outs + off, want_stats ? &stats : NULL);
            off += (size_t)j->n_inputs * j->n_tasks;
        }
        eng_task_outs_free(outs, n_out);
        if (want_stats) eng_plan_stats_free(&stats);
    } else if (n_jobs > 1) {
        for (srv_job *j = jobs, *nx; j; j = nx) {
            nx = j->next;
            j->next = NULL;
            run_jobs(s, st, j, 1);
            j->next = nx;
        }
    } else {
        srv__job_fail(jobs, rc, err.msg);
    }
    free(in), free(outs);
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
        run_jobs(w->q->s, w->st, b->jobs, b->n_jobs);
        b->seconds = srv__now() - t0;
        /* the batch itself is the done record: no allocation on this path */
        pthread_mutex_lock(&w->q->done_mu);
        b->next = w->q->done;
        w->q->done = b;
        pthread_mutex_unlock(&w->q->done_mu);
        uv_async_send(&w->q->done_async);
    }
    return NULL;
}

/* ---- loop side ---- */

static void schedule(srv_sched *q);

static srv_worker *idle_worker(srv_sched *q) {
    for (int i = 0; i < q->n_workers; i++)
        if (!q->workers[i].busy) return &q->workers[i];
    return NULL;
}

/* Takes the head job and the following jobs of the same model while they fit the token budget. */
static srv_batch *take_batch(srv_sched *q) {
    srv_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    srv_job *first = q->head, **link = &q->head, *last = NULL;
    int toks = 0;
    for (srv_job *j = q->head, *nx; j; j = nx) {
        nx = j->next;
        if (j->model != first->model || (b->n_jobs > 0 && toks + j->tokens > q->s->cfg.max_batch_tokens)) {
            link = &j->next;
            continue;
        }
        *link = nx; /* unlink j */
        j->next = NULL;
        if (last) last->next = j;
        else b->jobs = j;
        last = j;
        b->n_jobs++;
        toks += j->tokens;
        if (toks >= q->s->cfg.max_batch_tokens) break;
    }
    q->tail = NULL;
    for (srv_job *j = q->head; j; j = j->next) q->tail = j;
    q->pending_tokens -= toks;
    atomic_fetch_sub(&q->queued, b->n_jobs);
    return b;
}

static void timer_cb(uv_timer_t *t) { schedule(t->data); }

/* Adaptive mode (see the top of the file): steer the level by the batch's oldest wait, then raise
 * the default-skip tasks of the batch's jobs. Loop thread, before the batch reaches a worker. */
static void adapt(srv_sched *q, srv_batch *b, double oldest_wait_ms) {
    int level = atomic_load(&q->adapt_level), target = q->s->cfg.target_queue_ms;
    int L = eng_model_config(store_model_engine(b->jobs->model))->n_layers;
    if (oldest_wait_ms > target && level < L) level++;
    else if (oldest_wait_ms < target / 2.0 && level > 0) level--;
    atomic_store(&q->adapt_level, level);
    if (level == 0) return;
    for (srv_job *j = b->jobs; j; j = j->next) {
        int raised = 0;
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
            srv__metrics_adaptive(q->s->metrics, raised, level);
        }
    }
}

/* Right after a pass, the quiet window grows to a share of it: waiting 1% of the last pass's time
 * for its follow-ups costs at most 1% of latency, while a batch cut in two costs up to a whole pass. */
#define PASS_SHARE 0.01

static void schedule(srv_sched *q) {
    srv_worker *w;
    while (q->head && (w = idle_worker(q))) {
        /* A finished batch counts as an arrival: its answers bring follow-up requests within
         * about a millisecond, and the hold runs from then for jobs that queued behind it. */
        double now = srv__now(), waited_us = (now - q->head->t_submit) * 1e6;
        double last = q->last_arrival > q->last_done ? q->last_arrival : q->last_done;
        double since = q->head->t_submit > q->last_done ? q->head->t_submit : q->last_done;
        double window_us = q->s->cfg.max_wait_us, share_us = PASS_SHARE * q->last_pass_s * 1e6;
        /* right after a pass its answers' follow-ups are on their way; a job arriving on an idle
         * server long after the last pass is not one of them and waits only max_wait_us */
        if (window_us > 0 && share_us > window_us && (now - q->last_done) * 1e6 < share_us) window_us = share_us;
        double quiet_us = (now - last) * 1e6, held_us = (now - since) * 1e6, hold_us = 20.0 * window_us;
        int full = q->pending_tokens >= q->s->cfg.max_batch_tokens;
        if (!full && !q->flush && quiet_us < window_us && held_us < hold_us) {
            /* the loop's clock is cached per iteration; refresh it or the timer fires late */
            uv_update_time(q->loop);
            double left = window_us - quiet_us;
            if (hold_us - held_us < left) left = hold_us - held_us;
            uint64_t ms = (uint64_t)ceil(left / 1000.0);
            uv_timer_start(&q->timer, timer_cb, ms ? ms : 1, 0);
            return;
        }
        srv_batch *b = take_batch(q);
        if (!b) {
            uv_timer_start(&q->timer, timer_cb, 1, 0); /* out of memory: retry shortly */
            return;
        }
        if (q->s->cfg.adaptive_skips) adapt(q, b, waited_us / 1e3);
        w->busy = 1;
        b->worker = w;
        pthread_mutex_lock(&w->mu);
        w->batch = b;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

static void inbox_cb(uv_async_t *a) {
    srv_sched *q = a->data;
    pthread_mutex_lock(&q->inbox_mu);
    srv_job *h = q->inbox_head;
    q->inbox_head = q->inbox_tail = NULL;
    pthread_mutex_unlock(&q->inbox_mu);
    for (srv_job *j = h, *nx; j; j = nx) {
        nx = j->next;
        j->next = NULL;
        if (q->tail) q->tail->next = j;
        else q->head = j;
        q->tail = j;
        q->pending_tokens += j->tokens;
    }
    if (h) q->last_arrival = srv__now();
    schedule(q);
}

static void done_cb(uv_async_t *a) {
    srv_sched *q = a->data;
    pthread_mutex_lock(&q->done_mu);
    srv_batch *d = q->done;
    q->done = NULL;
    pthread_mutex_unlock(&q->done_mu);
    for (srv_batch *b = d, *nb; b; b = nb) {
        nb = b->next;
        for (srv_job *j = b->jobs, *nx; j; j = nx) {
            nx = j->next;
            j->next = NULL;
            atomic_fetch_sub(&q->depth, 1);
            srv__job_done(q->s, j);
        }
        ((srv_worker *)b->worker)->busy = 0;
        q->last_pass_s = b->seconds;
        free(b);
    }
    if (d) q->last_done = srv__now();
    schedule(q);
}

void srv__sched_flush(srv_sched *q) {
    q->flush = 1;
    schedule(q);
}

srv_sched *srv__sched_new(srv_server *s, uv_loop_t *loop, eng_err *err) {
    srv_sched *q = calloc(1, sizeof *q);
    if (!q) {
        eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    q->s = s;
    q->loop = loop;
    pthread_mutex_init(&q->inbox_mu, NULL);
    pthread_mutex_init(&q->done_mu, NULL);
    uv_async_init(loop, &q->inbox_async, inbox_cb);
    uv_async_init(loop, &q->done_async, done_cb);
    uv_timer_init(loop, &q->timer);
    q->inbox_async.data = q->done_async.data = q->timer.data = q;
    q->n_workers = s->cfg.workers;
    if (!(q->workers = calloc((size_t)q->n_workers, sizeof *q->workers))) goto oom;
    for (int i = 0; i < q->n_workers; i++) {
        srv_worker *w = &q->workers[i];
        w->q = q;
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        if (!(w->st = eng_state_new(s->cfg.threads))) goto oom;
        if (pthread_create(&w->th, NULL, worker_main, w)) {
            eng_state_free(w->st);
            w->st = NULL;
            eng_err_set(err, ENG_INTERNAL, "cannot start engine worker %d", i);
            srv__sched_free(q);
            return NULL;
        }
    }
    return q;
oom:
    eng_err_set(err, ENG_NO_MEMORY, "out of memory starting the engine workers");
    srv__sched_free(q);
    return NULL;
}

void srv__sched_free(srv_sched *q) {
    if (!q) return;
    for (int i = 0; q->workers && i < q->n_workers; i++) {
        srv_worker *w = &q->workers[i];
        if (w->st) {
            pthread_mutex_lock(&w->mu);
            w->stop = 1;
            pthread_cond_signal(&w->cv);
            pthread_mutex_unlock(&w->mu);
            pthread_join(w->th, NULL);
            eng_state_free(w->st);
        }
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
    }
    free(q->workers);
    pthread_mutex_destroy(&q->inbox_mu);
    pthread_mutex_destroy(&q->done_mu);
    free(q);
}
