/* blas.c - OpenBLAS setup and the pool-split GEMM (see blas.h for why the engine splits). */
#include "math/blas.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>

#include "math/cpu.h"

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_init_once(void) { openblas_set_num_threads(1); }

void eng__blas_init(void) { pthread_once(&blas_once, blas_init_once); }

const char *eng_blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

/* Here, not in cpu.c: cpu.c is the leaf that asks the CPU (pool.c calls it), the rule itself is
 * its pure eng__blas_core_pick. */
const char *eng_blas_core_better(void) { return eng__blas_core_pick(eng_blas_core(), eng__cpu_features()); }

/* How a product is cut into pool tasks: one column block per thread. Every task reads only its
 * own slice of W, so W (the weights, 340 MB for a bert-base forward, far beyond the caches) is
 * streamed from memory once per product. Measured on bert-base, 2 threads: more blocks per thread
 * (2-4, for balance) cost more in repacked activations than they won, and row panels for large M
 * (to keep each output block in L2 for its epilogue) cost 5-10% in repacked weights.
 * The epilogue's bias (and residual, when no activation sits between) is written into the output
 * block before the product, which then accumulates (beta = 1): OpenBLAS skips its own pass that
 * zeroes C, and only an activation needs a pass after it. */
typedef struct {
    int M, N, K, lda, ldw, ldc, block;
    const float *A, *W;
    float *C;
    const eng_epilogue *ep;
    float alpha, beta;
} gemm_job;

/* Before the product: C = bias (+ residual when the activation is the identity). */
static void prefill(const gemm_job *j, int n0, int w) {
    const eng_epilogue *ep = j->ep;
    const float *b = ep->bias ? ep->bias + n0 : NULL;
    const float *res = ep->act == ENG_ACT_IDENTITY ? ep->residual : NULL;
    for (int m = 0; m < j->M; m++) {
        float *y = j->C + (size_t)m * j->ldc + n0;
        const float *r = res ? res + (size_t)m * ep->ldr + n0 : NULL;
        if (b && r)
            for (int i = 0; i < w; i++) y[i] = b[i] + r[i];
        else if (b)
            memcpy(y, b, sizeof(float) * (size_t)w);
        else
            memcpy(y, r, sizeof(float) * (size_t)w);
    }
}

void eng__epilogue_after(const eng_epilogue *ep, float *C, int ldc, int m0, int rows, int n0, int w) {
    if (ep->act == ENG_ACT_IDENTITY) return;
    for (int m = m0; m < m0 + rows; m++) {
        float *y = C + (size_t)m * ldc + n0;
        eng__act_apply(ep->act, y, (size_t)w);
        if (ep->residual) eng__add(y, ep->residual + (size_t)m * ep->ldr + n0, (size_t)w);
    }
}

static void gemm_block(void *ctx, int task, int worker) {
    (void)worker;
    const gemm_job *j = ctx;
    int n0 = task * j->block;
    int w = j->N - n0 < j->block ? j->N - n0 : j->block;
    if (w <= 0) return;
    float beta = j->beta;
    if (j->ep && (j->ep->bias || j->ep->residual)) {
        prefill(j, n0, w);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->M, w, j->K, j->alpha, j->A, j->lda,
                j->W + (size_t)n0 * j->ldw, j->ldw, beta, j->C + n0, j->ldc);
    if (j->ep) eng__epilogue_after(j->ep, j->C, j->ldc, 0, j->M, n0, w);
}

static void gemm_split(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W,
                       int ldw, float beta, float *C, int ldc, const eng_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    int threads = eng__pool_size(pool);
    double flops = 2.0 * M * N * (double)K;
    int blocks = flops < ENG__SPLIT_MIN_FLOPS ? 1 : threads;
    int block = (N + blocks - 1) / blocks;
    block = (block + 15) / 16 * 16; /* keep blocks vector-aligned */
    gemm_job j = {M, N, K, lda, ldw, ldc, block, A, W, C, ep, alpha, beta};
    eng__pool_run(pool, (N + block - 1) / block, gemm_block, &j);
}

void eng__gemm(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *W, int ldw, float *C,
              int ldc, const eng_epilogue *ep) {
    gemm_split(pool, M, N, K, 1.0f, A, lda, W, ldw, 0.0f, C, ldc, ep);
}

void eng__gemm_acc(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W, int ldw,
                  float *C, int ldc) {
    gemm_split(pool, M, N, K, alpha, A, lda, W, ldw, 1.0f, C, ldc, NULL);
}

void eng__sgemm_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C,
                  int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

void eng__sgemm_nt_beta(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void eng__sgemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

void eng__ref_gemm(int M, int N, int K, const float *A, int lda, const float *W, int ldw, const float *bias, float *C,
                  int ldc) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0;
            for (int k = 0; k < K; k++) s += (double)A[(size_t)m * lda + k] * W[(size_t)n * ldw + k];
            C[(size_t)m * ldc + n] = (float)s;
        }
}
