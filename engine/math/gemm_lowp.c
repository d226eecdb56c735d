/* gemm_lowp.c - packing, activation conversion, threading and the portable kernels of the bf16 and
 * int8 products (gemm_lowp.h); the vector kernels are in x86/ (avx2_bf16.c, avx2_int8.c, avx_vnni.c,
 * avx512_bf16.c, avx512_vnni.c), chosen by kern.h.
 *
 * The activations are converted once into the workspace: bf16 rows, or u8 rows with one scale per
 * row (the int8 row scale needs the whole row before its first quad can be stored). With enough rows
 * for every thread (ROWS_SPLIT_TILES row tiles each), the rows are split: each thread converts its
 * own and runs them over every panel, all in one region. With fewer, the product is split by panels
 * (a region like eng__pgemm's: each thread takes a contiguous run of 48-feature panels and walks
 * all rows in blocks of MC over each panel) after a first step that converts every row, in a pool
 * region when large, on the caller when small (below ROWS_SPLIT_MIN values): converting inside each
 * panel task would repeat it once per thread.
 *
 * Unlike the float32 kernel there is no KC blocking of K: a micro-tile runs over all of K with its
 * sums in registers. For int8 that keeps the integer sum exact to the end (float partial sums per
 * KC step would round it); for bf16 the rounding of the inputs to 8 bits (2^-9) dwarfs that of the
 * float32 sums. The panel (K x 48 at 1 or 2 bytes) is then read from L2 once per row tile: three
 * 64-byte loads per 24 dot-product instructions, far below what L2 delivers. MC is chosen so the
 * block's converted rows plus one panel stay within L2 (512 KB of rows). The panels come in by the
 * hardware prefetcher alone: fetching the next panel in software, a share per tile (as the float32
 * kernel does), made the 128-row products 5-7% slower and the 4,096-row ones no faster (bench/README,
 * bench/lowp, AMD Zen 4). */
#include "math/gemm_lowp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "math/kern.h"

#define NR ENG__LP_NR
#define MC_BYTES (512u << 10) /* converted activation rows per row block */
#define MC_MAX 512               /* rows per row block at most (the bound for a short K) */
#define ROWS_SPLIT_MIN (1 << 20) /* activations converted on the caller alone below this many */
#define ROWS_SPLIT_TILES 4       /* row tiles per thread at least for the split by rows */

/* K is padded with zeros to whole AMX tiles (32 bf16 or 64 int8 k: one 64-byte row), so that every
 * kernel can read the panels and the converted rows in its own steps; bert-base's K are multiples. */
static int k_pad(eng_prec p) { return p == ENG_PREC_BF16 ? 32 : 64; }
static int elem_bytes(eng_prec p) { return p == ENG_PREC_BF16 ? 2 : 1; }
static int round_up(int x, int m) { return (x + m - 1) / m * m; }
/* Bytes per converted row of act_bytes a value (the kernels differ: kern.h, bf16 2 or 4 bytes, int8 1
 * or 2): whole 64-byte lines (at least one), so the vector converters store full vectors. */
static size_t ws_ld(eng_prec p, int K, int act_bytes) {
    int b = round_up(round_up(K, k_pad(p)) * act_bytes, 64);
    return (size_t)(b > 64 ? b : 64);
}

/* ---- packing ---- */

int eng__lp_pack(eng_lp_weights *w, eng_prec prec, const float *W, int N, int K, int ldw) {
    memset(w, 0, sizeof *w);
    if ((prec != ENG_PREC_BF16 && prec != ENG_PREC_INT8) || N < 0 || K < 0) return -1;
    int kp = round_up(K, k_pad(prec)), panels = (N + NR - 1) / NR;
    size_t bytes = (size_t)panels * NR * (size_t)kp * (size_t)elem_bytes(prec);
    w->prec = prec, w->N = N, w->K = K, w->kp = kp;
    w->panels = eng__alloc_aligned(bytes ? bytes : 64);
    if (!w->panels) return -1;
    memset(w->panels, 0, bytes);
    if (prec == ENG_PREC_BF16) {
        uint16_t *P = w->panels;
        for (int n = 0; n < N; n++) {
            const float *row = W + (size_t)n * ldw;
            uint16_t *dst = P + (size_t)(n / NR) * kp * NR + (size_t)(n % NR) * 2;
            for (int k = 0; k < K; k++) dst[(size_t)(k / 2) * NR * 2 + (k & 1)] = eng__bf16_from_f32(row[k]);
        }
        return 0;
    }
    w->scale = malloc(sizeof(float) * (size_t)(N ? N : 1));
    w->comp = malloc(sizeof(int32_t) * (size_t)(N ? N : 1));
    int8_t *q = malloc((size_t)(K ? K : 1));
    if (!w->scale || !w->comp || !q) {
        free(q);
        eng__lp_release(w);
        return -1;
    }
    int8_t *P = w->panels;
    for (int n = 0; n < N; n++) {
        w->scale[n] = eng__quant_row(W + (size_t)n * ldw, K, q, 1);
        int8_t *dst = P + (size_t)(n / NR) * kp * NR + (size_t)(n % NR) * 4;
        int32_t sum = 0;
        for (int k = 0; k < K; k++) {
            dst[(size_t)(k / 4) * NR * 4 + (k & 3)] = q[k];
            sum += q[k];
        }
        w->comp[n] = 128 * sum;
    }
    free(q);
    return 0;
}

