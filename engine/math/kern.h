/* kern.h - the kernel table (engine-internal): every kernel family once per level of the target
 * architecture (x86-64 or ARM64) in every build, and the one function that picks among them for
 * this CPU.
 *
 * As OpenBLAS's DYNAMIC_ARCH and ONNX Runtime's MLAS do it: each level's kernels live in their own
 * files under math/x86/, compiled with their own -march (engine/CMakeLists.txt), and nothing else
 * in the engine sees an intrinsic or an `#ifdef __AVX2__`. The shared code calls through the table
 * that eng__kern() returns: filled once per feature set (math/cpu.h, capped by ADAPTERD_CPU_LEVEL or
 * eng__cpu_restrict), read with one atomic load per call. The fallback chain is written once, in
 * kern.c's fill():
 *
 *   family        baseline     avx2 (x86-64-v3)        then, where the CPU has it
 *   fp32 packed   c            avx2 (4 x 24 ymm tiles)  avx512 (8 x 48 zmm tiles)
 *   bf16          c            avx2 (widened, FMA)      avx512_bf16 (vdpbf16ps), amx_bf16 (tdpbf16ps)
 *   int8          c            avx2 (vpmaddwd)          avx_vnni (vpdpbusd ymm), avx512_vnni (zmm), amx_int8 (tdpbusd)
 *   element-wise  c            avx2                     avx512 (one source, elem_impl.h, per level)
 *
 * ARM64's chain (arm/kern_arm.c) has the same shape: neon for fp32, bf16 and element-wise; sdot
 * (dotprod) then smmla (i8mm) for int8; bfmmla (bf16) for bf16.
 *
 * Every variant computes the same math: the int8 ones bit for bit (exact integer sums, the same
 * quantization); the float ones to rounding (tests/engine/math check each against double). */
#ifndef ADAPTERD_ENGINE_MATH_KERN_H
#define ADAPTERD_ENGINE_MATH_KERN_H

#include <stddef.h>

#include "math/gemm_lowp.h"
#include "math/kernels.h"
#include "math/sparse.h"

/* One tile of the float32 packed product (gemm_packed.c): C[0..mr)[0..w) over k in [0, kc), mr <=
 * 8, w <= 48, B a 48-wide panel slice (row stride 48 floats). init: start from the prefill (bias,
 * plus res when given) instead of adding to C. */
typedef void (*eng__f32_tile_fn)(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                                 const float *bias, const float *res, int ldr, int w);

/* The sparse product's inner step (sparse.c): yt (rows, 16) = S * xt (cols, 16). */
typedef void (*eng__sparse_block_fn)(const eng_sparse *s, const float *xt, float *yt);

typedef struct {
    const char *level;            /* eng__cpu_level_of() of the features the table was filled for */
    const char *f32, *bf16, *int8; /* the kernel family each precision runs: "avx512", "avx2", "c", ... */
    const char *elem;             /* the element-wise kernels' level */
    eng__f32_tile_fn f32_tile;
    eng__lp_rows_fn bf16_rows, int8_rows;
    eng__lp_tile_fn bf16_tile, int8_tile;
    int bf16_act_bytes, int8_act_bytes; /* bytes per converted activation value in the workspace */
    int bf16_mr, int8_mr;               /* rows per tile call: ENG__LP_MR, or 16 for AMX's tiles */
    int bf16_native;                    /* 1 where the bf16 tile multiplies bf16 in hardware (vdpbf16ps,
                                           AMX, BFMMLA); elsewhere it widens to float32 and runs slower than
                                           the float32 tile, so products between activations stay float32 */
    void (*act_apply)(eng_act act, float *x, size_t n);
    void (*layernorm)(float *x, size_t rows, size_t dim, const float *g, const float *b, float eps);
    void (*softmax_rows)(float *x, size_t rows, size_t n, size_t ld);
    void (*exp)(float *y, const float *x, size_t n);
    void (*add)(float *x, const float *y, size_t n);
    eng__sparse_block_fn sparse_block;
} eng_kernels;

/* The table for the features in use now (eng__cpu_features()). Never NULL. */
const eng_kernels *eng__kern(void);

/* ---- between kern.c and the per-level files ---- */

/* Element-wise kernels, one set per level from elem_impl.h: eng__act_apply_c, eng__act_apply_avx2, ... */
#define ENG__ELEM_DECLARE(sfx)                                                                            \
    void eng__act_apply_##sfx(eng_act act, float *x, size_t n);                                           \
    void eng__layernorm_##sfx(float *x, size_t rows, size_t dim, const float *g, const float *b, float eps); \
    void eng__softmax_rows_##sfx(float *x, size_t rows, size_t n, size_t ld);                             \
    void eng__exp_##sfx(float *y, const float *x, size_t n);                                              \
    void eng__add_##sfx(float *x, const float *y, size_t n);                                              \
    void eng__sparse_block_##sfx(const eng_sparse *s, const float *xt, float *yt);
ENG__ELEM_DECLARE(c)
ENG__ELEM_DECLARE(avx2)
ENG__ELEM_DECLARE(avx512)
ENG__ELEM_DECLARE(neon)

void eng__f32_tile_c(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                     const float *bias, const float *res, int ldr, int w);
void eng__f32_tile_avx2(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                        const float *bias, const float *res, int ldr, int w);
void eng__f32_tile_avx512(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                          const float *bias, const float *res, int ldr, int w);
void eng__f32_tile_neon(int mr, int kc, const float *A, int lda, const float *B, float *C, int ldc, int init,
                        const float *bias, const float *res, int ldr, int w);

/* Symmetric int8 of one row (portable.c; the vector converters compute the same float operations):
 * scale = amax / 127, q[k * qstride] = nearest-even(x * 127 / amax); a NaN or an infinity gives
 * q = 0 and a NaN scale, so the outputs are NaN as in float32. Returns the scale. */
float eng__quant_row(const float *x, int K, int8_t *q, int qstride);

#define ENG__LP_DECLARE(fam)                                                                               \
    void eng__##fam##_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws, \
                           float *scales);                                                                 \
    void eng__##fam##_tile(const eng__lp_tile *t);
ENG__LP_DECLARE(bf16_c)
ENG__LP_DECLARE(int8_c)
ENG__LP_DECLARE(bf16_avx2)
ENG__LP_DECLARE(int8_avx2)
ENG__LP_DECLARE(int8_avx_vnni)
ENG__LP_DECLARE(bf16_avx512)
ENG__LP_DECLARE(int8_avx512)
void eng__bf16_amx_tile(const eng__lp_tile *t);
void eng__int8_amx_tile(const eng__lp_tile *t);
/* ARM64 (arm/): int8 rows as signed q (no offset: sdot and smmla multiply signed bytes) */
void eng__int8_neon_rows(const float *A, int lda, int K, int kp, int m0, int m1, uint8_t *ws, size_t ldws,
                         float *scales);
void eng__bf16_neon_tile(const eng__lp_tile *t);
void eng__bf16_bfmmla_tile(const eng__lp_tile *t);
void eng__int8_dotprod_tile(const eng__lp_tile *t);
void eng__int8_i8mm_tile(const eng__lp_tile *t);

#endif
