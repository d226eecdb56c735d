/* table.c - the registry's table: tasks by name (sorted, binary search), each with its versions
 * and current one; references; the failed-version list; lookups, listings and the accessors.
 *
 * Why reference counts and not a lock held by requests: a request keeps its task for the whole
 * time it waits in the scheduler queue and runs in a batch; holding a lock that long would make a
 * reload wait for traffic. A reference is one atomic increment at admission and one decrement when
 * the request completes, both under the registry mutex for a listed version (held for a few
 * instructions). The registry holds one reference per listed version, so "refs == 1 under the
 * mutex" means no request uses a version: only then is it evicted or, when it is not current,
 * unloaded. Acquiring and releasing happen under the same mutex, so nothing can start using a
 * version between that check and the unload, and a release never reads a version that another
 * thread's last release may be freeing.
 *
 * Taking references lives here; dropping them is residency.c's (a release may unload or evict).
 * Depends on disk.c and meta.c. The *_locked functions expect reg->mu held and never touch the
 * disk. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void store__task_retain(store_task *t) {
    if (t) atomic_fetch_add(&t->refs, 1);
}

/* The array store_tasks_acquire returns has 2n + 1 slots: the references, then room for what the
 * release frees after its one unlock (so that a release cannot fail for want of memory). */
int store_tasks_acquire(store_registry *r, store_task ***out) {
    *out = NULL;
    pthread_mutex_lock(&r->mu);
    int n = 0;
    store_task **v = calloc(2 * (size_t)r->n_e + 1, sizeof *v);
    for (int i = 0; v && i < r->n_e; i++)
        if (r->e[i]->cur) v[n++] = store__take(r, r->e[i]->cur);
    pthread_mutex_unlock(&r->mu);
    if (!v) return ENG_NO_MEMORY;
    *out = v;
    return n;
}

/* ---- failed versions (reg->mu held) ---- */

int store__broken_find(const store_registry *r, const char *name, const char *version) {
    for (int i = 0; i < r->n_broken; i++)
        if (!strcmp(r->broken[i].name, name) && !strcmp(r->broken[i].version, version)) return i;
    return -1;
}

/* Records (or updates the reason of) a version that failed; silently drops it when out of memory. */
void store__broken_add_locked(store_registry *r, const char *name, const char *version, const char *reason) {
    int i = store__broken_find(r, name, version);
    char *why = store__registry_relative(r, reason && *reason ? reason : "failed");
    if (!why) return;
    if (i >= 0) {
        free(r->broken[i].reason);
        r->broken[i].reason = why;
        return;
    }
    broken_version *nb = realloc(r->broken, (size_t)(r->n_broken + 1) * sizeof *nb);
    if (!nb) {
        free(why);
        return;
    }
    r->broken = nb;
    broken_version *b = &nb[r->n_broken];
    b->name = strdup(name), b->version = strdup(version), b->reason = why;
    if (!b->name || !b->version) {
        free(b->name), free(b->version), free(why);
        return;
    }
    r->n_broken++;
}

void store__broken_remove_at(store_registry *r, int i) {
    free(r->broken[i].name), free(r->broken[i].version), free(r->broken[i].reason);
    r->broken[i] = r->broken[--r->n_broken];
}

/* Drops the record of name/version, or of every version of name when version is NULL, and the
 * fingerprints they failed with. */
void store__broken_remove_locked(store_registry *r, const char *name, const char *version) {
    size_t nl = strlen(name);
    for (int i = r->n_bad - 1; i >= 0; i--) {
        const char *k = r->bad[i].key;
        if (strncmp(k, name, nl) || k[nl] != '/' || (version && strcmp(k + nl + 1, version))) continue;
        free(r->bad[i].key);
        memmove(&r->bad[i], &r->bad[i + 1], (size_t)(r->n_bad - i - 1) * sizeof *r->bad);
        r->n_bad--;
    }
    for (int i = r->n_broken - 1; i >= 0; i--)
        if (!strcmp(r->broken[i].name, name) && (!version || !strcmp(r->broken[i].version, version))) store__broken_remove_at(r, i);
}

void store__broken_add(store_registry *r, const char *name, const char *version, const char *reason) {
    pthread_mutex_lock(&r->mu);
    store__broken_add_locked(r, name, version, reason);
    pthread_mutex_unlock(&r->mu);
}
int store__entry_pinned(const store_entry *e) { return e->admin_pinned || (e->cur && e->cur->pinned_cfg); }

/* ---- the tables (reg->mu held) ---- */

