/* residency.c - which versions have their weights in memory: loading (paced), publishing, LRU
 * eviction under the memory budget, making a version current (the old one unloads when no
 * request holds it), and a load that fails after start-up.
 *
 * Weights are never loaded or freed under the mutex: a load marks the version `loading`, drops the
 * lock, loads, and publishes; others wanting the same version wait on a condition variable.
 * Evicted weights are detached under the lock and freed after it.
 *
 * Releasing a reference is here too: the last request's release of a version that is no longer
 * current unloads it, and one that leaves the registry over its budget evicts.
 *
 * Depends on disk.c, meta.c and table.c; it writes nothing to disk (the state file is state.c's,
 * and a version that fails here is only unlisted: the state file keeps naming it). */
#define _GNU_SOURCE
#include "store_impl.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Pacing of one load (store_params.load_rate). A load streams its files through memory while
 * inference streams the backbone's weights; a large one at full speed took enough bandwidth to
 * raise other tasks' p99 by 10-15% (bench/store). The first load_burst bytes go at full speed, so a
 * typical adapter (a few MB) loads as fast as it can; beyond them a load converts at most
 * load_rate bytes per second, sleeping between tensors. */
typedef struct {
    double t0;
    size_t bytes, rate, burst;
} pacer;

static void pace(void *ctx, size_t n) {
    pacer *p = ctx;
    p->bytes += n;
    if (p->bytes <= p->burst) return;
    double wait = p->t0 + (double)(p->bytes - p->burst) / (double)p->rate - store__now_s();
    if (wait <= 0) return;
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Loads t's weights (no lock held). Returns 0 and *out, or a negative status naming the culprit. */
int store__weights_load(const store_task *t, eng_task **out, eng_err *err) {
    char dbuf[ENG_MAX_FUSE][PATH_MAX], fbuf[PATH_MAX], hbuf[PATH_MAX];
    const char *dirs[ENG_MAX_FUSE];
    for (int i = 0; i < t->n_sub; i++) {
        /* "." (the version folder is the adapter) as the folder itself: a PEFT adapter is named after it */
        if (!strcmp(t->sub[i], ".")) store__pathf(dbuf[i], sizeof dbuf[i], "%s", t->dir);
        else store__pathf(dbuf[i], sizeof dbuf[i], "%s/%s", t->dir, t->sub[i]);
        dirs[i] = dbuf[i];
    }
    eng_task_params tp = eng_task_default_params();
    tp.name = t->name;
    if (t->fusion) store__pathf(fbuf, sizeof fbuf, "%s/%s", t->dir, t->fusion), tp.fusion_dir = fbuf;
    if (t->head) store__pathf(hbuf, sizeof hbuf, "%s/%s", t->dir, t->head), tp.head_dir = hbuf;
    pacer pc = {store__now_s(), 0, t->reg->p.load_rate, t->reg->p.load_burst};
    if (pc.rate) tp.pace = pace, tp.pace_ctx = &pc;
    int rc = eng_task_load(t->model->model, dirs, t->n_sub, &tp, out, err);
    if (rc) return eng_err_prefix(err, "task %s version %s", t->name, t->version);
    int n = eng_task_head(*out)->num_labels;
    if (t->cfg_labels && t->n_cfg_labels != n) {
        eng_task_free(*out);
        *out = NULL;
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "task %s version %s: task.json: \"labels\" must be an array of %d strings (the head's width)",
                           t->name, t->version, n);
    }
    /* the engine's budget and latency planning read the range from the task itself */
    if ((rc = eng_task_set_skips(*out, (eng_skip_range){t->skip_min, t->skip_max, t->skip_def}, err))) {
        eng_task_free(*out);
        *out = NULL;
        return eng_err_prefix(err, "task %s version %s", t->name, t->version);
    }
    return 0;
}

