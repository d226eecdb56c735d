/* versions.c - the admin's changes: add (upload), activate, delete a version or a task, pin,
 * unload. All serialized by admin_mu; each is on disk before it is visible.
 *
 * Crash consistency. The disk is the truth a restart reads, so every change reaches it before the
 * change is visible or acknowledged, in an order where a kill at any point leaves either the old
 * or the new registry: an upload's files and folders are fsynced, the folder is renamed into
 * place and its parent fsynced; then the state file (which records every task's current version,
 * not only activations) is rewritten (tmp, fsync, rename, fsync of the folder); only then does
 * the table change. While the task has a current version, the state file is also written before
 * the rename, naming that version with a max covering the new number, so a kill between the
 * rename and the final state write leaves a listed, not current version, which is what the client
 * was not yet told otherwise. What a kill leaves half done (staging and deletion folders, the
 * state file's temporary) is swept at the next start (disk.c).
 *
 * Depends on disk, meta, table, residency and state; rescan.c uses its validate/list pair. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- version management ---- */

/* Records task name in the state file as this process serves it. */
static int record_as_served(store_registry *r, const char *name, eng_err *err) {
    state_change c = store__state_change(name);
    return store__state_write(r, &c, NULL, err);
}

/* A deletion whose state write was refused (ENG_UNAVAILABLE: the state could not be read) has
 * already removed its folder: its answer says so instead of the writer's "nothing changed". */