static int find_entry(const store_registry *r, const char *name, size_t len, int *pos) {
    int lo = 0, hi = r->n_e - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const char *s = r->e[mid]->name;
        int c = strncmp(s, name, len);
        if (c == 0 && s[len] != '\0') c = 1;
        if (c == 0) {
            if (pos) *pos = mid;
            return 1;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    if (pos) *pos = lo;
    return 0;
}

store_entry *store__get_entry(store_registry *r, const char *name) {
    int pos;
    return find_entry(r, name, strlen(name), &pos) ? r->e[pos] : NULL;
}

/* Returns the entry named name, created when missing, or NULL when out of memory. */
store_entry *store__make_entry(store_registry *r, const char *name) {
    int pos;
    if (find_entry(r, name, strlen(name), &pos)) return r->e[pos];
    if (r->n_e == r->cap_e) {
        int nc = r->cap_e ? r->cap_e * 2 : 16;
        store_entry **ne = realloc(r->e, (size_t)nc * sizeof *ne);
        if (!ne) return NULL;
        r->e = ne, r->cap_e = nc;
    }
    store_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->name = strdup(name))) {
        free(e);
        return NULL;
    }
    memmove(&r->e[pos + 1], &r->e[pos], (size_t)(r->n_e - pos) * sizeof *r->e);
    r->e[pos] = e;
    r->n_e++;
    return e;
}

store_task *store__find_version(const store_entry *e, const char *version) {
    for (int i = 0; e && i < e->n; i++)
        if (!strcmp(e->v[i]->version, version)) return e->v[i];
    return NULL;
}

/* Lists t (its refs 1 becomes the listing's) in version order. */
int store__add_version_locked(store_entry *e, store_task *t) {
    store_task **nv = realloc(e->v, (size_t)(e->n + 1) * sizeof *nv);
    if (!nv) return ENG_NO_MEMORY;
    e->v = nv;
    int pos = e->n;
    while (pos > 0 && e->v[pos - 1]->vnum > t->vnum) pos--;
    memmove(&e->v[pos + 1], &e->v[pos], (size_t)(e->n - pos) * sizeof *e->v);
    e->v[pos] = t;
    e->n++;
    atomic_store(&t->listed, 1);
    return 0;
}

/* Unlists t; the caller drops the listing's reference after unlocking. */
void store__unlist_locked(store_registry *r, store_entry *e, store_task *t) {
    int k = 0;
    while (k < e->n && e->v[k] != t) k++;
    if (k == e->n) return;
    memmove(&e->v[k], &e->v[k + 1], (size_t)(e->n - k - 1) * sizeof *e->v);
    e->n--;
    if (e->cur == t) e->cur = NULL;
    t->current = 0;
    atomic_store(&t->listed, 0);
    if (atomic_load(&t->task)) r->resident_bytes -= t->bytes;
}

void store__drop_entry_locked(store_registry *r, store_entry *e) {
    int pos;
    if (!find_entry(r, e->name, strlen(e->name), &pos)) return;
    memmove(&r->e[pos], &r->e[pos + 1], (size_t)(r->n_e - pos - 1) * sizeof *r->e);
    r->n_e--;
}

void store__entry_free(store_entry *e) {
    free(e->want), free(e->want_why);
    free(e->v);
    free(e->name);
    free(e);
}

int store__tomb_index(const store_registry *r, const char *name, const char *version) {
    char key[300];
    store__pathf(key, sizeof key, "%s/%s", name, version);
    for (int i = 0; i < r->n_tombs; i++)
        if (!strcmp(r->tombs[i], key)) return i;
    return -1;
}

/* Was version folder name/version tried at fingerprint fp (and failed)? With add, records fp as
 * the one it failed with (one record per folder; the oldest record goes beyond BAD_MAX, which only
 * means that folder is tried again). */
int store__bad_seen(store_registry *r, const char *name, const char *version, uint64_t fp, int add) {
    char key[300];
    store__pathf(key, sizeof key, "%s/%s", name, version);
    int seen = 0, i;
    pthread_mutex_lock(&r->mu);
    for (i = 0; i < r->n_bad && strcmp(r->bad[i].key, key); i++) continue;
    if (i < r->n_bad) {
        seen = r->bad[i].fp == fp;
        if (add) r->bad[i].fp = fp;
    } else if (add) {
        char *k = strdup(key);
        bad_folder *nb = k && r->n_bad < BAD_MAX ? realloc(r->bad, (size_t)(r->n_bad + 1) * sizeof *nb) : r->bad;
        if (k && r->n_bad == BAD_MAX) { /* the oldest goes */
            free(r->bad[0].key);
            memmove(&r->bad[0], &r->bad[1], (size_t)(--r->n_bad) * sizeof *r->bad);
        }
        if (k && nb) r->bad = nb, r->bad[r->n_bad++] = (bad_folder){k, fp};
        else free(k);
    }
    pthread_mutex_unlock(&r->mu);
    return seen;
}
const char *store_dir(const store_registry *r) { return r->dir; }

