/* load_fusion.c - an AdapterFusion folder (adapter_fusion_config.json + query/key/value weights)
 * over the task's loaded adapters, and the saved pruning (fusion_pruning.json) that goes with it.
 *
 * Applying a saved pruning is part of loading: a task is complete, and read-only, when
 * eng_task_load returns. Computing a pruning is an offline step (run/fusion_calibrate.c). */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "engine/files.h"
#include "io/hf_keys.h"
#include "io/tensor_file.h"
#include "task/task_impl.h"

int eng__load_fusion(eng_load_ctx *x, const char *dir, eng_loaded_bn *lbs, int n) {
    eng_err *err = x->err;
    json_t *j = eng__task_config(x, dir, "adapter_fusion_config.json");
    if (!j) return err->code;
    json_t *fc = json_object_get(j, "config");
    const char *fname = eng__jstr(j, "name");
    json_t *names = json_object_get(j, "adapter_names");
    int rc = 0;
    eng_st_file *f = NULL;
    char fbuf[1024] = "";
    if (!json_is_object(fc)) {
        rc = eng_err_set(err, ENG_FORMAT, "%s/adapter_fusion_config.json: needs 'config'", dir);
        goto done;
    }
    if (!fname) { /* older files: the name is the adapters joined by commas */
        size_t o = 0;
        for (size_t i = 0; json_is_array(names) && i < json_array_size(names); i++)
            o += (size_t)snprintf(fbuf + o, sizeof fbuf - o, "%s%s", i ? "," : "", json_string_value(json_array_get(names, i)));
        fname = fbuf;
    }
    if (!json_is_array(names)) { /* derive the children from the name */
        names = NULL;
    }
    /* children in fusion order */
    int order[ENG_MAX_FUSE], n_children = 0;
    char namebuf[1024];
    snprintf(namebuf, sizeof namebuf, "%s", fname);
    for (char *save = NULL, *tok = strtok_r(namebuf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(lbs[i].name, tok)) found = i;
        if (found < 0) {
            rc = eng_err_set(err, ENG_NOT_FOUND, "%s: fusion child '%s' is not among the loaded adapters", dir, tok);
            goto done;
        }
        if (n_children == ENG_MAX_FUSE) {
            rc = eng_err_set(err, ENG_LIMIT, "%s: more than %d fused adapters", dir, ENG_MAX_FUSE);
            goto done;
        }
        order[n_children++] = found;
    }
    if (n_children < 1) {
        rc = eng_err_set(err, ENG_FORMAT, "%s: fusion names no adapters", dir);
        goto done;
    }
    if (eng__jbool(fc, "temperature", 0))
        fprintf(stderr, "adapterd: %s: fusion temperature schedule is not saved; using T = 1\n", dir);
    int has_value = eng__jbool(fc, "value", 1), vbs = eng__jbool(fc, "value_before_softmax", 1);
    static const char *files[] = {"model_adapter_fusion.safetensors", "pytorch_model_adapter_fusion.bin", NULL};
    if ((rc = eng__tensors_open_first(dir, files, &f, err))) goto done;
    x->t->fuse_names = eng__task_alloc(x->t, (size_t)n_children * sizeof(char *));
    if (!x->t->fuse_names) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_children; i++) x->t->fuse_names[i] = lbs[order[i]].name, x->t->fuse_kept[i] = 1;
    x->t->n_fuse_names = n_children;
    char mid[1100];
    snprintf(mid, sizeof mid, "adapter_fusion_layer.%s.", fname);
    int H = x->c->hidden;
    eng_fusion *per[ENG_SITE_COUNT][ENG_MAX_LAYERS] = {{0}};
    for (size_t i = 0; i < eng__st_count(f) && !rc; i++) {
        const eng_st_tensor *ts = eng__st_at(f, i);
        const char *k = eng__hf_strip_base(ts->name);
        int layer;
        const char *r = eng__hf_parse_layer(k, &layer), *rest = NULL;
        int site = r ? eng__parse_site(r, mid, &rest) : -1;
        if (site < 0 || layer >= x->c->n_layers) {
            rc = eng_err_set(err, ENG_FORMAT, "%s: unexpected tensor '%s'", dir, ts->name);
            break;
        }
        eng_fusion *fu = per[site][layer];
        if (!fu) {
            fu = per[site][layer] = eng__task_alloc(x->t, sizeof *fu);
            if (!fu) {
                rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
                break;
            }
            fu->query_before_ln = (uint8_t)eng__jbool(fc, "query_before_ln", 0);
            fu->residual_before = (uint8_t)eng__jbool(fc, "residual_before", 0);
            fu->value_before_softmax = (uint8_t)vbs;
            fu->temperature = 1.0f;
        }
        float **dst = NULL;
        int two = 1;
        if (!strcmp(rest, "query.weight")) dst = &fu->wq;
        else if (!strcmp(rest, "query.bias")) dst = &fu->bq, two = 0;
        else if (!strcmp(rest, "key.weight")) dst = &fu->wk;
        else if (!strcmp(rest, "key.bias")) dst = &fu->bk, two = 0;
        else if (!strcmp(rest, "value.weight") && has_value) dst = &fu->wv;
        else {
            rc = eng_err_set(err, ENG_FORMAT, "%s: unexpected tensor '%s'", dir, ts->name);
            break;
        }
        if (!(*dst = eng__task_tensor_f32(x->t, ts, H, two ? H : 0, dir, err))) rc = err->code;
    }
    for (int l = 0; l < x->c->n_layers && !rc; l++)
        for (eng_site_pos s = 0; s < ENG_SITE_COUNT && !rc; s++) {
            eng_fusion *fu = per[s][l];
            if (!fu) continue;
            if (!fu->wq || !fu->bq || !fu->wk || !fu->bk || (has_value && !fu->wv)) {
                rc = eng_err_set(err, ENG_FORMAT, "%s: layer %d fusion lacks query/key%s weights", dir, l,
                                 has_value ? "/value" : "");
                break;
            }
            fu->wk_t = eng__task_alloc(x->t, (size_t)H * H * sizeof(float));
            if (!fu->wk_t) {
                rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
                break;
            }
            for (int a = 0; a < H; a++)
                for (int b = 0; b < H; b++) fu->wk_t[(size_t)b * H + a] = fu->wk[(size_t)a * H + b];
            eng_site *site = eng__layer_site_mut(&x->t->layers[l], s);
            for (int i = 0; i < n_children; i++) {
                eng_bottleneck *arr = lbs[order[i]].at[s];
                if (!arr || arr[l].d <= 0) continue; /* children without a module here are skipped */
                site->fuse[site->n_fuse] = &arr[l];
                site->fuse_keep[site->n_fuse] = 1;
                site->fuse_child[site->n_fuse] = (uint8_t)i;
                site->n_fuse++;
            }
            site->fusion = fu;
        }
    if (!rc) eng__task_kind_add(x->t, "fusion");
