/* rescan.c - store_rescan: what changed on disk since the last look (versions dropped in by
 * hand, task folders removed, a state file another replica wrote) applied to the table.
 *
 * The last part: it uses every other one (a version found here is validated and listed as an
 * upload is, versions.c) and nothing calls into it but the server's watcher. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- rescan (directory watch) ---- */

/* Follows what other writers did: versions whose directory is gone are unlisted, and every task's
 * current version and pin are set from the state file by rule_current. A new current version is
 * loaded (validated) before it is served; one that does not load leaves the task as it was. */
static void follow_state(store_registry *r, json_t *root) {
    char **names = NULL;
    int n = store_task_names(r, &names);
    for (int i = 0; i < n; i++) {
        state_task st = store__state_of(root, names[i]);
        char want[32] = "";
        pthread_mutex_lock(&r->mu);
        store_entry *e = store__get_entry(r, names[i]);
        /* versions deleted by another writer (the current one last: the rule then picks another) */
        for (int k = 0; e && k < e->n;) {
            store_task *t = e->v[k];
            if (eng_dir_exists(t->dir) || (t == e->cur && e->n > 1)) {
                k++;
                continue;
            }
            store__unlist_locked(r, e, t);
            pthread_mutex_unlock(&r->mu);
            store__log(r, "task %s version %s: its directory is gone; unlisted", names[i], t->version);
            store_task_release(t);
            pthread_mutex_lock(&r->mu);
            e = store__get_entry(r, names[i]);
        }
        if (e && e->cur && e->n > 1 && !eng_dir_exists(e->cur->dir)) {
            /* the current one went too: serve the highest of the others (loaded on first use) */
            store_task *gone = e->cur, *next = e->v[e->n - 1] == gone ? e->v[e->n - 2] : e->v[e->n - 1];
            detached d = {0};
            store__set_current_locked(r, e, next, &d);
            store__unlist_locked(r, e, gone);
            pthread_mutex_unlock(&r->mu);
            store__free_detached(&d);
            store__log(r, "task %s version %s: its directory is gone; unlisted", names[i], gone->version);
            store_task_release(gone);
            pthread_mutex_lock(&r->mu);
            e = store__get_entry(r, names[i]);
        }
        if (e) {
            e->admin_pinned = st.pinned;
            store_task *t = store__rule_current(e, &st);
            if (t && t != e->cur) snprintf(want, sizeof want, "%s", t->version);
        }
        pthread_mutex_unlock(&r->mu);
        if (!want[0]) continue;
        store_task *t = store_task_acquire_version(r, names[i], want);
        eng_err e2 = {0};
        if (t && store_task_ensure(r, t, &e2) == 0) {
            detached d = {0};
            pthread_mutex_lock(&r->mu);
            e = store__get_entry(r, names[i]);
            if (e && atomic_load(&t->listed)) store__set_current_locked(r, e, t, &d);
            pthread_mutex_unlock(&r->mu);
            store__free_detached(&d);
            store__log(r, "task %s: version %s is current (registry state)", names[i], want);
        } else if (t) {
            fprintf(stderr, "adapterd: task %s version %s named by the registry state does not load: %s\n", names[i], want,
                    e2.msg);
        }
        store_task_release(t);
    }
    store__free_strs(names, n > 0 ? n : 0);
}

