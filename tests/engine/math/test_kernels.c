/* test_kernels.c - each fast kernel against its reference (kernels.h, blas.h), at every CPU level this
 * machine has (test_levels.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/blas.h"
#include "math/kernels.h"

#include "test_levels.h"
#include "test_rand.h"

static void activations_match_reference_at_level(void *ctx) {
    (void)ctx;
    /* Tolerances: the fast exp is ~2 ulp and erf's fit has fractional error 1.2e-7, so each
     * activation stays within 2e-6 relative + 2e-7 absolute of the double-precision reference. */
    enum { N = 20001 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    cr_assert(a && b);
    for (int act = 0; act < ENG_ACT_COUNT; act++) {
        for (int i = 0; i < N; i++) a[i] = b[i] = -20.0f + 40.0f * (float)i / (N - 1);
        eng__act_apply((eng_act)act, a, N);
        eng__ref_act_apply((eng_act)act, b, N);
        for (int i = 0; i < N; i++)
            cr_assert(fabsf(a[i] - b[i]) <= 2e-7f + 2e-6f * fabsf(b[i]), "%s(%g): fast %.9g ref %.9g",
                      eng_act_name((eng_act)act), -20.0 + 40.0 * i / (N - 1), a[i], b[i]);
    }
    free(a);
    free(b);
}

Test(kernels, activations_match_reference) { cr_assert_geq(for_each_level(activations_match_reference_at_level, NULL), 1); }

/* GELU runs 48 values at a time, each step over the block (elem_impl.h, gelu_block), and the rest of a
 * call one value at a time: both must give the same bits for every input, NaN and the infinities
 * included (a call of one value takes the second path, so each value is also run alone). */
static void gelu_block_same_bits_at_level(void *ctx) {
    (void)ctx;
    enum { N = 48 * 21 + 5 };
    float x[N], y[N];
    unsigned s = 5;
    for (int i = 0; i < N; i++) x[i] = frand(&s, -12.0f, 12.0f);
    x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 0.0f, x[4] = -0.0f, x[5] = 3.0e38f, x[6] = -3.0e38f;
    x[7] = 1e-30f, x[50] = NAN, x[97] = -1e-30f;
    for (int i = 0; i < N; i++) y[i] = x[i];
    eng__act_apply(ENG_ACT_GELU, x, N);
    for (int i = 0; i < N; i++) {
        eng__act_apply(ENG_ACT_GELU, y + i, 1);
        cr_assert(isnan(x[i]) ? isnan(y[i]) : !memcmp(&x[i], &y[i], sizeof x[i]), "GELU [%d]: block %.9g alone %.9g",
                  i, x[i], y[i]);
    }
}

Test(kernels, gelu_block_same_bits) { cr_assert_geq(for_each_level(gelu_block_same_bits_at_level, NULL), 1); }

Test(kernels, act_names) {
    cr_assert_eq(eng_act_from_name("gelu"), ENG_ACT_GELU);
    cr_assert_eq(eng_act_from_name("swish"), ENG_ACT_SILU);
    cr_assert_eq(eng_act_from_name("gelu_new"), ENG_ACT_GELU_NEW);
    cr_assert_eq(eng_act_from_name("RELU"), ENG_ACT_RELU);
    cr_assert_eq(eng_act_from_name("no-such-act"), -1);
}

static void exp_relative_error_at_level(void *ctx) {
    (void)ctx;
    enum { N = 100000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    cr_assert(x && y);
    for (int i = 0; i < N; i++) x[i] = -87.0f + 175.0f * (float)i / (N - 1);
    eng__exp(y, x, N);
    for (int i = 0; i < N; i++) {
        double r = exp((double)x[i]);
        cr_assert(fabs(y[i] - r) <= 3e-7 * r, "exp(%g) = %.9g, want %.9g", x[i], y[i], r);
    }
    free(x);
    free(y);
}

Test(kernels, exp_relative_error) { cr_assert_geq(for_each_level(exp_relative_error_at_level, NULL), 1); }

static void layernorm_and_softmax_at_level(void *ctx) {
    (void)ctx;
    unsigned s = 7;
    enum { R = 5, D = 771 };
    float *a = malloc(R * D * sizeof *a), *b = malloc(R * D * sizeof *b), g[D], bb[D];
    cr_assert(a && b);
    for (int i = 0; i < D; i++) {
        g[i] = frand(&s, 0.5f, 1.5f);
        bb[i] = frand(&s, -0.5f, 0.5f);
    }
    for (int i = 0; i < R * D; i++) a[i] = b[i] = frand(&s, -30.0f, 50.0f);
    eng__layernorm(a, R, D, g, bb, 1e-12f);
    eng__ref_layernorm(b, R, D, g, bb, 1e-12f);
    for (int i = 0; i < R * D; i++) cr_assert_float_eq(a[i], b[i], 2e-5f, "layernorm[%d]: %g vs %g", i, a[i], b[i]);
    for (int i = 0; i < D; i++) a[i] = b[i] = frand(&s, -40.0f, 40.0f);
    eng__softmax_row(a, D);
    eng__ref_softmax_row(b, D);
    double sum = 0;
    for (int i = 0; i < D; i++) {
        cr_assert(fabsf(a[i] - b[i]) <= 1e-7f + 1e-6f * b[i], "softmax[%d]: %g vs %g", i, a[i], b[i]);
        sum += a[i];
    }
    cr_assert_float_eq(sum, 1.0, 1e-5);
    free(a);
    free(b);
}

Test(kernels, layernorm_and_softmax) { cr_assert_geq(for_each_level(layernorm_and_softmax_at_level, NULL), 1); }

/* Softmax over rows at a stride runs four rows at once (elem_impl.h, softmax_4rows) and the rest one at
 * a time: every row must have the bits it has alone (one row alone is checked against the reference
 * above), and the values past each row's n stay untouched. Widths below, at and past 16 lanes, with
 * tails; 4 + 4 + 3 rows; a -inf (a masked score) in one row and a NaN in another. */
static void softmax_rows_same_bits_at_level(void *ctx) {
    (void)ctx;
    enum { R = 11, LD = 141 };
    static const int widths[] = {1, 7, 16, 37, 128, 139};
    static float x[R * LD], y[R * LD];
    unsigned s = 9;
    for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
        int n = widths[w];
        for (int i = 0; i < R * LD; i++) x[i] = y[i] = frand(&s, -30.0f, 30.0f);
        if (n > 3) x[2 * LD + 3] = y[2 * LD + 3] = -INFINITY;
        x[5 * LD] = y[5 * LD] = NAN;
        eng__softmax_rows(x, R, (size_t)n, LD);
        for (int r = 0; r < R; r++) eng__softmax_row(y + r * LD, (size_t)n);
        for (int r = 0; r < R; r++)
            for (int i = 0; i < LD; i++) {
                float a = x[r * LD + i], b = y[r * LD + i];
                cr_assert(isnan(a) ? isnan(b) : !memcmp(&a, &b, sizeof a), "width %d row %d [%d]: rows %.9g alone %.9g",
                          n, r, i, a, b);
            }
    }
}

