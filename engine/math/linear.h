/* linear.h - one packed Linear layer in any precision: what the encoder holds for each backbone
 * weight, in the model's precision (eng_model_params.precision; engine-internal).
 *
 * It puts the float32 packed path (blas.h: eng__pack_linear, eng__pgemm) and the bf16 and int8 ones
 * (gemm_lowp.h) behind one struct, so that switching a model's precision changes what is packed at
 * load and nothing at the call sites:
 *
 *     eng_linear l;
 *     if (eng__linear_pack(&l, ENG_PREC_INT8, W, N, K, K, &err)) return err.code;   // at load
 *     eng__linear_run(pool, M, x, K, &l, y, N, &ep, ws);                          // per product
 *     eng__linear_release(&l);                                                     // at unload
 *
 * ws is scratch of eng__linear_ws_bytes(prec, M, K) bytes (zero for float32), 64-byte aligned, one
 * per worker (eng_state), reused by every product of a pass. The float32 weights are not kept. */
#ifndef ADAPTERD_ENGINE_MATH_LINEAR_H
#define ADAPTERD_ENGINE_MATH_LINEAR_H

#include "engine/status.h"
#include "math/gemm_lowp.h"

typedef struct {
    eng_prec prec;
    int N, K;
    float *P;         /* float32: eng__packed_floats(N, K) floats, 64-byte aligned; NULL otherwise */
    eng_lp_weights q; /* bf16 / int8: the packed weights; empty for float32 */
} eng_linear;

/* "fp32" (also "float32"), "bf16", "int8" -> the precision; returns -1 for anything else.
 * Case-insensitive. */
int eng__prec_parse(const char *name);

/* "fp32", "bf16" or "int8". Static string. */
const char *eng__prec_name(eng_prec prec);

/* ENG_OK when this CPU runs prec on a vector kernel now (any x86-64-v3 CPU or newer: kern.h); else
 * ENG_UNSUPPORTED with a sentence in err naming what is missing (the portable kernels still compute
 * it, 10-50x slower: a loader refuses, or runs it only when asked to emulate). */
eng_status eng__prec_check(eng_prec prec, eng_err *err);

/* Packs W (N,K; ldw), Linear layout, in prec into *l. Returns ENG_OK, or ENG_NO_MEMORY /
 * ENG_INVALID_ARGUMENT with err set (l is then empty). */
eng_status eng__linear_pack(eng_linear *l, eng_prec prec, const float *W, int N, int K, int ldw, eng_err *err);

/* Frees what eng__linear_pack allocated and empties *l; an empty or zeroed *l is fine. */
void eng__linear_release(eng_linear *l);

/* Bytes of scratch eng__linear_run needs for M rows of K inputs in prec (0 for float32). */
size_t eng__linear_ws_bytes(eng_prec prec, int M, int K);

/* C (M,N; ldc) = A (M,K; lda) * W^T, then the epilogue (NULL for none), split over the pool like
 * eng__pgemm. ws: eng__linear_ws_bytes(l->prec, M, l->K) bytes (may be NULL for float32). */
void eng__linear_run(eng_pool *pool, int M, const float *A, int lda, const eng_linear *l, float *C, int ldc,
                    const eng_epilogue *ep, void *ws);

/* Bytes the packed weights occupy (for memory budgets and /metrics). */
size_t eng__linear_bytes(const eng_linear *l);

#endif
