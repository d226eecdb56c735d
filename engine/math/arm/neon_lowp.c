/* neon_lowp.c - the low-precision products' NEON parts for every ARMv8-A CPU (gemm_lowp.h, kern.h):
 * the int8 activation rows of the ARM64 int8 kernels, and the bf16 product for CPUs without the
 * BF16 extension (Neoverse N1, Cortex-A72): the drivers of math/lp_impl.h with a widening kernel.
 *
 * int8 rows: quantized as eng__quant_row (so q and the scale are the portable path's, bit for bit)
 *   and stored as signed q: sdot and smmla multiply signed bytes by signed bytes, so there is no
 *   +128 offset and no compensation. Padding past K is 0.
 * bf16: the panel stays bf16 in memory (half of float32's weight traffic) and is widened in
 *   registers: a bf16 pair (k, k+1) of one feature is one 32-bit lane, so a shift left by 16 gives
 *   k's float32 and a mask of the high half gives k+1's. The activations stay bf16 in the workspace
 *   (eng__bf16_c_rows) and are widened 4 k at a time, then used by lane. Pieces of 4 rows x 24
 *   features: 24 accumulators, 4 activation registers, the panel's vectors 1-3 live. */
#include "math/arm/neon_common.h"

void eng__int8_neon_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                         float *scales) {
    for (int m = m0; m < m1; m++) {
        int8_t *dst = (int8_t *)(ws + (size_t)m * ldws);
        scales[m] = eng__quant_row(A + (size_t)m * lda, K, dst, 1);
        if (kp > K) memset(dst + K, 0, (size_t)(kp - K));
    }
}

#define LP_INT8 0
#define LP_PR 4
#define LP_PW 24
#define LP_TILE eng__bf16_neon_tile
#include "math/lp_impl.h"

static inline __attribute__((always_inline)) void lp_kernel(int mr, const eng__lp_tile *t, int f0,
                                                            lp_acc acc[LP_PR][LP_NV]) {
    const uint32x4_t hi = vdupq_n_u32(0xFFFF0000u);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
#pragma GCC unroll 6
        for (int v = 0; v < 6; v++) acc[i][v] = vdupq_n_f32(0.0f);
    }
    const uint16_t *a = (const uint16_t *)t->a;
    size_t lda = t->lda / sizeof(uint16_t);
    const uint16_t *B = (const uint16_t *)t->b + (size_t)f0 * 2;
    for (int k = 0; k < t->kp; k += 4, B += 2 * 2 * ENG__LP_NR) { /* kp is a multiple of 32 */
        float32x4_t x[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (i >= mr) break;
            x[i] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(a + (size_t)i * lda + k), 16));
        }
        /* pair p of the two: k + 2p in lane 2p, k + 2p + 1 in lane 2p + 1 */
#define PAIR(p)                                                                              \
    _Pragma("GCC unroll 6") for (int v = 0; v < 6; v++) {                                    \
        uint32x4_t u = vreinterpretq_u32_u16(vld1q_u16(B + (p) * 2 * ENG__LP_NR + 8 * v));   \
        float32x4_t we = vreinterpretq_f32_u32(vshlq_n_u32(u, 16));                          \
        float32x4_t wo = vreinterpretq_f32_u32(vandq_u32(u, hi));                            \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                \
            if (i >= mr) break;                                                              \
            acc[i][v] = vfmaq_laneq_f32(acc[i][v], we, x[i], 2 * (p));                       \
            acc[i][v] = vfmaq_laneq_f32(acc[i][v], wo, x[i], 2 * (p) + 1);                   \
        }                                                                                    \
    }
        PAIR(0) PAIR(1)
#undef PAIR
    }
}
