/* avx512_vnni.c - the int8 product's kernel for AVX-512 VNNI (gemm_lowp.h, kern.h): the drivers of
 * math/lp_impl.h with vpdpbusd on zmm registers, and the per-row quantization of the activations to
 * u8 = q + 128 (AMX's int8 tiles read the same rows).
 *
 * The tile is one piece of 8 rows x 48 features: per four k, three 64-byte loads of the panel (48
 * features x 4 int8), eight 32-bit broadcasts of activation quads, and 24 vpdpbusd into 8 x 3 int32
 * accumulators; at the end each becomes float once: (sum - comp_n) * scale_n * scale_m + prefill. */
#include "math/x86/avx512_common.h"

/* GCC 12's partial redundancy elimination keeps values across the k loop that push the 24 int32
 * accumulators out of the 32 zmm registers: every step then stored and reloaded them, and the
 * tile ran at a third of vpdpbusd's rate. Without it the loop holds them all in registers. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre")
#endif

/* The float operations of eng__quant_row, sixteen at a time: the same scale (NaN for a row with a NaN
 * or an infinity, so its outputs are NaN as float32 gives) and *inv = 127 / amax (or 0). */
static inline float row_scale(const float *src, int K, vf *inv) {
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int k = 0; k < K; k += 16) {
        __m512 x = _mm512_maskz_loadu_ps(lanes(K - k), src + k);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(x));
        nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    }
    float amax = _mm512_reduce_max_ps(mx);
    int bad = nan || amax > 3.4028235e38f;
    *inv = _mm512_set1_ps(amax > 0.0f && !bad ? 127.0f / amax : 0.0f);
    return bad ? __builtin_nanf("") : amax / 127.0f;
}

/* 16 values stored as q + 128; lanes past K give 128 */
static inline __attribute__((always_inline)) void lp_row_step(uint8_t *dst, const float *src, int k, int K, vf inv) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(K - k), src + k), inv));
    _mm_store_si128((__m128i *)(dst + k), _mm512_cvtepi32_epi8(_mm512_add_epi32(q, _mm512_set1_epi32(128))));
}

#define LP_INT8 1
#define LP_PR 8
#define LP_PW 48
#define LP_COMP 1
#define LP_DOT(acc, x, b) _mm512_dpbusd_epi32(acc, x, b)
#define LP_TILE eng__int8_avx512_tile
#define LP_ROWS eng__int8_avx512_rows
#define LP_ROW_STEP 16
#include "math/lp_impl.h"
