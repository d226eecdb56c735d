/* neon_elem.c - the element-wise kernels (elem_impl.h) compiled for ARMv8-A: the compiler's
 * vectorization of the same loops with 4-float NEON registers and fused multiply-adds. */
#define ELEM_SUFFIX neon
#include "math/elem_impl.h"
