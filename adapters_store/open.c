/* open.c - store_open and store_free: the models, the sweep of a killed writer's leftovers, the
 * scan of every task's versions (metadata only), the state file applied, then the weights that
 * load at start.
 *
 * Start-up keeps going past bad versions: a version that cannot be read or loaded is kept on disk
 * and listed as failed with its reason; a task whose current version fails is served on its
 * newest good version, and says so (store_task_fallback).
 *
 * Depends on every part before it (disk, meta, table, residency, state) and on none after. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

store_params store_default_params(void) {
    return (store_params){.allow_skip = 0, .verbose = 1, .memory_budget = 0, .load_rate = 0, .load_burst = (size_t)16 << 20,
                          .precision = ENG_PRECISION_FP32};
}
/* ---- open / free ---- */

/* Records a version that failed at start-up: logged, listed as failed, and known to the rescan
 * (its fingerprint) so that only a changed folder is tried again. */
static void broken_at_open(store_registry *r, const char *name, const char *version, const char *vdir, const char *why) {
    fprintf(stderr, "adapterd: task %s version %s is not served: %s\n", name, version, why);
    store__broken_add(r, name, version, why);
    store__bad_seen(r, name, version, store__fingerprint(vdir), 1);
}

/* Reads every version's metadata of task name and lists it (no weights). A version that does not
 * read is recorded as failed, not fatal. Returns ENG_NOT_FOUND when nothing is listed. */
static int scan_task(store_registry *r, const char *name, eng_err *err) {
    char tdir[PATH_MAX], vdir[PATH_MAX];
    store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    char **vers = NULL;
    int nv = store__list_subdirs(tdir, &vers, err), rc = 0;
    if (nv < 0) return nv;
    store_entry *e = NULL;
    for (int i = 0; i < nv; i++) {
        store__pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[i]);
        if (store__version_noncanonical(vers[i]) && store__tomb_index(r, name, vers[i]) < 0) {
            char why[128];
            store__pathf(why, sizeof why, "version folder name \"%.40s\" has a leading zero (name it %ld)", vers[i],
                  strtol(vers[i], NULL, 10));
            broken_at_open(r, name, vers[i], vdir, why);
            continue;
        }
        if (store__version_number(vers[i]) < 0 || store__tomb_index(r, name, vers[i]) >= 0) continue;
        store_task *t;
        eng_err me = {0};
        if ((rc = store__meta_read(r, name, vers[i], vdir, &t, &me))) {
            if (rc == ENG_NO_MEMORY) {
                *err = me;
                break;
            }
            broken_at_open(r, name, vers[i], vdir, me.msg);
            rc = 0;
            continue;
        }
        if (!e && !(e = store__make_entry(r, name))) {
            store__task_destroy(t);
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            break;
        }
        if (store__add_version_locked(e, t)) {
            store__task_destroy(t);
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            break;
        }
    }
    store__free_strs(vers, nv);
    if (!rc && !e) return eng_err_set(err, ENG_NOT_FOUND, "%s: no version directory (tasks/<name>/<number>/)", tdir);
    if (e && e->n && !e->cur) {
        e->cur = e->v[e->n - 1]; /* the highest; the state file may change it */
        e->cur->current = 1;
    }
    return rc;
}

/* Makes the entry's current version resident (without a budget, or pinned), falling back to the
 * newest version that loads when it does not: the failed one is unlisted and recorded, the one
 * standing in says so (store_task_fallback). With a budget, unpinned versions load on first use.
 * Returns 0 (also when no version loads: e->cur is then NULL), or ENG_NO_MEMORY. */
static int open_current(store_registry *r, store_entry *e, eng_err *err) {
    while (e->cur && !(r->p.memory_budget && !store__entry_pinned(e))) {
        eng_err le = {0};
        int rc = store__ensure_loaded(r, e->cur, &le);
        if (!rc) break;
        if (rc == ENG_NO_MEMORY) {
            *err = le;
            return rc;
        }
        store_task *bad = e->cur;
        broken_at_open(r, e->name, bad->version, bad->dir, le.msg);
        if (!e->want) e->want = strdup(bad->version), e->want_why = store__registry_relative(r, le.msg);
        pthread_mutex_lock(&r->mu);
        store__unlist_locked(r, e, bad);
        if (e->n) e->cur = e->v[e->n - 1], e->cur->current = 1;
        pthread_mutex_unlock(&r->mu);
        store_task_release(bad);
    }
    if (e->cur && e->want) {
        store_task *t = e->cur;
        t->fb_from = e->want, t->fb_why = e->want_why ? e->want_why : strdup("failed");
        e->want = e->want_why = NULL;
        atomic_store(&t->fb_active, t->fb_why != NULL);
        fprintf(stderr, "adapterd: task %s: version %s should be current but %s; serving version %s\n", e->name,
                t->fb_from, t->fb_why ? t->fb_why : "failed", t->version);
    }
    return 0;
}

