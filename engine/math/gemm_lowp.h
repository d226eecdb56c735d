/* gemm_lowp.h - Linear products over weights packed once in bfloat16 or int8 (engine-internal).
 *
 * The low-precision twins of eng__pgemm (blas.h): same panels of 48 output features, same split of
 * the panels over the pool's threads, same fused epilogue (bias, activation, residual), float32
 * activations in and float32 outputs out. What changes is what the micro-kernel multiplies:
 *
 *   bf16: W rounded to nearest even once at packing; A rounded the same way while it is converted,
 *         row by row, before the product; pairs of k multiplied by vdpbf16ps into float32 sums.
 *   int8: W quantized symmetrically per output feature n (scale_n = max|W[n]| / 127, q in
 *         [-127, 127]); A quantized per row m the same way on the fly, then stored as u8 = q + 128
 *         because vpdpbusd multiplies unsigned by signed bytes, four k at a time into int32. The
 *         offset is removed with comp_n = 128 * sum_k q[n][k], precomputed at packing:
 *             C[m][n] = scale_m * scale_n * (sum_k u8[m][k] q[n][k] - comp_n)   (+ epilogue)
 *         The integer sum is exact (|sum| < 2^31 for K < 66,000).
 *
 * Use: pack once (eng__lp_pack), then per product give a workspace of eng__lp_ws_bytes(prec, M, K)
 * bytes (64-byte aligned, reusable; the converted activations live there) to eng__lp_gemm.
 *
 * Kernels: one per x86 level (kern.h): AVX-512 BF16 / VNNI, AVX-VNNI, AVX2 (bf16 widened to float32
 * in registers, int8 through vpmaddwd), and portable C, all computing the same quantized products
 * (int8 exactly). eng__lp_kernel() names the one that runs. */
#ifndef ADAPTERD_ENGINE_MATH_GEMM_LOWP_H
#define ADAPTERD_ENGINE_MATH_GEMM_LOWP_H

#include <stddef.h>
#include <stdint.h>

#include "math/blas.h"
#include "math/pool.h"

typedef enum {
    ENG_PREC_F32 = 0,
    ENG_PREC_BF16,
    ENG_PREC_INT8,
} eng_prec;

/* Weights of one Linear layer, packed. Owned by the struct: release with eng__lp_release. */
typedef struct {
    eng_prec prec;
    int N, K;
    int kp;        /* K rounded up to a whole AMX tile row, 32 (bf16) or 64 (int8) k, zeros past K */
    void *panels;  /* bf16: uint16 [panel][kp/2][48][2]; int8: int8 [panel][kp/4][48][4]; 64-byte aligned */
    float *scale;  /* (N) int8 only: scale_n, the float value of one step of q[n][.] */
    int32_t *comp; /* (N) int8 only: 128 * sum_k q[n][k] */
} eng_lp_weights;

/* Packs W (N,K; ldw), Linear layout, as prec (ENG_PREC_BF16 or ENG_PREC_INT8) into *w.
 * Returns 0 on success, -1 when memory runs out or prec is not a low precision (w is then empty). */
int eng__lp_pack(eng_lp_weights *w, eng_prec prec, const float *W, int N, int K, int ldw);

/* Frees what eng__lp_pack allocated and empties *w; an empty or zeroed *w is fine. */
void eng__lp_release(eng_lp_weights *w);

/* Bytes of the workspace eng__lp_gemm needs for M rows of K activations in prec, under any level
 * (kern.h: kernels store 1, 2 or 4 bytes a value; sized for the widest, so a cap changed between this
 * call and the product cannot make the workspace too small). */
size_t eng__lp_ws_bytes(eng_prec prec, int M, int K);

/* C (M,N; ldc) = A (M,K; lda) * Wq^T through the packed w, then the epilogue ep (NULL for none),
 * as eng__pgemm does for float32. ws: eng__lp_ws_bytes(w->prec, M, w->K) bytes, 64-byte aligned,
 * overwritten. Split over the pool by column panels; pool may be NULL. */
void eng__lp_gemm(eng_pool *pool, int M, const float *A, int lda, const eng_lp_weights *w, float *C, int ldc,
                 const eng_epilogue *ep, void *ws);

/* ---- products between activations (attention's QK^T and PV), in bf16 ----
 *
 * Both operands are rounded to bf16 on the call (no packing at load) and multiplied by the level's
 * bf16 tile into float32 sums, on the calling thread (attention runs one head per pool task). Only
 * where the level multiplies bf16 in hardware (kern.h, bf16_native): elsewhere the bf16 tile widens
 * to float32 and the float32 product is faster, so eng__bf16_gemm_dyn declines. */

