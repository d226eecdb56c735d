/* task_impl.h - the task object and what its loaders share (task/task.c, task/load*.c).
 *
 * Internal to task/: the rest of the engine sees a task through engine/task.h and its layers
 * through model/layer.h. One loader per format, all building the same eng_task:
 *     load.c             eng_task_load: folders -> formats -> Stack / fusion -> head
 *     load_adapterhub.c  AdapterHub adapter folders (bottleneck, prefix, LoRA / (IA)^3, unions)
 *     load_peft.c        PEFT LoRA / AdaLoRA folders
 *     load_lora.c        LoRA, AdaLoRA and (IA)^3 modules from raw matrices (both of the above)
 *     load_head.c        AdapterHub flex heads and PEFT modules_to_save classifiers
 *     load_fusion.c      AdapterFusion layers and the saved pruning
 *     load_common.c      config fields, activation names, AdapterHub site names */
#ifndef ADAPTERD_ENGINE_TASK_IMPL_H
#define ADAPTERD_ENGINE_TASK_IMPL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "model/layer.h"

struct eng_task {
    char *name;
    eng_skip_range skips;
    char kind[96];             /* "lora+prefix", ... (eng_task_kind) */
    int n_layers, first_layer;
    eng_task_layer *layers;    /* (n_layers) */
    eng_emb_lora emb;          /* r == 0: none */
    eng_head head;
    size_t bytes;
    void **allocs;             /* everything malloc'd for this task */
    size_t n_allocs, cap_allocs;
    eng_sparse **sparse;       /* CSR matrices, freed with the task */
    size_t n_sparse, cap_sparse;
    char **fuse_names;         /* (n_fuse_names) children of the fusion, in fusion order */
    int n_fuse_names;
    uint8_t fuse_kept[ENG_MAX_FUSE]; /* (n_fuse_names) 1: the child runs (eng_task_prune_fusion) */
    int fuse_freed;            /* the pruned children's weights were freed (eng__fusion_free_pruned) */
    const eng_task_params *params; /* while loading only (the pace callback) */
};

/* The bottleneck modules one adapter folder holds, per site and layer (before assembly). */
typedef struct {
    char *name;
    int n_layers;
    eng_bottleneck *at[ENG_SITE_COUNT]; /* (n_layers) each, calloc'd; NULL when the site has none */
} eng_loaded_bn;

/* The text of one config file of a task's folders, given from memory (eng__task_load_texts). */
typedef struct {
    const char *dir, *name; /* stands for dir/name */
    const char *text;       /* len bytes, no NUL needed */
    size_t len;
} eng__task_text;

/* What every loader function works on: one folder of one task being loaded. */
typedef struct {
    const eng_model *m;
    const eng_config *c;
    eng_task *t;
    const char *dir;
    eng_err *err;
    const eng__task_text *texts; /* configs given from memory (eng__task_load_texts), or NULL */
    int n_texts;
} eng_load_ctx;

/* The config dir/name as a JSON object: parsed from the matching given text when there is one, else
 * read from the folder (eng__json_object_load). NULL with err set on failure. */
json_t *eng__task_config(const eng_load_ctx *x, const char *dir, const char *name);
/* Is there a config dir/name, given or in the folder? */
int eng__task_has_config(const eng_load_ctx *x, const char *dir, const char *name);

/* eng_task_load, with the texts of some of the folders' configs given from memory: a loader that
 * would read texts[i].dir/texts[i].name (adapter_config.json, head_config.json,
 * adapter_fusion_config.json) parses texts[i].text instead, with the code the file's bytes go
 * through; everything else, weights included, is read from the folders. eng_task_load is this with
 * no texts. For the fuzz harnesses: a config can be tried against real weights without writing it. */
int eng__task_load_texts(const eng_model *m, const char *const *dirs, int n_dirs, const eng_task_params *p,
                         const eng__task_text *texts, int n_texts, eng_task **out, eng_err *err);

/* ---- ownership (task.c): every allocation of a task is freed by eng_task_free ---- */

/* Zeroed bytes owned by the task, or NULL. */
void *eng__task_alloc(eng_task *t, size_t bytes);
/* Uninitialized bytes owned by the task, 64-byte aligned (packed weights), or NULL. */
void *eng__task_alloc64(eng_task *t, size_t bytes);
/* Frees p (from eng__task_alloc) before the task goes; returns 1, or 0 when p is not the task's. */
int eng__task_release(eng_task *t, void *p);
char *eng__task_strdup(eng_task *t, const char *s);
/* n floats of src in an allocation of the task's own (a slice made independent of its tensor), or NULL. */
float *eng__task_copy_f32(eng_task *t, const float *src, size_t n);
/* Hands a CSR matrix to the task (counted in its bytes). Returns 0 or ENG_NO_MEMORY (sp not taken). */
int eng__task_add_sparse(eng_task *t, eng_sparse *sp, eng_err *err);
/* A float32 copy of x owned by the task, after the shape check of io/tensor_file.h; NULL with err
 * set on failure. Counts the bytes and calls the pace callback. */
