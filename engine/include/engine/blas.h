/* blas.h - every matrix product of the engine, and the one place that talks to OpenBLAS.
 *
 * OpenBLAS chooses its kernels (its "core": Haswell, SkylakeX, Cooperlake, ...) when the library
 * loads, from the OPENBLAS_CORETYPE environment variable or CPU detection. adapterd respects an
 * explicit setting; `adapterd --blas-core NAME` sets the variable and re-executes itself before
 * any BLAS call (tools/adapterd). eng_blas_core() says which core runs.
 *
 * Threads: the engine owns them. eng_blas_init() pins OpenBLAS to one thread per call, and
 * eng_gemm() splits a product into column blocks run by the engine's pool (pool.h), so no BLAS
 * thread pool ever runs inside ours and concurrent engine workers never contend in OpenBLAS. */
#ifndef ADAPTERD_ENGINE_BLAS_H
#define ADAPTERD_ENGINE_BLAS_H

#include <stddef.h>

#include "engine/kernels.h"
#include "engine/pool.h"

/* Sets OpenBLAS to single-threaded calls. Idempotent; call once before any product. */
void eng_blas_init(void);

/* Name of the OpenBLAS kernel set in use (e.g. "Cooperlake", "Haswell"). Static string. */
const char *eng_blas_core(void);

/* The OpenBLAS core this CPU should run when OpenBLAS's own choice is older than the CPU (a
 * generic Prescott-class core on an AVX2 or AVX-512 CPU it does not know), else NULL. Static
 * string; see engine/math/cpu.c for the rule. */
const char *eng_blas_core_better(void);

/* Epilogue applied to each output block right after its product, while it is in cache:
 * y = act(y + bias) + residual; any of bias/residual may be NULL. residual has y's layout. */
typedef struct {
    const float *bias;     /* (N) or NULL */
    eng_act act;           /* ENG_ACT_IDENTITY for none */
    const float *residual; /* (M, ldr) or NULL; added after the activation */
    int ldr;
} eng_epilogue;

/* C (M,N; ldc) = A (M,K; lda) * W^T, with W (N,K; ldw) in Linear layout, then the epilogue
 * (NULL for none). Split over the pool's threads by column blocks; pool may be NULL. */
void eng_gemm(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
              float *C, int ldc, const eng_epilogue *ep);

/* C (M,N) += alpha * A (M,K) * W^T, split over the pool like eng_gemm (LoRA deltas). */
void eng_gemm_acc(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W, int ldw,
                  float *C, int ldc);

/* Products over weights packed once at load (gemm_packed.c): the backbone's Linear layers.
 * eng_pack_linear lays W (N,K; ldw) out into P, which holds eng_packed_floats(N, K) floats and
 * must be 64-byte aligned. eng_pgemm then computes C (M,N; ldc) = A (M,K; lda) * W^T and the
 * epilogue, split over the pool by column panels, like eng_gemm. */
size_t eng_packed_floats(int N, int K);
void eng_pack_linear(const float *W, int N, int K, int ldw, float *P);
/* The general form: element (n, k) of the operand is alpha * W[n*sn + k*sk]. With sn = 1 it packs
 * the transpose of a row-major (K, N) matrix (attention's values). */
void eng_pack_strided(const float *W, int N, int K, size_t sn, size_t sk, float alpha, float *P);
void eng_pgemm(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc,
               const eng_epilogue *ep);

/* Internal to eng_gemm and eng_pgemm. A product under this many FLOPs runs as one task: splitting
 * it costs more in pool wake-ups than it wins. */
#define ENG__SPLIT_MIN_FLOPS 2e5
/* The part of an epilogue that runs after the product, over rows [m0, m0 + rows) and columns
 * [n0, n0 + w) of C: the activation, then the residual (which could not be prefilled under an
 * activation). Nothing when the activation is the identity. */
void eng__epilogue_after(const eng_epilogue *ep, float *C, int ldc, int m0, int rows, int n0, int w);

/* Single-threaded versions used inside parallel regions (attention).
 * eng_sgemm_nt: C = alpha * A (M,K) * B^T with B (N,K).  eng_sgemm_nn: C = A (M,K) * B (K,N) + beta * C. */
void eng_sgemm_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C,
                  int ldc);
void eng_sgemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc);

/* Reference product in double precision for tests: C = A * W^T (+ bias when not NULL). */
void eng_ref_gemm(int M, int N, int K, const float *A, int lda, const float *W, int ldw, const float *bias, float *C,
                  int ldc);

#endif
