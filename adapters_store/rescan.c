/* rescan.c - store_rescan and store_rescan_tasks: what changed on disk since the last look
 * (versions dropped in by hand, task folders removed, a state file another replica wrote) applied
 * to the table.
 *
 * At scale. The full rescan stats every version folder (fingerprints): 0.5 s of CPU and 4 s of wall
 * time at 10,000 tasks. So it takes admin_mu task by task (an upload waits for one task's check,
 * never the registry's), and the server runs it only periodically, off its loop; what file events
 * name goes through store_rescan_tasks, which looks at those folders only and follows a changed state
 * file for every task in memory (state_gen says whether it changed: a stat, not a parse).
 *
 * The last part: it uses every other one (a version found here is validated and listed as an
 * upload is, versions.c) and nothing calls into it but the server's watcher. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- rescan (directory watch) ---- */

/* Unlists the versions of task name whose folder is gone (another writer deleted them), the
 * current one last: when it went too, the highest of the others is current (loaded on first use).
 *
 * The folders are checked outside reg->mu, which every request takes to find its task (a network
 * file system may take long over a stat): the versions' folders are copied under the lock, checked
 * without it, and what is gone is unlisted under it again if still listed. No reference is taken
 * meanwhile (one would keep the version from being evicted); a version is recognized by its
 * address, which stays its own: admin_mu, held by the caller, keeps out every listing of a new
 * version, and the only other change, a failed load, unlists. */
static void unlist_gone(store_registry *r, const char *name) {
    store_task **v = NULL;
    char **dirs = NULL;
    int nv = 0, nd = 0;
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    int n = e ? e->n : 0;
    if (n && (v = calloc(2 * (size_t)n, sizeof *v)) && (dirs = calloc((size_t)n, sizeof *dirs)))
        for (; nv < n && (dirs[nv] = strdup(e->v[nv]->dir)); nv++) v[nv] = e->v[nv];
    pthread_mutex_unlock(&r->mu);
    store_task **gone = v ? v + n : NULL; /* the second half: those whose folder is gone */
    int ng = 0;
    for (int k = 0; k < nv; k++)
        if (!store__dir_exists(dirs[k])) gone[ng++] = v[k];
    store__free_strs(dirs, nv);
    detached d = {0};
    if (ng) {
        pthread_mutex_lock(&r->mu);
        e = store__get_entry(r, name);
        store_task *cur_gone = NULL;
        for (int k = 0; e && k < ng; k++) {
            store_task *t = gone[k];
            int listed = 0;
            for (int i = 0; i < e->n && !listed; i++) listed = e->v[i] == t;
            if (!listed) continue;
            if (t == e->cur) cur_gone = t;
            else store__unlist_locked(r, e, t), gone[nd++] = t;
        }
        if (cur_gone && e->n > 1) {
            store_task *next = e->v[e->n - 1] == cur_gone ? e->v[e->n - 2] : e->v[e->n - 1];
            store__set_current_locked(r, e, next, &d);
        }
        if (cur_gone) store__unlist_locked(r, e, cur_gone), gone[nd++] = cur_gone;
        pthread_mutex_unlock(&r->mu);
    }
    store__free_detached(&d);
    for (int k = 0; k < nd; k++) { /* unlisted: their listing's references are ours to drop */
        store__log(r, "task %s version %s: its directory is gone; unlisted", name, gone[k]->version);
        store_task_release(gone[k]);
    }
    free(v);
}

/* Follows what other writers did for task name: versions whose directory is gone are unlisted
 * (check_disk: a stat of each), and the current version and pin are set from the state file by
 * rule_current. A new current version is loaded (validated) before it is served; one that does not
 * load leaves the task as it was. admin_mu held. */