int store_n_tasks(const store_registry *r) {
    pthread_mutex_lock((pthread_mutex_t *)&r->mu);
    int n = r->n_e;
    pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
    return n;
}
int store_n_models(const store_registry *r) { return r->n_models; }

store_task *store__take(store_registry *r, store_task *t) {
    if (t) {
        store__task_retain(t);
        t->last_used = ++r->clock;
    }
    return t;
}

store_task *store_task_acquire(store_registry *r, const char *name, size_t len) {
    int pos;
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    if (find_entry(r, name, len, &pos)) t = store__take(r, r->e[pos]->cur);
    pthread_mutex_unlock(&r->mu);
    return t;
}

store_task *store_task_acquire_version(store_registry *r, const char *name, const char *version) {
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    t = store__take(r, store__find_version(store__get_entry(r, name), version));
    pthread_mutex_unlock(&r->mu);
    return t;
}

/* ---- rollouts (the table's view; versions.c starts and ends them) ---- */

const char *store_rollout_mode_name(int mode) {
    return mode == STORE_ROLLOUT_CANARY ? "canary" : mode == STORE_ROLLOUT_SHADOW ? "shadow" : "none";
}

int store_rollout_mode_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "canary")) return STORE_ROLLOUT_CANARY;
    if (!strcmp(s, "shadow")) return STORE_ROLLOUT_SHADOW;
    if (!strcmp(s, "none")) return STORE_ROLLOUT_NONE;
    return -1;
}

/* e's rollout when it is in force: its candidate listed and not current (a rollout whose candidate
 * was deleted, unlisted or made current by another way has ended). NULL otherwise. reg->mu held. */
const store_rollout *store__rollout_live(const store_entry *e, store_task **cand) {
    if (!e || e->rollout.mode == STORE_ROLLOUT_NONE) return NULL;
    store_task *c = store__find_version(e, e->rollout.version);
    if (!c || c == e->cur) return NULL;
    if (cand) *cand = c;
    return &e->rollout;
}

int store_rollout_get(store_registry *r, const char *name, store_rollout *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    const store_rollout *ro = store__rollout_live(e, NULL);
    if (ro) *out = *ro;
    pthread_mutex_unlock(&r->mu);
    return !e ? ENG_NOT_FOUND : ro ? 1 : 0;
}

store_task *store_rollout_acquire(store_registry *r, const char *name, store_rollout *out) {
    store_task *c = NULL;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&r->mu);
    const store_rollout *ro = store__rollout_live(store__get_entry(r, name), &c);
    if (ro) *out = *ro, c = store__take(r, c);
    else c = NULL;
    pthread_mutex_unlock(&r->mu);
    return c;
}

store_model *store_model_acquire_at(store_registry *r, int i) {
    store_model *m = NULL;
    if (i >= 0 && i < r->n_models) store__model_retain(m = r->models[i]);
    return m;
}

int store_task_names(store_registry *r, char ***names) {
    pthread_mutex_lock(&r->mu);
    int n = r->n_e;
    char **v = calloc((size_t)n + 1, sizeof *v);
    for (int i = 0; v && i < n; i++)
        if (!(v[i] = strdup(r->e[i]->name))) {
            store__free_strs(v, i);
            v = NULL;
        }
    pthread_mutex_unlock(&r->mu);
    *names = v;
    return v ? n : ENG_NO_MEMORY;
}

int store_unserved_task_names(store_registry *r, char ***names) {
    pthread_mutex_lock(&r->mu);
    char **v = calloc((size_t)r->n_broken + 1, sizeof *v);
    int n = 0;
    for (int i = 0; v && i < r->n_broken; i++) {
        const char *nm = r->broken[i].name;
        int seen = store__get_entry(r, nm) != NULL;
        for (int k = 0; !seen && k < n; k++) seen = !strcmp(v[k], nm);
        if (seen) continue;
        if (!(v[n] = strdup(nm))) {
            store__free_strs(v, n);
            v = NULL;
            break;
        }
        n++;
    }
    pthread_mutex_unlock(&r->mu);
    if (v && n) qsort(v, (size_t)n, sizeof *v, store__cmp_str);
    *names = v;
    return v ? n : ENG_NO_MEMORY;
}

static int cmp_version_info(const void *a, const void *b) {
    const store_version_info *x = a, *y = b;
    long u = strtol(x->version, NULL, 10), v = strtol(y->version, NULL, 10);
    return u != v ? (u < v ? -1 : 1) : strcmp(x->version, y->version);
}

