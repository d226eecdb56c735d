/* store.c - see store.h. The registry's tables (tasks by name, their versions, models), the
 * metadata read from task.json or inferred from the saved configs, residency under a memory
 * budget, version changes and the state file.
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
 * Weights are never loaded or freed under the mutex: a load marks the version `loading`, drops the
 * lock, loads, and publishes; others wanting the same version wait on a condition variable.
 * Evicted weights are detached under the lock and freed after it.
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
 * state file's temporary) is swept at the next start.
 *
 * Replicas on one registry. Each state write is a read-modify-write of one task's entry under a
 * POSIX record lock (.adapterd-state.lock): other tasks' entries are kept as on disk. An entry
 * holds the current version and max, the highest number on disk when it was written; every
 * rescan re-reads the file and applies rule_current (the recorded version unless one above max
 * exists, then the highest), so replicas agree and a version dropped in by hand still wins.
 *
 * Start-up keeps going past bad versions: a version that cannot be read or loaded is kept on disk
 * and listed as failed with its reason; a task whose current version fails is served on its
 * newest good version, and says so (store_task_fallback). */
#define _GNU_SOURCE
#include "adapters_store/store.h"
#include "engine/files.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/files.h"

#define STATE_FILE ".adapterd-state.json"
#define TASK_JSON_MAX_BYTES ((size_t)16 << 20) /* labels of a large tagging task are kilobytes */
#define NFTW_FDS 16 /* directories a tree walk keeps open at once */
#define STATE_LOCK ".adapterd-state.lock"

struct store_model {
    atomic_int refs;
    char *name;
    eng_model *model;
    eng_tokenizer *tok;
    int max_tokens;
};

struct store_task {
    atomic_int refs;            /* the listing's one + callers' */
    store_registry *reg;
    char *name, *version;
    long vnum;
    char *dir;                  /* the version directory */
    store_model *model;         /* one reference held */
    char *sub[ENG_MAX_FUSE];    /* adapter folders, relative to dir */
    int n_sub;
    char *fusion, *head;        /* relative to dir, or NULL */
    char **cfg_labels;          /* task.json's labels or NULL */
    int n_cfg_labels;
    int skip_min, skip_max, skip_def;
    int pinned_cfg;             /* task.json "pinned" */
    int from_cfg;               /* the layout came from task.json (else it was inferred from the folders) */
    uint64_t fingerprint;       /* of the files when listed */
    int changed_reported;
    atomic_int listed;
    /* written under reg->mu (store_task_release reads it under the lock too: a release that drops
     * the last request's reference and a set_current that retires the version see each other, so
     * one of them unloads); atomic for the readers that only report it */
    atomic_int current;
    /* guarded by reg->mu */
    eng_task *_Atomic task;
    int loading;
    uint64_t last_used;
    size_t bytes;               /* of the last load */
    /* written once before loaded_once is set, read after */
    atomic_int loaded_once;
    char **labels;
    int n_labels;
    char kind[64];
    int head_type;
    char **fuse_names;          /* the fusion's children in fusion order (n_fuse; 0: no fusion) */
    int n_fuse;
    uint8_t fuse_kept[ENG_MAX_FUSE]; /* 1: runs; 0: pruned by the version's fusion_pruning.json */
    /* set at open when this version stands in for a current one that failed; cleared (only the
     * flag: the strings live until destroy) by any later change of current */
    char *fb_from, *fb_why;
    atomic_int fb_active;
};

typedef struct {
    char *name;
    store_task **v;             /* sorted by vnum */
    int n;
    store_task *cur;
    int admin_pinned;           /* persisted */
    char *want, *want_why;      /* open only: the recorded current version that is not listed, and why */
} store_entry;

/* A version folder that did not read or load: kept on disk, listed with its reason. */
typedef struct {
    char *name, *version, *reason;
} broken_version;

struct store_registry {
    char *dir;
    store_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t admin_mu;
    store_model **models;       /* sorted by name */
    int n_models;
    store_entry **e;            /* sorted by name */
    int n_e, cap_e;
    uint64_t clock;
    size_t resident_bytes;
    store_stats st;
    char **tombs;               /* "name/version" deleted but not removable from disk */
    int n_tombs;
    char **bad;                 /* "name/version@fingerprint" that failed in a rescan */
    int n_bad;
    broken_version *broken;     /* guarded by mu */
    int n_broken;
    broken_version *bad_models; /* models/<name> that did not load (version unused); set at open */
    int n_bad_models;
};

static int bad_seen(store_registry *r, const char *name, const char *version, uint64_t fp, int add);
static int state_lock(store_registry *r, int *held);
static void state_unlock(int fd);

store_params store_default_params(void) {
    return (store_params){.allow_skip = 0, .verbose = 1, .memory_budget = 0, .load_rate = 0, .load_burst = (size_t)16 << 20,
                          .precision = ENG_PRECISION_FP32};
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void logf_(store_registry *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(store_registry *r, const char *fmt, ...) {
    if (!r->p.verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("adapterd: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- reference counts ---- */

void store_model_retain(store_model *m) {
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

static void free_strs(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

static void task_destroy(store_task *t) {
    eng_task_free(atomic_load(&t->task));
    store_model_release(t->model);
    for (int i = 0; i < t->n_sub; i++) free(t->sub[i]);
    free(t->fusion), free(t->head);
    free_strs(t->cfg_labels, t->n_cfg_labels);
    free_strs(t->labels, t->n_labels);
    free_strs(t->fuse_names, t->n_fuse);
    free(t->fb_from), free(t->fb_why);
    free(t->name), free(t->version), free(t->dir);
    free(t);
}

void store_task_retain(store_task *t) {
    if (t) atomic_fetch_add(&t->refs, 1);
}

/* Nothing of t is read after the decrement unless the lock is held: once our reference is gone,
 * whoever holds the last one may free t at any moment. A listed version is released under the
 * mutex, where the listing's reference cannot go (unlisting takes the mutex), so the check "only
 * the listing holds it now, and it is not current" is safe there; then a version that is not
 * current and that no request holds is unloaded (no reason to stay in memory). An unlisted version
 * is never listed again: a plain decrement. */
void store_task_release(store_task *t) {
    if (!t) return;
    store_registry *r = t->reg;
    int left;
    eng_task *et = NULL;
    if (!atomic_load(&t->listed)) {
        left = atomic_fetch_sub(&t->refs, 1) - 1;
    } else {
        pthread_mutex_lock(&r->mu);
        left = atomic_fetch_sub(&t->refs, 1) - 1;
        if (left == 1 && atomic_load(&t->listed) && !t->current && !t->loading && (et = atomic_load(&t->task))) {
            atomic_store(&t->task, NULL);
            r->resident_bytes -= t->bytes;
            r->st.unloads++;
        }
        pthread_mutex_unlock(&r->mu);
    }
    assert(left >= 0 && "store_task released below zero");
    eng_task_free(et);
    if (left == 0) task_destroy(t);
}

/* ---- helpers ---- */

/* snprintf for paths; a path that does not fit is cut (and then fails to open, naming itself). */
static int pathf(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *dst, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(dst, n, fmt, ap);
    va_end(ap);
    return r;
}

/* 1 when dir/sub/file is a regular file (engine/files.h's rule). */
static int file_in(const char *dir, const char *sub, const char *file) {
    char p[PATH_MAX];
    return pathf(p, sizeof p, "%s/%s", dir, sub) < (int)sizeof p && eng_file_exists_in(p, file);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Lists the visible sub-directories of dir, sorted. Returns the count or a negative status. */
static int list_subdirs(const char *dir, char ***out, eng_err *err) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return eng_err_set(err, ENG_IO, "%s: cannot open (%s)", dir, strerror(errno));
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[PATH_MAX];
        if (pathf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p || !eng_dir_exists(p)) continue;
        if (n == cap) {
            int nc = cap ? cap * 2 : 8;
            char **nv = realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) goto oom;
            v = nv, cap = nc;
        }
        if (!(v[n] = strdup(de->d_name))) goto oom;
        n++;
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    return n;
oom:
    closedir(d);
    free_strs(v, n);
    return eng_err_set(err, ENG_NO_MEMORY, "out of memory listing %s", dir);
}

static int all_digits(const char *s) {
    if (!*s) return 0;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
}

/* A version name is the canonical decimal of its number: digits (at most 18), no leading zero but
 * in "0" itself; "01" next to "1" would be two folders for one number. Returns it or -1. */
static long version_number(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 18 || (n > 1 && s[0] == '0') || !all_digits(s)) return -1;
    return strtol(s, NULL, 10);
}

/* Digits with a leading zero: a version folder written wrongly, reported rather than ignored. */
static int version_noncanonical(const char *s) { return s[0] == '0' && s[1] && all_digits(s); }

/* Task names: 1..128 of [A-Za-z0-9._-], not starting with '.'. */
static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128 || s[0] == '.') return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
              *c == '-' || *c == '.'))
            return 0;
    return 1;
}

/* Fingerprint of every file under a version directory: path, size, mtime. */
static __thread uint64_t fp_acc;
static __thread size_t fp_base;
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}
static int fp_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)ftw;
    if (type != FTW_F) return 0;
    uint64_t h = fnv(1469598103934665603ull, path + fp_base, strlen(path + fp_base));
    h = fnv(h, &sb->st_size, sizeof sb->st_size);
    h = fnv(h, &sb->st_mtim, sizeof sb->st_mtim);
    fp_acc += h; /* order-free */
    return 0;
}
static uint64_t fingerprint(const char *dir) {
    fp_acc = 0;
    fp_base = strlen(dir);
    if (nftw(dir, fp_visit, NFTW_FDS, FTW_PHYS) != 0) return 0;
    return fp_acc;
}

