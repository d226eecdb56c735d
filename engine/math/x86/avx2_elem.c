/* avx2_elem.c - the element-wise kernels (elem_impl.h) compiled for x86-64-v3: the compiler's
 * vectorization of the same loops with 8-float ymm registers and FMA. */
#define ELEM_SUFFIX avx2
#include "math/elem_impl.h"
