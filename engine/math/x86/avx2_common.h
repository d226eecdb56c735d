/* avx2_common.h - the vocabulary of the x86-64-v3 kernel files (avx2_gemm.c, avx2_bf16.c, avx2_int8.c,
 * avx_vnni.c): what the drivers of math/f32_impl.h and math/lp_impl.h need from a level, on 8-lane ymm
 * registers (masked loads and stores for the ragged right edge of a tile), and the per-row int8 scale
 * of eng__quant_row on ymm registers. */
#ifndef ADAPTERD_ENGINE_MATH_X86_AVX2_COMMON_H
#define ADAPTERD_ENGINE_MATH_X86_AVX2_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "math/kern.h"

#define VL 8 /* float32 lanes of a vector */
typedef __m256 vf;
typedef __m256i vi;

/* Lanes [0, left) of 8 set. */
static inline __attribute__((always_inline)) __m256i lanes(int left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define INL static inline __attribute__((always_inline))
INL vf vf_zero(void) { return _mm256_setzero_ps(); }
INL vf vf_set1(float x) { return _mm256_set1_ps(x); }
INL vf vf_loadu(const float *p) { return _mm256_loadu_ps(p); }
/* p[0..n) into the low lanes, zeros above; n <= 0 reads nothing */
INL vf vf_load_n(const float *p, int n) { return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(n)); }
/* the first n lanes of x to p; nothing for n <= 0 */
INL void vf_store_n(float *p, vf x, int n) {
    if (n >= 8)
        _mm256_storeu_ps(p, x);
    else
        _mm256_maskstore_ps(p, lanes(n), x);
}
INL vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
INL vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
INL vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); } /* a * b + c */
INL vi vi_zero(void) { return _mm256_setzero_si256(); }
INL vi vi_load_n(const int32_t *p, int n) { return _mm256_maskload_epi32(p, lanes(n)); }
INL vi vi_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
INL vf vi_to_f(vi a) { return _mm256_cvtepi32_ps(a); }
/* one 32-byte panel load, and 4 bytes of activations broadcast to every 32-bit lane (vpdp*'s operands) */
INL vi vi_loadu(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INL vi vi_bcast4(const uint8_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm256_set1_epi32(x);
}
#undef INL

/* Scans a row of K floats: returns its scale (amax / 127; NaN when the row holds a NaN or an infinity,
 * so that its outputs are NaN as in float32) and sets *inv to the multiplier that quantizes it
 * (127 / amax, or 0): the same float operations as eng__quant_row, so every path gives the same q. */
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
