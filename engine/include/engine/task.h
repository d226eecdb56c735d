/* task.h - tasks: adapter setups plus prediction heads, loaded from AdapterHub and PEFT files.
 *
 * A task is what one classification of a request runs: for every layer of the backbone, the
 * adapter modules that act in it (bottlenecks, LoRA, (IA)^3, prefixes, fusion), and a head on top.
 * Tasks are read-only after load and shared by all workers, like the model; many tasks share one
 * model. The formats and the math of each form are described in docs/ADAPTER_FORMATS.md; the
 * modules themselves (model/layer.h) are internal to the engine, callers see a task through the
 * accessors below and run it with eng_run (engine/run.h).
 *
 * AdapterDrop: a call may skip the first n layers of a task; those run as the plain backbone. */
#ifndef ADAPTERD_ENGINE_TASK_H
#define ADAPTERD_ENGINE_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/act.h"
#include "engine/model.h"
#include "engine/status.h"

/* Most adapter folders one task may name: the children of one fusion (or one Stack). */
#define ENG_MAX_FUSE 16

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

/* Scores from logits (n_rows, num_labels) into probs: softmax per row for classification and
 * tagging, sigmoid for multi-label, the logits themselves for regression and QA. */
void eng_head_probs(const eng_head *h, const float *logits, int n_rows, float *probs);

/* Index of the largest value among n. */
int eng_argmax(const float *v, int n);

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
    /* A saved fusion pruning (fusion_pruning.json) drops children: 0 (default) frees their weights
     * at load, so the task holds (and eng_task_bytes reports) only what it runs; 1 keeps them, for
     * calibration and for comparing the pruned fusion with the whole one (`adapterd fusion-prune`). */
    int keep_pruned;
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
/* First layer holding any adapter module (L when none). */
int eng_task_first_layer(const eng_task *t);
/* The layer from which the task's own stream runs when a request asks for skip: its start layer
 * (max of skip and its first adapter layer), or one later when the adapters there sit only at the
 * layer's output site (a late split: the shared trunk runs that layer's attention and FFN for it);
 * 0 at skip 0 when the task has a LoRA on the word embeddings (its stream embeds its own rows).
 * The planner (eng_run) and anyone who reports its plan per request use this one rule. */
int eng_task_split_layer(const eng_task *t, int skip);
/* Bytes of weights the task holds. */
size_t eng_task_bytes(const eng_task *t);
/* Short description of the adapter forms ("seq_bn", "lora+prefix", ...). Owned by the task. */
const char *eng_task_kind(const eng_task *t);

/* AdapterDrop skips a task supports (docs/ADAPTER_FORMATS.md §8): a robustly trained
 * task any skip in [min, max], a specialized one its fixed n (min == max), by default only 0. The
 * registry sets them from task.json; requests outside the range are refused, never silently
 * changed. */
typedef struct {
    int min, max, def;
} eng_skip_range;

eng_skip_range eng_task_skips(const eng_task *t);
/* Sets the range; returns ENG_INVALID_ARGUMENT unless 0 <= min <= def <= max <= L. */
int eng_task_set_skips(eng_task *t, eng_skip_range r, eng_err *err);

/* ---- AdapterFusion pruning (AdapterDrop paper, section 5) ----
 * A fusion task may run only the k children that calibration found most attended to (engine/fusion.h
 * computes and saves that choice as fusion_pruning.json beside the fusion; eng_task_load applies
 * a saved one). */

/* Names of the fusion's children in fusion order (borrowed); returns their count (0: no fusion). */
int eng_task_fusion_children(const eng_task *t, const char *const **names);

/* Which children run: (n children) flags in fusion order, 1 kept, 0 pruned (borrowed; all 1 when
 * unpruned, NULL without a fusion). */
const uint8_t *eng_task_fusion_kept(const eng_task *t);

/* 1 when the pruned children's weights were freed at load (eng_task_params.keep_pruned 0): the task
 * can then neither be calibrated nor get those children back. */
int eng_task_fusion_freed(const eng_task *t);

/* Keep only the children whose keep[i] is 1 (in fusion order); at least one must stay; all 1 undoes
 * a pruning unless its children were freed (ENG_INVALID_ARGUMENT). For the owner of a task before
 * it is shared: a task that workers run must not change. */
int eng_task_prune_fusion(eng_task *t, const uint8_t *keep, int n, eng_err *err);

#endif
