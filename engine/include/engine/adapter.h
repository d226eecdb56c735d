/* adapter.h - tasks: adapter setups plus prediction heads, loaded from AdapterHub and PEFT files.
 *
 * A task is what one classification of a request runs: for every layer of the backbone, the
 * adapter modules that act in it (bottlenecks, LoRA, (IA)^3, prefixes, fusion), and a head on top.
 * Tasks are read-only after load and shared by all workers, like the model; many tasks share one
 * model. The math of each form is AdapterHub's / PEFT's, written out in
 * ../shared/reference/ADAPTER_FORMATS.md and implemented in adapter.c; placement in a layer:
 *
 *     qkv  = x Wqkv^T + b      + LoRA_q/k/v(x)        then (IA)^3 k/v scaling
 *     attn = softmax(Q [Pk;K]^T / sqrt d) [Pv;V]      prefix keys/values first
 *     h    = attn Wo^T + bo    + LoRA_o(attn)         PEFT may target attention.output.dense
 *     a    = site_mh(h, x, LN1)                       bottleneck stack / fusion, or LN1(h + x)
 *     i    = act(a W1^T + b1   + LoRA_i(a)  (IA)^3_i)  LoRA and (IA)^3 act before the activation
 *     y    = i W2^T + b2       + LoRA_d(i)
 *     x'   = site_out(y, a, LN2)                      bottleneck stack / fusion, or LN2(y + a)
 *
 * AdapterDrop: a call may skip the first n layers of a task; those run as the plain backbone. */
#ifndef ADAPTERD_ENGINE_ADAPTER_H
#define ADAPTERD_ENGINE_ADAPTER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/sparse.h"
#include "engine/status.h"

/* The Linear layers of a layer that LoRA / (IA)^3 can target. */
typedef enum { ENG_LIN_Q, ENG_LIN_K, ENG_LIN_V, ENG_LIN_O, ENG_LIN_I, ENG_LIN_D, ENG_LIN_COUNT } eng_lin;

/* A bottleneck adapter at one site (AdapterHub BnConfig; ADAPTER_FORMATS.md 1.2-1.5). */
typedef struct {
    int d;                   /* bottleneck width */
    float *w_down;           /* (d, H), NULL when stored sparse */
    float *b_down;           /* (d) */
    float *w_up;             /* (H, d), NULL when stored sparse */
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
    uint8_t residual_before_ln; /* 0 false, 1 true, 2 "post_add" */
    uint8_t adapter_residual_before_ln;
    uint8_t is_parallel;
    int n_experts;           /* AdaMix: experts averaged into this adapter at load (0: plain adapter) */
} eng_bottleneck;

/* AdapterFusion over the children of a site (dynamic or static preset; ADAPTER_FORMATS.md 2.2). */
typedef struct {
    float *wq, *bq;          /* (H, H), (H) */
    float *wk, *bk;          /* (H, H), (H) */
    float *wk_t;             /* (H, H) wk transposed: scores use Q Wk . U instead of Q . (U Wk^T) */
    float *wv;               /* (H, H) or NULL (static preset: no value matrix) */
    uint8_t query_before_ln, residual_before, value_before_softmax;
    float temperature;       /* 1: the library's schedule is not saved (see docs) */
} eng_fusion;

/* Where bottleneck adapters act: a Stack of adapters, optionally ending in a Fuse over several. */
#define ENG_MAX_STACK 4
#define ENG_MAX_FUSE 16
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
    float *B;                /* (out, r) */
    float scaling;
    float *gate_w;           /* (in) or NULL */
    float gate_b;
} eng_lora;

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
    eng_site mh, out;                /* after attention output / after FFN output */
} eng_task_layer;

/* Does layer adapter `a` change anything at all? */
int eng_task_layer_active(const eng_task_layer *a);

/* ---- heads ---- */

typedef enum {
    ENG_HEAD_CLASSIFICATION,  /* softmax over labels */
    ENG_HEAD_MULTILABEL,      /* sigmoid per label */
    ENG_HEAD_REGRESSION,      /* one value */
    ENG_HEAD_TAGGING,         /* per token softmax */
    ENG_HEAD_QA,              /* per token start/end logits */
} eng_head_type;

typedef enum { ENG_HEAD_IN_CLS, ENG_HEAD_IN_POOLER, ENG_HEAD_IN_TOKENS } eng_head_input;

