/* amx.c - the bf16 and int8 products' kernels for CPUs with AMX (Intel Sapphire Rapids and later:
 * AMX-TILE, AMX-BF16, AMX-INT8; gemm_lowp.h, kern.h).
 *
 * AMX multiplies whole tiles: eight tile registers of up to 16 rows x 64 bytes, and one instruction
 * (tdpbf16ps, tdpbusd) adds a 16 x 32 bf16 (or 16 x 64 u8) block of activations times a 32 x 16
 * (64 x 16) block of weights into a 16 x 16 float32 (int32) tile: 16 times the products of one
 * vdpbf16ps / vpdpbusd on zmm. The packed panels need no new layout: AMX wants the weight tile's rows
 * as pairs (bf16) or quads (int8) of k for 16 features, which is what gemm_lowp.c packs (48 features x
 * 2 or 4 k per row, 192 bytes), so a weight tile is 16 panel rows, 64 bytes each, 192 bytes apart. The
 * converted activations (the AVX-512 converters' rows: bf16, or u8 = q + 128) are the A tiles as they
 * are, ldws bytes apart; gemm_lowp.c pads K to whole tiles (32 bf16 or 64 int8 k) with zeros.
 *
 * One call does up to 16 rows x 48 features: three accumulator tiles (16 x 16 each), one activation
 * tile and three weight tiles, 7 of the 8 registers; per 32 (64) k, one activation load, three weight
 * loads and three tile products. The accumulators are stored once and the epilogue of math/lp_impl.h
 * (bias, residual; int8: the offset compensation and both scales) runs on them with AVX-512.
 *
 * The tile configuration (rows and bytes per register) is per thread: set when a call needs another
 * row count than the thread's last call. The process asks Linux for the AMX state once
 * (arch_prctl(ARCH_REQ_XCOMP_PERM), cpu.c) before the features count as present. */
#include "math/x86/avx512_common.h"

#include "math/lp_impl.h" /* no LP_TILE: only the epilogues, the same as avx512_bf16.c's and avx512_vnni.c's */

#define NR ENG__LP_NR
#define ROWS 16 /* rows of one call (kern.h's bf16_mr / int8_mr) */

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles 0-2: accumulators (mr x 16 x 4 bytes), 3: activations (mr x 64 bytes), 4-6: weights (16 x 64). */
static void configure(int mr) {
    static __thread int configured; /* rows of this thread's configuration, 0 before the first */
    if (configured == mr) return;
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 3; t++) c.rows[t] = (uint8_t)mr, c.colsb[t] = 64;
    c.rows[3] = (uint8_t)mr, c.colsb[3] = 64;
    for (int t = 4; t < 7; t++) c.rows[t] = 16, c.colsb[t] = 64;
    /* GCC 12 does not see that ldtilecfg reads all 64 bytes and may drop the stores before it (it did
     * in bench_peak_x86.c: ldtilecfg then faulted on garbage rows): make them happen first */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
    configured = mr;
}

/* The tile's sums into acc (16 x 48, row stride 48): bf16 pairs (32 k) or int8 quads (64 k) per block;
 * either way a block is 16 panel rows of 4 bytes x 48 features. */
static inline __attribute__((always_inline)) void run(const eng__lp_tile *t, int int8, void *acc) {
    configure(t->mr);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    const uint8_t *B = t->b, *a = t->a;
    int blocks = t->kp / (int8 ? 64 : 32);
    for (int kb = 0; kb < blocks; kb++, a += 64, B += 16 * 4 * NR) {
        _tile_loadd(3, a, (long)t->lda);
        _tile_loadd(4, B, 4 * NR);
        _tile_loadd(5, B + 64, 4 * NR);
        _tile_loadd(6, B + 128, 4 * NR);
        if (int8) {
            _tile_dpbusd(0, 3, 4);
            _tile_dpbusd(1, 3, 5);
            _tile_dpbusd(2, 3, 6);
        } else {
            _tile_dpbf16ps(0, 3, 4);
            _tile_dpbf16ps(1, 3, 5);
            _tile_dpbf16ps(2, 3, 6);
        }
    }
    _tile_stored(0, acc, NR * 4);
    _tile_stored(1, (char *)acc + 64, NR * 4);
    _tile_stored(2, (char *)acc + 128, NR * 4);
}

void eng__bf16_amx_tile(const eng__lp_tile *t) {
    float acc[ROWS * NR] __attribute__((aligned(64)));
    run(t, 0, acc);
    for (int i = 0; i < t->mr; i++)
        for (int v = 0; v < 3; v++) lp_store_bf16(t, i, 16 * v, t->w - 16 * v, _mm512_load_ps(acc + i * NR + 16 * v));
}

void eng__int8_amx_tile(const eng__lp_tile *t) {
    int32_t acc[ROWS * NR] __attribute__((aligned(64)));
    run(t, 1, acc);
    for (int i = 0; i < t->mr; i++) {
        __m512 as = _mm512_set1_ps(t->a_scale[i]);
        for (int v = 0; v < 3; v++)
            lp_store_int8(t, i, 16 * v, t->w - 16 * v, _mm512_load_si512(acc + i * NR + 16 * v), as, 1);
    }
}
