/* test_gemm_lowp.c - the bf16 and int8 packed products (engine/math/gemm_lowp.c, x86/avx2_bf16.c, avx2_int8.c,
 * avx_vnni.c, avx512_*.c; on ARM64 arm/neon_lowp.c, dotprod_int8.c, i8mm_int8.c, bf16_mmla.c) against a
 * double-precision reference of the same quantized math, at every CPU level this machine has
 * (test_levels.h: the portable C kernels, AVX2, AVX-VNNI, AVX-512 ...; NEON, dotprod, i8mm, bf16), so
 * every kernel the machine (or the emulator) can run is checked.
 *
 * The reference quantizes on its own, from the definitions in gemm_lowp.h (bf16: nearest even;
 * int8: scale = amax / 127, q = nearest-even(x * 127 / amax), activations per row, weights per
 * output feature), and multiplies in double. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/blas.h"
#include "math/kernels.h"
#include "core/tensor.h"
#include "math/cpu.h"
#include "math/gemm_lowp.h"

#include "test_levels.h"
#include "test_rand.h"

#define U (1.0 / 16777216.0) /* float32 unit roundoff, 2^-24 */

static float bits_f(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

Test(gemm_lowp, bf16_rounds_to_nearest_even) {
    /* bf16 keeps the top 16 bits of a float; the low 16 decide the rounding. */
    cr_assert_eq(eng__bf16_from_f32(1.0f), 0x3F80);
    cr_assert_eq(eng__bf16_from_f32(bits_f(0x3F808000u)), 0x3F80); /* half way, even below */
    cr_assert_eq(eng__bf16_from_f32(bits_f(0x3F818000u)), 0x3F82); /* half way, even above */
    cr_assert_eq(eng__bf16_from_f32(bits_f(0x3F808001u)), 0x3F81); /* just above half way */
    cr_assert_eq(eng__bf16_from_f32(bits_f(0xBF807FFFu)), 0xBF80); /* just below, negative */
    cr_assert_eq(eng__bf16_from_f32(bits_f(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX rounds up to inf */
    cr_assert_eq(eng__bf16_from_f32(bits_f(0x00400000u)), 0x0000); /* subnormal: flushed */
    cr_assert_eq(eng__bf16_from_f32(bits_f(0x80400000u)), 0x8000); /* keeping its sign */
    cr_assert(isnan(eng__f32_from_bf16(eng__bf16_from_f32(NAN))));
    cr_assert(isnan(eng__f32_from_bf16(eng__bf16_from_f32(bits_f(0x7F800001u))))); /* low-bit NaN stays NaN */
}

/* The reference's own int8 quantization of n values: returns the scale. */
static double ref_quant(const float *x, int n, int *q) {
    float amax = 0.0f;
    for (int k = 0; k < n; k++) amax = fmaxf(amax, fabsf(x[k]));
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < n; k++) q[k] = (int)nearbyintf(x[k] * inv);
    return amax / 127.0f;
}

/* One product through eng__lp_gemm against the reference: row tails below the 8-row tile, N past a
 * 48-wide panel, K not a multiple of the k group, strided A and C, the pool's threads, the given
 * epilogue. Elements of C past N must stay untouched. Tolerances:
 *   bf16: the inputs are the same bf16 values, so only the float32 sums differ from double:
 *         |C - E| <= 8 u sqrt(K + 1) (sum_k |a b| + |bias| + |res|), a multiple of the float32
 *         kernel's test; with GELU after, whose slope stays below 1.13.
 *   int8: the integer sum is exact; converting it and the scales to float and the one fused
 *         multiply-add round a few times: |C - E| <= 8 u (|sum * scales| + |bias| + |res|). */
static void check(eng_prec prec, int M, int N, int K, int threads, const eng_epilogue *proto, unsigned seed) {
    unsigned s = seed;
    int lda = K + 3, ldc = N + 5;
    float *A = malloc(sizeof(float) * (size_t)M * lda), *W = malloc(sizeof(float) * (size_t)N * (K ? K : 1));
    float *bias = malloc(sizeof(float) * N), *R = malloc(sizeof(float) * (size_t)M * N);
    float *C = malloc(sizeof(float) * (size_t)M * ldc);
    int *qa = malloc(sizeof(int) * (size_t)M * (K ? K : 1)), *qw = malloc(sizeof(int) * (size_t)N * (K ? K : 1));
    double *sa = malloc(sizeof(double) * M), *sw = malloc(sizeof(double) * N);
    cr_assert(A && W && bias && R && C && qa && qw && sa && sw);
    for (int i = 0; i < M * lda; i++) A[i] = frand(&s, -2, 2);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.3f, 0.3f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s, -1, 1);
    for (int i = 0; i < M * N; i++) R[i] = frand(&s, -1, 1);
    /* exact bf16 ties in the activations: the vector converter must round them like the definition */
    for (int m = 0; m < M && K > 2; m++) A[(size_t)m * lda + 1] = bits_f(0x3F818000u), A[(size_t)m * lda + 2] = bits_f(0xBF808000u);
    if (M > 1 && K) A[lda] = 0.0f; /* a row ... */
    if (M > 2) memset(A + 2 * (size_t)lda, 0, sizeof(float) * (size_t)K); /* ... and a row of zeros */
    for (int i = 0; i < M * ldc; i++) C[i] = NAN;

    eng_lp_weights w;
    cr_assert_eq(eng__lp_pack(&w, prec, W, N, K, K), 0);
    void *ws = eng__alloc_aligned(eng__lp_ws_bytes(prec, M, K) + 64);
    cr_assert(ws);
    for (int n = 0; n < N; n++) {
        if (prec == ENG_PREC_INT8) {
            sw[n] = ref_quant(W + (size_t)n * K, K, qw + (size_t)n * K);
            cr_assert_eq((float)sw[n], w.scale[n], "scale of feature %d", n);
        }
        for (int k = 0; k < K; k++) {
            float want = prec == ENG_PREC_BF16 ? eng__f32_from_bf16(eng__bf16_from_f32(W[(size_t)n * K + k]))
                                               : (float)qw[(size_t)n * K + k];
            cr_assert_eq(eng__lp_weight(&w, n, k), want, "weight (%d, %d)", n, k);
        }
    }
    if (prec == ENG_PREC_INT8)
        for (int m = 0; m < M; m++) sa[m] = ref_quant(A + (size_t)m * lda, K, qa + (size_t)m * K);

    eng_epilogue ep = proto ? *proto : (eng_epilogue){0};
    if (ep.bias) ep.bias = bias;
    if (ep.residual) ep.residual = R, ep.ldr = N;
    eng_pool *pool = eng__pool_new(threads);
    cr_assert(pool);
    eng__lp_gemm(pool, M, A, lda, &w, C, ldc, proto ? &ep : NULL, ws);

    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double sum = 0, mag = 0;
            if (prec == ENG_PREC_BF16) {
                for (int k = 0; k < K; k++) {
                    double a = eng__f32_from_bf16(eng__bf16_from_f32(A[(size_t)m * lda + k]));
                    double b = eng__f32_from_bf16(eng__bf16_from_f32(W[(size_t)n * K + k]));
                    sum += a * b, mag += fabs(a * b);
                }
            } else {
                long long isum = 0;
                for (int k = 0; k < K; k++) isum += (long long)qa[(size_t)m * K + k] * qw[(size_t)n * K + k];
                sum = (double)isum * sa[m] * sw[n];
                mag = fabs(sum);
            }
            float e = (float)(sum + (ep.bias ? bias[n] : 0.0));
            mag += ep.bias ? fabs(bias[n]) : 0.0;
            if (proto && ep.act != ENG_ACT_IDENTITY) eng__ref_act_apply(ep.act, &e, 1);
            double want = (double)e + (ep.residual ? R[(size_t)m * N + n] : 0.0);
            mag += ep.residual ? fabs(R[(size_t)m * N + n]) : 0.0;
            double tol = prec == ENG_PREC_BF16 ? 8 * U * sqrt(K + 1.0) * mag : 8 * U * mag;
            double got = C[(size_t)m * ldc + n];
            cr_assert(fabs(got - want) <= tol + 1e-30, "%s %s M %d N %d K %d threads %d: C[%d][%d] %.9g vs %.9g (tol %g)",
                      prec == ENG_PREC_BF16 ? "bf16" : "int8", eng__lp_kernel(prec), M, N, K, threads, m, n, got, want,
                      tol);
        }
        for (int n = N; n < ldc; n++) cr_assert(isnan(C[(size_t)m * ldc + n]), "wrote past N at row %d", m);
    }
    eng__pool_free(pool);
    eng__lp_release(&w);
    eng__free_aligned(ws);
    free(A), free(W), free(bias), free(R), free(C), free(qa), free(qw), free(sa), free(sw);
}

