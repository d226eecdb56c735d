/* gemm_packed.c - the backbone's products over weights packed once at load (blas.h, eng__pgemm).
 *
 * Why not OpenBLAS here: sgemm repacks its operands on every call. For the backbone of a
 * bert-base forward that is 340 MB of weights read and rewritten per pass, 20% of a 1x128
 * forward under `perf` (sgemm_incopy), and OpenBLAS has no interface to keep a packed operand.
 * The weights never change, so they are laid out at load exactly as the micro-kernel reads them
 * and each product only streams them.
 *
 * Layout: panels of NR = 48 output features. Panel p holds W rows p*NR .. p*NR+NR-1, k-major:
 * P[(p*K + k)*NR + j] = W[p*NR + j][k], zero past N. The micro-tile (8 rows x 48 features, over
 * a KC slice) is this CPU's (kern.h): x86/avx512_gemm.c keeps the whole tile in 24 zmm registers,
 * x86/avx2_gemm.c cuts it into 4 x 24 pieces for 16 ymm registers, the C one below runs anywhere.
 *
 * Blocking (per thread): the thread's panels are contiguous, so it streams its half of W once per
 * row block of MC rows; K is cut into KC steps so that a panel slice stays in L1 while all the row
 * tiles of the block run over it. Activations are read in place (eight rows walked in step), which
 * the prefetchers follow. Block sizes from 128 to 512 measured within 5% of each other. The next
 * panel slice is prefetched into L2 in shares spread over the current slice's row tiles: the
 * hardware prefetcher alone left the first tile of every slice waiting on memory (1x128: 93 -> 87
 * ms; 32x128: 2841 -> 2598 ms, same machine, back to back).
 *
 * Rounding: every KC step starts from zero and is added to C at its end, so a dot product of
 * length K is a sum of K/KC partial sums. One running sum over K = 3072 was 5x further from a
 * double-precision product than OpenBLAS; the blocked sum is as close (test_gemm_packed checks it).
 */
#include <string.h>

#include "math/blas.h"

#include "math/kern.h"

#define NR 48
#define MR 8
#define MC 256 /* rows per block: MC x KC activations (192 KB) stay in L2 */
#define KC 192 /* a panel slice (KC x 48, 36 KB) fits L1; each KC step sums into fresh accumulators */

size_t eng__packed_floats(int N, int K) { return (size_t)((N + NR - 1) / NR) * NR * (size_t)K; }

/* The layout of eng__pgemm's B: panels of 48 features, k-major inside. Attention packs a head's keys
 * (a transpose: sk == 1) and values (a copy of row slices: sn == 1) for every head of every sequence,
 * so both run without a test per element: the transpose in blocks of 16 k (the 48 x 16 block written
 * stays in L1 while each source row gives one 64-byte line), the copy as contiguous runs. Either
 * computes alpha * W exactly, one multiplication a value. */
void eng__pack_strided(const float *W, int N, int K, size_t sn, size_t sk, float alpha, float *P) {
    enum { KB = 16 };
    int panels = (N + NR - 1) / NR;
    for (int p = 0; p < panels; p++) {
        float *panel = P + (size_t)p * K * NR;
        int n0 = p * NR, w = N - n0 < NR ? N - n0 : NR;
        if (sk == 1) { /* rows of W along k (Linear weights, attention keys) */
            for (int k0 = 0; k0 < K; k0 += KB) {
                int kb = K - k0 < KB ? K - k0 : KB;
                for (int j = 0; j < w; j++) {
                    const float *src = W + (size_t)(n0 + j) * sn + k0;
                    float *dst = panel + (size_t)k0 * NR + j;
                    for (int k = 0; k < kb; k++) dst[(size_t)k * NR] = alpha * src[k];
                }
                for (int k = 0; k < kb && w < NR; k++)
                    memset(panel + (size_t)(k0 + k) * NR + w, 0, sizeof(float) * (size_t)(NR - w));
            }
            continue;
        }
        for (int k = 0; k < K; k++) {
            const float *src = W + (size_t)k * sk + (size_t)n0 * sn;
            float *dst = panel + (size_t)k * NR;
            if (sn == 1) /* rows of W along n (attention values) */
                for (int j = 0; j < w; j++) dst[j] = alpha * src[j];
            else
                for (int j = 0; j < w; j++) dst[j] = alpha * src[(size_t)j * sn];
            for (int j = w; j < NR; j++) dst[j] = 0.0f;
        }
    }
}

