/* neon_gemm.c - the float32 packed product's tile for ARMv8-A NEON (gemm_packed.c, kern.h): the driver
 * of math/f32_impl.h with a micro-kernel of lane-indexed FMAs.
 *
 * NEON has 32 registers of 4 floats. The 8 x 48 tile is cut into pieces of 4 rows x 24 features:
 * 24 accumulators, 4 registers of activations (one row's next 4 k each, loaded once per 4 k) and
 * the panel's 6 vectors of a k loaded one at a time (2-4 live): 30-32 registers. Each panel vector
 * feeds 4 lane-indexed FMAs (fmla v.4s, v.4s, v.s[l]), so per k a piece does 24 FMAs for 6 panel
 * loads and 1 activation load: 0.29 loads per FMA, against 2 FMA and 2-3 load pipes on Neoverse N1
 * and V1 (FMA-bound). The two row halves of a tile run back to back over the same 24 columns, so
 * that panel half (KC x 24 floats) is read from L1 by the second. */
#include "math/arm/neon_common.h"

#define F32_SUFFIX neon
#define F32_PR 4  /* rows per piece */
#define F32_PW 24 /* features per piece: six vectors of 4 */
#define F32_KERNEL
#define F32_NR 48
#define F32_NV (F32_PW / VL)

static inline __attribute__((always_inline)) void f32_kernel(int mr, int kc, const float *A, int lda, const float *B,
                                                             vf acc[F32_PR][F32_NV]) {
    int k = 0;
    for (; k + 4 <= kc; k += 4, B += 4 * F32_NR) {
        float32x4_t a[F32_PR];
#pragma GCC unroll 4
        for (int i = 0; i < F32_PR; i++) {
            if (i >= mr) break;
            a[i] = vld1q_f32(A + (size_t)i * lda + k);
        }
#define STEP(l)                                                                   \
    _Pragma("GCC unroll 6") for (int v = 0; v < F32_NV; v++) {                        \
        float32x4_t b = vld1q_f32(B + (l) * F32_NR + 4 * v);                          \
        _Pragma("GCC unroll 4") for (int i = 0; i < F32_PR; i++) {                    \
            if (i >= mr) break;                                                   \
            acc[i][v] = vfmaq_laneq_f32(acc[i][v], b, a[i], l);                   \
        }                                                                         \
    }
        STEP(0) STEP(1) STEP(2) STEP(3)
#undef STEP
    }
    for (; k < kc; k++, B += F32_NR) {
#pragma GCC unroll 6
        for (int v = 0; v < F32_NV; v++) {
            float32x4_t b = vld1q_f32(B + 4 * v);
#pragma GCC unroll 4
            for (int i = 0; i < F32_PR; i++) {
                if (i >= mr) break;
                acc[i][v] = vfmaq_n_f32(acc[i][v], b, A[(size_t)i * lda + k]);
            }
        }
    }
}

#include "math/f32_impl.h"
