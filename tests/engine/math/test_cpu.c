/* test_cpu.c - CPU feature detection against the kernel's own view (/proc/cpuinfo), the denormal
 * mode of pool threads, and the choice of an OpenBLAS core (engine/math/cpu.c, x86/cpu_x86.c,
 * arm/cpu_arm.c): the checks of each architecture in its own branch. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "math/pool.h"
#include "math/cpu.h"
#include "math/cpu_arch.h"
#if defined(__x86_64__)
#include "math/x86/cpu_x86.h"
#elif defined(__aarch64__)
#include "math/arm/cpu_arm.h"
#endif

/* 1 when /proc/cpuinfo's first line named key ("flags" on x86, "Features" on ARM64) lists flag, 0 when
 * not, -1 when there is no such line (qemu-user before 8.2 shows the host's file). */
static inline int cpuinfo_has(const char *key, const char *flag) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    static char line[8192];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, strlen(key))) continue;
        found = 0;
        for (char *tok = strtok(strchr(line, ':') + 1, " \n"); tok; tok = strtok(NULL, " \n"))
            if (!strcmp(tok, flag)) found = 1;
        break;
    }
    fclose(f);
    return found;
}

static inline int cpuinfo_flag(const char *flag) { return cpuinfo_has("flags", flag); }
static inline int cpuinfo_feature(const char *flag) { return cpuinfo_has("Features", flag); }

#if defined(__x86_64__)
Test(cpu, features_agree_with_the_kernel) {
    /* Linux lists a flag only when the CPU has it and the kernel enabled its register state. */
    if (cpuinfo_flag("fpu") < 0) cr_skip_test("no /proc/cpuinfo");
    unsigned f = eng__cpu_detected(); /* what the CPU has, whatever level ADAPTERD_CPU_LEVEL caps */
    char desc[128];
    eng__cpu_describe(f, desc, sizeof desc);
    cr_log_info("detected: %s", desc);
    for (size_t i = 0; i < eng__x86_n_features; i++) { /* each feature: every need Linux names is listed */
        int all = 1;
        for (size_t n = 0; n < eng__x86_n_needs; n++)
            if ((eng__x86_features[i].needs >> n) & 1 && eng__x86_needs[n].cpuinfo)
                all &= cpuinfo_flag(eng__x86_needs[n].cpuinfo) == 1;
        eng__cpu_describe(eng__x86_features[i].feature, desc, sizeof desc);
        cr_assert_eq(!!(f & eng__x86_features[i].feature), all, "%s", desc);
    }
    int avx512 = cpuinfo_flag("avx512f") == 1 && cpuinfo_flag("avx512bw") == 1 && cpuinfo_flag("avx512dq") == 1 &&
                 cpuinfo_flag("avx512vl") == 1 && cpuinfo_flag("avx512cd") == 1;
    if (f & ENG_CPU_AVX2) cr_assert(cpuinfo_flag("bmi2") == 1 && cpuinfo_flag("avx2") == 1 && cpuinfo_flag("fma") == 1);
    if (f & ENG_CPU_AVX512) cr_assert(avx512 && (f & ENG_CPU_AVX2));
}

#elif defined(__aarch64__)
Test(cpu, features_agree_with_the_kernel) {
    /* Linux lists a feature only when the CPU has it and user space may use it (the same HWCAP bits). */
    unsigned f = eng__cpu_detected();
    char desc[128];
    eng__cpu_describe(f, desc, sizeof desc);
    cr_log_info("detected: %s", desc);
    cr_assert(f & ENG_CPU_NEON, "Advanced SIMD is part of ARMv8-A");
    if (cpuinfo_feature("asimd") < 0) cr_skip_test("no ARM64 Features line in /proc/cpuinfo (an emulator's host file?)");
    for (size_t i = 0; i < eng__arm_n_features; i++) { /* each feature: every need its -march names is listed */
        int all = 1;
        for (size_t n = 0; n < eng__arm_n_needs; n++)
            if ((eng__arm_features[i].needs >> n) & 1) all &= cpuinfo_feature(eng__arm_needs[n].cpuinfo) == 1;
        eng__cpu_describe(eng__arm_features[i].feature, desc, sizeof desc);
        cr_assert_eq(!!(f & eng__arm_features[i].feature), all, "%s", desc);
    }
}

