/* bench_peak.c - the instruction peak of each precision on this machine (bench_util.h).
 *
 * A loop of independent vfmadd231ps / vdpbf16ps / vpdpbusd on zmm registers, on every thread of the
 * pool at once: 32, 64 and 128 operations per instruction and core. It bounds what any kernel of
 * that precision can reach here, so a benchmark states its products' share of their own precision's
 * peak in the same run (bench/lowp, bench/encoder, bench/multitask). The loops are compiled for
 * their instructions with target attributes and called only when the CPU has them. */
#include <immintrin.h>

#include "bench_util.h"
#include "math/cpu.h"

#define CHAINS 16           /* independent accumulators: more than latency x throughput of each instruction */
#define PEAK_ITERS 4000000L /* ~20 ms per thread and instruction */
#define PEAK_RUNS 5

static volatile float sink;

__attribute__((target("avx512f"))) static void loop_fma(long n) {
    __m512 acc[CHAINS], a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(1e-7f);
    for (int r = 0; r < CHAINS; r++) acc[r] = _mm512_set1_ps((float)r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = _mm512_fmadd_ps(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = _mm512_add_ps(acc[0], acc[r]);
    sink = _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx512f,avx512bf16"))) static void loop_bf16(long n) {
    __m512 acc[CHAINS];
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f)), b = a;
    for (int r = 0; r < CHAINS; r++) acc[r] = _mm512_set1_ps((float)r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = _mm512_dpbf16_ps(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = _mm512_add_ps(acc[0], acc[r]);
    sink = _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx512f,avx512vnni"))) static void loop_vnni(long n) {
    __m512i acc[CHAINS], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (int r = 0; r < CHAINS; r++) acc[r] = _mm512_set1_epi32(r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = _mm512_dpbusd_epi32(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = _mm512_add_epi32(acc[0], acc[r]);
    sink = (float)_mm512_reduce_add_epi32(acc[0]);
}

static void peak_task(void *ctx, int task, int worker) {
    (void)task, (void)worker;
    switch (*(const eng_precision *)ctx) {
    case ENG_PRECISION_FP32: loop_fma(PEAK_ITERS); break;
    case ENG_PRECISION_BF16: loop_bf16(PEAK_ITERS); break;
    case ENG_PRECISION_INT8: loop_vnni(PEAK_ITERS); break;
    }
}

double bench_isa_peak(eng_pool *pool, eng_precision p) {
    static const unsigned need[3] = {ENG_CPU_AVX512, ENG_CPU_AVX512_BF16, ENG_CPU_AVX512_VNNI};
    static const double ops[3] = {32, 64, 128};
    if ((int)p < 0 || (int)p > 2 || !eng_cpu_has(need[p])) return 0;
    double best = 1e30;
    for (int r = 0; r < PEAK_RUNS; r++) {
        double t = bench_now_ms();
        eng_pool_run(pool, eng_pool_size(pool), peak_task, &p);
        t = bench_now_ms() - t;
        if (t < best) best = t;
    }
    return ops[p] * CHAINS * (double)PEAK_ITERS * eng_pool_size(pool) / (best * 1e6);
}
