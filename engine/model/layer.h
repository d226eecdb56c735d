/* layer.h - the adapter modules of a task, layer by layer, as the engine runs them.
 *
 * Built by the loaders (task/load_*.c), read by the adapter math (model/adapter.c), the encoder's
 * layer forward (model/encoder.c) and the cost model (run/cost.c). Placement in a layer:
 *
 *     qkv  = x Wqkv^T + b      + LoRA_q/k/v(x)        then (IA)^3 k/v scaling
 *     attn = softmax(Q [Pk;K]^T / sqrt d) [Pv;V]      prefix keys/values first
 *     h    = attn Wo^T + bo    + LoRA_o(attn)         PEFT may target attention.output.dense
 *     a    = site_mh(h, x, LN1)                       bottleneck stack / fusion, or LN1(h + x)
 *     i    = act(a W1^T + b1   + LoRA_i(a)  (IA)^3_i)  LoRA and (IA)^3 act before the activation
 *     y    = i W2^T + b2       + LoRA_d(i)
 *     x'   = site_out(y, a, LN2)                      bottleneck stack / fusion, or LN2(y + a)
 *
 * docs/ADAPTER_FORMATS.md says where each form and each field comes from. */
#ifndef ADAPTERD_ENGINE_MODEL_LAYER_H
#define ADAPTERD_ENGINE_MODEL_LAYER_H

#include <stdint.h>

#include "engine/task.h"
#include "io/hf_keys.h"
#include "math/sparse.h"

/* The two places in a layer where bottleneck adapters act (AdapterHub's mh_adapter and
 * output_adapter). */
typedef enum { ENG_SITE_ATTN, ENG_SITE_FFN, ENG_SITE_COUNT } eng_site_pos;

/* Where a bottleneck's residual is taken (AdapterHub's residual_before_ln). */
typedef enum {
    ENG_RESIDUAL_AFTER_LN,  /* false: the output of the block's own LayerNorm */
    ENG_RESIDUAL_BEFORE_LN, /* true: the sub-layer output before that LayerNorm */
    ENG_RESIDUAL_POST_ADD,  /* "post_add": sub-layer output plus the block input, before the LayerNorm */
} eng_residual_mode;

/* A bottleneck adapter at one site (AdapterHub's bottleneck config; docs/ADAPTER_FORMATS.md). */
typedef struct {
    int d;                   /* bottleneck width */
    float *w_down;           /* (d, H), NULL when stored sparse or packed */
    float *b_down;           /* (d) */
    float *w_up;             /* (H, d), NULL when stored sparse or packed */
    float *p_down, *p_up;    /* w_down, w_up packed at load for eng__gemm_rows_p (math/blas.h), which frees
                              * the plain ones: nothing else reads them; p_down NULL below 48 rows */
    float *b_up;             /* (H) */
    eng_sparse *down_sp;     /* w_down in CSR when it is mostly zeros (SparseAdapter), else NULL */
    eng_sparse *up_sp;       /* w_up in CSR, else NULL */
    eng_act act;
    float scaling;           /* float or learned scalar */
    float *scaling_vec;      /* (H) for scaling "channel", else NULL */
    float *ln_before_g, *ln_before_b; /* (H) adapter-internal LayerNorms, eps 1e-5, or NULL */
    float *ln_after_g, *ln_after_b;
    float *gate_w;           /* (H) use_gating, else NULL */
    float gate_b;
    uint8_t original_ln_before, original_ln_after;
    eng_residual_mode residual_before_ln;
    uint8_t adapter_residual_before_ln;
    uint8_t is_parallel;
    int n_experts;           /* AdaMix: experts averaged into this adapter at load (0: plain adapter) */
} eng_bottleneck;