#endif

Test(cpu, restrict_masks_and_restores) {
    unsigned all = eng__cpu_features(); /* the detected set, or less under ADAPTERD_CPU_LEVEL */
    eng__cpu_restrict(ENG_CPU_AVX2);
    cr_assert_eq(eng__cpu_features(), all & ENG_CPU_AVX2);
    cr_assert(!eng__cpu_has(ENG_CPU_AVX512));
    eng__cpu_restrict(0);
    cr_assert_eq(eng__cpu_features(), 0u);
    eng__cpu_restrict(ENG_CPU_ALL);
    cr_assert_eq(eng__cpu_features(), all);
    char buf[8];
    eng__cpu_describe(0, buf, sizeof buf);
    cr_assert_str_eq(buf, "none");
}

#if defined(__x86_64__)
Test(cpu, levels_name_feature_sets) {
    cr_assert_eq(eng__cpu_level_mask("baseline"), 0);
    cr_assert_eq(eng__cpu_level_mask("AVX2"), ENG_CPU_AVX2);
    cr_assert_eq(eng__cpu_level_mask("avx512"), ENG_CPU_AVX2 | ENG_CPU_AVX512);
    cr_assert_eq(eng__cpu_level_mask("avx512_bf16"),
                 ENG_CPU_AVX2 | ENG_CPU_AVX512 | ENG_CPU_AVX512_VNNI | ENG_CPU_AVX512_BF16);
    cr_assert_eq(eng__cpu_level_mask("native"), (long long)ENG_CPU_ALL);
    cr_assert_eq(eng__cpu_level_mask("sse9"), -1);
    cr_assert_eq(eng__cpu_level_mask(NULL), -1);
    const char *names[] = {"baseline", "avx2", "avx_vnni", "avx512", "avx512_vnni", "avx512_bf16"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) /* each level names itself back */
        cr_assert_str_eq(eng__cpu_level_of((unsigned)eng__cpu_level_mask(names[i])), names[i]);
    cr_assert_str_eq(eng__cpu_level_of(ENG_CPU_AVX2 | ENG_CPU_AVX512_BF16), "avx2"); /* bf16 without avx512 */
}

Test(cpu, level_check_explains) {
    char msg[256];
    cr_assert_eq(eng__cpu_level_check("baseline", msg, sizeof msg), 0);
    cr_assert_eq(eng__cpu_level_check("native", msg, sizeof msg), 0);
    cr_assert_eq(eng__cpu_level_check("avx3", msg, sizeof msg), -1);
    cr_assert(strstr(msg, "unknown CPU level \"avx3\"") && strstr(msg, "avx512_bf16"), "%s", msg);
    unsigned have = eng__cpu_detected();
    int rc = eng__cpu_level_check("avx512_bf16", msg, sizeof msg);
    int full = (have & (unsigned)eng__cpu_level_mask("avx512_bf16")) == (unsigned)eng__cpu_level_mask("avx512_bf16");
    cr_assert_eq(rc, full ? 0 : -1, "%s", msg);
    if (!full) cr_assert(strstr(msg, "lacks"), "%s", msg);
}

/* Each test runs in a process of its own, so the variable is read at this first detection. */
Test(cpu, environment_caps_and_nothing_raises_it) {
    setenv(ENG_CPU_LEVEL_ENV, "baseline", 1);
    cr_assert_eq(eng__cpu_features(), 0u);
    eng__cpu_restrict(ENG_CPU_ALL);
    cr_assert_eq(eng__cpu_features(), 0u);
    if (eng__cpu_detected() & ENG_CPU_AVX2) cr_assert(cpuinfo_flag("avx2") == 1 && cpuinfo_flag("bmi2") == 1);
}

/* The levels' needs written again here from the x86-64 psABI and Intel's CPUID pages (word, bit),
 * apart from cpu_x86.c's table, so that a wrong bit there is caught. */
