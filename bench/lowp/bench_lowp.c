/* bench_lowp.c - the backbone's packed products in float32, bf16 and int8 at bert-base shapes,
 * each against its own precision's peak measured in the same run.
 *
 *   bench_lowp [--threads N] [--reps N] [--big-reps N] [--rows 128,4096]
 *
 * Products: C (M, N) = A (M, K) W^T + bias, (K, N) = 768x768 (attention projections), 768x3072
 * (FFN up), 3072x768 (FFN down), M = 128 (one 128-token sequence) and 4096 (32 of them). fp32 runs
 * eng__pgemm over float32 panels; bf16 and int8 run eng__lp_gemm (engine/math/gemm_lowp.h), their
 * activation conversion included. Every rep runs the three precisions in turn, so drift in the
 * machine's load falls on all of them alike; medians over reps.
 *
 * Peaks: bench_isa_peak (bench/common/bench_peak_x86.c), a loop of independent vfmadd231ps /
 * vdpbf16ps / vpdpbusd on zmm registers on every thread of the pool at once. A product's "share"
 * is its GFLOP/s (GOP/s for int8) over that peak.
 *
 * Then one micro-tile alone (tile_alone): the level's bf16 and int8 tile function called over and over
 * on one tile whose operands stay in L1, on one thread, against one thread's peak. It is what the
 * kernel reaches when memory costs nothing; the products' shares below it are what the memory
 * hierarchy and the epilogues cost on top. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "math/blas.h"
#include "core/tensor.h"
#include "math/cpu.h"
#include "math/gemm_lowp.h"
#include "math/kern.h"

static void fill(float *x, size_t n, unsigned seed, float scale) {
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) x[i] = scale * frand(&s, -0.5f, 0.5f);
}

static void loadavg(char *buf, int n) {
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = '\0';
    if (f) {
        if (!fgets(buf, n, f)) buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

/* GOP/s of the level's prec tile on one tile of mr rows x 48 features x K = 768, operands in L1:
 * activations converted by the level's own converter, the panel packed by eng__lp_pack. */
static double tile_alone(eng_prec prec, int reps) {
    const eng_kernels *k = eng__kern();
    int K = 768, N = ENG__LP_NR, bf = prec == ENG_PREC_BF16;
    int mr = bf ? k->bf16_mr : k->int8_mr, act_bytes = bf ? k->bf16_act_bytes : k->int8_act_bytes;
    size_t ldws = (size_t)K * (size_t)act_bytes; /* K = 768 is whole 64-byte lines at every layout */
    float *A = malloc(sizeof(float) * (size_t)mr * K), *W = malloc(sizeof(float) * (size_t)N * K);
    float *C = eng__alloc_aligned(sizeof(float) * (size_t)mr * N), *bias = malloc(sizeof(float) * N);
    float *scales = malloc(sizeof(float) * (size_t)mr);
    uint8_t *ws = eng__alloc_aligned(ldws * (size_t)mr);
    eng_lp_weights w = {0};
    double gops = -1;
    if (A && W && C && bias && scales && ws) {
        fill(A, (size_t)mr * K, 1, 4.0f);
        fill(W, (size_t)N * K, 2, 0.1f);
        fill(bias, (size_t)N, 3, 0.2f);
    }
    if (A && W && C && bias && scales && ws && !eng__lp_pack(&w, prec, W, N, K, K)) {
        (bf ? k->bf16_rows : k->int8_rows)(A, K, K, w.kp, 0, mr, ws, ldws, scales);
        eng__lp_tile t = {.mr = mr, .w = N, .kp = w.kp, .a = ws, .lda = ldws, .b = w.panels, .c = C, .ldc = N,
                          .bias = bias, .a_scale = bf ? NULL : scales, .b_scale = w.scale, .b_comp = w.comp};
        eng__lp_tile_fn tile = bf ? k->bf16_tile : k->int8_tile;
        int calls = 2000;
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now_ms();
            for (int c = 0; c < calls; c++) tile(&t);
            double ms = bench_now_ms() - t0;
            best = ms < best ? ms : best;
        }
        gops = 2.0 * mr * N * (double)K * calls / (best * 1e6);
    }
    eng__lp_release(&w);
    free(A), free(W), free(bias), free(scales);
    eng__free_aligned(C), eng__free_aligned(ws);
    return gops;
}

