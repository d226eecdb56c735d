/* state.h - one engine worker's mutable state (eng_state, public in engine/model.h), seen from inside.
 *
 * The struct is defined here, once, so that the encoder (model/encoder.c), the adapter math
 * (model/adapter.c), the heads and the planner all use the same scratch without calling into one
 * another: each of them depends on this file, none on the others for memory. state.c owns creation
 * and release; the encoder owns the row buffers' sizing (ensure_* in model/encoder.c).
 *
 * Nothing here is shared between workers: every field belongs to the one thread that runs a pass. */
#ifndef ADAPTERD_ENGINE_MATH_STATE_H
#define ADAPTERD_ENGINE_MATH_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "engine/model.h"
#include "math/pool.h"

/* Scratch slots of an eng_state; each grows independently and keeps its contents until the next
 * request for the same slot. */
typedef enum {
    ENG_SCRATCH_SEGMAP, /* segment -> adapter layer map */
    ENG_SCRATCH_LORA,   /* (rows, r) LoRA intermediate */
    ENG_SCRATCH_A,      /* (rows, H) adapter input */
    ENG_SCRATCH_R,      /* (rows, H) adapter residual */
    ENG_SCRATCH_D,      /* (rows, d) bottleneck activations */
    ENG_SCRATCH_U,      /* (rows, H) adapter output / LN input */
    ENG_SCRATCH_FUSE,   /* (N, rows, H) fusion children outputs */
    ENG_SCRATCH_Q,      /* (rows, 2H) fusion query and Q Wk */
    ENG_SCRATCH_GATES,  /* (n_segs, 2) prefix gate values */
    ENG_SCRATCH_W,      /* (2, d, H) sparse-stored adapter matrices expanded for the dense GEMM */
    ENG_SCRATCH_X0,     /* planner row blocks: the live streams of a layer, and the next re-pack */
    ENG_SCRATCH_X1,
    ENG_SCRATCH_X2,     /* late-split rows of the current layer */
    ENG_SCRATCH_POOLER_OUT, /* (1, H) pooler output of one stream, for a head on the pooler */
    ENG_SCRATCH_SLOTS
} eng_scratch_slot;

/* Fusion calibration probe (run/fusion_calibrate.c): while sums is set, every fusion site runs all
 * its children, whatever the task's pruning, and adds each child's attention weight, summed over
 * rows, into sums[layer * n_children + child] and the rows into rows[layer]. */
typedef struct {
    double *sums;   /* (L, n_children) or NULL when no calibration runs */
    double *rows;   /* (L) */
    int n_children;
} eng_probe;

struct eng_state {
    eng_pool *pool;
    int n_threads;
    size_t cap_rows;   /* rows the buffers below hold */
    float *qkv;        /* (cap_rows, 3H) */
    float *ctx;        /* (cap_rows, H) */
    float *h;          /* (cap_rows, H) */
    float *inter;      /* (cap_rows, I) */
    int32_t *pos;      /* (cap_rows) position ids */
    size_t cap_len;    /* floats each score buffer holds */
    float **scores;    /* per worker (cap_len) */
    eng_seg *segs;     /* (cap_segs) */
    size_t cap_segs;
    float *pooler_in;  /* (cap_pooler_in, pooler_in_h) pooler input rows */
    size_t cap_pooler_in;
    int pooler_in_h;
    int H, I;          /* widths the row buffers were sized for */
    float *scratch[ENG_SCRATCH_SLOTS]; /* adapter working memory */
    size_t scratch_cap[ENG_SCRATCH_SLOTS];
    void *lin_ws;      /* (lin_ws_cap bytes) low-precision activations of the backbone products */
    size_t lin_ws_cap;
    eng_probe probe;   /* fusion calibration; zero when none runs */
    int cur_layer;     /* layer eng__layer_forward is running (for the probe) */
};

/* The state's thread pool (borrowed, lives as long as st). */
eng_pool *eng__state_pool(eng_state *st);

/* Returns slot's buffer grown to n_floats (64-byte aligned), or NULL when memory runs out. */
float *eng__state_scratch(eng_state *st, eng_scratch_slot slot, size_t n_floats);

/* Frees the encoder's row buffers (qkv, ctx, h, inter, pos) and sets their capacity to 0. */
void eng__state_free_rows(eng_state *st);

#endif
