/* elem_impl.h - the fast element-wise kernels, one source compiled once per level (kern.h): by
 * math/elem.c for the baseline, math/x86/avx2_elem.c and avx512_elem.c with their own -march, so
 * the compiler vectorizes the same loops with xmm, ymm or zmm registers. Include it once, after
 * defining ELEM_SUFFIX (c, avx2, avx512): it defines eng__<kernel>_<suffix>.
 *
 * The loops avoid libm calls so that GCC vectorizes them: exp by range reduction to
 * [-ln2/2, ln2/2] plus a degree-6 Taylor polynomial and an exponent-bit shift; GELU through
 * erfc's Chebyshev-fitted form (fractional error < 1.2e-7, Numerical Recipes' erfcc) on top of
 * that exp; tanh as 1 - 2/(exp(2x)+1). math/kernels.c has the reference versions. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "math/kern.h"

#define ELEM_CAT2(name, sfx) eng__##name##_##sfx
#define ELEM_CAT(name, sfx) ELEM_CAT2(name, sfx)
#define ELEM(name) ELEM_CAT(name, ELEM_SUFFIX)

/* ---- fast scalar building blocks, written to inline into vectorizable loops ---- */

static inline float fast_exp(float x) {
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    /* round to nearest by the 1.5 * 2^23 shift: unlike roundf, GCC vectorizes it (roundf was a libm
     * call per element and made GELU a third of a bert-base forward) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f; /* ln2 split in a high and a low part */
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* unsigned: a NaN's conversion gives INT32_MIN on x86, and a signed shift of it is undefined; the
     * bits are the same for every other value */
    uint32_t e = ((uint32_t)(int32_t)n + 127u) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return p * scale;
}

/* erfc(z) for z >= 0 */
static inline float fast_erfc_pos(float z) {
    float t = 1.0f / (1.0f + 0.5f * z);
    float poly = -0.82215223f + t * 0.17087277f;
    poly = 1.48851587f + t * poly;
    poly = -1.13520398f + t * poly;
    poly = 0.27886807f + t * poly;
    poly = -0.18628806f + t * poly;
    poly = 0.09678418f + t * poly;
    poly = 0.37409196f + t * poly;
    poly = 1.00002368f + t * poly;
    poly = -1.26551223f + t * poly;
    return t * fast_exp(-z * z + poly);
}

