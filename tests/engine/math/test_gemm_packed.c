/* test_gemm_packed.c - the backbone's packed products (engine/math/gemm_packed.c, eng__pgemm) against the
 * double-precision reference product, and their rounding against OpenBLAS's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "math/blas.h"
#include "math/kernels.h"
#include "core/tensor.h"

#include "test_levels.h"
#include "test_rand.h"

/* eng__pgemm over packed weights against the double-precision reference: row tails of 1..7 below
 * the 8-row tile, N not a multiple of the 48-column panel, K over several 192-long steps with a
 * partial last one, strided A and C, 1 and 3 threads, and every epilogue. */
static void check_pgemm(int M, int N, int K, int threads, const eng_epilogue *proto, unsigned seed) {
    unsigned s = seed;
    int lda = K + 5, ldc = N + 3;
    float *A = malloc(sizeof(float) * M * lda), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *R = malloc(sizeof(float) * M * N), *C = malloc(sizeof(float) * M * ldc), *E = malloc(sizeof(float) * M * N);
    float *P = eng__alloc_aligned(sizeof(float) * eng__packed_floats(N, K));
    cr_assert(A && W && bias && R && C && E && P);
    for (int i = 0; i < M * lda; i++) A[i] = frand(&s, -1, 1);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.2f, 0.2f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s, -1, 1);
    for (int i = 0; i < M * N; i++) R[i] = frand(&s, -1, 1);
    for (int i = 0; i < M * ldc; i++) C[i] = NAN; /* every element in the block must be written, none past it */
    eng__pack_linear(W, N, K, K, P);
    eng_epilogue ep = proto ? *proto : (eng_epilogue){0};
    if (ep.bias) ep.bias = bias;
    if (ep.residual) ep.residual = R, ep.ldr = N;
    eng_pool *pool = eng__pool_new(threads);
    cr_assert(pool);
    eng__pgemm(pool, M, N, K, A, lda, P, C, ldc, proto ? &ep : NULL);
    eng__ref_gemm(M, N, K, A, lda, W, K, ep.bias, E, N);
    if (proto) eng__ref_act_apply(ep.act, E, (size_t)M * N);
    float tol = 2e-6f * sqrtf((float)K + 1.0f);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            float e = E[(size_t)m * N + n] + (ep.residual ? R[(size_t)m * N + n] : 0.0f);
            cr_assert_float_eq(C[(size_t)m * ldc + n], e, tol, "M %d N %d K %d: C[%d][%d] %g vs %g", M, N, K, m, n,
                               C[(size_t)m * ldc + n], e);
        }
        for (int n = N; n < ldc; n++) cr_assert(isnan(C[(size_t)m * ldc + n]), "wrote past N at row %d", m);
    }
    eng__pool_free(pool);
    eng__free_aligned(P);
    free(A), free(W), free(bias), free(R), free(C), free(E);
}

static void check_all(void *ctx) {
    (void)ctx;
    eng_epilogue plain = {.act = ENG_ACT_IDENTITY}, bias = {.bias = (float *)1, .act = ENG_ACT_IDENTITY};
    eng_epilogue bias_res = {.bias = (float *)1, .act = ENG_ACT_IDENTITY, .residual = (float *)1};
    eng_epilogue gelu_res = {.bias = (float *)1, .act = ENG_ACT_GELU, .residual = (float *)1};
    for (int M = 1; M <= 17; M += 3) check_pgemm(M, 301, 700, 3, &gelu_res, 100u + (unsigned)M);
    check_pgemm(300, 96, 192, 2, &bias_res, 7);  /* two 256-row blocks; K one exact step */
    check_pgemm(67, 48, 385, 1, &bias, 8);       /* one panel; K = 2 steps + 1 */
    check_pgemm(9, 1000, 33, 3, &plain, 9);      /* K shorter than a step */
    check_pgemm(33, 20, 64, 2, NULL, 10);        /* N narrower than a panel, no epilogue */
    check_pgemm(5, 50, 0, 2, &gelu_res, 11);     /* K = 0: C is the epilogue of zeros */
    check_pgemm(13, 71, 29, 2, &bias_res, 12);    /* a 24-wide half panel and a partial one (AVX2 pieces) */
}

