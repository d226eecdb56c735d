/* cpu_x86.c - x86-64's part of CPU detection (cpu_arch.h): CPUID + XGETBV, the levels, MXCSR's
 * flush-to-zero, and the OpenBLAS core a CPU deserves.
 *
 * A feature counts only when every instruction set its kernel files are compiled for is there (the
 * table below) and the OS saves its registers (XGETBV): a hypervisor can expose AVX-512 in CPUID and
 * still not enable the zmm state, or AVX2 without BMI2. Detection reads the raw words; the choice is
 * the pure eng__cpu_x86_features (x86/cpu_x86.h), tested with faked words. */
#include "math/cpu.h"
#include "math/cpu_arch.h"
#include "math/x86/cpu_x86.h"

#include <cpuid.h>
#include <stdio.h>
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

const char eng__cpu_lowp_need[] = "at least x86-64-v3 (AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE)";

/* What each kernel file is compiled for (engine/CMakeLists.txt: X86_V3, X86_V4 and the extra -m
 * flags per file name), as CPUID / XCR0 bits: a level counts only when all of them are there, since
 * the compiler may use any of them anywhere in the file (GCC's x86-64-v3 code uses BMI2's shrx and
 * shlx, for one). Keep this table and that CMake list together; tests/engine/math/check_kernel_isa.sh
 * checks the objects' instructions against the levels. The last column is the /proc/cpuinfo flag the
 * test compares with (LZCNT's, abm, is missing on some virtual machines whose CPUID has it:
 * Firecracker on EPYC). The x86-64 psABI's level definitions: */
#define N(w, b, name, cpuinfo) {ENG__X86_##w, b, name, cpuinfo}
const eng__x86_need eng__x86_needs[] = {
    /* x86-64-v2 */
    N(C1, 13, "CMPXCHG16B", "cx16"), N(C81, 0, "LAHF-SAHF", "lahf_lm"), N(C1, 23, "POPCNT", "popcnt"),
    N(C1, 0, "SSE3", "pni"), N(C1, 19, "SSE4_1", "sse4_1"), N(C1, 20, "SSE4_2", "sse4_2"), N(C1, 9, "SSSE3", "ssse3"),
    /* x86-64-v3 (7..17); XCR0 bits 1 and 2: the OS saves the xmm and ymm state */
    N(C1, 28, "AVX", "avx"), N(B7, 5, "AVX2", "avx2"), N(B7, 3, "BMI1", "bmi1"), N(B7, 8, "BMI2", "bmi2"),
    N(C1, 29, "F16C", "f16c"), N(C1, 12, "FMA", "fma"), N(C81, 5, "LZCNT", NULL), N(C1, 22, "MOVBE", "movbe"),
    N(C1, 27, "OSXSAVE", NULL), N(XCR0, 1, "XCR0.SSE", NULL), N(XCR0, 2, "XCR0.AVX", NULL),
    /* x86-64-v4 (18..25); XCR0 bits 5-7: opmask, the upper halves of zmm0-15, zmm16-31 */
    N(B7, 16, "AVX512F", "avx512f"), N(B7, 30, "AVX512BW", "avx512bw"), N(B7, 28, "AVX512CD", "avx512cd"),
    N(B7, 17, "AVX512DQ", "avx512dq"), N(B7, 31, "AVX512VL", "avx512vl"), N(XCR0, 5, "XCR0.OPMASK", NULL),
    N(XCR0, 6, "XCR0.ZMM_HI256", NULL), N(XCR0, 7, "XCR0.HI16_ZMM", NULL),
    /* the files' extra flags: -mavxvnni, -mavx512vnni, -mavx512bf16, -mamx-tile -mamx-bf16 -mamx-int8 (26..) */
    N(A71, 4, "AVX-VNNI", "avx_vnni"), N(C7, 11, "AVX512_VNNI", "avx512_vnni"), N(A71, 5, "AVX512_BF16", "avx512_bf16"),
    N(D7, 24, "AMX-TILE", "amx_tile"), N(D7, 22, "AMX-BF16", "amx_bf16"), N(D7, 25, "AMX-INT8", "amx_int8"),
    N(XCR0, 17, "XCR0.XTILECFG", NULL), N(XCR0, 18, "XCR0.XTILEDATA", NULL), N(GRANT, 0, "AMX-GRANT", NULL),
};
#undef N
const size_t eng__x86_n_needs = sizeof eng__x86_needs / sizeof eng__x86_needs[0];
_Static_assert(sizeof eng__x86_needs / sizeof eng__x86_needs[0] == 35, "NEED_* below count the rows above");

