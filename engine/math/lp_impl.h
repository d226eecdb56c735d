/* lp_impl.h - the bf16 and int8 products' drivers (gemm_lowp.h, kern.h), one source compiled into
 * every kernel file, as elem_impl.h and f32_impl.h are: the walk of a tile in pieces that fit the
 * level's registers, the epilogue (the prefill of bias and residual; int8's dequantization) and the
 * loop of the activation rows' conversion. The ISA file gives only its micro-kernel and the
 * conversion of one step of a row; with a dot-product instruction on 32-bit lanes (vdpbf16ps,
 * vpdpbusd) not even the kernel: the broadcast kernel here runs on it. No intrinsics here.
 *
 * Define before the inclusion, after the level's vocabulary (vf, vi, VL, vf_*, vi_*: x86/avx2_common.h,
 * x86/avx512_common.h, arm/neon_common.h). Without any of these, only the epilogues are defined (amx.c).
 *   LP_TILE    the tile function to define (kern.h's eng__lp_tile_fn, e.g. eng__int8_avx512_tile), with
 *     LP_INT8    1 for the int8 product (int32 sums), 0 for bf16 (float32 sums)
 *     LP_PR      rows per piece (at most 8), LP_PW features per piece (dividing 48)
 *     LP_COMP    int8: 1 when the activations carry vpdpbusd's +128 offset, so comp_n is removed
 *     LP_DOT(acc, x, b)  the level's dot product of 4 broadcast bytes of activations with a panel
 *                vector of 4-byte words (bf16 pairs or int8 quads); without it the file defines
 *                lp_kernel (declared below): acc[i][v], i < mr, the raw sums from zero of features
 *                f0 + VL v .. f0 + VL v + VL of the tile's row i, over all of t->kp.
 *   LP_ROWS    the activation rows' converter to define (eng__lp_rows_fn), with LP_INT8 and
 *     LP_ROW_STEP  values converted per lp_row_step (declared below) call; int8 also row_scale. */
#include "math/kern.h"

#define LP_INL static inline __attribute__((always_inline))

/* The prefill of row i of t at features [f, f + n): bias plus residual. */
LP_INL vf lp_prefill(const eng__lp_tile *t, int i, int f, int n) {
    vf s = t->bias ? vf_load_n(t->bias + f, n) : vf_zero();
    if (t->res) s = vf_add(s, vf_load_n(t->res + (size_t)i * t->ldr + f, n));
    return s;
}

/* Row i, features [f, f + n) of a bf16 tile out of their float32 sums. */
LP_INL void lp_store_bf16(const eng__lp_tile *t, int i, int f, int n, vf sum) {
    vf_store_n(t->c + (size_t)i * t->ldc + f, vf_add(sum, lp_prefill(t, i, f, n)), n);
}

/* Row i, features [f, f + n) of an int8 tile out of their integer sums: (sum - comp_n) * scale_n *
 * scale_m + prefill, as = scale_m broadcast; comp: the activations carry the +128 offset. The
 * per-feature vectors are loaded here, for every row: loaded once before the rows, GCC kept them live
 * across the VNNI tile's k loop and spilled accumulators in it (2x slower). Every kernel does these
 * float operations in this order, so all give the same bits. */
LP_INL void lp_store_int8(const eng__lp_tile *t, int i, int f, int n, vi sum, vf as, int comp) {
    if (comp) sum = vi_sub(sum, vi_load_n(t->b_comp + f, n));
    vf s = vf_mul(vf_load_n(t->b_scale + f, n), as);
    vf_store_n(t->c + (size_t)i * t->ldc + f, vf_fma(vi_to_f(sum), s, lp_prefill(t, i, f, n)), n);
}

#ifdef LP_TILE
#define LP_NV ((LP_PW + VL - 1) / VL) /* sum vectors per row of a piece */
#if LP_INT8
typedef vi lp_acc;
#else
typedef vf lp_acc;
#endif

#ifdef LP_DOT
/* Per 4-byte word of k (a bf16 pair, an int8 quad): LP_NV panel loads of VL features' words, then per
 * row one broadcast of its word and LP_NV dot products. */
