/* test_pool.c - every task runs exactly once, across many back-to-back regions, on the pool's own
 * workers; a region of one task per thread runs them all at the same time, one per worker. */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "math/pool.h"

enum { MAX_THREADS = 4 };

typedef struct {
    atomic_int *hits;
    atomic_int workers_seen[MAX_THREADS];
    atomic_int bad_worker; /* a worker index outside [0, threads) */
    int threads;
} job;

static void count(void *ctx, int task, int worker) {
    job *j = ctx;
    atomic_fetch_add(&j->hits[task], 1);
    if (worker < 0 || worker >= j->threads) {
        atomic_store(&j->bad_worker, 1);
        return;
    }
    atomic_fetch_add(&j->workers_seen[worker], 1);
}

Test(pool, each_task_once) {
    for (int threads = 1; threads <= MAX_THREADS; threads++) {
        eng_pool *p = eng__pool_new(threads);
        cr_assert(p);
        cr_assert_eq(eng__pool_size(p), threads);
        static atomic_int hits[1000];
        for (int round = 0; round < 300; round++) {
            int n = 1 + (round * 37) % 1000;
            for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
            job j = {.hits = hits, .threads = threads};
            eng__pool_run(p, n, count, &j);
            for (int i = 0; i < n; i++) cr_assert_eq(atomic_load(&hits[i]), 1, "threads %d round %d task %d", threads, round, i);
            cr_assert_eq(atomic_load(&j.bad_worker), 0, "threads %d round %d: a worker index out of range", threads, round);
            int by_workers = 0;
            for (int w = 0; w < threads; w++) by_workers += atomic_load(&j.workers_seen[w]);
            cr_assert_eq(by_workers, n, "threads %d round %d: workers ran %d of %d tasks", threads, round, by_workers, n);
        }
        eng__pool_free(p);
    }
    eng__pool_free(NULL);
}

/* Each task waits (up to 10 s) until all have started: they can only all finish if the pool runs
 * them at the same time, and then each worker runs its own (engine/math/pool.h). */
typedef struct {
    int n;
    atomic_int started, timed_out;
    atomic_int worker_of[MAX_THREADS];
} meeting;

static void meet(void *ctx, int task, int worker) {
    meeting *j = ctx;
    atomic_store(&j->worker_of[task], worker);
    atomic_fetch_add(&j->started, 1);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&j->started) < j->n) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 10) {
            atomic_store(&j->timed_out, 1);
            return;
        }
        sched_yield();
    }
}

Test(pool, one_task_per_thread_runs_on_every_worker_at_once) {
    for (int threads = 2; threads <= MAX_THREADS; threads++) {
        eng_pool *p = eng__pool_new(threads);
        cr_assert(p);
        for (int round = 0; round < 20; round++) {
            meeting j = {.n = threads};
            for (int i = 0; i < threads; i++) atomic_store(&j.worker_of[i], -1);
            eng__pool_run(p, threads, meet, &j);
            cr_assert_eq(atomic_load(&j.timed_out), 0, "threads %d round %d: the tasks did not run at once", threads,
                         round);
            for (int i = 0; i < threads; i++)
                cr_assert_eq(atomic_load(&j.worker_of[i]), i, "threads %d round %d: task %d ran on worker %d", threads,
                             round, i, atomic_load(&j.worker_of[i]));
        }
        eng__pool_free(p);
    }
}