static void follow_one(store_registry *r, const state_doc *root, const char *name, int check_disk) {
    state_task st = store__state_of(root, name);
    char want[32] = "";
    if (check_disk) unlist_gone(r, name);
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    if (e) {
        e->admin_pinned = st.pinned;
        e->rollout = st.rollout; /* another replica's rollout, promotion or abort */
        store_task *t = store__rule_current(e, &st);
        if (t && t != e->cur) snprintf(want, sizeof want, "%s", t->version);
    }
    pthread_mutex_unlock(&r->mu);
    if (!want[0]) return;
    store_task *t = store_task_acquire_version(r, name, want);
    eng_err e2 = {0};
    if (t && store_task_ensure(r, t, &e2) == 0) {
        detached d = {0};
        pthread_mutex_lock(&r->mu);
        e = store__get_entry(r, name);
        if (e && atomic_load(&t->listed)) store__set_current_locked(r, e, t, &d);
        pthread_mutex_unlock(&r->mu);
        store__free_detached(&d);
        store__log(r, "task %s: version %s is current (registry state)", name, want);
    } else if (t) {
        fprintf(stderr, "adapterd: task %s version %s named by the registry state does not load: %s\n", name, want, e2.msg);
    }
    store_task_release(t);
}

/* The walk's pacing (store_rescan_paced): step() after each step of a full rescan, pausing after
 * every slice of them with no lock held; nonzero once pause asked to stop. */
typedef struct {
    int slice, steps, stop;
    int (*pause)(void *ctx);
    void *ctx;
} pacer;

static int step(pacer *p) {
    if (!p || p->stop) return p ? p->stop : 0;
    if (p->slice > 0 && p->pause && ++p->steps % p->slice == 0) p->stop = p->pause(p->ctx) != 0;
    return p->stop;
}

/* Every task follows the state file as it is now (follow_one, check_disk as given), admin_mu taken
 * and released per task so that uploads and admin calls wait for one task at most, never for all. */
static void follow_all(store_registry *r, int check_disk, pacer *p) {
    char **names = NULL;
    int n = store_task_names(r, &names);
    /* the file read once: between two turns only this process's writers change r->state, in place
     * (another process's change is a change of the file, followed next time) */
    pthread_mutex_lock(&r->admin_mu);
    int readable = store__state_load(r) != NULL;
    r->state_followed = r->state_gen;
    pthread_mutex_unlock(&r->admin_mu);
    for (int i = 0; readable && i < n && !step(p); i++) {
        pthread_mutex_lock(&r->admin_mu);
        follow_one(r, &r->state, names[i], check_disk);
        pthread_mutex_unlock(&r->admin_mu);
    }
    store__free_strs(names, n > 0 ? n : 0);
}

/* Failed versions whose folder was removed by hand are no longer listed: their keys copied under
 * reg->mu, the folders checked without it, the records of those gone dropped under it again. Only
 * task only's when it is not NULL. */
static void forget_gone_failures(store_registry *r, const char *only) {
    pthread_mutex_lock(&r->mu);
    int nb = r->n_broken, n = 0;
    char **keys = calloc(2 * (size_t)nb + 1, sizeof *keys); /* name, version pairs */
    for (int i = 0; keys && i < nb; i++) {
        if (only && strcmp(only, r->broken[i].name)) continue;
        if (!(keys[n] = strdup(r->broken[i].name)) || !(keys[n + 1] = strdup(r->broken[i].version))) {
            n += !!keys[n];
            break;
        }
        n += 2;
    }
    pthread_mutex_unlock(&r->mu);
    if (!keys) return;
    char vdir[PATH_MAX];
    for (int i = 0; i + 1 < n; i += 2) {
        store__pathf(vdir, sizeof vdir, "%s/tasks/%s/%s", r->dir, keys[i], keys[i + 1]);
        if (store__dir_exists(vdir)) continue;
        pthread_mutex_lock(&r->mu);
        store__broken_remove_locked(r, keys[i], keys[i + 1]);
        pthread_mutex_unlock(&r->mu);
    }
    store__free_strs(keys, n);
}

/* The version folders of task name (its folder tdir): new ones validated and listed (current when
 * numbered above the current one and above what the state file has seen), files changed inside
 * listed ones reported once, misnamed ones recorded as failed. admin_mu held. Returns the versions
 * added. */
