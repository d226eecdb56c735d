/* state.c - .adapterd-state.json: every task's current version with max (the highest number on
 * disk when written), admin pins and tombstones (deleted versions whose files could not go).
 *
 * Replicas on one registry. Each state write is a read-modify-write of one task's entry under a
 * POSIX record lock (.adapterd-state.lock): other tasks' entries are kept as on disk. An entry
 * holds the current version and max; every rescan re-reads the file and applies rule_current (the
 * recorded version unless one above max exists, then the highest), so replicas agree and a version
 * dropped in by hand still wins.
 *
 * Depends on disk.c and table.c (the table says what this process serves; it is read under
 * reg->mu, the file is written outside it). Nothing here loads weights. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the state file ---- */

/* Sets tasks[name] to {current, max, pinned} (current and max only when cur is set). */
static int state_entry_set(json_t *tasks, const char *name, const char *cur, long max, int pinned) {
    json_t *o = json_object();
    if (!o || json_object_set_new(tasks, name, o)) return -1;
    if (cur && (json_object_set_new(o, "current", json_string(cur)) || json_object_set_new(o, "max", json_integer(max))))
        return -1;
    if (pinned && json_object_set_new(o, "pinned", json_true())) return -1;
    return 0;
}

/* Rewrites task name's part of the state file durably (tmp, fsync, rename, fsync of the folder)
 * under the writer lock, as a read-modify-write: the file is read, name's entry and tombstones are
 * replaced by this process's, the other tasks' entries are kept as they are on disk (another
 * replica may have just changed them), and a task this process serves that has no entry yet gets
 * one, so that every task's current version is recorded. Name's entry records its current version
 * (ov_cur when set: as it will be once the caller changes the table, the disk going first; see the
 * file's top) and max, the highest version number on disk, or extra_max when higher (a version
 * about to be renamed in). With above >= 0 the write is conditional: when the entry on disk
 * already records a current version with a max >= above, nothing is written and *skipped is set
 * (another replica recorded that version as not current). admin_mu held. */
