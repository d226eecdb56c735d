/* cpu_arm.h - the raw words ARM64's detection reads (AT_HWCAP, AT_HWCAP2) and the pure function that
 * turns them into the engine's feature bits (engine-internal; arm/cpu_arm.c).
 *
 * Kept apart from getauxval so that tests can hand it faked words: a core with BF16 but no I8MM
 * must not get the bfmmla kernel, whose file is compiled with +i8mm too. */
#ifndef ADAPTERD_ENGINE_MATH_ARM_CPU_ARM_H
#define ADAPTERD_ENGINE_MATH_ARM_CPU_ARM_H

#include <stddef.h>

enum { ENG__ARM_HWCAP, ENG__ARM_HWCAP2, ENG__ARM_N_WORDS };

typedef struct {
    unsigned long long w[ENG__ARM_N_WORDS];
} eng__cpu_arm_words;

/* One feature a level needs: a bit of AT_HWCAP or AT_HWCAP2 and its name in /proc/cpuinfo's Features. */
typedef struct {
    unsigned char word, bit;
    const char *name, *cpuinfo;
} eng__arm_need;
extern const eng__arm_need eng__arm_needs[];
extern const size_t eng__arm_n_needs;

/* Per engine feature bit (ENG_CPU_NEON, ...): the eng__arm_needs indices (bit i = need i) that the
 * kernel files of that feature are compiled for (their -march). */
typedef struct {
    unsigned feature;
    unsigned long long needs;
} eng__arm_feature_needs;
extern const eng__arm_feature_needs eng__arm_features[];
extern const size_t eng__arm_n_features;

/* The engine's feature bits whose every need is set in w. Pure. */
unsigned eng__cpu_arm_features(const eng__cpu_arm_words *w);

/* Writes the names of the needs of the features f that w lacks, space-separated, into buf (n bytes;
 * "" when none). Pure. */
void eng__cpu_arm_lacking(const eng__cpu_arm_words *w, unsigned f, char *buf, int n);

#endif
