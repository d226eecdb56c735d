/* sparse.c - CSR storage and a row-blocked sparse x dense product (see sparse.h).
 *
 * The product works on blocks of 16 input rows transposed into a (cols, 16) panel, so each stored
 * weight becomes one 16-wide multiply-add over contiguous floats (one AVX-512 FMA, two AVX2 ones)
 * instead of a scalar gather; the (rows, 16) result panel is transposed back. Column indices are 16-bit, so a
 * kept weight costs 6 bytes (dense: 4), and CSR saves memory from about 35% zeros on. */
#include "math/sparse.h"

#include <stdlib.h>
#include <string.h>

#include "math/kern.h"

#define BLK 16

double eng__sparsity(const float *dense, int rows, int cols) {
    size_t zeros = 0, n = (size_t)rows * cols;
    for (size_t i = 0; i < n; i++) zeros += dense[i] == 0.0f;
    return n ? (double)zeros / (double)n : 0.0;
}

eng_sparse *eng__sparse_from_dense(const float *dense, int rows, int cols) {
    if (cols > 65535 || rows < 0 || cols < 0) return NULL;
    eng_sparse *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->rows = rows;
    s->cols = cols;
    int64_t nnz = 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++) nnz += dense[i] != 0.0f;
    s->nnz = nnz;
    s->row_ptr = malloc(((size_t)rows + 1) * sizeof *s->row_ptr);
    s->col = malloc((size_t)(nnz ? nnz : 1) * sizeof *s->col);
    s->val = malloc((size_t)(nnz ? nnz : 1) * sizeof *s->val);
    if (!s->row_ptr || !s->col || !s->val) {
        eng__sparse_free(s);
        return NULL;
    }
    int64_t k = 0;
    for (int r = 0; r < rows; r++) {
        s->row_ptr[r] = (int32_t)k;
        for (int c = 0; c < cols; c++) {
            float v = dense[(size_t)r * cols + c];
            if (v != 0.0f) {
                s->col[k] = (uint16_t)c;
                s->val[k] = v;
                k++;
            }
        }
    }
    s->row_ptr[rows] = (int32_t)k;
    return s;
}

void eng__sparse_free(eng_sparse *s) {
    if (!s) return;
    free(s->row_ptr);
    free(s->col);
    free(s->val);
    free(s);
}

size_t eng__sparse_bytes(const eng_sparse *s) {
    return s ? ((size_t)s->rows + 1) * sizeof(int32_t) + (size_t)s->nnz * (sizeof(uint16_t) + sizeof(float)) : 0;
}

void eng__sparse_to_dense(const eng_sparse *s, float *out) {
    memset(out, 0, (size_t)s->rows * s->cols * sizeof *out);
    for (int r = 0; r < s->rows; r++)
        for (int32_t k = s->row_ptr[r]; k < s->row_ptr[r + 1]; k++) out[(size_t)r * s->cols + s->col[k]] = s->val[k];
}

int eng__sparse_prefer_kernel(const eng_sparse *s) {
    /* bench/sparse on AVX-512 (128 rows): the CSR kernel wins at <= 20% density once the matrix has
     * at least 96 x 768 weights (1.0x there, 1.25x at 192 x 768); below that, expand + sgemm. */
    double size = (double)s->rows * (double)s->cols;
    return (double)s->nnz <= 0.22 * size && size >= 96.0 * 768.0;
}

void eng__sparse_gemm(const eng_sparse *s, int M, const float *X, int ldx, float *Y, int ldy) {
    float *xt = malloc((size_t)s->cols * BLK * sizeof *xt), *yt = malloc((size_t)s->rows * BLK * sizeof *yt);
    if (!xt || !yt) { /* fall back to the unblocked loop rather than fail */
        for (int m = 0; m < M; m++)
            for (int r = 0; r < s->rows; r++) {
                float acc = 0;
                for (int32_t k = s->row_ptr[r]; k < s->row_ptr[r + 1]; k++) acc += s->val[k] * X[(size_t)m * ldx + s->col[k]];
                Y[(size_t)m * ldy + r] = acc;
            }
        free(xt);
        free(yt);
        return;
    }
    eng__sparse_block_fn blk = eng__kern()->sparse_block; /* elem_impl.h, at this CPU's level */
    for (int m0 = 0; m0 < M; m0 += BLK) {
        int mb = M - m0 < BLK ? M - m0 : BLK;
        memset(xt, 0, (size_t)s->cols * BLK * sizeof *xt);
        for (int i = 0; i < mb; i++)
            for (int c = 0; c < s->cols; c++) xt[(size_t)c * BLK + i] = X[(size_t)(m0 + i) * ldx + c];
        blk(s, xt, yt);
        for (int i = 0; i < mb; i++)
            for (int r = 0; r < s->rows; r++) Y[(size_t)(m0 + i) * ldy + r] = yt[(size_t)r * BLK + i];
    }
    free(xt);
    free(yt);
}
