/* avx512_common.h - the vocabulary of the x86-64-v4 kernel files (avx512_gemm.c, avx512_bf16.c,
 * avx512_vnni.c, amx.c): what the drivers of math/f32_impl.h and math/lp_impl.h need from a level,
 * on 16-lane zmm registers with mask registers for the ragged right edge of a tile. */
#ifndef ADAPTERD_ENGINE_MATH_X86_AVX512_COMMON_H
#define ADAPTERD_ENGINE_MATH_X86_AVX512_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "math/kern.h"

#define VL 16 /* float32 lanes of a vector */
typedef __m512 vf;
typedef __m512i vi;

/* Lanes [0, left) of 16 set. */
static inline __attribute__((always_inline)) __mmask16 lanes(int left) {
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}

#define INL static inline __attribute__((always_inline))
INL vf vf_zero(void) { return _mm512_setzero_ps(); }
INL vf vf_set1(float x) { return _mm512_set1_ps(x); }
INL vf vf_loadu(const float *p) { return _mm512_loadu_ps(p); }
/* p[0..n) into the low lanes, zeros above; n <= 0 reads nothing */
INL vf vf_load_n(const float *p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
/* the first n lanes of x to p; nothing for n <= 0 */
INL void vf_store_n(float *p, vf x, int n) { _mm512_mask_storeu_ps(p, lanes(n), x); }
INL vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
INL vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
INL vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); } /* a * b + c */
INL vi vi_zero(void) { return _mm512_setzero_si512(); }
INL vi vi_load_n(const int32_t *p, int n) { return _mm512_maskz_loadu_epi32(lanes(n), p); }
INL vi vi_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
INL vf vi_to_f(vi a) { return _mm512_cvtepi32_ps(a); }
/* one 64-byte panel load, and 4 bytes of activations broadcast to every 32-bit lane (vpdp*'s operands) */
INL vi vi_loadu(const void *p) { return _mm512_loadu_si512(p); }
INL vi vi_bcast4(const uint8_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm512_set1_epi32(x);
}
#undef INL

#endif
