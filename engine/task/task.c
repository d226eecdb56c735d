/* task.c - the task object: ownership of everything a task loaded, accessors, skips and pruning.
 *
 * A task owns its weights through one list of allocations (plus its CSR matrices), freed together
 * by eng_task_free, so the loaders (task/load*.c) can bail out anywhere without cleanup code of
 * their own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tensor_file.h"
#include "model/adapter.h"
#include "task/task_impl.h"

eng_task_params eng_task_default_params(void) {
    eng_task_params p = {0};
    p.sparse_threshold = 0.5f;
    return p;
}

/* ---- ownership ---- */

/* Adds p to the task's allocations; returns p, or NULL (freeing p) when the list cannot grow. */
static void *task_keep(eng_task *t, void *p) {
    if (!p) return NULL;
    if (t->n_allocs == t->cap_allocs) {
        size_t cap = t->cap_allocs ? t->cap_allocs * 2 : 64;
        void **n = realloc(t->allocs, cap * sizeof *n);
        if (!n) {
            free(p);
            return NULL;
        }
        t->allocs = n;
        t->cap_allocs = cap;
    }
    t->allocs[t->n_allocs++] = p;
    return p;
}

void *eng__task_alloc(eng_task *t, size_t bytes) { return task_keep(t, calloc(1, bytes ? bytes : 1)); }

void *eng__task_alloc64(eng_task *t, size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1)) return NULL;
    return task_keep(t, p);
}

/* Frees p early (it was eng__task_alloc'd); its slot in the list is cleared. */
int eng__task_release(eng_task *t, void *p) {
    for (size_t i = t->n_allocs; p && i-- > 0;)
        if (t->allocs[i] == p) {
            free(p);
            t->allocs[i] = NULL;
            return 1;
        }
    return 0;
}

char *eng__task_strdup(eng_task *t, const char *s) {
    char *d = strdup(s);
    return task_keep(t, d);
}

float *eng__task_copy_f32(eng_task *t, const float *src, size_t n) {
    float *d = malloc(n ? n * sizeof *d : 1);
    if (d) memcpy(d, src, n * sizeof *d);
    return task_keep(t, d);
}

int eng__task_add_sparse(eng_task *t, eng_sparse *sp, eng_err *err) {
    if (t->n_sparse == t->cap_sparse) {
        size_t cap = t->cap_sparse ? 2 * t->cap_sparse : 16;
        eng_sparse **n = realloc(t->sparse, cap * sizeof *n);
        if (!n) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        t->sparse = n;
        t->cap_sparse = cap;
    }
    t->sparse[t->n_sparse++] = sp;
    t->bytes += eng__sparse_bytes(sp);
    return 0;
}

float *eng__task_tensor_f32(eng_task *t, const eng_st_tensor *x, int64_t d0, int64_t d1, const char *label,
                            eng_err *err) {
    if (eng__tensor_check_shape(x, d0, d1, label, err)) return NULL;
    float *p = eng__task_alloc(t, (size_t)x->numel * sizeof *p);
    if (!p) {
        eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (eng__tensor_load_f32(x, d0, d1, label, p, err)) return NULL;
    t->bytes += (size_t)x->numel * sizeof *p;
    if (t->params && t->params->pace) t->params->pace(t->params->pace_ctx, (size_t)x->numel * sizeof *p);
    return p;
}

void eng__task_kind_add(eng_task *t, const char *k) {
    if (strstr(t->kind, k)) return;
    size_t n = strlen(t->kind);
    snprintf(t->kind + n, sizeof t->kind - n, "%s%s", n ? "+" : "", k);
}

void eng_task_free(eng_task *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_allocs; i++) free(t->allocs[i]);
    free(t->allocs);
    for (size_t i = 0; i < t->n_sparse; i++) eng__sparse_free(t->sparse[i]);
    free(t->sparse);
    free(t);
}

/* ---- accessors ---- */

const char *eng_task_name(const eng_task *t) { return t->name; }
const eng_head *eng_task_head(const eng_task *t) { return &t->head; }
const eng_task_layer *eng__task_layers(const eng_task *t) { return t->layers; }
int eng_task_first_layer(const eng_task *t) { return t->first_layer; }
const eng_emb_lora *eng__task_emb_lora(const eng_task *t) { return t->emb.r ? &t->emb : NULL; }
int eng_task_split_layer(const eng_task *t, int skip) {
    if (skip == 0 && t->emb.r) return 0; /* its own embeddings: its stream runs from the start */
    int start = skip > t->first_layer ? skip : t->first_layer;
    return start < t->n_layers && eng__late_split_ok(&t->layers[start]) ? start + 1 : start;
}
size_t eng_task_bytes(const eng_task *t) { return t->bytes; }
const char *eng_task_kind(const eng_task *t) { return t->kind; }
eng_skip_range eng_task_skips(const eng_task *t) { return t->skips; }

int eng_task_set_skips(eng_task *t, eng_skip_range r, eng_err *err) {
    if (r.min < 0 || r.min > r.def || r.def > r.max || r.max > t->n_layers)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "task '%s': skips must satisfy 0 <= min %d <= default %d <= max %d <= %d",
                           t->name, r.min, r.def, r.max, t->n_layers);
    t->skips = r;
    return 0;
}

int eng_task_fusion_children(const eng_task *t, const char *const **names) {
    *names = (const char *const *)t->fuse_names;
    return t->n_fuse_names;
}

const uint8_t *eng_task_fusion_kept(const eng_task *t) { return t->n_fuse_names ? t->fuse_kept : NULL; }
int eng_task_fusion_freed(const eng_task *t) { return t->fuse_freed; }

int eng_task_prune_fusion(eng_task *t, const uint8_t *keep, int n, eng_err *err) {
    if (n != t->n_fuse_names)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "the fusion has %d adapters, got %d flags", t->n_fuse_names, n);
    int kept = 0;
    for (int i = 0; i < n; i++) kept += keep[i] != 0;
    if (kept < 1) return eng_err_set(err, ENG_INVALID_ARGUMENT, "pruning must keep at least one adapter");
    for (int i = 0; i < n; i++)
        if (keep[i] && !t->fuse_kept[i] && t->fuse_freed)
            return eng_err_set(err, ENG_INVALID_ARGUMENT,
                               "adapter '%s' was pruned and its weights freed at load (eng_task_params.keep_pruned)",
                               t->fuse_names[i]);
    for (int i = 0; i < n; i++) t->fuse_kept[i] = keep[i] != 0;
    for (int l = 0; l < t->n_layers; l++)
        for (eng_site_pos s = 0; s < ENG_SITE_COUNT; s++) {
            eng_site *site = eng__layer_site_mut(&t->layers[l], s);
            int any = 0;
            for (int i = 0; i < site->n_fuse; i++) any += keep[site->fuse_child[i]] != 0;
            for (int i = 0; i < site->n_fuse; i++) /* a site keeps at least one child */
                site->fuse_keep[i] = any ? keep[site->fuse_child[i]] != 0 : 1;
        }
    return 0;
}
