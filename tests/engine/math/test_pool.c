/* test_pool.c - every task runs exactly once, across many back-to-back regions. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "math/pool.h"

typedef struct {
    atomic_int *hits;
    atomic_int workers_seen[8];
} job;

static void count(void *ctx, int task, int worker) {
    job *j = ctx;
    atomic_fetch_add(&j->hits[task], 1);
    atomic_fetch_add(&j->workers_seen[worker], 1);
}

Test(pool, each_task_once) {
    for (int threads = 1; threads <= 4; threads++) {
        eng_pool *p = eng_pool_new(threads);
        cr_assert(p);
        cr_assert_eq(eng_pool_size(p), threads);
        static atomic_int hits[1000];
        for (int round = 0; round < 300; round++) {
            int n = 1 + (round * 37) % 1000;
            for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
            job j = {.hits = hits};
            eng_pool_run(p, n, count, &j);
            for (int i = 0; i < n; i++) cr_assert_eq(atomic_load(&hits[i]), 1, "threads %d round %d task %d", threads, round, i);
        }
        eng_pool_free(p);
    }
    eng_pool_free(NULL);
}
