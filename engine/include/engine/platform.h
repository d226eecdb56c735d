/* platform.h - what this process's engine runs on, for version output and logs.
 *
 * OpenBLAS chooses its kernels (its "core": Haswell, SkylakeX, Cooperlake, ...) when the library
 * loads, from the OPENBLAS_CORETYPE environment variable or CPU detection. The engine respects an
 * explicit setting; `adapterd --blas-core NAME` sets the variable and re-executes itself before any
 * BLAS call (tools/adapterd). */
#ifndef ADAPTERD_ENGINE_PLATFORM_H
#define ADAPTERD_ENGINE_PLATFORM_H

/* Name of the OpenBLAS kernel set in use (e.g. "Cooperlake", "Haswell"). Static string. */
const char *eng_blas_core(void);

/* The OpenBLAS core this CPU should run when OpenBLAS's own choice is older than the CPU (a
 * generic Prescott-class core on an AVX2 or AVX-512 CPU it does not know), else NULL. Static
 * string; see engine/math/cpu.c for the rule. */
const char *eng_blas_core_better(void);

/* ---- the engine's own kernels (engine/math/kern.h) ----
 * Every build carries each kernel family for each x86 level; which one runs is chosen from the CPU
 * (CPUID + XGETBV) at first use, below a cap: the environment variable ADAPTERD_CPU_LEVEL (read
 * then) or eng_cpu_level_apply. Levels, lowest first: baseline (portable C), avx2 (x86-64-v3),
 * avx_vnni, avx512 (x86-64-v4), avx512_vnni, avx512_bf16; "native" means no cap. */

/* The level the engine's kernels run at now (the highest whose features are all in use). Static. */
const char *eng_cpu_level(void);

/* The CPU's own level, before any cap. Static string. */
const char *eng_cpu_level_detected(void);

/* The kernel family that runs precision ("fp32", "bf16" or "int8") now: "avx512", "avx512_bf16",
 * "avx512_vnni", "avx_vnni", "avx2" or "c" (portable); NULL for another name. Static string. */
const char *eng_kernel_family(const char *precision);

/* Caps the level (a level name, or "native"): 0, or -1 with a sentence in msg (n bytes) for an
 * unknown name or a level this CPU lacks (the cap is then unchanged). Call it before loading
 * models: packed weights do not depend on it, but a precision check made under one cap is not
 * repeated under another. */
int eng_cpu_level_apply(const char *name, char *msg, int n);

#endif