void eng__lp_release(eng_lp_weights *w) {
    if (!w) return;
    eng__free_aligned(w->panels);
    free(w->scale);
    free(w->comp);
    memset(w, 0, sizeof *w);
}

float eng__lp_weight(const eng_lp_weights *w, int n, int k) {
    size_t base = (size_t)(n / NR) * w->kp * NR;
    if (w->prec == ENG_PREC_BF16)
        return eng__f32_from_bf16(((const uint16_t *)w->panels)[base + ((size_t)(k / 2) * NR + n % NR) * 2 + (k & 1)]);
    return ((const int8_t *)w->panels)[base + ((size_t)(k / 4) * NR + n % NR) * 4 + (k & 3)];
}


/* ---- dispatch ---- */

/* The kernels of prec in table k: the caller reads eng__kern() once and passes it down, so that a cap
 * changed meanwhile (eng__cpu_restrict) cannot give one call two levels' layouts. */
static void pick(const eng_kernels *k, eng_prec prec, eng__lp_rows_fn *rows, eng__lp_tile_fn *tile, int *act_bytes,
                 int *mr) {
    if (prec == ENG_PREC_BF16)
        *rows = k->bf16_rows, *tile = k->bf16_tile, *act_bytes = k->bf16_act_bytes, *mr = k->bf16_mr;
    else
        *rows = k->int8_rows, *tile = k->int8_tile, *act_bytes = k->int8_act_bytes, *mr = k->int8_mr;
}

/* The most bytes a converted value takes in any kernel table (kern.h: bf16 2 or 4, int8 1 or 2).
 * The workspace is sized for it: sized under one level and used under another (a cap changed between
 * eng__lp_ws_bytes and eng__lp_gemm), it is still large enough; only a comment kept them equal before. */
#define ACT_BYTES_MAX(p) ((p) == ENG_PREC_BF16 ? 4 : 2)

size_t eng__lp_ws_bytes(eng_prec prec, int M, int K) {
    if (M <= 0) return 0;
    return ws_ld(prec, K, ACT_BYTES_MAX(prec)) * (size_t)M + (prec == ENG_PREC_INT8 ? sizeof(float) * (size_t)M : 0);
}

const char *eng__lp_kernel(eng_prec prec) {
    const eng_kernels *k = eng__kern();
    return prec == ENG_PREC_BF16 ? k->bf16 : prec == ENG_PREC_INT8 ? k->int8 : k->f32;
}

/* ---- the product ---- */

typedef struct {
    int M, lda, ldc, rows_per_task, panels_per_task, mc, mr; /* mr: rows per tile call (kern.h) */
    size_t ldws;
    const float *A;
    const eng_lp_weights *w;
    float *C;
    const eng_epilogue *ep;
    uint8_t *ws;
    float *scales;
    eng__lp_rows_fn rows;
    eng__lp_tile_fn tile;
} lp_job;

/* Converts the rows of task's share into the workspace; returns the share's first row, *m1 its end. */
static int convert_rows(const lp_job *j, int task, int *m1) {
    int m0 = task * j->rows_per_task;
    *m1 = m0 + j->rows_per_task < j->M ? m0 + j->rows_per_task : j->M;
    if (m0 < *m1) j->rows(j->A, j->lda, j->w->K, j->w->kp, m0, *m1, j->ws, j->ldws, j->scales);
    return m0;
}

