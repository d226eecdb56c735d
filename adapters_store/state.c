/* state.c - .adapterd-state.json: every task's current version with max (the highest number on
 * disk when written), admin pins and tombstones (deleted versions whose files could not go).
 *
 * Replicas on one registry. Each state write is a read-modify-write of one task's entry under a
 * POSIX record lock (.adapterd-state.lock): other tasks' entries are kept as on disk. An entry
 * holds the current version and max; every rescan re-reads the file and applies rule_current (the
 * recorded version unless one above max exists, then the highest), so replicas agree and a version
 * dropped in by hand still wins.
 *
 * Cost. The file holds every task (about 40 bytes each), so the format stays one file that
 * replicas and operators read whole; what grew with N was the rest: a JSON tree built, sorted and
 * dumped at every write and parsed at every rescan (200 ms a write at 10,000 tasks). Now one parser
 * fills a sorted doc (state_doc) that is kept with the file's identity (inode, size, times) and
 * parsed again only when another writer changed the file, and the writer prints the doc directly:
 * 8 ms a write at 10,000 tasks, most of it the fsync.
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

/* ---- the one parser ---- */

/* A name absent from the file reads as no entry: no current, no max, not pinned. */
static int rec_cmp(const void *a, const void *b) { return strcmp(((const state_rec *)a)->name, ((const state_rec *)b)->name); }

void store__state_doc_free(state_doc *d) {
    for (int i = 0; i < d->n_tasks; i++) free(d->tasks[i].name), free(d->tasks[i].current);
    free(d->tasks);
    store__free_strs(d->deleted, d->n_deleted);
    memset(d, 0, sizeof *d);
}

/* Parses the state file's text (len bytes): {"version": 2, "tasks": {NAME: {"current": "3", "max":
 * 5, "pinned": true}}, "deleted": ["NAME/VERSION"]}. What does not have its type is read as absent
 * (a "tasks" that is not an object: no entry; an entry's "current" that is not a string: none; a
 * "max" that is not an integer: none, which a version-1 file never had, and then its current
 * holds; a "deleted" element that is not a string: skipped). Returns 0 and *out (free it with
 * store__state_doc_free), ENG_FORMAT when the text is not a JSON object, or ENG_NO_MEMORY. */
int store__state_parse(const char *text, size_t len, state_doc *out, eng_err *err) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return eng_err_set(err, ENG_FORMAT, "%s:%d: %s", STATE_FILE, je.line, root ? "not a JSON object" : je.text);
    }
    json_t *tasks = json_object_get(root, "tasks"), *dead = json_object_get(root, "deleted"), *v;
    size_t nt = json_is_object(tasks) ? json_object_size(tasks) : 0, nd = json_array_size(dead), i;
    out->tasks = calloc(nt + 1, sizeof *out->tasks);
    out->deleted = calloc(nd + 1, sizeof *out->deleted);
    if (!out->tasks || !out->deleted) goto oom;
    json_array_foreach(dead, i, v) {
        if (!json_is_string(v)) continue;
        if (!(out->deleted[out->n_deleted] = strdup(json_string_value(v)))) goto oom;
        out->n_deleted++;
    }
    const char *k;
    json_object_foreach(json_is_object(tasks) ? tasks : NULL, k, v) {
        state_rec *e = &out->tasks[out->n_tasks];
        json_t *cur = json_object_get(v, "current"), *mx = json_object_get(v, "max");
        if (!(e->name = strdup(k)) || (json_is_string(cur) && !(e->current = strdup(json_string_value(cur))))) {
            free(e->name);
            goto oom;
        }
        e->has_max = json_is_integer(mx);
        e->max = e->has_max ? (long)json_integer_value(mx) : LONG_MAX;
        e->pinned = json_is_true(json_object_get(v, "pinned"));
        out->n_tasks++;
    }
    if (out->n_tasks) qsort(out->tasks, (size_t)out->n_tasks, sizeof *out->tasks, rec_cmp);
    json_decref(root);
    return 0;
oom:
    json_decref(root);
    store__state_doc_free(out);
    return eng_err_set(err, ENG_NO_MEMORY, "out of memory reading %s", STATE_FILE);
}

state_rec *store__state_find(const state_doc *d, const char *name) {
    state_rec key = {.name = (char *)name};
    return d && d->n_tasks ? bsearch(&key, d->tasks, (size_t)d->n_tasks, sizeof key, rec_cmp) : NULL;
}

state_task store__state_of(const state_doc *d, const char *name) {
    const state_rec *e = store__state_find(d, name);
    return (state_task){name, e ? e->current : NULL, e ? e->max : LONG_MAX, e ? e->pinned : 0};
}

