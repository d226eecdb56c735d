/* i8mm_int8.c - the int8 product's kernel for ARM64 CPUs with the int8 matrix-multiply extension
 * (gemm_lowp.h, kern.h): smmla, a 2 x 8 by 8 x 2 signed byte product into a 2 x 2 block of int32
 * per instruction, twice sdot's products (Neoverse V1 / N2 and later: Graviton 3 and 4).
 *
 * smmla wants 8 consecutive k of two features in one register; the panel (the same as every other
 * int8 kernel's: quads of 4 k, 48 features apart) gives 4 features' quads in 16 bytes, so two loads
 * (quads g and g + 1) and two 32-bit zips make the operands of features (n, n+1) and (n+2, n+3).
 * The activations (signed q, neon_lowp.c's rows) are paired by rows: 8 k of rows i and i+1 in one
 * register. Pieces of 4 rows x 24 features: 2 row pairs x 12 feature pairs = 24 accumulators of
 * 2 x 2, 2 activation registers and 4 panel registers live: per 8 k, 24 smmla (768 products) for
 * 12 panel loads + 12 zips and 4 half-register activation loads. Each accumulator holds (row i,
 * n), (i, n+1), (i+1, n), (i+1, n+1); 64-bit zips put the rows back at the end. */
#include "math/arm/neon_common.h"

#include <stdint.h>

#define NR ENG__LP_NR

static inline __attribute__((always_inline)) void piece(int mr, const eng__lp_tile *t, int f0, int w) {
    int32x4_t acc[2][12];
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {
        if (2 * p >= mr) break;
#pragma GCC unroll 12
        for (int v = 0; v < 12; v++) acc[p][v] = vdupq_n_s32(0);
    }
    const int8_t *a = (const int8_t *)t->a;
    const int8_t *B = (const int8_t *)t->b + (size_t)f0 * 4;
    size_t lda = t->lda;
    for (int k = 0; k < t->kp; k += 8, B += 2 * 4 * NR) { /* kp is a multiple of 64 */
        int8x16_t x[2];
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            if (2 * p >= mr) break;
            int8x8_t r0 = vld1_s8(a + (size_t)(2 * p) * lda + k);
            int8x8_t r1 = 2 * p + 1 < mr ? vld1_s8(a + (size_t)(2 * p + 1) * lda + k) : vdup_n_s8(0);
            x[p] = vcombine_s8(r0, r1);
        }
#pragma GCC unroll 6
        for (int g = 0; g < 6; g++) { /* features 4g .. 4g+3 of the piece */
            int32x4_t q0 = vreinterpretq_s32_s8(vld1q_s8(B + 16 * g));
            int32x4_t q1 = vreinterpretq_s32_s8(vld1q_s8(B + 4 * NR + 16 * g));
            int8x16_t b01 = vreinterpretq_s8_s32(vzip1q_s32(q0, q1)), b23 = vreinterpretq_s8_s32(vzip2q_s32(q0, q1));
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                if (2 * p >= mr) break;
                acc[p][2 * g] = vmmlaq_s32(acc[p][2 * g], x[p], b01);
                acc[p][2 * g + 1] = vmmlaq_s32(acc[p][2 * g + 1], x[p], b23);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        int p = i / 2;
        float32x4_t as = vdupq_n_f32(t->a_scale[i]);
#pragma GCC unroll 6
        for (int g = 0; g < 6; g++) {
            int f = f0 + 4 * g, n = w - 4 * g;
            if (n <= 0) break;
            int64x2_t lo = vreinterpretq_s64_s32(acc[p][2 * g]), hi = vreinterpretq_s64_s32(acc[p][2 * g + 1]);
            int32x4_t s = vreinterpretq_s32_s64(i % 2 ? vzip2q_s64(lo, hi) : vzip1q_s64(lo, hi));
            float32x4_t sc = vmulq_f32(load_n(t->b_scale + f, n), as);
            float32x4_t y = vfmaq_f32(lp_prefill(t, i, f, n), vcvtq_f32_s32(s), sc);
            store_n(t->c + (size_t)i * t->ldc + f, y, n);
        }
    }
}

static void piece_any(int mr, const eng__lp_tile *t, int f0, int w) {
    switch (mr) { LP_PIECE_CASES(piece, t, f0, w) }
}

void eng__int8_i8mm_tile(const eng__lp_tile *t) { lp_pieces(t, 24, piece_any); }