int store__state_update(store_registry *r, const char *name, const char *ov_cur, long extra_max, long above, int *skipped,
                        eng_err *err) {
    int held, lk = store__state_lock(r, &held), rc = 0;
    if (skipped) *skipped = 0;
    char path[PATH_MAX], tmp[PATH_MAX], tdir[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    json_t *root = access(path, F_OK) == 0 ? json_load_file(path, 0, NULL) : NULL;
    if (!json_is_object(root)) {
        json_decref(root);
        root = json_object();
    }
    json_t *tasks = json_object_get(root, "tasks"), *dead = json_array();
    if (root && !json_is_object(tasks)) {
        tasks = json_object();
        if (!tasks || json_object_set_new(root, "tasks", tasks)) tasks = NULL;
    }
    if (!root || !tasks || !dead) goto oom;
    if (above >= 0) {
        json_t *o = json_object_get(tasks, name), *mx = json_object_get(o, "max");
        if (json_string_value(json_object_get(o, "current")) && json_is_integer(mx) && json_integer_value(mx) >= above) {
            if (skipped) *skipped = 1;
            goto out;
        }
    }
    size_t nlen = strlen(name), i;
    json_t *v;
    json_array_foreach(json_object_get(root, "deleted"), i, v) {
        const char *s = json_string_value(v);
        if (s && !(strncmp(s, name, nlen) == 0 && s[nlen] == '/') && json_array_append(dead, v)) goto oom;
    }
    long max = store__disk_max_version(r, name);
    if (extra_max > max) max = extra_max;
    /* the tasks this process serves with no entry on disk yet (their folder still there) */
    char **miss = NULL;
    int n_miss = 0;
    pthread_mutex_lock(&r->mu);
    if (r->n_e && !(miss = calloc((size_t)r->n_e, sizeof *miss))) {
        pthread_mutex_unlock(&r->mu);
        goto oom;
    }
    for (int k = 0; k < r->n_e; k++)
        if (strcmp(r->e[k]->name, name) && r->e[k]->cur && !json_object_get(tasks, r->e[k]->name) &&
            (miss[n_miss] = strdup(r->e[k]->name)))
            n_miss++;
    pthread_mutex_unlock(&r->mu);
    for (int k = 0; k < n_miss; k++) {
        store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, miss[k]);
        long mk = eng_dir_exists(tdir) ? store__disk_max_version(r, miss[k]) : -1;
        pthread_mutex_lock(&r->mu);
        store_entry *e = store__get_entry(r, miss[k]);
        int bad = 0;
        if (mk >= 0 && e && e->cur)
            bad = state_entry_set(tasks, miss[k], e->cur->version, e->cur->vnum > mk ? e->cur->vnum : mk, e->admin_pinned);
        pthread_mutex_unlock(&r->mu);
        if (bad) {
            store__free_strs(miss, n_miss);
            goto oom;
        }
    }
    store__free_strs(miss, n_miss);
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < r->n_tombs; k++)
        if (strncmp(r->tombs[k], name, nlen) == 0 && r->tombs[k][nlen] == '/' &&
            json_array_append_new(dead, json_string(r->tombs[k]))) {
            pthread_mutex_unlock(&r->mu);
            goto oom;
        }
    store_entry *e = store__get_entry(r, name);
    const char *cur = ov_cur ? ov_cur : e && e->cur ? e->cur->version : NULL;
    int bad = 0;
    if (cur || e) {
        long cv = store__version_number(cur ? cur : "");
        bad = state_entry_set(tasks, name, cur, cv > max ? cv : max, e && e->admin_pinned);
    } else {
        json_object_del(tasks, name); /* the task is gone */
    }
    pthread_mutex_unlock(&r->mu);
    if (bad) goto oom;
    json_object_set_new(root, "version", json_integer(2));
    json_object_set(root, "deleted", dead);
    /* where locks do not work, replicas on other hosts may write at once: a name of its own then */
    char host[64] = "";
    if (held) store__pathf(tmp, sizeof tmp, "%s/%s.tmp", r->dir, STATE_FILE);
    else gethostname(host, sizeof host - 1), store__pathf(tmp, sizeof tmp, "%s/%s.%s-%d.tmp", r->dir, STATE_FILE, host, (int)getpid());
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) goto oom;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t n = strlen(text);
    errno = 0;
    int bw = fd < 0 || write(fd, text, n) != (ssize_t)n || write(fd, "\n", 1) != 1 || fsync(fd);
    if (fd >= 0 && close(fd) && !bw) bw = 1;
    if (!bw && (rename(tmp, path) || store__fsync_path(r->dir, 1))) bw = 2;
    if (bw) {
        int en = errno ? errno : ENOSPC; /* a short write sets no errno: the disk is full */
        rc = eng_err_set(err, store__io_status(en), "cannot write the registry state %s (%s)", STATE_FILE, strerror(en));
        if (bw == 1) unlink(tmp);
    }
    free(text);
out:
    json_decref(root), json_decref(dead);
    store__state_unlock(lk);
    return rc;
oom:
    json_decref(root), json_decref(dead);
    store__state_unlock(lk);
    return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
}

/* Records task ov_name with current version ov_cur before the caller makes it current. */
int store__state_write_as(store_registry *r, const char *ov_name, const char *ov_cur, eng_err *err) {
    return store__state_update(r, ov_name, ov_cur, -1, -1, NULL, err);
}

/* Records task name as this process serves it; extra_max as for state_update. */
int store__state_write(store_registry *r, const char *name, long extra_max, eng_err *err) {
    return store__state_update(r, name, NULL, extra_max, -1, NULL, err);
}

/* The version the rule makes current among e's listed versions: the state's current while no
 * listed version is numbered above the state's max, else the highest. Every replica applies it to
 * the same files, so they agree once they have looked. reg->mu held. */
