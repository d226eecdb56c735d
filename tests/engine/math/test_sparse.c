/* test_sparse.c - the CSR product against the double-precision dense reference (sparse.h). */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "math/blas.h"
#include "math/sparse.h"
#include "test_levels.h"
#include "test_rand.h"

static void product_matches_dense_at_each_sparsity_at_level(void *ctx) {
    (void)ctx;
    unsigned s = 3;
    int rows = 48, cols = 77;
    for (int pct = 0; pct <= 100; pct += 20)
        for (int M = 1; M <= 37; M += 12) {
            float *W = malloc(sizeof(float) * rows * cols), *X = malloc(sizeof(float) * M * cols);
            float *Y = malloc(sizeof(float) * M * (rows + 3)), *E = malloc(sizeof(float) * M * rows);
            cr_assert(W && X && Y && E);
            for (int i = 0; i < rows * cols; i++) {
                W[i] = (int)test_rand_below(&s, 100) < pct ? 0.0f : frand(&s, -1.0f, 1.0f);
            }
            for (int i = 0; i < M * cols; i++) {
                X[i] = frand(&s, -1.0f, 1.0f);
            }
            eng_sparse *sp = eng__sparse_from_dense(W, rows, cols);
            cr_assert(sp);
            cr_assert_float_eq(eng__sparsity(W, rows, cols), 1.0 - (double)sp->nnz / (rows * cols), 1e-12);
            eng__sparse_gemm(sp, M, X, cols, Y, rows + 3); /* strided output */
            eng__ref_gemm(M, rows, cols, X, cols, W, cols, NULL, E, rows);
            for (int m = 0; m < M; m++)
                for (int r = 0; r < rows; r++)
                    cr_assert_float_eq(Y[m * (rows + 3) + r], E[m * rows + r], 1e-4f, "pct %d M %d (%d,%d)", pct, M, m, r);
            eng__sparse_free(sp);
            free(W), free(X), free(Y), free(E);
        }
}

Test(sparse, product_matches_dense_at_each_sparsity) { cr_assert_geq(for_each_level(product_matches_dense_at_each_sparsity_at_level, NULL), 1); }