static int rm_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

int store_remove_dir(const char *dir) { return nftw(dir, rm_visit, NFTW_FDS, FTW_DEPTH | FTW_PHYS) ? -1 : 0; }

/* ---- durability ---- */

/* A full disk (or a file size limit) is its own status: the client may retry elsewhere or later. */
static eng_status io_status(int e) { return e == ENOSPC || e == EDQUOT || e == EFBIG ? ENG_NO_SPACE : ENG_IO; }

/* fsync of one file or directory (not following a link). Returns 0, or -1 with errno. */
static int fsync_path(const char *p, int dir) {
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (dir ? O_DIRECTORY : 0));
    if (fd < 0) return -1;
    int rc = fsync(fd), e = errno;
    close(fd);
    errno = e;
    return rc;
}

static __thread int sync_errno;
static int sync_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)ftw;
    int rc = 0;
    if (type == FTW_F && S_ISREG(sb->st_mode)) rc = fsync_path(path, 0);
    else if (type == FTW_DP) rc = fsync_path(path, 1);
    if (rc) sync_errno = errno;
    return rc ? 1 : 0;
}

/* fsyncs every regular file and directory under dir, contents before their directory, so that a
 * rename publishing dir never lands on disk ahead of what it names. Returns 0, or -1 with errno. */
static int sync_tree(const char *dir) {
    sync_errno = 0;
    if (nftw(dir, sync_visit, NFTW_FDS, FTW_DEPTH | FTW_PHYS) == 0) return 0;
    if (sync_errno) errno = sync_errno;
    return -1;
}

/* Names a crashed writer of ours leaves in tasks/ and tasks/<name>/. */
static int ours_left_behind(const char *n) { return !strncmp(n, ".upload-", 8) || !strncmp(n, ".deleted-", 9); }

/* Removes what a killed server leaves behind: upload staging (tasks/.upload-*), folders moved aside
 * to be deleted (tasks/.deleted-*, tasks/<name>/.deleted-*), the state file's temporary, and task
 * folders left empty (created for an upload that never got renamed in). Other '.' names may be a
 * writer's copy in progress and stay. A replica's upload in progress on the same registry would go
 * too (its staging name is the same kind): replicas are started while no upload runs. */
static void sweep(store_registry *r) {
    char tasks[PATH_MAX], p[PATH_MAX], q[PATH_MAX];
    pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
    DIR *d = opendir(tasks);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (pathf(p, sizeof p, "%s/%s", tasks, de->d_name) >= (int)sizeof p) continue;
        if (ours_left_behind(de->d_name)) {
            logf_(r, "removing %s/%s, left by an interrupted upload or deletion", "tasks", de->d_name);
            if (store_remove_dir(p)) logf_(r, "%s: could not remove everything (%s)", p, strerror(errno));
            continue;
        }
        if (de->d_name[0] == '.' || !eng_dir_exists(p)) continue;
        DIR *t = opendir(p);
        struct dirent *te;
        while (t && (te = readdir(t))) {
            if (!ours_left_behind(te->d_name) || pathf(q, sizeof q, "%s/%s", p, te->d_name) >= (int)sizeof q) continue;
            logf_(r, "removing tasks/%s/%s, left by an interrupted deletion", de->d_name, te->d_name);
            if (store_remove_dir(q)) logf_(r, "%s: could not remove everything (%s)", q, strerror(errno));
        }
        if (t) closedir(t);
        if (rmdir(p) == 0) logf_(r, "removed the empty task folder tasks/%s", de->d_name); /* fails unless empty */
    }
    if (d) closedir(d);
    /* under the writer lock: a replica on the same registry may be writing it right now (the
     * lock file is created only then: a registry that is only read gets no new file) */
    pathf(p, sizeof p, "%s/%s.tmp", r->dir, STATE_FILE);
    if (access(p, F_OK) == 0) {
        int held, lk = state_lock(r, &held);
        if (held) unlink(p);
        state_unlock(lk);
    }
    fsync_path(tasks, 1);
}

/* ---- failed versions (reg->mu held) ---- */

static int broken_find(const store_registry *r, const char *name, const char *version) {
    for (int i = 0; i < r->n_broken; i++)
        if (!strcmp(r->broken[i].name, name) && !strcmp(r->broken[i].version, version)) return i;
    return -1;
}

/* A copy of msg with the registry's folder cut from the paths it names: the listing shows where in
 * the registry, never where the registry is on the server. NULL when out of memory. */
static char *registry_relative(const store_registry *r, const char *msg) {
    char *out = strdup(msg);
    size_t dl = strlen(r->dir);
    if (!out || !dl) return out;
    char *w = out;
    for (const char *p = msg; *p;) {
        if (!strncmp(p, r->dir, dl) && p[dl] == '/' && (p == msg || strchr(" \"'(:=", p[-1]))) p += dl + 1;
        else *w++ = *p++;
    }
    *w = '\0';
    return out;
}