float *eng__task_tensor_f32(eng_task *t, const eng_st_tensor *x, int64_t d0, int64_t d1, const char *label,
                            eng_err *err);
/* Appends a form to the task's kind ("lora", "prefix", ...) unless present. */
void eng__task_kind_add(eng_task *t, const char *k);

/* The site of a layer being built. */
static inline eng_site *eng__layer_site_mut(eng_task_layer *a, eng_site_pos pos) {
    return pos == ENG_SITE_FFN ? &a->out : &a->mh;
}

/* ---- config helpers (load_common.c) ---- */

/* o[k] as a string, or NULL. */
const char *eng__jstr(json_t *o, const char *k);
/* o[k] as a boolean, def when absent or not a boolean. */
int eng__jbool(json_t *o, const char *k, int def);
/* o[k] as a number (def when absent or not a number) converted to int or float, clamped to the
 * type's range first: a config's 1e300 becomes INT_MAX (or FLT_MAX), which the shape checks then
 * refuse, instead of an undefined conversion. */
int eng__jint(json_t *o, const char *k, int def);
float eng__jfloat(json_t *o, const char *k, float def);
/* An activation name of an adapter or head config (NULL: identity). legacy: the config predates
 * the library's "version" field, when "gelu" meant the tanh form. ENG_UNSUPPORTED naming `where`. */
int eng__parse_act(const char *name, int legacy, eng_act *out, const char *where, eng_err *err);
/* AdapterHub's module path of a bottleneck site followed by mid, at the start of k: returns the
 * site (eng_site_pos) and sets *rest past mid, or returns -1. */
int eng__parse_site(const char *k, const char *mid, const char **rest);

/* ---- LoRA / (IA)^3 (load_lora.c) ---- */

/* The matrices of one (layer, Linear) as read, before eng__lora_finish. */
typedef struct {
    float *A, *B, *E;        /* (r, in), (out, r), AdaLoRA's (r, 1); owned by the task */
    float *gate_w, gate_b;   /* gated LoRA (UniPELT) */
    int rA, rB;              /* ranks as read from A and B */
    int out;                 /* rows of B when not the Linear's width (a merged Wqkv's slice), else 0 */
    const eng_st_tensor *tgate_w, *tgate_b; /* a merged Wqkv's gate as read (one row per slice) */
    const eng_st_tensor *tA, *tB, *tE; /* the tensors read, for messages; live while the file is open */
} eng_lora_raw;

/* How a form scales its product (docs/ADAPTER_FORMATS.md §3, §4). */
typedef enum {
    ENG_LORA_FORM_LORA,    /* alpha / r */
    ENG_LORA_FORM_RSLORA,  /* alpha / sqrt(r) (PEFT use_rslora) */
    ENG_LORA_FORM_ADALORA, /* E folded into A; alpha / (r + 1e-5), alpha = r when not positive */
    ENG_LORA_FORM_IA3,     /* AdapterHub composition_mode "scale": B is the vector l, times alpha */
} eng_lora_form;

/* Input and output width of a Linear of the backbone. */
int eng__lin_in(const eng_config *c, eng_lin l);
int eng__lin_out(const eng_config *c, eng_lin l);
/* Reads a LoRA matrix into lr->A, B or E (is_a / is_e say which), with its tensor and rank. */
int eng__lora_tensor(eng_load_ctx *x, int is_a, int is_e, const eng_st_tensor *ts, eng_lora_raw *lr);
/* Builds the modules of raw (n_layers x ENG_LIN_COUNT entries) into the task's layers. gated: the
 * config asks for gates, which every module must then have. */
int eng__lora_finish(eng_load_ctx *x, eng_lora_raw *raw, eng_lora_form form, float alpha, int gated);

/* ---- the formats ---- */

/* One AdapterHub folder (cfgj: its adapter_config.json) into the task's layers and lb. */
int eng__load_adapterhub(eng_load_ctx *x, json_t *cfgj, eng_loaded_bn *lb, float sparse_threshold);
/* One PEFT folder; *head_file receives the open weights when they also hold a modules_to_save head. */
int eng__load_peft(eng_load_ctx *x, json_t *cfgj, eng_st_file **head_file);
/* The head of head_config.json in dir. */
int eng__load_adapterhub_head(eng_load_ctx *x, const char *dir);
/* The modules_to_save classifier in f. */
int eng__load_peft_head(eng_load_ctx *x, eng_st_file *f);
/* The fusion in dir over the n loaded adapters lbs; sets the sites' fuse lists. */
int eng__load_fusion(eng_load_ctx *x, const char *dir, eng_loaded_bn *lbs, int n);
/* Applies <fusion_dir>/fusion_pruning.json to t when it exists. */
int eng__fusion_apply_saved(eng_task *t, const char *fusion_dir, eng_err *err);
/* Frees the weights of every fusion child a site does not run (fuse_keep 0) and takes them off the
 * task's bytes. Their settings stay: a site's last child gives the pre and post steps even when
 * pruned (model/adapter.c). */
void eng__fusion_free_pruned(eng_task *t, int hidden);

#endif