static int deleted_unrecorded(int rc, eng_err *err, const char *name, const char *version) {
    if (rc != ENG_UNAVAILABLE || !err) return rc;
    char why[ENG_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", err->msg);
    char *cut = strstr(why, "; nothing changed");
    if (cut) *cut = '\0';
    return eng_err_set(err, rc, "task %s%s%s was deleted, but %s; a later change of the task records it", name,
                       version ? " version " : "", version ? version : "", why);
}

/* Loads t (unlisted) to validate it; returns 0 and the weights in *et. */
int store__validate(store_registry *r, store_task *t, eng_task **et, double *dt, eng_err *err) {
    double t0 = store__now_s();
    int rc = store__weights_load(t, et, err);
    *dt = store__now_s() - t0;
    if (rc) {
        pthread_mutex_lock(&r->mu);
        r->st.load_failures++;
        pthread_mutex_unlock(&r->mu);
    }
    return rc;
}

/* Lists validated t (with its weights et) under task name; makes it current when asked or when
 * the task has none. Consumes t and et. */
int store__list_validated(store_registry *r, store_task *t, eng_task *et, double dt, int make_current, eng_err *err) {
    detached d = {0};
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__make_entry(r, t->name);
    if (!e || store__add_version_locked(e, t)) {
        pthread_mutex_unlock(&r->mu);
        eng_task_free(et);
        store__task_destroy(t);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    store__publish_locked(r, t, et, dt);
    store__broken_remove_locked(r, t->name, t->version);
    if (make_current || !e->cur) {
        store__set_current_locked(r, e, t, &d);
    } else {
        store__detach_locked(r, t, &d); /* validated, not served: no reason to keep it */
    }
    store__evict_locked(r, t, &d);
    pthread_mutex_unlock(&r->mu);
    store__free_detached(&d);
    return 0;
}

int store__version_check(store_registry *r, const char *name, const char *vdir, const char *task_json, size_t len,
                         eng_err *err) {
    store_task *t = NULL;
    eng_task *et = NULL;
    double dt = 0;
    const char *slash = strrchr(vdir, '/'), *version = slash ? slash + 1 : vdir;
    int rc = task_json ? store__meta_parse(r, name, version, vdir, task_json, len, &t, err)
                       : store__meta_read(r, name, version, vdir, &t, err);
    if (!rc) rc = store__validate(r, t, &et, &dt, err);
    eng_task_free(et);
    if (t) store__task_destroy(t);
    pthread_mutex_lock(&r->mu);
    if (rc) store__broken_add_locked(r, name, version, err->msg);
    else store__broken_remove_locked(r, name, version);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int store_version_add(store_registry *r, const char *name, const char *version, const char *staged, int activate,
                      eng_err *err) {
    if (!store__valid_name(name)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "task name \"%.100s\" must be 1..128 of [A-Za-z0-9._-], not starting with '.'", name);
    if (store__version_noncanonical(version))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "version \"%.40s\" has a leading zero; version names are plain numbers (%ld)",
                           version, strtol(version, NULL, 10));
    if (store__version_number(version) < 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "version \"%.40s\" must be a number", version);
    pthread_mutex_lock(&r->admin_mu);
    char tdir[PATH_MAX], vdir[PATH_MAX];
    store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    store__pathf(vdir, sizeof vdir, "%s/%s", tdir, version);
    store_task *t = NULL;
    eng_task *et = NULL;
    double dt = 0;
    int rc;
    pthread_mutex_lock(&r->mu);
    int exists = store__find_version(store__get_entry(r, name), version) != NULL;
    pthread_mutex_unlock(&r->mu);
    if (exists || access(vdir, F_OK) == 0) {
        rc = eng_err_set(err, ENG_CONFLICT, "task %s version %s exists; versions are immutable (upload a new number)",
                         name, version);
        goto done;
    }
    if ((rc = store__meta_read(r, name, version, staged, &t, err))) goto done;
    if ((rc = store__validate(r, t, &et, &dt, err))) goto done;
    /* durable before published: the files, then the rename, then the state file, then the table */
    if (store__sync_tree(staged)) {
        int e = errno;
        rc = eng_err_set(err, store__io_status(e), "cannot write task %s version %s to disk (%s)", name, version, strerror(e));
        goto done;
    }
    pthread_mutex_lock(&r->mu);
    store_entry *en = store__get_entry(r, name);
    int had_cur = en && en->cur, becomes_current = activate || !had_cur;
    pthread_mutex_unlock(&r->mu);
    /* While the task has a current version, the state names it, with a max covering the new
     * number, before the number appears: replicas that see the version keep serving the current
     * one (rule_current), and so does a restart after a kill before the state names the new one. */
    state_change before = store__state_change(name);
    before.extra_max = store__version_number(version);
    if (had_cur && (rc = store__state_write(r, &before, NULL, err))) goto done;
    int made = 0;
    if (!eng_dir_exists(tdir)) {
        if (mkdir(tdir, 0755) && errno != EEXIST) {
            int e = errno;
            rc = eng_err_set(err, store__io_status(e), "cannot create the folder of task %s (%s)", name, strerror(e));
            goto done;
        }
        made = 1;
        char tasks[PATH_MAX];
        store__pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
        store__fsync_path(tasks, 1);
    }
    if (rename(staged, vdir) || store__fsync_path(tdir, 1)) {
        int e = errno;
        rename(vdir, staged); /* nothing may stay published that the client is told failed */
        if (made) rmdir(tdir);
        rc = eng_err_set(err, store__io_status(e), "cannot publish task %s version %s (%s)", name, version, strerror(e));
        if (had_cur) record_as_served(r, name, NULL);
        goto done;
    }
    int ti = store__tomb_index(r, name, version);
    if (ti >= 0) {
        free(r->tombs[ti]);
        r->tombs[ti] = r->tombs[--r->n_tombs];
    }
    state_change after = store__state_change(name);
    if (becomes_current) after.current = version;
    if ((rc = store__state_write(r, &after, NULL, err))) {
        if (rename(vdir, staged)) store__log(r, "task %s version %s: cannot take it back (%s)", name, version, strerror(errno));
        if (made) rmdir(tdir);
        store__fsync_path(tdir, 1);
        if (had_cur) record_as_served(r, name, NULL);
        goto done;
    }
    free(t->dir);
    if (!(t->dir = strdup(vdir))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    store__fp_cache_free(t->fpc), t->fpc = NULL; /* walked in staging: paths are relative, identities the same */
    t->fingerprint = store__fingerprint_cached(vdir, &t->fpc);
    rc = store__list_validated(r, t, et, dt, becomes_current, err);
    t = NULL, et = NULL;
    store__log(r, "task %s version %s added%s", name, version, becomes_current ? " and current" : "");
done:
    pthread_mutex_unlock(&r->admin_mu);
    eng_task_free(et);
    if (t) store__task_destroy(t);
    return rc;
}

int store_activate(store_registry *r, const char *name, const char *version, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    store_task *t = store_task_acquire_version(r, name, version);
    int rc;
    if (!t) {
        rc = eng_err_set(err, ENG_NOT_FOUND, "task %.100s has no version %.40s (GET /v1/tasks/%.100s/versions)", name,
                         version, name);
        goto done;
    }
    /* the reference keeps it resident between the load and the switch */
    if ((rc = store_task_ensure(r, t, err))) goto done;
    /* the disk first: a restart after the answer must find this version current */
    state_change c = store__state_change(name);
    c.current = version;
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    int ends = e && e->rollout.mode != STORE_ROLLOUT_NONE && !strcmp(e->rollout.version, version);
    pthread_mutex_unlock(&r->mu);
    store_rollout none = {0};
    if (ends) c.rollout = &none; /* the candidate made current: its rollout is over */
    if ((rc = store__state_write(r, &c, NULL, err))) goto done;
    detached d = {0};
    pthread_mutex_lock(&r->mu);
    e = store__get_entry(r, name);
    if (e && atomic_load(&t->listed)) store__set_current_locked(r, e, t, &d);
    if (e && ends) e->rollout = none;
    pthread_mutex_unlock(&r->mu);
    store__free_detached(&d);
    store__log(r, "task %s: version %s is current", name, version);
done:
    store_task_release(t);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

/* Moves dir aside (hidden, so a watch ignores it) and removes it. Returns 0 or -1. */
static int remove_dir(store_registry *r, const char *dir, const char *hide_in) {
    static atomic_int seq;
    char aside[PATH_MAX];
    store__pathf(aside, sizeof aside, "%s/.deleted-%d-%d", hide_in, (int)getpid(), atomic_fetch_add(&seq, 1));
    if (rename(dir, aside)) return errno == ENOENT ? 0 : -1;
    store__fsync_path(hide_in, 1); /* the deletion is durable before it is acknowledged; a kill leaves `aside`, swept at start */
    if (store_remove_dir(aside)) store__log(r, "%s: could not remove everything (%s)", aside, strerror(errno));
    return 0;
}

static void add_tomb(store_registry *r, const char *name, const char *version) {
    char key[300];
    store__pathf(key, sizeof key, "%s/%s", name, version);
    char **nt = realloc(r->tombs, (size_t)(r->n_tombs + 1) * sizeof *nt);
    if (!nt) return;
    r->tombs = nt;
    if ((r->tombs[r->n_tombs] = strdup(key))) r->n_tombs++;
}

/* Deletes a version listed as failed: its folder and its record. admin_mu held; 1 when it was one. */
static int delete_broken(store_registry *r, const char *name, const char *version, eng_err *err, int *rc) {
    pthread_mutex_lock(&r->mu);
    int b = store__broken_find(r, name, version);
    pthread_mutex_unlock(&r->mu);
    if (b < 0) return 0;
    char tdir[PATH_MAX], vdir[PATH_MAX];
    store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    store__pathf(vdir, sizeof vdir, "%s/%s", tdir, version);
    if (remove_dir(r, vdir, tdir)) {
        *rc = eng_err_set(err, store__io_status(errno), "cannot remove task %s version %s (%s)", name, version, strerror(errno));
        return 1;
    }
    pthread_mutex_lock(&r->mu);
    store__broken_remove_locked(r, name, version);
    int listed = store__get_entry(r, name) != NULL;
    pthread_mutex_unlock(&r->mu);
    if (!listed && rmdir(tdir) == 0) { /* its last folder */
        char tasks[PATH_MAX];
        store__pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
        store__fsync_path(tasks, 1);
    }
    store__log(r, "task %s version %s (failed) deleted", name, version);
    *rc = 0;
    return 1;
}

int store_delete_version(store_registry *r, const char *name, const char *version, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    int rc = 0, whole = 0;
    if (delete_broken(r, name, version, err, &rc)) {
        pthread_mutex_unlock(&r->admin_mu);
        return rc;
    }
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    store_task *t = store__find_version(e, version);
    if (!t) rc = eng_err_set(err, ENG_NOT_FOUND, "task %.100s has no version %.40s", name, version);
    else if (t == e->cur && e->n > 1)
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT,
                         "version %s is task %s's current version; activate another first (or DELETE /v1/tasks/%s)",
                         version, name, name);
    else whole = e->n == 1;
    pthread_mutex_unlock(&r->mu);
    if (rc || whole) {
        pthread_mutex_unlock(&r->admin_mu);
        return rc ? rc : store_delete_task(r, name, err);
    }
    char tdir[PATH_MAX];
    store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    if (remove_dir(r, t->dir, tdir)) add_tomb(r, name, version);
    pthread_mutex_lock(&r->mu);
    store__unlist_locked(r, e, t);
    if (e->rollout.mode != STORE_ROLLOUT_NONE && !strcmp(e->rollout.version, version))
        e->rollout = (store_rollout){0}; /* deleting the candidate ends its rollout (recorded below) */
    pthread_mutex_unlock(&r->mu);
    store_task_release(t);
    store__log(r, "task %s version %s deleted", name, version);
    rc = deleted_unrecorded(record_as_served(r, name, err), err, name, version);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

int store_delete_task(store_registry *r, const char *name, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    if (e) store__drop_entry_locked(r, e);
    int had_broken = 0;
    for (int i = 0; i < r->n_broken; i++) had_broken |= !strcmp(r->broken[i].name, name);
    store__broken_remove_locked(r, name, NULL);
    pthread_mutex_unlock(&r->mu);
    if (!e && !had_broken) {
        pthread_mutex_unlock(&r->admin_mu);
        return eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    }
    char tdir[PATH_MAX], tasks[PATH_MAX];
    store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    store__pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
    int gone = remove_dir(r, tdir, tasks) == 0;
    pthread_mutex_lock(&r->mu);
    while (e && e->n) {
        store_task *t = e->v[0];
        if (!gone) add_tomb(r, name, t->version);
        store__unlist_locked(r, e, t);
        pthread_mutex_unlock(&r->mu);
        store_task_release(t);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    if (e) store__entry_free(e);
    store__log(r, "task %s deleted", name);
    int rc = deleted_unrecorded(record_as_served(r, name, err), err, name, NULL);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

int store_pin(store_registry *r, const char *name, int pinned, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    int was = e && e->admin_pinned;
    if (e) e->admin_pinned = pinned;
    store_task *t = e ? store__take(r, e->cur) : NULL;
    pthread_mutex_unlock(&r->mu);
    int rc = 0;
    if (!e) rc = eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    else if (t) rc = store_task_ensure(r, t, err);
    store_task_release(t);
    if (!rc && (rc = record_as_served(r, name, err))) {
        /* not on disk: not in memory either (the entry stays while admin_mu is held) */
        pthread_mutex_lock(&r->mu);
        if ((e = store__get_entry(r, name))) e->admin_pinned = was;
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

int store_unload(store_registry *r, const char *name, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    detached d = {0};
    int rc = 0, was_pinned = 0;
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    if (!e) rc = eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    else {
        was_pinned = e->admin_pinned;
        e->admin_pinned = 0;
        if (e->cur && atomic_load(&e->cur->refs) == 1 && !e->cur->loading) store__detach_locked(r, e->cur, &d);
        if (d.n) r->st.evictions++;
    }
    pthread_mutex_unlock(&r->mu);
    store__free_detached(&d);
    if (!rc && was_pinned) rc = record_as_served(r, name, err);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

/* ---- rollouts ---- */

int store_rollout_start(store_registry *r, const char *name, const store_rollout *ro, eng_err *err) {
    if (ro->mode != STORE_ROLLOUT_CANARY && ro->mode != STORE_ROLLOUT_SHADOW)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "a rollout's mode is \"canary\" or \"shadow\"");
    if (!(ro->percent >= 0 && ro->percent <= 100))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"percent\" %g is outside 0..100", ro->percent);
    if (!(ro->max_share >= 0 && ro->max_share <= 1))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"max_share\" %g is outside 0..1", ro->max_share);
    if (!(ro->promote_agreement >= 0 && ro->promote_agreement <= 1) || !(ro->abort_error_rate >= 0 && ro->abort_error_rate <= 1) ||
        !(ro->abort_latency_ratio >= 0) || ro->promote_after < 0 || ro->rule_min < 0)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "a rule's threshold is out of range (agreement and error rate 0..1, "
                                                      "counts and latency ratio >= 0)");
    pthread_mutex_lock(&r->admin_mu);
    int rc = 0;
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    const store_rollout *live = store__rollout_live(e, NULL);
    int b = e ? store__broken_find(r, name, ro->version) : -1;
    if (!e) rc = eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    else if (live)
        rc = eng_err_set(err, ENG_CONFLICT, "task %s already has a %s rollout of version %s; promote or abort it first "
                         "(POST /v1/tasks/%s:promote or :abort)", name, store_rollout_mode_name(live->mode), live->version, name);
    else if (b >= 0)
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "task %s version %s failed to load (%s); only a version that loads can be "
                         "rolled out", name, ro->version, r->broken[b].reason);
    else if (!(t = store__take(r, store__find_version(e, ro->version))))
        rc = eng_err_set(err, ENG_NOT_FOUND, "task %.100s has no version %.40s (GET /v1/tasks/%.100s/versions)", name,
                         ro->version, name);
    else if (t == e->cur)
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "version %s is task %s's current version; a rollout needs another one",
                         ro->version, name);
    else if (e->cur && store_task_model(t) != store_task_model(e->cur))
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "task %s version %s runs on model %s, the current version on %s: a "
                         "candidate shares the current version's model", name, ro->version, store_model_name(store_task_model(t)),
                         store_model_name(store_task_model(e->cur)));
    pthread_mutex_unlock(&r->mu);
    /* validated before it is recorded: a candidate that does not load is refused, nothing changed */
    eng_err le = {0};
    if (!rc && (rc = store_task_ensure(r, t, &le)) != 0)
        rc = rc == ENG_NO_MEMORY || rc == ENG_LIMIT
                 ? eng_err_set(err, rc, "%s", le.msg)
                 : eng_err_set(err, ENG_INVALID_ARGUMENT, "task %s version %s failed to load (%s); only a version that loads "
                               "can be rolled out", name, ro->version, le.msg);
    if (!rc) {
        store_rollout nr = *ro;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        nr.started = (int64_t)ts.tv_sec;
        nr.id = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)(ts.tv_nsec / 1000);
        if (!nr.max_share) nr.max_share = 0.25;
        state_change c = store__state_change(name);
        c.rollout = &nr;
        if (!(rc = store__state_write(r, &c, NULL, err))) {
            pthread_mutex_lock(&r->mu);
            if ((e = store__get_entry(r, name))) e->rollout = nr;
            pthread_mutex_unlock(&r->mu);
            store__log(r, "task %s: %s rollout of version %s at %g%%", name, store_rollout_mode_name(nr.mode), nr.version,
                       nr.percent);
        }
    }
    store_task_release(t);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

int store_rollout_finish(store_registry *r, const char *name, int promote, uint64_t only_id, store_rollout *ended,
                         eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    int rc = 0;
    store_task *cand = NULL;
    store_rollout was = {0};
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    const store_rollout *live = store__rollout_live(e, &cand);
    if (live) was = *live;
    if (!e) rc = eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    else if (!live || (only_id && live->id != only_id))
        rc = eng_err_set(err, ENG_NOT_FOUND, "task %s has no rollout (POST /v1/tasks/%s:rollout starts one)", name, name);
    else cand = store__take(r, cand);
    pthread_mutex_unlock(&r->mu);
    if (!rc && promote) rc = store_task_ensure(r, cand, err); /* resident before it serves every request */
    if (!rc) {
        store_rollout none = {0};
        state_change c = store__state_change(name);
        c.rollout = &none;
        if (promote) c.current = was.version;
        if (!(rc = store__state_write(r, &c, NULL, err))) {
            detached d = {0};
            pthread_mutex_lock(&r->mu);
            if ((e = store__get_entry(r, name))) {
                e->rollout = none;
                if (promote && atomic_load(&cand->listed)) store__set_current_locked(r, e, cand, &d);
            }
            pthread_mutex_unlock(&r->mu);
            store__free_detached(&d);
            store__log(r, "task %s: rollout of version %s %s", name, was.version, promote ? "promoted: it is current" : "aborted");
        }
    }
    if (!rc && ended) *ended = was;
    store_task_release(cand);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}
