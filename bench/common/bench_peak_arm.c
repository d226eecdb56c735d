/* bench_peak_arm.c - the instruction peak of each precision on this ARM64 machine, at the CPU level the
 * engine runs (bench_util.h; bench_peak_x86.c is the x86-64 twin, CMake builds one of them).
 *
 * A loop of the instruction the engine's kernel for that precision multiplies with (engine/math/
 * arm/), independent accumulators, on every thread of the pool at once:
 *   fp32  fmla v.4s (neon: 8 ops per instruction)
 *   bf16  bfmmla (bf16: 2 x 4 x 2 products, 32 ops) or, on neon, fmla (8: its kernel widens to fp32)
 *   int8  smmla (i8mm: 2 x 8 x 2 products, 64 ops) or sdot v.4s (dotprod: 32 ops)
 * It bounds what any kernel of that precision can reach here, so a benchmark states its products'
 * share of their own precision's peak in the same run. Each loop is compiled for its extension with a
 * target attribute and called only when the engine's table says its kernel uses it. */
#include <arm_neon.h>

#include "bench_util.h"
#include <string.h>

#include "engine/model.h"
#include "engine/platform.h"

#define CHAINS 16           /* independent accumulators: more than latency x throughput of each instruction */
#define PEAK_ITERS 4000000L /* ~20-60 ms per thread and instruction */

static volatile float sink;

static void loop_fmla(long n) {
    float32x4_t acc[CHAINS], a = vdupq_n_f32(1.0000001f), b = vdupq_n_f32(1e-7f);
    for (int r = 0; r < CHAINS; r++) acc[r] = vdupq_n_f32((float)r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = vfmaq_f32(b, acc[r], a);
    for (int r = 1; r < CHAINS; r++) acc[0] = vaddq_f32(acc[0], acc[r]);
    sink = vaddvq_f32(acc[0]);
}

__attribute__((target("arch=armv8.2-a+dotprod"))) static void loop_sdot(long n) {
    int32x4_t acc[CHAINS];
    int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
    for (int r = 0; r < CHAINS; r++) acc[r] = vdupq_n_s32(r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = vdotq_s32(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = vaddq_s32(acc[0], acc[r]);
    sink = (float)vaddvq_s32(acc[0]);
}

__attribute__((target("arch=armv8.2-a+i8mm"))) static void loop_smmla(long n) {
    int32x4_t acc[CHAINS];
    int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
    for (int r = 0; r < CHAINS; r++) acc[r] = vdupq_n_s32(r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = vmmlaq_s32(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = vaddq_s32(acc[0], acc[r]);
    sink = (float)vaddvq_s32(acc[0]);
}

__attribute__((target("arch=armv8.2-a+bf16"))) static void loop_bfmmla(long n) {
    float32x4_t acc[CHAINS];
    uint16x8_t ua = vdupq_n_u16(0x3F00), ub = vdupq_n_u16(0x3E80); /* 0.5 and 0.25 */
    __asm__ volatile("" : "+w"(ua), "+w"(ub)); /* as bits: GCC would make them fp16 moves, which need +fp16 */
    bfloat16x8_t a = vreinterpretq_bf16_u16(ua), b = vreinterpretq_bf16_u16(ub);
    for (int r = 0; r < CHAINS; r++) acc[r] = vdupq_n_f32((float)r);
    for (long i = 0; i < n; i++)
#pragma GCC unroll 16
        for (int r = 0; r < CHAINS; r++) acc[r] = vbfmmlaq_f32(acc[r], a, b);
    for (int r = 1; r < CHAINS; r++) acc[0] = vaddq_f32(acc[0], acc[r]);
    sink = vaddvq_f32(acc[0]);
}

double bench_isa_peak(eng_pool *pool, eng_precision p) {
    const char *kern = eng_kernel_family(eng_precision_name(p));
    if (!kern) return 0;
    bench_loop_fn loop = NULL;
    double ops = 0;
    if (!strcmp(kern, "neon")) loop = loop_fmla, ops = 8;
    else if (!strcmp(kern, "dotprod")) loop = loop_sdot, ops = 32;
    else if (!strcmp(kern, "i8mm")) loop = loop_smmla, ops = 64;
    else if (!strcmp(kern, "bf16")) loop = loop_bfmmla, ops = 32;
    if (!loop) return 0; /* the portable C kernels: no one instruction bounds them */
    return bench_peak_loop(pool, loop, PEAK_ITERS, ops * CHAINS);
}