static void rows_task(void *ctx, int task, int worker) {
    (void)worker;
    int m1;
    convert_rows(ctx, task, &m1);
}

/* Rows [r0, r1) of the product over panels [p0, p1), in row blocks of mc. */
static void gemm_range(const lp_job *j, int r0, int r1, int p0, int p1) {
    const eng_lp_weights *w = j->w;
    const eng_epilogue *ep = j->ep;
    int act = ep && ep->act != ENG_ACT_IDENTITY;
    const float *res_pre = ep && !act ? ep->residual : NULL; /* folded into the prefill */
    size_t panel_bytes = (size_t)w->kp * NR * (size_t)elem_bytes(w->prec);
    for (int m0 = r0; m0 < r1; m0 += j->mc) {
        int mb = r1 - m0 < j->mc ? r1 - m0 : j->mc;
        for (int p = p0; p < p1; p++) {
            int n0 = p * NR, wd = w->N - n0 < NR ? w->N - n0 : NR;
            const char *B = (const char *)w->panels + (size_t)p * panel_bytes;
            eng__lp_tile t = {.w = wd,
                              .kp = w->kp,
                              .lda = j->ldws,
                              .b = B,
                              .ldc = j->ldc,
                              .bias = ep && ep->bias ? ep->bias + n0 : NULL,
                              .ldr = ep ? ep->ldr : 0,
                              .b_scale = w->scale ? w->scale + n0 : NULL,
                              .b_comp = w->comp ? w->comp + n0 : NULL};
            for (int i = 0; i < mb; i += j->mr) {
                int m = m0 + i;
                t.mr = mb - i < j->mr ? mb - i : j->mr;
                t.a = j->ws + (size_t)m * j->ldws;
                t.c = j->C + (size_t)m * j->ldc + n0;
                t.res = res_pre ? res_pre + (size_t)m * ep->ldr + n0 : NULL;
                t.a_scale = j->scales ? j->scales + m : NULL;
                j->tile(&t);
            }
            if (act) eng__epilogue_after(ep, j->C, j->ldc, m0, mb, n0, wd); /* the block is still in L2 */
        }
    }
}

/* Split by panels: every thread reads all the converted rows (converted before, rows_task). */
static void gemm_task(void *ctx, int task, int worker) {
    (void)worker;
    const lp_job *j = ctx;
    int panels = (j->w->N + NR - 1) / NR;
    int p0 = task * j->panels_per_task, p1 = p0 + j->panels_per_task < panels ? p0 + j->panels_per_task : panels;
    if (p0 < p1) gemm_range(j, 0, j->M, p0, p1);
}

/* Split by rows: a thread converts its own rows and runs them over every panel, in one region. */
static void rows_gemm_task(void *ctx, int task, int worker) {
    (void)worker;
    const lp_job *j = ctx;
    int m1, m0 = convert_rows(j, task, &m1);
    if (m0 < m1) gemm_range(j, m0, m1, 0, (j->w->N + NR - 1) / NR);
}

void eng__lp_gemm(eng_pool *pool, int M, const float *A, int lda, const eng_lp_weights *w, float *C, int ldc,
                 const eng_epilogue *ep, void *ws) {
    if (M <= 0 || w->N <= 0) return;
    lp_job j = {.M = M, .lda = lda, .ldc = ldc, .A = A, .w = w, .C = C, .ep = ep, .ws = ws};
    int act_bytes;
    pick(eng__kern(), w->prec, &j.rows, &j.tile, &act_bytes, &j.mr); /* the one read of the level for this call */
    j.ldws = ws_ld(w->prec, w->K, act_bytes);
    j.scales = w->prec == ENG_PREC_INT8 ? (float *)((uint8_t *)ws + j.ldws * (size_t)M) : NULL;
    int mc = (int)(MC_BYTES / j.ldws) / j.mr * j.mr;
    j.mc = mc < j.mr ? j.mr : mc > MC_MAX ? MC_MAX : mc;
    int threads = eng__pool_size(pool), panels = (w->N + NR - 1) / NR;
    int split = 2.0 * M * w->N * (double)w->K >= ENG__SPLIT_MIN_FLOPS;
    if (split && threads > 1 && M >= ROWS_SPLIT_TILES * j.mr * threads) {
        /* Enough rows for every thread: split them, so the conversion runs on every thread inside the
         * product's one region (no second region, no thread idle while the caller converts). Each
         * thread then streams every panel, from L3 when they do not fit in L2, once per row block of
         * up to mc rows: a few bytes per thousand operations. The bits are the panel split's: an
         * output depends only on its row and its feature. */
        int per = (M + threads - 1) / threads;
        j.rows_per_task = (per + j.mr - 1) / j.mr * j.mr;
        eng__pool_run(pool, (M + j.rows_per_task - 1) / j.rows_per_task, rows_gemm_task, &j);
        return;
    }
    /* converting a row costs a few cycles per 32 values: up to ~1M values (M = 128 at any bert-base K)
     * the caller does it in less time than waking the pool for a region of its own */
    int rtasks = (double)M * w->K < ROWS_SPLIT_MIN ? 1 : threads < M ? threads : M;
    j.rows_per_task = (M + rtasks - 1) / rtasks;
    eng__pool_run(pool, (M + j.rows_per_task - 1) / j.rows_per_task, rows_task, &j);
    int tasks = split ? (threads < panels ? threads : panels) : 1;
    j.panels_per_task = (panels + tasks - 1) / tasks;
    eng__pool_run(pool, (panels + j.panels_per_task - 1) / j.panels_per_task, gemm_task, &j);
}

