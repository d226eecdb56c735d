/* i8mm_int8.c - the int8 product's kernel for ARM64 CPUs with the int8 matrix-multiply extension
 * (gemm_lowp.h, kern.h): the drivers of math/lp_impl.h with smmla (arm/mmla_kernel.h), a 2 x 8 by
 * 8 x 2 signed byte product into a 2 x 2 block of int32 per instruction, twice sdot's products
 * (Neoverse V1 / N2 and later: Graviton 3 and 4). The activations are signed q (neon_lowp.c's
 * rows), so there is no offset to remove. */
#include "math/arm/neon_common.h"

#define LP_INT8 1
#define LP_PR 4
#define LP_PW 24
#define LP_COMP 0 /* signed q: no offset */
#define LP_TILE eng__int8_i8mm_tile
#include "math/lp_impl.h"

#define LP_MMLA(acc, x, b) vmmlaq_s32(acc, vreinterpretq_s8_u8(x), vreinterpretq_s8_u8(b))
#include "math/arm/mmla_kernel.h"
