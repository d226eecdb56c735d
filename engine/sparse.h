/* sparse.h - matrices stored sparse (SparseAdapter / Large-Sparse adapters).
 *
 * A bottleneck adapter pruned at initialization keeps 40-80% of its weights at exactly zero. Such a
 * matrix is stored in CSR (values + column indices per row) and applied as y = x W^T with a kernel
 * that walks only the kept weights. Whether the sparse or the dense kernel is faster depends on the
 * density and the number of rows; bench/sparse measures where the crossover lies and the loader stores
 * a matrix sparse only above the sparsity threshold (eng_task_params.sparse_threshold).
 *
 * All matrices are in Linear layout (out, in), row-major float32. */
#ifndef ADAPTERD_ENGINE_SPARSE_H
#define ADAPTERD_ENGINE_SPARSE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int rows, cols;     /* (out, in) */
    int64_t nnz;
    int32_t *row_ptr;   /* (rows + 1) */
    int32_t *col;       /* (nnz) */
    float *val;         /* (nnz) */
} eng_sparse;

/* Builds a CSR copy of dense (rows, cols). Returns NULL on allocation failure. */
eng_sparse *eng_sparse_from_dense(const float *dense, int rows, int cols);
void eng_sparse_free(eng_sparse *s);

/* Share of zeros in dense (rows, cols). */
double eng_sparsity(const float *dense, int rows, int cols);

/* Y (M, rows) = X (M, cols) * S^T; ldx/ldy are row strides. */
void eng_sparse_gemm(const eng_sparse *s, int M, const float *X, int ldx, float *Y, int ldy);

/* Bytes the CSR arrays take. */
size_t eng_sparse_bytes(const eng_sparse *s);

#endif
