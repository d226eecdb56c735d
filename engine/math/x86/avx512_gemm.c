/* avx512_gemm.c - the float32 packed product's micro-tile for x86-64-v4 (gemm_packed.c, kern.h).
 *
 * One k step reads 48 contiguous floats of the panel (three zmm loads) and 8 activations, and does
 * 24 vector FMAs into 8 x 48 accumulators that stay in registers (24 of the 32 zmm registers). */
#include "math/kern.h"
#include "math/x86/avx512_common.h"

#include <immintrin.h>

#define NR 48
#define MR 8

/* One tile: C[0..mr)[0..48) (columns masked to w) over k in [0, kc). init: start from the
 * prefill (bias, plus residual when the activation is the identity) instead of C. */
static inline __attribute__((always_inline)) void tile(int mr, int kc, const float *A, int lda, const float *B,
                                                       float *C, int ldc, int init, const float *bias,
                                                       const float *res, int ldr, int w) {
    __mmask16 mk[3] = {lanes(w), lanes(w - 16), lanes(w - 32)};
    __m512 acc[MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) {
            __m512 s = _mm512_setzero_ps();
            if (init && bias) s = _mm512_maskz_loadu_ps(mk[v], bias + 16 * v);
            if (init && res) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mk[v], res + (size_t)i * ldr + 16 * v));
            acc[i][v] = s;
        }
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(B), b1 = _mm512_load_ps(B + 16), b2 = _mm512_load_ps(B + 32);
        B += NR;
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            if (i >= mr) break;
            __m512 a = _mm512_set1_ps(A[(size_t)i * lda + k]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(a, b2, acc[i][2]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) {
            float *c = C + (size_t)i * ldc + 16 * v;
            __m512 y = init ? acc[i][v] : _mm512_add_ps(_mm512_maskz_loadu_ps(mk[v], c), acc[i][v]);
            _mm512_mask_storeu_ps(c, mk[v], y);
        }
    }
}

void eng__f32_tile_avx512(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                     const float *bias, const float *res, int ldr, int w) {
    switch (mr) {
#define TILE_CASE(r) \
    case r: tile(r, kc, A, lda, B, C, ldc, init, bias, res, ldr, w); break;
        TILE_CASE(8) TILE_CASE(7) TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
#undef TILE_CASE
    default: break;
    }
}