/* Every shape and epilogue, on the given precision's kernel now selected. */
static void check_all(eng_prec prec) {
    eng_epilogue plain = {.act = ENG_ACT_IDENTITY}, bias = {.bias = (float *)1, .act = ENG_ACT_IDENTITY};
    eng_epilogue bias_res = {.bias = (float *)1, .act = ENG_ACT_IDENTITY, .residual = (float *)1};
    eng_epilogue gelu = {.bias = (float *)1, .act = ENG_ACT_GELU};
    eng_epilogue gelu_res = {.bias = (float *)1, .act = ENG_ACT_GELU, .residual = (float *)1};
    for (int M = 1; M <= 17; M++) check(prec, M, 101, 37 + M, 1 + M % 3, M % 2 ? &gelu_res : &bias_res, 100u + (unsigned)M);
    check(prec, 300, 97, 130, 2, &bias_res, 7); /* blocks of rows; one panel and a bit */
    check(prec, 67, 48, 387, 3, &bias, 8);      /* exactly one panel; K = 4 * 96 + 3 */
    check(prec, 9, 1000, 33, 3, &plain, 9);     /* many panels over three threads */
    check(prec, 33, 20, 66, 2, NULL, 10);       /* N narrower than a panel, no epilogue */
    check(prec, 20, 150, 768, 2, &gelu, 12);    /* bert-base K */
    check(prec, 5, 50, 0, 2, &gelu_res, 11);    /* K = 0: C is the epilogue of zeros */
    check(prec, 3, 7, 1, 1, &bias, 13);         /* K = 1: one value and padding */
    check(prec, 1400, 50, 770, 3, &bias_res, 14); /* over 1M activations: converted by the pool's threads */
    check(prec, 97, 130, 200, 3, &gelu_res, 15);  /* split by rows (>= 4 tiles a thread): 40, 40 and 17 rows */
    check(prec, 95, 130, 200, 3, &gelu_res, 16);  /* just below it: split by panels */
}