/* AdapterFusion over the children of a site (dynamic or static preset; docs/ADAPTER_FORMATS.md). */
typedef struct {
    float *wq, *bq;          /* (H, H), (H) */
    float *wk, *bk;          /* (H, H), (H) */
    float *wk_t;             /* (H, H) wk transposed: scores use Q Wk . U instead of Q . (U Wk^T) */
    float *wv;               /* (H, H) or NULL (static preset: no value matrix) */
    float *pq, *pk_t, *pv;   /* wq, wk_t, wv packed at load (eng__gemm_rows_p), which frees wq, wk, wk_t, wv */
    uint8_t query_before_ln, residual_before, value_before_softmax;
    float temperature;       /* 1: the library's schedule is not saved (see docs) */
} eng_fusion;

/* Where bottleneck adapters act: a Stack of adapters, optionally ending in a Fuse over several. */
#define ENG_MAX_STACK 4
typedef struct {
    int n_stack;
    eng_bottleneck *stack[ENG_MAX_STACK];  /* applied in order */
    int n_fuse;                            /* 0: no fusion */
    eng_bottleneck *fuse[ENG_MAX_FUSE];    /* children of the fusion, after the stack */
    const eng_fusion *fusion;
    uint8_t fuse_keep[ENG_MAX_FUSE];       /* pruning: 0 drops a child (all 1 when unpruned) */
    uint8_t fuse_child[ENG_MAX_FUSE];      /* index of each child among the fusion's adapters */
} eng_site;

/* LoRA on one Linear: y += scaling * (x A^T) B^T. AdaLoRA is stored with E folded into A. With a
 * gate (UniPELT), the factor is instead mean_t sigmoid(x_t . gate_w + gate_b) per sequence. */
typedef struct {
    int r, in, out;
    float *A;                /* (r, in) */
    float *B;                /* (out, r); NULL once packed, unless a slice of a shared tensor */
    float *pB;               /* B packed at load with the scaling in it (1 under a gate), or NULL when out < 48 */
    float scaling;
    float *gate_w;           /* (in) or NULL */
    float gate_b;
} eng_lora;

/* LoRA on the word embeddings (PEFT's lora.Embedding on `word_embeddings`): the embedding of token t
 * gains scaling * B a_t, a_t = A[:, t], before the embedding LayerNorm. It sits below every layer,
 * so it acts only at skip 0 (AdapterDrop drops it first); a stream with one embeds its own rows
 * (run/planner.c). */
typedef struct eng_emb_lora {
    int r;
    float *a_t;              /* (vocab, r): A transposed, so that a token's column is one row */
    float *b;                /* (H, r) */
    float scaling;
} eng_emb_lora;

/* (IA)^3 on one Linear: y = (x W^T + b) * l. */
typedef struct {
    int out;
    float *l;                /* (out), alpha folded in */
} eng_ia3;

typedef struct eng_task_layer {
    eng_lora *lora[ENG_LIN_COUNT];   /* NULL where absent */
    eng_ia3 *ia3[ENG_LIN_COUNT];
    int prefix_len;                  /* P, 0 for none */
    float *prefix_k, *prefix_v;      /* (P, H) each, precomputed at load */
    int prefix_gates;                /* 0, or 1 (shared) / 2 (keys, values) gate outputs */
    float *prefix_gate_w;            /* (prefix_gates, H): g = mean_t sigmoid(W x_t + b) per sequence */
    float prefix_gate_b[2];
    eng_site mh, out;                /* ENG_SITE_ATTN: after attention output; ENG_SITE_FFN: after FFN output */
} eng_task_layer;

/* Does layer adapter `a` change anything at all? */
int eng__task_layer_active(const eng_task_layer *a);

/* The task's LoRA on the word embeddings, or NULL (borrowed, lives as long as t). */
const eng_emb_lora *eng__task_emb_lora(const eng_task *t);

/* Per-layer adapters, (L) entries (borrowed, live as long as t). */
const eng_task_layer *eng__task_layers(const eng_task *t);

/* The bottleneck site at position pos of a layer. */
static inline const eng_site *eng__layer_site(const eng_task_layer *a, eng_site_pos pos) {
    return pos == ENG_SITE_FFN ? &a->out : &a->mh;
}

#endif
