/* modernbert.h - ModernBERT's layer and prediction head over packed rows (model/modernbert.c).
 *
 * Called by the encoder (model/encoder.c) for models of arch ENG_ARCH_MODERNBERT once it has sized
 * the state's row buffers; never the other way round. */
#ifndef ADAPTERD_ENGINE_MODEL_MODERNBERT_H
#define ADAPTERD_ENGINE_MODEL_MODERNBERT_H

#include "model/encoder.h"

/* Floats of attention scratch each worker needs for segments of at most max_len rows (a block of
 * query rows against the keys it sees: independent of the sequence length squared). */
size_t eng__modernbert_score_floats(const eng_config *c, int max_len);

/* Layer l on x (rows, H) in place, as eng__layer_forward (late splits included); the last layer also
 * applies final_norm, to late_out's rows too. The state's qkv, ctx, h, inter (rows, max(2I, H)), lin_ws
 * and score buffers must already hold `rows` rows and eng__modernbert_score_floats(c, longest segment).
 * Returns 0, ENG_NO_MEMORY, or ENG_UNSUPPORTED when a group carries prefix tuning, which ModernBERT has
 * no site for (the loaders refuse it first). */
int eng__modernbert_layer(const eng_model *m, eng_state *st, int l, float *x, int rows, const eng_seg *segs,
                          int n_segs, const eng_group *groups, int n_groups, const eng_late_split *late, int n_late,
                          float *late_out, eng_err *err);

/* The prediction head on each segment's pooled rows (first row, or the mean when classifier_pooling
 * is "mean"): out (n_segs, H) = LN(act(pool W^T + b)); tmp (n_segs, H) is scratch. The model must
 * have the head (has_pooler). */
void eng__modernbert_head(const eng_model *m, eng_state *st, const float *x, const eng_seg *segs, int n_segs,
                          float *tmp, float *out);

#endif
