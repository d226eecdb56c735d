/* neon_gemm.c - the float32 packed product's micro-tile for ARMv8-A NEON (gemm_packed.c, kern.h).
 *
 * NEON has 32 registers of 4 floats. The 8 x 48 tile is cut into pieces of 4 rows x 24 features:
 * 24 accumulators, 4 registers of activations (one row's next 4 k each, loaded once per 4 k) and
 * the panel's 6 vectors of a k loaded one at a time (2-4 live): 30-32 registers. Each panel vector
 * feeds 4 lane-indexed FMAs (fmla v.4s, v.4s, v.s[l]), so per k a piece does 24 FMAs for 6 panel
 * loads and 1 activation load: 0.29 loads per FMA, against 2 FMA and 2-3 load pipes on Neoverse N1
 * and V1 (FMA-bound). The two row halves of a tile run back to back over the same 24 columns, so
 * that panel half (KC x 24 floats) is read from L1 by the second. */
#include "math/arm/neon_common.h"

#define NR 48
#define PR 4  /* rows per piece */
#define PV 6  /* vectors of 4 features per piece */
#define PW 24 /* features per piece */

static inline __attribute__((always_inline)) void piece(int mr, int kc, const float *A, int lda, const float *B,
                                                        float *C, int ldc, int init, const float *bias,
                                                        const float *res, int ldr, int w) {
    float32x4_t acc[PR][PV];
#pragma GCC unroll 4
    for (int i = 0; i < PR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 6
        for (int v = 0; v < PV; v++) {
            float32x4_t s = vdupq_n_f32(0.0f);
            if (init && bias) s = load_n(bias + 4 * v, w - 4 * v);
            if (init && res) s = vaddq_f32(s, load_n(res + (size_t)i * ldr + 4 * v, w - 4 * v));
            acc[i][v] = s;
        }
    }
    int k = 0;
    for (; k + 4 <= kc; k += 4, B += 4 * NR) {
        float32x4_t a[PR];
#pragma GCC unroll 4
        for (int i = 0; i < PR; i++) {
            if (i >= mr) break;
            a[i] = vld1q_f32(A + (size_t)i * lda + k);
        }
#define STEP(l)                                                                   \
    _Pragma("GCC unroll 6") for (int v = 0; v < PV; v++) {                        \
        float32x4_t b = vld1q_f32(B + (l) * NR + 4 * v);                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < PR; i++) {                    \
            if (i >= mr) break;                                                   \
            acc[i][v] = vfmaq_laneq_f32(acc[i][v], b, a[i], l);                   \
        }                                                                         \
    }
        STEP(0) STEP(1) STEP(2) STEP(3)
#undef STEP
    }
    for (; k < kc; k++, B += NR) {
#pragma GCC unroll 6
        for (int v = 0; v < PV; v++) {
            float32x4_t b = vld1q_f32(B + 4 * v);
#pragma GCC unroll 4
            for (int i = 0; i < PR; i++) {
                if (i >= mr) break;
                acc[i][v] = vfmaq_n_f32(acc[i][v], b, A[(size_t)i * lda + k]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < PR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 6
        for (int v = 0; v < PV; v++) {
            float *c = C + (size_t)i * ldc + 4 * v;
            float32x4_t y = init ? acc[i][v] : vaddq_f32(load_n(c, w - 4 * v), acc[i][v]);
            store_n(c, y, w - 4 * v);
        }
    }
}

void eng__f32_tile_neon(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                        const float *bias, const float *res, int ldr, int w) {
    for (int h = 0; h < NR && h < w; h += PW) {
        int wh = w - h < PW ? w - h : PW;
        const float *bh = bias ? bias + h : NULL;
        for (int r = 0; r < mr; r += PR) {
            const float *ar = A + (size_t)r * lda, *rr = res ? res + (size_t)r * ldr + h : NULL;
            float *cr = C + (size_t)r * ldc + h;
            switch (mr - r < PR ? mr - r : PR) {
#define PIECE(n) \
    case n: piece(n, kc, ar, lda, B + h, cr, ldc, init, bh, rr, ldr, wh); break;
                PIECE(4) PIECE(3) PIECE(2) PIECE(1)
#undef PIECE
            default: break;
            }
        }
    }
}
