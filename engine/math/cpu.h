/* cpu.h - what this CPU can run, detected once, the level cap, and the floating-point mode of
 * engine threads.
 *
 * Every kernel exists once per level of the target architecture in every build (math/x86/ or
 * math/arm/, each file compiled with its own -march; math/kern.h fills the table that picks among
 * them). This file (with the architecture's cpu_x86.c or cpu_arm.c) is the one place that asks the
 * CPU; the table reads its answer. A level cap (ADAPTERD_CPU_LEVEL, `--cpu-level`) lowers
 * what counts as present, so tests and benchmarks run every path a machine has. */
#ifndef ADAPTERD_ENGINE_MATH_CPU_H
#define ADAPTERD_ENGINE_MATH_CPU_H

#include <stddef.h>

/* Feature bits, per architecture: the same positions name x86-64's features in an x86-64 build and
 * ARM64's in an aarch64 build (one build is for one architecture); each architecture's files use
 * only their own names. */

/* x86-64. Each bit is set only when all that its kernel files are compiled for is there (the table
 * in x86/cpu_x86.c): ENG_CPU_AVX2 is all of x86-64-v3, ENG_CPU_AVX512 all of x86-64-v4, with the OS
 * saving the ymm (zmm and mask) registers. */
#define ENG_CPU_AVX2 (1u << 0)        /* x86-64-v3: AVX2, FMA3, BMI1/2, F16C, LZCNT, MOVBE (and v2), ymm state */
#define ENG_CPU_AVX512 (1u << 1)      /* x86-64-v4: AVX-512 F/BW/CD/DQ/VL and v3, zmm state enabled by the OS */
#define ENG_CPU_AVX512_BF16 (1u << 2) /* vdpbf16ps, vcvtne2ps2bf16 (implies ENG_CPU_AVX512 here) */
#define ENG_CPU_AVX512_VNNI (1u << 3) /* vpdpbusd on zmm (implies ENG_CPU_AVX512 here) */
#define ENG_CPU_AVX_VNNI (1u << 4)    /* vpdpbusd on ymm with the VEX encoding (implies ENG_CPU_AVX2) */
#define ENG_CPU_AMX (1u << 5)         /* AMX-TILE + AMX-BF16 + AMX-INT8, tile state enabled and granted by Linux
                                       * (implies ENG_CPU_AVX512_BF16 and ENG_CPU_AVX512_VNNI here) */

/* ARM64 (aarch64; read from getauxval(AT_HWCAP / AT_HWCAP2), arm/cpu_arm.c). Advanced SIMD (NEON)
 * is part of ARMv8-A, so every aarch64 CPU has ENG_CPU_NEON; the rest are ARMv8.2+ extensions. */
#define ENG_CPU_NEON (1u << 0)    /* Advanced SIMD: 32 registers of 128 bits (4 floats) */
#define ENG_CPU_DOTPROD (1u << 1) /* sdot / udot: 4 int8 products into each int32 lane (Neoverse N1, Graviton 2);
                                   * with ARMv8.2-A's CRC32, LSE and RDM, which its files may use */
#define ENG_CPU_I8MM (1u << 2)    /* smmla: a 2x8 by 8x2 int8 matrix product per instruction (Neoverse V1, Graviton 3) */
#define ENG_CPU_BF16 (1u << 3)    /* bfdot / bfmmla: bfloat16 products into float32 (Neoverse V1, Graviton 3);
                                   * only with I8MM too, its files being built with +i8mm */

/* The features detected (CPUID and XGETBV, on first call) and not masked by eng__cpu_restrict. */
unsigned eng__cpu_features(void);

/* Nonzero when every feature bit in f is available. */
int eng__cpu_has(unsigned f);

/* Keeps only the features in mask from now on (ENG_CPU_ALL restores the detected set, within the
 * ADAPTERD_CPU_LEVEL cap, which nothing raises), so that tests and benchmarks can run the portable
 * and intermediate paths on a CPU that has more.
 * Not synchronised with running products: call it between them. */
#define ENG_CPU_ALL (~0u)
void eng__cpu_restrict(unsigned mask);

