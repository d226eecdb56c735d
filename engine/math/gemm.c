/* gemm.c - eng__gemm_rows and eng__gemm_rows_acc (blas.h): products over rows packed from many
 * sequences (adapters, the embeddings' projection, a batch's pooler) whose weights are not packed
 * at load, computed so that a row's result does not depend on the rows beside it.
 *
 * Why not OpenBLAS's sgemm over all rows, as before: the engine packs every sequence of a batch into
 * one product, so a short input's adapter products share a call with whatever else is in the batch
 * (a long input's windows: hundreds of rows). sgemm's summation order for one row changes with the
 * call's shape (its small-matrix kernel below a size, its edge kernels for the rows past a multiple
 * of its tile, the column blocks cut from the FLOP count), and a LoRA task's logits moved by ~1e-6
 * when a long input joined the batch. Here the order depends on N and K only
 * (tests/engine/math/test_gemm.c compares each row with the row computed alone, bit for bit):
 *  - N of at least one 48-feature panel (bottleneck adapters, LoRA's B, fusion): the packed product's
 *    micro-tile (kern.h), every element summed in 192-long steps from zero added to C in turn, as
 *    eng__pgemm does. The adapters' weights are packed once at load (task/load.c), the pooler's and
 *    the embeddings' projection's once per model (model.c), and eng__gemm_rows_p reads slices of that
 *    copy; eng__gemm_rows packs per call, one 192 x 48 slice at a time on the stack (no allocation,
 *    nothing to fail), right before the row tiles of a block run over it. Both give a slice the same
 *    values (alpha * W, zero past N), so a row has the same bits either way.
 *  - narrower (LoRA's A, rank 8 or 16; a bottleneck under 48 wide): one sgemm call per row, every
 *    call the same shape. The tile would compute 48 columns for 8 (6 x the FLOPs; 10 x sgemm's time
 *    at 128 rows), while a row's call, its weights in L1, costs ~1.5-2.5 x a batched sgemm per row.
 * Cost, against sgemm over all rows (bench/rows, interleaved in one process, 2 threads, AMD EPYC Zen 5
 * class shared with other work; bench/README.md "Rows independent of their batch"): packing per call
 * made a product over a few rows pay the packing of its whole operand (~60 us for a 64 x 768
 * bottleneck at one row where sgemm took 2.4 us); packed at load it takes 1.9 us (sgemm 1.9, one
 * engine thread), a few rows cost 0.1-1.07x sgemm's at every adapter shape and many rows no more than
 * packing per call did. The 64 x 768 down projection at many rows stays 1.2-1.8x sgemm: its second
 * panel is computed 48 wide for 16 features. LoRA's A: 2.3x sgemm at 128 rows (14 -> 32 us). */
#include "math/blas.h"

#include <string.h>

#include "math/kern.h"

#define NR 48  /* the panel width of the micro-tile (kern.h) */
#define MR 8   /* rows per tile call */
#define MC 256 /* rows per block: a slice is packed once per block */
#define KC 192 /* the summation step: each step sums into fresh accumulators (gemm_packed.c) */

#define NARROW NR /* below one panel: a call per row */

typedef struct {
    int M, N, K, lda, ldw, ldc, panels_per_task, rows_per_task, accumulate;
    float alpha;
    const float *A, *W;
    const float *P; /* W packed at load (eng__pack_strided, alpha in it), or NULL: pack per call */
    float *C;
    const eng_epilogue *ep;
} gemm_job;

/* Slice [k0, k0 + kc) of panel p of alpha * W, k-major: what the tile reads. Columns past N are not
 * written: the task zeroed them once (the only partial panel is the last). Written a k at a time,
 * so stores are contiguous and each of the panel's rows is read a cache line at a time. */
static void pack_slice(const gemm_job *j, int p, int k0, int kc, float *B) {
    int w = j->N - p * NR < NR ? j->N - p * NR : NR;
    size_t ldw = (size_t)j->ldw; /* locals: B's stores could alias *j */
    float alpha = j->alpha;
    const float *W = j->W + (size_t)p * NR * ldw + k0;
    for (int c = 0; c < w; c++, W += ldw)
        for (int k = 0; k < kc; k++) B[(size_t)k * NR + c] = alpha * W[k];
}

