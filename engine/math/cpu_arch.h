/* cpu_arch.h - between cpu.c / kern.c (shared) and the one file set of the architecture being built
 * (engine-internal): x86/cpu_x86.c + x86/kern_x86.c, arm/cpu_arm.c + arm/kern_arm.c, or
 * generic/cpu_generic.c elsewhere. engine/CMakeLists.txt compiles exactly one set, chosen by the
 * target processor, so the shared files hold no `#if defined(__x86_64__)`. */
#ifndef ADAPTERD_ENGINE_MATH_CPU_ARCH_H
#define ADAPTERD_ENGINE_MATH_CPU_ARCH_H

#include <stddef.h>

#include "math/kern.h"

/* The architecture's levels, lowest first; [0] is "baseline" with no features (the portable C
 * kernels). eng__cpu_level_of takes the last whose features are all there. */
typedef struct {
    const char *name;
    unsigned mask;
} eng__cpu_level;
extern const eng__cpu_level eng__cpu_levels[];
extern const size_t eng__cpu_n_levels;

/* The feature bits' names (eng__cpu_describe), in the order they are listed. */
typedef struct {
    unsigned bit;
    const char *name;
} eng__cpu_feature;
extern const eng__cpu_feature eng__cpu_feature_names[];
extern const size_t eng__cpu_n_feature_names;

/* What a low-precision product needs on this architecture, for the refusal below it (linear.c). */
extern const char eng__cpu_lowp_need[];

/* The features the CPU and OS offer (called once). */
unsigned eng__cpu_detect(void);

/* Writes the names of what the features f need and this CPU lacks ("BMI2 AVX512CD", as CPUID or
 * HWCAP name them) into buf (n bytes; "" when nothing is known to lack), so that a level refused on
 * a CPU that lists AVX2 says why. Called after eng__cpu_detect. */
void eng__cpu_lacking(unsigned f, char *buf, int n);

/* The calling thread's float mode: flush = 1 sets flush-to-zero (and denormals-are-zero where the
 * architecture separates them), 0 clears it; cheap when already so. eng__cpu_fp_flushed: set now. */
void eng__cpu_fp_flush(int flush);
int eng__cpu_fp_flushed(void);

/* Fills the kernel table above the portable defaults for the features f (kern.c's fill). */
void eng__kern_fill_arch(eng_kernels *k, unsigned f);

#endif
