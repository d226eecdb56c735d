/* cpu.h - what this CPU can run, detected once, and the floating-point mode of engine threads.
 *
 * Kernels that need an instruction set beyond the build's baseline are compiled with per-function
 * target attributes (so they exist even in a portable -DADAPTERD_NATIVE=OFF build) and run only
 * where eng_cpu_has() says the CPU and the operating system support them; everything else runs
 * portable C. This file is the one place that asks the CPU. */
#ifndef ADAPTERD_ENGINE_MATH_CPU_H
#define ADAPTERD_ENGINE_MATH_CPU_H

/* Feature bits. ENG_CPU_AVX512 is the set the engine's AVX-512 kernels assume together: F, BW, DQ
 * and VL, with the OS saving the zmm and mask registers. */
#define ENG_CPU_AVX2 (1u << 0)        /* AVX2 and FMA3, ymm state enabled by the OS */
#define ENG_CPU_AVX512 (1u << 1)      /* AVX-512 F/BW/DQ/VL, zmm state enabled by the OS */
#define ENG_CPU_AVX512_BF16 (1u << 2) /* vdpbf16ps, vcvtne2ps2bf16 (implies ENG_CPU_AVX512 here) */
#define ENG_CPU_AVX512_VNNI (1u << 3) /* vpdpbusd on zmm (implies ENG_CPU_AVX512 here) */
#define ENG_CPU_AVX_VNNI (1u << 4)    /* vpdpbusd on ymm with the VEX encoding (implies ENG_CPU_AVX2) */

/* The features detected (CPUID and XGETBV, on first call) and not masked by eng_cpu_restrict. */
unsigned eng_cpu_features(void);

/* Nonzero when every feature bit in f is available. */
int eng_cpu_has(unsigned f);

/* Keeps only the features in mask from now on (ENG_CPU_ALL restores the detected set), so that
 * tests and benchmarks can run the portable and intermediate paths on a CPU that has more.
 * Not synchronised with running products: call it between them. */
#define ENG_CPU_ALL (~0u)
void eng_cpu_restrict(unsigned mask);

/* Writes the feature names ("avx2 avx512 avx512_bf16 ...", or "none") into buf (n bytes). */
void eng_cpu_describe(unsigned features, char *buf, int n);

/* Sets flush-to-zero and denormals-are-zero in the calling thread's MXCSR: subnormal floats cost
 * 10-100x per operation on x86 and carry nothing a network's output depends on. Cheap when
 * already set (one read); a no-op on other architectures. */
void eng_cpu_flush_denormals(void);

/* For benchmarks that measure what flushing is worth: with keep set, eng_cpu_flush_denormals clears
 * FTZ and DAZ instead (threads apply it at their next call). Process-wide; the product never sets it. */
void eng_cpu_keep_denormals(int keep);

/* Nonzero when the calling thread flushes denormals (both FTZ and DAZ set). */
int eng_cpu_denormals_flushed(void);

/* The OpenBLAS core that suits a CPU with the given features when OpenBLAS chose `core`, or NULL
 * when its choice is fine: a core without AVX2 kernels (Prescott, Nehalem, Sandybridge, ...) on an
 * AVX2 CPU gives "Haswell"; anything below AVX-512 on an AVX-512 CPU gives "Cooperlake" when
 * bf16 is there (its sbgemm) or "SkylakeX". Pure, for eng_blas_core_better and its test. */
const char *eng__blas_core_pick(const char *core, unsigned features);

#endif