/* One task: a contiguous run of panels over all rows, the epilogue applied as eng__pgemm does. */
static void gemm_task(void *ctx, int task, int worker) {
    (void)worker;
    const gemm_job *j = ctx;
    const eng_epilogue *ep = j->ep;
    eng__f32_tile_fn tile = eng__kern()->f32_tile;
    _Alignas(64) float Bs[KC * NR];
    if (!j->P && j->N % NR) memset(Bs, 0, sizeof Bs); /* the last panel's missing columns: read, never stored */
    int panels = (j->N + NR - 1) / NR;
    int p0 = task * j->panels_per_task, p1 = p0 + j->panels_per_task < panels ? p0 + j->panels_per_task : panels;
    int act = ep && ep->act != ENG_ACT_IDENTITY;
    const float *res_pre = ep && !act ? ep->residual : NULL; /* folded into the first step */
    for (int m0 = 0; m0 < j->M; m0 += MC) {
        int mb = j->M - m0 < MC ? j->M - m0 : MC;
        for (int p = p0; p < p1; p++) {
            int n0 = p * NR, w = j->N - n0 < NR ? j->N - n0 : NR;
            const float *bias = ep && ep->bias ? ep->bias + n0 : NULL;
            for (int k0 = 0; k0 < j->K || k0 == 0; k0 += KC) { /* K = 0 still writes the epilogue */
                int kc = j->K - k0 < KC ? j->K - k0 : KC;
                const float *B = Bs;
                if (j->P) /* the same slice, laid out at load: eng__pack_strided writes what pack_slice does */
                    B = j->P + ((size_t)p * j->K + k0) * NR;
                else
                    pack_slice(j, p, k0, kc, Bs);
                int init = k0 == 0 && !j->accumulate;
                for (int i = 0; i < mb; i += MR) {
                    int m = m0 + i, mr = mb - i < MR ? mb - i : MR;
                    const float *res = res_pre ? res_pre + (size_t)m * ep->ldr + n0 : NULL;
                    tile(mr, kc, j->A + (size_t)m * j->lda + k0, j->lda, B, j->C + (size_t)m * j->ldc + n0, j->ldc,
                         init, bias, res, ep ? ep->ldr : 0, w);
                }
            }
            if (act) eng__epilogue_after(ep, j->C, j->ldc, m0, mb, n0, w);
        }
    }
}

/* One task of a narrow product: rows [m0, m0 + rows_per_task), each its own sgemm call, the epilogue
 * as eng__gemm applies it (bias and residual first, the activation after). */
static void narrow_task(void *ctx, int task, int worker) {
    (void)worker;
    const gemm_job *j = ctx;
    const eng_epilogue *ep = j->ep;
    int m0 = task * j->rows_per_task, m1 = m0 + j->rows_per_task < j->M ? m0 + j->rows_per_task : j->M;
    int act = ep && ep->act != ENG_ACT_IDENTITY;
    for (int m = m0; m < m1; m++) {
        float *c = j->C + (size_t)m * j->ldc;
        float beta = j->accumulate ? 1.0f : 0.0f;
        if (ep && (ep->bias || (ep->residual && !act))) {
            const float *r = ep->residual && !act ? ep->residual + (size_t)m * ep->ldr : NULL;
            for (int n = 0; n < j->N; n++) c[n] = (ep->bias ? ep->bias[n] : 0.0f) + (r ? r[n] : 0.0f);
            beta = 1.0f;
        }
        eng__sgemm_nt_beta(1, j->N, j->K, j->alpha, j->A + (size_t)m * j->lda, j->lda, j->W, j->ldw, beta, c, j->ldc);
        if (act) eng__epilogue_after(ep, j->C, j->ldc, m, 1, 0, j->N);
    }
}

static void gemm_run(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W,
                     int ldw, const float *P, int accumulate, float *C, int ldc, const eng_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    int panels = (N + NR - 1) / NR, threads = eng__pool_size(pool);
    int split = 2.0 * M * N * (double)K < ENG__SPLIT_MIN_FLOPS ? 1 : threads;
    gemm_job j = {M, N, K, lda, ldw, ldc, 0, 0, accumulate, alpha, A, W, P, C, ep};
    if (N < NARROW && !P) { /* one task, as sgemm's one column block was: waking the pool costs more */
        j.rows_per_task = M;
        eng__pool_run(pool, 1, narrow_task, &j);
        return;
    }
    int tasks = split < panels ? split : panels;
    j.panels_per_task = (panels + tasks - 1) / tasks;
    eng__pool_run(pool, (panels + j.panels_per_task - 1) / j.panels_per_task, gemm_task, &j);
}

void eng__gemm_rows(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *W, int ldw, float *C,
                   int ldc, const eng_epilogue *ep) {
    gemm_run(pool, M, N, K, 1.0f, A, lda, W, ldw, NULL, 0, C, ldc, ep);
}

void eng__gemm_rows_acc(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W,
                       int ldw, float *C, int ldc) {
    gemm_run(pool, M, N, K, alpha, A, lda, W, ldw, NULL, 1, C, ldc, NULL);
}

int eng__gemm_rows_packs(int N) { return N >= NARROW; }

void eng__gemm_rows_p(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc,
                     const eng_epilogue *ep) {
    gemm_run(pool, M, N, K, 1.0f, A, lda, NULL, 0, P, 0, C, ldc, ep);
}

void eng__gemm_rows_p_acc(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *P, float *C,
                         int ldc) {
    gemm_run(pool, M, N, K, 1.0f, A, lda, NULL, 0, P, 1, C, ldc, NULL);
}
