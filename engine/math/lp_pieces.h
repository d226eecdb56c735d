/* lp_pieces.h - the walk of a low-precision tile (gemm_lowp.h) in pieces of up to 4 rows, shared by
 * the vector kernels of every architecture (x86/avx2_common.h, arm/neon_common.h): pieces small enough
 * for 16 ymm or 32 NEON registers. No intrinsics here. */
#ifndef ADAPTERD_ENGINE_MATH_LP_PIECES_H
#define ADAPTERD_ENGINE_MATH_LP_PIECES_H

#include "math/kern.h"

/* A piece: rows [0, mr) (mr <= 4) of t, re-based at its first row, times features [f0, f0 + w). */
typedef void (*lp_piece_fn)(int mr, const eng__lp_tile *t, int f0, int w);

/* Runs a tile (up to 8 rows x 48 features) as pieces of up to 4 rows x width features: for each
 * block of features, its row halves back to back, so the second reads that block of the panel from
 * L1. Each piece gets the tile re-based at its first row (activations, output, residual, row scales). */
static inline __attribute__((always_inline)) void lp_pieces(const eng__lp_tile *t, int width, lp_piece_fn piece) {
    for (int f0 = 0; f0 < t->w; f0 += width) {
        int w = t->w - f0 < width ? t->w - f0 : width;
        for (int r = 0; r < t->mr; r += 4) {
            eng__lp_tile p = *t;
            p.mr = t->mr - r < 4 ? t->mr - r : 4;
            p.a = t->a + (size_t)r * t->lda;
            p.c = t->c + (size_t)r * t->ldc;
            p.res = t->res ? t->res + (size_t)r * t->ldr : NULL;
            p.a_scale = t->a_scale ? t->a_scale + r : NULL;
            piece(p.mr, &p, f0, w);
        }
    }
}

/* The body of a piece function: mr as a constant in each case, so the piece's loops unroll. */
#define LP_PIECE_CASES(piece, t, f0, w)         \
    case 4: piece(4, t, f0, w); break;          \
    case 3: piece(3, t, f0, w); break;          \
    case 2: piece(2, t, f0, w); break;          \
    case 1: piece(1, t, f0, w); break;          \
    default: break;

#endif
