/* adapter.h - the adapters' inference math (model/adapter.c), called by the encoder's layer forward.
 *
 * The encoder (model/encoder.c) decides where in a layer each module acts; these functions do the
 * arithmetic on packed rows, with the worker's scratch (math/state.h). They never call back into
 * the encoder. */
#ifndef ADAPTERD_ENGINE_MODEL_ADAPTER_H
#define ADAPTERD_ENGINE_MODEL_ADAPTER_H

#include "math/state.h"
#include "core/tensor.h"
#include "model/encoder.h"
#include "model/layer.h"

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
 * (n, H) is the sub-block input; segs (absolute rows) give the sequences for gating means. ln_g NULL:
 * original_ln_before adds x without a LayerNorm. hooked: AdapterHub's plugin-interface layers
 * (ModernBERT, model/modernbert.c), where original_ln_after is off and the model adds its own residual:
 * h receives the adapters' output alone. */
int eng__site_apply(eng_state *st, const eng_site *site, const eng_config *c, float *h, const float *x, int row0,
                    int n, const eng_seg *segs, int n_segs, const float *ln_g, const float *ln_b, int hooked,
                    eng_err *err);

/* Can a stream split off inside this layer (only output-site bottleneck modules act in it)? */
int eng__late_split_ok(const eng_task_layer *a);

/* LoRA and (IA)^3 of Linear lin on every group of rows (model/encoder.h's eng_group): y (rows, ldy) holds
 * x W^T + b, and gets each group's task's update. Returns 0 or ENG_NO_MEMORY. */
int eng__linear_adapters(eng_state *st, const eng_group *g, int n, eng_lin lin, const float *x, int ldx, float *y,
                         int ldy, const eng_seg *segs, int n_segs, eng_err *err);

#endif