/* Records (or updates the reason of) a version that failed; silently drops it when out of memory. */
static void broken_add_locked(store_registry *r, const char *name, const char *version, const char *reason) {
    int i = broken_find(r, name, version);
    char *why = registry_relative(r, reason && *reason ? reason : "failed");
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

static void broken_remove_at(store_registry *r, int i) {
    free(r->broken[i].name), free(r->broken[i].version), free(r->broken[i].reason);
    r->broken[i] = r->broken[--r->n_broken];
}

/* Drops the record of name/version, or of every version of name when version is NULL. */
static void broken_remove_locked(store_registry *r, const char *name, const char *version) {
    for (int i = r->n_broken - 1; i >= 0; i--)
        if (!strcmp(r->broken[i].name, name) && (!version || !strcmp(r->broken[i].version, version))) broken_remove_at(r, i);
}

static void broken_add(store_registry *r, const char *name, const char *version, const char *reason) {
    pthread_mutex_lock(&r->mu);
    broken_add_locked(r, name, version, reason);
    pthread_mutex_unlock(&r->mu);
}

/* ---- models ---- */

/* The model's precision: models/NAME/model.json's, else the registry's default. */
static int load_model(const char *root, const char *name, const store_params *p, store_model **out, eng_err *err) {
    char dir[PATH_MAX];
    pathf(dir, sizeof dir, "%s/models/%s", root, name);
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
static int meta_parse(store_registry *r, const char *name, const char *vname, const char *vdir, const char *task_json,
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
    t->vnum = version_number(vname);
    if (!(t->name = strdup(name)) || !(t->version = strdup(vname)) || !(t->dir = strdup(vdir))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    pathf(path, sizeof path, "%s/task.json", vdir);
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
    store_model_retain(m);
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
        if ((ns = list_subdirs(vdir, &subs, err)) < 0) {
            rc = ns;
            ns = 0;
            goto fail;
        }
        /* a version folder that is one saved adapter (save_adapter / save_pretrained, then tar -C out .) */
        int top = file_in(vdir, ".", "adapter_config.json");
        if (top && !(t->sub[t->n_sub++] = strdup("."))) goto oom;
        for (int i = 0; i < ns; i++) {
            if (top && (file_in(vdir, subs[i], "adapter_config.json") || file_in(vdir, subs[i], "adapter_fusion_config.json"))) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT,
                                 "%s: adapter_config.json at the top and adapter folders inside (%s): one layout per "
                                 "version (the top folder as the task's one adapter, or sub-folders)", vdir, subs[i]);
                goto fail;
            }
            if (file_in(vdir, subs[i], "adapter_fusion_config.json")) {
                free(t->fusion);
                if (!(t->fusion = strdup(subs[i]))) goto oom;
            } else if (file_in(vdir, subs[i], "adapter_config.json")) {
                if (t->n_sub == ENG_MAX_FUSE) {
                    rc = eng_err_set(err, ENG_LIMIT, "%s: more than %d adapter folders", vdir, ENG_MAX_FUSE);
                    goto fail;
                }
                if (!(t->sub[t->n_sub++] = strdup(subs[i]))) goto oom;
            } else if (file_in(vdir, subs[i], "head_config.json")) {
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
    free_strs(subs, ns);
    t->fingerprint = fingerprint(vdir);
    *out = t;
    return 0;
oom:
    rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
fail:
    json_decref(cfg);
    free_strs(subs, ns);
    task_destroy(t);
    return rc;
}

/* meta_parse of vdir's own task.json, read whole when there is one. */
static int meta_read(store_registry *r, const char *name, const char *vname, const char *vdir, store_task **out,
                     eng_err *err) {
    char path[PATH_MAX];
    pathf(path, sizeof path, "%s/task.json", vdir);
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK) == 0) {
        int rc = eng_file_read(path, TASK_JSON_MAX_BYTES, &text, &len, err);
        if (rc) return rc;
    }
    int rc = meta_parse(r, name, vname, vdir, text, len, out, err);
    free(text);
    return rc;
}

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
    double wait = p->t0 + (double)(p->bytes - p->burst) / (double)p->rate - now_s();
    if (wait <= 0) return;
    struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Loads t's weights (no lock held). Returns 0 and *out, or a negative status naming the culprit. */
static int weights_load(const store_task *t, eng_task **out, eng_err *err) {
    char dbuf[ENG_MAX_FUSE][PATH_MAX], fbuf[PATH_MAX], hbuf[PATH_MAX];
    const char *dirs[ENG_MAX_FUSE];
    for (int i = 0; i < t->n_sub; i++) {
        /* "." (the version folder is the adapter) as the folder itself: a PEFT adapter is named after it */
        if (!strcmp(t->sub[i], ".")) pathf(dbuf[i], sizeof dbuf[i], "%s", t->dir);
        else pathf(dbuf[i], sizeof dbuf[i], "%s/%s", t->dir, t->sub[i]);
        dirs[i] = dbuf[i];
    }
    eng_task_params tp = eng_task_default_params();
    tp.name = t->name;
    if (t->fusion) pathf(fbuf, sizeof fbuf, "%s/%s", t->dir, t->fusion), tp.fusion_dir = fbuf;
    if (t->head) pathf(hbuf, sizeof hbuf, "%s/%s", t->dir, t->head), tp.head_dir = hbuf;
    pacer pc = {now_s(), 0, t->reg->p.load_rate, t->reg->p.load_burst};
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
        if (!s) pathf(buf, sizeof buf, "LABEL_%d", i), s = buf;
        lb[i] = strdup(s);
        if (!lb[i]) {
            free_strs(lb, i);
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
            free_strs(names, i);
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

static int entry_pinned(const store_entry *e) { return e->admin_pinned || (e->cur && e->cur->pinned_cfg); }

typedef struct {
    eng_task *v[64];
    int n;
} detached;

static void detach_locked(store_registry *r, store_task *t, detached *d) {
    eng_task *et = atomic_load(&t->task);
    if (!et || d->n == 64) return;
    atomic_store(&t->task, NULL);
    r->resident_bytes -= t->bytes;
    d->v[d->n++] = et;
}

static void free_detached(detached *d) {
    for (int i = 0; i < d->n; i++) eng_task_free(d->v[i]);
    d->n = 0;
}

/* Evicts least recently used versions no request holds, except keep and pinned current ones, until
 * the resident bytes fit the budget (or nothing more can go). */
static void evict_locked(store_registry *r, const store_task *keep, detached *d) {
    if (!r->p.memory_budget) return;
    while (r->resident_bytes > r->p.memory_budget && d->n < 64) {
        store_task *best = NULL;
        for (int i = 0; i < r->n_e; i++) {
            store_entry *e = r->e[i];
            for (int k = 0; k < e->n; k++) {
                store_task *t = e->v[k];
                if (t == keep || !atomic_load(&t->task) || t->loading || atomic_load(&t->refs) != 1) continue;
                if (t == e->cur && entry_pinned(e)) continue;
                if (!best || t->last_used < best->last_used) best = t;
            }
        }
        if (!best) break;
        detach_locked(r, best, d);
        r->st.evictions++;
        logf_(r, "evicted task %s v%s (%zu bytes; %zu of %zu resident)", best->name, best->version, best->bytes,
              r->resident_bytes, r->p.memory_budget);
    }
}

/* Publishes loaded weights; the caller then evicts beyond the budget. */
static void publish_locked(store_registry *r, store_task *t, eng_task *et, double seconds) {
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
static int ensure_loaded(store_registry *r, store_task *t, eng_err *err) {
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
    double t0 = now_s();
    eng_task *et = NULL;
    int rc = weights_load(t, &et, err);
    double dt = now_s() - t0;
    detached d = {0};
    pthread_mutex_lock(&r->mu);
    t->loading = 0;
    if (rc == 0) {
        publish_locked(r, t, et, dt);
        evict_locked(r, t, &d);
    } else {
        r->st.load_failures++;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    free_detached(&d);
    if (rc == 0) logf_(r, "loaded task %s v%s (%s, %zu bytes) in %.1f ms", t->name, t->version, t->kind, t->bytes, dt * 1e3);
    return rc;
}

int store_task_resident(const store_task *t) { return atomic_load(&((store_task *)t)->task) != NULL; }

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

static store_entry *get_entry(store_registry *r, const char *name) {
    int pos;
    return find_entry(r, name, strlen(name), &pos) ? r->e[pos] : NULL;
}

/* Returns the entry named name, created when missing, or NULL when out of memory. */
static store_entry *make_entry(store_registry *r, const char *name) {
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

static store_task *find_version(const store_entry *e, const char *version) {
    for (int i = 0; e && i < e->n; i++)
        if (!strcmp(e->v[i]->version, version)) return e->v[i];
    return NULL;
}

/* Lists t (its refs 1 becomes the listing's) in version order. */
static int add_version_locked(store_entry *e, store_task *t) {
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

/* Makes t current; the old current is unloaded when no request holds it. */
static void set_current_locked(store_registry *r, store_entry *e, store_task *t, detached *d) {
    store_task *old = e->cur;
    e->cur = t;
    t->current = 1;
    atomic_store(&t->fb_active, 0);
    if (old) atomic_store(&old->fb_active, 0);
    if (old && old != t) {
        old->current = 0;
        if (atomic_load(&old->refs) == 1 && !old->loading) detach_locked(r, old, d);
    }
}

/* Unlists t; the caller drops the listing's reference after unlocking. */
static void unlist_locked(store_registry *r, store_entry *e, store_task *t) {
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

static void drop_entry_locked(store_registry *r, store_entry *e) {
    int pos;
    if (!find_entry(r, e->name, strlen(e->name), &pos)) return;
    memmove(&r->e[pos], &r->e[pos + 1], (size_t)(r->n_e - pos - 1) * sizeof *r->e);
    r->n_e--;
}

static void entry_free(store_entry *e) {
    free(e->want), free(e->want_why);
    free(e->v);
    free(e->name);
    free(e);
}

/* ---- a load that fails after start-up ---- */

/* A listed version whose weights failed to load after start-up (with a budget, start-up reads only
 * metadata) is treated as start-up treats it: unlisted and recorded as failed with its reason;
 * when it was current, the newest remaining version stands in (loaded on its first use, and
 * handled the same way if it fails too) and says so (store_task_fallback). The state file still
 * names the failed version, as after a start-up fallback: only an admin change rewrites it. */
static void fail_listed(store_registry *r, store_task *t, const char *why) {
    pthread_mutex_lock(&r->mu);
    store_entry *e = atomic_load(&t->listed) ? get_entry(r, t->name) : NULL;
    int k = 0;
    while (e && k < e->n && e->v[k] != t) k++;
    if (!e || k == e->n) { /* already unlisted: deleted, replaced, or failed in another thread */
        pthread_mutex_unlock(&r->mu);
        return;
    }
    int was_current = e->cur == t;
    broken_add_locked(r, t->name, t->version, why);
    unlist_locked(r, e, t);
    store_task *nt = NULL;
    if (was_current && e->n) {
        nt = e->v[e->n - 1];
        e->cur = nt;
        nt->current = 1;
        /* the strings are written once and live until destroy (a reader may hold them): a version
         * that stood in for another one before says so only if it is the same one again */
        if (!nt->fb_from && (nt->fb_from = strdup(t->version)) && !(nt->fb_why = registry_relative(r, why))) {
            free(nt->fb_from);
            nt->fb_from = NULL;
        }
        atomic_store(&nt->fb_active, nt->fb_from && !strcmp(nt->fb_from, t->version));
    }
    int dropped = was_current && !e->n;
    if (dropped) drop_entry_locked(r, e);
    pthread_mutex_unlock(&r->mu);
    if (nt)
        fprintf(stderr, "adapterd: task %s: version %s should be current but did not load; serving version %s\n", t->name,
                t->version, nt->version);
    else if (dropped)
        fprintf(stderr, "adapterd: task %s has no version that loads; not served (its versions list why)\n", t->name);
    else fprintf(stderr, "adapterd: task %s version %s did not load; listed as failed\n", t->name, t->version);
    if (dropped) entry_free(e);
    store_task_release(t); /* the listing's reference; the caller still holds its own */
}

int store_task_ensure(store_registry *r, store_task *t, eng_err *err) {
    int rc = ensure_loaded(r, t, err);
    if (rc && rc != ENG_NO_MEMORY) fail_listed(r, t, err->msg);
    return rc;
}

/* ---- the state file ---- */

static int tomb_index(const store_registry *r, const char *name, const char *version) {
    char key[300];
    pathf(key, sizeof key, "%s/%s", name, version);
    for (int i = 0; i < r->n_tombs; i++)
        if (!strcmp(r->tombs[i], key)) return i;
    return -1;
}

/* Highest version number among the version directories of tasks/<name>/ on disk (dot names
 * excluded), or -1. */
static long disk_max_version(store_registry *r, const char *name) {
    char tdir[PATH_MAX];
    pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    char **vers = NULL;
    int nv = list_subdirs(tdir, &vers, NULL);
    long m = -1;
    for (int i = 0; i < nv; i++) {
        long v = version_number(vers[i]);
        if (v > m) m = v;
    }
    free_strs(vers, nv > 0 ? nv : 0);
    return m;
}

/* Takes the registry's writer lock (a POSIX record lock on .adapterd-state.lock, which NFS and
 * most shared volumes honour across hosts). Returns the descriptor to pass to state_unlock; *held
 * is 0 when the file system has no locks (the write then goes on unlocked). */
static int state_lock(store_registry *r, int *held) {
    char path[PATH_MAX];
    pathf(path, sizeof path, "%s/%s", r->dir, STATE_LOCK);
    *held = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    while (fcntl(fd, F_SETLKW, &fl) < 0) {
        if (errno == EINTR) continue;
        logf_(r, "%s: no lock (%s); the state is written unlocked", path, strerror(errno));
        return fd;
    }
    *held = 1;
    return fd;
}

static void state_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing releases the record lock */
}

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
static int state_update(store_registry *r, const char *name, const char *ov_cur, long extra_max, long above, int *skipped,
                        eng_err *err) {
    int held, lk = state_lock(r, &held), rc = 0;
    if (skipped) *skipped = 0;
    char path[PATH_MAX], tmp[PATH_MAX], tdir[PATH_MAX];
    pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
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
    long max = disk_max_version(r, name);
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
        pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, miss[k]);
        long mk = eng_dir_exists(tdir) ? disk_max_version(r, miss[k]) : -1;
        pthread_mutex_lock(&r->mu);
        store_entry *e = get_entry(r, miss[k]);
        int bad = 0;
        if (mk >= 0 && e && e->cur)
            bad = state_entry_set(tasks, miss[k], e->cur->version, e->cur->vnum > mk ? e->cur->vnum : mk, e->admin_pinned);
        pthread_mutex_unlock(&r->mu);
        if (bad) {
            free_strs(miss, n_miss);
            goto oom;
        }
    }
    free_strs(miss, n_miss);
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < r->n_tombs; k++)
        if (strncmp(r->tombs[k], name, nlen) == 0 && r->tombs[k][nlen] == '/' &&
            json_array_append_new(dead, json_string(r->tombs[k]))) {
            pthread_mutex_unlock(&r->mu);
            goto oom;
        }
    store_entry *e = get_entry(r, name);
    const char *cur = ov_cur ? ov_cur : e && e->cur ? e->cur->version : NULL;
    int bad = 0;
    if (cur || e) {
        long cv = version_number(cur ? cur : "");
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
    if (held) pathf(tmp, sizeof tmp, "%s/%s.tmp", r->dir, STATE_FILE);
    else gethostname(host, sizeof host - 1), pathf(tmp, sizeof tmp, "%s/%s.%s-%d.tmp", r->dir, STATE_FILE, host, (int)getpid());
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) goto oom;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t n = strlen(text);
    errno = 0;
    int bw = fd < 0 || write(fd, text, n) != (ssize_t)n || write(fd, "\n", 1) != 1 || fsync(fd);
    if (fd >= 0 && close(fd) && !bw) bw = 1;
    if (!bw && (rename(tmp, path) || fsync_path(r->dir, 1))) bw = 2;
    if (bw) {
        int en = errno ? errno : ENOSPC; /* a short write sets no errno: the disk is full */
        rc = eng_err_set(err, io_status(en), "cannot write the registry state %s (%s)", STATE_FILE, strerror(en));
        if (bw == 1) unlink(tmp);
    }
    free(text);
out:
    json_decref(root), json_decref(dead);
    state_unlock(lk);
    return rc;
oom:
    json_decref(root), json_decref(dead);
    state_unlock(lk);
    return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
}

/* Records task ov_name with current version ov_cur before the caller makes it current. */
static int state_write_as(store_registry *r, const char *ov_name, const char *ov_cur, eng_err *err) {
    return state_update(r, ov_name, ov_cur, -1, -1, NULL, err);
}

/* Records task name as this process serves it; extra_max as for state_update. */
static int state_write(store_registry *r, const char *name, long extra_max, eng_err *err) {
    return state_update(r, name, NULL, extra_max, -1, NULL, err);
}

/* The state file's word on one task. */
typedef struct {
    const char *name;
    const char *current;     /* NULL: none recorded */
    long max;                /* highest version on disk when current was recorded */
    int pinned;
} state_task;

/* The version the rule makes current among e's listed versions: the state's current while no
 * listed version is numbered above the state's max, else the highest. Every replica applies it to
 * the same files, so they agree once they have looked. reg->mu held. */
static store_task *rule_current(const store_entry *e, const state_task *st) {
    if (!e->n) return NULL;
    store_task *hi = e->v[e->n - 1];
    store_task *c = st && st->current ? find_version(e, st->current) : NULL;
    return c && hi->vnum <= st->max ? c : hi;
}

/* Applies the state file at open: tombstones, current versions, pins. A missing file is no state. */
static int state_read(store_registry *r, eng_err *err) {
    char path[PATH_MAX];
    pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
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
        store_entry *e = get_entry(r, k);
        if (!e) continue;
        json_t *mx = json_object_get(v, "max");
        /* a state file of version 1 has no max: its current holds */
        state_task st = {k, json_string_value(json_object_get(v, "current")), json_is_integer(mx) ? (long)json_integer_value(mx) : LONG_MAX, 0};
        store_task *t = rule_current(e, &st);
        if (st.current && t && strcmp(t->version, st.current)) {
            if (find_version(e, st.current)) logf_(r, "state: task %s has versions above %ld; serving the highest", k, st.max);
            else logf_(r, "state: task %s version %s is gone; serving the highest", k, st.current);
        }
        if (t) {
            if (e->cur) e->cur->current = 0;
            e->cur = t;
            t->current = 1;
        }
        if (st.current && !find_version(e, st.current) && !e->want && (!e->n || e->v[e->n - 1]->vnum <= st.max)) {
            /* its folder failed to read, or is gone: the newest good version stands in (store_open) */
            int b = broken_find(r, k, st.current);
            e->want = strdup(st.current);
            e->want_why = strdup(b >= 0 ? r->broken[b].reason : "its folder is gone");
        }
        e->admin_pinned = json_is_true(json_object_get(v, "pinned"));
    }
    json_decref(root);
    return 0;
}

/* ---- open / free ---- */

/* Records a version that failed at start-up: logged, listed as failed, and known to the rescan
 * (its fingerprint) so that only a changed folder is tried again. */
static void broken_at_open(store_registry *r, const char *name, const char *version, const char *vdir, const char *why) {
    fprintf(stderr, "adapterd: task %s version %s is not served: %s\n", name, version, why);
    broken_add(r, name, version, why);
    bad_seen(r, name, version, fingerprint(vdir), 1);
}

/* Reads every version's metadata of task name and lists it (no weights). A version that does not
 * read is recorded as failed, not fatal. Returns ENG_NOT_FOUND when nothing is listed. */
static int scan_task(store_registry *r, const char *name, eng_err *err) {
    char tdir[PATH_MAX], vdir[PATH_MAX];
    pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    char **vers = NULL;
    int nv = list_subdirs(tdir, &vers, err), rc = 0;
    if (nv < 0) return nv;
    store_entry *e = NULL;
    for (int i = 0; i < nv; i++) {
        pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[i]);
        if (version_noncanonical(vers[i]) && tomb_index(r, name, vers[i]) < 0) {
            char why[128];
            pathf(why, sizeof why, "version folder name \"%.40s\" has a leading zero (name it %ld)", vers[i],
                  strtol(vers[i], NULL, 10));
            broken_at_open(r, name, vers[i], vdir, why);
            continue;
        }
        if (version_number(vers[i]) < 0 || tomb_index(r, name, vers[i]) >= 0) continue;
        store_task *t;
        eng_err me = {0};
        if ((rc = meta_read(r, name, vers[i], vdir, &t, &me))) {
            if (rc == ENG_NO_MEMORY) {
                *err = me;
                break;
            }
            broken_at_open(r, name, vers[i], vdir, me.msg);
            rc = 0;
            continue;
        }
        if (!e && !(e = make_entry(r, name))) {
            task_destroy(t);
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            break;
        }
        if (add_version_locked(e, t)) {
            task_destroy(t);
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            break;
        }
    }
    free_strs(vers, nv);
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
    while (e->cur && !(r->p.memory_budget && !entry_pinned(e))) {
        eng_err le = {0};
        int rc = ensure_loaded(r, e->cur, &le);
        if (!rc) break;
        if (rc == ENG_NO_MEMORY) {
            *err = le;
            return rc;
        }
        store_task *bad = e->cur;
        broken_at_open(r, e->name, bad->version, bad->dir, le.msg);
        if (!e->want) e->want = strdup(bad->version), e->want_why = registry_relative(r, le.msg);
        pthread_mutex_lock(&r->mu);
        unlist_locked(r, e, bad);
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
    pathf(path, sizeof path, "%s/models", dir);
    if ((n = list_subdirs(path, &names, err)) < 0) {
        rc = n;
        goto fail;
    }
    if (!(r->models = calloc((size_t)n + 1, sizeof *r->models))) {
        free_strs(names, n);
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    /* a model that does not load takes its tasks out (listed as failed), not the others */
    eng_err first = {0};
    for (int i = 0; i < n; i++) {
        eng_err me = {0};
        if ((rc = load_model(dir, names[i], &r->p, &r->models[r->n_models], &me)) == 0) {
            r->n_models++;
            continue;
        }
        if (rc == ENG_NO_MEMORY) {
            *err = me;
            free_strs(names, n);
            goto fail;
        }
        broken_version *nb = realloc(r->bad_models, (size_t)(r->n_bad_models + 1) * sizeof *nb);
        if (nb) r->bad_models = nb;
        char *why = nb ? registry_relative(r, me.msg) : NULL, *nm = why ? strdup(names[i]) : NULL;
        if (!nm) {
            free(why);
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            free_strs(names, n);
            goto fail;
        }
        nb[r->n_bad_models++] = (broken_version){.name = nm, .version = NULL, .reason = why};
        fprintf(stderr, "adapterd: model %s is not served: %s\n", names[i], me.msg);
        if (!first.code) first = me;
    }
    free_strs(names, n);
    if (r->n_models == 0) {
        if (first.code) *err = first, rc = first.code;
        else rc = eng_err_set(err, ENG_NOT_FOUND, "%s/models: no model directory", dir);
        goto fail;
    }
    pathf(path, sizeof path, "%s/tasks", dir);
    if (!eng_dir_exists(path) && mkdir(path, 0755)) {
        rc = eng_err_set(err, ENG_IO, "%s: cannot create (%s)", path, strerror(errno));
        goto fail;
    }
    sweep(r);
    if ((n = list_subdirs(path, &names, err)) < 0) {
        rc = n;
        goto fail;
    }
    /* state_read needs the tombstones before the scan: read it twice (cheap) */
    if ((rc = state_read(r, err))) {
        free_strs(names, n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if ((rc = scan_task(r, names[i], err)) && rc != ENG_NOT_FOUND) {
            free_strs(names, n);
            goto fail;
        }
        rc = 0;
    }
    free_strs(names, n);
    free_strs(r->tombs, r->n_tombs);
    r->tombs = NULL, r->n_tombs = 0;
    if ((rc = state_read(r, err))) goto fail;
    /* Weights: every current version without a budget, the pinned ones with one. */
    for (int i = 0; i < r->n_e; i++)
        if ((rc = open_current(r, r->e[i], err))) goto fail;
    for (int i = r->n_e - 1; i >= 0; i--) { /* tasks with no good version are not served */
        store_entry *e = r->e[i];
        if (e->cur) continue;
        fprintf(stderr, "adapterd: task %s has no version that loads; not served (its versions list why)\n", e->name);
        drop_entry_locked(r, e);
        entry_free(e);
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
        entry_free(e);
    }
    for (int i = 0; i < r->n_models; i++) store_model_release(r->models[i]);
    free_strs(r->tombs, r->n_tombs);
    free_strs(r->bad, r->n_bad);
    while (r->n_broken) broken_remove_at(r, r->n_broken - 1);
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

const char *store_dir(const store_registry *r) { return r->dir; }

int store_n_tasks(const store_registry *r) {
    pthread_mutex_lock((pthread_mutex_t *)&r->mu);
    int n = r->n_e;
    pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
    return n;
}
int store_n_models(const store_registry *r) { return r->n_models; }

static store_task *take(store_registry *r, store_task *t) {
    if (t) {
        store_task_retain(t);
        t->last_used = ++r->clock;
    }
    return t;
}

store_task *store_task_acquire(store_registry *r, const char *name, size_t len) {
    int pos;
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    if (find_entry(r, name, len, &pos)) t = take(r, r->e[pos]->cur);
    pthread_mutex_unlock(&r->mu);
    return t;
}

store_task *store_task_acquire_at(store_registry *r, int i) {
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    if (i >= 0 && i < r->n_e) t = take(r, r->e[i]->cur);
    pthread_mutex_unlock(&r->mu);
    return t;
}

store_task *store_task_acquire_version(store_registry *r, const char *name, const char *version) {
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    t = take(r, find_version(get_entry(r, name), version));
    pthread_mutex_unlock(&r->mu);
    return t;
}

store_model *store_model_acquire_at(store_registry *r, int i) {
    store_model *m = NULL;
    if (i >= 0 && i < r->n_models) store_model_retain(m = r->models[i]);
    return m;
}

int store_task_names(store_registry *r, char ***names) {
    pthread_mutex_lock(&r->mu);
    int n = r->n_e;
    char **v = calloc((size_t)n + 1, sizeof *v);
    for (int i = 0; v && i < n; i++)
        if (!(v[i] = strdup(r->e[i]->name))) {
            free_strs(v, i);
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
        int seen = get_entry(r, nm) != NULL;
        for (int k = 0; !seen && k < n; k++) seen = !strcmp(v[k], nm);
        if (seen) continue;
        if (!(v[n] = strdup(nm))) {
            free_strs(v, n);
            v = NULL;
            break;
        }
        n++;
    }
    pthread_mutex_unlock(&r->mu);
    if (v && n) qsort(v, (size_t)n, sizeof *v, cmp_str);
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
    store_entry *e = get_entry(r, name);
    int n = 0, failed = 0;
    for (int i = 0; e && i < e->n && n < max; i++) {
        store_task *t = e->v[i];
        store_version_info *o = &out[n++];
        memset(o, 0, sizeof *o);
        snprintf(o->version, sizeof o->version, "%s", t->version);
        snprintf(o->state, sizeof o->state, "available");
        o->current = t == e->cur;
        o->resident = atomic_load(&t->task) != NULL;
        o->pinned = o->current && entry_pinned(e);
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

/* ---- version management ---- */

/* Loads t (unlisted) to validate it; returns 0 and the weights in *et. */
static int validate(store_registry *r, store_task *t, eng_task **et, double *dt, eng_err *err) {
    double t0 = now_s();
    int rc = weights_load(t, et, err);
    *dt = now_s() - t0;
    if (rc) {
        pthread_mutex_lock(&r->mu);
        r->st.load_failures++;
        pthread_mutex_unlock(&r->mu);
    }
    return rc;
}

/* Lists validated t (with its weights et) under task name; makes it current when asked or when
 * the task has none. Consumes t and et. */
static int list_validated(store_registry *r, store_task *t, eng_task *et, double dt, int make_current, eng_err *err) {
    detached d = {0};
    pthread_mutex_lock(&r->mu);
    store_entry *e = make_entry(r, t->name);
    if (!e || add_version_locked(e, t)) {
        pthread_mutex_unlock(&r->mu);
        eng_task_free(et);
        task_destroy(t);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    publish_locked(r, t, et, dt);
    broken_remove_locked(r, t->name, t->version);
    if (make_current || !e->cur) {
        set_current_locked(r, e, t, &d);
    } else {
        detach_locked(r, t, &d); /* validated, not served: no reason to keep it */
    }
    evict_locked(r, t, &d);
    pthread_mutex_unlock(&r->mu);
    free_detached(&d);
    return 0;
}

int store__version_check(store_registry *r, const char *name, const char *vdir, const char *task_json, size_t len,
                         eng_err *err) {
    store_task *t = NULL;
    eng_task *et = NULL;
    double dt = 0;
    const char *slash = strrchr(vdir, '/'), *version = slash ? slash + 1 : vdir;
    int rc = task_json ? meta_parse(r, name, version, vdir, task_json, len, &t, err)
                       : meta_read(r, name, version, vdir, &t, err);
    if (!rc) rc = validate(r, t, &et, &dt, err);
    eng_task_free(et);
    if (t) task_destroy(t);
    pthread_mutex_lock(&r->mu);
    if (rc) broken_add_locked(r, name, version, err->msg);
    else broken_remove_locked(r, name, version);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int store_version_add(store_registry *r, const char *name, const char *version, const char *staged, int activate,
                      eng_err *err) {
    if (!valid_name(name)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "task name \"%.100s\" must be 1..128 of [A-Za-z0-9._-], not starting with '.'", name);
    if (version_noncanonical(version))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "version \"%.40s\" has a leading zero; version names are plain numbers (%ld)",
                           version, strtol(version, NULL, 10));
    if (version_number(version) < 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "version \"%.40s\" must be a number", version);
    pthread_mutex_lock(&r->admin_mu);
    char tdir[PATH_MAX], vdir[PATH_MAX];
    pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    pathf(vdir, sizeof vdir, "%s/%s", tdir, version);
    store_task *t = NULL;
    eng_task *et = NULL;
    double dt = 0;
    int rc;
    pthread_mutex_lock(&r->mu);
    int exists = find_version(get_entry(r, name), version) != NULL;
    pthread_mutex_unlock(&r->mu);
    if (exists || access(vdir, F_OK) == 0) {
        rc = eng_err_set(err, ENG_CONFLICT, "task %s version %s exists; versions are immutable (upload a new number)",
                         name, version);
        goto done;
    }
    if ((rc = meta_read(r, name, version, staged, &t, err))) goto done;
    if ((rc = validate(r, t, &et, &dt, err))) goto done;
    /* durable before published: the files, then the rename, then the state file, then the table */
    if (sync_tree(staged)) {
        int e = errno;
        rc = eng_err_set(err, io_status(e), "cannot write task %s version %s to disk (%s)", name, version, strerror(e));
        goto done;
    }
    pthread_mutex_lock(&r->mu);
    store_entry *en = get_entry(r, name);
    int had_cur = en && en->cur, becomes_current = activate || !had_cur;
    pthread_mutex_unlock(&r->mu);
    /* While the task has a current version, the state names it, with a max covering the new
     * number, before the number appears: replicas that see the version keep serving the current
     * one (rule_current), and so does a restart after a kill before the state names the new one. */
    if (had_cur && (rc = state_write(r, name, version_number(version), err))) goto done;
    int made = 0;
    if (!eng_dir_exists(tdir)) {
        if (mkdir(tdir, 0755) && errno != EEXIST) {
            int e = errno;
            rc = eng_err_set(err, io_status(e), "cannot create the folder of task %s (%s)", name, strerror(e));
            goto done;
        }
        made = 1;
        char tasks[PATH_MAX];
        pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
        fsync_path(tasks, 1);
    }
    if (rename(staged, vdir) || fsync_path(tdir, 1)) {
        int e = errno;
        rename(vdir, staged); /* nothing may stay published that the client is told failed */
        if (made) rmdir(tdir);
        rc = eng_err_set(err, io_status(e), "cannot publish task %s version %s (%s)", name, version, strerror(e));
        if (had_cur) state_write(r, name, -1, NULL);
        goto done;
    }
    int ti = tomb_index(r, name, version);
    if (ti >= 0) {
        free(r->tombs[ti]);
        r->tombs[ti] = r->tombs[--r->n_tombs];
    }
    if ((rc = becomes_current ? state_write_as(r, name, version, err) : state_write(r, name, -1, err))) {
        if (rename(vdir, staged)) logf_(r, "task %s version %s: cannot take it back (%s)", name, version, strerror(errno));
        if (made) rmdir(tdir);
        fsync_path(tdir, 1);
        if (had_cur) state_write(r, name, -1, NULL);
        goto done;
    }
    free(t->dir);
    if (!(t->dir = strdup(vdir))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    t->fingerprint = fingerprint(vdir);
    rc = list_validated(r, t, et, dt, becomes_current, err);
    t = NULL, et = NULL;
    logf_(r, "task %s version %s added%s", name, version, becomes_current ? " and current" : "");
done:
    pthread_mutex_unlock(&r->admin_mu);
    eng_task_free(et);
    if (t) task_destroy(t);
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
    if ((rc = state_write_as(r, name, version, err))) goto done;
    detached d = {0};
    pthread_mutex_lock(&r->mu);
    store_entry *e = get_entry(r, name);
    if (e && atomic_load(&t->listed)) set_current_locked(r, e, t, &d);
    pthread_mutex_unlock(&r->mu);
    free_detached(&d);
    logf_(r, "task %s: version %s is current", name, version);
done:
    store_task_release(t);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

/* Moves dir aside (hidden, so a watch ignores it) and removes it. Returns 0 or -1. */
static int remove_dir(store_registry *r, const char *dir, const char *hide_in) {
    static atomic_int seq;
    char aside[PATH_MAX];
    pathf(aside, sizeof aside, "%s/.deleted-%d-%d", hide_in, (int)getpid(), atomic_fetch_add(&seq, 1));
    if (rename(dir, aside)) return errno == ENOENT ? 0 : -1;
    fsync_path(hide_in, 1); /* the deletion is durable before it is acknowledged; a kill leaves `aside`, swept at start */
    if (store_remove_dir(aside)) logf_(r, "%s: could not remove everything (%s)", aside, strerror(errno));
    return 0;
}

static void add_tomb(store_registry *r, const char *name, const char *version) {
    char key[300];
    pathf(key, sizeof key, "%s/%s", name, version);
    char **nt = realloc(r->tombs, (size_t)(r->n_tombs + 1) * sizeof *nt);
    if (!nt) return;
    r->tombs = nt;
    if ((r->tombs[r->n_tombs] = strdup(key))) r->n_tombs++;
}

/* Deletes a version listed as failed: its folder and its record. admin_mu held; 1 when it was one. */
static int delete_broken(store_registry *r, const char *name, const char *version, eng_err *err, int *rc) {
    pthread_mutex_lock(&r->mu);
    int b = broken_find(r, name, version);
    pthread_mutex_unlock(&r->mu);
    if (b < 0) return 0;
    char tdir[PATH_MAX], vdir[PATH_MAX];
    pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    pathf(vdir, sizeof vdir, "%s/%s", tdir, version);
    if (remove_dir(r, vdir, tdir)) {
        *rc = eng_err_set(err, io_status(errno), "cannot remove task %s version %s (%s)", name, version, strerror(errno));
        return 1;
    }
    pthread_mutex_lock(&r->mu);
    broken_remove_locked(r, name, version);
    int listed = get_entry(r, name) != NULL;
    pthread_mutex_unlock(&r->mu);
    if (!listed && rmdir(tdir) == 0) { /* its last folder */
        char tasks[PATH_MAX];
        pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
        fsync_path(tasks, 1);
    }
    logf_(r, "task %s version %s (failed) deleted", name, version);
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
    store_entry *e = get_entry(r, name);
    store_task *t = find_version(e, version);
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
    pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    if (remove_dir(r, t->dir, tdir)) add_tomb(r, name, version);
    pthread_mutex_lock(&r->mu);
    unlist_locked(r, e, t);
    pthread_mutex_unlock(&r->mu);
    store_task_release(t);
    logf_(r, "task %s version %s deleted", name, version);
    rc = state_write(r, name, -1, err);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

int store_delete_task(store_registry *r, const char *name, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    pthread_mutex_lock(&r->mu);
    store_entry *e = get_entry(r, name);
    if (e) drop_entry_locked(r, e);
    int had_broken = 0;
    for (int i = 0; i < r->n_broken; i++) had_broken |= !strcmp(r->broken[i].name, name);
    broken_remove_locked(r, name, NULL);
    pthread_mutex_unlock(&r->mu);
    if (!e && !had_broken) {
        pthread_mutex_unlock(&r->admin_mu);
        return eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    }
    char tdir[PATH_MAX], tasks[PATH_MAX];
    pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
    int gone = remove_dir(r, tdir, tasks) == 0;
    pthread_mutex_lock(&r->mu);
    while (e && e->n) {
        store_task *t = e->v[0];
        if (!gone) add_tomb(r, name, t->version);
        unlist_locked(r, e, t);
        pthread_mutex_unlock(&r->mu);
        store_task_release(t);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    if (e) entry_free(e);
    logf_(r, "task %s deleted", name);
    int rc = state_write(r, name, -1, err);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

int store_pin(store_registry *r, const char *name, int pinned, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    pthread_mutex_lock(&r->mu);
    store_entry *e = get_entry(r, name);
    if (e) e->admin_pinned = pinned;
    store_task *t = e ? take(r, e->cur) : NULL;
    pthread_mutex_unlock(&r->mu);
    int rc = 0;
    if (!e) rc = eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    else if (t) rc = store_task_ensure(r, t, err);
    store_task_release(t);
    if (!rc) rc = state_write(r, name, -1, err);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

int store_unload(store_registry *r, const char *name, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    detached d = {0};
    int rc = 0, was_pinned = 0;
    pthread_mutex_lock(&r->mu);
    store_entry *e = get_entry(r, name);
    if (!e) rc = eng_err_set(err, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
    else {
        was_pinned = e->admin_pinned;
        e->admin_pinned = 0;
        if (e->cur && atomic_load(&e->cur->refs) == 1 && !e->cur->loading) detach_locked(r, e->cur, &d);
        if (d.n) r->st.evictions++;
    }
    pthread_mutex_unlock(&r->mu);
    free_detached(&d);
    if (!rc && was_pinned) rc = state_write(r, name, -1, err);
    pthread_mutex_unlock(&r->admin_mu);
    return rc;
}

/* ---- rescan (directory watch) ---- */

static int bad_seen(store_registry *r, const char *name, const char *version, uint64_t fp, int add) {
    char key[360];
    pathf(key, sizeof key, "%s/%s@%llx", name, version, (unsigned long long)fp);
    for (int i = 0; i < r->n_bad; i++)
        if (!strcmp(r->bad[i], key)) return 1;
    if (add) {
        char **nb = realloc(r->bad, (size_t)(r->n_bad + 1) * sizeof *nb);
        if (nb && (nb[r->n_bad] = strdup(key))) r->bad = nb, r->n_bad++;
        else if (nb) r->bad = nb;
    }
    return 0;
}

/* The state file as it is now, or NULL: absent (*ok = 1: the tasks follow their highest versions)
 * or unreadable (*ok = 0: nothing is changed from it). When read, its tombstones replace the
 * registry's. admin_mu held. */
static json_t *state_load(store_registry *r, int *ok) {
    char path[PATH_MAX];
    pathf(path, sizeof path, "%s/%s", r->dir, STATE_FILE);
    *ok = 1;
    if (access(path, F_OK) != 0) {
        *ok = errno == ENOENT; /* a network file system's hiccup is not "no state" */
        return NULL;
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!json_is_object(root)) {
        logf_(r, "%s:%d: %s; the registry state is not followed until it is rewritten", path, je.line,
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
    free_strs(r->tombs, r->n_tombs);
    r->tombs = nt, r->n_tombs = (int)k;
    pthread_mutex_unlock(&r->mu);
    return root;
}

static state_task state_of(json_t *root, const char *name) {
    json_t *o = json_object_get(json_object_get(root, "tasks"), name);
    json_t *mx = json_object_get(o, "max");
    return (state_task){name, json_string_value(json_object_get(o, "current")),
                        json_is_integer(mx) ? (long)json_integer_value(mx) : LONG_MAX,
                        json_is_true(json_object_get(o, "pinned"))};
}

/* Follows what other writers did: versions whose directory is gone are unlisted, and every task's
 * current version and pin are set from the state file by rule_current. A new current version is
 * loaded (validated) before it is served; one that does not load leaves the task as it was. */
static void follow_state(store_registry *r, json_t *root) {
    char **names = NULL;
    int n = store_task_names(r, &names);
    for (int i = 0; i < n; i++) {
        state_task st = state_of(root, names[i]);
        char want[32] = "";
        pthread_mutex_lock(&r->mu);
        store_entry *e = get_entry(r, names[i]);
        /* versions deleted by another writer (the current one last: the rule then picks another) */
        for (int k = 0; e && k < e->n;) {
            store_task *t = e->v[k];
            if (eng_dir_exists(t->dir) || (t == e->cur && e->n > 1)) {
                k++;
                continue;
            }
            unlist_locked(r, e, t);
            pthread_mutex_unlock(&r->mu);
            logf_(r, "task %s version %s: its directory is gone; unlisted", names[i], t->version);
            store_task_release(t);
            pthread_mutex_lock(&r->mu);
            e = get_entry(r, names[i]);
        }
        if (e && e->cur && e->n > 1 && !eng_dir_exists(e->cur->dir)) {
            /* the current one went too: serve the highest of the others (loaded on first use) */
            store_task *gone = e->cur, *next = e->v[e->n - 1] == gone ? e->v[e->n - 2] : e->v[e->n - 1];
            detached d = {0};
            set_current_locked(r, e, next, &d);
            unlist_locked(r, e, gone);
            pthread_mutex_unlock(&r->mu);
            free_detached(&d);
            logf_(r, "task %s version %s: its directory is gone; unlisted", names[i], gone->version);
            store_task_release(gone);
            pthread_mutex_lock(&r->mu);
            e = get_entry(r, names[i]);
        }
        if (e) {
            e->admin_pinned = st.pinned;
            store_task *t = rule_current(e, &st);
            if (t && t != e->cur) snprintf(want, sizeof want, "%s", t->version);
        }
        pthread_mutex_unlock(&r->mu);
        if (!want[0]) continue;
        store_task *t = store_task_acquire_version(r, names[i], want);
        eng_err e2 = {0};
        if (t && store_task_ensure(r, t, &e2) == 0) {
            detached d = {0};
            pthread_mutex_lock(&r->mu);
            e = get_entry(r, names[i]);
            if (e && atomic_load(&t->listed)) set_current_locked(r, e, t, &d);
            pthread_mutex_unlock(&r->mu);
            free_detached(&d);
            logf_(r, "task %s: version %s is current (registry state)", names[i], want);
        } else if (t) {
            fprintf(stderr, "adapterd: task %s version %s named by the registry state does not load: %s\n", names[i], want,
                    e2.msg);
        }
        store_task_release(t);
    }
    free_strs(names, n > 0 ? n : 0);
}

int store_rescan(store_registry *r, eng_err *err) {
    pthread_mutex_lock(&r->admin_mu);
    int state_ok;
    json_t *state = state_load(r, &state_ok);
    char tasks[PATH_MAX], tdir[PATH_MAX], vdir[PATH_MAX];
    pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
    char **names = NULL;
    int n = list_subdirs(tasks, &names, err), added = 0;
    if (n < 0) {
        json_decref(state);
        pthread_mutex_unlock(&r->admin_mu);
        return n;
    }
    for (int i = 0; i < n; i++) {
        if (!valid_name(names[i])) continue;
        pathf(tdir, sizeof tdir, "%s/%s", tasks, names[i]);
        state_task st = state_of(state, names[i]);
        char **vers = NULL;
        int nv = list_subdirs(tdir, &vers, NULL);
        for (int k = 0; k < nv; k++) {
            long vn = version_number(vers[k]);
            if (version_noncanonical(vers[k])) {
                pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[k]);
                if (!bad_seen(r, names[i], vers[k], fingerprint(vdir), 1)) {
                    char why[128];
                    pathf(why, sizeof why, "version folder name \"%.40s\" has a leading zero (name it %ld)", vers[k],
                          strtol(vers[k], NULL, 10));
                    fprintf(stderr, "adapterd: task %s version %s rejected: %s\n", names[i], vers[k], why);
                    broken_add(r, names[i], vers[k], why);
                }
                continue;
            }
            if (vn < 0 || tomb_index(r, names[i], vers[k]) >= 0) continue;
            pthread_mutex_lock(&r->mu);
            store_entry *e = get_entry(r, names[i]);
            store_task *known = find_version(e, vers[k]);
            long curv = e && e->cur ? e->cur->vnum : -1;
            pthread_mutex_unlock(&r->mu);
            pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[k]);
            if (known) {
                /* immutable: report a change once, never reload it */
                uint64_t fp = fingerprint(vdir);
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
            uint64_t fp = fingerprint(vdir);
            if (bad_seen(r, names[i], vers[k], fp, 0)) continue;
            store_task *t = NULL;
            eng_task *et = NULL;
            double dt = 0;
            eng_err e2 = {0};
            if (meta_read(r, names[i], vers[k], vdir, &t, &e2) || validate(r, t, &et, &dt, &e2)) {
                fprintf(stderr, "adapterd: task %s version %s rejected: %s\n", names[i], vers[k], e2.msg);
                if (t) task_destroy(t);
                bad_seen(r, names[i], vers[k], fp, 1);
                broken_add(r, names[i], vers[k], e2.msg);
                continue;
            }
            /* above the current one and above what the state file had seen (rule_current) */
            int make_current = vn > curv && (!st.current || vn > st.max);
            /* the state file first, as for an upload, and only if no writer recorded this number
             * as not current meanwhile; if it cannot be written the version is listed, not current */
            int skipped = 0;
            if (make_current && state_update(r, names[i], vers[k], -1, vn, &skipped, &e2)) {
                fprintf(stderr, "adapterd: task %s version %s: %s; listed, not made current\n", names[i], vers[k], e2.msg);
                make_current = curv < 0;
            } else if (skipped) {
                make_current = curv < 0;
            }
            if (list_validated(r, t, et, dt, make_current, &e2) == 0) {
                added++;
                logf_(r, "task %s version %s loaded from the registry directory%s", names[i], vers[k],
                      make_current ? " and is current" : "");
            }
        }
        free_strs(vers, nv);
    }
    /* task directories removed by hand: drop them (requests in flight finish on what they hold) */
    char **known = NULL;
    int nk = store_task_names(r, &known);
    for (int i = 0; i < nk; i++) {
        pathf(tdir, sizeof tdir, "%s/%s", tasks, known[i]);
        if (eng_dir_exists(tdir)) continue;
        pthread_mutex_lock(&r->mu);
        store_entry *e = get_entry(r, known[i]);
        if (e) drop_entry_locked(r, e);
        while (e && e->n) {
            store_task *t = e->v[0];
            unlist_locked(r, e, t);
            pthread_mutex_unlock(&r->mu);
            store_task_release(t);
            pthread_mutex_lock(&r->mu);
        }
        pthread_mutex_unlock(&r->mu);
        if (e) {
            entry_free(e);
            logf_(r, "task %s: its directory is gone; dropped", known[i]);
        }
    }
    free_strs(known, nk > 0 ? nk : 0);
    free_strs(names, n);
    /* failed versions whose folder was removed by hand are no longer listed */
    pthread_mutex_lock(&r->mu);
    for (int i = r->n_broken - 1; i >= 0; i--) {
        pathf(vdir, sizeof vdir, "%s/%s/%s", tasks, r->broken[i].name, r->broken[i].version);
        if (!eng_dir_exists(vdir)) broken_remove_at(r, i);
    }
    pthread_mutex_unlock(&r->mu);
    /* read again: this rescan's own writes, and other writers' since it began */
    json_decref(state);
    state = state_load(r, &state_ok);
    if (state_ok) follow_state(r, state);
    json_decref(state);
    pthread_mutex_unlock(&r->admin_mu);
    return added;
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
int store_task_pinned(const store_task *t) { return t->pinned_cfg; }
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
