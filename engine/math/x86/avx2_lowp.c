/* avx2_lowp.c - the bf16 and int8 products' kernels for x86-64-v3 (gemm_lowp.h, kern.h): the same
 * packed weights as the AVX-512 kernels, multiplied with AVX2 instructions.
 *
 * bf16: the panel stays bf16 in memory (half of float32's weight traffic) and is widened in
 *   registers: a bf16 pair (k, k+1) of one feature is one 32-bit lane, so a shift left by 16 gives
 *   k's float32 and a mask of the high half gives k+1's. The activations are rounded to bf16 as on
 *   AVX-512 but kept as float32 in the workspace (4 bytes a value), so that each is one broadcast.
 *   Pieces of 4 rows x 16 features: 8 accumulators, 4 widened weight vectors, 16 FMAs per pair of k.
 * int8: AVX2 has no u8 x s8 dot product that cannot saturate (vpmaddubsw adds two u8 x s8 products
 *   into an int16: 255 x 127 x 2 overflows), so the activations are stored as int16 (q, without
 *   vnni's +128 offset) and the weights sign-extended from the panel with vpmovsxbw: vpmaddwd
 *   multiplies pairs of int16 into exact int32 sums, 16 products per instruction, twice float32's
 *   8 per FMA. A weight quad (k..k+3 of one feature) becomes two int32 lanes, summed at the end.
 *   Pieces of 4 rows x 12 features: 12 accumulators, 3 widened weight vectors, 1 broadcast. The
 *   integer sums are the VNNI kernels' exactly (no offset to remove), so the outputs are the same. */
#include "math/kern.h"
#include "math/x86/avx2_common.h"

#include <immintrin.h>
#include <string.h>

/* GCC 12's partial redundancy elimination keeps values across the k loop that push accumulators out
 * of the 16 ymm registers (as in avx512_vnni.c). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-pre")
#endif

#define NR ENG__LP_NR

/* ---- bf16 ---- */

/* eng_bf16_from_f32 on 8 lanes, the result as float32 bits (h << 16). */
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

void eng__bf16_avx2_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                         float *scales) {
    (void)scales;
    for (int m = m0; m < m1; m++) {
        const float *src = A + (size_t)m * lda;
        float *dst = (float *)(ws + (size_t)m * ldws);
        for (int k = 0; k < kp; k += 8) { /* kp is even; the row holds whole 64-byte lines */
            __m256i x = _mm256_castps_si256(_mm256_maskload_ps(src + k, lanes(K - k)));
            _mm256_storeu_si256((__m256i *)(dst + k), bf16_round(x));
        }
    }
}

static inline __attribute__((always_inline)) void bf16_piece(int mr, const eng__lp_tile *t, int f0, int w) {
    const float *a = (const float *)t->a;
    __m256i mk[2] = {lanes(w), lanes(w - 8)};
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    size_t lda = t->lda / sizeof(float);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            __m256 s = _mm256_setzero_ps();
            if (t->bias) s = _mm256_maskload_ps(t->bias + f0 + 8 * v, mk[v]);
            if (t->res) s = _mm256_add_ps(s, _mm256_maskload_ps(t->res + (size_t)i * t->ldr + f0 + 8 * v, mk[v]));
            acc[i][v] = s;
        }
    }
    const uint8_t *B = (const uint8_t *)t->b + (size_t)f0 * 4;
    int pairs = t->kp / 2;
    for (int kk = 0; kk < pairs; kk++, B += 2 * 2 * NR, a += 2) {
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
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) _mm256_maskstore_ps(t->c + (size_t)i * t->ldc + f0 + 8 * v, mk[v], acc[i][v]);
    }
}

static void bf16_piece_any(int mr, const eng__lp_tile *t, int f0, int w) {
    switch (mr) { LP_PIECE_CASES(bf16_piece, t, f0, w) }
}

void eng__bf16_avx2_tile(const eng__lp_tile *t) { lp_pieces(t, 16, bf16_piece_any); }

/* ---- int8 ---- */

/* quant_row of gemm_lowp.c on 8 lanes at a time, the same float operations: q as int16. */
void eng__int8_avx2_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                         float *scales) {
    for (int m = m0; m < m1; m++) {
        const float *src = A + (size_t)m * lda;
        int16_t *dst = (int16_t *)(ws + (size_t)m * ldws);
        __m256 inv;
        scales[m] = row_scale(src, K, &inv);
        for (int k = 0; k < kp; k += 16) { /* 16 int16 per store; the row holds whole 64-byte lines */
            __m256i q0, q1;
            quant16(src, k, K, inv, &q0, &q1);
            _mm256_storeu_si256((__m256i *)(dst + k), _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), _MM_SHUFFLE(3, 1, 2, 0)));
        }
    }
}

static inline __attribute__((always_inline)) void int8_piece(int mr, const eng__lp_tile *t, int f0, int w) {
    const uint8_t *a = t->a;
    __m256i acc[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++) acc[i][v] = _mm256_setzero_si256();
    }
    const int8_t *B = (const int8_t *)t->b + (size_t)f0 * 4;
    size_t lda = t->lda;
    int quads = t->kp / 4;
    for (int g = 0; g < quads; g++, B += 4 * NR, a += 8) {
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
    __m256i mk[2] = {lanes(w), lanes(w - 8)};
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (i >= mr) break;
        __m256i s[2] = {_mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[i][0], acc[i][1]), _MM_SHUFFLE(3, 1, 2, 0)),
                        _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[i][2], acc[i][2]), _MM_SHUFFLE(3, 1, 2, 0))};
        __m256 as = _mm256_set1_ps(t->a_scale[i]);
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            int f = f0 + 8 * v;
            __m256 pre = t->bias ? _mm256_maskload_ps(t->bias + f, mk[v]) : _mm256_setzero_ps();
            if (t->res) pre = _mm256_add_ps(pre, _mm256_maskload_ps(t->res + (size_t)i * t->ldr + f, mk[v]));
            __m256 sc = _mm256_mul_ps(_mm256_maskload_ps(t->b_scale + f, mk[v]), as);
            __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[v]), sc, pre);
            _mm256_maskstore_ps(t->c + (size_t)i * t->ldc + f, mk[v], y);
        }
    }
}

static void int8_piece_any(int mr, const eng__lp_tile *t, int f0, int w) {
    switch (mr) { LP_PIECE_CASES(int8_piece, t, f0, w) }
}

void eng__int8_avx2_tile(const eng__lp_tile *t) { lp_pieces(t, 12, int8_piece_any); }
