/* cpu_x86.c - x86-64's part of CPU detection (cpu_arch.h): CPUID + XGETBV, the levels, MXCSR's
 * flush-to-zero, and the OpenBLAS core a CPU deserves.
 *
 * A feature counts only when the OS also saves its registers (XGETBV): a hypervisor can expose
 * AVX-512 in CPUID and still not enable the zmm state. */
#include "math/cpu.h"
#include "math/cpu_arch.h"

#include <cpuid.h>
#include <strings.h>
#include <xmmintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define F_V3 ENG_CPU_AVX2
#define F_V4 (ENG_CPU_AVX2 | ENG_CPU_AVX512)
const eng__cpu_level eng__cpu_levels[] = {
    {"baseline", 0},
    {"avx2", F_V3},
    {"avx_vnni", F_V3 | ENG_CPU_AVX_VNNI},
    {"avx512", F_V4},
    {"avx512_vnni", F_V4 | ENG_CPU_AVX512_VNNI},
    {"avx512_bf16", F_V4 | ENG_CPU_AVX512_VNNI | ENG_CPU_AVX512_BF16},
    {"amx", F_V4 | ENG_CPU_AVX512_VNNI | ENG_CPU_AVX512_BF16 | ENG_CPU_AMX},
};
const size_t eng__cpu_n_levels = sizeof eng__cpu_levels / sizeof eng__cpu_levels[0];

const eng__cpu_feature eng__cpu_feature_names[] = {
    {ENG_CPU_AVX2, "avx2"},
    {ENG_CPU_AVX512, "avx512"},
    {ENG_CPU_AVX512_BF16, "avx512_bf16"},
    {ENG_CPU_AVX512_VNNI, "avx512_vnni"},
    {ENG_CPU_AVX_VNNI, "avx_vnni"},
    {ENG_CPU_AMX, "amx"},
};
const size_t eng__cpu_n_feature_names = sizeof eng__cpu_feature_names / sizeof eng__cpu_feature_names[0];

const char eng__cpu_lowp_need[] = "at least AVX2 + FMA (x86-64-v3)";

static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

unsigned eng__cpu_detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx) return 0;
    unsigned long long xcr0 = xgetbv0();
    int ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xE6) == 0xE6; /* SSE, AVX, opmask, zmm hi256/hi16 */
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d7)) {
        unsigned max7 = a;
        if (max7 >= 1) __get_cpuid_count(7, 1, &a71, &b, &c, &d);
    }
    unsigned f = 0;
    if (ymm_os && fma && ((b7 >> 5) & 1)) f |= ENG_CPU_AVX2;
    int avx512 = ((b7 >> 16) & 1) && ((b7 >> 17) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1); /* F DQ BW VL */
    if (zmm_os && avx512 && (f & ENG_CPU_AVX2)) {
        f |= ENG_CPU_AVX512;
        if ((a71 >> 5) & 1) f |= ENG_CPU_AVX512_BF16;
        if ((c7 >> 11) & 1) f |= ENG_CPU_AVX512_VNNI;
    }
    if ((f & ENG_CPU_AVX2) && ((a71 >> 4) & 1)) f |= ENG_CPU_AVX_VNNI;
    /* AMX: TILE (edx bit 24), BF16 (22), INT8 (25), the OS saving XTILECFG and XTILEDATA (XCR0 bits 17,
     * 18), and Linux granting this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, since
     * 5.16): without the grant the first tile instruction kills the process. */
    int amx = ((d7 >> 24) & 1) && ((d7 >> 22) & 1) && ((d7 >> 25) & 1) && (xcr0 & 0x60000) == 0x60000;
#if defined(__linux__)
    if (amx && (f & ENG_CPU_AVX512_BF16) && (f & ENG_CPU_AVX512_VNNI) && syscall(SYS_arch_prctl, 0x1023, 18) == 0)
        f |= ENG_CPU_AMX;
#else
    (void)amx;
#endif
    return f;
}


#define MXCSR_DAZ (1u << 6)
#define MXCSR_FTZ (1u << 15)

void eng__cpu_fp_flush(int flush) {
    unsigned csr = _mm_getcsr();
    if (!flush) {
        if (csr & (MXCSR_DAZ | MXCSR_FTZ)) _mm_setcsr(csr & ~(unsigned)(MXCSR_DAZ | MXCSR_FTZ));
    } else if ((csr & (MXCSR_DAZ | MXCSR_FTZ)) != (MXCSR_DAZ | MXCSR_FTZ)) {
        _mm_setcsr(csr | MXCSR_DAZ | MXCSR_FTZ);
    }
}

int eng__cpu_fp_flushed(void) { return (_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ)) == (MXCSR_DAZ | MXCSR_FTZ); }

/* OpenBLAS's x86-64 kernel sets by the widest vectors they use. A name not listed is taken as
 * older than AVX2 (Prescott, Core2, Nehalem, Sandybridge, Barcelona, Bulldozer, Atom, ...). */
static int core_level(const char *core) {
    static const char *avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *avx2[] = {"Haswell", "Zen"};
    for (size_t i = 0; i < sizeof avx512 / sizeof avx512[0]; i++)
        if (!strcasecmp(core, avx512[i])) return 2;
    for (size_t i = 0; i < sizeof avx2 / sizeof avx2[0]; i++)
        if (!strcasecmp(core, avx2[i])) return 1;
    return 0;
}

const char *eng__blas_core_pick(const char *core, unsigned f) {
    int level = core ? core_level(core) : 0;
    if ((f & ENG_CPU_AVX512) && level < 2) return (f & ENG_CPU_AVX512_BF16) ? "Cooperlake" : "SkylakeX";
    if ((f & ENG_CPU_AVX2) && level < 1) return "Haswell";
    return NULL;
}
