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

/* Independent accumulators: more than latency x pipes of each instruction (fmla 4 x 4 on Neoverse V1/V2: 16), and
 * with the two inputs within the 32 vector registers. Named variables, not an array: GCC stored an array's
 * accumulators to the stack every iteration. Each loop's body is one instruction per accumulator (objdump). */
#define CHAINS 24
#define PEAK_ITERS 2700000L /* ~20-60 ms per thread and instruction */
#define REP24(X)                                                                                                \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) \
    X(20) X(21) X(22) X(23)

static volatile float sink;

/* acc + a * b: the accumulator is fmla's destination (as b + acc * a, as it was, every step took two register
 * copies around its fmla and the figure understated the peak) */
static void loop_fmla(long n) {
    const float32x4_t a = vdupq_n_f32(1e-7f), b = vdupq_n_f32(1.0000001f);
#define INIT(r) float32x4_t c##r = vdupq_n_f32((float)(r));
#define STEP(r) c##r = vfmaq_f32(c##r, a, b);
#define SUM(r) s = vaddq_f32(s, c##r);
    REP24(INIT)
    for (long i = 0; i < n; i++) { REP24(STEP) }
    float32x4_t s = vdupq_n_f32(0);
    REP24(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = vaddvq_f32(s);
}

__attribute__((target("arch=armv8.2-a+dotprod"))) static void loop_sdot(long n) {
    const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
#define INIT(r) int32x4_t c##r = vdupq_n_s32(r);
#define STEP(r) c##r = vdotq_s32(c##r, a, b);
#define SUM(r) s = vaddq_s32(s, c##r);
    REP24(INIT)
    for (long i = 0; i < n; i++) { REP24(STEP) }
    int32x4_t s = vdupq_n_s32(0);
    REP24(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = (float)vaddvq_s32(s);
}

__attribute__((target("arch=armv8.2-a+i8mm"))) static void loop_smmla(long n) {
    const int8x16_t a = vdupq_n_s8(3), b = vdupq_n_s8(-2);
#define INIT(r) int32x4_t c##r = vdupq_n_s32(r);
#define STEP(r) c##r = vmmlaq_s32(c##r, a, b);
#define SUM(r) s = vaddq_s32(s, c##r);
    REP24(INIT)
    for (long i = 0; i < n; i++) { REP24(STEP) }
    int32x4_t s = vdupq_n_s32(0);
    REP24(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = (float)vaddvq_s32(s);
}

__attribute__((target("arch=armv8.2-a+bf16"))) static void loop_bfmmla(long n) {
    uint16x8_t ua = vdupq_n_u16(0x3F00), ub = vdupq_n_u16(0x3E80); /* 0.5 and 0.25 */
    __asm__ volatile("" : "+w"(ua), "+w"(ub)); /* as bits: GCC would make them fp16 moves, which need +fp16 */
    const bfloat16x8_t a = vreinterpretq_bf16_u16(ua), b = vreinterpretq_bf16_u16(ub);
#define INIT(r) float32x4_t c##r = vdupq_n_f32((float)(r));
#define STEP(r) c##r = vbfmmlaq_f32(c##r, a, b);
#define SUM(r) s = vaddq_f32(s, c##r);
    REP24(INIT)
    for (long i = 0; i < n; i++) { REP24(STEP) }
    float32x4_t s = vdupq_n_f32(0);
    REP24(SUM)
#undef INIT
#undef STEP
#undef SUM
    sink = vaddvq_f32(s);
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