/* ---- products between activations, in bf16 ---- */

/* Rows of B (one per feature, ld bytes apart, whole panels of them) laid into panels of 48 features:
 * word w of row p * 48 + j goes to word (w, j) of panel p (a bf16 pair, or an int8 quad). */
static void rows_to_panels(const uint8_t *rows, size_t ld, int panels, int words, uint32_t *pan) {
    for (int p = 0; p < panels; p++) {
        uint32_t *dst = pan + (size_t)p * words * NR;
        for (int j = 0; j < NR; j++) {
            const uint32_t *row = (const uint32_t *)(rows + (size_t)(p * NR + j) * ld);
            for (int w = 0; w < words; w++) dst[(size_t)w * NR + j] = row[w];
        }
    }
}

/* The tiles of a product between activations, on the calling thread: every 48-feature panel of pan
 * (words 4-byte words of k each) against every mr rows of the converted a (lda bytes apart). int8 passes
 * the scales (A's per row, B's scales and offsets per feature), bf16 NULL. */
static void dyn_tiles(eng__lp_tile_fn tile, int mr, int M, int N, int kp, const uint8_t *a, size_t lda,
                      const float *a_scale, const uint32_t *pan, int words, const float *b_scale,
                      const int32_t *b_comp, float *C, int ldc) {
    eng__lp_tile t = {.kp = kp, .lda = lda, .ldc = ldc};
    for (int p = 0, n0 = 0; n0 < N; p++, n0 += NR) {
        t.w = N - n0 < NR ? N - n0 : NR;
        t.b = pan + (size_t)p * words * NR;
        t.b_scale = b_scale ? b_scale + n0 : NULL;
        t.b_comp = b_comp ? b_comp + n0 : NULL;
        for (int m = 0; m < M; m += mr) {
            t.mr = M - m < mr ? M - m : mr;
            t.a = a + (size_t)m * lda;
            t.a_scale = a_scale ? a_scale + m : NULL;
            t.c = C + (size_t)m * ldc + n0;
            tile(&t);
        }
    }
}

/* C's M x N values set to zero (an empty sum). */
static void zero_c(float *C, int M, int N, int ldc) {
    for (int m = 0; m < M; m++) memset(C + (size_t)m * ldc, 0, sizeof(float) * (size_t)N);
}

int eng__bf16_dyn_native(void) { return eng__kern()->bf16_native; }

/* The workspace of eng__bf16_gemm_dyn, in 64-byte aligned pieces: A's converted rows, alpha * A in
 * float32 (when alpha != 1), B's rows converted along their contiguous axis, then B's panels. */
typedef struct {
    size_t lda_ws, a_bytes, scaled_bytes, tmp_bytes, panel_bytes;
} dyn_sizes;

static size_t up64(size_t b) { return (b + 63) & ~(size_t)63; }

