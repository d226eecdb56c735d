/* kern_arm.c - ARM64's fallback chain of the kernel table (kern.h, cpu_arch.h): each feature the
 * CPU has replaces the families it speeds up, lowest level first.
 *
 *   family        baseline   neon                       then, where the CPU has it
 *   fp32 packed   c          neon (4 x 24 lane FMAs)
 *   bf16          c          neon (widened, fp32 FMA)   bf16 (bfmmla)
 *   int8          c          c                          dotprod (sdot), i8mm (smmla)
 *   element-wise  c          neon (elem_impl.h)
 * The int8 kernels of ARM64 multiply signed by signed bytes (sdot, smmla), so their activations are
 * stored as q itself, with no +128 offset to remove: the integer sums are the x86 kernels' exactly. */
#include "math/cpu.h"
#include "math/cpu_arch.h"

void eng__kern_fill_arch(eng_kernels *k, unsigned f) {
    if (f & ENG_CPU_NEON) {
        k->f32 = k->bf16 = k->elem = "neon";
        k->f32_tile = eng__f32_tile_neon;
        k->bf16_rows = eng__bf16_c_rows, k->bf16_tile = eng__bf16_neon_tile, k->bf16_act_bytes = 2;
        k->act_apply = eng__act_apply_neon, k->layernorm = eng__layernorm_neon, k->softmax_rows = eng__softmax_rows_neon;
        k->exp = eng__exp_neon, k->add = eng__add_neon, k->sparse_block = eng__sparse_block_neon;
    }
    if ((f & ENG_CPU_NEON) && (f & ENG_CPU_DOTPROD)) {
        k->int8 = "dotprod";
        k->int8_rows = eng__int8_neon_rows, k->int8_tile = eng__int8_dotprod_tile, k->int8_act_bytes = 1;
    }
    if ((f & ENG_CPU_NEON) && (f & ENG_CPU_I8MM)) {
        k->int8 = "i8mm";
        k->int8_rows = eng__int8_neon_rows, k->int8_tile = eng__int8_i8mm_tile, k->int8_act_bytes = 1;
    }
    if ((f & ENG_CPU_NEON) && (f & ENG_CPU_BF16)) {
        k->bf16 = "bf16";
        k->bf16_rows = eng__bf16_c_rows, k->bf16_tile = eng__bf16_bfmmla_tile, k->bf16_act_bytes = 2;
        k->bf16_native = 1;
    }
}