static int scan_task(store_registry *r, const state_doc *state, const char *name, const char *tdir) {
    char vdir[PATH_MAX];
    int added = 0;
    /* copied: the state writes below change the doc */
    state_task st = store__state_of(state, name);
    int st_current = st.current != NULL;
    long st_max = st.max;
    char **vers = NULL;
    int nv = store__list_subdirs(tdir, &vers, NULL);
    for (int k = 0; k < nv; k++) {
        long vn = store__version_number(vers[k]);
        if (store__version_noncanonical(vers[k])) {
            store__pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[k]);
            if (!store__bad_seen(r, name, vers[k], store__fingerprint(vdir), 1)) {
                char why[128];
                store__pathf(why, sizeof why, "version folder name \"%.40s\" has a leading zero (name it %ld)", vers[k],
                             strtol(vers[k], NULL, 10));
                fprintf(stderr, "adapterd: task %s version %s rejected: %s\n", name, vers[k], why);
                store__broken_add(r, name, vers[k], why);
            }
            continue;
        }
        if (vn < 0 || store__tomb_index(r, name, vers[k]) >= 0) continue;
        pthread_mutex_lock(&r->mu);
        store_entry *e = store__get_entry(r, name);
        store_task *known = store__find_version(e, vers[k]);
        /* copied under the lock: a failed load may unlist (and free) it meanwhile; a reference
         * for its fingerprint's remembered walk (only rescans use it, under admin_mu) */
        uint64_t known_fp = known ? known->fingerprint : 0;
        int reported = known && known->changed_reported;
        long curv = e && e->cur ? e->cur->vnum : -1;
        if (known && !reported) store__task_retain(known);
        pthread_mutex_unlock(&r->mu);
        store__pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[k]);
        if (known) {
            /* immutable: report a change once, never reload it */
            if (reported) continue;
            int same = store__fingerprint_cached(vdir, &known->fpc) == known_fp;
            store_task_release(known);
            if (same) continue;
            pthread_mutex_lock(&r->mu);
            known = store__find_version(store__get_entry(r, name), vers[k]);
            if (known && !known->changed_reported) known->changed_reported = 1, r->st.changed++;
            else known = NULL;
            pthread_mutex_unlock(&r->mu);
            if (known)
                fprintf(stderr, "adapterd: task %s version %s changed on disk; versions are immutable, it is not "
                                "reloaded (upload a new version)\n", name, vers[k]);
            continue;
        }
        uint64_t fp = store__fingerprint(vdir);
        if (store__bad_seen(r, name, vers[k], fp, 0)) continue;
        store_task *t = NULL;
        eng_task *et = NULL;
        double dt = 0;
        eng_err e2 = {0};
        if (store__meta_read(r, name, vers[k], vdir, &t, &e2) || store__validate(r, t, &et, &dt, &e2)) {
            fprintf(stderr, "adapterd: task %s version %s rejected: %s\n", name, vers[k], e2.msg);
            if (t) store__task_destroy(t);
            store__bad_seen(r, name, vers[k], fp, 1);
            store__broken_add(r, name, vers[k], e2.msg);
            continue;
        }
        /* above the current one and above what the state file had seen (rule_current) */
        int make_current = vn > curv && (!st_current || vn > st_max);
        /* the state file first, as for an upload, and only if no writer recorded this number
         * as not current meanwhile; if it cannot be written the version is listed, not current */
        int skipped = 0;
        state_change c = store__state_change(name);
        c.current = vers[k], c.only_if_above = vn;
        if (make_current && store__state_write(r, &c, &skipped, &e2)) {
            fprintf(stderr, "adapterd: task %s version %s: %s; listed, not made current\n", name, vers[k], e2.msg);
            make_current = curv < 0;
        } else if (skipped) {
            make_current = curv < 0;
        }
        if (store__list_validated(r, t, et, dt, make_current, &e2) == 0) {
            added++;
            store__log(r, "task %s version %s loaded from the registry directory%s", name, vers[k],
                       make_current ? " and is current" : "");
        }
    }
    store__free_strs(vers, nv);
    return added;
}

/* Task name's folder is gone (removed by hand): its entry is dropped; requests in flight finish on
 * what they hold. admin_mu held. */
