/* cpu_x86.h - the raw words x86-64's detection reads (CPUID leaves, XCR0, Linux's AMX grant) and the
 * pure function that turns them into the engine's feature bits (engine-internal; x86/cpu_x86.c).
 *
 * Kept apart from the CPUID instruction so that tests can hand it faked words: a hypervisor that
 * offers AVX2 without BMI2 must get the baseline kernels, not a SIGILL, and that machine is not in CI. */
#ifndef ADAPTERD_ENGINE_MATH_X86_CPU_X86_H
#define ADAPTERD_ENGINE_MATH_X86_CPU_X86_H

#include <stddef.h>

/* Which word a requirement reads. */
enum {
    ENG__X86_C1,    /* CPUID.1:ECX */
    ENG__X86_B7,    /* CPUID.(7,0):EBX */
    ENG__X86_C7,    /* CPUID.(7,0):ECX */
    ENG__X86_D7,    /* CPUID.(7,0):EDX */
    ENG__X86_A71,   /* CPUID.(7,1):EAX */
    ENG__X86_C81,   /* CPUID.80000001h:ECX */
    ENG__X86_XCR0,  /* XGETBV(0): the register state the OS saves (0 without OSXSAVE) */
    ENG__X86_GRANT, /* bit 0: Linux granted this process AMX's tile data (arch_prctl ARCH_REQ_XCOMP_PERM) */
    ENG__X86_N_WORDS
};

typedef struct {
    unsigned long long w[ENG__X86_N_WORDS];
} eng__cpu_x86_words;

/* One feature a level needs: a bit of a word, and its name in Linux's /proc/cpuinfo flags (NULL
 * when Linux does not list it: OS state bits and the grant, which Linux implies by listing the
 * feature at all). */
typedef struct {
    unsigned char word, bit;
    const char *name, *cpuinfo;
} eng__x86_need;
extern const eng__x86_need eng__x86_needs[];
extern const size_t eng__x86_n_needs;

/* Per engine feature bit (ENG_CPU_AVX2, ...): the set of eng__x86_needs indices (bit i = need i)
 * that the kernel files of that feature are compiled for. */
typedef struct {
    unsigned feature;
    unsigned long long needs;
} eng__x86_feature_needs;
extern const eng__x86_feature_needs eng__x86_features[];
extern const size_t eng__x86_n_features;

/* The engine's feature bits whose every need is set in w. Pure. */
unsigned eng__cpu_x86_features(const eng__cpu_x86_words *w);

/* Writes the names of the needs of the features f that w lacks, space-separated, into buf (n bytes;
 * "" when none). Pure. */
void eng__cpu_x86_lacking(const eng__cpu_x86_words *w, unsigned f, char *buf, int n);

#endif