int store_versions(store_registry *r, const char *name, store_version_info *out, int max) {
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    int n = 0, failed = 0;
    for (int i = 0; e && i < e->n && n < max; i++) {
        store_task *t = e->v[i];
        store_version_info *o = &out[n++];
        memset(o, 0, sizeof *o);
        snprintf(o->version, sizeof o->version, "%s", t->version);
        snprintf(o->state, sizeof o->state, "available");
        o->current = t == e->cur;
        o->resident = atomic_load(&t->task) != NULL;
        o->pinned = o->current && store__entry_pinned(e);
        o->in_flight = atomic_load(&t->refs) - 1;
        o->bytes = t->bytes;
    }
    for (int i = 0; i < r->n_broken && n < max; i++) {
        if (strcmp(r->broken[i].name, name)) continue;
        store_version_info *o = &out[n++];
        memset(o, 0, sizeof *o);
        snprintf(o->version, sizeof o->version, "%s", r->broken[i].version);
        snprintf(o->state, sizeof o->state, "failed");
        snprintf(o->reason, sizeof o->reason, "%s", r->broken[i].reason);
        failed++;
    }
    pthread_mutex_unlock(&r->mu);
    /* outside the lock: a stat may wait on the disk */
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        struct stat st;
        snprintf(path, sizeof path, "%s/tasks/%s/%s", r->dir, name, out[i].version);
        out[i].added = lstat(path, &st) ? 0 : (int64_t)st.st_mtime;
    }
    if (failed) qsort(out, (size_t)n, sizeof *out, cmp_version_info);
    return e || failed ? n : ENG_NOT_FOUND;
}

void store_get_stats(store_registry *r, store_stats *out) {
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    out->n_tasks = r->n_e;
    out->resident_bytes = r->resident_bytes;
    out->n_versions = out->n_resident = 0;
    for (int i = 0; i < r->n_e; i++) {
        out->n_versions += r->e[i]->n;
        for (int k = 0; k < r->e[i]->n; k++) out->n_resident += atomic_load(&r->e[i]->v[k]->task) != NULL;
    }
    pthread_mutex_unlock(&r->mu);
}
/* ---- accessors ---- */

const char *store_task_name(const store_task *t) { return t->name; }
const char *store_task_version(const store_task *t) { return t->version; }
const eng_task *store_task_engine(const store_task *t) { return atomic_load(&((store_task *)t)->task); }
store_model *store_task_model(const store_task *t) { return t->model; }
const eng_head *store_task_head(const store_task *t) {
    const eng_task *et = store_task_engine(t);
    return et ? eng_task_head(et) : NULL;
}
int store_task_head_type(const store_task *t) { return atomic_load(&((store_task *)t)->loaded_once) ? t->head_type : -1; }
store_task_layout store_task_layout_of(const store_task *t) {
    return (store_task_layout){.from_task_json = t->from_cfg, .adapters = (const char *const *)t->sub, .n_adapters = t->n_sub,
                               .fusion = t->fusion, .head = t->head};
}
const char *store_task_kind(const store_task *t) { return atomic_load(&((store_task *)t)->loaded_once) ? t->kind : ""; }
int store_task_fusion(const store_task *t, const char *const **names, const uint8_t **kept) {
    if (!atomic_load(&((store_task *)t)->loaded_once) || t->n_fuse == 0) return 0;
    *names = (const char *const *)t->fuse_names;
    *kept = t->fuse_kept;
    return t->n_fuse;
}
const char *const *store_task_labels(const store_task *t) {
    if (atomic_load(&((store_task *)t)->loaded_once)) return (const char *const *)t->labels;
    return (const char *const *)t->cfg_labels;
}
int store_task_num_labels(const store_task *t) {
    return atomic_load(&((store_task *)t)->loaded_once) ? t->n_labels : t->n_cfg_labels;
}
int store_task_skip_min(const store_task *t) { return t->skip_min; }
int store_task_skip_max(const store_task *t) { return t->skip_max; }
int store_task_skip_default(const store_task *t) { return t->skip_def; }
const char *store_task_fallback(const store_task *t, const char **from) {
    int on = atomic_load(&((store_task *)t)->fb_active);
    if (from) *from = on ? t->fb_from : NULL;
    return on ? t->fb_why : NULL;
}
size_t store_task_bytes(const store_task *t) { return t->bytes; }

const char *store_model_name(const store_model *m) { return m->name; }
const eng_model *store_model_engine(const store_model *m) { return m->model; }
const eng_tokenizer *store_model_tokenizer(const store_model *m) { return m->tok; }
int store_model_max_tokens(const store_model *m) { return m->max_tokens; }
