/* rows.c - row-parallel LayerNorm and activation (rows.h).
 *
 * LayerNorm gets four blocks per thread when there are enough rows, so a thread that wakes late
 * still finds work; an activation is cheap enough that one block per thread balances. */
#include "math/rows.h"

#include <stddef.h>

typedef struct {
    float *x;
    int rows, dim, chunk;
    const float *g, *b;
    float eps;
} ln_job;

static void ln_task(void *ctx, int task, int worker) {
    (void)worker;
    ln_job *j = ctx;
    int r0 = task * j->chunk, n = j->rows - r0 < j->chunk ? j->rows - r0 : j->chunk;
    if (n > 0) eng__layernorm(j->x + (size_t)r0 * j->dim, (size_t)n, (size_t)j->dim, j->g, j->b, j->eps);
}

void eng__layernorm_rows(eng_pool *pool, float *x, int rows, int dim, const float *g, const float *b, float eps) {
    int tasks = eng__pool_size(pool) * 4;
    if (rows < tasks * 4) tasks = rows < eng__pool_size(pool) ? 1 : eng__pool_size(pool);
    ln_job j = {x, rows, dim, (rows + tasks - 1) / tasks, g, b, eps};
    eng__pool_run(pool, tasks, ln_task, &j);
}

typedef struct {
    float *x;
    int rows, cols, chunk;
    eng_act act;
} act_job;

static void act_task(void *ctx, int task, int worker) {
    (void)worker;
    act_job *j = ctx;
    int r0 = task * j->chunk, n = j->rows - r0 < j->chunk ? j->rows - r0 : j->chunk;
    if (n > 0) eng__act_apply(j->act, j->x + (size_t)r0 * j->cols, (size_t)n * j->cols);
}

void eng__act_rows(eng_pool *pool, eng_act act, float *x, int rows, int cols) {
    int tasks = eng__pool_size(pool);
    act_job j = {x, rows, cols, (rows + tasks - 1) / tasks, act};
    eng__pool_run(pool, tasks, act_task, &j);
}