done:
    eng__st_close(f);
    json_decref(j);
    return rc;
}

/* ---- a saved pruning ---- */

/* Frees one float array of a pruned child, n floats, when the task owns it. */
static void release_f32(eng_task *t, float **p, size_t n) {
    if (*p && eng__task_release(t, *p)) t->bytes -= n * sizeof(float);
    *p = NULL;
}

static void release_sparse(eng_task *t, eng_sparse **sp) {
    for (size_t i = 0; *sp && i < t->n_sparse; i++)
        if (t->sparse[i] == *sp) {
            t->bytes -= eng__sparse_bytes(*sp);
            eng__sparse_free(*sp);
            t->sparse[i] = NULL;
        }
    *sp = NULL;
}

void eng__fusion_free_pruned(eng_task *t, int H) {
    for (int l = 0; l < t->n_layers; l++)
        for (eng_site_pos s = 0; s < ENG_SITE_COUNT; s++) {
            eng_site *site = eng__layer_site_mut(&t->layers[l], s);
            for (int i = 0; i < site->n_fuse; i++) {
                eng_bottleneck *bn = site->fuse[i];
                if (site->fuse_keep[i]) continue;
                size_t d = (size_t)bn->d, h = (size_t)H;
                release_f32(t, &bn->w_down, d * h);
                release_f32(t, &bn->w_up, d * h);
                release_sparse(t, &bn->down_sp);
                release_sparse(t, &bn->up_sp);
                release_f32(t, &bn->b_down, d);
                release_f32(t, &bn->b_up, h);
                release_f32(t, &bn->scaling_vec, h);
                release_f32(t, &bn->ln_before_g, h);
                release_f32(t, &bn->ln_before_b, h);
                release_f32(t, &bn->ln_after_g, h);
                release_f32(t, &bn->ln_after_b, h);
                release_f32(t, &bn->gate_w, h);
                t->fuse_freed = 1;
            }
        }
}

int eng__fusion_apply_saved(eng_task *t, const char *fusion_dir, eng_err *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/fusion_pruning.json", fusion_dir);
    if (!eng_file_exists(path)) return 0;
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return eng_err_set(err, ENG_FORMAT, "%s: %s", path, je.text);
    const char *const *names;
    int n = eng_task_fusion_children(t, &names), rc = 0;
    uint8_t keep[ENG_MAX_FUSE] = {0};
    json_t *jk = json_object_get(j, "keep");
    if (!json_is_array(jk) || json_array_size(jk) < 1) rc = eng_err_set(err, ENG_FORMAT, "%s: needs a 'keep' list", path);
    for (size_t q = 0; !rc && q < json_array_size(jk); q++) {
        const char *nm = json_string_value(json_array_get(jk, q));
        int found = -1;
        for (int i = 0; nm && i < n; i++)
            if (!strcmp(names[i], nm)) found = i;
        if (found < 0) rc = eng_err_set(err, ENG_FORMAT, "%s: kept adapter '%s' is not in the fusion", path, nm ? nm : "?");
        else keep[found] = 1;
    }
    if (!rc) rc = eng_task_prune_fusion(t, keep, n, err);
    json_decref(j);
    return rc;
}
