/* state.c - the registry's state: every task's current version with max (the highest number on
 * disk when written), admin pins and tombstones (deleted versions whose files could not go).
 *
 * Two files. The base, .adapterd-state.json: {"version": 2, "generation": G, "deleted":
 * ["NAME/VERSION"], "tasks": {NAME: {"current": "3", "max": 5, "pinned": true}}}. The journal,
 * .adapterd-state.log: a first line {"generation": G} naming the base it continues, then a line a
 * write, each one task's whole entry: {"task": NAME, "current": "3", "max": 5, "pinned": true,
 * "deleted": ["2"]}, or {"task": NAME, "gone": true, "deleted": []}. A line sets what it names, so
 * reading it twice is harmless; the state is the base with its journal's lines applied in order.
 *
 * Writes. A write appends its task's line and fsyncs it: its cost does not depend on how many tasks
 * the registry has (at 10,000 tasks the whole file was 400 KB, rewritten and fsynced twice an
 * upload). When the journal has grown past the base (and 64 KiB), the write compacts instead: the
 * base written anew with a new generation (tmp, fsync, rename, fsync of the folder), then a new
 * journal holding only its header (the same way). Compaction writes the base's size once for at
 * least as many bytes of lines appended: amortized, a write costs the same at 10 or 10,000 tasks.
 * Both continue a short write and retry an interrupted call; every call on the files goes through
 * store__state_io (store_test.h), so tests can fail each one.
 * A crash between the two renames leaves a base that already holds the old journal, whose lower
 * generation says so; a crash during an append leaves a partial last line, never followed (and
 * the next write compacts rather than append after it).
 *
 * Reading. The base, then its journal: a journal of the base's generation is applied; an older one
 * is already in the base (ignored); a newer one was begun after this reader read the base (both
 * read again; still newer after every try, two writers without a lock crossed their renames: the
 * base alone, compacted by the next write). Only whole lines are read, and a line that does not
 * parse is skipped. A file that cannot be read whole (an I/O error, a file replaced under every
 * try) is not "no state": a write then refuses (ENG_UNAVAILABLE) rather than write from this
 * process's view, which would drop other tasks' tombstones and the pins and rollbacks of replicas
 * not followed yet; only a base that does not parse (renamed in whole, so that lasts) is replaced.
 * The doc is kept with both files' identities (inode, size, times) and the journal's offset: a
 * look costs two stats, and another writer's change costs the lines it appended (the base is
 * parsed again only when it was replaced).
 *
 * Replicas on one registry. Each write is a read-modify-write of one task's entry under a POSIX
 * record lock (.adapterd-state.lock): other tasks' entries are kept as written. An entry holds the
 * current version and max; every rescan follows the state and applies rule_current (the recorded
 * version unless one above max exists, then the highest), so replicas agree and a version dropped
 * in by hand still wins. Where the file system has no locks, every write compacts, under names of
 * its own (the last writer's base wins, as a whole file always did).
 *
 * Depends on disk.c and table.c (the table says what this process serves; it is read under
 * reg->mu, the files are written outside it). Nothing here loads weights. */
#define _GNU_SOURCE
#include "store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store_test.h"

/* ---- the file system, through one table ----
 *
 * Every call that reads or writes the state's files goes through store__state_io, so that a test
 * can fail any one of them (an I/O error, an interrupted call, a short write, a full disk) and
 * check that nothing but the written task's entry can change. The real calls by default. */

static int io_open(const char *path, int flags, mode_t mode) { return open(path, flags, mode); }

store__io_calls store__state_io = {io_open, stat, fstat, pread, write, fsync, ftruncate, rename, close};
#define IO store__state_io

/* n bytes at offset from of fd into buf, interrupted calls retried. Returns the bytes read: fewer
 * than n only at the end of the file (errno 0) or on an error (errno set). */