typedef struct {
    int word, bit;
} raw_bit;
#define END {-1, 0}
#define V2 {ENG__X86_C1, 13}, {ENG__X86_C81, 0}, {ENG__X86_C1, 23}, {ENG__X86_C1, 0}, {ENG__X86_C1, 19}, \
           {ENG__X86_C1, 20}, {ENG__X86_C1, 9}                 /* cx16 lahf popcnt sse3 sse4.1 sse4.2 ssse3 */
#define V3 V2, {ENG__X86_C1, 28}, {ENG__X86_B7, 5}, {ENG__X86_B7, 3}, {ENG__X86_B7, 8}, {ENG__X86_C1, 29}, \
           {ENG__X86_C1, 12}, {ENG__X86_C81, 5}, {ENG__X86_C1, 22}, {ENG__X86_C1, 27}, {ENG__X86_XCR0, 1}, \
           {ENG__X86_XCR0, 2} /* avx avx2 bmi1 bmi2 f16c fma lzcnt movbe osxsave, xmm and ymm state */
#define V4 V3, {ENG__X86_B7, 16}, {ENG__X86_B7, 30}, {ENG__X86_B7, 28}, {ENG__X86_B7, 17}, {ENG__X86_B7, 31}, \
           {ENG__X86_XCR0, 5}, {ENG__X86_XCR0, 6}, {ENG__X86_XCR0, 7} /* f bw cd dq vl, k and zmm state */
static const struct {
    const char *level;
    raw_bit needs[48];
} x86_levels[] = {
    {"baseline", {END}},
    {"avx2", {V3, END}},
    {"avx_vnni", {V3, {ENG__X86_A71, 4}, END}},
    {"avx512", {V4, END}},
    {"avx512_vnni", {V4, {ENG__X86_C7, 11}, END}},
    {"avx512_bf16", {V4, {ENG__X86_C7, 11}, {ENG__X86_A71, 5}, END}},
    {"amx", {V4, {ENG__X86_C7, 11}, {ENG__X86_A71, 5}, {ENG__X86_D7, 24}, {ENG__X86_D7, 22}, {ENG__X86_D7, 25},
             {ENG__X86_XCR0, 17}, {ENG__X86_XCR0, 18}, {ENG__X86_GRANT, 0}, END}},
};
#define N_X86_LEVELS (sizeof x86_levels / sizeof x86_levels[0])

static void x86_words_of(size_t level, eng__cpu_x86_words *w) {
    *w = (eng__cpu_x86_words){{0}};
    for (const raw_bit *r = x86_levels[level].needs; r->word >= 0; r++) w->w[r->word] |= 1ull << r->bit;
}

static const char *x86_level(const eng__cpu_x86_words *w) { return eng__cpu_level_of(eng__cpu_x86_features(w)); }

Test(cpu, x86_level_needs_every_feature_of_its_files) {
    cr_assert_null(eng__cpu_level_name(N_X86_LEVELS));
    for (size_t l = 0; l < N_X86_LEVELS; l++) {
        cr_assert_str_eq(eng__cpu_level_name(l), x86_levels[l].level);
        eng__cpu_x86_words full;
        x86_words_of(l, &full);
        cr_assert_str_eq(x86_level(&full), x86_levels[l].level, "the full set of %s", x86_levels[l].level);
        for (const raw_bit *r = x86_levels[l].needs; r->word >= 0; r++) {
            eng__cpu_x86_words w = full;
            w.w[r->word] &= ~(1ull << r->bit);
            size_t want = 0; /* the highest lower level whose needs all remain */
            for (size_t m = 1; m < l; m++) {
                int all = 1;
                for (const raw_bit *q = x86_levels[m].needs; q->word >= 0; q++) all &= (int)((w.w[q->word] >> q->bit) & 1);
                if (all) want = m;
            }
            cr_assert_str_eq(x86_level(&w), x86_levels[want].level, "%s without word %d bit %d", x86_levels[l].level,
                             r->word, r->bit);
        }
    }
}

