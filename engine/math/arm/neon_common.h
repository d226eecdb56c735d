/* neon_common.h - what the ARM64 kernels share (the files of math/arm): loads and stores of the first n (< 4)
 * floats of a vector for the ragged right edge of a tile (NEON has no masked loads), and the walk of
 * a low-precision tile in pieces (math/lp_pieces.h). */
#ifndef ADAPTERD_ENGINE_MATH_ARM_NEON_COMMON_H
#define ADAPTERD_ENGINE_MATH_ARM_NEON_COMMON_H

#include <arm_neon.h>
#include <string.h>

#include "math/kern.h"
#include "math/lp_pieces.h"

/* p[0..n) into the low lanes, zeros above; n <= 0 gives zeros, n >= 4 a plain load. */
static inline float32x4_t load_n(const float *p, int n) {
    if (n >= 4) return vld1q_f32(p);
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (n > 0) memcpy(v, p, sizeof(float) * (size_t)n);
    return vld1q_f32(v);
}

/* The first n lanes of x to p (nothing for n <= 0). */
static inline void store_n(float *p, float32x4_t x, int n) {
    if (n >= 4) {
        vst1q_f32(p, x);
        return;
    }
    if (n <= 0) return;
    float v[4];
    vst1q_f32(v, x);
    memcpy(p, v, sizeof(float) * (size_t)n);
}

/* The prefill of a low-precision tile's row i at features [f, f + 4) (n valid): bias plus residual. */
static inline float32x4_t lp_prefill(const eng__lp_tile *t, int i, int f, int n) {
    float32x4_t s = t->bias ? load_n(t->bias + f, n) : vdupq_n_f32(0.0f);
    if (t->res) s = vaddq_f32(s, load_n(t->res + (size_t)i * t->ldr + f, n));
    return s;
}

#endif
