/* avx512_elem.c - the element-wise kernels (elem_impl.h) compiled for x86-64-v4 with 512-bit
 * vectors preferred (GCC otherwise vectorizes with ymm even where zmm exist; GELU, softmax and
 * LayerNorm run twice as wide with zmm). */
#define ELEM_SUFFIX avx512
#include "math/elem_impl.h"
