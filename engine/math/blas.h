/* blas.h - every matrix product of the engine, and the one place that talks to OpenBLAS.
 *
 * Which OpenBLAS kernel set runs is chosen once per process (engine/platform.h says which).
 *
 * Threads: the engine owns them. eng__blas_init() pins OpenBLAS to one thread per call, and
 * eng__gemm() splits a product into column blocks run by the engine's pool (math/pool.h), so no BLAS
 * thread pool ever runs inside ours and concurrent engine workers never contend in OpenBLAS.
 *
 * Rows: eng__gemm_rows, eng__gemm_rows_acc and eng__pgemm give each row of A the same bits whatever
 * the other rows of the call (a batch's other sequences; gemm.c says why). eng__gemm does not
 * (OpenBLAS's summation order changes with the row count): it is for products over one sequence
 * (heads, a sequence's pooler) and at load. */
#ifndef ADAPTERD_ENGINE_MATH_BLAS_H
#define ADAPTERD_ENGINE_MATH_BLAS_H

#include <stddef.h>

#include "engine/platform.h"
#include "math/kernels.h"
#include "math/pool.h"

/* Sets OpenBLAS to single-threaded calls. Idempotent; call once before any product. */
void eng__blas_init(void);


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
void eng__gemm(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *W, int ldw,
              float *C, int ldc, const eng_epilogue *ep);

/* C (M,N) += alpha * A (M,K) * W^T, split over the pool like eng__gemm (LoRA deltas). */
void eng__gemm_acc(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W, int ldw,
                  float *C, int ldc);

/* eng__gemm and eng__gemm_acc for rows packed from many sequences (adapters, the embeddings'
 * projection, the pooler over a batch): row m of C depends on row m of A only, bit for bit
 * (gemm.c). */
void eng__gemm_rows(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *W, int ldw, float *C,
                   int ldc, const eng_epilogue *ep);
void eng__gemm_rows_acc(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W,
                       int ldw, float *C, int ldc);
/* The same two over weights packed once at load, for the fixed weights of adapters: P holds
 * eng__packed_floats(N, K) floats, 64-byte aligned, from eng__pack_strided(W, N, K, ldw, 1, alpha, P)
 * with the alpha the plain call would take (1 for eng__gemm_rows_p). Row m of C then has exactly the
 * bits eng__gemm_rows / eng__gemm_rows_acc give it: the same slices, summed in the same order, without
 * repacking the operand on every call. Only where eng__gemm_rows_packs(N): a narrower product stays
 * on the plain call (one sgemm per row, cheaper than a 48-wide tile). */
int eng__gemm_rows_packs(int N);
void eng__gemm_rows_p(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc,
                     const eng_epilogue *ep);
void eng__gemm_rows_p_acc(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *P, float *C,
                         int ldc);

/* Products over weights packed once at load (gemm_packed.c): the backbone's Linear layers.
 * eng__pack_linear lays W (N,K; ldw) out into P, which holds eng__packed_floats(N, K) floats and
 * must be 64-byte aligned. eng__pgemm then computes C (M,N; ldc) = A (M,K; lda) * W^T and the
 * epilogue, split over the pool by column panels, like eng__gemm. */
size_t eng__packed_floats(int N, int K);
void eng__pack_linear(const float *W, int N, int K, int ldw, float *P);
/* The general form: element (n, k) of the operand is alpha * W[n*sn + k*sk]. With sn = 1 it packs
 * the transpose of a row-major (K, N) matrix (attention's values). */
void eng__pack_strided(const float *W, int N, int K, size_t sn, size_t sk, float alpha, float *P);
void eng__pgemm(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc,
               const eng_epilogue *ep);

/* Internal to eng__gemm and eng__pgemm. A product under this many FLOPs runs as one task: splitting
 * it costs more in pool wake-ups than it wins. */
#define ENG__SPLIT_MIN_FLOPS 2e5
/* The part of an epilogue that runs after the product, over rows [m0, m0 + rows) and columns
 * [n0, n0 + w) of C: the activation, then the residual (which could not be prefilled under an
 * activation). Nothing when the activation is the identity. */
void eng__epilogue_after(const eng_epilogue *ep, float *C, int ldc, int m0, int rows, int n0, int w);

/* Single-threaded versions used inside parallel regions (attention).
 * eng__sgemm_nt: C = alpha * A (M,K) * B^T with B (N,K).  eng__sgemm_nn: C = A (M,K) * B (K,N) + beta * C. */
void eng__sgemm_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C,
                  int ldc);
void eng__sgemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc);

/* C = alpha * A (M,K) * B^T + beta * C, single-threaded: gemm.c's narrow products, one row a call. */
void eng__sgemm_nt_beta(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc);

/* Reference product in double precision for tests: C = A * W^T (+ bias when not NULL). */
void eng__ref_gemm(int M, int N, int K, const float *A, int lda, const float *W, int ldw, const float *bias, float *C,
                  int ldc);

#endif