static dyn_sizes dyn_layout(int M, int N, int K) {
    dyn_sizes z;
    int kp = round_up(K, 32), np = (N + NR - 1) / NR * NR;
    z.lda_ws = ws_ld(ENG_PREC_BF16, K, 2);
    z.a_bytes = z.lda_ws * (size_t)M;
    z.scaled_bytes = up64(sizeof(float) * (size_t)M * (size_t)K);
    /* B's rows, whole panels of them (zeros past N or K), so the panels are built without a branch */
    size_t by_n = z.lda_ws * (size_t)np, by_k = ws_ld(ENG_PREC_BF16, np, 2) * (size_t)kp;
    z.tmp_bytes = by_n > by_k ? by_n : by_k;
    z.panel_bytes = (size_t)np * (size_t)kp * 2;
    return z;
}

size_t eng__bf16_dyn_bytes(int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return 64;
    dyn_sizes z = dyn_layout(M, N, K);
    return z.a_bytes + z.scaled_bytes + z.tmp_bytes + z.panel_bytes;
}

int eng__bf16_gemm_dyn(int M, int N, int K, float alpha, const float *A, int lda, const float *B, size_t sn,
                       size_t sk, float *C, int ldc, void *ws) {
    const eng_kernels *kt = eng__kern(); /* the one read of the level for this call */
    if (!kt->bf16_native || kt->bf16_act_bytes != 2 || (sk != 1 && sn != 1)) return -1;
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) { /* an empty sum (the workspace is then only eng__bf16_dyn_bytes' 64 bytes) */
        zero_c(C, M, N, ldc);
        return 0;
    }
    int kp = round_up(K, 32), words = kp / 2, panels = (N + NR - 1) / NR, np = panels * NR;
    dyn_sizes z = dyn_layout(M, N, K);
    uint8_t *a_ws = ws, *tmp = a_ws + z.a_bytes + z.scaled_bytes;
    uint32_t *pan = (uint32_t *)(tmp + z.tmp_bytes);
    if (alpha != 1.0f) { /* alpha * A, as the float32 path folds it into its packing */
        float *sa = (float *)(a_ws + z.a_bytes);
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) sa[(size_t)m * K + k] = alpha * A[(size_t)m * lda + k];
        A = sa, lda = K;
    }
    kt->bf16_rows(A, lda, K, kp, 0, M, a_ws, z.lda_ws, NULL);
    /* B's panels: word (w, j) of panel p holds the bf16 pair (k = 2w, 2w + 1) of feature p * 48 + j */
    if (sk == 1) { /* rows of B along k: convert them, then each row's words go down a panel column */
        size_t ld = z.lda_ws; /* B's rows are as long as A's */
        kt->bf16_rows(B, (int)sn, K, kp, 0, N, tmp, ld, NULL);
        memset(tmp + (size_t)N * ld, 0, (size_t)(np - N) * ld);
        rows_to_panels(tmp, ld, panels, words, pan);
    } else { /* B (K,N) row-major: convert its rows (one k each, zeros to the panels' width), pair 2w, 2w + 1 */
        size_t ld = ws_ld(ENG_PREC_BF16, np, 2);
        kt->bf16_rows(B, (int)sk, N, round_up(np, 32), 0, K, tmp, ld, NULL);
        memset(tmp + (size_t)K * ld, 0, (size_t)(kp - K) * ld);
        for (int p = 0; p < panels; p++)
            for (int w = 0; w < words; w++) {
                const uint16_t *r0 = (const uint16_t *)(tmp + (size_t)(2 * w) * ld) + p * NR;
                const uint16_t *r1 = (const uint16_t *)(tmp + (size_t)(2 * w + 1) * ld) + p * NR;
                uint32_t *d = pan + ((size_t)p * words + w) * NR;
                for (int j = 0; j < NR; j++) d[j] = (uint32_t)r0[j] | (uint32_t)r1[j] << 16;
            }
    }
    dyn_tiles(kt->bf16_tile, kt->bf16_mr, M, N, kp, a_ws, z.lda_ws, NULL, pan, words, NULL, NULL, C, ldc);
    return 0;
}

/* ---- products between activations, in int8 ---- */

/* The workspace of eng__int8_gemm_dyn, in 64-byte aligned pieces: A's converted rows and their scales,
 * B's quantized rows (whole panels of them, zero past N and K), B's panels, B's scales and offsets. */
typedef struct {
    size_t lda_ws, a_bytes, a_scales, b_rows, panel_bytes, b_scales;
} dyn8_sizes;

