/* bench_peak.c - the instruction peak of each precision on this machine, at the CPU level the
 * engine runs (bench_util.h).
 *
 * A loop of the instruction the engine's kernel for that precision multiplies with (engine/math/
 * kern.h), independent accumulators, on every thread of the pool at once:
 *   fp32  vfmadd231ps zmm (avx512: 32 ops per instruction) or ymm (avx2: 16)
 *   bf16  vdpbf16ps zmm (avx512_bf16: 64) or, on AVX2, vfmadd231ps ymm (16: its kernel widens to fp32)
 *   int8  vpdpbusd zmm (avx512_vnni: 128) or ymm (avx_vnni: 64), or on AVX2 vpmaddwd + vpaddd ymm (32)
 * It bounds what any kernel of that precision can reach here, so a benchmark states its products'
 * share of their own precision's peak in the same run (bench/lowp, bench/encoder, bench/multitask).
 * The loops are compiled for their instructions with target attributes and called only when the
 * engine's table says its kernel uses them. */
#include <immintrin.h>

#include "bench_util.h"
#include <string.h>

#include "engine/model.h"
#include "engine/platform.h"

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

__attribute__((target("avx2,fma"))) static void loop_fma_ymm(long n) {
    __m256 acc[CHAINS], a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(1e-7f);
    for (int r = 0; r < CHAINS; r++) acc[r] = _mm256_set1_ps((float)r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = _mm256_fmadd_ps(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = _mm256_add_ps(acc[0], acc[r]);
    float v[8];
    _mm256_storeu_ps(v, acc[0]);
    sink = v[0] + v[7];
}

__attribute__((target("avx2,avxvnni"))) static void loop_vnni_ymm(long n) {
    __m256i acc[CHAINS], a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
    for (int r = 0; r < CHAINS; r++) acc[r] = _mm256_set1_epi32(r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = _mm256_dpbusd_avx_epi32(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = _mm256_add_epi32(acc[0], acc[r]);
    sink = (float)_mm256_extract_epi32(acc[0], 0);
}

/* the AVX2 int8 kernel's pair: 16 int16 products summed in pairs, then added (avx2_lowp.c) */
__attribute__((target("avx2"))) static void loop_madd_ymm(long n) {
    __m256i acc[CHAINS], a = _mm256_set1_epi16(3), b = _mm256_set1_epi16(-2);
    for (int r = 0; r < CHAINS; r++) acc[r] = _mm256_set1_epi32(r);
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(a, b));
        __asm__ volatile("" : "+x"(a)); /* keep the product inside the loop */
    }
    for (int r = 1; r < CHAINS; r++) acc[0] = _mm256_add_epi32(acc[0], acc[r]);
    sink = (float)_mm256_extract_epi32(acc[0], 0);
}

typedef void (*peak_loop)(long n);

static void peak_task(void *ctx, int task, int worker) {
    (void)task, (void)worker;
    (*(peak_loop *)ctx)(PEAK_ITERS);
}

double bench_isa_peak(eng_pool *pool, eng_precision p) {
    const char *kern = eng_kernel_family(eng_precision_name(p));
    if (!kern) return 0;
    peak_loop loop = NULL;
    double ops = 0;
    if (!strcmp(kern, "avx512")) loop = loop_fma, ops = 32;
    else if (!strcmp(kern, "avx512_bf16")) loop = loop_bf16, ops = 64;
    else if (!strcmp(kern, "avx512_vnni")) loop = loop_vnni, ops = 128;
    else if (!strcmp(kern, "avx_vnni")) loop = loop_vnni_ymm, ops = 64;
    else if (!strcmp(kern, "avx2") && p == ENG_PRECISION_INT8) loop = loop_madd_ymm, ops = 32;
    else if (!strcmp(kern, "avx2")) loop = loop_fma_ymm, ops = 16;
    if (!loop) return 0; /* the portable C kernels: no one instruction bounds them */
    double best = 1e30;
    for (int r = 0; r < PEAK_RUNS; r++) {
        double t = bench_now_ms();
        eng_pool_run(pool, eng_pool_size(pool), peak_task, &loop);
        t = bench_now_ms() - t;
        if (t < best) best = t;
    }
    return ops * CHAINS * (double)PEAK_ITERS * eng_pool_size(pool) / (best * 1e6);
}
