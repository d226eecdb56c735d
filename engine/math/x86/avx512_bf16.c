/* avx512_bf16.c - the AVX-512 BF16 kernels of the bf16 product (gemm_lowp.h): row conversion with
 * vcvtne2ps2bf16 and an 8 x 48 micro-tile on vdpbf16ps.
 *
 * One k step of the tile takes a pair of k: three 64-byte loads of the panel (48 features x 2
 * bf16), eight 32-bit broadcasts of activation pairs, and 24 vdpbf16ps into 8 x 3 float32
 * accumulators held in registers, the float32 kernel's shape with twice the products per
 * instruction. Compiled for x86-64-v4 + AVX512-BF16 (engine/CMakeLists.txt); runs where kern.c says so. */
#include "math/kern.h"
#include "math/x86/avx512_common.h"

#include <immintrin.h>
#include <string.h>

#define NR ENG__LP_NR
#define MR ENG__LP_MR

void eng__bf16_avx512_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                                  float *scales) {
    (void)scales;
    for (int m = m0; m < m1; m++) {
        const float *src = A + (size_t)m * lda;
        uint8_t *dst = ws + (size_t)m * ldws;
        for (int k = 0; k < kp; k += 32) { /* rows are whole 64-byte lines: store full vectors */
            __m512 lo = _mm512_maskz_loadu_ps(lanes(K - k), src + k);
            __m512 hi = _mm512_maskz_loadu_ps(lanes(K - k - 16), src + k + 16);
            __m512bh h = _mm512_cvtne2ps_pbh(hi, lo); /* lo's 16 values first: the row's order */
            _mm512_store_si512((void *)(dst + (size_t)k * 2), (__m512i)h);
        }
    }
}

static inline __attribute__((always_inline)) void tile(int mr, const eng__lp_tile *t) {
    __mmask16 mk[3] = {lanes(t->w), lanes(t->w - 16), lanes(t->w - 32)};
    __m512 acc[MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) {
            __m512 s = _mm512_setzero_ps();
            if (t->bias) s = _mm512_maskz_loadu_ps(mk[v], t->bias + 16 * v);
            if (t->res) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mk[v], t->res + (size_t)i * t->ldr + 16 * v));
            acc[i][v] = s;
        }
    }
    const uint8_t *B = t->b, *a = t->a;
    size_t lda = t->lda;
    int pairs = t->kp / 2;
    for (int kk = 0; kk < pairs; kk++, B += 2 * 2 * NR, a += 4) {
        __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)B);
        __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(B + 64));
        __m512bh b2 = (__m512bh)_mm512_load_si512((const void *)(B + 128));
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            if (i >= mr) break;
            int32_t pair;
            memcpy(&pair, a + (size_t)i * lda, 4);
            __m512bh x = (__m512bh)_mm512_set1_epi32(pair);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b1);
            acc[i][2] = _mm512_dpbf16_ps(acc[i][2], x, b2);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) _mm512_mask_storeu_ps(t->c + (size_t)i * t->ldc + 16 * v, mk[v], acc[i][v]);
    }
}

void eng__bf16_avx512_tile(const eng__lp_tile *t) {
    switch (t->mr) {
#define TILE_CASE(r) \
    case r: tile(r, t); break;
        TILE_CASE(8) TILE_CASE(7) TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
#undef TILE_CASE
    default: break;
    }
}