/* The same file as when it was last read or written: same inode, size, modification and change
 * times. A writer replaces the file by a rename (a new inode), so another writer's change is seen. */
static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* The file as it is now, in r->state: parsed again only when it changed since it was last read or
 * written (a stat, instead of a parse of every task's entry at every rescan and every write).
 * Returns 0 (*absent set when there is none: an empty doc), or the status of the read or the parse
 * (r->state then empty). admin_mu held (or open). */
static int state_file_load(store_registry *r, int *absent, eng_err *err) {
    char path[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    *absent = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        int en = errno;
        store__state_doc_free(&r->state), r->state_known = 0;
        if (en == ENOENT) {
            if (!r->state_absent) r->state_gen++, r->state_absent = 1;
            return *absent = 1, 0;
        }
        return eng_err_set(err, ENG_IO, "%s: %s", path, strerror(en)); /* a network file system's hiccup is not "no state" */
    }
    if (r->state_known && same_file(&st, &r->state_id)) return 0;
    store__state_doc_free(&r->state), r->state_known = 0;
    r->state_gen++, r->state_absent = 0; /* another writer's change (or the first read): followed by every task */
    char *text = NULL;
    size_t len = 0;
    int rc = eng_file_read(path, STATE_FILE_MAX_BYTES, &text, &len, err);
    if (!rc) rc = store__state_parse(text, len, &r->state, err);
    free(text);
    if (!rc) r->state_known = 1, r->state_id = st; /* stat before the read: a change meanwhile is read next time */
    return rc;
}

/* ---- the one writer ---- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* A JSON string: quotes, backslashes and control characters escaped; the rest (valid UTF-8: the
 * parser checked it, names are ASCII) as it is. */
static void put_str(sbuf *b, const char *s) {
    put(b, "\"", 1);
    for (const char *c = s; *c; c++) {
        unsigned char u = (unsigned char)*c;
        char esc[8];
        if (u == '"' || u == '\\') esc[0] = '\\', esc[1] = (char)u, put(b, esc, 2);
        else if (u < 0x20) snprintf(esc, sizeof esc, "\\u%04x", u), put(b, esc, 6);
        else put(b, c, 1);
    }
    put(b, "\"", 1);
}

/* The text of d: version 2, tombstones, then one line per task in name order (current and max only
 * when there is a current). Written straight from the sorted doc, without a JSON tree: about 50
 * bytes a task. NULL when out of memory. */
char *store__state_format(const state_doc *d) {
    sbuf b = {0};
    char num[32];
    puts_(&b, "{\"version\": 2, \"deleted\": [");
    for (int i = 0; i < d->n_deleted; i++) {
        if (i) puts_(&b, ", ");
        put_str(&b, d->deleted[i]);
    }
    puts_(&b, "], \"tasks\": {");
    for (int i = 0; i < d->n_tasks; i++) {
        const state_rec *e = &d->tasks[i];
        puts_(&b, i ? ",\n  " : "\n  ");
        put_str(&b, e->name);
        puts_(&b, ": {");
        if (e->current) {
            puts_(&b, "\"current\": ");
            put_str(&b, e->current);
            if (e->has_max) snprintf(num, sizeof num, ", \"max\": %ld", e->max), puts_(&b, num);
        }
        if (e->pinned) puts_(&b, e->current ? ", \"pinned\": true" : "\"pinned\": true");
        puts_(&b, "}");
    }
    puts_(&b, d->n_tasks ? "\n}}" : "}}");
    if (b.oom || !b.p) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* Sets name's entry in d (added in name order when missing). Returns 0 or -1 when out of memory. */
static int doc_set(state_doc *d, const char *name, const char *cur, long max, int pinned) {
    state_rec *e = store__state_find(d, name);
    if (!e) {
        state_rec *nt = realloc(d->tasks, (size_t)(d->n_tasks + 1) * sizeof *nt);
        if (!nt) return -1;
        d->tasks = nt;
        int pos = d->n_tasks;
        while (pos > 0 && strcmp(d->tasks[pos - 1].name, name) > 0) pos--;
        memmove(&d->tasks[pos + 1], &d->tasks[pos], (size_t)(d->n_tasks - pos) * sizeof *d->tasks);
        e = &d->tasks[pos];
        memset(e, 0, sizeof *e);
        if (!(e->name = strdup(name))) {
            memmove(&d->tasks[pos], &d->tasks[pos + 1], (size_t)(d->n_tasks - pos) * sizeof *d->tasks);
            return -1;
        }
        d->n_tasks++;
    }
    char *c = cur ? strdup(cur) : NULL;
    if (cur && !c) return -1;
    free(e->current);
    e->current = c;
    e->has_max = cur != NULL;
    e->max = cur ? max : LONG_MAX;
    e->pinned = pinned;
    return 0;
}

static void doc_del(state_doc *d, const char *name) {
    state_rec *e = store__state_find(d, name);
    if (!e) return;
    free(e->name), free(e->current);
    int pos = (int)(e - d->tasks);
    memmove(e, e + 1, (size_t)(d->n_tasks - pos - 1) * sizeof *e);
    d->n_tasks--;
}

/* Keeps the tombstones of other tasks and puts this process's of task name (nlen bytes). */
static int doc_tombs(store_registry *r, state_doc *d, const char *name, size_t nlen) {
    int w = 0;
    for (int i = 0; i < d->n_deleted; i++) {
        if (!strncmp(d->deleted[i], name, nlen) && d->deleted[i][nlen] == '/') free(d->deleted[i]);
        else d->deleted[w++] = d->deleted[i];
    }
    d->n_deleted = w;
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    for (int k = 0; !rc && k < r->n_tombs; k++) {
        if (strncmp(r->tombs[k], name, nlen) || r->tombs[k][nlen] != '/') continue;
        char **nd = realloc(d->deleted, (size_t)(d->n_deleted + 2) * sizeof *nd);
        if (nd) d->deleted = nd;
        if (!nd || !(d->deleted[d->n_deleted] = strdup(r->tombs[k]))) rc = -1;
        else d->n_deleted++;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* tmp, fsync, rename, fsync of the folder. Returns 0 or a negative status with err set. */
static int write_durably(store_registry *r, const char *text, int locked, eng_err *err) {
    char path[PATH_MAX], tmp[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    /* where locks do not work, replicas on other hosts may write at once: a name of its own then */
    char host[64] = "";
    if (locked) store__pathf(tmp, sizeof tmp, "%s/%s.tmp", r->dir, STATE_FILE);
    else gethostname(host, sizeof host - 1), store__pathf(tmp, sizeof tmp, "%s/%s.%s-%d.tmp", r->dir, STATE_FILE, host, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t n = strlen(text);
    errno = 0;
    int bw = fd < 0 || write(fd, text, n) != (ssize_t)n || write(fd, "\n", 1) != 1 || fsync(fd);
    if (fd >= 0 && close(fd) && !bw) bw = 1;
    if (!bw && (rename(tmp, path) || store__fsync_path(r->dir, 1))) bw = 2;
    if (!bw) return 0;
    int en = errno ? errno : ENOSPC; /* a short write sets no errno: the disk is full */
    if (bw == 1) unlink(tmp);
    return eng_err_set(err, store__io_status(en), "cannot write the registry state %s (%s)", STATE_FILE, strerror(en));
}

state_change store__state_change(const char *name) {
    return (state_change){.name = name, .current = NULL, .extra_max = -1, .only_if_above = -1};
}

/* Rewrites task c->name's part of the state file durably (tmp, fsync, rename, fsync of the folder)
 * under the writer lock, as a read-modify-write: the file is read, the task's entry and tombstones
 * are replaced by this process's, the other tasks' entries are kept as they are on disk (another
 * replica may have just changed them), and a task this process serves that has no entry yet gets
 * one, so that every task's current version is recorded. The entry records the current version
 * (c->current when set: as it will be once the caller changes the table, the disk going first; see
 * versions.c) and max, the highest version number on disk, or c->extra_max when higher (a version
 * about to be renamed in). With c->only_if_above >= 0 the write is conditional: when the entry on
 * disk already records a current version with a max >= it, nothing is written and *skipped is set
 * (another replica recorded that version as not current). An unreadable file is replaced. admin_mu
 * held. */
int store__state_write(store_registry *r, const state_change *c, int *skipped, eng_err *err) {
    int held, lk = store__state_lock(r, &held), rc = 0, absent;
    if (skipped) *skipped = 0;
    state_doc *dp = &r->state;
#define d (*dp)
    eng_err le = {0};
    if ((rc = state_file_load(r, &absent, &le))) {
        if (rc == ENG_NO_MEMORY) goto oom;
        rc = 0; /* unreadable: rewritten from this process's view */
    }
    const char *name = c->name;
    if (c->only_if_above >= 0) {
        const state_rec *o = store__state_find(&d, name);
        if (o && o->current && o->has_max && o->max >= c->only_if_above) {
            if (skipped) *skipped = 1;
            goto out;
        }
    }
    r->state_known = 0; /* changed from here on: known again once written */
    size_t nlen = strlen(name);
    if (doc_tombs(r, &d, name, nlen)) goto oom;
    long max = store__disk_max_version(r, name);
    if (c->extra_max > max) max = c->extra_max;
    /* the tasks this process serves with no entry on disk yet (their folder still there) */
    char **miss = NULL;
    int n_miss = 0;
    pthread_mutex_lock(&r->mu);
    if (r->n_e && !(miss = calloc((size_t)r->n_e, sizeof *miss))) {
        pthread_mutex_unlock(&r->mu);
        goto oom;
    }
    for (int k = 0; k < r->n_e; k++)
        if (strcmp(r->e[k]->name, name) && r->e[k]->cur && !store__state_find(&d, r->e[k]->name) &&
            (miss[n_miss] = strdup(r->e[k]->name)))
            n_miss++;
    pthread_mutex_unlock(&r->mu);
    char tdir[PATH_MAX];
    for (int k = 0; k < n_miss; k++) {
        store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, miss[k]);
        long mk = eng_dir_exists(tdir) ? store__disk_max_version(r, miss[k]) : -1;
        pthread_mutex_lock(&r->mu);
        store_entry *e = store__get_entry(r, miss[k]);
        int bad = 0;
        if (mk >= 0 && e && e->cur)
            bad = doc_set(&d, miss[k], e->cur->version, e->cur->vnum > mk ? e->cur->vnum : mk, e->admin_pinned);
        pthread_mutex_unlock(&r->mu);
        if (bad) {
            store__free_strs(miss, n_miss);
            goto oom;
        }
    }
    store__free_strs(miss, n_miss);
    pthread_mutex_lock(&r->mu);
    store_entry *e = store__get_entry(r, name);
    const char *cur = c->current ? c->current : e && e->cur ? e->cur->version : NULL;
    int bad = 0;
    if (cur || e) {
        long cv = store__version_number(cur ? cur : "");
        bad = doc_set(&d, name, cur, cv > max ? cv : max, e && e->admin_pinned);
    } else {
        doc_del(&d, name); /* the task is gone */
    }
    pthread_mutex_unlock(&r->mu);
    if (bad) goto oom;
    char *text = store__state_format(&d);
    if (!text) goto oom;
    if (!(rc = write_durably(r, text, held, err))) {
        char path[PATH_MAX];
        store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
        r->state_known = stat(path, &r->state_id) == 0;
    }
    free(text);
out:
    store__state_unlock(lk);
    return rc;
oom:
    store__state_doc_free(&d);
    store__state_unlock(lk);
    return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
#undef d
}

/* ---- reading it ---- */

/* The version the rule makes current among e's listed versions: the state's current while no
 * listed version is numbered above the state's max, else the highest. Every replica applies it to
 * the same files, so they agree once they have looked. reg->mu held. */
store_task *store__rule_current(const store_entry *e, const state_task *st) {
    if (!e->n) return NULL;
    store_task *hi = e->v[e->n - 1];
    store_task *c = st && st->current ? store__find_version(e, st->current) : NULL;
    return c && hi->vnum <= st->max ? c : hi;
}

/* The file's tombstones (copied) replace the registry's; unchanged when out of memory. */
static void take_tombs(store_registry *r, const state_doc *d) {
    char **nt = calloc((size_t)d->n_deleted + 1, sizeof *nt);
    int n = 0;
    for (int i = 0; nt && i < d->n_deleted; i++)
        if ((nt[n] = strdup(d->deleted[i]))) n++;
    if (!nt) return;
    pthread_mutex_lock(&r->mu);
    store__free_strs(r->tombs, r->n_tombs);
    r->tombs = nt, r->n_tombs = n;
    pthread_mutex_unlock(&r->mu);
}

/* Applies the state file at open: tombstones, current versions, pins. A missing file is no state. */
int store__state_read(store_registry *r, eng_err *err) {
    int absent, rc = state_file_load(r, &absent, err);
    if (rc || absent) return rc;
    const state_doc *d = &r->state;
    take_tombs(r, d);
    for (int i = 0; i < d->n_tasks; i++) {
        const char *k = d->tasks[i].name;
        store_entry *e = store__get_entry(r, k);
        if (!e) continue;
        state_task st = store__state_of(d, k);
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
        e->admin_pinned = st.pinned;
    }
    return 0;
}

/* The state file as it is now, for a rescan: returns the doc (borrowed: valid until the next state
 * call; an empty one when there is no file: the tasks follow their highest versions), its
 * tombstones then replacing the registry's; NULL when it is unreadable (nothing is changed from it;
 * logged). admin_mu held. */
const state_doc *store__state_load(store_registry *r) {
    eng_err err = {0};
    int absent, rc = state_file_load(r, &absent, &err);
    if (rc) {
        store__log(r, "%s; the registry state is not followed until it is rewritten", err.msg);
        return NULL;
    }
    if (!absent) take_tombs(r, &r->state);
    return &r->state;
}