Test(cpu, x86_level_examples) {
    eng__cpu_x86_words w;
    x86_words_of(1, &w);
    w.w[ENG__X86_B7] &= ~(1ull << 8); /* AVX2 + FMA without BMI2 (some hypervisors) */
    cr_assert_str_eq(x86_level(&w), "baseline");
    cr_assert_eq(eng__cpu_x86_features(&w), 0u);
    char why[128];
    eng__cpu_x86_lacking(&w, ENG_CPU_AVX2, why, sizeof why); /* what --cpu-level avx2's refusal names */
    cr_assert_str_eq(why, "BMI2");
    w.w[ENG__X86_C7] = 0;
    eng__cpu_x86_lacking(&w, ENG_CPU_AVX512_VNNI, why, sizeof why);
    cr_assert_str_eq(why, "BMI2 AVX512F AVX512BW AVX512CD AVX512DQ AVX512VL XCR0.OPMASK XCR0.ZMM_HI256 XCR0.HI16_ZMM AVX512_VNNI");
    eng__cpu_x86_lacking(&w, ENG_CPU_AVX512_VNNI, why, 8); /* cut at a whole name */
    cr_assert_str_eq(why, "BMI2");
    x86_words_of(6, &w);
    w.w[ENG__X86_D7] &= ~(1ull << 24); /* no AMX-TILE */
    cr_assert_str_eq(x86_level(&w), "avx512_bf16");
    x86_words_of(6, &w);
    w.w[ENG__X86_GRANT] = 0; /* Linux refused the tile state */
    cr_assert_str_eq(x86_level(&w), "avx512_bf16");
    x86_words_of(5, &w);
    w.w[ENG__X86_B7] &= ~(1ull << 28); /* AVX-512 without CD */
    cr_assert_str_eq(x86_level(&w), "avx2");
    x86_words_of(4, &w);
    w.w[ENG__X86_XCR0] &= ~(1ull << 6); /* the OS does not save the upper halves of zmm */
    cr_assert_str_eq(x86_level(&w), "avx2");
    x86_words_of(1, &w);
    w.w[ENG__X86_C1] &= ~(1ull << 23); /* no POPCNT: not even x86-64-v2 */
    cr_assert_str_eq(x86_level(&w), "baseline");
    for (size_t i = 0; i < ENG__X86_N_WORDS; i++) w.w[i] = ~0ull;
    cr_assert_str_eq(x86_level(&w), "amx");
    eng_kernels k = {0};
    x86_words_of(5, &w);
    w.w[ENG__X86_B7] &= ~(1ull << 8); /* the kernel table keeps the portable kernels */
    eng__kern_fill_arch(&k, eng__cpu_x86_features(&w));
    cr_assert_null(k.f32);
    cr_assert_null(k.bf16);
    cr_assert_null(k.int8);
}

#elif defined(__aarch64__)
Test(cpu, levels_name_feature_sets) {
    cr_assert_eq(eng__cpu_level_mask("baseline"), 0);
    cr_assert_eq(eng__cpu_level_mask("NEON"), ENG_CPU_NEON);
    cr_assert_eq(eng__cpu_level_mask("dotprod"), ENG_CPU_NEON | ENG_CPU_DOTPROD);
    cr_assert_eq(eng__cpu_level_mask("i8mm"), ENG_CPU_NEON | ENG_CPU_DOTPROD | ENG_CPU_I8MM);
    cr_assert_eq(eng__cpu_level_mask("bf16"), ENG_CPU_NEON | ENG_CPU_DOTPROD | ENG_CPU_I8MM | ENG_CPU_BF16);
    cr_assert_eq(eng__cpu_level_mask("native"), (long long)ENG_CPU_ALL);
    cr_assert_eq(eng__cpu_level_mask("avx2"), -1); /* another architecture's level */
    const char *names[] = {"baseline", "neon", "dotprod", "i8mm", "bf16"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) { /* each level names itself back, in order */
        cr_assert_str_eq(eng__cpu_level_of((unsigned)eng__cpu_level_mask(names[i])), names[i]);
        cr_assert_str_eq(eng__cpu_level_name(i), names[i]);
    }
    cr_assert_null(eng__cpu_level_name(5));
    cr_assert_str_eq(eng__cpu_level_of(ENG_CPU_NEON | ENG_CPU_BF16), "neon"); /* bf16 without dotprod, i8mm */
}

