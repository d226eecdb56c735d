/* avx_vnni.c - the int8 product's kernels for AVX2 CPUs with AVX-VNNI (gemm_lowp.h, kern.h):
 * vpdpbusd on ymm registers, the VEX-encoded twin of the AVX-512 VNNI instruction (Alder Lake and
 * later Intel cores, AMD Zen 5).
 *
 * The same math as avx512_vnni.c: activations quantized per row and stored as u8 = q + 128, four
 * k per vpdpbusd into int32 sums, the offset removed with comp_n at the end. Pieces of 4 rows x 24
 * features: 12 accumulators, 3 panel loads (8 features x 4 k each) and 1 broadcast per four k:
 * 32 products per instruction, twice avx2_lowp.c's vpmaddwd. */
#include "math/kern.h"
#include "math/x86/avx2_common.h"

#include <immintrin.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre")
#endif

#define NR ENG__LP_NR

/* quant_row of gemm_lowp.c, eight lanes at a time: the same float operations, stored as q + 128. */
void eng__int8_avx_vnni_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                             float *scales) {
    const __m256i off = _mm256_set1_epi32(128);
    for (int m = m0; m < m1; m++) {
        const float *src = A + (size_t)m * lda;
        uint8_t *dst = ws + (size_t)m * ldws;
        __m256 inv;
        scales[m] = row_scale(src, K, &inv);
        for (int k = 0; k < kp; k += 16) { /* 16 bytes per store; lanes past K give 128 */
            __m256i q0, q1;
            quant16(src, k, K, inv, &q0, &q1);
            __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_add_epi32(q0, off), _mm256_add_epi32(q1, off)),
                                                   _MM_SHUFFLE(3, 1, 2, 0)); /* 0..255 */
            __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
            _mm_storeu_si128((__m128i *)(dst + k), b);
        }
    }
}

static inline __attribute__((always_inline)) void piece(int mr, const eng__lp_tile *t, int f0, int w) {
    const uint8_t *a = t->a;
    __m256i acc[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) acc[i][v] = _mm256_setzero_si256();
    }
    const uint8_t *B = (const uint8_t *)t->b + (size_t)f0 * 4;
    size_t lda = t->lda;
    int quads = t->kp / 4;
    for (int g = 0; g < quads; g++, B += 4 * NR, a += 4) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)B);
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(B + 32));
        __m256i b2 = _mm256_loadu_si256((const __m256i *)(B + 64));
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (i >= mr) break;
            int32_t quad;
            memcpy(&quad, a + (size_t)i * lda, 4);
            __m256i x = _mm256_set1_epi32(quad);
            acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], x, b0);
            acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], x, b1);
            acc[i][2] = _mm256_dpbusd_avx_epi32(acc[i][2], x, b2);
        }
    }
    __m256i mk[3] = {lanes(w), lanes(w - 8), lanes(w - 16)};
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        __m256 as = _mm256_set1_ps(t->a_scale[i]);
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) {
            int f = f0 + 8 * v;
            __m256 pre = t->bias ? _mm256_maskload_ps(t->bias + f, mk[v]) : _mm256_setzero_ps();
            if (t->res) pre = _mm256_add_ps(pre, _mm256_maskload_ps(t->res + (size_t)i * t->ldr + f, mk[v]));
            __m256i comp = _mm256_maskload_epi32(t->b_comp + f, mk[v]);
            __m256 sum = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i][v], comp));
            __m256 sc = _mm256_mul_ps(_mm256_maskload_ps(t->b_scale + f, mk[v]), as);
            _mm256_maskstore_ps(t->c + (size_t)i * t->ldc + f, mk[v], _mm256_fmadd_ps(sum, sc, pre));
        }
    }
}

static void piece_any(int mr, const eng__lp_tile *t, int f0, int w) {
    switch (mr) { LP_PIECE_CASES(piece, t, f0, w) }
}

void eng__int8_avx_vnni_tile(const eng__lp_tile *t) { lp_pieces(t, 24, piece_any); }