LP_INL void lp_kernel(int mr, const eng__lp_tile *t, int f0, lp_acc acc[LP_PR][LP_NV]) {
#pragma GCC unroll 8
    for (int i = 0; i < LP_PR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 6
        for (int v = 0; v < LP_NV; v++) acc[i][v] = (lp_acc)vi_zero();
    }
    const uint8_t *B = (const uint8_t *)t->b + (size_t)f0 * 4, *a = t->a;
    size_t lda = t->lda;
    int words = t->kp / (LP_INT8 ? 4 : 2);
    for (int g = 0; g < words; g++, B += 4 * ENG__LP_NR, a += 4) {
        vi b[LP_NV];
#pragma GCC unroll 6
        for (int v = 0; v < LP_NV; v++) b[v] = vi_loadu(B + 4 * VL * v);
#pragma GCC unroll 8
        for (int i = 0; i < LP_PR; i++) {
            if (i >= mr) break;
            vi x = vi_bcast4(a + (size_t)i * lda);
#pragma GCC unroll 6
            for (int v = 0; v < LP_NV; v++) acc[i][v] = LP_DOT(acc[i][v], x, b[v]);
        }
    }
}
#else
static inline __attribute__((always_inline)) void lp_kernel(int mr, const eng__lp_tile *t, int f0,
                                                            lp_acc acc[LP_PR][LP_NV]);
#endif

/* One piece: rows [0, mr) of t times features [f0, f0 + w), w <= LP_PW. */
LP_INL void lp_piece(int mr, const eng__lp_tile *t, int f0, int w) {
    lp_acc acc[LP_PR][LP_NV];
    lp_kernel(mr, t, f0, acc);
#pragma GCC unroll 8
    for (int i = 0; i < LP_PR; i++) {
        if (i >= mr) break;
#if LP_INT8
        vf as = vf_set1(t->a_scale[i]);
#endif
#pragma GCC unroll 6
        for (int v = 0; v < LP_NV; v++) {
            int n = w - VL * v;
            if (n <= 0) break;
#if LP_INT8
            lp_store_int8(t, i, f0 + VL * v, n, acc[i][v], as, LP_COMP);
#else
            lp_store_bf16(t, i, f0 + VL * v, n, acc[i][v]);
#endif
        }
    }
}

/* The tile (up to 8 rows x 48 features): for each LP_PW features, its row pieces back to back, so the
 * second reads that block of the panel from L1. Each piece gets the tile re-based at its first row
 * and runs with its row count a constant, so its loops unroll. */
void LP_TILE(const eng__lp_tile *t) {
    for (int f0 = 0; f0 < t->w; f0 += LP_PW) {
        int w = t->w - f0 < LP_PW ? t->w - f0 : LP_PW;
        for (int r = 0; r < t->mr; r += LP_PR) {
            eng__lp_tile p = *t;
            p.mr = t->mr - r < LP_PR ? t->mr - r : LP_PR;
            p.a = t->a + (size_t)r * t->lda;
            p.c = t->c + (size_t)r * t->ldc;
            p.res = t->res ? t->res + (size_t)r * t->ldr : NULL;
            p.a_scale = t->a_scale ? t->a_scale + r : NULL;
            switch (p.mr) {
#define LP_PIECE(n) \
    case n: lp_piece(n, &p, f0, w); break;
                LP_PIECE(8) LP_PIECE(7) LP_PIECE(6) LP_PIECE(5) LP_PIECE(4) LP_PIECE(3) LP_PIECE(2) LP_PIECE(1)
#undef LP_PIECE
            default: break;
            }
        }
    }
}
#endif

#ifdef LP_ROWS
#if LP_INT8
static inline __attribute__((always_inline)) void lp_row_step(uint8_t *dst, const float *src, int k, int K, vf inv);
#else
static inline __attribute__((always_inline)) void lp_row_step(uint8_t *dst, const float *src, int k, int K);
#endif

/* Rows [m0, m1) of A converted into the workspace, LP_ROW_STEP values a step up to kp: every row holds
 * whole 64-byte lines (gemm_lowp.c), so the steps store full vectors; values past K convert as zeros. */
void LP_ROWS(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws, float *scales) {
    for (int m = m0; m < m1; m++) {
        const float *src = A + (size_t)m * lda;
        uint8_t *dst = ws + (size_t)m * ldws;
#if LP_INT8
        vf inv;
        scales[m] = row_scale(src, K, &inv);
        for (int k = 0; k < kp; k += LP_ROW_STEP) lp_row_step(dst, src, k, K, inv);
#else
        (void)scales;
        for (int k = 0; k < kp; k += LP_ROW_STEP) lp_row_step(dst, src, k, K);
#endif
    }
}
#endif
#undef LP_INL
