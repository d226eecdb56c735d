/* bench_attention.c - one attention head's two products at bert-base shapes, the way the encoder runs
 * them (engine/model/encoder.c, attn_task), next to OpenBLAS's sgemm on the same operands, same run.
 *
 *   bench_attention [--lens 128,384] [--reps N]
 *
 * Per head (d = 64, rows 3 x 768 floats apart as in the fused q|k|v activations): scores S (L, L) =
 * Q K^T / sqrt(d), then O (L, d) = P V. adapterd packs K^T (scaled) and V into its panels
 * (eng__pack_strided) and runs eng__pgemm on one thread, packing included; OpenBLAS runs
 * cblas_sgemm NoTrans x Trans and NoTrans x NoTrans on the same strided operands, its own copies
 * included. One thread each: the encoder runs one head per worker. Every rep runs both in turn;
 * medians over reps. The share is of the single-thread vfmadd231ps peak (bench_isa_peak), the same
 * run. V's 64 features are one full 48-wide panel and one of 16, K^T's 128 or 384 keys end in a
 * partial panel too: those narrow pieces are what the float32 tile runs with only the vectors it
 * stores (f32_impl.h).
 *
 * Where the CPU multiplies bf16 natively (math/gemm_lowp.h, eng__bf16_gemm_dyn) the same two products
 * run a third way, as the encoder runs them for its bf16 models: both operands rounded to
 * bf16 on the call (conversion included in the time), float32 sums; the share is then of the
 * single-thread vdpbf16ps peak.
 *
 * And Q K^T as the encoder runs it for its int8 models, on every level (eng__int8_gemm_dyn): queries
 * and keys quantized per row on the call (included in the time), the level's int8 tile; the share is
 * of the single-thread vpdpbusd (or the level's int8 instruction) peak. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "core/tensor.h"
#include "math/blas.h"
#include "math/cpu.h"
#include "math/gemm_lowp.h"

#define H 768
#define D 64
#define LD (3 * H)

int main(int argc, char **argv) {
    int lens[4] = {128, 384}, nlens = 2, reps = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--lens") && i + 1 < argc) nlens = bench_parse_list(argv[++i], lens, 4);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_attention [--lens 128,384] [--reps N]\n");
            return 2;
        }
    }
    if (nlens < 1 || reps < 1) return 2;
    eng__blas_init();
    eng_pool *pool = eng__pool_new(1);
    if (!pool) return 1;
    char feats[128];
    eng__cpu_describe(eng__cpu_features(), feats, sizeof feats);
    double peak = bench_isa_peak(pool, ENG_PRECISION_FP32);
    int bf16 = eng__bf16_dyn_native();
    double peak16 = bf16 ? bench_isa_peak(pool, ENG_PRECISION_BF16) : 0;
    double peak8 = bench_isa_peak(pool, ENG_PRECISION_INT8);
    printf("cpu features: %s\nOpenBLAS core: %s, 1 thread; adapterd 1 thread\n", feats, eng_blas_core());
    printf("single-thread FMA peak: %.1f GFLOP/s", peak);
    if (bf16) printf(", vdpbf16ps peak: %.1f GFLOP/s (bf16 kernel %s)", peak16, eng__lp_kernel(ENG_PREC_BF16));
    else printf("; no native bf16 at this level: the bf16 columns are skipped");
    printf("\n\n%5s | %-10s | %10s %7s %5s | %10s %7s | %-9s | %10s %7s %5s | %s\n", "L", "product", "adapterd us",
           "GF/s", "peak", "OpenBLAS us", "GF/s", "BLAS/f32", "bf16 us", "GF/s", "peak", "f32 / bf16");
    for (int li = 0; li < nlens; li++) {
        int L = lens[li];
        float *qkv = eng__alloc_aligned(sizeof(float) * (size_t)L * LD), *s = eng__alloc_aligned(sizeof(float) * (size_t)L * L);
        size_t pf = eng__packed_floats(L, D) > eng__packed_floats(D, L) ? eng__packed_floats(L, D) : eng__packed_floats(D, L);
        size_t wb = eng__bf16_dyn_bytes(L, L, D) > eng__bf16_dyn_bytes(L, D, L) ? eng__bf16_dyn_bytes(L, L, D)
                                                                               : eng__bf16_dyn_bytes(L, D, L);
        if (eng__int8_dyn_bytes(L, L, D) > wb) wb = eng__int8_dyn_bytes(L, L, D);
        void *ws = eng__alloc_aligned(wb);
        float *pk = eng__alloc_aligned(sizeof(float) * pf), *out = eng__alloc_aligned(sizeof(float) * (size_t)L * H);
        double *t = malloc(sizeof(double) * 7 * (size_t)reps);
        if (!qkv || !s || !pk || !out || !t || !ws) {
            fprintf(stderr, "bench_attention: out of memory\n");
            return 1;
        }
        unsigned seed = 7;
        for (size_t i = 0; i < (size_t)L * LD; i++) qkv[i] = frand(&seed, -1.0f, 1.0f);
        const float *q = qkv, *k = qkv + H, *v = qkv + 2 * H;
        float scale = 0.125f; /* 1 / sqrt(64) */
        for (int i = -5; i < reps; i++) { /* i < 0: warm-up */
            double t0 = bench_now_ms();
            eng__pack_strided(k, L, D, LD, 1, scale, pk);
            eng__pgemm(NULL, L, L, D, q, LD, pk, s, L, NULL);
            double t1 = bench_now_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, D, scale, q, LD, k, LD, 0.0f, s, L);
            double t2 = bench_now_ms();
            eng__pack_strided(v, D, L, 1, LD, 1.0f, pk);
            eng__pgemm(NULL, L, D, L, s, L, pk, out, H, NULL);
            double t3 = bench_now_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, D, L, 1.0f, s, L, v, LD, 0.0f, out, H);
            double t4 = bench_now_ms();
            if (bf16 && eng__bf16_gemm_dyn(L, L, D, scale, q, LD, k, LD, 1, s, L, ws)) bf16 = 0;
            double t5 = bench_now_ms();
            if (bf16 && eng__bf16_gemm_dyn(L, D, L, 1.0f, s, L, v, 1, LD, out, H, ws)) bf16 = 0;
            double t6 = bench_now_ms();
            eng__int8_gemm_dyn(L, L, D, scale, q, LD, k, LD, s, L, ws);
            double t7 = bench_now_ms();
            if (i >= 0) t[i] = t1 - t0, t[reps + i] = t2 - t1, t[2 * reps + i] = t3 - t2, t[3 * reps + i] = t4 - t3;
            if (i >= 0) t[4 * reps + i] = t5 - t4, t[5 * reps + i] = t6 - t5, t[6 * reps + i] = t7 - t6;
        }
        double flop = 2.0 * L * L * D;
        const char *name[2] = {"Q K^T", "P V"};
        for (int p = 0; p < 2; p++) {
            double a = bench_median(t + (size_t)(2 * p) * reps, reps) * 1e3, o = bench_median(t + (size_t)(2 * p + 1) * reps, reps) * 1e3;
            printf("%5d | %-10s | %10.2f %7.1f %4.0f%% | %10.2f %7.1f | %8.2fx", L, name[p], a, flop / a / 1e3,
                   100 * flop / a / 1e3 / peak, o, flop / o / 1e3, o / a);
            if (bf16) {
                double b = bench_median(t + (size_t)(4 + p) * reps, reps) * 1e3;
                printf(" | %10.2f %7.1f %4.0f%% | %.2fx", b, flop / b / 1e3, 100 * flop / b / 1e3 / peak16, a / b);
            }
            printf("\n");
        }
        double a = bench_median(t, reps) * 1e3, b8 = bench_median(t + (size_t)6 * reps, reps) * 1e3;
        printf("%5d | %-10s | int8 (kernel %s): %.2f us, %.1f GOP/s, %.0f%% of the int8 peak %.1f G/s; f32 / int8 %.2fx\n", L,
               "Q K^T", eng__lp_kernel(ENG_PREC_INT8), b8, flop / b8 / 1e3, 100 * flop / b8 / 1e3 / peak8, peak8, a / b8);
        eng__free_aligned(qkv), eng__free_aligned(s), eng__free_aligned(pk), eng__free_aligned(out);
        eng__free_aligned(ws);
        free(t);
    }
    eng__pool_free(pool);
    return 0;
}