static void drop_task(store_registry *r, const char *name) {
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    if (e) store__drop_entry_locked(r, e);
    while (e && e->n) {
        store_task *t = e->v[0];
        store__unlist_locked(r, e, t);
        pthread_mutex_unlock(&r->mu);
        store_task_release(t);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    if (e) {
        store__entry_free(e);
        store__log(r, "task %s: its directory is gone; dropped", name);
    }
}

/* One task folder looked at again (rescan_tasks and the full rescan's first pass): scanned when it is
 * there, dropped when it is gone. admin_mu taken for this task only. */
static int rescan_one(store_registry *r, const char *name, int follow, int reload) {
    char tdir[PATH_MAX];
    store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    int added = 0;
    pthread_mutex_lock(&r->admin_mu);
    /* looked at under admin_mu: an upload creating the folder (or a deletion removing it) is either
     * wholly before or wholly after (outside it, a folder seen gone before an upload made it again
     * would drop the upload's new task) */
    int there = store__dir_exists(tdir);
    /* r->state: the file as last read or written (reload: a stat, read again if another writer
     * changed it); NULL when unreadable */
    const state_doc *state = reload || !r->state_known ? store__state_load(r) : &r->state;
    if (there) added = scan_task(r, state, name, tdir);
    else drop_task(r, name);
    if (follow) {
        forget_gone_failures(r, name);
        /* read again: this task's own writes, and other writers' since it began */
        if (there && (state = store__state_load(r))) follow_one(r, state, name, 1);
    }
    pthread_mutex_unlock(&r->admin_mu);
    return added;
}

/* The full rescan. Every task is looked at in its own turn of admin_mu: an upload, an activation or
 * a rescan of the tasks file events named waits for one task's check, not for the whole registry's
 * (3.9 s at 10,000 tasks, during which every upload waited). Paced (store_rescan_paced), it also
 * stops between slices of steps with no lock held: its ~18 stats a task (0.57 s of CPU at 10,000
 * tasks, measured) come in bursts of a slice, never one long one that the engine's threads would compete with
 * on a small host (issue 41). */
static int rescan_all(store_registry *r, pacer *p, eng_err *err) {
    char tasks[PATH_MAX];
    store__pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
    char **names = NULL;
    int n = store__list_subdirs(tasks, &names, err), added = 0;
    if (n < 0) return n;
    for (int i = 0, first = 1; i < n && !step(p); i++)
        if (store__valid_name(names[i])) added += rescan_one(r, names[i], 0, first), first = 0;
    store__free_strs(names, n);
    /* task directories removed by hand: drop them */
    char **known = NULL;
    int nk = store_task_names(r, &known);
    for (int i = 0; i < nk && !step(p); i++) {
        char tdir[PATH_MAX];
        store__pathf(tdir, sizeof tdir, "%s/%s", tasks, known[i]);
        if (store__dir_exists(tdir)) continue;
        pthread_mutex_lock(&r->admin_mu);
        if (!store__dir_exists(tdir)) drop_task(r, known[i]); /* again under admin_mu: an upload may have made it */
        pthread_mutex_unlock(&r->admin_mu);
    }
    store__free_strs(known, nk > 0 ? nk : 0);
    if (step(p)) return added;
    pthread_mutex_lock(&r->admin_mu);
    forget_gone_failures(r, NULL);
    pthread_mutex_unlock(&r->admin_mu);
    follow_all(r, 1, p);
    return added;
}

int store_rescan(store_registry *r, eng_err *err) { return rescan_all(r, NULL, err); }

int store_rescan_paced(store_registry *r, int slice, int (*pause)(void *ctx), void *ctx, eng_err *err) {
    pacer p = {.slice = slice, .pause = pause, .ctx = ctx};
    return rescan_all(r, slice > 0 && pause ? &p : NULL, err);
}

int store_rescan_tasks(store_registry *r, char *const *names, int n, eng_err *err) {
    (void)err;
    int added = 0;
    for (int i = 0; i < n; i++)
        if (names[i] && store__valid_name(names[i])) added += rescan_one(r, names[i], 1, 1);
    /* another writer changed the state file: every task follows it, in memory (its folders are the
     * full rescan's to check) */
    pthread_mutex_lock(&r->admin_mu);
    int changed = store__state_load(r) && r->state_gen != r->state_followed;
    pthread_mutex_unlock(&r->admin_mu);
    if (changed) follow_all(r, 0, NULL);
    return added;
}
