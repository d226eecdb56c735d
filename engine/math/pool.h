/* pool.h - the engine's own threads.
 *
 * The engine owns its thread count: OpenBLAS runs single-threaded inside each call (see blas.h)
 * and every parallel region, GEMMs included, is split here into tasks. A pool runs one parallel
 * region at a time; the calling thread works as worker 0, so a pool of n threads starts n-1.
 * Workers spin briefly before sleeping, because a forward pass issues ~100 short regions.
 *
 * Every thread that runs tasks, the caller included, flushes subnormal floats to zero (FTZ and
 * DAZ, set when a worker starts and when a region is run; see engine/math/cpu.h).
 *
 * A pool is not shared between concurrent callers: each engine worker owns one (inside its
 * eng_state). */
#ifndef ADAPTERD_ENGINE_MATH_POOL_H
#define ADAPTERD_ENGINE_MATH_POOL_H

typedef struct eng_pool eng_pool;

/* fn(ctx, task, worker) runs once for every task in [0, n_tasks); worker is in [0, n_threads). */
typedef void (*eng_pool_fn)(void *ctx, int task, int worker);

/* Creates a pool of n_threads (>= 1) threads including the caller; returns NULL on failure. */
eng_pool *eng__pool_new(int n_threads);

/* Stops and joins the workers; eng__pool_free(NULL) does nothing. */
void eng__pool_free(eng_pool *p);

/* Number of threads, the caller included. */
int eng__pool_size(const eng_pool *p);

/* Runs fn over n_tasks tasks and returns when all have finished. Tasks are handed out in order
 * from a shared counter, except that n_tasks == n_threads gives task i to worker i unless another
 * worker finished its own before worker i started. A NULL pool runs them all on the caller. */
void eng__pool_run(eng_pool *p, int n_tasks, eng_pool_fn fn, void *ctx);

#endif
