/* bench_rows.c - what the row-independent products cost (engine/math/gemm.c): OpenBLAS's sgemm over
 * all rows (eng__gemm, column blocks over the pool: the products before rows had to be independent of
 * their batch), eng__gemm_rows (the operand packed per call) and eng__gemm_rows_p (packed once, as the
 * adapters' weights are at load: task/load.c), at the adapters' shapes and 1 to 1,024 rows.
 *
 *   bench_rows [--threads 2] [--rounds 15] [--rows M]   (--rows: that row count only)
 *
 * The machine this runs on is often shared, so the three run alternated in one process, round after
 * round, and each cell is the median over the rounds: load that comes and goes hits all three alike
 * and the ratios stay meaningful when the absolute times do not. Each timing repeats the product
 * over the same operand, which stays in cache: a server's 8 tasks' adapters do not, so there all
 * three also pay for reading the weights from memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "math/blas.h"
#include "math/pool.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    const char *name;
    int N, K, acc; /* acc: C += alpha A W^T (LoRA's B), alpha 2 */
} shape;

enum { OLD, ROWS, PACKED, WAYS };

/* One product, the `way` way. */
static void product(int way, eng_pool *pool, const shape *s, int M, const float *A, const float *W, const float *P,
                    float *C) {
    if (s->acc) {
        if (way == OLD) eng__gemm_acc(pool, M, s->N, s->K, 2.0f, A, s->K, W, s->K, C, s->N);
        else if (way == ROWS) eng__gemm_rows_acc(pool, M, s->N, s->K, 2.0f, A, s->K, W, s->K, C, s->N);
        else eng__gemm_rows_p_acc(pool, M, s->N, s->K, A, s->K, P, C, s->N);
        return;
    }
    if (way == OLD) eng__gemm(pool, M, s->N, s->K, A, s->K, W, s->K, C, s->N, NULL);
    else if (way == ROWS) eng__gemm_rows(pool, M, s->N, s->K, A, s->K, W, s->K, C, s->N, NULL);
    else eng__gemm_rows_p(pool, M, s->N, s->K, A, s->K, P, C, s->N, NULL);
}

int main(int argc, char **argv) {
    int threads = 2, rounds = 15, only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_rows [--threads 2] [--rounds 15] [--rows M]\n");
            return 2;
        }
    }
    if (threads < 1 || rounds < 1 || rounds > 101) {
        fprintf(stderr, "bench_rows: --threads >= 1, --rounds in 1..101\n");
        return 2;
    }
    static const shape shapes[] = {
        {"bottleneck down 64 x 768", 64, 768, 0},
        {"bottleneck up 768 x 64", 768, 64, 0},
        {"LoRA B r8 768 x 8 (acc)", 768, 8, 1},
        {"fusion 768 x 768", 768, 768, 0},
    };
    static const int rows[] = {1, 8, 128, 1024};
    eng__blas_init();
    eng_pool *pool = eng__pool_new(threads);
    size_t maxP = eng__packed_floats(768, 768);
    float *A = malloc(sizeof(float) * 1024 * 768), *W = malloc(sizeof(float) * 768 * 768);
    float *C = malloc(sizeof(float) * 1024 * 768), *P = aligned_alloc(64, maxP * sizeof(float));
    double *t = malloc(sizeof(double) * WAYS * (size_t)rounds);
    if (!pool || !A || !W || !C || !P || !t) {
        fprintf(stderr, "bench_rows: out of memory\n");
        return 1;
    }
    for (int i = 0; i < 1024 * 768; i++) A[i] = (float)(((unsigned)i * 7919u) % 1000u) / 1000.0f - 0.5f;
    for (int i = 0; i < 768 * 768; i++) W[i] = (float)(((unsigned)i * 104729u) % 1000u) / 5000.0f - 0.1f;
    memset(C, 0, sizeof(float) * 1024 * 768);
    printf("| product (N x K) | rows | sgemm over all rows, us | `eng__gemm_rows`, us | packed at load, us | "
           "packed / sgemm | packed / rows |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        eng__pack_strided(W, s->N, s->K, (size_t)s->K, 1, s->acc ? 2.0f : 1.0f, P);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            int M = rows[ri];
            if (only && M != only) continue;
            double flops = 2.0 * M * s->N * s->K;
            int reps = flops < 1e6 ? 400 : flops < 1e8 ? 40 : 6;
            for (int r = 0; r < rounds; r++)
                for (int w = 0; w < WAYS; w++) {
                    product(w, pool, s, M, A, W, P, C); /* warm */
                    double t0 = now_us();
                    for (int i = 0; i < reps; i++) product(w, pool, s, M, A, W, P, C);
                    t[w * rounds + r] = (now_us() - t0) / reps;
                }
            double med[WAYS];
            for (int w = 0; w < WAYS; w++) {
                qsort(t + w * rounds, (size_t)rounds, sizeof *t, cmp);
                med[w] = t[w * rounds + rounds / 2];
            }
            printf("| %s | %d | %.1f | %.1f | %.1f | %.2f | %.2f |\n", ri && !only ? "" : s->name, M, med[OLD], med[ROWS],
                   med[PACKED], med[PACKED] / med[OLD], med[PACKED] / med[ROWS]);
            fflush(stdout);
        }
    }
    free(A), free(W), free(C), free(P), free(t);
    eng__pool_free(pool);
    return 0;
}
