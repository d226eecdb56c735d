/* kernels.h - the engine's numeric building blocks, each in two versions.
 *
 * `eng_ref_*` are the reference kernels: plain loops over libm (erff, tanhf, expf) in double where
 * it matters, written to be obviously right. The unprefixed kernels are the fast ones: branch-free
 * loops that the compiler vectorizes, with exp/erf/tanh approximations accurate to a few float ulps.
 * tests/engine/math/test_kernels.c checks each fast kernel against its reference.
 *
 * Matrix products go through eng__gemm (math/blas.h); these kernels are the element-wise and row-wise
 * operations around them. All arrays are row-major float32 (core/tensor.h). */
#ifndef ADAPTERD_ENGINE_MATH_KERNELS_H
#define ADAPTERD_ENGINE_MATH_KERNELS_H

#include <stddef.h>

#include "engine/act.h"

/* y[i] = act(x[i]) in place, n elements. */
void eng__act_apply(eng_act act, float *x, size_t n);
void eng__ref_act_apply(eng_act act, float *x, size_t n);

/* Row-wise LayerNorm in place over `rows` rows of `dim` floats: x = (x - mean)/sqrt(var + eps)*g + b.
 * Variance is the biased (population) one, as torch.nn.LayerNorm computes it. */
void eng__layernorm(float *x, size_t rows, size_t dim, const float *g, const float *b, float eps);
void eng__ref_layernorm(float *x, size_t rows, size_t dim, const float *g, const float *b, float eps);

/* Softmax in place over one row of n floats (max-subtracted); over rows rows of n, ld floats apart,
 * each row with the same bits as alone. */
void eng__softmax_row(float *x, size_t n);
void eng__softmax_rows(float *x, size_t rows, size_t n, size_t ld);
void eng__ref_softmax_row(float *x, size_t n);

/* x[i] += y[i]. */
void eng__add(float *x, const float *y, size_t n);

/* Fast exp over n floats: y[i] = exp(x[i]); relative error below 3e-7 on [-87, 88]. */
void eng__exp(float *y, const float *x, size_t n);

#endif
