/* cpu.c - CPU feature detection (CPUID + XGETBV), the denormal mode of engine threads, and the
 * OpenBLAS core a CPU deserves.
 *
 * A feature counts only when the OS also saves its registers (XGETBV): a hypervisor can expose
 * AVX-512 in CPUID and still not enable the zmm state. Detection runs once (pthread_once); the
 * result is read with one relaxed atomic load, so kernels may ask at every call. */
#include "math/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <xmmintrin.h>
#define CPU_X86 1
#endif

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static unsigned detected;
static atomic_uint mask = ENG_CPU_ALL;
static unsigned env_cap = ENG_CPU_ALL; /* ADAPTERD_CPU_LEVEL's features: no restriction goes above it */

#define F_V3 ENG_CPU_AVX2
#define F_V4 (ENG_CPU_AVX2 | ENG_CPU_AVX512)
static const struct {
    const char *name;
    unsigned mask;
} levels[] = { /* lowest first; eng_cpu_level_of takes the last whose features are all there */
    {"baseline", 0},
    {"avx2", F_V3},
    {"avx_vnni", F_V3 | ENG_CPU_AVX_VNNI},
    {"avx512", F_V4},
    {"avx512_vnni", F_V4 | ENG_CPU_AVX512_VNNI},
    {"avx512_bf16", F_V4 | ENG_CPU_AVX512_VNNI | ENG_CPU_AVX512_BF16},
    {"amx", F_V4 | ENG_CPU_AVX512_VNNI | ENG_CPU_AVX512_BF16 | ENG_CPU_AMX},
};
#define N_LEVELS (sizeof levels / sizeof levels[0])

long long eng_cpu_level_mask(const char *name) {
    if (!name) return -1;
    if (!strcasecmp(name, "native")) return (long long)ENG_CPU_ALL;
    for (size_t i = 0; i < N_LEVELS; i++)
        if (!strcasecmp(name, levels[i].name)) return (long long)levels[i].mask;
    return -1;
}

const char *eng_cpu_level_of(unsigned f) {
    const char *best = levels[0].name;
    for (size_t i = 1; i < N_LEVELS; i++)
        if ((f & levels[i].mask) == levels[i].mask) best = levels[i].name;
    return best;
}

#if CPU_X86
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static void detect(void) {
#if CPU_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    if (!osxsave || !avx) return;
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
    detected = f;
#endif
    long long cap = eng_cpu_level_mask(getenv(ENG_CPU_LEVEL_ENV)); /* unknown names: eng_cpu_level_check says so */
    if (cap >= 0) env_cap = (unsigned)cap;
    atomic_store(&mask, env_cap);
}

unsigned eng_cpu_detected(void) {
    pthread_once(&detect_once, detect);
    return detected;
}

int eng_cpu_level_check(const char *name, char *msg, int n) {
    if (n > 0) msg[0] = '\0';
    if (!name) name = getenv(ENG_CPU_LEVEL_ENV);
    if (!name) return 0;
    long long m = eng_cpu_level_mask(name);
    if (m < 0) {
        int len = snprintf(msg, (size_t)(n > 0 ? n : 0), "unknown CPU level \"%s\" (known: native", name);
        for (size_t i = 0; i < N_LEVELS && len >= 0 && len < n; i++)
            len += snprintf(msg + len, (size_t)(n - len), ", %s", levels[i].name);
        if (len >= 0 && len < n) snprintf(msg + len, (size_t)(n - len), ")");
        return -1;
    }
    unsigned lack = (unsigned)m & ~eng_cpu_detected();
    if ((unsigned)m == ENG_CPU_ALL || !lack) return 0;
    char need[128], have[128];
    eng_cpu_describe(lack, need, sizeof need);
    eng_cpu_describe(eng_cpu_detected(), have, sizeof have);
    snprintf(msg, (size_t)(n > 0 ? n : 0), "CPU level %s needs %s, which this CPU lacks (it has: %s)", name, need, have);
    return -1;
}

int eng_cpu_set_level(const char *name) {
    long long m = eng_cpu_level_mask(name);
    if (m < 0) return -1;
    pthread_once(&detect_once, detect);
    env_cap = (unsigned)m; /* replaces the environment's cap: a flag wins over the variable */
    atomic_store(&mask, env_cap);
    return 0;
}

unsigned eng_cpu_features(void) {
    pthread_once(&detect_once, detect);
    return detected & atomic_load_explicit(&mask, memory_order_relaxed);
}

int eng_cpu_has(unsigned f) { return (eng_cpu_features() & f) == f; }

void eng_cpu_restrict(unsigned m) {
    pthread_once(&detect_once, detect); /* reads the environment's cap */
    atomic_store(&mask, m & env_cap);
}

void eng_cpu_describe(unsigned f, char *buf, int n) {
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{ENG_CPU_AVX2, "avx2"},
                 {ENG_CPU_AVX512, "avx512"},
                 {ENG_CPU_AVX512_BF16, "avx512_bf16"},
                 {ENG_CPU_AVX512_VNNI, "avx512_vnni"},
                 {ENG_CPU_AVX_VNNI, "avx_vnni"},
                 {ENG_CPU_AMX, "amx"}};
    if (n <= 0) return;
    buf[0] = '\0';
    int len = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(f & names[i].bit)) continue;
        int w = snprintf(buf + len, (size_t)(n - len), "%s%s", len ? " " : "", names[i].name);
        if (w < 0 || w >= n - len) return;
        len += w;
    }
    if (!len) snprintf(buf, (size_t)n, "none");
}

#define MXCSR_DAZ (1u << 6)
#define MXCSR_FTZ (1u << 15)

static atomic_int keep_denormals;

void eng_cpu_keep_denormals(int keep) { atomic_store(&keep_denormals, keep != 0); }

void eng_cpu_flush_denormals(void) {
#if CPU_X86
    unsigned csr = _mm_getcsr();
    if (atomic_load_explicit(&keep_denormals, memory_order_relaxed)) {
        if (csr & (MXCSR_DAZ | MXCSR_FTZ)) _mm_setcsr(csr & ~(unsigned)(MXCSR_DAZ | MXCSR_FTZ));
    } else if ((csr & (MXCSR_DAZ | MXCSR_FTZ)) != (MXCSR_DAZ | MXCSR_FTZ)) {
        _mm_setcsr(csr | MXCSR_DAZ | MXCSR_FTZ);
    }
#endif
}

int eng_cpu_denormals_flushed(void) {
#if CPU_X86
    return (_mm_getcsr() & (MXCSR_DAZ | MXCSR_FTZ)) == (MXCSR_DAZ | MXCSR_FTZ);
#else
    return 0;
#endif
}

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
