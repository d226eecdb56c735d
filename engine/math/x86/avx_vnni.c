/* avx_vnni.c - the int8 product's kernel for AVX2 CPUs with AVX-VNNI (gemm_lowp.h, kern.h): the
 * drivers of math/lp_impl.h with vpdpbusd on ymm registers, the VEX-encoded twin of the AVX-512 VNNI
 * instruction (Alder Lake and later Intel cores, AMD Zen 5).
 *
 * The same math as avx512_vnni.c: activations quantized per row and stored as u8 = q + 128, four
 * k per vpdpbusd into int32 sums, the offset removed with comp_n at the end. Pieces of 4 rows x 24
 * features: 12 accumulators, 3 panel loads (8 features x 4 k each) and 1 broadcast per four k:
 * 32 products per instruction, twice avx2_int8.c's vpmaddwd. */
#include "math/x86/avx2_common.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre") /* as in avx512_vnni.c: PRE pushed accumulators out of registers */
#endif

/* 16 values stored as q + 128; lanes past K give 128 */
static inline __attribute__((always_inline)) void lp_row_step(uint8_t *dst, const float *src, int k, int K, vf inv) {
    const __m256i off = _mm256_set1_epi32(128);
    __m256i q0, q1;
    quant16(src, k, K, inv, &q0, &q1);
    __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_add_epi32(q0, off), _mm256_add_epi32(q1, off)),
                                           _MM_SHUFFLE(3, 1, 2, 0)); /* 0..255 */
    _mm_storeu_si128((__m128i *)(dst + k), _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)));
}

#define LP_INT8 1
#define LP_PR 4
#define LP_PW 24
#define LP_COMP 1
#define LP_DOT(acc, x, b) _mm256_dpbusd_avx_epi32(acc, x, b)
#define LP_TILE eng__int8_avx_vnni_tile
#define LP_ROWS eng__int8_avx_vnni_rows
#define LP_ROW_STEP 16
#include "math/lp_impl.h"