int store_open(const char *dir, const store_params *p, store_registry **out, eng_err *err) {
    store_params defp = store_default_params();
    if (!p) p = &defp;
    *out = NULL;
    store_registry *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(dir))) {
        free(r);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    r->p = *p;
    r->st.budget = p->memory_budget;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->admin_mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    char path[PATH_MAX];
    char **names = NULL;
    int n, rc;
    store__pathf(path, sizeof path, "%s/models", dir);
    if ((n = store__list_subdirs(path, &names, err)) < 0) {
        rc = n;
        goto fail;
    }
    if (!(r->models = calloc((size_t)n + 1, sizeof *r->models))) {
        store__free_strs(names, n);
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    /* a model that does not load takes its tasks out (listed as failed), not the others */
    eng_err first = {0};
    for (int i = 0; i < n; i++) {
        eng_err me = {0};
        if ((rc = store__load_model(dir, names[i], &r->p, &r->models[r->n_models], &me)) == 0) {
            r->n_models++;
            continue;
        }
        if (rc == ENG_NO_MEMORY) {
            *err = me;
            store__free_strs(names, n);
            goto fail;
        }
        broken_version *nb = realloc(r->bad_models, (size_t)(r->n_bad_models + 1) * sizeof *nb);
        if (nb) r->bad_models = nb;
        char *why = nb ? store__registry_relative(r, me.msg) : NULL, *nm = why ? strdup(names[i]) : NULL;
        if (!nm) {
            free(why);
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            store__free_strs(names, n);
            goto fail;
        }
        nb[r->n_bad_models++] = (broken_version){.name = nm, .version = NULL, .reason = why};
        fprintf(stderr, "adapterd: model %s is not served: %s\n", names[i], me.msg);
        if (!first.code) first = me;
    }
    store__free_strs(names, n);
    if (r->n_models == 0) {
        if (first.code) *err = first, rc = first.code;
        else rc = eng_err_set(err, ENG_NOT_FOUND, "%s/models: no model directory", dir);
        goto fail;
    }
    store__pathf(path, sizeof path, "%s/tasks", dir);
    if (!eng_dir_exists(path) && mkdir(path, 0755)) {
        rc = eng_err_set(err, ENG_IO, "%s: cannot create (%s)", path, strerror(errno));
        goto fail;
    }
    store__sweep(r);
    if ((n = store__list_subdirs(path, &names, err)) < 0) {
        rc = n;
        goto fail;
    }
    /* state_read needs the tombstones before the scan: read it twice (cheap) */
    if ((rc = store__state_read(r, err))) {
        store__free_strs(names, n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if ((rc = scan_task(r, names[i], err)) && rc != ENG_NOT_FOUND) {
            store__free_strs(names, n);
            goto fail;
        }
        rc = 0;
    }
    store__free_strs(names, n);
    store__free_strs(r->tombs, r->n_tombs);
    r->tombs = NULL, r->n_tombs = 0;
    if ((rc = store__state_read(r, err))) goto fail;
    /* Weights: every current version without a budget, the pinned ones with one. */
    for (int i = 0; i < r->n_e; i++)
        if ((rc = open_current(r, r->e[i], err))) goto fail;
    for (int i = r->n_e - 1; i >= 0; i--) { /* tasks with no good version are not served */
        store_entry *e = r->e[i];
        if (e->cur) continue;
        fprintf(stderr, "adapterd: task %s has no version that loads; not served (its versions list why)\n", e->name);
        store__drop_entry_locked(r, e);
        store__entry_free(e);
    }
    for (int i = 0; i < r->n_e && r->p.verbose; i++) {
        store_task *t = r->e[i]->cur;
        if (t)
            fprintf(stderr, "adapterd: task %s v%s (%s, %d versions, skips %d..%d) on model %s\n", t->name, t->version,
                    store_task_resident(t) ? t->kind : "not loaded", r->e[i]->n, t->skip_min, t->skip_max, t->model->name);
    }
    *out = r;
    return 0;
fail:
    store_free(r);
    return rc;
}

void store_free(store_registry *r) {
    if (!r) return;
    for (int i = 0; i < r->n_e; i++) {
        store_entry *e = r->e[i];
        for (int k = 0; k < e->n; k++) {
            atomic_store(&e->v[k]->listed, 0);
            e->v[k]->current = 0;
            store_task_release(e->v[k]);
        }
        store__entry_free(e);
    }
    for (int i = 0; i < r->n_models; i++) store_model_release(r->models[i]);
    store__free_strs(r->tombs, r->n_tombs);
    store__state_doc_free(&r->state);
    for (int i = 0; i < r->n_bad; i++) free(r->bad[i].key);
    free(r->bad);
    while (r->n_broken) store__broken_remove_at(r, r->n_broken - 1);
    free(r->broken);
    for (int i = 0; i < r->n_bad_models; i++) free(r->bad_models[i].name), free(r->bad_models[i].reason);
    free(r->bad_models);
    free(r->e);
    free(r->models);
    free(r->dir);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->admin_mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}
