/* cpu_arm.c - ARM64's part of CPU detection (cpu_arch.h): the features Linux reports in the
 * auxiliary vector (getauxval(AT_HWCAP / AT_HWCAP2): the kernel lists an extension only when the
 * CPU has it and the kernel supports its use from user space), the levels, and FPCR's flush-to-zero.
 * A level counts only when every extension its files' -march names is there (the table below; the
 * choice is the pure eng__cpu_arm_features, arm/cpu_arm.h, tested with faked words).
 * OpenBLAS's own choice is left as it is: Debian's arm64 OpenBLAS picks its kernels from the CPU's
 * part number (NEOVERSEN1, NEOVERSEV1, ...; `adapterd version` says which). */
#include "math/cpu.h"
#include "math/cpu_arch.h"
#include "math/arm/cpu_arm.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/auxv.h>

#define F_NEON ENG_CPU_NEON
#define F_DOT (F_NEON | ENG_CPU_DOTPROD)
#define F_I8MM (F_DOT | ENG_CPU_I8MM)
const eng__cpu_level eng__cpu_levels[] = {
    {"baseline", 0},
    {"neon", F_NEON},
    {"dotprod", F_DOT},
    {"i8mm", F_I8MM},
    {"bf16", F_I8MM | ENG_CPU_BF16},
};
const size_t eng__cpu_n_levels = sizeof eng__cpu_levels / sizeof eng__cpu_levels[0];

const eng__cpu_feature eng__cpu_feature_names[] = {
    {ENG_CPU_NEON, "neon"},
    {ENG_CPU_DOTPROD, "dotprod"},
    {ENG_CPU_I8MM, "i8mm"},
    {ENG_CPU_BF16, "bf16"},
};
const size_t eng__cpu_n_feature_names = sizeof eng__cpu_feature_names / sizeof eng__cpu_feature_names[0];

const char eng__cpu_lowp_need[] = "NEON (bf16) or NEON with the dot-product extension (int8, ARMv8.2-A dotprod)";

/* What each kernel file's -march needs (engine/CMakeLists.txt, by file name), as the bits of Linux's
 * arch/arm64/include/uapi/asm/hwcap.h: a level counts only when all of them are there, since the
 * compiler may use any of them anywhere in the file. ARMv8.2-A includes ARMv8.1-A's CRC32, LSE
 * atomics and RDM (sqrdmlah), so the dotprod files need those too. Keep this table and that CMake
 * list together. */
#define N(w, b, name, cpuinfo) {ENG__ARM_##w, b, name, cpuinfo}
const eng__arm_need eng__arm_needs[] = {
    N(HWCAP, 0, "FP", "fp"), N(HWCAP, 1, "ASIMD", "asimd"),                              /* armv8-a */
    N(HWCAP, 7, "CRC32", "crc32"), N(HWCAP, 8, "LSE", "atomics"), N(HWCAP, 12, "RDM", "asimdrdm"), /* armv8.2-a */
    N(HWCAP, 20, "DOTPROD", "asimddp"),                                                  /* +dotprod */
    N(HWCAP2, 13, "I8MM", "i8mm"),                                                       /* +i8mm */
    N(HWCAP2, 14, "BF16", "bf16"),                                                       /* +bf16 */
};
#undef N
const size_t eng__arm_n_needs = sizeof eng__arm_needs / sizeof eng__arm_needs[0];
_Static_assert(sizeof eng__arm_needs / sizeof eng__arm_needs[0] == 8, "NEED_* below count the rows above");

#define NEED_V8 0x03ull             /* -march=armv8-a */
#define NEED_DOT (NEED_V8 | 0x3cull) /* -march=armv8.2-a+dotprod */
#define NEED_I8MM (NEED_DOT | 0x40ull)
#define NEED_BF16 (NEED_I8MM | 0x80ull)
/* One row per kernel file prefix of engine/CMakeLists.txt, its -march in the comment. */
const eng__arm_feature_needs eng__arm_features[] = {
    {ENG_CPU_NEON, NEED_V8},       /* neon_*: armv8-a */
    {ENG_CPU_DOTPROD, NEED_DOT},   /* dotprod_*: armv8.2-a+dotprod */
    {ENG_CPU_I8MM, NEED_I8MM},     /* i8mm_*: armv8.2-a+dotprod+i8mm */
    {ENG_CPU_BF16, NEED_BF16},     /* bf16_*: armv8.2-a+dotprod+i8mm+bf16 */
};
const size_t eng__arm_n_features = sizeof eng__arm_features / sizeof eng__arm_features[0];

unsigned eng__cpu_arm_features(const eng__cpu_arm_words *w) {
    unsigned long long have = 0;
    for (size_t i = 0; i < eng__arm_n_needs; i++)
        if ((w->w[eng__arm_needs[i].word] >> eng__arm_needs[i].bit) & 1) have |= 1ull << i;
    unsigned f = 0;
    for (size_t i = 0; i < eng__arm_n_features; i++)
        if ((have & eng__arm_features[i].needs) == eng__arm_features[i].needs) f |= eng__arm_features[i].feature;
    return f;
}

void eng__cpu_arm_lacking(const eng__cpu_arm_words *w, unsigned f, char *buf, int n) {
    if (n <= 0) return;
    buf[0] = '\0';
    unsigned long long need = 0;
    for (size_t i = 0; i < eng__arm_n_features; i++)
        if (f & eng__arm_features[i].feature) need |= eng__arm_features[i].needs;
    int len = 0;
    for (size_t i = 0; i < eng__arm_n_needs; i++) {
        if (!((need >> i) & 1) || ((w->w[eng__arm_needs[i].word] >> eng__arm_needs[i].bit) & 1)) continue;
        int k = snprintf(buf + len, (size_t)(n - len), "%s%s", len ? " " : "", eng__arm_needs[i].name);
        if (k < 0 || k >= n - len) { /* cut at the last whole name */
            buf[len] = '\0';
            return;
        }
        len += k;
    }
}

static eng__cpu_arm_words detected_words; /* eng__cpu_detect's, for eng__cpu_lacking */

void eng__cpu_lacking(unsigned f, char *buf, int n) { eng__cpu_arm_lacking(&detected_words, f, buf, n); }

unsigned eng__cpu_detect(void) {
    eng__cpu_arm_words w = {{getauxval(AT_HWCAP), getauxval(AT_HWCAP2)}};
    detected_words = w;
    return eng__cpu_arm_features(&w);
}

/* FPCR.FZ flushes subnormal inputs and outputs of float operations to zero: x86's FTZ and DAZ in one
 * bit (NEON's float32 arithmetic follows it too). */
#define FPCR_FZ (1ull << 24)

static inline uint64_t fpcr_get(void) {
    uint64_t r;
    __asm__ volatile("mrs %0, fpcr" : "=r"(r));
    return r;
}

void eng__cpu_fp_flush(int flush) {
    uint64_t r = fpcr_get();
    if (!!(r & FPCR_FZ) == !!flush) return;
    r = flush ? r | FPCR_FZ : r & ~FPCR_FZ;
    __asm__ volatile("msr fpcr, %0" : : "r"(r));
}

int eng__cpu_fp_flushed(void) { return (fpcr_get() & FPCR_FZ) != 0; }

const char *eng__blas_core_pick(const char *core, unsigned features) {
    (void)core, (void)features;
    return NULL;
}