static dyn8_sizes dyn8_layout(int M, int N, int K) {
    dyn8_sizes z;
    int kp = round_up(K, 64), np = (N + NR - 1) / NR * NR;
    z.lda_ws = ws_ld(ENG_PREC_INT8, K, ACT_BYTES_MAX(ENG_PREC_INT8));
    z.a_bytes = z.lda_ws * (size_t)M;
    z.a_scales = up64(sizeof(float) * (size_t)M);
    z.b_rows = z.panel_bytes = (size_t)np * (size_t)kp;
    z.b_scales = up64(sizeof(float) * (size_t)np) + up64(sizeof(int32_t) * (size_t)np);
    return z;
}

size_t eng__int8_dyn_bytes(int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return 64;
    dyn8_sizes z = dyn8_layout(M, N, K);
    return z.a_bytes + z.a_scales + z.b_rows + z.panel_bytes + z.b_scales;
}

/* x (K values) quantized as eng__quant_row does (scale amax / 127, q nearest-even of x * 127 / amax,
 * NaN and zeros for a row holding a NaN or an infinity) into q (kp bytes, zeros past K); *sum: the sum
 * of q. Branch-free loops the compiler vectorizes at any level: the rounding adds and takes away
 * 1.5 * 2^23 (nearest-even, as lrintf, for |v| <= 2^22; here |v| <= 127), no call per value; the file
 * is compiled with -ffp-contract=off so that the product is rounded first (engine/CMakeLists.txt). */
static float quant_b(const float *x, int K, int kp, int8_t *q, int32_t *sum) {
    /* max |x| on the bits: without the sign, floats order as integers, and NaN and the infinities are
     * the largest (an integer maximum vectorizes; a float one does not without -ffast-math) */
    int32_t top = 0;
    for (int k = 0; k < K; k++) {
        int32_t u;
        memcpy(&u, x + k, sizeof u);
        u &= 0x7FFFFFFF;
        top = u > top ? u : top;
    }
    memset(q + K, 0, (size_t)(kp - K));
    float amax;
    memcpy(&amax, &top, sizeof amax);
    if (top >= 0x7F800000) { /* NaN or infinity */
        memset(q, 0, (size_t)K);
        *sum = 0;
        return NAN;
    }
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t s = 0;
    for (int k = 0; k < K; k++) {
        int v = (int)((x[k] * inv + 12582912.0f) - 12582912.0f);
        q[k] = (int8_t)v;
        s += v;
    }
    *sum = s;
    return amax / 127.0f;
}

void eng__int8_gemm_dyn(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                        float *C, int ldc, void *ws) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* an empty sum (the workspace is then only eng__int8_dyn_bytes' 64 bytes) */
        zero_c(C, M, N, ldc);
        return;
    }
    const eng_kernels *kt = eng__kern(); /* the one read of the level for this call */
    int kp = round_up(K, 64), words = kp / 4, panels = (N + NR - 1) / NR, np = panels * NR;
    dyn8_sizes z = dyn8_layout(M, N, K);
    size_t lda_ws = ws_ld(ENG_PREC_INT8, K, kt->int8_act_bytes);
    uint8_t *a_ws = ws;
    float *a_scale = (float *)(a_ws + z.a_bytes);
    int8_t *rows = (int8_t *)a_scale + z.a_scales;
    uint32_t *pan = (uint32_t *)(rows + z.b_rows);
    float *b_scale = (float *)((uint8_t *)pan + z.panel_bytes);
    int32_t *b_comp = (int32_t *)((uint8_t *)b_scale + up64(sizeof(float) * (size_t)np));
    kt->int8_rows(A, lda, K, kp, 0, M, a_ws, lda_ws, a_scale);
    for (int m = 0; m < M; m++) a_scale[m] *= alpha;
    for (int n = 0; n < N; n++) {
        int32_t sum;
        b_scale[n] = quant_b(B + (size_t)n * ldb, K, kp, rows + (size_t)n * kp, &sum);
        b_comp[n] = 128 * sum;
    }
    memset(rows + (size_t)N * kp, 0, (size_t)(np - N) * kp);
    for (int n = N; n < np; n++) b_scale[n] = 0.0f, b_comp[n] = 0;
    rows_to_panels((const uint8_t *)rows, (size_t)kp, panels, words, pan); /* word w: the quad k = 4w .. 4w + 3 */
    dyn_tiles(kt->int8_tile, kt->int8_mr, M, N, kp, a_ws, lda_ws, a_scale, pan, words, b_scale, b_comp, C, ldc);
}