/* Levels, as a cap: each names a feature set; the features in use are the detected ones within it.
 * x86-64:
 *   baseline     x86-64 (SSE2): the portable C kernels
 *   avx2         x86-64-v3: AVX2 + FMA (AMD Zen 1-3, Intel Haswell to Alder Lake's P cores' AVX2)
 *   avx_vnni     avx2 + AVX-VNNI (vpdpbusd on ymm: Alder Lake and later, Zen 5)
 *   avx512       x86-64-v4: AVX-512 F/BW/DQ/VL (Skylake-X)
 *   avx512_vnni  avx512 + VNNI (Cascade Lake, Ice Lake)
 *   avx512_bf16  avx512_vnni + BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and later)
 *   amx          avx512_bf16 + AMX tiles for bf16 and int8 (Sapphire Rapids and later)
 * ARM64:
 *   baseline     the portable C kernels (as the compiler vectorizes them for ARMv8-A)
 *   neon         ARMv8-A Advanced SIMD: fp32 and bf16 (widened) kernels, element-wise (Cortex-A72, Graviton 1)
 *   dotprod      neon + sdot for int8 (Neoverse N1: Graviton 2, Ampere Altra)
 *   i8mm         dotprod + smmla for int8 (Neoverse V1 / N2: Graviton 3 and 4, Cobalt 100, Axion)
 *   bf16         i8mm + bfmmla for bf16 (the same cores: ARMv8.6-A makes both mandatory)
 * Both:
 *   native       everything detected (the default)
 * The cap starts from the environment variable ADAPTERD_CPU_LEVEL when it names a level (read on
 * first detection). eng__cpu_level_mask: the level's features, or -1 for an unknown name. */
#define ENG_CPU_LEVEL_ENV "ADAPTERD_CPU_LEVEL"
long long eng__cpu_level_mask(const char *name);

/* The i-th level name of this architecture, lowest first ("baseline" is 0); NULL past the last. */
const char *eng__cpu_level_name(size_t i);

/* The highest level name whose features are all in f ("baseline" at least). Static string. */
const char *eng__cpu_level_of(unsigned f);

/* The features the CPU and OS offer, before any cap. */
unsigned eng__cpu_detected(void);

/* Checks a level name against this CPU: 0 when it names a level whose features the CPU has; else
 * -1 with a sentence in msg (n bytes): an unknown name (the known ones listed), or the features
 * the CPU lacks. name NULL checks ADAPTERD_CPU_LEVEL (0 when unset). */
int eng__cpu_level_check(const char *name, char *msg, int n);

/* Caps the features at a level, in place of ADAPTERD_CPU_LEVEL's cap (a level above the CPU's keeps
 * the CPU's features: eng__cpu_level_check first); -1 for an unknown name. */
int eng__cpu_set_level(const char *name);

/* Writes the feature names ("avx2 avx512 avx512_bf16 ...", or "none") into buf (n bytes). */
void eng__cpu_describe(unsigned features, char *buf, int n);

/* Sets flush-to-zero and denormals-are-zero in the calling thread's MXCSR (x86; FPCR.FZ on ARM64):
 * subnormal floats cost 10-100x per operation on x86 (and on many ARM cores) and carry nothing a
 * network's output depends on. Cheap when already set (one read); a no-op elsewhere. */
void eng__cpu_flush_denormals(void);

/* For benchmarks that measure what flushing is worth: with keep set, eng__cpu_flush_denormals clears
 * FTZ and DAZ instead (threads apply it at their next call). Process-wide; the product never sets it. */
void eng__cpu_keep_denormals(int keep);

/* Nonzero when the calling thread flushes denormals (both FTZ and DAZ set). */
int eng__cpu_denormals_flushed(void);

/* The OpenBLAS core that suits a CPU with the given features when OpenBLAS chose `core`, or NULL
 * when its choice is fine (always on ARM64, where Debian's OpenBLAS picks by the CPU's part number): a core without AVX2 kernels (Prescott, Nehalem, Sandybridge, ...) on an
 * AVX2 CPU gives "Haswell"; anything below AVX-512 on an AVX-512 CPU gives "Cooperlake" when
 * bf16 is there (its sbgemm) or "SkylakeX". Pure, for eng_blas_core_better and its test. */
const char *eng__blas_core_pick(const char *core, unsigned features);

#endif