Test(cpu, level_check_explains) {
    char msg[256];
    cr_assert_eq(eng__cpu_level_check("baseline", msg, sizeof msg), 0);
    cr_assert_eq(eng__cpu_level_check("native", msg, sizeof msg), 0);
    cr_assert_eq(eng__cpu_level_check("avx2", msg, sizeof msg), -1);
    cr_assert(strstr(msg, "unknown CPU level \"avx2\"") && strstr(msg, "i8mm"), "%s", msg);
    unsigned have = eng__cpu_detected(), want = (unsigned)eng__cpu_level_mask("bf16");
    int rc = eng__cpu_level_check("bf16", msg, sizeof msg);
    cr_assert_eq(rc, (have & want) == want ? 0 : -1, "%s", msg);
    if (rc) cr_assert(strstr(msg, "lacks"), "%s", msg);
}

Test(cpu, environment_caps_and_nothing_raises_it) {
    setenv(ENG_CPU_LEVEL_ENV, "neon", 1);
    cr_assert_eq(eng__cpu_features(), ENG_CPU_NEON);
    eng__cpu_restrict(ENG_CPU_ALL);
    cr_assert_eq(eng__cpu_features(), ENG_CPU_NEON);
    cr_assert(eng__cpu_detected() & ENG_CPU_NEON);
}

/* The levels' needs written again here from Linux's hwcap.h (word, bit), apart from cpu_arm.c's table. */
typedef struct {
    int word, bit;
} raw_bit;
#define END {-1, 0}
#define V8 {ENG__ARM_HWCAP, 0}, {ENG__ARM_HWCAP, 1} /* fp asimd */
#define V82 V8, {ENG__ARM_HWCAP, 7}, {ENG__ARM_HWCAP, 8}, {ENG__ARM_HWCAP, 12} /* crc32 atomics asimdrdm */
static const struct {
    const char *level;
    raw_bit needs[16];
} arm_levels[] = {
    {"baseline", {END}},
    {"neon", {V8, END}},
    {"dotprod", {V82, {ENG__ARM_HWCAP, 20}, END}},
    {"i8mm", {V82, {ENG__ARM_HWCAP, 20}, {ENG__ARM_HWCAP2, 13}, END}},
    {"bf16", {V82, {ENG__ARM_HWCAP, 20}, {ENG__ARM_HWCAP2, 13}, {ENG__ARM_HWCAP2, 14}, END}},
};
#define N_ARM_LEVELS (sizeof arm_levels / sizeof arm_levels[0])

static void arm_words_of(size_t level, eng__cpu_arm_words *w) {
    *w = (eng__cpu_arm_words){{0}};
    for (const raw_bit *r = arm_levels[level].needs; r->word >= 0; r++) w->w[r->word] |= 1ull << r->bit;
}

static const char *arm_level(const eng__cpu_arm_words *w) { return eng__cpu_level_of(eng__cpu_arm_features(w)); }

Test(cpu, arm_level_needs_every_feature_of_its_files) {
    cr_assert_null(eng__cpu_level_name(N_ARM_LEVELS));
    for (size_t l = 0; l < N_ARM_LEVELS; l++) {
        cr_assert_str_eq(eng__cpu_level_name(l), arm_levels[l].level);
        eng__cpu_arm_words full;
        arm_words_of(l, &full);
        cr_assert_str_eq(arm_level(&full), arm_levels[l].level, "the full set of %s", arm_levels[l].level);
        for (const raw_bit *r = arm_levels[l].needs; r->word >= 0; r++) {
            eng__cpu_arm_words w = full;
            w.w[r->word] &= ~(1ull << r->bit);
            size_t want = 0;
            for (size_t m = 1; m < l; m++) {
                int all = 1;
                for (const raw_bit *q = arm_levels[m].needs; q->word >= 0; q++) all &= (int)((w.w[q->word] >> q->bit) & 1);
                if (all) want = m;
            }
            cr_assert_str_eq(arm_level(&w), arm_levels[want].level, "%s without word %d bit %d", arm_levels[l].level,
                             r->word, r->bit);
        }
    }
}

