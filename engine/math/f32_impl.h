/* f32_impl.h - the float32 packed product's tile driver (gemm_packed.c, kern.h), one source compiled
 * once per level, as elem_impl.h is: by x86/avx2_gemm.c, x86/avx512_gemm.c and arm/neon_gemm.c, each
 * with its own -march. The driver cuts the 8 x 48 tile into pieces that fit the level's registers,
 * starts each piece from the prefill (bias, and the residual when no activation sits between) or
 * from zero, runs the level's micro-kernel over k, and adds or writes the sums to C; the ISA file
 * gives only what differs (ggml and MLAS keep the same split: one driver over per-ISA kernels).
 *
 * Define before the inclusion, after the level's vocabulary (vf, VL, vf_zero, vf_set1, vf_loadu,
 * vf_load_n, vf_store_n, vf_add, vf_fma: x86/avx2_common.h, x86/avx512_common.h, arm/neon_common.h):
 *   F32_SUFFIX   the level: the file defines eng__f32_tile_<suffix> (kern.h)
 *   F32_PR       rows per piece (at most 8)
 *   F32_PW       features per piece, a multiple of VL that divides 48
 *   F32_KERNEL   optional: the level defines f32_kernel() itself (its declaration below); without it
 *                the broadcast kernel here runs: per k, F32_PW / VL panel loads and, per row, one
 *                broadcast and F32_PW / VL FMAs. */
#define F32_NR 48 /* features per panel (gemm_packed.c) */
#define F32_NV (F32_PW / VL)
#define F32_CAT2(name, sfx) name##_##sfx
#define F32_CAT(name, sfx) F32_CAT2(name, sfx)

#ifndef F32_KERNEL
/* acc[i][v] += A[i][k] * B[k][VL v .. VL v + VL), v < nv, over k in [0, kc); B's rows are F32_NR floats
 * apart. nv is a constant at every call: a narrow piece (the last panel of an odd N, such as attention's
 * values, 64 = 48 + 16 features a head) runs only the vectors it stores. */
static inline __attribute__((always_inline)) void f32_kernel(int mr, int nv, int kc, const float *A, int lda,
                                                             const float *B, vf acc[F32_PR][F32_NV]) {
    for (int k = 0; k < kc; k++, B += F32_NR) {
        vf b[F32_NV];
#pragma GCC unroll 6
        for (int v = 0; v < nv; v++) b[v] = vf_loadu(B + VL * v);
#pragma GCC unroll 8
        for (int i = 0; i < F32_PR; i++) {
            if (i >= mr) break;
            vf a = vf_set1(A[(size_t)i * lda + k]);
#pragma GCC unroll 6
            for (int v = 0; v < nv; v++) acc[i][v] = vf_fma(a, b[v], acc[i][v]);
        }
    }
}
#define F32_NARROW (F32_NV == 3) /* pieces of 1 and 2 vectors besides the full one */
#else
#define f32_kernel(mr, nv, kc, A, lda, B, acc) f32_kernel(mr, kc, A, lda, B, acc) /* the level's: every vector */
#define F32_NARROW 0
#endif

/* One piece: C[0..mr)[0..w) (w <= VL nv, nv <= F32_NV) over k in [0, kc). */
static inline __attribute__((always_inline)) void f32_piece(int mr, int nv, int kc, const float *A, int lda,
                                                            const float *B, float *C, int ldc, int init,
                                                            const float *bias, const float *res, int ldr, int w) {
    vf acc[F32_PR][F32_NV];
#pragma GCC unroll 8
    for (int i = 0; i < F32_PR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 6
        for (int v = 0; v < nv; v++) {
            vf s = vf_zero();
            if (init && bias) s = vf_load_n(bias + VL * v, w - VL * v);
            if (init && res) s = vf_add(s, vf_load_n(res + (size_t)i * ldr + VL * v, w - VL * v));
            acc[i][v] = s;
        }
    }
    f32_kernel(mr, nv, kc, A, lda, B, acc);
#pragma GCC unroll 8
    for (int i = 0; i < F32_PR; i++) {
        if (i >= mr) break;
#pragma GCC unroll 6
        for (int v = 0; v < nv; v++) {
            float *c = C + (size_t)i * ldc + VL * v;
            int n = w - VL * v;
            vf_store_n(c, init ? acc[i][v] : vf_add(vf_load_n(c, n), acc[i][v]), n);
        }
    }
}

/* The tile (kern.h's eng__f32_tile_fn): for each F32_PW features, its row pieces back to back, so the
 * second reads that part of the panel slice from L1. Each piece runs with its row count and its
 * vector count constants. */
void F32_CAT(eng__f32_tile, F32_SUFFIX)(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc,
                                        int init, const float *bias, const float *res, int ldr, int w) {
    for (int h = 0; h < F32_NR && h < w; h += F32_PW) {
        int wh = w - h < F32_PW ? w - h : F32_PW, nv = F32_NARROW ? (wh + VL - 1) / VL : F32_NV;
        const float *bh = bias ? bias + h : NULL;
        for (int r = 0; r < mr; r += F32_PR) {
            const float *ar = A + (size_t)r * lda, *rr = res ? res + (size_t)r * ldr + h : NULL;
            float *cr = C + (size_t)r * ldc + h;
            switch (mr - r < F32_PR ? mr - r : F32_PR) {
#define F32_PIECE_NV(n, v) f32_piece(n, v, kc, ar, lda, B + h, cr, ldc, init, bh, rr, ldr, wh)
#define F32_PIECE(n)                                        \
    case n:                                                 \
        if (F32_NARROW && nv == 1) F32_PIECE_NV(n, 1);      \
        else if (F32_NARROW && nv == 2) F32_PIECE_NV(n, 2); \
        else F32_PIECE_NV(n, F32_NV);                       \
        break;
                F32_PIECE(8) F32_PIECE(7) F32_PIECE(6) F32_PIECE(5) F32_PIECE(4) F32_PIECE(3) F32_PIECE(2) F32_PIECE(1)
#undef F32_PIECE
#undef F32_PIECE_NV
            default: break;
            }
        }
    }
}
