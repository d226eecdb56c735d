/* test_inbox.c - server/inbox.c: items pushed from any thread reach the loop's callback once each,
 * each thread's in the order it pushed them, with the lock released during the callback (the
 * callback pushes again without deadlocking); srv__inbox_run drains what is pending once the loop
 * has stopped. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#include "inbox.h"

enum { THREADS = 4, PER_THREAD = 5000 };

typedef struct {
    srv_inbox_node node;
    int thread, seq;
} item;

typedef struct {
    srv_inbox in;
    int seen[THREADS];   /* next seq expected per thread (loop thread only) */
    int total, batches, out_of_order;
    bool push_back;      /* the callback pushes one more item the first time */
    item extra;
} ctx_t;

static void on_items(srv_inbox *in, srv_inbox_node *first) {
    ctx_t *c = in->data;
    c->batches++;
    for (srv_inbox_node *n = first, *nx; n; n = nx) {
        nx = n->next;
        item *it = SRV_CONTAINER_OF(n, item, node);
        if (it->thread >= 0) {
            if (it->seq != c->seen[it->thread]) c->out_of_order++;
            c->seen[it->thread] = it->seq + 1;
        }
        c->total++;
    }
    if (c->push_back) {
        c->push_back = false;
        c->extra.thread = -1;
        srv__inbox_push(in, &c->extra.node); /* from inside the callback: the lock is not held */
    }
}

typedef struct {
    ctx_t *c;
    item *items;
    int thread;
} producer;

static void *produce(void *arg) {
    producer *p = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        p->items[i] = (item){.thread = p->thread, .seq = i};
        srv__inbox_push(&p->c->in, &p->items[i].node);
    }
    return NULL;
}

static void close_handle(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

Test(inbox, every_item_once_in_each_threads_order) {
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    static ctx_t c;
    memset(&c, 0, sizeof c);
    c.push_back = true;
    cr_assert_eq(srv__inbox_init(&c.in, &loop, on_items, &c), 0);
    static item items[THREADS][PER_THREAD];
    producer p[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        p[t] = (producer){&c, items[t], t};
        cr_assert_eq(pthread_create(&th[t], NULL, produce, &p[t]), 0);
    }
    const int want = THREADS * PER_THREAD + 1; /* + the callback's own push */
    for (int spins = 0; c.total < want && spins < 1000000; spins++) uv_run(&loop, UV_RUN_NOWAIT);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    srv__inbox_run(&c.in); /* whatever arrived after the last wake-up */
    cr_expect_eq(c.total, want, "every item once: %d of %d", c.total, want);
    cr_expect_eq(c.out_of_order, 0, "each thread's items in the order it pushed them");
    for (int t = 0; t < THREADS; t++) cr_expect_eq(c.seen[t], PER_THREAD);
    cr_expect_lt(c.batches, want, "wake-ups coalesce (%d callbacks for %d items)", c.batches, want);
    uv_walk(&loop, close_handle, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    srv__inbox_destroy(&c.in);
    cr_expect_eq(uv_loop_close(&loop), 0);
}

Test(inbox, run_drains_what_is_pending_after_the_loop_stopped) {
    uv_loop_t loop;
    cr_assert_eq(uv_loop_init(&loop), 0);
    static ctx_t c;
    memset(&c, 0, sizeof c);
    cr_assert_eq(srv__inbox_init(&c.in, &loop, on_items, &c), 0);
    item it[3] = {{.thread = 0, .seq = 0}, {.thread = 0, .seq = 1}, {.thread = 0, .seq = 2}};
    for (int i = 0; i < 3; i++) srv__inbox_push(&c.in, &it[i].node);
    cr_expect_eq(c.total, 0, "nothing runs before the loop or srv__inbox_run");
    srv__inbox_run(&c.in); /* the loop is not running: the owner drains by hand (srv__sched_stop does) */
    cr_expect_eq(c.total, 3);
    cr_expect_eq(c.out_of_order, 0);
    srv__inbox_run(&c.in);
    cr_expect_eq(c.batches, 1, "an empty inbox calls nothing");
    uv_walk(&loop, close_handle, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    srv__inbox_destroy(&c.in);
    uv_loop_close(&loop);
}