int store_rescan(store_registry *r, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    int state_ok;
    json_t *state = store__state_load(r, &state_ok);
    char tasks[PATH_MAX], tdir[PATH_MAX], vdir[PATH_MAX];
    store__pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
    char **names = NULL;
    int n = store__list_subdirs(tasks, &names, err), added = 0;
    if (n < 0) {
        json_decref(state);
        pthread_mutex_unlock(&r->admin_mu);
        return n;
    }
    for (int i = 0; i < n; i++) {
        if (!store__valid_name(names[i])) continue;
        store__pathf(tdir, sizeof tdir, "%s/%s", tasks, names[i]);
        state_task st = store__state_of(state, names[i]);
        char **vers = NULL;
        int nv = store__list_subdirs(tdir, &vers, NULL);
        for (int k = 0; k < nv; k++) {
            long vn = store__version_number(vers[k]);
            if (store__version_noncanonical(vers[k])) {
                store__pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[k]);
                if (!store__bad_seen(r, names[i], vers[k], store__fingerprint(vdir), 1)) {
                    char why[128];
                    store__pathf(why, sizeof why, "version folder name \"%.40s\" has a leading zero (name it %ld)", vers[k],
                          strtol(vers[k], NULL, 10));
                    fprintf(stderr, "adapterd: task %s version %s rejected: %s\n", names[i], vers[k], why);
                    store__broken_add(r, names[i], vers[k], why);
                }
                continue;
            }
            if (vn < 0 || store__tomb_index(r, names[i], vers[k]) >= 0) continue;
            pthread_mutex_lock(&r->mu);
            store_entry *e = store__get_entry(r, names[i]);
            store_task *known = store__find_version(e, vers[k]);
            long curv = e && e->cur ? e->cur->vnum : -1;
            pthread_mutex_unlock(&r->mu);
            store__pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[k]);
            if (known) {
                /* immutable: report a change once, never reload it */
                uint64_t fp = store__fingerprint(vdir);
                if (fp != known->fingerprint && !known->changed_reported) {
                    known->changed_reported = 1;
                    pthread_mutex_lock(&r->mu);
                    r->st.changed++;
                    pthread_mutex_unlock(&r->mu);
                    fprintf(stderr, "adapterd: task %s version %s changed on disk; versions are immutable, it is not "
                                    "reloaded (upload a new version)\n", names[i], vers[k]);
                }
                continue;
            }
            uint64_t fp = store__fingerprint(vdir);
            if (store__bad_seen(r, names[i], vers[k], fp, 0)) continue;
            store_task *t = NULL;
            eng_task *et = NULL;
            double dt = 0;
            eng_err e2 = {0};
            if (store__meta_read(r, names[i], vers[k], vdir, &t, &e2) || store__validate(r, t, &et, &dt, &e2)) {
                fprintf(stderr, "adapterd: task %s version %s rejected: %s\n", names[i], vers[k], e2.msg);
                if (t) store__task_destroy(t);
                store__bad_seen(r, names[i], vers[k], fp, 1);
                store__broken_add(r, names[i], vers[k], e2.msg);
                continue;
            }
            /* above the current one and above what the state file had seen (rule_current) */
            int make_current = vn > curv && (!st.current || vn > st.max);
            /* the state file first, as for an upload, and only if no writer recorded this number
             * as not current meanwhile; if it cannot be written the version is listed, not current */
            int skipped = 0;
            if (make_current && store__state_update(r, names[i], vers[k], -1, vn, &skipped, &e2)) {
                fprintf(stderr, "adapterd: task %s version %s: %s; listed, not made current\n", names[i], vers[k], e2.msg);
                make_current = curv < 0;
            } else if (skipped) {
                make_current = curv < 0;
            }
            if (store__list_validated(r, t, et, dt, make_current, &e2) == 0) {
                added++;
                store__log(r, "task %s version %s loaded from the registry directory%s", names[i], vers[k],
                      make_current ? " and is current" : "");
            }
        }
        store__free_strs(vers, nv);
    }
    /* task directories removed by hand: drop them (requests in flight finish on what they hold) */
    char **known = NULL;
    int nk = store_task_names(r, &known);
    for (int i = 0; i < nk; i++) {
        store__pathf(tdir, sizeof tdir, "%s/%s", tasks, known[i]);
        if (eng_dir_exists(tdir)) continue;
        pthread_mutex_lock(&r->mu);
        store_entry *e = store__get_entry(r, known[i]);
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
            store__log(r, "task %s: its directory is gone; dropped", known[i]);
        }
    }
    store__free_strs(known, nk > 0 ? nk : 0);
    store__free_strs(names, n);
    /* failed versions whose folder was removed by hand are no longer listed */
    pthread_mutex_lock(&r->mu);
    for (int i = r->n_broken - 1; i >= 0; i--) {
        store__pathf(vdir, sizeof vdir, "%s/%s/%s", tasks, r->broken[i].name, r->broken[i].version);
        if (!eng_dir_exists(vdir)) store__broken_remove_at(r, i);
    }
    pthread_mutex_unlock(&r->mu);
    /* read again: this rescan's own writes, and other writers' since it began */
    json_decref(state);
    state = store__state_load(r, &state_ok);
    if (state_ok) follow_state(r, state);
    json_decref(state);
    pthread_mutex_unlock(&r->admin_mu);
    return added;
}
