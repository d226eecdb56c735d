/* test_gemm.c - eng__gemm_rows and eng__gemm_rows_acc (engine/math/gemm.c): one row's result is the
 * same bits whatever the number of rows it is computed with, at every level of this CPU (and under
 * every OpenBLAS core: the narrow products call sgemm, ctest runs this file with several).
 *
 * Why: the engine packs every sequence of a batch into one product, so a short input beside a
 * long one shares the adapters', heads' and pooler's products with hundreds of other rows. With
 * OpenBLAS's sgemm the summation order of a row changed with the row count (its small-matrix path
 * below a size, the column blocks cut from the FLOP count), and a LoRA task's logits moved by
 * ~1e-6 beside a long input. The products now sum every row in one fixed order. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/blas.h"
#include "math/kernels.h"

#include "test_levels.h"
#include "test_rand.h"

typedef struct {
    int N, K, acc, epilogue; /* epilogue: 0 none, 1 bias, 2 bias + gelu + residual */
} shape;

/* The shapes the engine runs through eng__gemm_rows: LoRA's A and B (rank 8 and 16), a bottleneck's
 * down and up projections, fusion's and the pooler's H x H, narrow products with every epilogue;
 * and a K long enough for several 192-long steps. */
static const shape shapes[] = {
    {8, 768, 0, 0},   {768, 8, 1, 0},   {16, 768, 0, 0}, {768, 16, 1, 0}, {64, 768, 0, 1},
    {768, 64, 0, 2},  {768, 768, 0, 1}, {2, 768, 0, 1},  {1, 768, 0, 1},  {301, 1000, 0, 2},
    {8, 768, 0, 2},   {47, 100, 1, 0},  {48, 100, 0, 2},
};

static const int row_counts[] = {1, 2, 3, 7, 8, 9, 16, 31, 64, 100, 257, 600};

/* P: W packed at load (eng__gemm_rows_p), with the accumulating form's alpha in it, or NULL. */
static void run(eng_pool *pool, const shape *sh, int M, const float *A, int lda, const float *W, const float *P,
                const float *bias, const float *R, float *C, int ldc) {
    if (sh->acc) {
        for (int m = 0; m < M; m++) memcpy(C + (size_t)m * ldc, R + (size_t)m * ldc, sizeof(float) * (size_t)sh->N);
        if (P)
            eng__gemm_rows_p_acc(pool, M, sh->N, sh->K, A, lda, P, C, ldc);
        else
            eng__gemm_rows_acc(pool, M, sh->N, sh->K, 2.0f, A, lda, W, sh->K, C, ldc);
        return;
    }
    eng_epilogue ep = {.bias = bias, .act = sh->epilogue == 2 ? ENG_ACT_GELU : ENG_ACT_IDENTITY,
                       .residual = sh->epilogue == 2 ? R : NULL, .ldr = ldc};
    if (P)
        eng__gemm_rows_p(pool, M, sh->N, sh->K, A, lda, P, C, ldc, sh->epilogue ? &ep : NULL);
    else
        eng__gemm_rows(pool, M, sh->N, sh->K, A, lda, W, sh->K, C, ldc, sh->epilogue ? &ep : NULL);
}

/* Every row of an M-row product against the same row computed alone, and against the rows at the
 * start of a larger product: memcmp, not a tolerance. Where the product packs (48 columns up), the
 * same with W packed once beforehand, as the adapters' weights are at load (task/load.c): every row
 * has the bits of the product that packs per call. */
static void check_shape(eng_pool *pool, const shape *sh, unsigned seed) {
    unsigned s = seed;
    int Mmax = row_counts[sizeof row_counts / sizeof row_counts[0] - 1];
    int lda = sh->K + 3, ldc = sh->N + 5;
    float *A = malloc(sizeof(float) * (size_t)Mmax * lda), *W = malloc(sizeof(float) * (size_t)sh->N * sh->K);
    float *bias = malloc(sizeof(float) * (size_t)sh->N), *R = malloc(sizeof(float) * (size_t)Mmax * ldc);
    float *C = malloc(sizeof(float) * (size_t)Mmax * ldc), *one = malloc(sizeof(float) * (size_t)ldc);
    cr_assert(A && W && bias && R && C && one);
    for (size_t i = 0; i < (size_t)Mmax * lda; i++) A[i] = frand(&s, -1, 1);
    for (size_t i = 0; i < (size_t)sh->N * sh->K; i++) W[i] = frand(&s, -0.2f, 0.2f);
    for (int i = 0; i < sh->N; i++) bias[i] = frand(&s, -1, 1);
    for (size_t i = 0; i < (size_t)Mmax * ldc; i++) R[i] = frand(&s, -1, 1);
    float *P = NULL, *CP = NULL;
    if (eng__gemm_rows_packs(sh->N)) {
        size_t bytes = (eng__packed_floats(sh->N, sh->K) * sizeof(float) + 63) / 64 * 64;
        P = aligned_alloc(64, bytes ? bytes : 64);
        CP = malloc(sizeof(float) * (size_t)Mmax * ldc);
        cr_assert(P && CP);
        eng__pack_strided(W, sh->N, sh->K, (size_t)sh->K, 1, sh->acc ? 2.0f : 1.0f, P);
    }
    for (size_t c = 0; c < sizeof row_counts / sizeof row_counts[0]; c++) {
        int M = row_counts[c];
        run(pool, sh, M, A, lda, W, NULL, bias, R, C, ldc);
        if (P) run(pool, sh, M, A, lda, W, P, bias, R, CP, ldc);
        for (int m = 0; m < M; m += (M > 64 ? 7 : 1)) {
            run(pool, sh, 1, A + (size_t)m * lda, lda, W, NULL, bias, R + (size_t)m * ldc, one, ldc);
            cr_assert(memcmp(one, C + (size_t)m * ldc, sizeof(float) * (size_t)sh->N) == 0,
                      "N %d K %d%s: row %d of %d rows differs from the row alone (%.9g vs %.9g at column 0)", sh->N,
                      sh->K, sh->acc ? " (acc)" : "", m, M, C[(size_t)m * ldc], one[0]);
            if (!P) continue;
            run(pool, sh, 1, A + (size_t)m * lda, lda, W, P, bias, R + (size_t)m * ldc, one, ldc);
            cr_assert(memcmp(one, C + (size_t)m * ldc, sizeof(float) * (size_t)sh->N) == 0,
                      "N %d K %d%s packed: row %d alone differs from the unpacked product's (%.9g vs %.9g)", sh->N,
                      sh->K, sh->acc ? " (acc)" : "", m, one[0], C[(size_t)m * ldc]);
        }
        for (int m = 0; P && m < M; m++)
            cr_assert(memcmp(CP + (size_t)m * ldc, C + (size_t)m * ldc, sizeof(float) * (size_t)sh->N) == 0,
                      "N %d K %d%s packed: row %d of %d rows differs from the unpacked product's", sh->N, sh->K,
                      sh->acc ? " (acc)" : "", m, M);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < sh->N; n++) cr_assert(isfinite(C[(size_t)m * ldc + n]));
    }
    free(A), free(W), free(bias), free(R), free(C), free(one), free(P), free(CP);
}