static void check_all_ctx(void *ctx) { check_all(*(eng_prec *)ctx); }

static void on_every_level(eng_prec prec) {
    cr_assert_geq(for_each_level(check_all_ctx, &prec), 1);
    eng__cpu_restrict(0);
    cr_assert_str_eq(eng__lp_kernel(prec), "c");
    eng__cpu_restrict(ENG_CPU_ALL);
}

Test(gemm_lowp, bf16_matches_reference, .timeout = 300) { on_every_level(ENG_PREC_BF16); }
Test(gemm_lowp, int8_matches_reference, .timeout = 300) { on_every_level(ENG_PREC_INT8); }

/* With integer activations and weights whose largest magnitude is 127 in every row and feature,
 * both scales are exactly 1, every value is its own quantization, and C must equal the integer
 * product plus an integer bias exactly (all below 2^24, so float holds them): the int8 kernels'
 * accumulation and offset compensation are exact. */
static void check_int8_exact(void) {
    unsigned s = 5;
    int M = 19, N = 100, K = 701;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *C = malloc(sizeof(float) * M * N);
    void *ws = eng__alloc_aligned(eng__lp_ws_bytes(ENG_PREC_INT8, M, K));
    cr_assert(A && W && bias && C && ws);
    for (int i = 0; i < M * K; i++) A[i] = (float)(int)frand(&s, -127, 128);
    for (int i = 0; i < N * K; i++) W[i] = (float)(int)frand(&s, -127, 128);
    for (int m = 0; m < M; m++) A[(size_t)m * K + m % K] = m % 2 ? 127.0f : -127.0f;
    for (int n = 0; n < N; n++) W[(size_t)n * K + (n * 7) % K] = n % 3 ? -127.0f : 127.0f;
    for (int n = 0; n < N; n++) bias[n] = (float)(int)frand(&s, -1000, 1000);
    eng_lp_weights w;
    cr_assert_eq(eng__lp_pack(&w, ENG_PREC_INT8, W, N, K, K), 0);
    eng_epilogue ep = {.bias = bias, .act = ENG_ACT_IDENTITY};
    eng_pool *pool = eng__pool_new(2);
    cr_assert(pool);
    eng__lp_gemm(pool, M, A, K, &w, C, N, &ep, ws);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            long long sum = (long long)bias[n];
            for (int k = 0; k < K; k++) sum += (long long)A[(size_t)m * K + k] * (long long)W[(size_t)n * K + k];
            cr_assert_eq((long long)C[(size_t)m * N + n], sum, "%s: C[%d][%d] %.1f vs %lld", eng__lp_kernel(ENG_PREC_INT8),
                         m, n, C[(size_t)m * N + n], sum);
            cr_assert_eq(C[(size_t)m * N + n], (float)sum);
        }
    eng__pool_free(pool);
    eng__lp_release(&w);
    eng__free_aligned(ws);
    free(A), free(W), free(bias), free(C);
}

