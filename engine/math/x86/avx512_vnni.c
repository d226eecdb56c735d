/* avx512_vnni.c - the AVX-512 VNNI kernels of the int8 product (gemm_lowp.h): per-row quantization
 * of the activations to u8 and an 8 x 48 micro-tile on vpdpbusd with the dequantization fused.
 *
 * One k step of the tile takes four k: three 64-byte loads of the panel (48 features x 4 int8),
 * eight 32-bit broadcasts of activation quads, and 24 vpdpbusd into 8 x 3 int32 accumulators. At
 * the end each accumulator becomes float once: (sum - comp_n) * scale_n * scale_m + prefill.
 * Compiled with a target attribute, so it exists in a portable build and runs only where
 * eng_cpu_has(ENG_CPU_AVX512_VNNI) (gemm_lowp.c decides). */
#include "math/kern.h"
#include "math/x86/avx512_common.h"

#include <immintrin.h>
#include <string.h>

/* GCC 12's partial redundancy elimination keeps values across the k loop that push the 24 int32
 * accumulators out of the 32 zmm registers: every step then stored and reloaded them, and the
 * tile ran at a third of vpdpbusd's rate. Without it the loop holds them all in registers. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre")
#endif

#define NR ENG__LP_NR
#define MR ENG__LP_MR

/* The float operations of quant_row in gemm_lowp.c, sixteen at a time: the same bits. */
void eng__int8_avx512_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                                  float *scales) {
    for (int m = m0; m < m1; m++) {
        const float *src = A + (size_t)m * lda;
        uint8_t *dst = ws + (size_t)m * ldws;
        __m512 mx = _mm512_setzero_ps();
        __mmask16 nan = 0;
        for (int k = 0; k < K; k += 16) {
            __m512 x = _mm512_maskz_loadu_ps(lanes(K - k), src + k);
            mx = _mm512_max_ps(mx, _mm512_abs_ps(x));
            nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        }
        float amax = _mm512_reduce_max_ps(mx);
        int bad = nan || amax > 3.4028235e38f; /* a NaN or an infinity: NaN outputs, as float32 gives */
        __m512 inv = _mm512_set1_ps(amax > 0.0f && !bad ? 127.0f / amax : 0.0f);
        scales[m] = bad ? __builtin_nanf("") : amax / 127.0f;
        const __m512i off = _mm512_set1_epi32(128);
        for (int k = 0; k < kp; k += 16) { /* rows are whole 64-byte lines; lanes past K give 128 */
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(K - k), src + k), inv));
            _mm_store_si128((__m128i *)(dst + k), _mm512_cvtepi32_epi8(_mm512_add_epi32(q, off)));
        }
    }
}

static inline __attribute__((always_inline)) void tile(int mr, const eng__lp_tile *t) {
    __mmask16 mk[3] = {lanes(t->w), lanes(t->w - 16), lanes(t->w - 32)};
    __m512i acc[MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) acc[i][v] = _mm512_setzero_si512();
    }
    const uint8_t *B = t->b, *a = t->a;
    size_t lda = t->lda;
    int quads = t->kp / 4;
    for (int g = 0; g < quads; g++, B += 4 * NR, a += 4) {
        __m512i b0 = _mm512_load_si512((const void *)B);
        __m512i b1 = _mm512_load_si512((const void *)(B + 64));
        __m512i b2 = _mm512_load_si512((const void *)(B + 128));
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            if (i >= mr) break;
            int32_t quad;
            memcpy(&quad, a + (size_t)i * lda, 4);
            __m512i x = _mm512_set1_epi32(quad);
            acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], x, b0);
            acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], x, b1);
            acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], x, b2);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
        __m512 as = _mm512_set1_ps(t->a_scale[i]);
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) int8_store(t, i, v, acc[i][v], as, mk[v]);
    }
}

void eng__int8_avx512_tile(const eng__lp_tile *t) {
    switch (t->mr) {
#define TILE_CASE(r) \
    case r: tile(r, t); break;
        TILE_CASE(8) TILE_CASE(7) TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
#undef TILE_CASE
    default: break;
    }
}