store_task *store__rule_current(const store_entry *e, const state_task *st) {
    if (!e->n) return NULL;
    store_task *hi = e->v[e->n - 1];
    store_task *c = st && st->current ? store__find_version(e, st->current) : NULL;
    return c && hi->vnum <= st->max ? c : hi;
}

/* Applies the state file at open: tombstones, current versions, pins. A missing file is no state. */
int store__state_read(store_registry *r, eng_err *err) {
    char path[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    if (access(path, F_OK) != 0) return 0;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return eng_err_set(err, ENG_FORMAT, "%s:%d: %s", path, je.line, root ? "not a JSON object" : je.text);
    }
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(root, "deleted"), i, v) {
        const char *s = json_string_value(v);
        char **nt = s ? realloc(r->tombs, (size_t)(r->n_tombs + 1) * sizeof *nt) : NULL;
        if (!nt) continue;
        r->tombs = nt;
        if ((r->tombs[r->n_tombs] = strdup(s))) r->n_tombs++;
    }
    const char *k;
    json_object_foreach(json_object_get(root, "tasks"), k, v) {
        store_entry *e = store__get_entry(r, k);
        if (!e) continue;
        json_t *mx = json_object_get(v, "max");
        /* a state file of version 1 has no max: its current holds */
        state_task st = {k, json_string_value(json_object_get(v, "current")), json_is_integer(mx) ? (long)json_integer_value(mx) : LONG_MAX, 0};
        store_task *t = store__rule_current(e, &st);
        if (st.current && t && strcmp(t->version, st.current)) {
            if (store__find_version(e, st.current)) store__log(r, "state: task %s has versions above %ld; serving the highest", k, st.max);
            else store__log(r, "state: task %s version %s is gone; serving the highest", k, st.current);
        }
        if (t) {
            if (e->cur) e->cur->current = 0;
            e->cur = t;
            t->current = 1;
        }
        if (st.current && !store__find_version(e, st.current) && !e->want && (!e->n || e->v[e->n - 1]->vnum <= st.max)) {
            /* its folder failed to read, or is gone: the newest good version stands in (store_open) */
            int b = store__broken_find(r, k, st.current);
            e->want = strdup(st.current);
            e->want_why = strdup(b >= 0 ? r->broken[b].reason : "its folder is gone");
        }
        e->admin_pinned = json_is_true(json_object_get(v, "pinned"));
    }
    json_decref(root);
    return 0;
}

/* The state file as it is now, or NULL: absent (*ok = 1: the tasks follow their highest versions)
 * or unreadable (*ok = 0: nothing is changed from it). When read, its tombstones replace the
 * registry's. admin_mu held. */
json_t *store__state_load(store_registry *r, int *ok) {
    char path[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    *ok = 1;
    if (access(path, F_OK) != 0) {
        *ok = errno == ENOENT; /* a network file system's hiccup is not "no state" */
        return NULL;
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!json_is_object(root)) {
        store__log(r, "%s:%d: %s; the registry state is not followed until it is rewritten", path, je.line,
              root ? "not a JSON object" : je.text);
        json_decref(root);
        *ok = 0;
        return NULL;
    }
    json_t *dead = json_object_get(root, "deleted");
    size_t n = json_array_size(dead), i;
    char **nt = calloc(n + 1, sizeof *nt);
    if (!nt) return root;
    size_t k = 0;
    json_t *v;
    json_array_foreach(dead, i, v) if (json_is_string(v) && (nt[k] = strdup(json_string_value(v)))) k++;
    pthread_mutex_lock(&r->mu);
    store__free_strs(r->tombs, r->n_tombs);
    r->tombs = nt, r->n_tombs = (int)k;
    pthread_mutex_unlock(&r->mu);
    return root;
}

state_task store__state_of(json_t *root, const char *name) {
    json_t *o = json_object_get(json_object_get(root, "tasks"), name);
    json_t *mx = json_object_get(o, "max");
    return (state_task){name, json_string_value(json_object_get(o, "current")),
                        json_is_integer(mx) ? (long)json_integer_value(mx) : LONG_MAX,
                        json_is_true(json_object_get(o, "pinned"))};
}
