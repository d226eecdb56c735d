/* avx512_gemm.c - the float32 packed product's tile for x86-64-v4 (gemm_packed.c, kern.h): the driver
 * of math/f32_impl.h with its broadcast micro-kernel on zmm registers.
 *
 * One k step reads 48 contiguous floats of the panel (three zmm loads) and 8 activations, and does
 * 24 vector FMAs into 8 x 48 accumulators that stay in registers (24 of the 32 zmm registers): the
 * whole tile is one piece. */
#include "math/x86/avx512_common.h"

#define F32_SUFFIX avx512
#define F32_PR 8  /* the whole tile */
#define F32_PW 48
#include "math/f32_impl.h"