/* First load: labels (task.json's, else the head's, else LABEL_i), kind and head type. */
static void set_first_load_info(store_task *t, const eng_task *et) {
    if (atomic_load(&t->loaded_once)) return;
    const eng_head *h = eng_task_head(et);
    int n = h->num_labels;
    char **lb = calloc((size_t)n + 1, sizeof *lb);
    for (int i = 0; lb && i < n; i++) {
        char buf[32];
        const char *s = t->cfg_labels ? t->cfg_labels[i] : h->labels && h->labels[i] ? h->labels[i] : NULL;
        if (!s) store__pathf(buf, sizeof buf, "LABEL_%d", i), s = buf;
        lb[i] = strdup(s);
        if (!lb[i]) {
            store__free_strs(lb, i);
            lb = NULL;
        }
    }
    t->labels = lb;
    t->n_labels = lb ? n : 0;
    snprintf(t->kind, sizeof t->kind, "%s", eng_task_kind(et));
    t->head_type = (int)h->type;
    const char *const *fn;
    int nf = eng_task_fusion_children(et, &fn);
    const uint8_t *kept = eng_task_fusion_kept(et);
    char **names = nf > 0 ? calloc((size_t)nf + 1, sizeof *names) : NULL;
    for (int i = 0; names && i < nf; i++)
        if (!(names[i] = strdup(fn[i]))) {
            store__free_strs(names, i);
            names = NULL;
        }
    if (names) { /* (without memory for the names the listing shows no fusion; serving is unaffected) */
        t->fuse_names = names;
        t->n_fuse = nf;
        for (int i = 0; i < nf; i++) t->fuse_kept[i] = kept ? kept[i] : 1;
    }
    atomic_store(&t->loaded_once, 1);
}

/* ---- residency (reg->mu held) ---- */

/* Takes t's weights out of residency into d. Returns 1, or 0 when d cannot grow (out of memory:
 * t stays resident). */
int store__detach_locked(store_registry *r, store_task *t, detached *d) {
    eng_task *et = atomic_load(&t->task);
    if (!et) return 0;
    if (d->n == d->cap) {
        int nc = d->cap ? d->cap * 2 : (int)(sizeof d->inl / sizeof d->inl[0]);
        eng_task **nv = !d->cap ? d->inl : malloc((size_t)nc * sizeof *nv);
        if (!nv) return 0;
        if (d->cap) {
            memcpy(nv, d->v, (size_t)d->n * sizeof *nv);
            if (d->v != d->inl) free(d->v);
        }
        d->v = nv, d->cap = nc;
    }
    atomic_store(&t->task, NULL);
    r->resident_bytes -= t->bytes;
    d->v[d->n++] = et;
    return 1;
}

void store__free_detached(detached *d) {
    for (int i = 0; i < d->n; i++) eng_task_free(d->v[i]);
    if (d->v != d->inl) free(d->v);
    d->v = NULL, d->n = d->cap = 0;
}

/* Evicts least recently used versions no request holds, except keep and pinned current ones, until
 * the resident bytes fit the budget (or nothing more can go). */
void store__evict_locked(store_registry *r, const store_task *keep, detached *d) {
    if (!r->p.memory_budget) return;
    while (r->resident_bytes > r->p.memory_budget) {
        store_task *best = NULL;
        for (int i = 0; i < r->n_e; i++) {
            store_entry *e = r->e[i];
            for (int k = 0; k < e->n; k++) {
                store_task *t = e->v[k];
                if (t == keep || !atomic_load(&t->task) || t->loading || atomic_load(&t->refs) != 1) continue;
                if (t == e->cur && store__entry_pinned(e)) continue;
                if (!best || t->last_used < best->last_used) best = t;
            }
        }
        if (!best || !store__detach_locked(r, best, d)) break;
        r->st.evictions++;
        store__log(r, "evicted task %s v%s (%zu bytes; %zu of %zu resident)", best->name, best->version, best->bytes,
              r->resident_bytes, r->p.memory_budget);
    }
}

/* Publishes loaded weights; the caller then evicts beyond the budget. */
void store__publish_locked(store_registry *r, store_task *t, eng_task *et, double seconds) {
    set_first_load_info(t, et);
    t->bytes = eng_task_bytes(et);
    r->resident_bytes += t->bytes;
    atomic_store(&t->task, et);
    t->last_used = ++r->clock;
    r->st.loads++;
    r->st.load_seconds_sum += seconds;
    if (seconds > r->st.load_seconds_max) r->st.load_seconds_max = seconds;
}