#define NEEDS(from, to) (((1ull << ((to) - (from) + 1)) - 1) << (from)) /* needs from..to, inclusive */
#define NEED_V2 NEEDS(0, 6)
#define NEED_V3 (NEED_V2 | NEEDS(7, 17))   /* -march=x86-64-v3 (X86_V3) */
#define NEED_V4 (NEED_V3 | NEEDS(18, 25))  /* -march=x86-64-v4 (X86_V4) */
#define NEED_AVX_VNNI (1ull << 26)
#define NEED_AVX512_VNNI (1ull << 27)
#define NEED_AVX512_BF16 (1ull << 28)
#define NEED_AMX NEEDS(29, 34)
/* One row per kernel file prefix of engine/CMakeLists.txt, its flags in the comment. */
const eng__x86_feature_needs eng__x86_features[] = {
    {ENG_CPU_AVX2, NEED_V3},                                     /* avx2_*: X86_V3 */
    {ENG_CPU_AVX_VNNI, NEED_V3 | NEED_AVX_VNNI},                 /* avx_vnni_*: X86_V3 -mavxvnni */
    {ENG_CPU_AVX512, NEED_V4},                                   /* avx512_*: X86_V4 */
    {ENG_CPU_AVX512_VNNI, NEED_V4 | NEED_AVX512_VNNI},           /* avx512_vnni_*: X86_V4 -mavx512vnni */
    {ENG_CPU_AVX512_BF16, NEED_V4 | NEED_AVX512_BF16},           /* avx512_bf16_*: X86_V4 -mavx512bf16 */
    /* amx*: X86_V4 -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 -mamx-int8 */
    {ENG_CPU_AMX, NEED_V4 | NEED_AVX512_VNNI | NEED_AVX512_BF16 | NEED_AMX},
};
const size_t eng__x86_n_features = sizeof eng__x86_features / sizeof eng__x86_features[0];

unsigned eng__cpu_x86_features(const eng__cpu_x86_words *w) {
    unsigned long long have = 0;
    for (size_t i = 0; i < eng__x86_n_needs; i++)
        if ((w->w[eng__x86_needs[i].word] >> eng__x86_needs[i].bit) & 1) have |= 1ull << i;
    unsigned f = 0;
    for (size_t i = 0; i < eng__x86_n_features; i++)
        if ((have & eng__x86_features[i].needs) == eng__x86_features[i].needs) f |= eng__x86_features[i].feature;
    return f;
}

void eng__cpu_x86_lacking(const eng__cpu_x86_words *w, unsigned f, char *buf, int n) {
    if (n <= 0) return;
    buf[0] = '\0';
    unsigned long long need = 0;
    for (size_t i = 0; i < eng__x86_n_features; i++)
        if (f & eng__x86_features[i].feature) need |= eng__x86_features[i].needs;
    int len = 0;
    for (size_t i = 0; i < eng__x86_n_needs; i++) {
        if (!((need >> i) & 1) || ((w->w[eng__x86_needs[i].word] >> eng__x86_needs[i].bit) & 1)) continue;
        int k = snprintf(buf + len, (size_t)(n - len), "%s%s", len ? " " : "", eng__x86_needs[i].name);
        if (k < 0 || k >= n - len) { /* cut at the last whole name */
            buf[len] = '\0';
            return;
        }
        len += k;
    }
}

static eng__cpu_x86_words detected_words; /* eng__cpu_detect's, for eng__cpu_lacking */

void eng__cpu_lacking(unsigned f, char *buf, int n) { eng__cpu_x86_lacking(&detected_words, f, buf, n); }

static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

unsigned eng__cpu_detect(void) {
    eng__cpu_x86_words w = {{0}};
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) w.w[ENG__X86_C1] = c;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) { /* 0 when the CPU's highest leaf is below 7 */
        w.w[ENG__X86_B7] = b, w.w[ENG__X86_C7] = c, w.w[ENG__X86_D7] = d;
        if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) w.w[ENG__X86_A71] = a;
    }
    if (__get_cpuid(0x80000001u, &a, &b, &c, &d)) w.w[ENG__X86_C81] = c;
    if ((w.w[ENG__X86_C1] >> 27) & 1) w.w[ENG__X86_XCR0] = xgetbv0(); /* XGETBV faults without OSXSAVE */
    /* AMX: Linux (5.16 and later) must also grant this process the tile data state, or the first
     * tile instruction kills it. Asked only when everything else is there. */
    w.w[ENG__X86_GRANT] = 1;
    if (eng__cpu_x86_features(&w) & ENG_CPU_AMX) {
#if defined(__linux__)
        w.w[ENG__X86_GRANT] = syscall(SYS_arch_prctl, 0x1023, 18) == 0; /* ARCH_REQ_XCOMP_PERM, XTILEDATA */
#else
        w.w[ENG__X86_GRANT] = 0;
#endif
    }
    detected_words = w;
    return eng__cpu_x86_features(&w);
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
