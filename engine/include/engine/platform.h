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

#endif
