/* bench_util.c - see bench_util.h. */
#include "bench_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "math/blas.h"
#include "core/tensor.h"

double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench_parse_list(const char *s, int *v, int max) {
    int n = 0;
    while (*s && n < max) {
        v[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

double bench_sgemm_peak(eng_pool *pool, int reps) {
    int M = 2048, N = 3072, K = 768;
    float *A = eng__alloc_aligned(sizeof(float) * M * K), *W = eng__alloc_aligned(sizeof(float) * N * K),
          *C = eng__alloc_aligned(sizeof(float) * M * N);
    double best = 1e30;
    if (A && W && C) {
        for (int i = 0; i < M * K; i++) A[i] = (float)(i % 17) * 0.01f;
        for (int i = 0; i < N * K; i++) W[i] = (float)(i % 13) * 0.01f;
        for (int r = 0; r < reps + 2; r++) {
            double t = bench_now_ms();
            eng__gemm(pool, M, N, K, A, K, W, K, C, N, NULL);
            t = bench_now_ms() - t;
            if (r >= 2 && t < best) best = t;
        }
    }
    eng__free_aligned(A), eng__free_aligned(W), eng__free_aligned(C);
    return best < 1e30 ? 2.0 * M * N * (double)K / (best * 1e6) : 0;
}

void bench_random_ids(int32_t *ids, int n, unsigned seed, int lo, int hi) {
    unsigned s = seed;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((unsigned)lo + test_rand_bits(&s) % (unsigned)(hi - lo));
}

typedef struct {
    bench_loop_fn loop;
    long iters;
} peak_job;

static void peak_task(void *ctx, int task, int worker) {
    (void)task, (void)worker;
    const peak_job *j = ctx;
    j->loop(j->iters);
}

double bench_peak_loop(eng_pool *pool, bench_loop_fn loop, long iters, double ops) {
    peak_job j = {loop, iters};
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t = bench_now_ms();
        eng__pool_run(pool, eng__pool_size(pool), peak_task, &j);
        t = bench_now_ms() - t;
        if (t < best) best = t;
    }
    return ops * (double)iters * eng__pool_size(pool) / (best * 1e6);
}