static size_t read_at(int fd, char *buf, size_t n, off_t from) {
    size_t got = 0;
    errno = 0;
    while (got < n) {
        ssize_t k = IO.pread(fd, buf + got, n - got, from + (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    return got;
}

/* n bytes of text written to fd, a short write continued and an interrupted call retried (the
 * kernel may write part of a buffer; only a call that writes nothing says why). Returns 0, or -1
 * with errno set (ENOSPC when a call wrote nothing and said nothing). */
static int write_all(int fd, const char *text, size_t n) {
    size_t done = 0;
    while (done < n) {
        errno = 0;
        ssize_t k = IO.write(fd, text + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (!errno) errno = ENOSPC;
            return -1;
        }
        done += (size_t)k;
    }
    return 0;
}

/* fsync of the registry folder, after a rename in it. Returns 0, or -1 with errno. */
static int fsync_dir(const char *dir) {
    int fd = IO.open(dir, O_RDONLY | O_CLOEXEC | O_DIRECTORY, 0);
    if (fd < 0) return -1;
    int rc = IO.fsync(fd), e = errno;
    IO.close(fd);
    errno = e;
    return rc;
}

/* The base's text, whole, in *out (free it; len bytes, NUL-terminated). Returns 0, ENG_FORMAT when
 * it holds more than STATE_FILE_MAX_BYTES, ENG_NO_MEMORY, or ENG_IO when it cannot be read whole:
 * a base read in part is never taken for the state. */
static int base_read(const char *path, char **out, size_t *len, eng_err *err) {
    *out = NULL, *len = 0;
    int fd = IO.open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return eng_err_set(err, ENG_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (IO.fstat(fd, &st) != 0) {
        int en = errno;
        IO.close(fd);
        return eng_err_set(err, ENG_IO, "%s: %s", path, strerror(en));
    }
    size_t n = (size_t)st.st_size;
    if (n > STATE_FILE_MAX_BYTES) {
        IO.close(fd);
        return eng_err_set(err, ENG_FORMAT, "%s: over %zu MiB", path, STATE_FILE_MAX_BYTES >> 20);
    }
    char *buf = malloc(n + 1);
    if (!buf) {
        IO.close(fd);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory reading %s", STATE_FILE);
    }
    size_t got = read_at(fd, buf, n, 0);
    int en = errno;
    IO.close(fd);
    if (got < n) {
        free(buf);
        return eng_err_set(err, ENG_IO, "%s: %s", path, en ? strerror(en) : "shorter than its size; read again at the next look");
    }
    buf[n] = '\0';
    *out = buf, *len = n;
    return 0;
}

/* ---- the one parser ---- */

/* A name absent from the state reads as no entry: no current, no max, not pinned. */
static int rec_cmp(const void *a, const void *b) { return strcmp(((const state_rec *)a)->name, ((const state_rec *)b)->name); }

void store__state_doc_free(state_doc *d) {
    for (int i = 0; i < d->n_tasks; i++) free(d->tasks[i].name), free(d->tasks[i].current);
    free(d->tasks);
    store__free_strs(d->deleted, d->n_deleted);
    memset(d, 0, sizeof *d);
}

/* A rollout as the state writes it ({"version": "2", "mode": "canary", "percent": 10, ...}); what is
 * not an object naming a listed mode and a version reads as no rollout. */
static store_rollout rollout_of_json(const json_t *o) {
    store_rollout ro = {0};
    const char *v = json_string_value(json_object_get(o, "version"));
    int mode = store_rollout_mode_parse(json_string_value(json_object_get(o, "mode")));
    if (!json_is_object(o) || !v || mode <= STORE_ROLLOUT_NONE || strlen(v) >= sizeof ro.version) return ro;
    ro.mode = mode;
    snprintf(ro.version, sizeof ro.version, "%s", v);
    ro.percent = json_number_value(json_object_get(o, "percent"));
    ro.max_share = json_number_value(json_object_get(o, "max_share"));
    ro.promote_after = (long)json_integer_value(json_object_get(o, "promote_after"));
    ro.promote_agreement = json_number_value(json_object_get(o, "promote_agreement"));
    ro.abort_error_rate = json_number_value(json_object_get(o, "abort_error_rate"));
    ro.abort_latency_ratio = json_number_value(json_object_get(o, "abort_latency_ratio"));
    ro.rule_min = (long)json_integer_value(json_object_get(o, "rule_min"));
    ro.started = (int64_t)json_integer_value(json_object_get(o, "started"));
    json_int_t id = json_integer_value(json_object_get(o, "id"));
    ro.id = id > 0 ? (uint64_t)id : 0; /* written back as read: a fixed point of the parser */
    return ro;
}

/* Parses the base's text (len bytes): {"version": 2, "generation": G, "tasks": {NAME: {"current":
 * "3", "max": 5, "pinned": true}}, "deleted": ["NAME/VERSION"]}. What does not have its type is read
 * as absent (a "tasks" that is not an object: no entry; an entry's "current" that is not a string:
 * none; a "max" that is not an integer: none, which a version-1 file never had, and then its
 * current holds; a "deleted" element that is not a string: skipped; no "generation": 0, a base no
 * journal continues). Returns 0 and *out (free it with store__state_doc_free), ENG_FORMAT when the
 * text is not a JSON object, or ENG_NO_MEMORY. */
int store__state_parse(const char *text, size_t len, state_doc *out, eng_err *err) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return eng_err_set(err, ENG_FORMAT, "%s:%d: %s", STATE_FILE, je.line, root ? "not a JSON object" : je.text);
    }
    json_t *tasks = json_object_get(root, "tasks"), *dead = json_object_get(root, "deleted"), *v;
    json_t *gen = json_object_get(root, "generation");
    out->generation = json_is_integer(gen) ? (long long)json_integer_value(gen) : 0;
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
        e->rollout = rollout_of_json(json_object_get(v, "rollout"));
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
    return (state_task){name, e ? e->current : NULL, e ? e->max : LONG_MAX, e ? e->pinned : 0,
                        e ? e->rollout : (store_rollout){0}};
}

/* Sets name's entry in d (added in name order when missing): current cur (NULL: none), max (read
 * only with a current), pinned, rollout (NULL: none). Returns 0 or -1 when out of memory. */
static int doc_set(state_doc *d, const char *name, const char *cur, int has_max, long max, int pinned,
                   const store_rollout *ro) {
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
    e->has_max = cur && has_max;
    e->max = e->has_max ? max : LONG_MAX;
    e->pinned = pinned;
    e->rollout = ro && cur ? *ro : (store_rollout){0};
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

static int is_tomb_of(const char *tomb, const char *name, size_t nlen) { return !strncmp(tomb, name, nlen) && tomb[nlen] == '/'; }

/* Drops task name's (nlen bytes) tombstones from d. */
static void tombs_drop(state_doc *d, const char *name, size_t nlen) {
    int w = 0;
    for (int i = 0; i < d->n_deleted; i++) {
        if (is_tomb_of(d->deleted[i], name, nlen)) free(d->deleted[i]);
        else d->deleted[w++] = d->deleted[i];
    }
    d->n_deleted = w;
}

/* Adds tombstone "name/version" (nlen bytes of name) to d. Returns 0 or -1 when out of memory. */
static int tomb_add(state_doc *d, const char *name, size_t nlen, const char *version) {
    char **nd = realloc(d->deleted, (size_t)(d->n_deleted + 2) * sizeof *nd);
    if (!nd) return -1;
    d->deleted = nd;
    size_t n = nlen + strlen(version) + 2;
    if (!(d->deleted[d->n_deleted] = malloc(n))) return -1;
    snprintf(d->deleted[d->n_deleted++], n, "%.*s/%s", (int)nlen, name, version);
    return 0;
}

/* Applies one journal line (len bytes, no newline) to d: the entry and tombstones of the task it
 * names replaced by the line's. A line that is not an object naming a task is skipped. Returns 1
 * when applied, 0 when skipped, -1 when out of memory (d then holds part of the line). */
int store__state_apply_line(state_doc *d, const char *line, size_t len) {
    json_t *o = json_loadb(line, len, 0, NULL);
    const char *name = json_string_value(json_object_get(o, "task"));
    if (!json_is_object(o) || !name || !store__valid_name(name)) {
        json_decref(o);
        return 0;
    }
    json_t *cur = json_object_get(o, "current"), *mx = json_object_get(o, "max"), *dead = json_object_get(o, "deleted"), *v;
    int rc = 0;
    if (json_is_true(json_object_get(o, "gone"))) doc_del(d, name);
    else {
        store_rollout ro = rollout_of_json(json_object_get(o, "rollout"));
        rc = doc_set(d, name, json_string_value(cur), json_is_integer(mx), (long)json_integer_value(mx),
                     json_is_true(json_object_get(o, "pinned")), &ro);
    }
    size_t nlen = strlen(name), i;
    tombs_drop(d, name, nlen);
    json_array_foreach(dead, i, v) if (!rc && json_is_string(v)) rc = tomb_add(d, name, nlen, json_string_value(v));
    json_decref(o);
    return rc ? -1 : 1;
}

/* ---- reading: the base, then its journal ---- */

/* The same file as when it was last read or written: same inode, size, modification and change
 * times. A writer replaces the base by a rename (a new inode), so another writer's change is seen. */
static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int same_inode(const struct stat *a, const struct stat *b) { return a->st_dev == b->st_dev && a->st_ino == b->st_ino; }

/* The journal from r->log_off on, applied to r->state when it continues the base. Returns 0, 1
 * when it was replaced since it was looked at, 2 when its header names a base newer than the one
 * read (read both again), or a negative status. */
static int journal_read(store_registry *r, const char *lpath, eng_err *err) {
    int fd = IO.open(lpath, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return errno == ENOENT ? 1 : eng_err_set(err, ENG_IO, "%s: %s", lpath, strerror(errno));
    struct stat st;
    if (IO.fstat(fd, &st) != 0) {
        int en = errno;
        IO.close(fd);
        return eng_err_set(err, ENG_IO, "%s: %s", lpath, strerror(en));
    }
    if (r->log_known && (!same_inode(&st, &r->log_id) || st.st_size < r->log_off)) {
        IO.close(fd);
        return 1; /* replaced since it was looked at */
    }
    off_t from = r->log_known ? r->log_off : 0;
    size_t n = (size_t)(st.st_size - from);
    if (n > STATE_FILE_MAX_BYTES) {
        IO.close(fd);
        return eng_err_set(err, ENG_FORMAT, "%s: over %zu MiB", lpath, STATE_FILE_MAX_BYTES >> 20);
    }
    char *buf = malloc(n + 1);
    if (!buf) {
        IO.close(fd);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory reading %s", STATE_LOG);
    }
    size_t got = read_at(fd, buf, n, from);
    int en = errno;
    IO.close(fd);
    /* the lines read in part would be taken for all of them: the ones not read would be lost
     * at the next compaction. A journal cut short meanwhile (errno 0) was replaced: read again. */
    if (got < n) {
        free(buf);
        return en ? eng_err_set(err, ENG_IO, "%s: %s", lpath, strerror(en)) : 1;
    }
    size_t at = 0;
    int rc = 0;
    for (char *nl; !rc && at < got && (nl = memchr(buf + at, '\n', got - at)); at = (size_t)(nl - buf) + 1) {
        size_t len = (size_t)(nl - buf) - at;
        if (from + (off_t)at == 0) { /* the header: the base it continues */
            json_t *h = json_loadb(buf, len, 0, NULL), *g = json_object_get(h, "generation");
            long long gen = json_is_integer(g) ? (long long)json_integer_value(g) : -1;
            json_decref(h);
            if (gen > r->state.generation) rc = 2;
            else r->log_mode = gen == r->state.generation ? LOG_CONTINUES : LOG_STALE;
        } else if (r->log_mode == LOG_CONTINUES && store__state_apply_line(&r->state, buf + at, len) < 0) {
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory reading %s", STATE_LOG);
        }
    }
    free(buf);
    if (rc) return rc;
    r->log_known = 1, r->log_id = st, r->log_off = from + (off_t)at;
    r->log_tail = (size_t)(st.st_size - r->log_off); /* a line being written, or a crashed writer's */
    return 0;
}

/* The state as it is now, in r->state: the base parsed again only when it was replaced or changed,
 * the journal read from where it was last read (two stats when nothing changed). Returns 0
 * (*absent set when there is no base: an empty doc), or the status of the read or the parse
 * (r->state then empty). admin_mu held (or open). */
static int state_file_load(store_registry *r, int *absent, eng_err *err) {
    char path[PATH_MAX], lpath[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    store__pathf(lpath, sizeof lpath, "%s/%s", r->dir, STATE_LOG);
    *absent = 0;
    for (int tries = 0; tries < 4; tries++) {
        struct stat st, lst;
        if (IO.stat(path, &st) != 0) {
            int en = errno;
            store__state_doc_free(&r->state), r->state_known = 0, r->log_known = 0;
            if (en == ENOENT) {
                if (!r->state_absent) r->state_gen++, r->state_absent = 1;
                return *absent = 1, 0;
            }
            return eng_err_set(err, ENG_IO, "%s: %s", path, strerror(en)); /* a network file system's hiccup is not "no state" */
        }
        int have_log = IO.stat(lpath, &lst) == 0;
        if (!have_log && errno != ENOENT) {
            int en = errno;
            store__state_doc_free(&r->state), r->state_known = 0, r->log_known = 0;
            return eng_err_set(err, ENG_IO, "%s: %s", lpath, strerror(en));
        }
        int base_same = r->state_known && same_file(&st, &r->state_id);
        int log_same = r->log_known ? have_log && same_inode(&lst, &r->log_id) && lst.st_size >= r->log_off : !have_log;
        if (base_same && log_same && (!have_log || lst.st_size == r->log_off + (off_t)r->log_tail)) return 0;
        if (!base_same || !log_same) { /* the base again, and its journal from the start */
            store__state_doc_free(&r->state), r->state_known = 0, r->log_known = 0, r->log_mode = LOG_NONE, r->log_tail = 0;
            char *text = NULL;
            size_t len = 0;
            int rc = base_read(path, &text, &len, err);
            if (!rc) rc = store__state_parse(text, len, &r->state, err);
            free(text);
            if (rc) return rc;
            r->state_known = 1, r->state_id = st; /* stat before the read: a change meanwhile is read next time */
        }
        r->state_gen++, r->state_absent = 0; /* another writer's change (or the first read): followed by every task */
        if (!have_log) return 0; /* a base no journal continues (yet): the next write begins one */
        int rc = journal_read(r, lpath, err);
        if (rc <= 0) {
            if (rc) store__state_doc_free(&r->state), r->state_known = 0, r->log_known = 0;
            return rc;
        }
        if (rc == 2 && tries == 3) {
            /* still newer after every try: not a compaction seen half done but two writers without
             * a lock that renamed their files in crosswise. The base is a whole state (the last
             * writer's); its journal is not followed, and the next write compacts both into one. */
            r->log_mode = LOG_STALE;
            return 0;
        }
        r->state_known = 0; /* read both again */
    }
    store__state_doc_free(&r->state), r->log_known = 0;
    return eng_err_set(err, ENG_IO, "%s: replaced while it was read; read again at the next look", STATE_FILE);
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

/* An entry's fields after its opening brace: current and max only when there is a current. */
static void put_entry(sbuf *b, const state_rec *e, int first) {
    char num[32];
    if (e->current) {
        puts_(b, first ? "\"current\": " : ", \"current\": ");
        put_str(b, e->current);
        if (e->has_max) snprintf(num, sizeof num, ", \"max\": %ld", e->max), puts_(b, num);
    }
    if (e->pinned) puts_(b, e->current || !first ? ", \"pinned\": true" : "\"pinned\": true");
    const store_rollout *ro = &e->rollout;
    if (e->current && ro->mode != STORE_ROLLOUT_NONE) {
        char buf[512];
        puts_(b, ", \"rollout\": {\"version\": ");
        put_str(b, ro->version);
        snprintf(buf, sizeof buf,
                 ", \"mode\": \"%s\", \"percent\": %.17g, \"max_share\": %.17g, \"promote_after\": %ld, "
                 "\"promote_agreement\": %.17g, \"abort_error_rate\": %.17g, \"abort_latency_ratio\": %.17g, "
                 "\"rule_min\": %ld, \"started\": %lld, \"id\": %llu}",
                 store_rollout_mode_name(ro->mode), ro->percent, ro->max_share, ro->promote_after, ro->promote_agreement,
                 ro->abort_error_rate, ro->abort_latency_ratio, ro->rule_min, (long long)ro->started,
                 (unsigned long long)ro->id);
        puts_(b, buf);
    }
}

static char *sbuf_take(sbuf *b) {
    if (b->oom || !b->p) {
        free(b->p);
        return NULL;
    }
    return b->p;
}

/* The base's text for d: version 2, its generation, tombstones, then one line per task in name
 * order. Written straight from the sorted doc, without a JSON tree: about 50 bytes a task. NULL
 * when out of memory. */
char *store__state_format(const state_doc *d) {
    sbuf b = {0};
    char num[64];
    snprintf(num, sizeof num, "{\"version\": 2, \"generation\": %lld, \"deleted\": [", d->generation);
    puts_(&b, num);
    for (int i = 0; i < d->n_deleted; i++) {
        if (i) puts_(&b, ", ");
        put_str(&b, d->deleted[i]);
    }
    puts_(&b, "], \"tasks\": {");
    for (int i = 0; i < d->n_tasks; i++) {
        puts_(&b, i ? ",\n  " : "\n  ");
        put_str(&b, d->tasks[i].name);
        puts_(&b, ": {");
        put_entry(&b, &d->tasks[i], 1);
        puts_(&b, "}");
    }
    puts_(&b, d->n_tasks ? "\n}}" : "}}");
    return sbuf_take(&b);
}

/* Task name's journal line as d holds it (with its newline). */
static void put_line(sbuf *b, const state_doc *d, const char *name) {
    const state_rec *e = store__state_find(d, name);
    puts_(b, "{\"task\": ");
    put_str(b, name);
    if (e) put_entry(b, e, 0);
    else puts_(b, ", \"gone\": true");
    puts_(b, ", \"deleted\": [");
    size_t nlen = strlen(name);
    for (int i = 0, k = 0; i < d->n_deleted; i++) {
        if (!is_tomb_of(d->deleted[i], name, nlen)) continue;
        if (k++) puts_(b, ", ");
        put_str(b, d->deleted[i] + nlen + 1);
    }
    puts_(b, "]}\n");
}

/* Puts this process's tombstones of task name (nlen bytes) in d in place of the doc's. */
static int doc_tombs(store_registry *r, state_doc *d, const char *name, size_t nlen) {
    tombs_drop(d, name, nlen);
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    for (int k = 0; !rc && k < r->n_tombs; k++)
        if (is_tomb_of(r->tombs[k], name, nlen)) rc = tomb_add(d, name, nlen, r->tombs[k] + nlen + 1);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* file (STATE_FILE or STATE_LOG) replaced by text: tmp, fsync, rename, fsync of the folder. Returns
 * 0 or a negative status with err set. */
static int write_durably(store_registry *r, const char *file, const char *text, int locked, eng_err *err) {
    char path[PATH_MAX], tmp[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, file);
    /* where locks do not work, replicas on other hosts may write at once: a name of its own then */
    char host[64] = "";
    if (locked) store__pathf(tmp, sizeof tmp, "%s/%s.tmp", r->dir, file);
    else gethostname(host, sizeof host - 1), store__pathf(tmp, sizeof tmp, "%s/%s.%s-%d.tmp", r->dir, file, host, (int)getpid());
    int fd = IO.open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    errno = 0;
    int bw = fd < 0 || write_all(fd, text, strlen(text)) || IO.fsync(fd);
    int en = errno;
    if (fd >= 0 && IO.close(fd) && !bw) bw = 1, en = errno;
    if (!bw && (IO.rename(tmp, path) || fsync_dir(r->dir))) bw = 2, en = errno;
    if (!bw) return 0;
    if (!en) en = EIO;
    if (bw == 1) unlink(tmp);
    return eng_err_set(err, store__io_status(en), "cannot write the registry state %s (%s)", file, strerror(en));
}

long store__journal_limit = -1;

/* The doc written as a new base of a new generation, then a new journal continuing it. Returns 0
 * or a negative status (the state as it was: no base of the new generation was renamed in). */
static int compact(store_registry *r, int locked, eng_err *err) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    /* above the last, and (from the clock) unlike any another writer or copy made */
    r->state.generation = now > r->state.generation ? now : r->state.generation + 1;
    char *text = store__state_format(&r->state), head[64];
    if (!text) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    size_t base_len = strlen(text);
    int rc = write_durably(r, STATE_FILE, text, locked, err);
    free(text);
    if (rc) return rc;
    snprintf(head, sizeof head, "{\"generation\": %lld}\n", r->state.generation);
    eng_err le = {0};
    if (write_durably(r, STATE_LOG, head, locked, &le)) {
        /* the base holds everything and the old journal's generation says so: written */
        store__log(r, "%s; the next write begins it again", le.msg);
        return 0;
    }
    char path[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    r->state_known = IO.stat(path, &r->state_id) == 0 && (size_t)r->state_id.st_size == base_len;
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_LOG);
    r->log_known = r->state_known && IO.stat(path, &r->log_id) == 0 && (size_t)r->log_id.st_size == strlen(head);
    r->log_off = (off_t)strlen(head), r->log_tail = 0, r->log_mode = LOG_CONTINUES;
    return 0;
}

/* lines (n bytes) appended to the journal and fsynced. On failure the journal is cut back to where
 * it was. Returns 0 or a negative status. */
static int journal_append(store_registry *r, const char *lines, size_t n, eng_err *err) {
    char path[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_LOG);
    int fd = IO.open(path, O_WRONLY | O_APPEND | O_CLOEXEC, 0);
    errno = 0;
    struct stat st;
    int ok = fd >= 0 && !write_all(fd, lines, n) && IO.fsync(fd) == 0 && IO.fstat(fd, &st) == 0;
    int en = errno ? errno : EIO;
    if (!ok && fd >= 0 && IO.ftruncate(fd, r->log_off) != 0) /* left: read again below, the partial line is skipped */
        store__log(r, "%s: could not cut a failed write back (%s); the next write compacts", path, strerror(errno));
    if (fd >= 0) IO.close(fd);
    if (!ok) {
        r->log_known = 0; /* read again before the next write */
        return eng_err_set(err, store__io_status(en), "cannot write the registry state %s (%s)", STATE_LOG, strerror(en));
    }
    r->log_id = st, r->log_off += (off_t)n;
    return 0;
}

state_change store__state_change(const char *name) {
    return (state_change){.name = name, .current = NULL, .extra_max = -1, .only_if_above = -1};
}

/* Records task c->name's entry durably under the writer lock, as a read-modify-write: the state is
 * read (other writers' lines included), the task's entry and tombstones are replaced by this
 * process's, the other tasks' entries are kept, and a task this process serves that has no entry
 * yet gets one, so that every task's current version is recorded. The lines are appended to the
 * journal, or the whole state compacted (see the file's top). The entry records the current version
 * (c->current when set: as it will be once the caller changes the table, the disk going first; see
 * versions.c) and max, the highest version number on disk, or c->extra_max when higher (a version
 * about to be renamed in). With c->only_if_above >= 0 the write is conditional: when the entry
 * already records a current version with a max >= it, nothing is written and *skipped is set
 * (another replica recorded that version as not current). A state that cannot be read refuses the
 * write (ENG_UNAVAILABLE, nothing written); only a base that does not parse is replaced.
 * admin_mu held. */
int store__state_write(store_registry *r, const state_change *c, int *skipped, eng_err *err) {
    int held, lk = store__state_lock(r, &held), rc = 0, absent;
    if (skipped) *skipped = 0;
    state_doc *dp = &r->state;
#define d (*dp)
    eng_err le = {0};
    if ((rc = state_file_load(r, &absent, &le))) {
        if (rc == ENG_NO_MEMORY) goto oom;
        if (rc != ENG_FORMAT) {
            /* a state that could not be read (an I/O error, a file replaced under every try) is not
             * "no state": written from this process's view, it would drop other tasks' tombstones
             * and the pins and rollbacks of replicas this one has not followed yet */
            r->log_known = 0, r->entries_known = 0;
            store__state_unlock(lk);
            return eng_err_set(err, ENG_UNAVAILABLE, "the registry state could not be read (%s); nothing changed, try again", le.msg);
        }
        rc = 0, absent = 1; /* a base that does not parse (it is renamed in whole): no reader follows it, rewritten */
    }
    const char *name = c->name;
    if (c->only_if_above >= 0) {
        const state_rec *o = store__state_find(&d, name);
        if (o && o->current && o->has_max && o->max >= c->only_if_above) {
            if (skipped) *skipped = 1;
            goto out;
        }
    }
    int can_append = held && !absent && r->log_known && r->log_mode == LOG_CONTINUES && !r->log_tail;
    r->state_known = 0; /* changed from here on: known again once written */
    size_t nlen = strlen(name);
    if (doc_tombs(r, &d, name, nlen)) goto oom;
    long max = store__disk_max_version(r, name);
    if (c->extra_max > max) max = c->extra_max;
    /* the tasks this process serves with no entry yet (their folder still there), then name: the
     * names whose lines this write appends */
    char **miss = NULL;
    int n_miss = 0;
    pthread_mutex_lock(&r->mu);
    /* the walk of every task only when there is no state to keep, a task gained a current version
     * or another writer changed the state since the last one (this process's writes keep every
     * entry they found) */
    int walk = absent || !r->entries_known || r->entries_cur_gen != r->cur_gen || r->entries_state_gen != r->state_gen;
    unsigned cur_gen = r->cur_gen;
    if (!(miss = calloc(walk ? (size_t)r->n_e + 1 : 1, sizeof *miss))) {
        pthread_mutex_unlock(&r->mu);
        goto oom;
    }
    for (int k = 0, j = 0; walk && k < r->n_e; k++) { /* both sorted by name: one pass, not a search a task */
        const char *nm = r->e[k]->name;
        while (j < d.n_tasks && strcmp(d.tasks[j].name, nm) < 0) j++;
        int has = j < d.n_tasks && !strcmp(d.tasks[j].name, nm);
        if (!has && r->e[k]->cur && strcmp(nm, name) && (miss[n_miss] = strdup(nm))) n_miss++;
    }
    pthread_mutex_unlock(&r->mu);
    char tdir[PATH_MAX];
    int bad = 0;
    for (int k = 0; !bad && k < n_miss; k++) {
        store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, miss[k]);
        long mk = eng_dir_exists(tdir) ? store__disk_max_version(r, miss[k]) : -1;
        pthread_mutex_lock(&r->mu);
        store_entry *e = store__get_entry(r, miss[k]);
        if (mk >= 0 && e && e->cur)
            bad = doc_set(&d, miss[k], e->cur->version, 1, e->cur->vnum > mk ? e->cur->vnum : mk, e->admin_pinned, &e->rollout);
        pthread_mutex_unlock(&r->mu);
    }
    if (!bad) {
        pthread_mutex_lock(&r->mu);
        store_entry *e = store__get_entry(r, name);
        const char *cur = c->current ? c->current : e && e->cur ? e->cur->version : NULL;
        if (cur || e) {
            long cv = store__version_number(cur ? cur : "");
            const store_rollout *ro = c->rollout ? c->rollout : e ? &e->rollout : NULL;
            bad = doc_set(&d, name, cur, 1, cv > max ? cv : max, e && e->admin_pinned, ro);
        } else {
            doc_del(&d, name); /* the task is gone */
        }
        pthread_mutex_unlock(&r->mu);
    }
    sbuf lines = {0};
    char *text = NULL;
    for (int k = 0; !bad && can_append && k <= n_miss; k++) put_line(&lines, &d, k < n_miss ? miss[k] : name);
    store__free_strs(miss, n_miss);
    if (bad || (can_append && !(text = sbuf_take(&lines)))) goto oom; /* bad: no line was put */
    off_t limit = store__journal_limit >= 0 ? (off_t)store__journal_limit
                  : r->state_id.st_size > STATE_LOG_MIN_BYTES ? r->state_id.st_size : STATE_LOG_MIN_BYTES;
    if (can_append && r->log_off + (off_t)lines.n <= limit) {
        if (!(rc = journal_append(r, text, lines.n, err))) r->state_known = 1; /* the base as it was, the journal as written */
    } else {
        rc = compact(r, held, err);
    }
    free(text);
    if (rc) r->log_known = 0, r->entries_known = 0; /* read both again */
    else if (walk) r->entries_known = 1, r->entries_cur_gen = cur_gen, r->entries_state_gen = r->state_gen;
out:
    store__state_unlock(lk);
    return rc;
oom:
    store__state_doc_free(&d);
    r->log_known = 0, r->entries_known = 0;
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
        e->rollout = st.rollout;
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
