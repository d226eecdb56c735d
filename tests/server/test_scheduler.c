/* test_scheduler.c - server/scheduler.c on a real libuv loop and engine workers, without HTTP: the
 * fixture registry's bert-tiny runs embed jobs (the encoder alone, so no task is needed) and the
 * hooks record what the scheduler did. Admission (places in max_queue taken and given back), jobs
 * that arrive within the quiet window share one batch, the token budget splits batches, and the
 * drain deadline (srv__sched_cancel) fails every queued job with its code and hands it back. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <string.h>

#include "scheduler.h"

static store_registry *reg;
static store_task *task; /* holds the model */
static uv_loop_t loop;
static srv_metrics *metrics;

typedef struct {
    int responded, failed, done;
    eng_status fail_code;
    char fail_msg[128];
} record;
static record rec;

static void on_respond(void *ctx, srv_job *j, const eng_task_out *o, const eng_plan_stats *s) {
    (void)ctx, (void)j, (void)o, (void)s;
    cr_expect_fail("a task answer for an embed job");
}
static void on_respond_embed(void *ctx, srv_job *j, const float *hidden, const float *pooled) {
    (void)ctx, (void)pooled;
    int H = eng_model_config(store_model_engine(j->model))->hidden;
    float sum = 0;
    for (int i = 0; i < j->tokens * H; i++) sum += hidden[i] * hidden[i];
    if (sum > 0) __atomic_fetch_add(&rec.responded, 1, __ATOMIC_RELAXED); /* worker thread */
}
static void on_fail(void *ctx, srv_job *j, eng_status code, const char *msg) {
    (void)ctx, (void)j;
    __atomic_fetch_add(&rec.failed, 1, __ATOMIC_RELAXED);
    rec.fail_code = code;
    snprintf(rec.fail_msg, sizeof rec.fail_msg, "%s", msg);
}
static void on_done(void *ctx, srv_job *j) { /* loop thread */
    (void)ctx;
    cr_expect_gt(j->t_submit, 0);
    rec.done++;
}
static void on_abandon(void *ctx, srv_job *j) { (void)ctx, (void)j; }

static void setup(void) {
    eng_err e = {0};
    store_params sp = store_default_params();
    cr_assert_eq(store_open(ADAPTERD_FIXTURES "/registry", &sp, &reg, &e), 0, "%s", e.msg);
    cr_assert(task = store_task_acquire(reg, "cls_lora", 8));
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert(metrics = srv__metrics_new(NULL));
    memset(&rec, 0, sizeof rec);
}