static inline float fast_tanh(float x) {
    x = x > 9.0f ? 9.0f : x;
    x = x < -9.0f ? -9.0f : x;
    return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

static inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

/* GELU of GELU_BLOCK values, each step a loop over the whole block, so that the vectorized steps
 * interleave GELU_BLOCK / lanes independent chains. One value's chain (erfc's rational form, then exp)
 * is ~40 dependent operations, and the out-of-order core overlapped only about two such chains from
 * successive iterations of a one-vector loop: interleaved, 0.55 -> 0.42 ns a value in 48-value calls
 * and 0.53 -> 0.38 on long rows at AVX-512, 1.20 -> 0.72 at AVX2 (AMD EPYC Zen 5 class, one thread),
 * the same bits. 48 values: the width of the low-precision products' epilogue
 * pieces (gemm_lowp.c), three zmm vectors. The exponent's argument -z^2 + poly(t) is at most ~0 (poly
 * is ln(erfc(z)) + z^2 - ln(t), 0 at z = 0), so only exp's lower clamp can apply, written as a max. */
#define GELU_BLOCK 48
static inline __attribute__((always_inline)) void gelu_block(float *x) {
    float z[GELU_BLOCK], t[GELU_BLOCK], p[GELU_BLOCK], n[GELU_BLOCK], r[GELU_BLOCK];
    for (int j = 0; j < GELU_BLOCK; j++) z[j] = fabsf(x[j]) * 0.70710678118654752f;
    for (int j = 0; j < GELU_BLOCK; j++) t[j] = 1.0f / (1.0f + 0.5f * z[j]);
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = -0.82215223f + t[j] * 0.17087277f;
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = 1.48851587f + t[j] * p[j];
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = -1.13520398f + t[j] * p[j];
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = 0.27886807f + t[j] * p[j];
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = -0.18628806f + t[j] * p[j];
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = 0.09678418f + t[j] * p[j];
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = 0.37409196f + t[j] * p[j];
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = 1.00002368f + t[j] * p[j];
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = -1.26551223f + t[j] * p[j];
    /* fast_exp(-z * z + p), step by step */
    for (int j = 0; j < GELU_BLOCK; j++) {
        float v = -z[j] * z[j] + p[j];
        z[j] = v > -87.3f ? v : -87.3f;
    }
    for (int j = 0; j < GELU_BLOCK; j++) n[j] = (z[j] * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    for (int j = 0; j < GELU_BLOCK; j++) r[j] = z[j] - n[j] * 0.693145751953125f;
    for (int j = 0; j < GELU_BLOCK; j++) r[j] = r[j] - n[j] * 1.428606765330187045e-06f;
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = 1.0f / 720.0f * r[j] + 1.0f / 120.0f;
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = p[j] * r[j] + 1.0f / 24.0f;
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = p[j] * r[j] + 1.0f / 6.0f;
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = p[j] * r[j] + 0.5f;
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = p[j] * r[j] + 1.0f;
    for (int j = 0; j < GELU_BLOCK; j++) p[j] = p[j] * r[j] + 1.0f;
    for (int j = 0; j < GELU_BLOCK; j++) {
        uint32_t e = ((uint32_t)(int32_t)n[j] + 127u) << 23; /* as fast_exp */
        float scale;
        memcpy(&scale, &e, sizeof scale);
        float c = t[j] * (p[j] * scale);
        x[j] = 0.5f * x[j] * (x[j] < 0.0f ? c : 2.0f - c);
    }
}

void ELEM(exp)(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = fast_exp(x[i]);
}

void ELEM(act_apply)(eng_act act, float *x, size_t n) {
    switch (act) {
    case ENG_ACT_IDENTITY:
        return;
    case ENG_ACT_GELU: {
        /* 1 + erf(x/sqrt2) is erfc(|x|/sqrt2) for x < 0 and 2 - erfc(...) for x >= 0: no cancellation */
        size_t i = 0;
        for (; i + GELU_BLOCK <= n; i += GELU_BLOCK) gelu_block(x + i);
        for (; i < n; i++) {
            float c = fast_erfc_pos(fabsf(x[i]) * 0.70710678118654752f);
            x[i] = 0.5f * x[i] * (x[i] < 0.0f ? c : 2.0f - c);
        }
        return;
    }
    case ENG_ACT_GELU_NEW:
        for (size_t i = 0; i < n; i++) {
            /* 0.5 (1 + tanh(z)) == sigmoid(2z), without the cancellation of 1 + tanh for z << 0 */
            float v = x[i];
            x[i] = v * fast_sigmoid(1.59576912160573073f * (v + 0.044715f * v * v * v));
        }
        return;
    case ENG_ACT_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    case ENG_ACT_SILU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] * fast_sigmoid(x[i]);
        return;
    case ENG_ACT_TANH:
        for (size_t i = 0; i < n; i++) x[i] = fast_tanh(x[i]);
        return;
    case ENG_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++) x[i] = fast_sigmoid(x[i]);
        return;
    case ENG_ACT_QUICK_GELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] * fast_sigmoid(1.702f * x[i]);
        return;
    case ENG_ACT_LEAKY_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.01f * x[i];
        return;
    default:
        return;
    }
}

/* Reductions in 16 independent lanes, summed at the end: a single running float sum is a chain
 * the compiler may not reorder (no -ffast-math), so it runs one add per 4 cycles, which made
 * LayerNorm and softmax cost 1 ns per element. Lanes vectorize, and round no worse. */
#define LANES 16

static inline float lane_total(const float acc[LANES]) {
    float t = 0.0f;
    for (int j = 0; j < LANES; j++) t += acc[j];
    return t;
}

static float sum_lanes(const float *v, size_t n) {
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += v[i + j];
    for (; i < n; i++) acc[i % LANES] += v[i];
    return lane_total(acc);
}

static float sq_dev_lanes(const float *v, size_t n, float mean) {
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            float d = v[i + j] - mean;
            acc[j] += d * d;
        }
    for (; i < n; i++) acc[i % LANES] += (v[i] - mean) * (v[i] - mean);
    return lane_total(acc);
}

static float max_lanes(const float *v, size_t n) {
    float acc[LANES];
    for (int j = 0; j < LANES; j++) acc[j] = -INFINITY;
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] = v[i + j] > acc[j] ? v[i + j] : acc[j];
    for (; i < n; i++) acc[i % LANES] = v[i] > acc[i % LANES] ? v[i] : acc[i % LANES];
    float m = acc[0];
    for (int j = 1; j < LANES; j++) m = acc[j] > m ? acc[j] : m;
    return m;
}

void ELEM(layernorm)(float *x, size_t rows, size_t dim, const float *g, const float *b, float eps) {
    for (size_t r = 0; r < rows; r++) {
        float *v = x + r * dim;
        float mean = sum_lanes(v, dim) / (float)dim;
        float inv = 1.0f / sqrtf(sq_dev_lanes(v, dim, mean) / (float)dim + eps);
        for (size_t i = 0; i < dim; i++) v[i] = (v[i] - mean) * inv * g[i] + b[i];
    }
}

