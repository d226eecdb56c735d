/* portable.c - the baseline level's product kernels (kern.h): plain C that runs on any CPU and
 * computes what the vector kernels of math/x86/ compute (int8 bit for bit), and the bf16 and int8
 * rounding rules every level shares (gemm_lowp.h). The element-wise ones are elem.c. */
#include <math.h>
#include <string.h>

#include "math/kern.h"

#define NR ENG__LP_NR
#define MR ENG__LP_MR

/* ---- bf16 rounding ---- */

uint16_t eng__bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);             /* zero, subnormal */
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);     /* NaN, quieted */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* nearest, ties to even; overflow -> inf */
}

float eng__f32_from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Symmetric int8 of one row: scale = amax / 127, q = nearest-even(x * 127 / amax). The vector
 * quantizer (gemm_int8.c) computes exactly these float operations, so both paths agree bit for bit.
 * A row holding a NaN or an infinity gets q = 0 and a NaN scale, so that its outputs are NaN as in
 * float32 rather than silently finite. */
float eng__quant_row(const float *x, int K, int8_t *q, int qstride) {
    float amax = 0.0f;
    int bad = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[k])), bad |= isnan(x[k]);
    if (bad || isinf(amax)) {
        for (int k = 0; k < K; k++) q[(size_t)k * qstride] = 0;
        return NAN;
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < K; k++) q[(size_t)k * qstride] = (int8_t)lrintf(x[k] * inv);
    return amax / 127.0f;
}

/* ---- float32 packed ---- */

/* The portable tile (kern.h): the same loops in plain C. */
void eng__f32_tile_c(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                     const float *bias, const float *res, int ldr, int w) {
    float acc[MR][NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR; j++) {
            float s = 0.0f;
            if (j < w && init) s = (bias ? bias[j] : 0.0f) + (res ? res[(size_t)i * ldr + j] : 0.0f);
            acc[i][j] = s;
        }
    for (int k = 0; k < kc; k++, B += NR)
        for (int i = 0; i < mr; i++) {
            float a = A[(size_t)i * lda + k];
            for (int j = 0; j < NR; j++) acc[i][j] += a * B[j];
        }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < w; j++) C[(size_t)i * ldc + j] = init ? acc[i][j] : C[(size_t)i * ldc + j] + acc[i][j];
}

/* ---- bf16 and int8 ---- */

void eng__bf16_c_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                        float *scales) {
    (void)scales;
    for (int m = m0; m < m1; m++) {
        uint16_t *dst = (uint16_t *)(ws + (size_t)m * ldws);
        const float *src = A + (size_t)m * lda;
        for (int k = 0; k < K; k++) dst[k] = eng__bf16_from_f32(src[k]);
        for (int k = K; k < kp; k++) dst[k] = 0;
    }
}

void eng__int8_c_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                        float *scales) {
    for (int m = m0; m < m1; m++) {
        uint8_t *dst = ws + (size_t)m * ldws;
        scales[m] = eng__quant_row(A + (size_t)m * lda, K, (int8_t *)dst, 1);
        for (int k = 0; k < K; k++) dst[k] = (uint8_t)((int)(int8_t)dst[k] + 128);
        for (int k = K; k < kp; k++) dst[k] = 128;
    }
}

/* The prefill of row i, column j of a tile: bias plus the residual when it is folded in. */
static float prefill(const eng__lp_tile *t, int i, int j) {
    return (t->bias ? t->bias[j] : 0.0f) + (t->res ? t->res[(size_t)i * t->ldr + j] : 0.0f);
}

void eng__bf16_c_tile(const eng__lp_tile *t) {
    const uint16_t *B = t->b;
    float acc[MR][NR];
    for (int i = 0; i < t->mr; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = j < t->w ? prefill(t, i, j) : 0.0f;
    for (int kk = 0; kk < t->kp / 2; kk++, B += 2 * NR)
        for (int i = 0; i < t->mr; i++) {
            const uint16_t *a = (const uint16_t *)(t->a + (size_t)i * t->lda) + 2 * kk;
            float a0 = eng__f32_from_bf16(a[0]), a1 = eng__f32_from_bf16(a[1]);
            for (int j = 0; j < NR; j++) {
                acc[i][j] += a0 * eng__f32_from_bf16(B[2 * j]);
                acc[i][j] += a1 * eng__f32_from_bf16(B[2 * j + 1]);
            }
        }
    for (int i = 0; i < t->mr; i++) memcpy(t->c + (size_t)i * t->ldc, acc[i], sizeof(float) * (size_t)t->w);
}

void eng__int8_c_tile(const eng__lp_tile *t) {
    const int8_t *B = t->b;
    int32_t acc[MR][NR] = {{0}};
    for (int g = 0; g < t->kp / 4; g++, B += 4 * NR)
        for (int i = 0; i < t->mr; i++) {
            const uint8_t *a = t->a + (size_t)i * t->lda + 4 * g;
            for (int j = 0; j < NR; j++)
                acc[i][j] += a[0] * B[4 * j] + a[1] * B[4 * j + 1] + a[2] * B[4 * j + 2] + a[3] * B[4 * j + 3];
        }
    for (int i = 0; i < t->mr; i++)
        for (int j = 0; j < t->w; j++) {
            float s = t->b_scale[j] * t->a_scale[i];
            t->c[(size_t)i * t->ldc + j] = (float)(acc[i][j] - t->b_comp[j]) * s + prefill(t, i, j);
        }
}