int main(int argc, char **argv) {
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 30, big_reps = 7, rows[2] = {128, 4096}, nrows = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--big-reps") && i + 1 < argc) big_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) nrows = bench_parse_list(argv[++i], rows, 2);
        else {
            fprintf(stderr, "usage: bench_lowp [--threads N] [--reps N] [--big-reps N] [--rows 128,4096]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1 || big_reps < 1) return 2;
    eng__blas_init();
    char feats[128], load[128];
    eng__cpu_describe(eng__cpu_features(), feats, sizeof feats);
    if (!eng__cpu_has(ENG_CPU_AVX512_BF16 | ENG_CPU_AVX512_VNNI)) {
        fprintf(stderr, "bench_lowp: this CPU (%s) lacks avx512_bf16 or avx512_vnni: nothing to measure\n", feats);
        return 77;
    }
    eng_pool *pool = eng__pool_new(threads);
    if (!pool) return 1;
    loadavg(load, sizeof load);
    printf("cpu features: %s\nOpenBLAS core: %s (not used by these products)\nthreads: %d\nload average before: %s\n",
           feats, eng_blas_core(), threads, load);
    printf("kernels: fp32 packed avx512 (eng__pgemm), bf16 %s, int8 %s\n", eng__lp_kernel(ENG_PREC_BF16),
           eng__lp_kernel(ENG_PREC_INT8));
    /* the peaks are measured before and after the products, and the better of the two kept: a
     * burst of other load during one measurement would otherwise inflate every share */
    double pk[3];
    for (int w = 0; w < 3; w++) pk[w] = bench_isa_peak(pool, (eng_precision)w);
    printf("peaks before (all threads): fp32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, int8 dot %.1f GOP/s\n", pk[0],
           pk[1], pk[2]);
    printf("shares below are of the better of the peaks before and after\n\n");
    int line = 0;
    double g_all[2 * 3 * 3], ms_all[2 * 3 * 3];
    int shape[2 * 3][3];
    double err_all[2 * 3 * 2][2];
    static const int kn[3][2] = {{768, 768}, {768, 3072}, {3072, 768}};
    for (int r = 0; r < nrows; r++)
        for (int s = 0; s < 3; s++) {
            int M = rows[r], K = kn[s][0], N = kn[s][1], R = M >= 1024 ? big_reps : reps;
            float *A = eng__alloc_aligned(sizeof(float) * (size_t)M * K), *W = malloc(sizeof(float) * (size_t)N * K);
            float *bias = malloc(sizeof(float) * N), *C = eng__alloc_aligned(sizeof(float) * (size_t)M * N);
            float *P = eng__alloc_aligned(sizeof(float) * eng__packed_floats(N, K));
            size_t wsb = eng__lp_ws_bytes(ENG_PREC_BF16, M, K), wsi = eng__lp_ws_bytes(ENG_PREC_INT8, M, K);
            void *ws = eng__alloc_aligned(wsb > wsi ? wsb : wsi);
            double *t = malloc(sizeof(double) * 3 * (size_t)R);
            eng_lp_weights wb = {0}, wi = {0};
            if (A && W && bias) {
                fill(A, (size_t)M * K, 1, 4.0f);
                fill(W, (size_t)N * K, 2, 0.1f);
                fill(bias, (size_t)N, 3, 0.2f);
            }
            if (!A || !W || !bias || !C || !P || !ws || !t || eng__lp_pack(&wb, ENG_PREC_BF16, W, N, K, K) ||
                eng__lp_pack(&wi, ENG_PREC_INT8, W, N, K, K)) {
                fprintf(stderr, "bench_lowp: out of memory\n");
                return 1;
            }
            eng__pack_linear(W, N, K, K, P);
            eng_epilogue ep = {.bias = bias, .act = ENG_ACT_IDENTITY};
            for (int i = -1; i < R; i++) { /* i = -1: warm-up */
                double t0 = bench_now_ms();
                eng__pgemm(pool, M, N, K, A, K, P, C, N, &ep);
                double t1 = bench_now_ms();
                eng__lp_gemm(pool, M, A, K, &wb, C, N, &ep, ws);
                double t2 = bench_now_ms();
                eng__lp_gemm(pool, M, A, K, &wi, C, N, &ep, ws);
                double t3 = bench_now_ms();
                if (i >= 0) t[i] = t1 - t0, t[R + i] = t2 - t1, t[2 * R + i] = t3 - t2;
            }
            /* the outputs' distance from float32's, on these inputs (uniform activations in [-2, 2), weights
             * in [-0.05, 0.05)): mean |diff| over mean |y|, and max |diff| over max |y| */
            float *C2 = eng__alloc_aligned(sizeof(float) * (size_t)M * N);
            if (!C2) return 1;
            for (int p = 1; p < 3; p++) {
                eng__pgemm(pool, M, N, K, A, K, P, C, N, &ep);
                eng__lp_gemm(pool, M, A, K, p == 1 ? &wb : &wi, C2, N, &ep, ws);
                double se = 0, sy = 0, me = 0, my = 0;
                for (size_t e = 0; e < (size_t)M * N; e++) {
                    double d = fabs((double)C2[e] - C[e]), y = fabs((double)C[e]);
                    se += d, sy += y, me = d > me ? d : me, my = y > my ? y : my;
                }
                err_all[line * 2 + p - 1][0] = se / sy, err_all[line * 2 + p - 1][1] = me / my;
            }
            eng__free_aligned(C2);
            double flop = 2.0 * M * N * (double)K;
            for (int p = 0; p < 3; p++) {
                ms_all[line * 3 + p] = bench_median(t + (size_t)p * R, R);
                g_all[line * 3 + p] = flop / (ms_all[line * 3 + p] * 1e6);
            }
            shape[line][0] = M, shape[line][1] = K, shape[line][2] = N;
            line++;
            eng__lp_release(&wb), eng__lp_release(&wi);
            eng__free_aligned(A), eng__free_aligned(C), eng__free_aligned(P), eng__free_aligned(ws);
            free(W), free(bias), free(t);
        }
    double after[3];
    for (int w = 0; w < 3; w++) after[w] = bench_isa_peak(pool, (eng_precision)w), pk[w] = after[w] > pk[w] ? after[w] : pk[w];
    printf("peaks after  (all threads): fp32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, int8 dot %.1f GOP/s\n\n",
           after[0], after[1], after[2]);
    printf("%5s %5s %5s | %9s %6s %5s | %9s %6s %5s %6s | %9s %6s %5s %6s\n", "M", "K", "N", "fp32 ms", "GF/s", "peak",
           "bf16 ms", "GF/s", "peak", "x fp32", "int8 ms", "GOP/s", "peak", "x fp32");
    for (int l = 0; l < line; l++) {
        const double *ms = ms_all + l * 3, *g = g_all + l * 3;
        printf("%5d %5d %5d | %9.3f %6.1f %4.0f%% | %9.3f %6.1f %4.0f%% %5.2fx | %9.3f %6.1f %4.0f%% %5.2fx\n",
               shape[l][0], shape[l][1], shape[l][2], ms[0], g[0], 100 * g[0] / pk[0], ms[1], g[1], 100 * g[1] / pk[1],
               ms[0] / ms[1], ms[2], g[2], 100 * g[2] / pk[2], ms[0] / ms[2]);
    }
    printf("\nerror vs fp32 (mean |diff| / mean |y|, max |diff| / max |y|):\n");
    for (int l = 0; l < line; l++)
        printf("%5d %5d %5d | bf16 %.2e %.2e | int8 %.2e %.2e\n", shape[l][0], shape[l][1], shape[l][2],
               err_all[l * 2][0], err_all[l * 2][1], err_all[l * 2 + 1][0], err_all[l * 2 + 1][1]);
    eng_pool *one = eng__pool_new(1);
    if (one) {
        double tb = tile_alone(ENG_PREC_BF16, 5), ti = tile_alone(ENG_PREC_INT8, 5);
        double pb = bench_isa_peak(one, ENG_PRECISION_BF16), pi = bench_isa_peak(one, ENG_PRECISION_INT8);
        printf("\none tile alone, operands in L1 (%d rows x 48 x K 768; best of 5 x 2000 calls), one thread:\n",
               eng__kern()->int8_mr);
        printf("  bf16 %s %.1f GFLOP/s = %.0f%% of one thread's dot peak %.1f\n", eng__lp_kernel(ENG_PREC_BF16), tb,
               100 * tb / pb, pb);
        printf("  int8 %s %.1f GOP/s = %.0f%% of one thread's dot peak %.1f\n", eng__lp_kernel(ENG_PREC_INT8), ti,
               100 * ti / pi, pi);
        eng__pool_free(one);
    }
    loadavg(load, sizeof load);
    printf("\nload average after: %s\n", load);
    eng__pool_free(pool);
    return 0;
}