static void check_int8_exact_ctx(void *ctx) {
    (void)ctx;
    check_int8_exact();
}

Test(gemm_lowp, int8_accumulation_is_exact) { for_each_level(check_int8_exact_ctx, NULL); }

/* int8 gives the same bits at every level: the integer sums are exact, the quantization is the same
 * float operations, and the dequantization one fused multiply-add (the portable kernel rounds it
 * twice, so it is held to the float32 rounding of that step instead). Odd shapes, bias + residual. */
typedef struct {
    int M, N, K;
    const float *A, *bias, *R;
    const eng_lp_weights *w;
    float *first; /* the first vector level's output, NULL until it ran */
    float *C;
    int vector_levels;
} same_bits_ctx;

static void same_bits_at_level(void *ctx) {
    same_bits_ctx *c = ctx;
    eng_epilogue ep = {.bias = c->bias, .act = ENG_ACT_IDENTITY, .residual = c->R, .ldr = c->N};
    void *ws = eng__alloc_aligned(eng__lp_ws_bytes(ENG_PREC_INT8, c->M, c->K)); /* this level's layout */
    cr_assert(ws);
    eng__lp_gemm(NULL, c->M, c->A, c->K, c->w, c->C, c->N, &ep, ws);
    eng__free_aligned(ws);
    const char *k = eng__lp_kernel(ENG_PREC_INT8);
    if (!strcmp(k, "c")) return;
    if (!c->vector_levels++) {
        memcpy(c->first, c->C, sizeof(float) * (size_t)c->M * c->N);
        return;
    }
    cr_assert(!memcmp(c->first, c->C, sizeof(float) * (size_t)c->M * c->N), "int8 kernel %s: other bits than the first", k);
}

Test(gemm_lowp, int8_same_bits_at_every_level) {
    unsigned s = 77;
    int M = 23, N = 101, K = 389;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *R = malloc(sizeof(float) * M * N), *C = malloc(sizeof(float) * M * N), *first = malloc(sizeof(float) * M * N);
    cr_assert(A && W && bias && R && C && first);
    for (int i = 0; i < M * K; i++) A[i] = frand(&s, -3, 3);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.2f, 0.2f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s, -1, 1);
    for (int i = 0; i < M * N; i++) R[i] = frand(&s, -1, 1);
    eng_lp_weights w;
    cr_assert_eq(eng__lp_pack(&w, ENG_PREC_INT8, W, N, K, K), 0);
    same_bits_ctx c = {M, N, K, A, bias, R, &w, first, C, 0};
    for_each_level(same_bits_at_level, &c);
    cr_log_info("%d vector int8 kernels compared", c.vector_levels);
    eng__lp_release(&w);
    free(A), free(W), free(bias), free(R), free(C), free(first);
}

/* A whole bert-base FFN up-projection (64 x 768 -> 3072, bias and GELU) in each precision against
 * float32 inputs in double precision, with activations and weights in the ranges of a trained
 * encoder (LayerNorm output ~ N(0, 1), weights std ~0.03). Element bounds from the quantization
 * steps, plus float32 summation (K + 2 roundings of at most u sum |a w| each, for the kernel and
 * the reference), before GELU (slope < 1.13, so 1.13x after it):
 *   bf16: each input is within 2^-9 of itself relatively: |err| <= (2^-8 + 2^-18) sum |a w|.
 *   int8: |a - qa sa| <= sa / 2 and |w - qw sw| <= sw / 2 give
 *         |err| <= sum_k (|a_k| sw / 2 + |w_k| sa / 2 + sa sw / 4).
 * And on average the errors of K independent roundings cancel: the mean |err| over the layer, as a
 * share of the mean |output|, must stay under 1% (bf16) and 3% (int8); logged. */