static void softmax_row(float *x, size_t n) {
    float mx = max_lanes(x, n);
    for (size_t i = 0; i < n; i++) x[i] = fast_exp(x[i] - mx);
    float inv = 1.0f / sum_lanes(x, n);
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

/* Four rows at once, each step over the four: a row's max and sum are chains of dependent operations
 * and its exp a deep one, and one row at a time the core waited on each in turn (128-value rows: 0.55
 * -> 0.36-0.47 ns a value at AVX-512, AMD EPYC Zen 5 class). Per row the operations and their order are
 * softmax_row's (max_lanes, fast_exp, sum_lanes' lanes and total): the same bits. */
#define SOFTMAX_ROWS 4
static void softmax_4rows(float *x, size_t n, size_t ld) {
    float acc[SOFTMAX_ROWS][LANES], mx[SOFTMAX_ROWS], inv[SOFTMAX_ROWS];
    size_t i;
    for (int q = 0; q < SOFTMAX_ROWS; q++)
        for (int j = 0; j < LANES; j++) acc[q][j] = -INFINITY;
    for (i = 0; i + LANES <= n; i += LANES)
        for (int q = 0; q < SOFTMAX_ROWS; q++)
            for (int j = 0; j < LANES; j++) {
                float v = x[q * ld + i + j];
                acc[q][j] = v > acc[q][j] ? v : acc[q][j];
            }
    for (; i < n; i++)
        for (int q = 0; q < SOFTMAX_ROWS; q++) {
            float v = x[q * ld + i];
            acc[q][i % LANES] = v > acc[q][i % LANES] ? v : acc[q][i % LANES];
        }
    for (int q = 0; q < SOFTMAX_ROWS; q++) {
        float m = acc[q][0];
        for (int j = 1; j < LANES; j++) m = acc[q][j] > m ? acc[q][j] : m;
        mx[q] = m;
    }
    for (i = 0; i + LANES <= n; i += LANES)
        for (int q = 0; q < SOFTMAX_ROWS; q++)
            for (int j = 0; j < LANES; j++) x[q * ld + i + j] = fast_exp(x[q * ld + i + j] - mx[q]);
    for (; i < n; i++)
        for (int q = 0; q < SOFTMAX_ROWS; q++) x[q * ld + i] = fast_exp(x[q * ld + i] - mx[q]);
    for (int q = 0; q < SOFTMAX_ROWS; q++)
        for (int j = 0; j < LANES; j++) acc[q][j] = 0.0f;
    for (i = 0; i + LANES <= n; i += LANES)
        for (int q = 0; q < SOFTMAX_ROWS; q++)
            for (int j = 0; j < LANES; j++) acc[q][j] += x[q * ld + i + j];
    for (; i < n; i++)
        for (int q = 0; q < SOFTMAX_ROWS; q++) acc[q][i % LANES] += x[q * ld + i];
    for (int q = 0; q < SOFTMAX_ROWS; q++) inv[q] = 1.0f / lane_total(acc[q]);
    for (int q = 0; q < SOFTMAX_ROWS; q++)
        for (i = 0; i < n; i++) x[q * ld + i] *= inv[q];
}

void ELEM(softmax_rows)(float *x, size_t rows, size_t n, size_t ld) {
    size_t r = 0;
    for (; r + SOFTMAX_ROWS <= rows; r += SOFTMAX_ROWS) softmax_4rows(x + r * ld, n, ld);
    for (; r < rows; r++) softmax_row(x + r * ld, n);
}

void ELEM(add)(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* The sparse product's inner step: each stored weight one 16-wide multiply-add over contiguous
 * floats, four rows of weights' partial sums kept apart to hide the add latency. */
void ELEM(sparse_block)(const eng_sparse *s, const float *xt, float *yt) {
    for (int r = 0; r < s->rows; r++) {
        float acc[4][16] = {{0}};
        int32_t k = s->row_ptr[r], end = s->row_ptr[r + 1];
        for (; k + 4 <= end; k += 4)
            for (int u = 0; u < 4; u++) {
                const float *xc = xt + (size_t)s->col[k + u] * 16;
                float v = s->val[k + u];
                for (int i = 0; i < 16; i++) acc[u][i] += v * xc[i];
            }
        for (; k < end; k++) {
            const float *xc = xt + (size_t)s->col[k] * 16;
            float v = s->val[k];
            for (int i = 0; i < 16; i++) acc[0][i] += v * xc[i];
        }
        for (int i = 0; i < 16; i++) yt[(size_t)r * 16 + i] = (acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]);
    }
}
