/* bench_encoder.c - adapterd's encoder latency and throughput, next to the sgemm peak of the same run.
 *
 *   bench_encoder --model DIR [--threads N] [--reps R] [--batch-reps R] [--workloads latency,batch]
 *                 [--precision fp32|bf16|int8] [--keep-denormals] [--json]
 *
 * Workloads: one 128-token sequence (latency, --reps runs) and 32 sequences of
 * 128 tokens (throughput, --batch-reps runs, default reps/2), random ids, after two warm-up runs.
 * bench/encoder/run.sh runs it next to the PyTorch and ONNX Runtime peers. Prints medians and the achieved GFLOP/s of the encoder
 * (its matrix products and attention, counted exactly) next to the best GFLOP/s of a large GEMM
 * run through the same thread split (the engine's achievable peak on this machine and core).
 * --precision loads the model with its backbone Linear layers in bf16 or int8 (engine/model.h);
 * the sgemm peak stays the float32 one, and the instruction peak of the model's precision
 * (bench_isa_peak: vfmadd231ps, vdpbf16ps or vpdpbusd on every thread) is measured in the same run,
 * before and after the passes, the better kept (a burst of other load during one measurement would
 * otherwise inflate the share). bench/encoder/run_precision.sh compares the three precisions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "math/state.h"
#include "math/blas.h"
#include "math/cpu.h"
#include "engine/model.h"

/* FLOPs of one forward pass over n_seq sequences of len tokens. */
static double encoder_flops(const eng_config *c, int n_seq, int len) {
    double T = (double)n_seq * len, H = c->hidden, I = c->intermediate;
    double linear = 2.0 * T * (3 * H * H + H * H + 2 * H * I);
    double attn = 2.0 * 2.0 * n_seq * (double)len * len * H;
    return c->n_layers * (linear + attn);
}

static int run(const eng_model *m, eng_state *st, int n_seq, int len, int reps, double *med_ms) {
    const eng_config *c = eng_model_config(m);
    int n = n_seq * len;
    int32_t *ids = malloc(sizeof(int32_t) * n), *lens = malloc(sizeof(int32_t) * n_seq);
    float *out = eng__alloc_aligned(sizeof(float) * (size_t)n * c->hidden);
    double *t = malloc(sizeof(double) * reps);
    if (!ids || !lens || !out || !t) return -1;
    bench_random_ids(ids, n, 42, 0, c->vocab);
    for (int i = 0; i < n_seq; i++) lens[i] = len;
    eng_batch b = {.n_seq = n_seq, .ids = ids, .seq_len = lens};
    eng_err e;
    for (int r = 0; r < 2; r++)
        if (eng_encode(m, st, &b, out, NULL, &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return -1;
        }
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ms();
        eng_encode(m, st, &b, out, NULL, &e);
        t[r] = bench_now_ms() - t0;
    }
    *med_ms = bench_median(t, reps);
    free(ids), free(lens), eng__free_aligned(out), free(t);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *prec = "fp32";
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 10, batch_reps = 0, json = 0, do_lat = 1, do_thr = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch-reps") && i + 1 < argc) batch_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) prec = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--keep-denormals")) eng__cpu_keep_denormals(1); /* what FTZ/DAZ are worth */
        else if (!strcmp(argv[i], "--workloads") && i + 1 < argc) { /* for profiling one of them */
            do_lat = strstr(argv[i + 1], "latency") != NULL;
            do_thr = strstr(argv[++i], "batch") != NULL;
        }
        else {
            fprintf(stderr, "usage: bench_encoder --model DIR [--threads N] [--reps R] [--batch-reps R] [--workloads latency,batch] "
                            "[--precision fp32|bf16|int8] [--keep-denormals] [--json]\n");
            return 2;
        }
    }
    if (!dir || reps < 1 || eng_precision_parse(prec) < 0) return 2;
    if (batch_reps < 1) batch_reps = reps > 5 ? reps / 2 : reps;
    eng_model *m;
    eng_err e;
    eng_model_params mp = eng_model_default_params();
    mp.precision = (eng_precision)eng_precision_parse(prec);
    if (eng_model_load_params(dir, &mp, &m, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    eng_state *st = eng_state_new(threads);
    if (!st) return 1;
    double peak = bench_sgemm_peak(eng__state_pool(st), 5), lat = 0, thr = 0;
    double isa = bench_isa_peak(eng__state_pool(st), eng_model_precision(m).precision);
    if ((do_lat && run(m, st, 1, 128, reps, &lat)) || (do_thr && run(m, st, 32, 128, batch_reps, &thr))) return 1;
    const eng_config *c = eng_model_config(m);
    double g1 = encoder_flops(c, 1, 128) / (lat * 1e6), g32 = encoder_flops(c, 32, 128) / (thr * 1e6);
    double isa2 = bench_isa_peak(eng__state_pool(st), eng_model_precision(m).precision);
    if (isa2 > isa) isa = isa2;
    if (json)
        printf("{\"engine\":\"adapterd\",\"blas_core\":\"%s\",\"threads\":%d,\"latency_1x128_ms\":%.3f,"
               "\"batch_32x128_ms\":%.3f,\"gflops_1x128\":%.1f,\"gflops_32x128\":%.1f,\"sgemm_peak_gflops\":%.1f,"
               "\"precision\":\"%s\",\"kernel\":\"%s\",\"precision_peak_gops\":%.1f}\n",
               eng_blas_core(), threads, lat, thr, g1, g32, peak, eng_model_precision(m).name, eng_model_precision(m).kernel,
               isa);
    else
        printf("adapterd  %s (%s), core %s, %d threads\n  1x128:  %.2f ms median (%.1f GFLOP/s)\n  32x128: %.2f ms median "
               "(%.1f seq/s, %.1f GFLOP/s = %.0f%% of sgemm peak %.1f GFLOP/s)\n  %s instruction peak %.1f G/s: "
               "1x128 %.0f%%, 32x128 %.0f%%\n",
               eng_model_precision(m).name, eng_model_precision(m).kernel, eng_blas_core(), threads, lat, g1, thr,
               32000.0 / thr, g32, 100.0 * g32 / peak, peak, eng_model_precision(m).name, isa, 100.0 * g1 / isa,
               100.0 * g32 / isa);
    eng_state_free(st);
    eng_model_free(m);
    return 0;
}