static float gauss(unsigned *s) {
    float u1 = frand(s, 1e-7f, 1.0f), u2 = frand(s, 0.0f, 1.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static void check_layer(eng_prec prec, double mean_share) {
    unsigned s = 77;
    int M = 64, K = 768, N = 3072;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *C = malloc(sizeof(float) * M * N), *E = malloc(sizeof(float) * M * N);
    void *ws = eng__alloc_aligned(eng__lp_ws_bytes(prec, M, K));
    cr_assert(A && W && bias && C && E && ws);
    for (int i = 0; i < M * K; i++) A[i] = gauss(&s);
    for (int i = 0; i < N * K; i++) W[i] = 0.03f * gauss(&s);
    for (int i = 0; i < N; i++) bias[i] = 0.1f * gauss(&s);
    eng_lp_weights w;
    cr_assert_eq(eng__lp_pack(&w, prec, W, N, K, K), 0);
    eng_epilogue ep = {.bias = bias, .act = ENG_ACT_GELU};
    eng_pool *pool = eng__pool_new(2);
    cr_assert(pool);
    eng__lp_gemm(pool, M, A, K, &w, C, N, &ep, ws);
    eng__ref_gemm(M, N, K, A, K, W, K, bias, E, N);
    eng__ref_act_apply(ENG_ACT_GELU, E, (size_t)M * N);
    double sum_err = 0, sum_out = 0, max_err = 0;
    for (int m = 0; m < M; m++) {
        float amax = 0;
        for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(A[(size_t)m * K + k]));
        double sa = amax / 127.0;
        for (int n = 0; n < N; n++) {
            double sw = w.scale ? w.scale[n] : 0, bound = 0, sabs = fabs(bias[n]);
            for (int k = 0; k < K; k++) {
                double a = fabs(A[(size_t)m * K + k]), b = fabs(W[(size_t)n * K + k]);
                bound += prec == ENG_PREC_BF16 ? (0.00390625 + 4e-6) * a * b : a * sw / 2 + b * sa / 2 + sa * sw / 4;
                sabs += a * b;
            }
            /* GELU's slope; float32 sums of the kernel and of the reference's output (K + 2 roundings) */
            bound = 1.13 * (bound + (K + 2) * U * 2 * sabs);
            double err = fabs((double)C[(size_t)m * N + n] - E[(size_t)m * N + n]);
            cr_assert(err <= bound, "%s C[%d][%d] %g vs float32 %g: error above the quantization bound %g",
                      eng__lp_kernel(prec), m, n, C[(size_t)m * N + n], E[(size_t)m * N + n], bound);
            sum_err += err, sum_out += fabs(E[(size_t)m * N + n]), max_err = fmax(max_err, err);
        }
    }
    cr_log_info("%s (%s) vs float32, 64 x 768 -> 3072 + GELU: mean |err| %.3g (%.3f%% of mean |y|), max %.3g",
                prec == ENG_PREC_BF16 ? "bf16" : "int8", eng__lp_kernel(prec), sum_err / (M * N),
                100 * sum_err / sum_out, max_err);
    cr_assert(sum_err / sum_out < mean_share, "mean error %.3f%% of the mean output", 100 * sum_err / sum_out);
    eng__pool_free(pool);
    eng__lp_release(&w);
    eng__free_aligned(ws);
    free(A), free(W), free(bias), free(C), free(E);
}

Test(gemm_lowp, bf16_layer_close_to_float32, .timeout = 300) { check_layer(ENG_PREC_BF16, 0.01); }
Test(gemm_lowp, int8_layer_close_to_float32, .timeout = 300) { check_layer(ENG_PREC_INT8, 0.03); }

/* A NaN or an infinity in a row of activations, or in a feature's weights, makes that row's or
 * feature's outputs NaN, as float32 does; the other outputs stay as they were. */
static void check_non_finite(eng_prec prec) {
    unsigned s = 9;
    int M = 5, N = 60, K = 40;
    float A[5 * 40], W[60 * 40], C[5 * 60], C0[5 * 60];
    for (int i = 0; i < M * K; i++) A[i] = frand(&s, -1, 1);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -1, 1);
    void *ws = eng__alloc_aligned(eng__lp_ws_bytes(prec, M, K));
    cr_assert(ws);
    eng_lp_weights w;
    cr_assert_eq(eng__lp_pack(&w, prec, W, N, K, K), 0);
    eng__lp_gemm(NULL, M, A, K, &w, C0, N, NULL, ws);
    A[1 * K + 7] = NAN, A[3 * K + 39] = -INFINITY;
    eng__lp_gemm(NULL, M, A, K, &w, C, N, NULL, ws);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            if (m == 1 || m == 3)
                cr_assert(isnan(C[m * N + n]) || (prec == ENG_PREC_BF16 && m == 3 && isinf(C[m * N + n])),
                          "%s row %d: %g", eng__lp_kernel(prec), m, C[m * N + n]);
            else
                cr_assert_eq(C[m * N + n], C0[m * N + n], "%s row %d changed", eng__lp_kernel(prec), m);
        }
    eng__lp_release(&w);
    W[17 * K + 3] = NAN;
    cr_assert_eq(eng__lp_pack(&w, prec, W, N, K, K), 0);
    A[1 * K + 7] = 0.5f, A[3 * K + 39] = 0.5f;
    eng__lp_gemm(NULL, M, A, K, &w, C, N, NULL, ws);
    for (int m = 0; m < M; m++) cr_assert(isnan(C[m * N + 17]), "%s feature 17, row %d", eng__lp_kernel(prec), m);
    eng__lp_release(&w);
    eng__free_aligned(ws);
}

