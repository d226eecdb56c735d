/* pool.c - a fork-join pool for short parallel regions.
 *
 * A region is published by bumping `gen` under the mutex; workers notice it either while spinning
 * (the common case inside a forward pass, where regions follow each other within microseconds) or
 * through the condition variable after they gave up spinning. Tasks are claimed with an atomic
 * counter; the last worker to finish signals the caller. */
#include "math/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "math/cpu.h"

#define POOL_SPIN_ITERS 20000 /* ~50-100 us of spinning before sleeping */

struct eng_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers wait here for a new region */
    pthread_cond_t done; /* the caller waits here for the region to end */
    atomic_uint gen;     /* region generation */
    atomic_int next;     /* next task index */
    atomic_int active;   /* workers (excluding caller) still inside the region */
    atomic_int *claimed; /* (n_threads) one-task-each regions: task i is claimed by worker i, or stolen */
    int n_tasks;
    eng_pool_fn fn;
    void *ctx;
    int stop;
};

typedef struct {
    eng_pool *p;
    int id;
} pool_arg;

static void run_tasks(eng_pool *p, int worker) {
    if (p->n_tasks == p->n_threads) {
        /* One task each: a worker takes its own first, so one that wakes a little late still gets
         * its share instead of the caller running two in a row; then it takes any other still
         * unclaimed, so a worker that is preempted or asleep does not hold the region up. */
        for (int i = 0; i < p->n_threads; i++) {
            int t = (worker + i) % p->n_threads;
            if (!atomic_exchange_explicit(&p->claimed[t], 1, memory_order_relaxed)) p->fn(p->ctx, t, worker);
        }
        return;
    }
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, worker);
    }
}

static void *worker_main(void *arg) {
    pool_arg a = *(pool_arg *)arg;
    free(arg);
    eng_pool *p = a.p;
    unsigned seen = 0;
    eng__cpu_flush_denormals(); /* engine threads flush subnormals (math/cpu.h) */
    for (;;) {
        unsigned g = 0;
        for (int i = 0; i < POOL_SPIN_ITERS; i++) {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen) break;
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = g;
        if (p->stop) return NULL;
        run_tasks(p, a.id);
        if (atomic_fetch_sub_explicit(&p->active, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

eng_pool *eng__pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    eng_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->claimed = calloc((size_t)n_threads, sizeof *p->claimed);
    if (!p->claimed) goto fail;
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) goto fail;
        for (int i = 1; i < n_threads; i++) {
            pool_arg *a = malloc(sizeof *a);
            if (!a) goto fail_started;
            a->p = p;
            a->id = i;
            if (pthread_create(&p->threads[i - 1], NULL, worker_main, a) != 0) {
                free(a);
                goto fail_started;
            }
            continue;
        fail_started:
            p->n_threads = i; /* join only those started */
            eng__pool_free(p);
            return NULL;
        }
    }
    return p;
fail:
    free(p->claimed);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
    return NULL;
}

void eng__pool_free(eng_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    free(p->claimed);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int eng__pool_size(const eng_pool *p) { return p ? p->n_threads : 1; }

void eng__pool_run(eng_pool *p, int n_tasks, eng_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    eng__cpu_flush_denormals(); /* the caller works as worker 0: one MXCSR read when already set */
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    if (n_tasks == p->n_threads)
        for (int i = 0; i < n_tasks; i++) atomic_store_explicit(&p->claimed[i], 0, memory_order_relaxed);
    atomic_store(&p->active, p->n_threads - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, 0);
    for (int i = 0; i < POOL_SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->active, memory_order_acquire) == 0) return;
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active) != 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