static void close_handle(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void teardown(void) {
    uv_loop_close(&loop);
    srv__metrics_free(metrics);
    store_task_release(task);
    store_free(reg);
}

TestSuite(scheduler, .init = setup, .fini = teardown, .timeout = 60);

static srv_sched *start(int max_queue, int max_batch_tokens, int max_wait_us) {
    srv_sched_params p = {.workers = 1, .threads = 1, .max_queue = max_queue, .max_batch_tokens = max_batch_tokens,
                          .max_wait_us = max_wait_us, .metrics = metrics};
    srv_sched_hooks h = {.respond = on_respond, .respond_embed = on_respond_embed, .fail = on_fail, .done = on_done,
                         .abandon = on_abandon};
    srv_sched *q = NULL;
    eng_err e = {0};
    cr_assert_eq(srv__sched_start(&loop, &p, h, &q, &e), 0, "%s", e.msg);
    return q;
}

static void finish(srv_sched *q) {
    srv__sched_stop(q);
    uv_walk(&loop, close_handle, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    srv__sched_free(q);
}

/* An embed job of one text, tokenized with the model's tokenizer. */
static srv_job *embed_job(const char *text) {
    srv_job *j = calloc(1, sizeof *j);
    cr_assert(j);
    j->embed = true;
    j->model = store_task_model(task);
    j->n_inputs = 1;
    j->pooling = PROTO_POOL_CLS;
    cr_assert(j->enc = calloc(1, sizeof *j->enc));
    eng_tok_params tp = eng_tok_default_params();
    eng_err e = {0};
    cr_assert_eq(eng_tok_encode(store_model_tokenizer(j->model), text, strlen(text), NULL, 0, &tp, &j->enc[0], &e), 0, "%s",
                 e.msg);
    j->tokens = (int)j->enc[0].n;
    return j;
}

static void jobs_free(srv_job **j, int n) {
    for (int i = 0; i < n; i++) {
        eng_tok_encoding_free(&j[i]->enc[0]);
        free(j[i]->enc);
        free(j[i]);
    }
}

/* Runs the loop until n jobs are done (bounded). */
static void run_until_done(int n) {
    for (int spins = 0; rec.done < n && spins < 2000000; spins++) uv_run(&loop, UV_RUN_ONCE);
}

Test(scheduler, admission_takes_and_gives_back_places) {
    srv_sched *q = start(3, 8192, 500);
    for (int i = 0; i < 3; i++) cr_expect_eq(srv__sched_admit(q, SRV_PRIO_INTERACTIVE), 0, "place %d of 3", i + 1);
    cr_expect_eq(srv__sched_admit(q, SRV_PRIO_INTERACTIVE), ENG_BUSY, "a fourth is refused");
    cr_expect_eq(srv__sched_admitted(q), 3, "a refusal holds nothing");
    srv__sched_release(q);
    cr_expect_eq(srv__sched_admitted(q), 2);
    cr_expect_eq(srv__sched_admit(q, SRV_PRIO_INTERACTIVE), 0, "a place given back is free again");
    /* a job takes over its request's place and gives it back when done */
    srv_job *j = embed_job("the place goes with the job");
    srv__sched_release(q), srv__sched_release(q); /* two requests answered without a job */
    cr_expect_eq(srv__sched_admitted(q), 1);
    srv__sched_submit(q, j);
    cr_expect_eq(srv__sched_depth(q), 1, "one job in the batcher");
    run_until_done(1);
    cr_expect_eq(srv__sched_depth(q), 0);
    cr_expect_eq(rec.done, 1);
    cr_expect_eq(rec.responded, 1);
    cr_expect_eq(srv__sched_admitted(q), 0, "done: the place is free");
    finish(q);
    jobs_free(&j, 1);
}

Test(scheduler, jobs_within_the_quiet_window_share_a_batch) {
    srv_sched *q = start(16, 8192, 300000); /* 300 ms window: the three arrive well within it */
    srv_job *j[3] = {embed_job("one"), embed_job("two words"), embed_job("and three words")};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(srv__sched_admit(q, SRV_PRIO_INTERACTIVE), 0);
        srv__sched_submit(q, j[i]);
    }
    run_until_done(3);
    cr_expect_eq(rec.responded, 3);
    int toks = j[0]->tokens + j[1]->tokens + j[2]->tokens;
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(j[i]->batch_requests, 3, "job %d ran in a batch of %d", i, j[i]->batch_requests);
        cr_expect_eq(j[i]->batch_tokens, toks);
        cr_expect_geq(j[i]->t_start, j[i]->t_submit);
    }
    cr_expect_eq(srv__sched_admitted(q), 0);
    finish(q);
    jobs_free(j, 3);
}

Test(scheduler, the_token_budget_splits_batches) {
    srv_job *j[3] = {embed_job("one two three"), embed_job("four five six"), embed_job("seven eight nine")};
    srv_sched *q = start(16, j[0]->tokens, 300000); /* room for one job's tokens a batch */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(srv__sched_admit(q, SRV_PRIO_INTERACTIVE), 0);
        srv__sched_submit(q, j[i]);
    }
    run_until_done(3);
    cr_expect_eq(rec.responded, 3);
    for (int i = 0; i < 3; i++) cr_expect_eq(j[i]->batch_requests, 1, "job %d: batch of %d", i, j[i]->batch_requests);
    finish(q);
    jobs_free(j, 3);
}

Test(scheduler, cancel_fails_queued_jobs_and_hands_them_back) {
    srv_sched *q = start(16, 8192, 10000000); /* a 10 s window: nothing runs before the cancel */
    srv_job *j[3] = {embed_job("a"), embed_job("b"), embed_job("c")};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(srv__sched_admit(q, SRV_PRIO_INTERACTIVE), 0);
        srv__sched_submit(q, j[i]);
    }
    for (int i = 0; i < 50; i++) uv_run(&loop, UV_RUN_NOWAIT); /* the inbox delivers them to the queue */
    cr_expect_eq(rec.done, 0, "still waiting for the window");
    cr_expect_eq(srv__sched_cancel(q, ENG_UNAVAILABLE, "stopping"), 0, "no job was in a pass");
    cr_expect_eq(rec.failed, 2);
    cr_expect_eq(rec.done, 2);
    cr_expect_eq(rec.fail_code, ENG_UNAVAILABLE);
    cr_expect_str_eq(rec.fail_msg, "stopping");
    cr_expect_eq(srv__sched_admitted(q), 0);
    /* after the deadline a job fails as soon as the loop sees it */
    cr_assert_eq(srv__sched_admit(q, SRV_PRIO_INTERACTIVE), 0);
    srv__sched_submit(q, j[2]);
    run_until_done(3);
    cr_expect_eq(rec.failed, 3);
    cr_expect_eq(rec.responded, 0, "nothing ran");
    cr_expect_eq(srv__sched_admitted(q), 0);
    finish(q);
    jobs_free(j, 3);
}