static void check_non_finite_ctx(void *ctx) {
    (void)ctx;
    check_non_finite(ENG_PREC_BF16);
    check_non_finite(ENG_PREC_INT8);
}

Test(gemm_lowp, non_finite_inputs_give_nan) { for_each_level(check_non_finite_ctx, NULL); }

Test(gemm_lowp, pack_refuses_float32) {
    eng_lp_weights w;
    float W[4] = {1, 2, 3, 4};
    cr_assert_eq(eng__lp_pack(&w, ENG_PREC_F32, W, 2, 2, 2), -1);
    cr_assert_null(w.panels);
    eng__lp_release(&w);
    eng__lp_release(NULL);
}

/* Issue 41, hazard 4: a workspace sized under one level and used under another (a cap changed
 * between eng__lp_ws_bytes and eng__lp_gemm) must still hold the product. Sized under the portable
 * kernels (the narrowest layout: bf16 2 bytes, int8 1 byte a value), run under AVX2's (4 and 2):
 * the allocation is exactly the size asked for, so a layout wider than it overruns it (ASan, and the
 * guard bytes behind it here), and the result must match the one of a workspace sized at that level. */
static void check_ws_across_levels(eng_prec prec) {
    eng__cpu_restrict(ENG_CPU_AVX2);
    int avx2 = !strcmp(eng__lp_kernel(prec), "avx2"); /* not on this CPU, or a cap (ADAPTERD_CPU_LEVEL) below it */
    eng__cpu_restrict(ENG_CPU_ALL);
    if (!avx2) return;
    unsigned s = 41;
    int M = 19, N = 70, K = 200;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
    float *C = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
    cr_assert(A && W && C && C2);
    for (int i = 0; i < M * K; i++) A[i] = frand(&s, -2, 2);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.3f, 0.3f);
    eng_lp_weights w;
    cr_assert_eq(eng__lp_pack(&w, prec, W, N, K, K), 0);
    eng__cpu_restrict(0);
    size_t bytes = eng__lp_ws_bytes(prec, M, K);
    unsigned char *ws = eng__alloc_aligned(bytes + 64);
    cr_assert(ws);
    memset(ws + bytes, 0xA5, 64);
    eng__cpu_restrict(ENG_CPU_AVX2);
    cr_assert_str_eq(eng__lp_kernel(prec), "avx2");
    eng__lp_gemm(NULL, M, A, K, &w, C, N, NULL, ws);
    for (int i = 0; i < 64; i++) cr_assert_eq(ws[bytes + i], 0xA5, "%s: workspace overrun at byte %zu", prec == ENG_PREC_BF16 ? "bf16" : "int8", bytes + i);
    void *ws2 = eng__alloc_aligned(eng__lp_ws_bytes(prec, M, K));
    cr_assert(ws2);
    eng__lp_gemm(NULL, M, A, K, &w, C2, N, NULL, ws2);
    eng__cpu_restrict(ENG_CPU_ALL);
    cr_assert(!memcmp(C, C2, sizeof(float) * (size_t)M * N));
    eng__free_aligned(ws), eng__free_aligned(ws2);
    eng__lp_release(&w);
    free(A), free(W), free(C), free(C2);
}

Test(gemm_lowp, bf16_workspace_sized_at_another_level) { check_ws_across_levels(ENG_PREC_BF16); }
Test(gemm_lowp, int8_workspace_sized_at_another_level) { check_ws_across_levels(ENG_PREC_INT8); }

/* Products between activations in bf16 (eng__bf16_gemm_dyn: attention's QK^T with the keys as rows of
 * B, and PV with B (K,N) row-major) against the double reference of the same bf16 operands:
 * alpha * A rounded to bf16 (alpha applied in float32 first), B rounded to bf16, products summed in
 * double; the kernel's float32 sums are within 8 u sqrt(K + 1) sum_k |a b|, as for the packed product.
 * Where the level does not multiply bf16 natively, the call declines (-1) and C stays untouched.
 * Columns past N and rows' padding of C stay untouched either way. */
