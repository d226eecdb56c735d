/* avx2_common.h - what the AVX2 and AVX-VNNI low-precision kernels share (avx2_lowp.c, avx_vnni.c; both
 * compiled for x86-64-v3): the per-row int8 scale of gemm_lowp.c's quant_row on ymm registers, and the
 * walk of a tile in pieces (math/lp_pieces.h). */
#ifndef ADAPTERD_ENGINE_MATH_X86_AVX2_COMMON_H
#define ADAPTERD_ENGINE_MATH_X86_AVX2_COMMON_H

#include <immintrin.h>

#include "math/kern.h"
#include "math/lp_pieces.h"

/* Lanes [0, left) of 8 set. */
static inline __m256i lanes(int left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Scans a row of K floats: returns its scale (amax / 127; NaN when the row holds a NaN or an infinity,
 * so that its outputs are NaN as in float32) and sets *inv to the multiplier that quantizes it
 * (127 / amax, or 0): the same float operations as quant_row, so every path gives the same q. */
static inline float row_scale(const float *src, int K, __m256 *inv) {
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 mx = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int k = 0; k < K; k += 8) {
        __m256 x = _mm256_maskload_ps(src + k, lanes(K - k));
        mx = _mm256_max_ps(mx, _mm256_and_ps(x, abs));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    float lane[8];
    _mm256_storeu_ps(lane, mx);
    float amax = 0.0f;
    for (int i = 0; i < 8; i++) amax = lane[i] > amax ? lane[i] : amax;
    int bad = _mm256_movemask_ps(nan) || amax > 3.4028235e38f;
    *inv = _mm256_set1_ps(amax > 0.0f && !bad ? 127.0f / amax : 0.0f);
    return bad ? __builtin_nanf("") : amax / 127.0f;
}

/* 16 values of a row quantized with inv (lanes past K give 0), as int32 in two vectors. */
static inline void quant16(const float *src, int k, int K, __m256 inv, __m256i *q0, __m256i *q1) {
    *q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_maskload_ps(src + k, lanes(K - k)), inv));
    *q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_maskload_ps(src + k + 8, lanes(K - k - 8)), inv));
}

#endif
