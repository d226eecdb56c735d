/* dotprod_int8.c - the int8 product's kernel for ARMv8.2-A CPUs with the dot-product extension
 * (gemm_lowp.h, kern.h): the drivers of math/lp_impl.h with sdot, 4 signed byte products into each
 * int32 lane (Neoverse N1 and later: Graviton 2, Ampere Altra).
 *
 * The panel's layout (kp/4 quads x 48 features x 4 k) is already sdot's: 16 bytes are 4 features'
 * quads. The activations are signed q (neon_lowp.c's rows); one register holds 16 k of a row and
 * each of its 4 quads is used by lane (sdot v.4s, v.16b, v.4b[l]). Pieces of 4 rows x 24 features:
 * 24 accumulators, 4 activation registers (loaded once per 16 k), the panel's 6 vectors of a quad
 * loaded one at a time: per quad 24 sdot (384 products) for 6 panel loads, 0.25 activation loads. */
#include "math/arm/neon_common.h"

#define LP_INT8 1
#define LP_PR 4
#define LP_PW 24
#define LP_COMP 0 /* signed q: no offset */
#define LP_TILE eng__int8_dotprod_tile
#include "math/lp_impl.h"

static inline __attribute__((always_inline)) void lp_kernel(int mr, const eng__lp_tile *t, int f0,
                                                            lp_acc acc[LP_PR][LP_NV]) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
#pragma GCC unroll 6
        for (int v = 0; v < 6; v++) acc[i][v] = vdupq_n_s32(0);
    }
    const int8_t *a = (const int8_t *)t->a;
    const int8_t *B = (const int8_t *)t->b + (size_t)f0 * 4;
    size_t lda = t->lda;
    for (int k = 0; k < t->kp; k += 16, B += 4 * 4 * ENG__LP_NR) { /* kp is a multiple of 64 */
        int8x16_t x[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (i >= mr) break;
            x[i] = vld1q_s8(a + (size_t)i * lda + k);
        }
#define QUAD(l)                                                                 \
    _Pragma("GCC unroll 6") for (int v = 0; v < 6; v++) {                       \
        int8x16_t b = vld1q_s8(B + (l) * 4 * ENG__LP_NR + 16 * v);              \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                   \
            if (i >= mr) break;                                                 \
            acc[i][v] = vdotq_laneq_s32(acc[i][v], b, x[i], l);                 \
        }                                                                       \
    }
        QUAD(0) QUAD(1) QUAD(2) QUAD(3)
#undef QUAD
    }
}