Test(cpu, arm_bf16_without_i8mm_keeps_the_bf16_kernel_out) {
    eng__cpu_arm_words w;
    arm_words_of(4, &w);
    w.w[ENG__ARM_HWCAP2] &= ~(1ull << 13);
    unsigned f = eng__cpu_arm_features(&w);
    cr_assert_str_eq(eng__cpu_level_of(f), "dotprod");
    cr_assert_eq(f & ENG_CPU_BF16, 0u);
    eng_kernels k = {0};
    eng__kern_fill_arch(&k, f);
    cr_assert_str_eq(k.bf16, "neon");
    cr_assert_str_eq(k.int8, "dotprod");
    char why[64];
    eng__cpu_arm_lacking(&w, ENG_CPU_BF16, why, sizeof why);
    cr_assert_str_eq(why, "I8MM");
    arm_words_of(2, &w);
    w.w[ENG__ARM_HWCAP] &= ~(1ull << 8); /* dotprod without LSE atomics: ARMv8.2-A is not all there */
    cr_assert_str_eq(arm_level(&w), "neon");
}

#endif

typedef struct {
    atomic_int flushed, ran, subnormal_survived;
    atomic_int seen[3];
} ftz_job;

static void ftz_task(void *ctx, int task, int worker) {
    (void)task;
    ftz_job *j = ctx;
    usleep(5000); /* long enough for every worker to wake and claim its own task */
    volatile float x = 1e-30f, y = 1e-10f;
    float z = x * y; /* 1e-40 is subnormal: flushed to zero under FTZ */
    atomic_fetch_add(&j->ran, 1);
    atomic_fetch_add(&j->flushed, eng__cpu_denormals_flushed());
    if (z != 0.0f) atomic_fetch_add(&j->subnormal_survived, 1);
    atomic_store(&j->seen[worker], 1);
}

Test(cpu, pool_threads_flush_denormals) {
#if !defined(__x86_64__) && !defined(__aarch64__)
    cr_skip_test("flushing is set for x86 (MXCSR) and ARM64 (FPCR) only");
#endif
    eng_pool *p = eng__pool_new(3);
    cr_assert(p);
    ftz_job j = {0};
    for (int round = 0; round < 40 && !(atomic_load(&j.seen[1]) && atomic_load(&j.seen[2])); round++)
        eng__pool_run(p, 3, ftz_task, &j);
    cr_assert(atomic_load(&j.seen[1]) && atomic_load(&j.seen[2]), "the workers never ran a task");
    cr_assert_eq(atomic_load(&j.flushed), atomic_load(&j.ran), "%d of %d tasks ran without FTZ/DAZ",
                 atomic_load(&j.ran) - atomic_load(&j.flushed), atomic_load(&j.ran));
    cr_assert_eq(atomic_load(&j.subnormal_survived), 0);
    cr_assert(eng__cpu_denormals_flushed(), "the calling thread runs tasks too");
    eng__pool_free(p);
}

#if defined(__x86_64__)
Test(cpu, blas_core_pick) {
    unsigned zen4 = ENG_CPU_AVX2 | ENG_CPU_AVX512 | ENG_CPU_AVX512_BF16 | ENG_CPU_AVX512_VNNI;
    unsigned skx = ENG_CPU_AVX2 | ENG_CPU_AVX512 | ENG_CPU_AVX512_VNNI;
    cr_assert_str_eq(eng__blas_core_pick("Prescott", zen4), "Cooperlake");
    cr_assert_str_eq(eng__blas_core_pick("Prescott", skx), "SkylakeX");
    cr_assert_str_eq(eng__blas_core_pick("Zen", zen4), "Cooperlake");
    cr_assert_str_eq(eng__blas_core_pick("Sandybridge", ENG_CPU_AVX2), "Haswell");
    cr_assert_str_eq(eng__blas_core_pick("unknown", ENG_CPU_AVX2), "Haswell");
    cr_assert_null(eng__blas_core_pick("Haswell", ENG_CPU_AVX2));
    cr_assert_null(eng__blas_core_pick("SkylakeX", zen4)); /* an AVX-512 choice is OpenBLAS's to make */
    cr_assert_null(eng__blas_core_pick("Cooperlake", zen4));
    cr_assert_null(eng__blas_core_pick("Prescott", 0)); /* nothing better on this CPU */
}
#endif
