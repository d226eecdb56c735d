/* bf16_mmla.c - the bf16 product's kernel for ARM64 CPUs with the BF16 extension (gemm_lowp.h,
 * kern.h): the drivers of math/lp_impl.h with bfmmla (arm/mmla_kernel.h), a 2 x 4 by 4 x 2 bfloat16
 * product into a 2 x 2 block of float32 per instruction (Neoverse V1 / N2 and later: Graviton 3
 * and 4), on bf16 rows (eng__bf16_c_rows).
 * Arithmetic: the products and their sums are the instruction's (Arm's BFMMLA, like BFDOT, rounds
 * its partial sums to odd and flushes subnormals), not an fp32 FMA chain: within the same bound of
 * the double reference (tests/engine/math/test_gemm_lowp.c), but not the other kernels' bits. */
#include "math/arm/neon_common.h"

#define LP_INT8 0
#define LP_PR 4
#define LP_PW 24
#define LP_TILE eng__bf16_bfmmla_tile
#include "math/lp_impl.h"

#define LP_MMLA(acc, x, b) vbfmmlaq_f32(acc, vreinterpretq_bf16_u8(x), vreinterpretq_bf16_u8(b))
#include "math/arm/mmla_kernel.h"
