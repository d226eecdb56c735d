/* avx512_common.h - what the AVX-512 and AMX kernels share (avx512_gemm.c, avx512_bf16.c, avx512_vnni.c,
 * amx.c; all compiled for x86-64-v4): lane masks, and the int8 tile's dequantizing store, so that the
 * VNNI and AMX kernels give the same bits. */
#ifndef ADAPTERD_ENGINE_MATH_X86_AVX512_COMMON_H
#define ADAPTERD_ENGINE_MATH_X86_AVX512_COMMON_H

#include <immintrin.h>

#include "math/kern.h"

/* Lanes [0, left) of 16 set. */
static inline __attribute__((always_inline)) __mmask16 lanes(int left) {
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
}

/* Row i, features [16 v, 16 v + 16) of an int8 tile out of their integer sums (masked by mk):
 * (sum - comp_n) * scale_n * scale_m + bias (+ residual). as = scale_m broadcast. The per-feature
 * vectors are loaded here, for every row: loaded once before the rows, GCC kept them live across the
 * VNNI tile's k loop and spilled accumulators in it (2x slower). */
static inline __attribute__((always_inline)) void int8_store(const eng__lp_tile *t, int i, int v, __m512i sum,
                                                             __m512 as, __mmask16 mk) {
    __m512 pre = t->bias ? _mm512_maskz_loadu_ps(mk, t->bias + 16 * v) : _mm512_setzero_ps();
    if (t->res) pre = _mm512_add_ps(pre, _mm512_maskz_loadu_ps(mk, t->res + (size_t)i * t->ldr + 16 * v));
    __m512i comp = _mm512_maskz_loadu_epi32(mk, t->b_comp + 16 * v);
    __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum, comp));
    __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, t->b_scale + 16 * v), as);
    _mm512_mask_storeu_ps(t->c + (size_t)i * t->ldc + 16 * v, mk, _mm512_fmadd_ps(f, s, pre));
}

#endif
