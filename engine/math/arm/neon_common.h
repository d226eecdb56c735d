/* neon_common.h - the vocabulary of the ARM64 kernel files (the files of math/arm): what the drivers
 * of math/f32_impl.h and math/lp_impl.h need from a level, on 4-lane NEON registers. NEON has no
 * masked loads, so the ragged right edge of a tile goes through a small buffer. */
#ifndef ADAPTERD_ENGINE_MATH_ARM_NEON_COMMON_H
#define ADAPTERD_ENGINE_MATH_ARM_NEON_COMMON_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "math/kern.h"

#define VL 4 /* float32 lanes of a vector */
typedef float32x4_t vf;
typedef int32x4_t vi;

#define INL static inline __attribute__((always_inline))
/* p[0..n) into the low lanes, zeros above; n <= 0 gives zeros, n >= 4 a plain load. */
INL float32x4_t vf_load_n(const float *p, int n) {
    if (n >= 4) return vld1q_f32(p);
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (n > 0) memcpy(v, p, sizeof(float) * (size_t)n);
    return vld1q_f32(v);
}

/* The first n lanes of x to p (nothing for n <= 0). */
INL void vf_store_n(float *p, float32x4_t x, int n) {
    if (n >= 4) {
        vst1q_f32(p, x);
        return;
    }
    if (n <= 0) return;
    float v[4];
    vst1q_f32(v, x);
    memcpy(p, v, sizeof(float) * (size_t)n);
}
INL vf vf_zero(void) { return vdupq_n_f32(0.0f); }
INL vf vf_set1(float x) { return vdupq_n_f32(x); }
INL vf vf_loadu(const float *p) { return vld1q_f32(p); }
INL vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }
INL vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }
INL vf vf_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); } /* a * b + c */
INL vi vi_zero(void) { return vdupq_n_s32(0); }
INL vf vi_to_f(vi a) { return vcvtq_f32_s32(a); }
INL vi vi_sub(vi a, vi b) { return vsubq_s32(a, b); }
INL vi vi_load_n(const int32_t *p, int n) { return vreinterpretq_s32_f32(vf_load_n((const float *)p, n)); }
#undef INL

#endif
