/* load.c - eng_task_load: a task from the folders AdapterHub `adapters` and PEFT save.
 *
 * A folder is recognised by its config: `adapter_config.json` with a "config" envelope is
 * AdapterHub's (task/load_adapterhub.c), with "peft_type" PEFT's (task/load_peft.c): one per task, on
 * its own or, without a head, beside AdapterHub folders (its LoRAs act where they sit, the Stack's
 * bottlenecks where theirs do, a Linear never taking two LoRAs). Weights come
 * from safetensors or torch.save .bin files (io/tensor_file.h). The bottleneck modules of all
 * folders are then assembled, per layer and site, into a Stack or the children of a fusion
 * (task/load_fusion.c), and a head is loaded (task/load_head.c). All weights are converted to
 * float32 into allocations owned by the task (task/task.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/files.h"
#include "io/tensor_file.h"
#include "math/blas.h"
#include "task/task_impl.h"

int eng_task_load(const eng_model *m, const char *const *dirs, int n_dirs, const eng_task_params *p, eng_task **out,
                  eng_err *err) {
    return eng__task_load_texts(m, dirs, n_dirs, p, NULL, 0, out, err);
}

/* W (N, K) laid out as eng__gemm_rows_p reads it (math/blas.h), alpha folded in, into *out; W is
 * freed when it is an allocation of its own (a fused Wqkv LoRA's B slices are copied into their own at
 * the split, so nothing else points into one). counted: W's bytes are in t->bytes. Nothing when
 * already packed, absent or too narrow to pack. */
static int pack_one(eng_task *t, float **w, int N, int K, float alpha, int counted, float **out, eng_err *err) {
    if (*out || !*w || !eng__gemm_rows_packs(N)) return 0;
    size_t n = eng__packed_floats(N, K);
    float *p = eng__task_alloc64(t, n * sizeof *p);
    if (!p) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (packing adapter weights)");
    eng__pack_strided(*w, N, K, (size_t)K, 1, alpha, p);
    t->bytes += n * sizeof *p;
    if (eng__task_release(t, *w)) {
        if (counted) t->bytes -= (size_t)N * K * sizeof **w;
        *w = NULL;
    }
    *out = p;
    return 0;
}

/* Packs every dense adapter matrix that eng__gemm_rows would otherwise repack on every call (a few
 * rows paid the packing of the whole operand: ~60 us for a 64 x 768 bottleneck at one row, sgemm's
 * 2.4 us). The bits are the unpacked call's (tests/engine/math/test_gemm.c). */
static int pack_weights(eng_task *t, int H, eng_err *err) {
    int rc = 0;
    for (int l = 0; l < t->n_layers && !rc; l++) {
        eng_task_layer *a = &t->layers[l];
        for (int k = 0; k < ENG_LIN_COUNT && !rc; k++) {
            eng_lora *lo = a->lora[k];
            if (lo) rc = pack_one(t, &lo->B, lo->out, lo->r, lo->gate_w ? 1.0f : lo->scaling, 1, &lo->pB, err);
        }
        for (eng_site_pos s = 0; s < ENG_SITE_COUNT && !rc; s++) {
            eng_site *site = eng__layer_site_mut(a, s);
            eng_bottleneck *bns[ENG_MAX_STACK + ENG_MAX_FUSE];
            int nb = 0;
            for (int i = 0; i < site->n_stack; i++) bns[nb++] = site->stack[i];
            for (int i = 0; i < site->n_fuse; i++) bns[nb++] = site->fuse[i];
            for (int i = 0; i < nb && !rc; i++) {
                eng_bottleneck *bn = bns[i];
                if (!(rc = pack_one(t, &bn->w_down, bn->d, H, 1.0f, 1, &bn->p_down, err)))
                    rc = pack_one(t, &bn->w_up, H, bn->d, 1.0f, 1, &bn->p_up, err);
            }
            eng_fusion *fu = (eng_fusion *)site->fusion; /* the task's own, built by load_fusion.c */
            if (!fu || rc) continue;
            if (fu->wk && fu->wk_t) { /* wk only made wk_t, which was not counted */
                if (eng__task_release(t, fu->wk)) t->bytes -= (size_t)H * H * sizeof(float);
                fu->wk = NULL;
                t->bytes += (size_t)H * H * sizeof(float);
            }
            if (!(rc = pack_one(t, &fu->wq, H, H, 1.0f, 1, &fu->pq, err)) &&
                !(rc = pack_one(t, &fu->wk_t, H, H, 1.0f, 1, &fu->pk_t, err)))
                rc = pack_one(t, &fu->wv, H, H, 1.0f, 1, &fu->pv, err);
        }
    }
    return rc;
}