/* Whether eng__bf16_gemm_dyn runs at this CPU's level now. */
int eng__bf16_dyn_native(void);

/* Bytes of the workspace eng__bf16_gemm_dyn needs for these sizes (any layout of B, any alpha). */
size_t eng__bf16_dyn_bytes(int M, int N, int K);

/* C (M,N; ldc) = (alpha * A (M,K; lda)) * B^T, where element (n, k) of B is B[n * sn + k * sk] with
 * sk == 1 (rows of B along k: attention's keys) or sn == 1 (B is (K,N) row-major: its values). alpha
 * scales A in float32 before the rounding. ws: eng__bf16_dyn_bytes(M, N, K) bytes, 64-byte aligned.
 * Returns 0, or -1 with C untouched when the level is not bf16_native (the caller runs float32) or
 * neither stride is 1. */
int eng__bf16_gemm_dyn(int M, int N, int K, float alpha, const float *A, int lda, const float *B, size_t sn,
                       size_t sk, float *C, int ldc, void *ws);

/* ---- the product between activations in int8 (an int8 model's QK^T) ----
 *
 * A quantized per row by the level's converter (as eng__lp_gemm's activations), B per row n (each key
 * its own scale, as the weights per output feature) by one portable loop, then the level's int8 tile:
 * the integer sums are exact and every level computes the same float operations around them, so the
 * result is the same bits on every level, as eng__lp_gemm's. Runs at every level, on the calling
 * thread. */

/* Bytes of the workspace eng__int8_gemm_dyn needs for these sizes. */
size_t eng__int8_dyn_bytes(int M, int N, int K);

/* C (M,N; ldc) = alpha * (A (M,K; lda) * B^T), B (N,K; ldb) row-major (rows along k), both quantized
 * to int8 on the call. alpha multiplies A's row scales. ws: eng__int8_dyn_bytes(M, N, K) bytes,
 * 64-byte aligned. A row of A or B holding a NaN or an infinity gives NaN in its products. */
void eng__int8_gemm_dyn(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                        float *C, int ldc, void *ws);

/* Element (n, k) of the weights as the kernel multiplies them, as a float: the bf16 value, or
 * q[n][k] (without the scale) for int8. For tests and diagnostics. */
float eng__lp_weight(const eng_lp_weights *w, int n, int k);

/* Name of the kernel eng__lp_gemm runs for prec on this CPU now (kern.h): "avx512_bf16",
 * "avx512_vnni", "avx_vnni", "avx2" or "c"; for ENG_PREC_F32 the float32 packed kernel's. Static
 * string. */
const char *eng__lp_kernel(eng_prec prec);

/* x rounded to bfloat16, to nearest even, as vcvtne2ps2bf16 does it: subnormal inputs and outputs
 * become signed zero, NaN stays NaN (quiet). */
uint16_t eng__bf16_from_f32(float x);
float eng__f32_from_bf16(uint16_t h);

/* ---- between gemm_lowp.c and the per-level kernels (kern.h, x86/) ---- */

#define ENG__LP_NR 48 /* output features per panel, as the float32 packed kernel */
#define ENG__LP_MR 8  /* rows per micro-tile */

/* One micro-tile: rows [0, mr) x columns [0, w) of C, over all of K, written (not accumulated):
 * C = product, dequantized for int8, plus the prefill (bias, and the residual when no activation
 * sits between). */
typedef struct {
    int mr, w, kp;
    const uint8_t *a;      /* converted activations of the tile's first row; rows lda bytes apart */
    size_t lda;            /* bytes */
    const void *b;         /* the panel (its k = 0) */
    float *c;              /* C at the tile's (row, n0) */
    int ldc;
    const float *bias;     /* at n0, or NULL */
    const float *res;      /* at (row, n0), or NULL */
    int ldr;
    const float *a_scale;  /* int8: scale_m of the tile's first row */
    const float *b_scale;  /* int8: scale_n at n0 */
    const int32_t *b_comp; /* int8: comp_n at n0 */
} eng__lp_tile;

/* Converts rows [m0, m1) of A into the workspace layout (bf16 rows, or u8 rows + scales). */
typedef void (*eng__lp_rows_fn)(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                                float *scales);
typedef void (*eng__lp_tile_fn)(const eng__lp_tile *t);

#endif
