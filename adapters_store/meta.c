/* meta.c - what a version is before any weight is read: the models (loaded once at open) and a
 * version's metadata, from its task.json or inferred from the saved configs; and the lifetime of
 * these objects (a model's reference count, the destruction of an unlisted version).
 *
 * Depends only on disk.c. It never looks at the registry's table: meta_parse makes a new, unlisted
 * store_task with one reference, and the table (table.c) decides whether to list it. That is why a
 * fuzz harness can drive it (store__version_check) without a registry that changes. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <assert.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- reference counts ---- */

void store__model_retain(store_model *m) {
    if (m) atomic_fetch_add(&m->refs, 1);
}

void store_model_release(store_model *m) {
    if (!m) return;
    int left = atomic_fetch_sub(&m->refs, 1) - 1;
    assert(left >= 0 && "store_model released below zero");
    if (left) return;
    eng_tokenizer_free(m->tok);
    eng_model_free(m->model);
    free(m->name);
    free(m);
}

void store__task_destroy(store_task *t) {
    eng_task_free(atomic_load(&t->task));
    store_model_release(t->model);
    for (int i = 0; i < t->n_sub; i++) free(t->sub[i]);
    free(t->fusion), free(t->head);
    store__free_strs(t->cfg_labels, t->n_cfg_labels);
    store__free_strs(t->labels, t->n_labels);
    store__free_strs(t->fuse_names, t->n_fuse);
    free(t->fb_from), free(t->fb_why);
    free(t->name), free(t->version), free(t->dir);
    store__fp_cache_free(t->fpc);
    free(t);
}

/* ---- models ---- */

/* The model's precision: models/NAME/model.json's, else the registry's default. */
int store__load_model(const char *root, const char *name, const store_params *p, store_model **out, eng_err *err) {
    char dir[PATH_MAX];
    store__pathf(dir, sizeof dir, "%s/models/%s", root, name);
    store_model *m = calloc(1, sizeof *m);
    if (!m || !(m->name = strdup(name))) {
        free(m);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory loading model %s", name);
    }
    atomic_init(&m->refs, 1);
    eng_model_params mp = eng_model_default_params();
    mp.precision = p->precision;
    int rc = eng_model_json_precision(dir, &mp.precision, err);
    if (!rc) rc = eng_model_load_params(dir, &mp, &m->model, err);
    if (!rc) rc = eng_tokenizer_load(dir, &m->tok, err);
    if (!rc && p->verbose) {
        eng_model_precision_info pi = eng_model_precision(m->model);
        fprintf(stderr, "adapterd: model %s in %s (%s kernel, %zu MB of packed weights)\n", name, pi.name, pi.kernel,
                pi.packed_bytes >> 20);
    }
    if (rc) {
        eng_err_prefix(err, "model %s", name);
        store_model_release(m);
        return rc;
    }
    const eng_config *c = eng_model_config(m->model);
    int pos = c->max_pos - c->pos_offset;
    int tl = eng_tokenizer_max_length(m->tok);
    m->max_tokens = tl < pos ? tl : pos;
    *out = m;
    return 0;
}

static store_model *find_model(store_registry *r, const char *name) {
    for (int i = 0; i < r->n_models; i++)
        if (!strcmp(r->models[i]->name, name)) return r->models[i];
    return NULL;
}

/* ---- version metadata (no weights) ---- */

static int json_int_field(json_t *o, const char *k, int def, int *out, eng_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 4096)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "task.json: skips.%s must be a non-negative integer", k);
    *out = (int)json_integer_value(v);
    return 0;
}

static int sub_name_ok(const char *s) { return s && *s && !strstr(s, "..") && s[0] != '/'; }

/* Reads version vname of task name in vdir: task.json or the folders' configs, the model, skips.
 * task_json (len bytes) is the text of the version's task.json, NULL when it has none (meta_read
 * reads the file). Returns 0 and a new unlisted task with refs 1, or a negative status. */
