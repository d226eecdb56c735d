/* sparse.h - matrices stored sparse (SparseAdapter / Large-Sparse adapters).
 *
 * A bottleneck adapter pruned at initialization keeps 40-80% of its weights at exactly zero. Such a
 * matrix is stored in CSR (values + 16-bit column indices per row): from 50% zeros on (the
 * loader's default threshold) it takes less memory than the dense copy, which is then dropped. At
 * run time each such matrix either goes through the CSR kernel, when that is the faster one, or is
 * expanded into scratch memory for OpenBLAS's sgemm; bench/sparse measures both against dense.
 *
 * All matrices are in Linear layout (out, in), row-major float32. */
#ifndef ADAPTERD_ENGINE_MATH_SPARSE_H
#define ADAPTERD_ENGINE_MATH_SPARSE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int rows, cols;     /* (out, in), cols <= 65535 */
    int64_t nnz;
    int32_t *row_ptr;   /* (rows + 1) */
    uint16_t *col;      /* (nnz) column of each kept weight: 6 bytes per weight with val */
    float *val;         /* (nnz) */
} eng_sparse;

/* Builds a CSR copy of dense (rows, cols). Returns NULL on allocation failure or cols > 65535. */
eng_sparse *eng__sparse_from_dense(const float *dense, int rows, int cols);
void eng__sparse_free(eng_sparse *s);

/* Share of zeros in dense (rows, cols). */
double eng__sparsity(const float *dense, int rows, int cols);

/* Y (M, rows) = X (M, cols) * S^T; ldx/ldy are row strides. */
void eng__sparse_gemm(const eng_sparse *s, int M, const float *X, int ldx, float *Y, int ldy);

/* Writes the dense (rows, cols) matrix back into out. */
void eng__sparse_to_dense(const eng_sparse *s, float *out);

/* Is the CSR kernel expected to beat "expand to dense + sgemm" for this matrix? (bench/sparse:
 * from about 80% zeros on, for matrices of at least 96 x 768 weights.) */
int eng__sparse_prefer_kernel(const eng_sparse *s);

/* Bytes the CSR arrays take. */
size_t eng__sparse_bytes(const eng_sparse *s);

#endif
