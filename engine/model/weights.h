/* weights.h - an encoder's weights as the engine holds them (the model object behind engine/model.h).
 *
 * Loaded by model/model.c, read by the encoder (model/encoder.c) and nothing else: tasks see the
 * model only through its config. The four backbone Linear weights of each layer are eng_linear
 * (math/linear.h), packed at load in the model's precision, each its own allocation; everything
 * else lives in one 64-byte-aligned float32 arena. */
#ifndef ADAPTERD_ENGINE_MODEL_WEIGHTS_H
#define ADAPTERD_ENGINE_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "math/linear.h"

/* The four backbone Linear weights are packed (eng_linear, in the model's precision), not in the
 * checkpoint's (out, in) layout; their shapes are given as that layout's. */
typedef struct {
    eng_linear wqkv; /* (3H, H): query rows, then key rows, then value rows */
    float *bqkv;   /* (3H) */
    eng_linear wo; /* (H, H) attention output dense */
    float *bo;     /* (H) */
    float *ln1_g;  /* (H) attention output LayerNorm (DistilBERT: sa_layer_norm) */
    float *ln1_b;  /* (H) */
    eng_linear w1; /* (I, H) intermediate dense */
    float *b1;     /* (I) */
    eng_linear w2; /* (H, I) output dense */
    float *b2;     /* (H) */
    float *ln2_g;  /* (H) output LayerNorm (DistilBERT: output_layer_norm) */
    float *ln2_b;  /* (H) */
    float *rel_q;  /* DeBERTa p2c: (2 span, H) relative table through this layer's query (or pos_query) projection, else NULL */
    float *rel_k;  /* DeBERTa c2p: (2 span, H) the same through the key (or pos_key) projection, else NULL */
} eng_layer_weights;

typedef struct {
    float *word_emb;  /* (vocab, E); E = emb_dim, H but for ELECTRA / DeBERTa with embedding_size */
    float *pos_emb;   /* (max_pos, E), NULL for DeBERTa without position_biased_input */
    float *type_emb;  /* (type_vocab, E), NULL when type_vocab == 0 */
    float *emb_ln_g;  /* (E) ELECTRA (normalizes before the projection), else (H) */
    float *emb_ln_b;
    float *emb_proj_w; /* (H, E) when E != H: electra.embeddings_project / DeBERTa's embed_proj, else NULL */
    float *emb_proj_b; /* (H) ELECTRA's bias; NULL for DeBERTa (no bias) */
    float *rel_emb;    /* DeBERTa: (2 span, H) relative embeddings after their LayerNorm (norm_rel_ebd) */
    int32_t *rel_idx;  /* DeBERTa: (2 max_pos - 1) table row of distance i - j, at i - j + max_pos - 1 (own allocation) */
    eng_layer_weights *layers; /* (L) */
    float *pooler_w;    /* (H, H) or NULL; ModernBERT: head.dense */
    float *pooler_b;    /* (H) or NULL */
    /* pooler_w and emb_proj_w packed for the row products over a batch (eng__gemm_rows_p, math/blas.h):
     * own 64-byte aligned allocations, NULL when absent or under 48 output features */
    float *pooler_p, *emb_proj_p;
    /* ModernBERT (model/modernbert.c): its layers use the fields above as attn_norm (ln1; NULL on
     * layer 0, the identity), Wqkv, attn.Wo, mlp_norm (ln2), mlp.Wi (w1: (2I, H)), mlp.Wo (w2); a
     * LayerNorm without bias gets zeros; no position or type embeddings. */
    float *final_ln_g, *final_ln_b; /* (H) final_norm */
    float *head_ln_g, *head_ln_b;   /* (H) head.norm, when the prediction head is present */
    float *rope_cos, *rope_sin;     /* (2, max_pos, head_dim / 2): [0] global theta, [1] local */
} eng_weights;

struct eng_model {
    eng_config cfg;
    eng_weights w;
    eng_prec prec;       /* of the four backbone Linear layers */
    float *arena;        /* (arena_floats) every float tensor above points into it */
    size_t arena_floats;
    size_t packed_bytes; /* of every layer's eng_linear */
    size_t rows_bytes;   /* of pooler_p and emb_proj_p */
};

/* Borrowed pointer, valid while the model lives. */
const eng_weights *eng__model_weights(const eng_model *m);

#endif
