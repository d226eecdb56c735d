/* avx2_bf16.c - the bf16 product's kernel for x86-64-v3 (gemm_lowp.h, kern.h): the drivers of
 * math/lp_impl.h over the same packed weights as the AVX-512 kernel, multiplied with AVX2 FMAs.
 *
 * The panel stays bf16 in memory (half of float32's weight traffic) and is widened in registers: a
 * bf16 pair (k, k+1) of one feature is one 32-bit lane, so a shift left by 16 gives k's float32 and
 * a mask of the high half gives k+1's. The activations are rounded to bf16 as on AVX-512 but kept as
 * float32 in the workspace (4 bytes a value), so that each is one broadcast. Pieces of 4 rows x 16
 * features: 8 accumulators, 4 widened weight vectors, 16 FMAs per pair of k. */
#include "math/x86/avx2_common.h"

/* GCC 12's partial redundancy elimination keeps values across the k loop that push accumulators out
 * of the 16 ymm registers (as in avx512_vnni.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre")
#endif

/* eng__bf16_from_f32 on 8 lanes, the result as float32 bits (h << 16). */
static inline __m256i bf16_round(__m256i u) {
    const __m256i exp = _mm256_set1_epi32(0x7F800000), abs = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u), sign = _mm256_set1_epi32((int)0x80000000u);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), hi);
    __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, exp), _mm256_setzero_si256());
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), exp);
    __m256i quiet = _mm256_or_si256(_mm256_and_si256(u, hi), _mm256_set1_epi32(0x00400000));
    r = _mm256_blendv_epi8(r, _mm256_and_si256(u, sign), tiny);
    return _mm256_blendv_epi8(r, quiet, nan);
}

/* 8 values rounded to bf16, stored as float32 */
static inline __attribute__((always_inline)) void lp_row_step(uint8_t *dst, const float *src, int k, int K) {
    __m256i x = _mm256_castps_si256(_mm256_maskload_ps(src + k, lanes(K - k)));
    _mm256_storeu_si256((__m256i *)(dst + (size_t)k * 4), bf16_round(x));
}

#define LP_INT8 0
#define LP_PR 4
#define LP_PW 16
#define LP_TILE eng__bf16_avx2_tile
#define LP_ROWS eng__bf16_avx2_rows
#define LP_ROW_STEP 8
#include "math/lp_impl.h"

static inline __attribute__((always_inline)) void lp_kernel(int mr, const eng__lp_tile *t, int f0,
                                                            lp_acc acc[LP_PR][LP_NV]) {
    const float *a = (const float *)t->a;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    size_t lda = t->lda / sizeof(float);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    }
    const uint8_t *B = (const uint8_t *)t->b + (size_t)f0 * 4;
    int pairs = t->kp / 2;
    for (int kk = 0; kk < pairs; kk++, B += 2 * 2 * ENG__LP_NR, a += 2) {
        /* k's products for every row, then k+1's: one broadcast live at a time, and the odd
         * weights made from the loads only once the even ones are done with (16 registers) */
        __m256i x0 = _mm256_loadu_si256((const __m256i *)B), x1 = _mm256_loadu_si256((const __m256i *)(B + 32));
        __m256 w0 = _mm256_castsi256_ps(_mm256_slli_epi32(x0, 16)), w1 = _mm256_castsi256_ps(_mm256_slli_epi32(x1, 16));
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (i >= mr) break;
            __m256 a0 = _mm256_broadcast_ss(a + (size_t)i * lda);
            acc[i][0] = _mm256_fmadd_ps(a0, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a0, w1, acc[i][1]);
        }
        w0 = _mm256_castsi256_ps(_mm256_and_si256(x0, hi)), w1 = _mm256_castsi256_ps(_mm256_and_si256(x1, hi));
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (i >= mr) break;
            __m256 a1 = _mm256_broadcast_ss(a + (size_t)i * lda + 1);
            acc[i][0] = _mm256_fmadd_ps(a1, w0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a1, w1, acc[i][1]);
        }
    }
}