/* store_task_ensure without the failure handling: start-up (open_current) handles its own. */
int store__ensure_loaded(store_registry *r, store_task *t, eng_err *err) {
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (atomic_load(&t->task)) {
            t->last_used = ++r->clock;
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        if (!t->loading) break;
        pthread_cond_wait(&r->cv, &r->mu);
    }
    t->loading = 1;
    pthread_mutex_unlock(&r->mu);
    double t0 = store__now_s();
    eng_task *et = NULL;
    int rc = store__weights_load(t, &et, err);
    double dt = store__now_s() - t0;
    detached d = {0};
    pthread_mutex_lock(&r->mu);
    t->loading = 0;
    if (rc == 0) {
        store__publish_locked(r, t, et, dt);
        store__evict_locked(r, t, &d);
    } else {
        r->st.load_failures++;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    store__free_detached(&d);
    if (rc == 0) store__log(r, "loaded task %s v%s (%s, %zu bytes) in %.1f ms", t->name, t->version, t->kind, t->bytes, dt * 1e3);
    return rc;
}

int store_task_resident(const store_task *t) { return atomic_load(&((store_task *)t)->task) != NULL; }

/* Makes t current; the old current is unloaded when no request holds it. */
void store__set_current_locked(store_registry *r, store_entry *e, store_task *t, detached *d) {
    store_task *old = e->cur;
    if (!old) r->cur_gen++; /* a task with a current version: the state may have no entry for it yet */
    e->cur = t;
    t->current = 1;
    atomic_store(&t->fb_active, 0);
    if (old) atomic_store(&old->fb_active, 0);
    if (old && old != t) {
        old->current = 0;
        if (atomic_load(&old->refs) == 1 && !old->loading) store__detach_locked(r, old, d);
    }
}

/* ---- releases ---- */

/* Nothing of t is read after the decrement unless the lock is held: once our reference is gone,
 * whoever holds the last one may free t at any moment. A listed version is released under the
 * mutex, where the listing's reference cannot go (unlisting takes the mutex), so the check "only
 * the listing holds it now, and it is not current" is safe there; then a version that is not
 * current, not a live rollout's candidate, and that no request holds is unloaded (no reason to
 * stay in memory). An unlisted version is never listed again: a plain decrement. */

/* A live rollout's candidate stays resident as the current version does: a canary's share or a shadow's
 * samples would otherwise load it again whenever the last request holding it let go (bench/rollout: every
 * request of a shadowed task paid a load, +22 ms, before this). */
static int rollout_candidate_locked(store_registry *r, const store_task *t) {
    store_task *c = NULL;
    return store__rollout_live(store__get_entry(r, t->name), &c) && c == t;
}

/* The decrement of store_task_release with reg->mu held; *et gets the weights to free after the
 * unlock (a listed version that is neither current nor held by a request), d what an eviction took:
 * a version let go while the registry is over its budget (its loads could not evict what requests
 * held) makes room now, not at the next load. Returns the count left. */
static int release_locked(store_registry *r, store_task *t, eng_task **et, detached *d) {
    int left = atomic_fetch_sub(&t->refs, 1) - 1;
    *et = NULL;
    if (left == 1 && atomic_load(&t->listed) && !t->current && !t->loading && atomic_load(&t->task) &&
        !rollout_candidate_locked(r, t)) {
        *et = atomic_load(&t->task);
        atomic_store(&t->task, NULL);
        r->resident_bytes -= t->bytes;
        r->st.unloads++;
    }
    if (left == 1 && r->p.memory_budget && r->resident_bytes > r->p.memory_budget) store__evict_locked(r, NULL, d);
    assert(left >= 0 && "store_task released below zero");
    return left;
}

void store_task_release(store_task *t) {
    if (!t) return;
    store_registry *r = t->reg;
    int left;
    eng_task *et = NULL;
    detached d = {0};
    if (!atomic_load(&t->listed)) {
        left = atomic_fetch_sub(&t->refs, 1) - 1;
        assert(left >= 0 && "store_task released below zero");
    } else {
        pthread_mutex_lock(&r->mu);
        left = release_locked(r, t, &et, &d);
        pthread_mutex_unlock(&r->mu);
    }
    eng_task_free(et);
    store__free_detached(&d);
    if (left == 0) store__task_destroy(t);
}

/* Every reference dropped under one lock; weights and versions freed after it. Releasing one by
 * one (store_task_release, then free) is equally correct, only n lock round trips. */
void store_tasks_release(store_task **v, int n) {
    if (!v) return;
    store_registry *r = n > 0 ? v[0]->reg : NULL;
    void **scratch = (void **)&v[n]; /* n slots past the references (see store_tasks_acquire) */
    detached d = {0};
    if (r) pthread_mutex_lock(&r->mu);
    for (int i = 0; i < n; i++) {
        eng_task *et = NULL;
        int left = release_locked(r, v[i], &et, &d);
        scratch[i] = et;
        if (left) v[i] = NULL; /* v[i] left set: the last reference, destroyed below */
    }
    if (r) pthread_mutex_unlock(&r->mu);
    store__free_detached(&d);
    for (int i = 0; i < n; i++) {
        eng_task_free(scratch[i]);
        if (v[i]) store__task_destroy(v[i]);
    }
    free(v);
}

/* ---- a load that fails after start-up ---- */

/* A listed version whose weights failed to load after start-up (with a budget, start-up reads only
 * metadata) is treated as start-up treats it: unlisted and recorded as failed with its reason;
 * when it was current, the newest remaining version stands in (loaded on its first use, and
 * handled the same way if it fails too) and says so (store_task_fallback). The state file still
 * names the failed version, as after a start-up fallback: only an admin change rewrites it. */
static void fail_listed(store_registry *r, store_task *t, const char *why) {
    pthread_mutex_lock(&r->mu);
    store_entry *e = atomic_load(&t->listed) ? store__get_entry(r, t->name) : NULL;
    int k = 0;
    while (e && k < e->n && e->v[k] != t) k++;
    if (!e || k == e->n) { /* already unlisted: deleted, replaced, or failed in another thread */
        pthread_mutex_unlock(&r->mu);
        return;
    }
    int was_current = e->cur == t;
    store__broken_add_locked(r, t->name, t->version, why);
    store__unlist_locked(r, e, t);
    store_task *nt = NULL;
    if (was_current && e->n) {
        nt = e->v[e->n - 1];
        e->cur = nt;
        nt->current = 1;
        /* the strings are written once and live until destroy (a reader may hold them): a version
         * that stood in for another one before says so only if it is the same one again */
        if (!nt->fb_from && (nt->fb_from = strdup(t->version)) && !(nt->fb_why = store__registry_relative(r, why))) {
            free(nt->fb_from);
            nt->fb_from = NULL;
        }
        atomic_store(&nt->fb_active, nt->fb_from && !strcmp(nt->fb_from, t->version));
    }
    int dropped = was_current && !e->n;
    if (dropped) store__drop_entry_locked(r, e);
    pthread_mutex_unlock(&r->mu);
    if (nt)
        fprintf(stderr, "adapterd: task %s: version %s should be current but did not load; serving version %s\n", t->name,
                t->version, nt->version);
    else if (dropped)
        fprintf(stderr, "adapterd: task %s has no version that loads; not served (its versions list why)\n", t->name);
    else fprintf(stderr, "adapterd: task %s version %s did not load; listed as failed\n", t->name, t->version);
    if (dropped) store__entry_free(e);
    store_task_release(t); /* the listing's reference; the caller still holds its own */
}

int store_task_ensure(store_registry *r, store_task *t, eng_err *err) {
    int rc = store__ensure_loaded(r, t, err);
    if (rc && rc != ENG_NO_MEMORY) fail_listed(r, t, err->msg);
    return rc;
}

/* Bytes as a short figure for messages: "41 KB", "12.5 MB". */
static void human(char *buf, size_t n, size_t b) {
    if (b >= (size_t)10 << 20) snprintf(buf, n, "%zu MB", b >> 20);
    else if (b >= (size_t)1 << 20) snprintf(buf, n, "%.1f MB", (double)b / (1 << 20));
    else snprintf(buf, n, "%zu KB", (b + 1023) >> 10);
}

/* A request's tasks are held together until it is answered, so none of them can be evicted for
 * another: with a budget, their weights together must fit it. Each task's size is known from its
 * last load, or once loaded here; the set is refused as soon as its known sizes pass the budget
 * (so it overshoots by one task's load at most), before the rest is loaded. One task alone may
 * exceed the budget (it evicts everything it can and is served, as store_task_ensure does). */
int store_tasks_ensure(store_registry *r, store_task *const *v, int n, int *failed, eng_err *err) {
    size_t budget = r->p.memory_budget, sum = 0;
    if (failed) *failed = -1;
    for (int i = 0; i < n; i++) {
        size_t known = store_task_bytes(v[i]), need = sum + known;
        int rc = budget && n > 1 && need > budget ? ENG_LIMIT : store_task_ensure(r, v[i], err);
        if (!rc) need = sum += store_task_bytes(v[i]);
        if (!rc && budget && n > 1 && sum > budget) rc = ENG_LIMIT;
        if (rc == ENG_LIMIT) {
            char have[32], took[32];
            human(have, sizeof have, budget);
            human(took, sizeof took, need);
            eng_err_set(err, ENG_LIMIT,
                        "these %d tasks need more than the adapter memory (--adapter-memory %s): the first %d of them "
                        "(up to task %s) already take %s; send fewer tasks per request or raise the budget",
                        n, have, i + 1, store_task_name(v[i]), took);
        }
        if (rc) {
            if (failed) *failed = i;
            return rc;
        }
    }
    return 0;
}
