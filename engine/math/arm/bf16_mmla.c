/* bf16_mmla.c - the bf16 product's kernel for ARM64 CPUs with the BF16 extension (gemm_lowp.h,
 * kern.h): bfmmla, a 2 x 4 by 4 x 2 bfloat16 product into a 2 x 2 block of float32 per
 * instruction (Neoverse V1 / N2 and later: Graviton 3 and 4).
 *
 * The same walk as i8mm_int8.c with bf16 pairs in place of int8 quads: the panel (pairs of k, 48
 * features apart) gives 4 features' pairs in 16 bytes, so two loads (pairs j and j + 1) and two
 * 32-bit zips make the operands of features (n, n+1) and (n+2, n+3), 4 k each; the activations
 * (bf16 rows, eng__bf16_c_rows) pair rows i and i+1, 4 k each. Pieces of 4 rows x 24 features:
 * 24 accumulators, per 4 k 24 bfmmla for 12 panel loads + 12 zips.
 * Arithmetic: the products and their sums are the instruction's (Arm's BFMMLA, like BFDOT, rounds
 * its partial sums to odd and flushes subnormals), not an fp32 FMA chain: within the same bound of
 * the double reference (tests/engine/math/test_gemm_lowp.c), but not the other kernels' bits. */
#include "math/arm/neon_common.h"

#include <stdint.h>

#define NR ENG__LP_NR

static inline __attribute__((always_inline)) void piece(int mr, const eng__lp_tile *t, int f0, int w) {
    float32x4_t acc[2][12];
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {
        if (2 * p >= mr) break;
#pragma GCC unroll 12
        for (int v = 0; v < 12; v++) acc[p][v] = vdupq_n_f32(0.0f);
    }
    const uint16_t *a = (const uint16_t *)t->a;
    size_t lda = t->lda / sizeof(uint16_t);
    const uint16_t *B = (const uint16_t *)t->b + (size_t)f0 * 2;
    for (int k = 0; k < t->kp; k += 4, B += 2 * 2 * NR) { /* kp is a multiple of 32 */
        bfloat16x8_t x[2];
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            if (2 * p >= mr) break;
            uint16x4_t r0 = vld1_u16(a + (size_t)(2 * p) * lda + k);
            uint16x4_t r1 = 2 * p + 1 < mr ? vld1_u16(a + (size_t)(2 * p + 1) * lda + k) : vdup_n_u16(0);
            x[p] = vreinterpretq_bf16_u16(vcombine_u16(r0, r1));
        }
#pragma GCC unroll 6
        for (int g = 0; g < 6; g++) { /* features 4g .. 4g+3 of the piece */
            uint32x4_t q0 = vreinterpretq_u32_u16(vld1q_u16(B + 8 * g));
            uint32x4_t q1 = vreinterpretq_u32_u16(vld1q_u16(B + 2 * NR + 8 * g));
            bfloat16x8_t b01 = vreinterpretq_bf16_u32(vzip1q_u32(q0, q1));
            bfloat16x8_t b23 = vreinterpretq_bf16_u32(vzip2q_u32(q0, q1));
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                if (2 * p >= mr) break;
                acc[p][2 * g] = vbfmmlaq_f32(acc[p][2 * g], x[p], b01);
                acc[p][2 * g + 1] = vbfmmlaq_f32(acc[p][2 * g + 1], x[p], b23);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        int p = i / 2;
#pragma GCC unroll 6
        for (int g = 0; g < 6; g++) {
            int f = f0 + 4 * g, n = w - 4 * g;
            if (n <= 0) break;
            float64x2_t lo = vreinterpretq_f64_f32(acc[p][2 * g]), hi = vreinterpretq_f64_f32(acc[p][2 * g + 1]);
            float32x4_t s = vreinterpretq_f32_f64(i % 2 ? vzip2q_f64(lo, hi) : vzip1q_f64(lo, hi));
            store_n(t->c + (size_t)i * t->ldc + f, vaddq_f32(s, lp_prefill(t, i, f, n)), n);
        }
    }
}

static void piece_any(int mr, const eng__lp_tile *t, int f0, int w) {
    switch (mr) { LP_PIECE_CASES(piece, t, f0, w) }
}

void eng__bf16_bfmmla_tile(const eng__lp_tile *t) { lp_pieces(t, 24, piece_any); }
