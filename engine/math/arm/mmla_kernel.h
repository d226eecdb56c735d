/* mmla_kernel.h - the micro-kernel of the ARM64 matrix-multiply instructions (bfmmla: bf16_mmla.c,
 * smmla: i8mm_int8.c) for the drivers of math/lp_impl.h: one source, the instruction a parameter.
 *
 * Both multiply a 2 x 8-byte block of activations (rows i and i+1: 4 bf16 or 8 int8 k each) by the
 * same shape of weights (features n and n+1) into a 2 x 2 block of sums. The panel (4-byte words:
 * bf16 pairs or int8 quads, 48 features apart) gives 4 features' words in 16 bytes, so two loads
 * (words j and j + 1) and two 32-bit zips make the operands of features (n, n+1) and (n+2, n+3), 8
 * bytes of k each. Pieces of 4 rows x 24 features: 2 row pairs x 12 feature pairs = 24 accumulators
 * of 2 x 2, 2 activation registers and 4 panel registers live: per 8 bytes of k, 24 instructions for
 * 12 panel loads + 12 zips and 4 half-register activation loads. Each accumulator holds (i, n),
 * (i, n+1), (i+1, n), (i+1, n+1); 64-bit zips put the rows back at the end.
 *
 * Include after math/lp_impl.h, with LP_MMLA(acc, x, b) (x, b: uint8x16_t) and LP_PR 4, LP_PW 24. */

static inline __attribute__((always_inline)) void lp_kernel(int mr, const eng__lp_tile *t, int f0,
                                                            lp_acc out[LP_PR][LP_NV]) {
    lp_acc acc[2][12];
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {
        if (2 * p >= mr) break;
#pragma GCC unroll 12
        for (int v = 0; v < 12; v++) acc[p][v] = (lp_acc)vdupq_n_s32(0);
    }
    const uint8_t *a = t->a;
    const uint8_t *B = (const uint8_t *)t->b + (size_t)f0 * 4;
    size_t lda = t->lda;
    int bytes = t->kp * (LP_INT8 ? 1 : 2); /* of one row's k: a multiple of 64 */
    for (int k = 0; k < bytes; k += 8, B += 2 * 4 * ENG__LP_NR) {
        uint8x16_t x[2];
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            if (2 * p >= mr) break;
            uint8x8_t r0 = vld1_u8(a + (size_t)(2 * p) * lda + k);
            uint8x8_t r1 = 2 * p + 1 < mr ? vld1_u8(a + (size_t)(2 * p + 1) * lda + k) : vdup_n_u8(0);
            x[p] = vcombine_u8(r0, r1);
        }
#pragma GCC unroll 6
        for (int g = 0; g < 6; g++) { /* features 4g .. 4g+3 of the piece */
            uint32x4_t q0 = vreinterpretq_u32_u8(vld1q_u8(B + 16 * g));
            uint32x4_t q1 = vreinterpretq_u32_u8(vld1q_u8(B + 4 * ENG__LP_NR + 16 * g));
            uint8x16_t b01 = vreinterpretq_u8_u32(vzip1q_u32(q0, q1)), b23 = vreinterpretq_u8_u32(vzip2q_u32(q0, q1));
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                if (2 * p >= mr) break;
                acc[p][2 * g] = LP_MMLA(acc[p][2 * g], x[p], b01);
                acc[p][2 * g + 1] = LP_MMLA(acc[p][2 * g + 1], x[p], b23);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        int p = i / 2;
#pragma GCC unroll 6
        for (int g = 0; g < 6; g++) {
            uint64x2_t lo = (uint64x2_t)acc[p][2 * g], hi = (uint64x2_t)acc[p][2 * g + 1];
            out[i][g] = (lp_acc)(i % 2 ? vzip2q_u64(lo, hi) : vzip1q_u64(lo, hi));
        }
    }
}
