/* avx2_gemm.c - the float32 packed product's tile for x86-64-v3 (gemm_packed.c, kern.h): the driver of
 * math/f32_impl.h with its broadcast micro-kernel on ymm registers.
 *
 * AVX2 has 16 ymm registers of 8 floats, so the 8 x 48 tile of the AVX-512 kernel (24
 * accumulators of 16) is cut into pieces of 4 rows x 24 features: 12 accumulators, 3 panel loads
 * and 1 broadcast per k, 16 registers in all. Per k a piece does 12 FMAs for 7 loads (two FMA and
 * two or three loads per cycle on Zen 3 and Haswell-class cores: FMA-bound). The two row halves of
 * a tile run back to back over the same 24 columns, so that panel half (KC x 24 floats, 18 KB)
 * is read from L1 by the second. */
#include "math/x86/avx2_common.h"

#define F32_SUFFIX avx2
#define F32_PR 4  /* rows per piece */
#define F32_PW 24 /* features per piece: three ymm */
#include "math/f32_impl.h"