void eng__pack_linear(const float *W, int N, int K, int ldw, float *P) { eng__pack_strided(W, N, K, (size_t)ldw, 1, 1.0f, P); }

typedef struct {
    int M, N, K, lda, ldc, panels_per_task;
    const float *A, *P;
    float *C;
    const eng_epilogue *ep;
} pgemm_job;

/* One task: a contiguous run of panels, over all rows, with the epilogue applied per tile. */
static void pgemm_task(void *ctx, int task, int worker) {
    (void)worker;
    const pgemm_job *j = ctx;
    const eng_epilogue *ep = j->ep;
    eng__f32_tile_fn tile = eng__kern()->f32_tile;
    int panels = (j->N + NR - 1) / NR;
    int p0 = task * j->panels_per_task, p1 = p0 + j->panels_per_task < panels ? p0 + j->panels_per_task : panels;
    int act = ep && ep->act != ENG_ACT_IDENTITY;
    const float *res_pre = ep && !act ? ep->residual : NULL; /* folded into the prefill */
    for (int m0 = 0; m0 < j->M; m0 += MC) {
        int mb = j->M - m0 < MC ? j->M - m0 : MC;
        for (int p = p0; p < p1; p++) {
            int n0 = p * NR, w = j->N - n0 < NR ? j->N - n0 : NR;
            const float *bias = ep && ep->bias ? ep->bias + n0 : NULL;
            for (int k0 = 0; k0 < j->K || k0 == 0; k0 += KC) { /* K = 0 still writes the epilogue */
                int kc = j->K - k0 < KC ? j->K - k0 : KC;
                const float *B = j->P + ((size_t)p * j->K + k0) * NR;
                /* the thread's panels are one contiguous stream: while the row tiles run over this
                 * slice, fetch the next one into L2, a share before each tile */
                const char *next = (const char *)(B + (size_t)kc * NR);
                size_t left = (size_t)((const char *)(j->P + (size_t)p1 * j->K * NR) - next); /* bytes to the stream's end */
                size_t lines = (size_t)KC * NR * sizeof(float) / 64, tiles = (size_t)(mb + MR - 1) / MR;
                size_t per = (lines + tiles - 1) / tiles;
                for (int i = 0; i < mb; i += MR) {
                    int m = m0 + i, mr = mb - i < MR ? mb - i : MR;
                    for (size_t l = 0, o = (size_t)(i / MR) * per * 64; l < per && o < left; l++, o += 64)
                        __builtin_prefetch(next + o, 0, 2);
                    const float *res = res_pre ? res_pre + (size_t)m * ep->ldr + n0 : NULL;
                    tile(mr, kc, j->A + (size_t)m * j->lda + k0, j->lda, B, j->C + (size_t)m * j->ldc + n0,
                             j->ldc, k0 == 0, bias, res, ep ? ep->ldr : 0, w);
                }
            }
            if (act) eng__epilogue_after(ep, j->C, j->ldc, m0, mb, n0, w); /* the block is still in L2 */
        }
    }
}

void eng__pgemm(eng_pool *pool, int M, int N, int K, const float *A, int lda, const float *P, float *C, int ldc,
               const eng_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    int panels = (N + NR - 1) / NR, threads = eng__pool_size(pool);
    int tasks = threads < panels ? threads : panels;
    if (2.0 * M * N * (double)K < ENG__SPLIT_MIN_FLOPS) tasks = 1;
    pgemm_job j = {M, N, K, lda, ldc, (panels + tasks - 1) / tasks, A, P, C, ep};
    eng__pool_run(pool, (panels + j.panels_per_task - 1) / j.panels_per_task, pgemm_task, &j);
}
