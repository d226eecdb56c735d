/* blas.c - OpenBLAS setup, the single-threaded products attention runs inside its own tasks, and the
 * epilogue the engine's own products share (eng_gemm is gemm.c, eng_pgemm gemm_packed.c). */
#include "math/blas.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>

#include "math/cpu.h"

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_init_once(void) { openblas_set_num_threads(1); }

void eng_blas_init(void) { pthread_once(&blas_once, blas_init_once); }

const char *eng_blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

/* Here, not in cpu.c: cpu.c is the leaf that asks the CPU (pool.c calls it), the rule itself is
 * its pure eng__blas_core_pick. */
const char *eng_blas_core_better(void) { return eng__blas_core_pick(eng_blas_core(), eng_cpu_features()); }

void eng__epilogue_after(const eng_epilogue *ep, float *C, int ldc, int m0, int rows, int n0, int w) {
    if (ep->act == ENG_ACT_IDENTITY) return;
    for (int m = m0; m < m0 + rows; m++) {
        float *y = C + (size_t)m * ldc + n0;
        eng_act_apply(ep->act, y, (size_t)w);
        if (ep->residual) eng_add(y, ep->residual + (size_t)m * ep->ldr + n0, (size_t)w);
    }
}

void eng_sgemm_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C,
                  int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}

void eng_sgemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                  int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

void eng_ref_gemm(int M, int N, int K, const float *A, int lda, const float *W, int ldw, const float *bias, float *C,
                  int ldc) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0;
            for (int k = 0; k < K; k++) s += (double)A[(size_t)m * lda + k] * W[(size_t)n * ldw + k];
            C[(size_t)m * ldc + n] = (float)s;
        }
}
