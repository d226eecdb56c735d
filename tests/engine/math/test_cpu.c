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
    unsigned f = eng_cpu_detected(); /* what the CPU has, whatever level ADAPTERD_CPU_LEVEL caps */
    char desc[128];
    eng_cpu_describe(f, desc, sizeof desc);
    cr_log_info("detected: %s", desc);
    int avx512 = cpuinfo_flag("avx512f") == 1 && cpuinfo_flag("avx512bw") == 1 && cpuinfo_flag("avx512dq") == 1 &&
                 cpuinfo_flag("avx512vl") == 1;
    cr_assert_eq(!!(f & ENG_CPU_AVX2), cpuinfo_flag("avx2") == 1 && cpuinfo_flag("fma") == 1);
    cr_assert_eq(!!(f & ENG_CPU_AVX512), avx512);
    cr_assert_eq(!!(f & ENG_CPU_AVX512_BF16), avx512 && cpuinfo_flag("avx512_bf16") == 1);
    cr_assert_eq(!!(f & ENG_CPU_AVX512_VNNI), avx512 && cpuinfo_flag("avx512_vnni") == 1);
    cr_assert_eq(!!(f & ENG_CPU_AVX_VNNI), (f & ENG_CPU_AVX2) && cpuinfo_flag("avx_vnni") == 1);
}

#elif defined(__aarch64__)
Test(cpu, features_agree_with_the_kernel) {
    /* Linux lists a feature only when the CPU has it and user space may use it (the same HWCAP bits). */
    unsigned f = eng_cpu_detected();
    char desc[128];
    eng_cpu_describe(f, desc, sizeof desc);
    cr_log_info("detected: %s", desc);
    cr_assert(f & ENG_CPU_NEON, "Advanced SIMD is part of ARMv8-A");
    if (cpuinfo_feature("asimd") < 0) cr_skip_test("no ARM64 Features line in /proc/cpuinfo (an emulator's host file?)");
    cr_assert_eq(!!(f & ENG_CPU_NEON), cpuinfo_feature("asimd") == 1);
    cr_assert_eq(!!(f & ENG_CPU_DOTPROD), cpuinfo_feature("asimddp") == 1);
    cr_assert_eq(!!(f & ENG_CPU_I8MM), cpuinfo_feature("i8mm") == 1);
    cr_assert_eq(!!(f & ENG_CPU_BF16), cpuinfo_feature("bf16") == 1);
}

#endif

Test(cpu, restrict_masks_and_restores) {
    unsigned all = eng_cpu_features(); /* the detected set, or less under ADAPTERD_CPU_LEVEL */
    eng_cpu_restrict(ENG_CPU_AVX2);
    cr_assert_eq(eng_cpu_features(), all & ENG_CPU_AVX2);
    cr_assert(!eng_cpu_has(ENG_CPU_AVX512));
    eng_cpu_restrict(0);
    cr_assert_eq(eng_cpu_features(), 0u);
    eng_cpu_restrict(ENG_CPU_ALL);
    cr_assert_eq(eng_cpu_features(), all);
    char buf[8];
    eng_cpu_describe(0, buf, sizeof buf);
    cr_assert_str_eq(buf, "none");
}

#if defined(__x86_64__)
Test(cpu, levels_name_feature_sets) {
    cr_assert_eq(eng_cpu_level_mask("baseline"), 0);
    cr_assert_eq(eng_cpu_level_mask("AVX2"), ENG_CPU_AVX2);
    cr_assert_eq(eng_cpu_level_mask("avx512"), ENG_CPU_AVX2 | ENG_CPU_AVX512);
    cr_assert_eq(eng_cpu_level_mask("avx512_bf16"),
                 ENG_CPU_AVX2 | ENG_CPU_AVX512 | ENG_CPU_AVX512_VNNI | ENG_CPU_AVX512_BF16);
    cr_assert_eq(eng_cpu_level_mask("native"), (long long)ENG_CPU_ALL);
    cr_assert_eq(eng_cpu_level_mask("sse9"), -1);
    cr_assert_eq(eng_cpu_level_mask(NULL), -1);
    const char *names[] = {"baseline", "avx2", "avx_vnni", "avx512", "avx512_vnni", "avx512_bf16"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) /* each level names itself back */
        cr_assert_str_eq(eng_cpu_level_of((unsigned)eng_cpu_level_mask(names[i])), names[i]);
    cr_assert_str_eq(eng_cpu_level_of(ENG_CPU_AVX2 | ENG_CPU_AVX512_BF16), "avx2"); /* bf16 without avx512 */
}

Test(cpu, level_check_explains) {
    char msg[256];
    cr_assert_eq(eng_cpu_level_check("baseline", msg, sizeof msg), 0);
    cr_assert_eq(eng_cpu_level_check("native", msg, sizeof msg), 0);
    cr_assert_eq(eng_cpu_level_check("avx3", msg, sizeof msg), -1);
    cr_assert(strstr(msg, "unknown CPU level \"avx3\"") && strstr(msg, "avx512_bf16"), "%s", msg);
    unsigned have = eng_cpu_detected();
    int rc = eng_cpu_level_check("avx512_bf16", msg, sizeof msg);
    int full = (have & (unsigned)eng_cpu_level_mask("avx512_bf16")) == (unsigned)eng_cpu_level_mask("avx512_bf16");
    cr_assert_eq(rc, full ? 0 : -1, "%s", msg);
    if (!full) cr_assert(strstr(msg, "lacks"), "%s", msg);
}