static void check_dyn(int M, int N, int K, float alpha, int b_rows, unsigned seed) {
    int lda = K + 3, ldc = N + 5;
    size_t sn = b_rows ? (size_t)K + 2 : 1, sk = b_rows ? 1 : (size_t)N + 4; /* element (n, k): B[n sn + k sk] */
    size_t b_len = b_rows ? (size_t)N * sn : (size_t)(K ? K : 1) * sk;
    float *A = malloc(sizeof(float) * (size_t)M * lda), *B = malloc(sizeof(float) * b_len);
    float *C = malloc(sizeof(float) * (size_t)M * ldc);
    void *ws = eng__alloc_aligned(eng__bf16_dyn_bytes(M, N, K));
    cr_assert(A && B && C && ws);
    for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = frand(&seed, -2.0f, 2.0f);
    for (size_t i = 0; i < b_len; i++) B[i] = frand(&seed, -2.0f, 2.0f);
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = NAN;
    int rc = eng__bf16_gemm_dyn(M, N, K, alpha, A, lda, B, sn, sk, C, ldc, ws);
    if (!eng__bf16_dyn_native()) {
        cr_assert_eq(rc, -1, "level %s: bf16 %s is not native, the call must decline", eng__cpu_level_of(eng__cpu_features()),
                     eng__lp_kernel(ENG_PREC_BF16));
        for (size_t i = 0; i < (size_t)M * ldc; i++) cr_assert(isnan(C[i]), "declined but wrote C[%zu]", i);
    } else {
        cr_assert_eq(rc, 0);
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++) {
                double sum = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double a = eng__f32_from_bf16(eng__bf16_from_f32(alpha * A[(size_t)m * lda + k]));
                    double b = eng__f32_from_bf16(eng__bf16_from_f32(B[(size_t)n * sn + (size_t)k * sk]));
                    sum += a * b, mag += fabs(a * b);
                }
                double got = C[(size_t)m * ldc + n], tol = 8 * U * sqrt(K + 1.0) * mag;
                cr_assert(fabs(got - sum) <= tol + 1e-30, "%s M %d N %d K %d %s: C[%d][%d] %.9g vs %.9g (tol %g)",
                          eng__lp_kernel(ENG_PREC_BF16), M, N, K, b_rows ? "B rows" : "B (K,N)", m, n, got, sum, tol);
            }
            for (int n = N; n < ldc; n++) cr_assert(isnan(C[(size_t)m * ldc + n]), "wrote past N at row %d", m);
        }
    }
    eng__free_aligned(ws);
    free(A), free(B), free(C);
}

static void check_dyn_all(void *ctx) {
    (void)ctx;
    for (int b_rows = 0; b_rows < 2; b_rows++) {
        check_dyn(128, 128, 64, 0.125f, b_rows, 1);   /* bert-base's QK^T shape, its 1 / sqrt(64) */
        check_dyn(128, 64, 128, 1.0f, b_rows, 2);     /* and its PV: 64 features, one panel and 16 */
        check_dyn(37, 53, 71, 0.3f, b_rows, 3);       /* tails everywhere: rows, a panel and 5, odd K */
        check_dyn(5, 200, 33, 1.0f, b_rows, 4);       /* many panels, K one past a bf16 step */
        check_dyn(17, 7, 1, 1.0f, b_rows, 5);         /* K = 1: one pair of which half is padding */
        check_dyn(3, 9, 0, 2.0f, b_rows, 6);          /* K = 0: zeros */
        check_dyn(1, 1, 300, 1.0f, b_rows, 7);        /* one row, one column */
    }
}

Test(gemm_lowp, bf16_between_activations_matches_reference, .timeout = 300) {
    cr_assert_geq(for_each_level(check_dyn_all, NULL), 1);
    eng__cpu_restrict(0); /* the portable level multiplies bf16 in float32: the call declines */
    cr_assert_eq(eng__bf16_dyn_native(), 0);
    check_dyn(9, 10, 11, 1.0f, 1, 8);
    eng__cpu_restrict(ENG_CPU_ALL);
}

/* Products between activations in int8 (eng__int8_gemm_dyn: an int8 model's QK^T, B's rows along k)
 * against the reference's own quantization (ref_quant: A per row, B per row n) multiplied in double:
 * the integer sums are exact, so C = alpha scale_m scale_n sum_k qa qb within a few float roundings of
 * the scales and the one multiply-add, |C - E| <= 8 u |E|. Every level must give the same bits (the
 * first level's result is kept in ctx and compared), a row of A or of B holding a NaN or an infinity
 * gives NaN in its row or column, and columns past N stay untouched. */
typedef struct {
    float *first[8]; /* the first level's C of each case */
} dyn8_ctx;

