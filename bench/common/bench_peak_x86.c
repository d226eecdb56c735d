/* bench_peak_x86.c - the instruction peak of each precision on this x86-64 machine, at the CPU level the
 * engine runs (bench_util.h).
 *
 * A loop of the instruction the engine's kernel for that precision multiplies with (engine/math/
 * kern.h), independent accumulators, on every thread of the pool at once:
 *   fp32  vfmadd231ps zmm (avx512: 32 ops per instruction) or ymm (avx2: 16)
 *   bf16  vdpbf16ps zmm (avx512_bf16: 64) or, on AVX2, vfmadd231ps ymm (16: its kernel widens to fp32)
 *   int8  vpdpbusd zmm (avx512_vnni: 128) or ymm (avx_vnni: 64), or on AVX2 vpmaddwd + vpaddd ymm (32)
 *   amx   tdpbf16ps (16384 ops) and tdpbusd (32768) on tiles of 16 x 64 bytes
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

/* the AVX2 int8 kernel's pair: 16 int16 products summed in pairs, then added (avx2_int8.c) */
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

/* AMX: four independent tile products a call, on tiles of 16 rows x 64 bytes (configured here, per thread) */
typedef struct {
    unsigned char palette, start;
    unsigned char reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} amx_config;

__attribute__((target("amx-tile"))) static void amx_configure(void) {
    amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) c.rows[t] = 16, c.colsb[t] = 64;
    __asm__ volatile("" : : "r"(&c) : "memory"); /* GCC 12 dropped these stores: ldtilecfg read garbage */
    _tile_loadconfig(&c);
    for (int t = 0; t < 8; t++) { /* zeros, not garbage: denormal or NaN inputs could slow the units */
        static const char zero[1024] __attribute__((aligned(64)));
        switch (t) {
        case 0: _tile_loadd(0, zero, 64); break;
        case 1: _tile_loadd(1, zero, 64); break;
        case 2: _tile_loadd(2, zero, 64); break;
        case 3: _tile_loadd(3, zero, 64); break;
        case 4: _tile_loadd(4, zero, 64); break;
        case 5: _tile_loadd(5, zero, 64); break;
        case 6: _tile_loadd(6, zero, 64); break;
        default: _tile_loadd(7, zero, 64); break;
        }
    }
}

__attribute__((target("amx-tile,amx-bf16"))) static void loop_amx_bf16(long n) {
    amx_configure();
    for (long i = 0; i < n / 64; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
}

__attribute__((target("amx-tile,amx-int8"))) static void loop_amx_int8(long n) {
    amx_configure();
    for (long i = 0; i < n / 64; i++) {
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_release();
}

double bench_isa_peak(eng_pool *pool, eng_precision p) {
    const char *kern = eng_kernel_family(eng_precision_name(p));
    if (!kern) return 0;
    bench_loop_fn loop = NULL;
    double ops = 0;
    /* AMX: 4 tile products per n / 64 steps, each 16 x 16 x 32 bf16 (16 x 16 x 64 int8) multiply-adds; ops is per
     * CHAINS x n of the formula below */
    if (!strcmp(kern, "amx_bf16")) loop = loop_amx_bf16, ops = 4.0 * 16 * 16 * 32 * 2 / 64 / CHAINS;
    else if (!strcmp(kern, "amx_int8")) loop = loop_amx_int8, ops = 4.0 * 16 * 16 * 64 * 2 / 64 / CHAINS;
    else if (!strcmp(kern, "avx512")) loop = loop_fma, ops = 32;
    else if (!strcmp(kern, "avx512_bf16")) loop = loop_bf16, ops = 64;
    else if (!strcmp(kern, "avx512_vnni")) loop = loop_vnni, ops = 128;
    else if (!strcmp(kern, "avx_vnni")) loop = loop_vnni_ymm, ops = 64;
    else if (!strcmp(kern, "avx2") && p == ENG_PRECISION_INT8) loop = loop_madd_ymm, ops = 32;
    else if (!strcmp(kern, "avx2")) loop = loop_fma_ymm, ops = 16;
    if (!loop) return 0; /* the portable C kernels: no one instruction bounds them */
    return bench_peak_loop(pool, loop, PEAK_ITERS, ops * CHAINS);
}
