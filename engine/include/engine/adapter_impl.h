/* adapter_impl.h - engine-internal glue between the layer forward (encoder.c) and the adapter math
 * (adapter.c). Not part of the engine's public API. */
#ifndef ADAPTERD_ENGINE_ADAPTER_IMPL_H
#define ADAPTERD_ENGINE_ADAPTER_IMPL_H

#include "engine/adapter.h"
#include "engine/model.h"

/* Scratch slots of an eng_state; each grows independently and keeps its contents until the next
 * request for the same slot. */
enum {
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
    ENG_SCRATCH_SLOTS
};

/* Returns slot's buffer grown to n_floats (64-byte aligned), or NULL when memory runs out. */
float *eng__state_scratch(eng_state *st, int slot, size_t n_floats);

/* Fusion calibration probe: while set, every fusion site adds each kept child's attention weight,
 * summed over rows, into sums[layer * n_children + child] and the rows into rows[layer]. */
void eng__state_set_probe(eng_state *st, double *sums, double *rows, int n_children);
void eng__state_probe(eng_state *st, double **sums, double **rows, int *n_children, int *layer);

/* Row-parallel LayerNorm on the state's pool. */
void eng__layernorm_rows(eng_state *st, float *x, int rows, int dim, const float *g, const float *b, float eps);

/* y (n, ldy) += scaling * (x A^T) B^T for the n rows starting at absolute row row0 (segs, in
 * absolute rows, give the sequences for gated LoRA). Returns 0 or ENG_NO_MEMORY. */
int eng__lora_add(eng_state *st, const eng_lora *lo, const float *x, int ldx, int n, float *y, int ldy, int row0,
                  const eng_seg *segs, int n_segs, eng_err *err);

/* Mean over the rows of one sequence of sigmoid(x_t . w + b); x (len, ldx). */
float eng__gate_mean(const float *x, int ldx, int len, int dim, const float *w, float b);

/* y (n, out; ldy) *= l, column-wise. */
void eng__ia3_scale(const eng_ia3 *ia, float *y, int ldy, int n);

/* Applies a bottleneck site (stack and/or fusion, then the last adapter's post step) to the n rows
 * starting at absolute row `row0`: h (n, H) holds the sub-layer output and receives the result; x
 * (n, H) is the sub-block input; segs (absolute rows) give the sequences for gating means. */
int eng__site_apply(eng_state *st, const eng_site *site, const eng_config *c, float *h, const float *x, int row0,
                    int n, const eng_seg *segs, int n_segs, const float *ln_g, const float *ln_b, eng_err *err);

/* Work of one layer (backbone products + attention) on a sequence of len rows, and of one task
 * layer's adapters on len rows, in GFLOP (budget.c; shared by the cost model and plan stats). */
double eng__layer_gflop(const eng_config *c, int len);
double eng__adapter_gflop(const eng_config *c, const eng_task_layer *a, int len);

/* Can a stream split off inside this layer (only output-site bottleneck modules act in it)? */
int eng__late_split_ok(const eng_task_layer *a);

/* Applies <fusion_dir>/fusion_pruning.json to t when it exists (adapter_load.c). */
int eng__fusion_apply_saved(eng_task *t, const char *fusion_dir, eng_err *err);

#endif
