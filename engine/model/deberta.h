/* deberta.h - what ELECTRA and DeBERTa-v2/v3 add to the BERT-shaped encoder (model/deberta.c).
 *
 * ELECTRA only narrows the embeddings (embedding_size, projected to hidden); DeBERTa-v2 also
 * replaces the attention scores with disentangled ones (content-to-position and position-to-
 * content terms over log-bucketed relative positions). model.c parses their configs and loads their
 * extra tensors through here; encoder.c calls the attention below instead of its own for DeBERTa. */
#ifndef ADAPTERD_ENGINE_MODEL_DEBERTA_H
#define ADAPTERD_ENGINE_MODEL_DEBERTA_H

#include <jansson.h>
#include <stddef.h>

#include "math/state.h"
#include "core/tensor.h"
#include "engine/model.h"

struct eng_task_layer;

/* Fills c from the config.json object of model_type "electra" or "deberta-v2" (path names it in
 * messages) and sets *act to its activation's name (borrowed from root). Returns 0, ENG_FORMAT or
 * ENG_UNSUPPORTED (features not modelled: DeBERTa's convolution layer, absolute-only attention). */
int eng__config_electra_deberta(json_t *root, const char *mt, const char *path, eng_config *c, const char **act,
                                eng_err *err);

/* DeBERTa's relative-table row for the distance delta = i - j (query i, key j):
 * clamp(bucket(delta) + span, 0, 2 span - 1), bucket as make_log_bucket_position (float32). */
int eng__deberta_rel_index(const eng_config *c, int delta);

/* Floats each worker's score buffer needs for DeBERTa attention over segments of up to max_len. */
size_t eng__deberta_scores_floats(const eng_config *c, int max_len);

/* DeBERTa attention of layer l: ctx (rows, H) from qkv (rows, 3H), segment by segment and head by
 * head on the state's pool, with seg_ad[s] (or NULL) the adapters of segment s (their LoRA / (IA)^3
 * on query and key also change the projected relative table, as the module they wrap does).
 * The worker buffers must hold eng__deberta_scores_floats. Returns 0, ENG_NO_MEMORY, or
 * ENG_UNSUPPORTED for prefix tuning (which has no relative position). */
int eng__deberta_attention(const eng_model *m, eng_state *st, int l, const float *qkv, float *ctx, const eng_seg *segs,
                           int n_segs, const struct eng_task_layer *const *seg_ad, eng_err *err);

#endif
