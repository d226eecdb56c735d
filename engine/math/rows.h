/* rows.h - row-wise kernels (kernels.h) split over a pool's threads by blocks of rows.
 *
 * Used by the encoder and the adapter math for LayerNorms and activations outside a GEMM's
 * epilogue. A NULL pool runs on the caller. */
#ifndef ADAPTERD_ENGINE_MATH_ROWS_H
#define ADAPTERD_ENGINE_MATH_ROWS_H

#include "math/kernels.h"
#include "math/pool.h"

/* LayerNorm in place over rows x (rows, dim), as eng__layernorm. */
void eng__layernorm_rows(eng_pool *pool, float *x, int rows, int dim, const float *g, const float *b, float eps);

/* act applied in place to x (rows, cols). */
void eng__act_rows(eng_pool *pool, eng_act act, float *x, int rows, int cols);

#endif