int store__meta_parse(store_registry *r, const char *name, const char *vname, const char *vdir, const char *task_json,
                      size_t len, store_task **out, eng_err *err) {
    char path[PATH_MAX];
    char **subs = NULL;
    int ns = 0, rc = 0;
    json_t *cfg = NULL;
    store_task *t = calloc(1, sizeof *t);
    if (!t) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    atomic_init(&t->refs, 1);
    t->reg = r;
    t->head_type = -1;
    t->vnum = store__version_number(vname);
    if (!(t->name = strdup(name)) || !(t->version = strdup(vname)) || !(t->dir = strdup(vdir))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    store__pathf(path, sizeof path, "%s/task.json", vdir);
    if (task_json) {
        json_error_t je;
        if (!(cfg = json_loadb(task_json, len, 0, &je)) || !json_is_object(cfg)) {
            rc = eng_err_set(err, ENG_FORMAT, "%s:%d: %s", path, je.line, cfg ? "not a JSON object" : je.text);
            goto fail;
        }
    }
    t->from_cfg = cfg != NULL;
    const char *mname = cfg ? json_string_value(json_object_get(cfg, "model")) : NULL;
    /* the implicit model is the registry's only model folder, loaded or not */
    store_model *m = mname ? find_model(r, mname) : (r->n_models == 1 && !r->n_bad_models ? r->models[0] : NULL);
    for (int i = 0; !m && mname && i < r->n_bad_models; i++)
        if (!strcmp(r->bad_models[i].name, mname)) {
            rc = eng_err_set(err, ENG_NOT_FOUND, "%s: model \"%s\" did not load: %s", vdir, r->bad_models[i].name,
                             r->bad_models[i].reason);
            goto fail;
        }
    if (!m) {
        rc = mname ? eng_err_set(err, ENG_NOT_FOUND, "%s: model \"%s\" is not in models/", vdir, mname)
                   : eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: task.json must name the model (the registry has %d)",
                                 vdir, r->n_models + r->n_bad_models);
        goto fail;
    }
    store__model_retain(m);
    t->model = m;
    json_t *ja = cfg ? json_object_get(cfg, "adapters") : NULL;
    if (ja) {
        if (!json_is_array(ja) || json_array_size(ja) < 1 || json_array_size(ja) > ENG_MAX_FUSE) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: \"adapters\" must list 1..%d folders", vdir,
                             ENG_MAX_FUSE);
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(ja); i++) {
            const char *s = json_string_value(json_array_get(ja, i));
            if (!sub_name_ok(s)) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: adapters[%zu] must be a sub-folder name", vdir, i);
                goto fail;
            }
            if (!(t->sub[t->n_sub++] = strdup(s))) goto oom;
        }
        json_t *jf = json_object_get(cfg, "fusion"), *jh = json_object_get(cfg, "head");
        const char *fu = json_string_value(jf), *hd = json_string_value(jh);
        if ((fu && !sub_name_ok(fu)) || (hd && !sub_name_ok(hd))) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: fusion and head must be sub-folder names", vdir);
            goto fail;
        }
        if ((fu && !(t->fusion = strdup(fu))) || (hd && !(t->head = strdup(hd)))) goto oom;
    } else {
        if ((ns = store__list_subdirs(vdir, &subs, err)) < 0) {
            rc = ns;
            ns = 0;
            goto fail;
        }
        /* a version folder that is one saved adapter (save_adapter / save_pretrained, then tar -C out .) */
        int top = store__file_in(vdir, ".", "adapter_config.json");
        if (top && !(t->sub[t->n_sub++] = strdup("."))) goto oom;
        for (int i = 0; i < ns; i++) {
            if (top && (store__file_in(vdir, subs[i], "adapter_config.json") || store__file_in(vdir, subs[i], "adapter_fusion_config.json"))) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT,
                                 "%s: adapter_config.json at the top and adapter folders inside (%s): one layout per "
                                 "version (the top folder as the task's one adapter, or sub-folders)", vdir, subs[i]);
                goto fail;
            }
            if (store__file_in(vdir, subs[i], "adapter_fusion_config.json")) {
                free(t->fusion);
                if (!(t->fusion = strdup(subs[i]))) goto oom;
            } else if (store__file_in(vdir, subs[i], "adapter_config.json")) {
                if (t->n_sub == ENG_MAX_FUSE) {
                    rc = eng_err_set(err, ENG_LIMIT, "%s: more than %d adapter folders", vdir, ENG_MAX_FUSE);
                    goto fail;
                }
                if (!(t->sub[t->n_sub++] = strdup(subs[i]))) goto oom;
            } else if (store__file_in(vdir, subs[i], "head_config.json")) {
                free(t->head);
                if (!(t->head = strdup(subs[i]))) goto oom;
            }
        }
        if (t->n_sub == 0) {
            rc = eng_err_set(err, ENG_NOT_FOUND,
                             "%s: no adapter (adapter_config.json at the top, or in sub-folders)", vdir);
            goto fail;
        }
    }
    json_t *jl = cfg ? json_object_get(cfg, "labels") : NULL;
    if (jl && !json_is_null(jl)) {
        if (!json_is_array(jl) || json_array_size(jl) > 100000) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: \"labels\" must be an array of strings", vdir);
            goto fail;
        }
        int n = (int)json_array_size(jl);
        if (!(t->cfg_labels = calloc((size_t)n + 1, sizeof *t->cfg_labels))) goto oom;
        for (int i = 0; i < n; i++) {
            const char *s = json_string_value(json_array_get(jl, (size_t)i));
            if (!s) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: labels[%d] is not a string", vdir, i);
                goto fail;
            }
            if (!(t->cfg_labels[i] = strdup(s))) goto oom;
            t->n_cfg_labels++;
        }
    }
    json_t *jp = cfg ? json_object_get(cfg, "pinned") : NULL;
    if (jp && !json_is_boolean(jp)) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: \"pinned\" must be true or false", vdir);
        goto fail;
    }
    t->pinned_cfg = jp && json_is_true(jp);
    /* Skips: task.json's range (default only 0), widened by the operator, capped at L. */
    int L = eng_model_config(m->model)->n_layers;
    json_t *js = cfg ? json_object_get(cfg, "skips") : NULL;
    if (js && !json_is_object(js)) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: \"skips\" must be {\"min\":..,\"max\":..,\"default\":..}", vdir);
        goto fail;
    }
    if ((rc = json_int_field(js, "min", 0, &t->skip_min, err)) || (rc = json_int_field(js, "max", t->skip_min, &t->skip_max, err)) ||
        (rc = json_int_field(js, "default", t->skip_min, &t->skip_def, err)))
        goto fail;
    if (r->p.allow_skip > t->skip_max) t->skip_max = r->p.allow_skip;
    if (t->skip_min > 0 && r->p.allow_skip > 0) t->skip_min = 0;
    if (t->skip_max > L) t->skip_max = L;
    if (t->skip_min > t->skip_max || t->skip_def < t->skip_min || t->skip_def > t->skip_max) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: skips need min <= default <= max <= %d layers", vdir, L);
        goto fail;
    }
    json_decref(cfg);
    store__free_strs(subs, ns);
    t->fingerprint = store__fingerprint_cached(vdir, &t->fpc);
    *out = t;
    return 0;
oom:
    rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
fail:
    json_decref(cfg);
    store__free_strs(subs, ns);
    store__task_destroy(t);
    return rc;
}

/* meta_parse of vdir's own task.json, read whole when there is one. */
int store__meta_read(store_registry *r, const char *name, const char *vname, const char *vdir, store_task **out,
                     eng_err *err) {
    char path[PATH_MAX];
    store__pathf(path, sizeof path, "%s/task.json", vdir);
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK) == 0) {
        int rc = eng_file_read(path, TASK_JSON_MAX_BYTES, &text, &len, err);
        if (rc) return rc;
    }
    int rc = store__meta_parse(r, name, vname, vdir, text, len, out, err);
    free(text);
    return rc;
}