Test(kernels, softmax_rows_same_bits) { cr_assert_geq(for_each_level(softmax_rows_same_bits_at_level, NULL), 1); }

Test(kernels, gemm_split_and_epilogue) {
    /* The pool-split GEMM with bias + GELU + residual against the double-precision reference, on
     * sizes that do not divide evenly into blocks. */
    unsigned s = 11;
    int M = 37, N = 301, K = 129;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *R = malloc(sizeof(float) * M * N), *C = malloc(sizeof(float) * M * N), *E = malloc(sizeof(float) * M * N);
    cr_assert(A && W && bias && R && C && E);
    for (int i = 0; i < M * K; i++) A[i] = frand(&s, -1, 1);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.2f, 0.2f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s, -1, 1);
    for (int i = 0; i < M * N; i++) R[i] = frand(&s, -1, 1);
    eng__blas_init();
    eng_pool *pool = eng__pool_new(3);
    cr_assert(pool);
    eng_epilogue ep = {.bias = bias, .act = ENG_ACT_GELU, .residual = R, .ldr = N};
    eng__gemm(pool, M, N, K, A, K, W, K, C, N, &ep);
    eng__ref_gemm(M, N, K, A, K, W, K, bias, E, N);
    eng__ref_act_apply(ENG_ACT_GELU, E, (size_t)M * N);
    for (int i = 0; i < M * N; i++) {
        E[i] += R[i];
        cr_assert_float_eq(C[i], E[i], 1e-5f, "C[%d]: %g vs %g", i, C[i], E[i]);
    }
    eng__pool_free(pool);
    free(A), free(W), free(bias), free(R), free(C), free(E);
}

Test(kernels, gemm_prefill_epilogues) {
    /* Many rows, uneven blocks; bias + residual with no activation (written into C before the
     * product, which accumulates), bias alone with an activation after it, and no epilogue. */
    unsigned s = 12;
    int M = 1300, N = 333, K = 40;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *R = malloc(sizeof(float) * M * N), *C = malloc(sizeof(float) * M * N), *E = malloc(sizeof(float) * M * N);
    cr_assert(A && W && bias && R && C && E);
    for (int i = 0; i < M * K; i++) A[i] = frand(&s, -1, 1);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.3f, 0.3f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s, -1, 1);
    for (int i = 0; i < M * N; i++) R[i] = frand(&s, -1, 1);
    eng__blas_init();
    eng_pool *pool = eng__pool_new(2);
    cr_assert(pool);
    eng__ref_gemm(M, N, K, A, K, W, K, bias, E, N);
    eng_epilogue ep = {.bias = bias, .act = ENG_ACT_IDENTITY, .residual = R, .ldr = N};
    for (int i = 0; i < M * N; i++) C[i] = NAN; /* every element must be written */
    eng__gemm(pool, M, N, K, A, K, W, K, C, N, &ep);
    for (int i = 0; i < M * N; i++) cr_assert_float_eq(C[i], E[i] + R[i], 1e-5f, "C[%d]: %g vs %g", i, C[i], E[i] + R[i]);
    eng_epilogue ep2 = {.bias = bias, .act = ENG_ACT_RELU};
    for (int i = 0; i < M * N; i++) C[i] = NAN;
    eng__gemm(pool, M, N, K, A, K, W, K, C, N, &ep2);
    for (int i = 0; i < M * N; i++) cr_assert_float_eq(C[i], E[i] > 0 ? E[i] : 0.0f, 1e-5f, "C[%d]", i);
    for (int i = 0; i < M * N; i++) C[i] = NAN;
    eng__gemm(pool, M, N, K, A, K, W, K, C, N, NULL);
    eng__ref_gemm(M, N, K, A, K, W, K, NULL, E, N);
    for (int i = 0; i < M * N; i++) cr_assert_float_eq(C[i], E[i], 1e-5f, "C[%d]", i);
    eng__pool_free(pool);
    free(A), free(W), free(bias), free(R), free(C), free(E);
}