/* every tile this CPU can run: the portable C one, AVX2's and NEON's 4 x 24 pieces, AVX-512's 8 x 48 */
Test(gemm_packed, matches_reference) {
    eng__blas_init();
    cr_assert_geq(for_each_level(check_all, NULL), 1);
}

static void rounding_as_close_as_openblas_at_level(void *ctx) {
    (void)ctx;
    /* A long dot product (K = 3072, the FFN down-projection of bert-base): the packed product's
     * largest error against double precision stays within 1.5x of OpenBLAS's own. */
    unsigned s = 21;
    int M = 24, N = 96, K = 3072;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *E = malloc(sizeof(float) * M * N);
    float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
    float *P = eng__alloc_aligned(sizeof(float) * eng__packed_floats(N, K));
    cr_assert(A && W && E && C1 && C2 && P);
    for (int i = 0; i < M * K; i++) A[i] = frand(&s, -1, 1);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.05f, 0.05f);
    eng__blas_init();
    eng__pack_linear(W, N, K, K, P);
    eng__gemm(NULL, M, N, K, A, K, W, K, C1, N, NULL);
    eng__pgemm(NULL, M, N, K, A, K, P, C2, N, NULL);
    eng__ref_gemm(M, N, K, A, K, W, K, NULL, E, N);
    double e_blas = 0, e_packed = 0;
    for (int i = 0; i < M * N; i++) { /* not fmax: GCC 12 for aarch64 fails vectorizing two fmax reductions (ICE) */
        double db = fabs((double)C1[i] - E[i]), dp = fabs((double)C2[i] - E[i]);
        e_blas = db > e_blas ? db : e_blas;
        e_packed = dp > e_packed ? dp : e_packed;
    }
    cr_assert(e_packed <= 1.5 * e_blas + 1e-7, "packed max error %g vs OpenBLAS %g", e_packed, e_blas);
    eng__free_aligned(P);
    free(A), free(W), free(E), free(C1), free(C2);
}

Test(gemm_packed, rounding_as_close_as_openblas) { cr_assert_geq(for_each_level(rounding_as_close_as_openblas_at_level, NULL), 1); }

Test(gemm_packed, strided_pack_transposes_and_scales) {
    /* Attention packs its values as the transpose of a strided (L, d) slice and its keys scaled by
     * 1/sqrt(d): C = A (M,L) * (alpha V)^T^T against the reference on an explicit copy. */
    unsigned s = 31;
    int M = 13, L = 70, d = 64, ldv = 200;
    float alpha = 0.125f;
    float *A = malloc(sizeof(float) * M * L), *V = malloc(sizeof(float) * L * ldv), *Wt = malloc(sizeof(float) * d * L);
    float *C = malloc(sizeof(float) * M * d), *E = malloc(sizeof(float) * M * d);
    float *P = eng__alloc_aligned(sizeof(float) * eng__packed_floats(d, L));
    cr_assert(A && V && Wt && C && E && P);
    for (int i = 0; i < M * L; i++) A[i] = frand(&s, -1, 1);
    for (int i = 0; i < L * ldv; i++) V[i] = frand(&s, -1, 1);
    for (int n = 0; n < d; n++)
        for (int k = 0; k < L; k++) Wt[n * L + k] = alpha * V[k * ldv + 7 + n]; /* W[n][k] = alpha V[k][n] */
    eng__pack_strided(V + 7, d, L, 1, (size_t)ldv, alpha, P);
    eng__pgemm(NULL, M, d, L, A, L, P, C, d, NULL);
    eng__ref_gemm(M, d, L, A, L, Wt, L, NULL, E, d);
    for (int i = 0; i < M * d; i++) cr_assert_float_eq(C[i], E[i], 1e-5f, "C[%d]: %g vs %g", i, C[i], E[i]);
    eng__free_aligned(P);
    free(A), free(V), free(Wt), free(C), free(E);
}