static void check_dyn8(dyn8_ctx *cx, int id, int M, int N, int K, float alpha, unsigned seed) {
    int lda = K + 3, ldb = K + 2, ldc = N + 5;
    float *A = malloc(sizeof(float) * (size_t)M * lda), *B = malloc(sizeof(float) * (size_t)N * ldb);
    float *C = malloc(sizeof(float) * (size_t)M * ldc);
    int *qa = malloc(sizeof(int) * (size_t)(K ? K : 1)), *qb = malloc(sizeof(int) * (size_t)N * (K ? K : 1));
    double *sb = malloc(sizeof(double) * N);
    size_t bytes = eng__int8_dyn_bytes(M, N, K);
    unsigned char *ws = eng__alloc_aligned(bytes + 64);
    cr_assert(A && B && C && qa && qb && sb && ws);
    memset(ws + bytes, 0xA5, 64);
    for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = frand(&seed, -2.0f, 2.0f);
    for (size_t i = 0; i < (size_t)N * ldb; i++) B[i] = frand(&seed, -2.0f, 2.0f);
    if (M > 3 && K) A[3 * (size_t)lda + K - 1] = NAN;      /* a row of A with a NaN */
    if (N > 4 && K) B[4 * (size_t)ldb] = -INFINITY;        /* a key with an infinity */
    if (M > 2) memset(A + 2 * (size_t)lda, 0, sizeof(float) * (size_t)K); /* a row of zeros */
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = 12345.0f;
    eng__int8_gemm_dyn(M, N, K, alpha, A, lda, B, ldb, C, ldc, ws);
    for (int i = 0; i < 64; i++) cr_assert_eq(ws[bytes + i], 0xA5, "workspace overrun at byte %zu", bytes + i);
    for (int n = 0; n < N; n++) sb[n] = ref_quant(B + (size_t)n * ldb, K, qb + (size_t)n * (K ? K : 1));
    for (int m = 0; m < M; m++) {
        double sa = ref_quant(A + (size_t)m * lda, K, qa);
        int bad_a = m == 3 && K;
        for (int n = 0; n < N; n++) {
            double got = C[(size_t)m * ldc + n];
            if (bad_a || (n == 4 && K)) {
                cr_assert(isnan(got), "%s M %d N %d K %d: C[%d][%d] %g, want NaN", eng__lp_kernel(ENG_PREC_INT8), M, N, K, m, n, got);
                continue;
            }
            long long sum = 0;
            for (int k = 0; k < K; k++) sum += (long long)qa[k] * qb[(size_t)n * (K ? K : 1) + k];
            double want = (double)alpha * sa * sb[n] * (double)sum, tol = 8 * U * fabs(want);
            cr_assert(fabs(got - want) <= tol + 1e-30, "%s M %d N %d K %d: C[%d][%d] %.9g vs %.9g (tol %g)",
                      eng__lp_kernel(ENG_PREC_INT8), M, N, K, m, n, got, want, tol);
        }
        for (int n = N; n < ldc; n++) cr_assert_eq(C[(size_t)m * ldc + n], 12345.0f, "wrote past N at row %d", m);
    }
    size_t cb = sizeof(float) * (size_t)M * ldc;
    if (!cx->first[id]) {
        cx->first[id] = malloc(cb);
        cr_assert(cx->first[id]);
        memcpy(cx->first[id], C, cb);
    } else {
        cr_assert(!memcmp(cx->first[id], C, cb), "%s M %d N %d K %d: not the same bits as the first level's",
                  eng__lp_kernel(ENG_PREC_INT8), M, N, K);
    }
    eng__free_aligned(ws);
    free(A), free(B), free(C), free(qa), free(qb), free(sb);
}

static void check_dyn8_all(void *ctx) {
    check_dyn8(ctx, 0, 128, 128, 64, 0.125f, 1); /* bert-base's QK^T shape, its 1 / sqrt(64) */
    check_dyn8(ctx, 1, 384, 384, 64, 0.125f, 2); /* a long sequence: eight panels */
    check_dyn8(ctx, 2, 37, 53, 71, 0.3f, 3);    /* tails everywhere: rows, a panel and 5, K past a quad step */
    check_dyn8(ctx, 3, 5, 200, 33, 1.0f, 4);    /* many panels */
    check_dyn8(ctx, 4, 17, 7, 1, 1.0f, 5);      /* K = 1 */
    check_dyn8(ctx, 5, 3, 9, 0, 2.0f, 6);       /* K = 0: zeros */
    check_dyn8(ctx, 6, 1, 1, 300, 1.0f, 7);     /* one row, one column */
}

Test(gemm_lowp, int8_between_activations_matches_reference_same_bits_every_level, .timeout = 300) {
    dyn8_ctx cx = {{0}};
    cr_assert_geq(for_each_level(check_dyn8_all, &cx), 1);
    for (int i = 0; i < 8; i++) free(cx.first[i]);
}