/* Each test runs in a process of its own, so the variable is read at this first detection. */
Test(cpu, environment_caps_and_nothing_raises_it) {
    setenv(ENG_CPU_LEVEL_ENV, "baseline", 1);
    cr_assert_eq(eng_cpu_features(), 0u);
    eng_cpu_restrict(ENG_CPU_ALL);
    cr_assert_eq(eng_cpu_features(), 0u);
    cr_assert_eq(eng_cpu_detected() & ENG_CPU_AVX2, (unsigned)(cpuinfo_flag("avx2") == 1 && cpuinfo_flag("fma") == 1) * ENG_CPU_AVX2);
}

#elif defined(__aarch64__)
Test(cpu, levels_name_feature_sets) {
    cr_assert_eq(eng_cpu_level_mask("baseline"), 0);
    cr_assert_eq(eng_cpu_level_mask("NEON"), ENG_CPU_NEON);
    cr_assert_eq(eng_cpu_level_mask("dotprod"), ENG_CPU_NEON | ENG_CPU_DOTPROD);
    cr_assert_eq(eng_cpu_level_mask("i8mm"), ENG_CPU_NEON | ENG_CPU_DOTPROD | ENG_CPU_I8MM);
    cr_assert_eq(eng_cpu_level_mask("bf16"), ENG_CPU_NEON | ENG_CPU_DOTPROD | ENG_CPU_I8MM | ENG_CPU_BF16);
    cr_assert_eq(eng_cpu_level_mask("native"), (long long)ENG_CPU_ALL);
    cr_assert_eq(eng_cpu_level_mask("avx2"), -1); /* another architecture's level */
    const char *names[] = {"baseline", "neon", "dotprod", "i8mm", "bf16"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) { /* each level names itself back, in order */
        cr_assert_str_eq(eng_cpu_level_of((unsigned)eng_cpu_level_mask(names[i])), names[i]);
        cr_assert_str_eq(eng_cpu_level_name(i), names[i]);
    }
    cr_assert_null(eng_cpu_level_name(5));
    cr_assert_str_eq(eng_cpu_level_of(ENG_CPU_NEON | ENG_CPU_BF16), "neon"); /* bf16 without dotprod, i8mm */
}

Test(cpu, level_check_explains) {
    char msg[256];
    cr_assert_eq(eng_cpu_level_check("baseline", msg, sizeof msg), 0);
    cr_assert_eq(eng_cpu_level_check("native", msg, sizeof msg), 0);
    cr_assert_eq(eng_cpu_level_check("avx2", msg, sizeof msg), -1);
    cr_assert(strstr(msg, "unknown CPU level \"avx2\"") && strstr(msg, "i8mm"), "%s", msg);
    unsigned have = eng_cpu_detected(), want = (unsigned)eng_cpu_level_mask("bf16");
    int rc = eng_cpu_level_check("bf16", msg, sizeof msg);
    cr_assert_eq(rc, (have & want) == want ? 0 : -1, "%s", msg);
    if (rc) cr_assert(strstr(msg, "lacks"), "%s", msg);
}

Test(cpu, environment_caps_and_nothing_raises_it) {
    setenv(ENG_CPU_LEVEL_ENV, "neon", 1);
    cr_assert_eq(eng_cpu_features(), ENG_CPU_NEON);
    eng_cpu_restrict(ENG_CPU_ALL);
    cr_assert_eq(eng_cpu_features(), ENG_CPU_NEON);
    cr_assert(eng_cpu_detected() & ENG_CPU_NEON);
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
    atomic_fetch_add(&j->flushed, eng_cpu_denormals_flushed());
    if (z != 0.0f) atomic_fetch_add(&j->subnormal_survived, 1);
    atomic_store(&j->seen[worker], 1);
}

Test(cpu, pool_threads_flush_denormals) {
#if !defined(__x86_64__) && !defined(__aarch64__)
    cr_skip_test("flushing is set for x86 (MXCSR) and ARM64 (FPCR) only");
#endif
    eng_pool *p = eng_pool_new(3);
    cr_assert(p);
    ftz_job j = {0};
    for (int round = 0; round < 40 && !(atomic_load(&j.seen[1]) && atomic_load(&j.seen[2])); round++)
        eng_pool_run(p, 3, ftz_task, &j);
    cr_assert(atomic_load(&j.seen[1]) && atomic_load(&j.seen[2]), "the workers never ran a task");
    cr_assert_eq(atomic_load(&j.flushed), atomic_load(&j.ran), "%d of %d tasks ran without FTZ/DAZ",
                 atomic_load(&j.ran) - atomic_load(&j.flushed), atomic_load(&j.ran));
    cr_assert_eq(atomic_load(&j.subnormal_survived), 0);
    cr_assert(eng_cpu_denormals_flushed(), "the calling thread runs tasks too");
    eng_pool_free(p);
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
