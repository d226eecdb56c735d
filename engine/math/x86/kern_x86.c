/* kern_x86.c - x86-64's fallback chain of the kernel table (kern.h, cpu_arch.h): each feature the
 * CPU has replaces the families it speeds up, lowest level first. */
#include "math/cpu.h"
#include "math/cpu_arch.h"

void eng__kern_fill_arch(eng_kernels *k, unsigned f) {
    if (f & ENG_CPU_AVX2) {
        k->f32 = k->bf16 = k->int8 = k->elem = "avx2";
        k->f32_tile = eng__f32_tile_avx2;
        k->bf16_rows = eng__bf16_avx2_rows, k->bf16_tile = eng__bf16_avx2_tile, k->bf16_act_bytes = 4;
        k->int8_rows = eng__int8_avx2_rows, k->int8_tile = eng__int8_avx2_tile, k->int8_act_bytes = 2;
        k->act_apply = eng__act_apply_avx2, k->layernorm = eng__layernorm_avx2, k->softmax_rows = eng__softmax_rows_avx2;
        k->exp = eng__exp_avx2, k->add = eng__add_avx2, k->sparse_block = eng__sparse_block_avx2;
    }
    if (f & ENG_CPU_AVX_VNNI) {
        k->int8 = "avx_vnni";
        k->int8_rows = eng__int8_avx_vnni_rows, k->int8_tile = eng__int8_avx_vnni_tile, k->int8_act_bytes = 1;
    }
    if (f & ENG_CPU_AVX512) {
        k->f32 = k->elem = "avx512";
        k->f32_tile = eng__f32_tile_avx512;
        k->act_apply = eng__act_apply_avx512, k->layernorm = eng__layernorm_avx512;
        k->softmax_rows = eng__softmax_rows_avx512, k->exp = eng__exp_avx512, k->add = eng__add_avx512;
        k->sparse_block = eng__sparse_block_avx512;
    }
    if (f & ENG_CPU_AVX512_BF16) {
        k->bf16 = "avx512_bf16";
        k->bf16_rows = eng__bf16_avx512_rows, k->bf16_tile = eng__bf16_avx512_tile, k->bf16_act_bytes = 2;
        k->bf16_native = 1;
    }
    if (f & ENG_CPU_AVX512_VNNI) {
        k->int8 = "avx512_vnni";
        k->int8_rows = eng__int8_avx512_rows, k->int8_tile = eng__int8_avx512_tile, k->int8_act_bytes = 1;
    }
    if ((f & ENG_CPU_AMX) && (f & ENG_CPU_AVX512_BF16) && (f & ENG_CPU_AVX512_VNNI)) { /* AVX-512's row converters */
        k->bf16 = "amx_bf16", k->bf16_tile = eng__bf16_amx_tile, k->bf16_mr = 16;
        k->int8 = "amx_int8", k->int8_tile = eng__int8_amx_tile, k->int8_mr = 16;
    }
}
