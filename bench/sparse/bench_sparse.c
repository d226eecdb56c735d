/* bench_sparse.c - SparseAdapter / Large-Sparse: memory and speed of a bottleneck adapter stored
 * dense vs sparse (CSR), at 0/40/80% sparsity and 1x/2x/4x bottleneck width (d = 48/96/192 at
 * hidden 768, i.e. reduction factor 16/8/4), for 128 rows (one 128-token sequence).
 *
 *   bench_sparse [--rows 128] [--reps 50]
 *
 * Columns: dense storage + sgemm (the peer), the CSR kernel, and "expand": CSR storage expanded
 * into a scratch matrix per call + sgemm, which the engine uses where the CSR kernel is slower. All
 * on one thread, medians over --reps runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "math/blas.h"
#include "math/sparse.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int rows = 128, reps = 50, H = 768;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_sparse [--rows N] [--reps N]\n");
            return 2;
        }
    }
    eng__blas_init();
    printf("bottleneck adapter (down H->d, up d->H), hidden %d, %d rows, 1 thread, OpenBLAS core %s\n", H, rows,
           eng_blas_core());
    printf("%5s %8s %9s %9s %9s %9s %11s %9s %s\n", "d", "sparsity", "dense_KB", "csr_KB", "dense_us", "csr_us",
           "expand_us", "csr/dense", "engine runs");
    unsigned s = 1;
    float *X = malloc(sizeof(float) * rows * H), *D = malloc(sizeof(float) * rows * 192),
          *Y = malloc(sizeof(float) * rows * H);
    double *t = malloc(sizeof(double) * reps);
    if (!X || !D || !Y || !t) return 1;
    for (int i = 0; i < rows * H; i++) X[i] = (float)(i % 97) / 97.0f - 0.5f;
    int widths[3] = {48, 96, 192};
    double sp[3] = {0.0, 0.4, 0.8};
    for (int wi = 0; wi < 3; wi++)
        for (int si = 0; si < 3; si++) {
            int d = widths[wi];
            float *Wd = malloc(sizeof(float) * d * H), *Wu = malloc(sizeof(float) * H * d);
            if (!Wd || !Wu) return 1;
            for (int i = 0; i < d * H; i++) {
                Wd[i] = frand(&s, 0, 1) < sp[si] ? 0.0f : 0.01f * (float)((int)test_rand_below(&s, 200) - 100);
                Wu[i] = frand(&s, 0, 1) < sp[si] ? 0.0f : 0.01f * (float)((int)test_rand_below(&s, 200) - 100);
            }
            eng_sparse *sd = eng__sparse_from_dense(Wd, d, H), *su = eng__sparse_from_dense(Wu, H, d);
            if (!sd || !su) return 1;
            for (int r = 0; r < reps; r++) {
                double t0 = now_us();
                eng__gemm(NULL, rows, d, H, X, H, Wd, H, D, d, NULL);
                eng__gemm(NULL, rows, H, d, D, d, Wu, d, Y, H, NULL);
                t[r] = now_us() - t0;
            }
            double dense = bench_median(t, reps);
            for (int r = 0; r < reps; r++) {
                double t0 = now_us();
                eng__sparse_gemm(sd, rows, X, H, D, d);
                eng__sparse_gemm(su, rows, D, d, Y, H);
                t[r] = now_us() - t0;
            }
            double sparse = bench_median(t, reps);
            float *Wx = malloc(sizeof(float) * 2 * d * H);
            if (!Wx) return 1;
            for (int r = 0; r < reps; r++) { /* what the engine does when the CSR kernel would be slower */
                double t0 = now_us();
                eng__sparse_to_dense(sd, Wx);
                eng__sparse_to_dense(su, Wx + (size_t)d * H);
                eng__gemm(NULL, rows, d, H, X, H, Wx, H, D, d, NULL);
                eng__gemm(NULL, rows, H, d, D, d, Wx + (size_t)d * H, d, Y, H, NULL);
                t[r] = now_us() - t0;
            }
            double expand = bench_median(t, reps);
            free(Wx);
            printf("%5d %7.0f%% %9.1f %9.1f %9.1f %9.1f %11.1f %8.2fx %s\n", d, 100 * sp[si], 2.0 * d * H * 4 / 1024.0,
                   (eng__sparse_bytes(sd) + eng__sparse_bytes(su)) / 1024.0, dense, sparse, expand, dense / sparse,
                   eng__sparse_prefer_kernel(sd) ? "csr kernel" : "expand + sgemm");
            eng__sparse_free(sd);
            eng__sparse_free(su);
            free(Wd);
            free(Wu);
        }
    free(X), free(D), free(Y), free(t);
    return 0;
}
