/* avx512_bf16.c - the bf16 product's kernel for AVX-512 BF16 (gemm_lowp.h, kern.h): the drivers of
 * math/lp_impl.h with vdpbf16ps on zmm registers, and the rows' rounding with vcvtne2ps2bf16 (AMX's
 * bf16 tiles read the same rows).
 *
 * The tile is one piece of 8 rows x 48 features: per pair of k, three 64-byte loads of the panel (48
 * features x 2 bf16), eight 32-bit broadcasts of activation pairs, and 24 vdpbf16ps into 8 x 3
 * float32 accumulators held in registers, the float32 kernel's shape with twice the products per
 * instruction. */
#include "math/x86/avx512_common.h"

/* 32 values rounded to bf16, lo's 16 first: the row's order */
static inline __attribute__((always_inline)) void lp_row_step(uint8_t *dst, const float *src, int k, int K) {
    __m512 lo = _mm512_maskz_loadu_ps(lanes(K - k), src + k);
    __m512 hi = _mm512_maskz_loadu_ps(lanes(K - k - 16), src + k + 16);
    _mm512_store_si512((void *)(dst + (size_t)k * 2), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

#define LP_INT8 0
#define LP_PR 8
#define LP_PW 48
#define LP_DOT(acc, x, b) _mm512_dpbf16_ps(acc, (__m512bh)(x), (__m512bh)(b))
#define LP_TILE eng__bf16_avx512_tile
#define LP_ROWS eng__bf16_avx512_rows
#define LP_ROW_STEP 32
#include "math/lp_impl.h"
