/* avx2_gemm.c - the float32 packed product's micro-tile for x86-64-v3 (gemm_packed.c, kern.h).
 *
 * AVX2 has 16 ymm registers of 8 floats, so the 8 x 48 tile of the AVX-512 kernel (24
 * accumulators of 16) is cut into pieces of 4 rows x 24 features: 12 accumulators, 3 panel loads
 * and 1 broadcast per k, 16 registers in all. Per k a piece does 12 FMAs for 7 loads (two FMA and
 * two or three loads per cycle on Zen 3 and Haswell-class cores: FMA-bound). The two row halves of
 * a tile run back to back over the same 24 columns, so that panel half (KC x 24 floats, 18 KB)
 * is read from L1 by the second. */
#include "math/kern.h"

#include <immintrin.h>

#define NR 48
#define PR 4  /* rows per piece */
#define PW 24 /* features per piece: three ymm */

/* Lanes [0, left) of 8 set. */
static inline __m256i lanes(int left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __attribute__((always_inline)) void piece(int mr, int kc, const float *A, int lda, const float *B,
                                                        float *C, int ldc, int init, const float *bias,
                                                        const float *res, int ldr, int w) {
    __m256i mk[3] = {lanes(w), lanes(w - 8), lanes(w - 16)};
    __m256 acc[PR][3];
#pragma GCC unroll 4
    for (int i = 0; i < PR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) {
            __m256 s = _mm256_setzero_ps();
            if (init && bias) s = _mm256_maskload_ps(bias + 8 * v, mk[v]);
            if (init && res) s = _mm256_add_ps(s, _mm256_maskload_ps(res + (size_t)i * ldr + 8 * v, mk[v]));
            acc[i][v] = s;
        }
    }
    for (int k = 0; k < kc; k++, B += NR) {
        __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8), b2 = _mm256_loadu_ps(B + 16);
#pragma GCC unroll 4
        for (int i = 0; i < PR; i++) {
            if (i >= mr) break;
            __m256 a = _mm256_broadcast_ss(A + (size_t)i * lda + k);
            acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
            acc[i][2] = _mm256_fmadd_ps(a, b2, acc[i][2]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < PR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) {
            float *c = C + (size_t)i * ldc + 8 * v;
            __m256 y = init ? acc[i][v] : _mm256_add_ps(_mm256_maskload_ps(c, mk[v]), acc[i][v]);
            if (w >= 8 * (v + 1))
                _mm256_storeu_ps(c, y);
            else
                _mm256_maskstore_ps(c, mk[v], y);
        }
    }
}

void eng__f32_tile_avx2(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                        const float *bias, const float *res, int ldr, int w) {
    for (int h = 0; h < NR && h < w; h += PW) {
        int wh = w - h < PW ? w - h : PW;
        const float *bh = bias ? bias + h : NULL;
        for (int r = 0; r < mr; r += PR) {
            const float *ar = A + (size_t)r * lda, *rr = res ? res + (size_t)r * ldr + h : NULL;
            float *cr = C + (size_t)r * ldc + h;
            switch (mr - r < PR ? mr - r : PR) {
#define PIECE(n) \
    case n: piece(n, kc, ar, lda, B + h, cr, ldc, init, bh, rr, ldr, wh); break;
                PIECE(4) PIECE(3) PIECE(2) PIECE(1)
#undef PIECE
            default: break;
            }
        }
    }
}
