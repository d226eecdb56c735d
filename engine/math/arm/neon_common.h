/* neon_common.h - what the ARM64 kernels share (the files of math/arm): loads and stores of the first n (< 4)
 * floats of a vector for the ragged right edge of a tile (NEON has no masked loads), and the walk of
 * a low-precision tile in pieces of up to 4 rows. */
#ifndef ADAPTERD_ENGINE_MATH_ARM_NEON_COMMON_H
#define ADAPTERD_ENGINE_MATH_ARM_NEON_COMMON_H

#include <arm_neon.h>
#include <string.h>

#include "math/kern.h"

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

/* A piece: rows [0, mr) (mr <= 4) of t, re-based at its first row, times features [f0, f0 + w). */
typedef void (*neon_piece_fn)(int mr, const eng__lp_tile *t, int f0, int w);

/* Runs a tile (up to 8 rows x 48 features) as pieces of up to 4 rows x width features: for each
 * block of features, its row halves back to back, so the second reads that block of the panel
 * from L1. */
static inline __attribute__((always_inline)) void neon_pieces(const eng__lp_tile *t, int width, neon_piece_fn piece) {
    for (int f0 = 0; f0 < t->w; f0 += width) {
        int w = t->w - f0 < width ? t->w - f0 : width;
        for (int r = 0; r < t->mr; r += 4) {
            eng__lp_tile p = *t;
            p.mr = t->mr - r < 4 ? t->mr - r : 4;
            p.a = t->a + (size_t)r * t->lda;
            p.c = t->c + (size_t)r * t->ldc;
            p.res = t->res ? t->res + (size_t)r * t->ldr : NULL;
            p.a_scale = t->a_scale ? t->a_scale + r : NULL;
            piece(p.mr, &p, f0, w);
        }
    }
}

/* The body of a piece function: mr as a constant in each case, so the piece's loops unroll. */
#define NEON_PIECE_CASES(piece, t, f0, w) \
    case 4: piece(4, t, f0, w); break;    \
    case 3: piece(3, t, f0, w); break;    \
    case 2: piece(2, t, f0, w); break;    \
    case 1: piece(1, t, f0, w); break;    \
    default: break;

#endif