#define ENG_HEAD_MAX_LAYERS 4
typedef struct {
    eng_head_type type;
    eng_head_input input;
    int num_labels;                  /* output width of the last layer */
    int n_layers;
    struct {
        int in, out;
        float *w;                    /* (out, in) */
        float *b;                    /* (out) or NULL */
        eng_act act;                 /* applied after this layer */
    } layers[ENG_HEAD_MAX_LAYERS];
    char **labels;                   /* (num_labels) names from id2label/label2id, or NULL */
} eng_head;

/* ---- a task ---- */

typedef struct eng_task eng_task;

typedef struct {
    const char *name;        /* NULL: the adapter's saved name, else the folder's name */
    const char *fusion_dir;  /* AdapterFusion folder (adapter_fusion_config.json + weights) or NULL */
    const char *head_dir;    /* folder with head_config.json + head weights, or NULL to use one saved
                                with the (last) adapter / PEFT modules_to_save */
    float sparse_threshold;  /* store a bottleneck matrix sparse (CSR) when at least this share of it is
                                zero (default 0.5, see bench/sparse); 0 always, above 1 never */
    /* Called on the loading thread after each weight tensor is converted, with the bytes it now
     * holds; NULL for none. A server uses it to pace large loads (adapters_store). */
    void (*pace)(void *ctx, size_t bytes);
    void *pace_ctx;
} eng_task_params;

eng_task_params eng_task_default_params(void);

/* Loads a task from n_dirs adapter folders (applied as a Stack in that order, or as the children of
 * the fusion when p->fusion_dir is set), validated against model m. Each folder is what AdapterHub's
 * save_adapter or PEFT's save_pretrained wrote. Returns 0 and sets *out (release with
 * eng_task_free; it must not outlive m), or a negative eng_status naming the file, key or shape. */
int eng_task_load(const eng_model *m, const char *const *dirs, int n_dirs, const eng_task_params *p, eng_task **out,
                  eng_err *err);
void eng_task_free(eng_task *t);

const char *eng_task_name(const eng_task *t);
const eng_head *eng_task_head(const eng_task *t);
/* Per-layer adapters, (L) entries. */
const eng_task_layer *eng_task_layers(const eng_task *t);
/* First layer holding any adapter module (L when none). */
int eng_task_first_layer(const eng_task *t);
/* Bytes of weights the task holds. */
size_t eng_task_bytes(const eng_task *t);
/* Short description of the adapter forms ("seq_bn", "lora+prefix", ...). Owned by the task. */
const char *eng_task_kind(const eng_task *t);

/* AdapterDrop skips a task supports (ADAPTER_FORMATS.md 3): a robustly trained task any skip in
 * [min, max], a specialized one its fixed n (min == max), by default only 0. The registry sets them
 * from task.json; requests outside the range are refused, never silently changed. */
typedef struct {
    int min, max, def;
} eng_skip_range;

eng_skip_range eng_task_skips(const eng_task *t);
/* Sets the range; returns ENG_INVALID_ARGUMENT unless 0 <= min <= def <= max <= L. */
int eng_task_set_skips(eng_task *t, eng_skip_range r, eng_err *err);

/* ---- AdapterFusion pruning (AdapterDrop paper, section 5) ----
 * Calibrate: run texts through the fusion and average, per fusion layer, the attention each child
 * gets. Prune: keep the k children with the largest mean attention over all fusion layers (one
 * kept set for the whole model: the dropped adapters then cost nothing in any layer). The result is
 * saved beside the fusion as fusion_pruning.json, and eng_task_load applies it when present. */

/* Names of the fusion's children in fusion order (borrowed); returns their count (0: no fusion). */
int eng_task_fusion_children(const eng_task *t, const char *const **names);

/* Keep only the children whose keep[i] is 1 (in fusion order); at least one must stay. */
int eng_task_prune_fusion(eng_task *t, const uint8_t *keep, int n, eng_err *err);

struct eng_input;
/* Runs inputs (their task lists are ignored: t runs at skip 0) and fills mean (L, n_children) with
 * each child's mean attention weight per layer (0 for layers without fusion). The task's current
 * pruning is lifted for the run and restored after. Returns 0 or a negative eng_status. */
int eng_fusion_calibrate(const eng_model *m, eng_state *st, eng_task *t, const struct eng_input *inputs,
                         int n_inputs, double *mean, eng_err *err);

/* Chooses the k children with the largest mean attention summed over layers into keep (n_children). */
void eng_fusion_choose(const double *mean, int n_layers, int n_children, int k, uint8_t *keep);

/* Writes <fusion_dir>/fusion_pruning.json: the statistics, the kept names and k. */
int eng_fusion_save_pruning(const eng_task *t, const char *fusion_dir, const double *mean, int n_layers,
                            const uint8_t *keep, int n_calib, eng_err *err);

#endif
