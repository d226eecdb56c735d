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

/* Independent accumulators per loop: enough to cover latency x pipes of each instruction (FMA 4 x 2 on Zen 4/5
 * and Intel; vpdpbusd / vdpbf16ps up to 6 x 2), and few enough to stay in registers with the loop's inputs.
 * The accumulators are named variables, not an array: with 16 ymm registers, an array of 16 accumulators plus
 * the two inputs spilled three chains to the stack every iteration (a store-to-load round trip on their
 * critical path), and GCC copied every zmm accumulator through a second register per iteration; the AVX2
 * FMA figure then read 139 GFLOP/s where the kernel ran at 187 ("140% of peak"). Each loop's body is one
 * instruction per accumulator and nothing else (objdump -d bench_peak_x86.c.o shows it). */
#define YMM_CHAINS 12 /* 16 ymm registers: 12 accumulators + the inputs (+ one product for vpmaddwd) */
#define ZMM_CHAINS 24 /* 32 zmm registers: 24 accumulators + the two inputs */
#define PEAK_INSNS 64000000L /* instructions per thread and loop: ~20 ms */
#define AMX_ITERS 4000000L   /* 250,000 tile products per thread */

#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define REP24(X) REP12(X) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

static volatile float sink;

__attribute__((target("avx512f"))) static void loop_fma(long n) {
    const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(1e-7f);
#define INIT(r) __m512 c##r = _mm512_set1_ps((float)(r));
#define STEP(r) c##r = _mm512_fmadd_ps(c##r, a, b);
#define SUM(r) s = _mm512_add_ps(s, c##r);
    REP24(INIT)
    for (long i = 0; i < n; i++) { REP24(STEP) }
    __m512 s = _mm512_setzero_ps();
    REP24(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) static void loop_bf16(long n) {
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f)), b = a;
#define INIT(r) __m512 c##r = _mm512_set1_ps((float)(r));
#define STEP(r) c##r = _mm512_dpbf16_ps(c##r, a, b);
#define SUM(r) s = _mm512_add_ps(s, c##r);
    REP24(INIT)
    for (long i = 0; i < n; i++) { REP24(STEP) }
    __m512 s = _mm512_setzero_ps();
    REP24(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512vnni"))) static void loop_vnni(long n) {
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
#define INIT(r) __m512i c##r = _mm512_set1_epi32(r);
#define STEP(r) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(c##r) : "v"(a), "v"(b));
#define SUM(r) s = _mm512_add_epi32(s, c##r);
    REP24(INIT)
    for (long i = 0; i < n; i++) { REP24(STEP) }
    __m512i s = _mm512_setzero_si512();
    REP24(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = (float)_mm512_reduce_add_epi32(s);
}

__attribute__((target("avx2,fma"))) static void loop_fma_ymm(long n) {
    const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(1e-7f);
#define INIT(r) __m256 c##r = _mm256_set1_ps((float)(r));
#define STEP(r) c##r = _mm256_fmadd_ps(c##r, a, b);
#define SUM(r) s = _mm256_add_ps(s, c##r);
    REP12(INIT)
    for (long i = 0; i < n; i++) { REP12(STEP) }
    __m256 s = _mm256_setzero_ps();
    REP12(SUM)
#undef INIT
#undef STEP
#undef SUM
    float v[8];
    _mm256_storeu_ps(v, s);
    sink = v[0] + v[7];
}

__attribute__((target("avx2,avxvnni"))) static void loop_vnni_ymm(long n) {
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
#define INIT(r) __m256i c##r = _mm256_set1_epi32(r);
#define STEP(r) __asm__ volatile("%{vex%} vpdpbusd %2, %1, %0" : "+x"(c##r) : "x"(a), "x"(b));
#define SUM(r) s = _mm256_add_epi32(s, c##r);
    REP12(INIT)
    for (long i = 0; i < n; i++) { REP12(STEP) }
    __m256i s = _mm256_setzero_si256();
    REP12(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = (float)_mm256_extract_epi32(s, 0);
}

/* the AVX2 int8 kernel's pair: 16 int16 products summed in pairs, then added (avx2_int8.c). Each accumulator
 * gets its own vpmaddwd: with intrinsics the compiler computed the loop-invariant product once per iteration
 * and reused it for every add (one vpmaddwd per 16 vpaddd: the add's throughput was measured, not the pair's).
 * The integer loops are written as one asm statement per instruction: GCC's integer intrinsics copied every
 * accumulator through a second register and stored it each iteration. */
__attribute__((target("avx2"))) static void loop_madd_ymm(long n) {
    const __m256i a = _mm256_set1_epi16(3), b = _mm256_set1_epi16(-2);
#define INIT(r) __m256i c##r = _mm256_set1_epi32(r);
#define STEP(r)                                                                                                  \
    {                                                                                                            \
        __m256i p;                                                                                               \
        __asm__ volatile("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(c##r), "=&x"(p) : "x"(a), "x"(b)); \
    }
#define SUM(r) s = _mm256_add_epi32(s, c##r);
    REP12(INIT)
    for (long i = 0; i < n; i++) { REP12(STEP) }
    __m256i s = _mm256_setzero_si256();
    REP12(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = (float)_mm256_extract_epi32(s, 0);
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
    double ops = 0; /* operations per instruction of a chain; AMX: per step of its n */
    long chains = 1, iters = PEAK_INSNS;
    /* AMX: 4 tile products per 64 steps of n, each 16 x 16 x 32 bf16 (16 x 16 x 64 int8) multiply-adds */
    if (!strcmp(kern, "amx_bf16")) loop = loop_amx_bf16, ops = 4.0 * 16 * 16 * 32 * 2 / 64, iters = AMX_ITERS;
    else if (!strcmp(kern, "amx_int8")) loop = loop_amx_int8, ops = 4.0 * 16 * 16 * 64 * 2 / 64, iters = AMX_ITERS;
    else if (!strcmp(kern, "avx512")) loop = loop_fma, ops = 32, chains = ZMM_CHAINS;
    else if (!strcmp(kern, "avx512_bf16")) loop = loop_bf16, ops = 64, chains = ZMM_CHAINS;
    else if (!strcmp(kern, "avx512_vnni")) loop = loop_vnni, ops = 128, chains = ZMM_CHAINS;
    else if (!strcmp(kern, "avx_vnni")) loop = loop_vnni_ymm, ops = 64, chains = YMM_CHAINS;
    else if (!strcmp(kern, "avx2") && p == ENG_PRECISION_INT8) loop = loop_madd_ymm, ops = 32, chains = YMM_CHAINS;
    else if (!strcmp(kern, "avx2")) loop = loop_fma_ymm, ops = 16, chains = YMM_CHAINS;
    if (!loop) return 0; /* the portable C kernels: no one instruction bounds them */
    return bench_peak_loop(pool, loop, iters / chains, ops * (double)chains);
}
