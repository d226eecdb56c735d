/* cpu_arm.c - ARM64's part of CPU detection (cpu_arch.h): the features Linux reports in the
 * auxiliary vector (getauxval(AT_HWCAP / AT_HWCAP2): the kernel lists an extension only when the
 * CPU has it and the kernel supports its use from user space), the levels, and FPCR's flush-to-zero.
 * OpenBLAS's own choice is left as it is: Debian's arm64 OpenBLAS picks its kernels from the CPU's
 * part number (NEOVERSEN1, NEOVERSEV1, ...; `adapterd version` says which). */
#include "math/cpu.h"
#include "math/cpu_arch.h"

#include <stdint.h>
#include <sys/auxv.h>

/* the bits of Linux's arch/arm64/include/uapi/asm/hwcap.h, for C libraries that lack the names */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1ul << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1ul << 14)
#endif

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

unsigned eng__cpu_detect(void) {
    unsigned long h = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    unsigned f = 0;
    if (h & HWCAP_ASIMD) f |= ENG_CPU_NEON;
    if ((f & ENG_CPU_NEON) && (h & HWCAP_ASIMDDP)) f |= ENG_CPU_DOTPROD;
    if ((f & ENG_CPU_NEON) && (h2 & HWCAP2_I8MM)) f |= ENG_CPU_I8MM;
    if ((f & ENG_CPU_NEON) && (h2 & HWCAP2_BF16)) f |= ENG_CPU_BF16;
    return f;
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
