/* avx2_int8.c - the int8 product's kernel for x86-64-v3 (gemm_lowp.h, kern.h): the drivers of
 * math/lp_impl.h over the same packed weights as the VNNI kernels, multiplied with vpmaddwd.
 *
 * AVX2 has no u8 x s8 dot product that cannot saturate (vpmaddubsw adds two u8 x s8 products into an
 * int16: 255 x 127 x 2 overflows), so the activations are stored as int16 (q, without vnni's +128
 * offset) and the weights sign-extended from the panel with vpmovsxbw: vpmaddwd multiplies pairs of
 * int16 into exact int32 sums, 16 products per instruction, twice float32's 8 per FMA. A weight quad
 * (k..k+3 of one feature) becomes two int32 lanes, summed at the end. Pieces of 4 rows x 12 features:
 * 12 accumulators, 3 widened weight vectors, 1 broadcast. The integer sums are the VNNI kernels'
 * exactly (no offset to remove), so the outputs are the same. */
#include "math/x86/avx2_common.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre") /* as in avx512_vnni.c: PRE pushed accumulators out of registers */
#endif

/* 16 values stored as int16 q */
static inline __attribute__((always_inline)) void lp_row_step(uint8_t *dst, const float *src, int k, int K, vf inv) {
    __m256i q0, q1;
    quant16(src, k, K, inv, &q0, &q1);
    _mm256_storeu_si256((__m256i *)(dst + (size_t)k * 2),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), _MM_SHUFFLE(3, 1, 2, 0)));
}

#define LP_INT8 1
#define LP_PR 4
#define LP_PW 12
#define LP_COMP 0
#define LP_TILE eng__int8_avx2_tile
#define LP_ROWS eng__int8_avx2_rows
#define LP_ROW_STEP 16
#include "math/lp_impl.h"

static inline __attribute__((always_inline)) void lp_kernel(int mr, const eng__lp_tile *t, int f0,
                                                            lp_acc out[LP_PR][LP_NV]) {
    const uint8_t *a = t->a;
    __m256i acc[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        acc[i][0] = acc[i][1] = acc[i][2] = _mm256_setzero_si256();
    }
    const int8_t *B = (const int8_t *)t->b + (size_t)f0 * 4;
    size_t lda = t->lda;
    int quads = t->kp / 4;
    for (int g = 0; g < quads; g++, B += 4 * ENG__LP_NR, a += 8) {
        __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)B));
        __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(B + 16)));
        __m256i b2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(B + 32)));
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (i >= mr) break;
            long long quad;
            memcpy(&quad, a + (size_t)i * lda, 8);
            __m256i x = _mm256_set1_epi64x(quad);
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(b0, x));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(b1, x));
            acc[i][2] = _mm256_add_epi32(acc[i][2], _mm256_madd_epi16(b2, x));
        }
    }
    /* lanes (2f, 2f+1) of a vector hold feature f's two halves: add them, restore feature order */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        out[i][0] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[i][0], acc[i][1]), _MM_SHUFFLE(3, 1, 2, 0));
        out[i][1] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[i][2], acc[i][2]), _MM_SHUFFLE(3, 1, 2, 0));
    }
}