static void check_all(void *ctx) {
    eng_pool *pool = ctx;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(pool, &shapes[i], 40u + (unsigned)i);
}

Test(gemm, rows_independent_of_row_count) {
    eng__blas_init();
    eng_pool *pool = eng__pool_new(2);
    cr_assert(pool);
    cr_assert_geq(for_each_level(check_all, pool), 1);
    eng__pool_free(pool);
}

/* eng__gemm_rows against the double-precision reference, every epilogue, rows 1..600 (tails of the
 * 8-row tile, two 256-row blocks), N off the 48-column panel, K = 0. */
static void check_ref(eng_pool *pool, int M, int N, int K, int epilogue, unsigned seed) {
    unsigned s = seed;
    int lda = K + 1, ldc = N + 2;
    float *A = malloc(sizeof(float) * (size_t)M * lda + 4), *W = malloc(sizeof(float) * (size_t)N * K + 4);
    float *bias = malloc(sizeof(float) * (size_t)N), *R = malloc(sizeof(float) * (size_t)M * ldc);
    float *C = malloc(sizeof(float) * (size_t)M * ldc), *E = malloc(sizeof(float) * (size_t)M * N);
    cr_assert(A && W && bias && R && C && E);
    for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = frand(&s, -1, 1);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand(&s, -0.2f, 0.2f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s, -1, 1);
    for (size_t i = 0; i < (size_t)M * ldc; i++) R[i] = frand(&s, -1, 1), C[i] = NAN;
    shape sh = {N, K, 0, epilogue};
    run(pool, &sh, M, A, lda, W, NULL, bias, R, C, ldc);
    eng__ref_gemm(M, N, K, A, lda, W, K, epilogue ? bias : NULL, E, N);
    if (epilogue == 2) eng__ref_act_apply(ENG_ACT_GELU, E, (size_t)M * N);
    float tol = 2e-6f * sqrtf((float)K + 1.0f);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            float e = E[(size_t)m * N + n] + (epilogue == 2 ? R[(size_t)m * ldc + n] : 0.0f);
            cr_assert_float_eq(C[(size_t)m * ldc + n], e, tol, "M %d N %d K %d: C[%d][%d] %g vs %g", M, N, K, m, n,
                               C[(size_t)m * ldc + n], e);
        }
        for (int n = N; n < ldc; n++) cr_assert(isnan(C[(size_t)m * ldc + n]), "wrote past N at row %d", m);
    }
    /* the accumulating form: C += alpha * A W^T */
    for (int m = 0; m < M; m++) memcpy(C + (size_t)m * ldc, R + (size_t)m * ldc, sizeof(float) * (size_t)N);
    eng__gemm_rows_acc(pool, M, N, K, 0.5f, A, lda, W, K, C, ldc);
    eng__ref_gemm(M, N, K, A, lda, W, K, NULL, E, N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++)
            cr_assert_float_eq(C[(size_t)m * ldc + n], R[(size_t)m * ldc + n] + 0.5f * E[(size_t)m * N + n], tol,
                               "acc M %d N %d K %d: C[%d][%d]", M, N, K, m, n);
    free(A), free(W), free(bias), free(R), free(C), free(E);
}

static void check_ref_all(void *ctx) {
    eng_pool *pool = ctx;
    check_ref(pool, 1, 8, 768, 0, 1);
    check_ref(pool, 13, 768, 8, 1, 2);
    check_ref(pool, 600, 70, 385, 2, 3);
    check_ref(pool, 9, 1000, 33, 2, 4);
    check_ref(pool, 5, 50, 0, 1, 5);
    check_ref(pool, 70, 8, 300, 2, 6); /* narrow: a row a call */
    check_ref(pool, 3, 2, 0, 1, 7);
}

Test(gemm, matches_reference) {
    eng__blas_init();
    eng_pool *pool = eng__pool_new(3);
    cr_assert(pool);
    cr_assert_geq(for_each_level(check_ref_all, pool), 1);
    eng__pool_free(pool);
}