int eng__task_load_texts(const eng_model *m, const char *const *dirs, int n_dirs, const eng_task_params *p,
                         const eng__task_text *texts, int n_texts, eng_task **out, eng_err *err) {
    *out = NULL;
    eng_task_params defp = eng_task_default_params();
    if (!p) p = &defp;
    if (n_dirs < 1 || n_dirs > ENG_MAX_FUSE)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "a task needs 1 to %d adapter folders", ENG_MAX_FUSE);
    const eng_config *c = eng_model_config(m);
    eng_task *t = calloc(1, sizeof *t);
    if (!t) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    t->params = p;
    t->n_layers = c->n_layers;
    t->layers = eng__task_alloc(t, (size_t)c->n_layers * sizeof *t->layers);
    eng_loaded_bn *lbs = calloc((size_t)n_dirs, sizeof *lbs);
    int rc = t->layers && lbs ? 0 : eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    eng_st_file *peft_head = NULL;
    int peft = 0; /* 1 + the index of the PEFT folder, 0 for none */
    for (int i = 0; i < n_dirs && !rc; i++) {
        eng_load_ctx x = {m, c, t, dirs[i], err, texts, n_texts};
        json_t *cj = eng__task_config(&x, dirs[i], "adapter_config.json");
        if (!cj) {
            rc = err->code;
            break;
        }
        if (json_object_get(cj, "peft_type")) {
            /* beside other folders only without a head of its own (e.g. a LoRA on the word embeddings
             * under an AdapterHub adapter and its head): one task has one head */
            eng_st_file *h = NULL;
            if (p->fusion_dir)
                rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: a PEFT adapter cannot be fused", dirs[i]);
            else if (peft)
                rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: a task takes one PEFT folder", dirs[i]);
            else if (!(rc = eng__load_peft(&x, cj, &h)) && h && n_dirs > 1) {
                rc = eng_err_set(err, ENG_UNSUPPORTED,
                                 "%s: a PEFT adapter with a modules_to_save head must be a task of its own", dirs[i]);
                eng__st_close(h);
                h = NULL;
            }
            if (h) peft_head = h;
            peft = i + 1;
            const char *slash = strrchr(dirs[i], '/');
            if (!rc) lbs[i].name = eng__task_strdup(t, slash && slash[1] ? slash + 1 : dirs[i]);
        } else {
            rc = eng__load_adapterhub(&x, cj, &lbs[i], p->sparse_threshold);
        }
        json_decref(cj);
    }
    /* assemble bottleneck sites: a Stack of all, or the fusion's children */
    if (!rc && p->fusion_dir) {
        eng_load_ctx x = {m, c, t, p->fusion_dir, err, texts, n_texts};
        rc = eng__load_fusion(&x, p->fusion_dir, lbs, n_dirs);
    } else if (!rc) {
        for (int l = 0; l < c->n_layers && !rc; l++)
            for (eng_site_pos s = 0; s < ENG_SITE_COUNT; s++) {
                eng_site *site = eng__layer_site_mut(&t->layers[l], s);
                for (int i = 0; i < n_dirs; i++) {
                    eng_bottleneck *arr = lbs[i].at[s];
                    if (!arr || arr[l].d <= 0) continue;
                    if (site->n_stack == ENG_MAX_STACK) {
                        rc = eng_err_set(err, ENG_LIMIT, "more than %d stacked adapters", ENG_MAX_STACK);
                        break;
                    }
                    site->stack[site->n_stack++] = &arr[l];
                }
            }
    }
    /* ModernBERT takes no prefix (task/load_adapterhub.c refuses it first, with the reason) */
    for (int l = 0; !rc && c->arch == ENG_ARCH_MODERNBERT && l < c->n_layers; l++)
        if (t->layers[l].prefix_len)
            rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: prefix tuning is not supported on ModernBERT (model_type modernbert)",
                             dirs[0]);
    if (!rc && p->fusion_dir) rc = eng__fusion_apply_saved(t, p->fusion_dir, err);
    if (!rc && p->fusion_dir && !p->keep_pruned) eng__fusion_free_pruned(t, c->hidden);
    if (!rc) rc = pack_weights(t, c->hidden, err);
    /* head */
    if (!rc) {
        /* the last folder's, passing over a PEFT folder without one */
        const char *last = dirs[peft == n_dirs && n_dirs > 1 ? n_dirs - 2 : n_dirs - 1];
        eng_load_ctx x = {m, c, t, p->head_dir ? p->head_dir : last, err, texts, n_texts};
        if (p->head_dir) rc = eng__load_adapterhub_head(&x, p->head_dir);
        else if (peft && peft_head) rc = eng__load_peft_head(&x, peft_head);
        else if (eng__task_has_config(&x, last, "head_config.json")) rc = eng__load_adapterhub_head(&x, last);
        else rc = eng_err_set(err, ENG_NOT_FOUND, "%s: no prediction head (head_config.json or PEFT modules_to_save)", last);
    }
    eng__st_close(peft_head);
    if (!rc) {
        const char *nm = p->name ? p->name : (p->fusion_dir ? NULL : lbs[n_dirs - 1].name);
        if (!nm) {
            const char *slash = strrchr(p->fusion_dir, '/');
            nm = slash && slash[1] ? slash + 1 : p->fusion_dir;
        }
        t->name = eng__task_strdup(t, nm);
        if (!t->name) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    if (!rc) {
        t->first_layer = c->n_layers;
        for (int l = c->n_layers - 1; l >= 0; l--)
            if (eng__task_layer_active(&t->layers[l])) t->first_layer = l;
        if (!t->kind[0]) eng__task_kind_add(t, "head_only");
    }
    free(lbs);
    t->params = NULL; /* the caller's, valid only during the call */
    if (rc) {
        eng_task_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
