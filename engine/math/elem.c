/* elem.c - the baseline (portable C) build of the element-wise kernels (elem_impl.h, kern.h). */
#define ELEM_SUFFIX c
#include "math/elem_impl.h"
