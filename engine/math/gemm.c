/* gemm.c - eng_gemm and eng_gemm_acc (blas.h): the products over weights that are not packed at
 * load (adapters, heads, fusion, the pooler), run by the packed product's micro-tile (kern.h).
 *
 * Why not OpenBLAS's sgemm, which ran them before: a row's result must not depend on the rows
 * beside it. The engine packs every sequence of a batch into one product, so a short input's
 * adapter and head products share a call with whatever else is in the batch (a long input's
 * windows: hundreds of rows). sgemm's summation order for one row changes with the call's shape
 * (its small-matrix kernel below a size, with one running sum over K where the large path sums
 * K in blocks; the column blocks eng_gemm cut depended on the FLOP count), and a LoRA task's logits
 * moved by ~1e-6 when a long input joined the batch. Here every element is summed in one order
 * fixed by K alone: 192-long steps from zero, added to C in turn, as eng_pgemm does
 * (tests/engine/math/test_gemm.c compares each row with the row computed alone, bit for bit).
 *
 * Packing: the operand is laid out per call, one 48-feature panel slice (192 x 48 floats, 36 KB,
 * on the stack: no allocation, nothing to fail) at a time, right before the row tiles of a block
 * run over it while it is in L1. sgemm packs its operand on every call too; here a slice is
 * packed once per 256-row block (once for every product of short batches), which is under 1% of
 * the product's work for a block of 256 rows. A narrow product (LoRA's A, rank 8) runs a whole
 * 48-wide tile, 6 x its FLOPs: a rank-8 A is 2% of a layer's query projection, and the tile at
 * full width still beats sgemm's small kernel there (bench/multitask, bench/README.md). */
#include "math/blas.h"

#include "math/kern.h"

#define NR 48  /* the panel width of the micro-tile (kern.h) */
#define MR 8   /* rows per tile call */
#define MC 256 /* rows per block: a slice is packed once per block */
#define KC 192 /* the summation step: each step sums into fresh accumulators (gemm_packed.c) */

typedef struct {
    int M, N, K, lda, ldw, ldc, panels_per_task, accumulate;
    float alpha;
    const float *A, *W;
    float *C;
    const eng_epilogue *ep;
} gemm_job;

/* Slice [k0, k0 + kc) of panel p of alpha * W, k-major, zero past N: what the tile reads. */
static void pack_slice(const gemm_job *j, int p, int k0, int kc, float *B) {
    for (int c = 0; c < NR; c++) {
        int n = p * NR + c;
        if (n >= j->N) {
            for (int k = 0; k < kc; k++) B[(size_t)k * NR + c] = 0.0f;
            continue;
        }
        const float *w = j->W + (size_t)n * j->ldw + k0;
        if (j->alpha == 1.0f)
            for (int k = 0; k < kc; k++) B[(size_t)k * NR + c] = w[k];
        else
            for (int k = 0; k < kc; k++) B[(size_t)k * NR + c] = j->alpha * w[k];
    }
}

/* One task: a contiguous run of panels over all rows, the epilogue applied as eng_pgemm does. */
static void gemm_task(void *ctx, int task, int worker) {
    (void)worker;
    const gemm_job *j = ctx;
    const eng_epilogue *ep = j->ep;
    eng__f32_tile_fn tile = eng_kern()->f32_tile;
    _Alignas(64) float B[KC * NR];
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
                pack_slice(j, p, k0, kc, B);
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

static void gemm_run(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W,
                     int ldw, int accumulate, float *C, int ldc, const eng_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    int panels = (N + NR - 1) / NR, threads = eng_pool_size(pool);
    int tasks = threads < panels ? threads : panels;
    if (2.0 * M * N * (double)K < ENG__SPLIT_MIN_FLOPS) tasks = 1;
    gemm_job j = {M, N, K, lda, ldw, ldc, (panels + tasks - 1) / tasks, accumulate, alpha, A, W, C, ep};
    eng_pool_run(pool, (panels + j.panels_per_task - 1) / j.panels_per_task, gemm_task, &j);
}

void eng_gemm(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *W, int ldw, float *C,
              int ldc, const eng_epilogue *ep) {
    gemm_run(pool, M, N, K, 1.0f, A, lda, W, ldw, 0, C, ldc, ep);
}

void eng_gemm_acc(eng_pool *pool, int M, int N, int K, float alpha, const float *A, int lda, const float *W, int ldw,
                  float *C, int ldc) {
    gemm_run(pool, M, N, K, alpha, A, lda, W, ldw, 1, C, ldc, NULL);
}
