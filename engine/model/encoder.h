/* encoder.h - the building blocks of eng_encode (engine/model.h), for the multi-task planner.
 *
 * eng_encode is embed, every layer, pooler; run/planner.c calls the same steps itself so that it
 * can re-pack rows between layers and hand each layer the groups of rows its tasks act on. */
#ifndef ADAPTERD_ENGINE_MODEL_ENCODER_H
#define ADAPTERD_ENGINE_MODEL_ENCODER_H

#include <stdint.h>

#include "core/tensor.h"
#include "engine/model.h"

/* The building blocks of eng_encode, for the multi-task planner. x is (rows, H) packed rows;
 * segs say which rows form one attention sequence. */

/* A run of rows [row0, row0 + rows) that one task's adapters (or none, ad == NULL) act on in a layer.
 * Groups are sorted by row0, do not overlap, and every segment lies inside one group. */
struct eng_task_layer;
typedef struct {
    int32_t row0, rows;
    const struct eng_task_layer *ad;
} eng_group;

/* Embeds a batch into x (n_tokens, H). Validates ids; returns 0 or ENG_INVALID_ARGUMENT. */
int eng__embed(const eng_model *m, eng_state *st, const eng_batch *b, float *x, eng_err *err);
/* eng__embed with, per sequence s, seq_lora[s]'s update added to its word embeddings before the
 * LayerNorm (NULL entries, or seq_lora NULL: none). Also ENG_NO_MEMORY. */
struct eng_emb_lora;
int eng__embed_lora(const eng_model *m, eng_state *st, const eng_batch *b, const struct eng_emb_lora *const *seq_lora,
                   float *x, eng_err *err);

/* A task stream that splits off a trunk inside layer l: the trunk's rows [trunk_row0, +len) run
 * the layer up to the output site, and the task's output-site adapters (its only modules in this
 * layer) turn a copy into the stream's rows out[out_row0, +len). Saves the layer's attention and
 * FFN once per such task (AdapterHub's Parallel replicates there too). */
typedef struct {
    int32_t trunk_row0, len, out_row0;
    const struct eng_task_layer *ad;
} eng_late_split;

/* Runs layer l in place on x (rows, H), each group with its task's adapters for layer l (model/layer.h).
 * n_groups == 0 runs the plain backbone on every row. Late splits write their rows into late_out.
 * Returns 0 or ENG_NO_MEMORY. */
int eng__layer_forward(const eng_model *m, eng_state *st, int l, float *x, int rows, const eng_seg *segs,
                      int n_segs, const eng_group *groups, int n_groups, const eng_late_split *late, int n_late,
                      float *late_out, eng_err *err);

/* Pooler over the first row of each segment: out (n_segs, H). Models without a pooler copy the
 * first rows. Returns 0 or ENG_NO_MEMORY. */
int eng__pooler_forward(const eng_model *m, eng_state *st, const float *x, const eng_seg *segs, int n_segs,
                       float *out, eng_err *err);


#endif
