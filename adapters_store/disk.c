/* disk.c - the registry's files, below any table: paths, names, the version fingerprint, fsync,
 * the sweep of what a killed writer leaves, and the writers' record lock.
 *
 * The first part: it knows the registry only as a directory (r->dir) and a log switch, and calls
 * nothing else of the store, so every later part can use it. Nothing here takes reg->mu: these are
 * the operations that may wait on the disk, and keeping them in their own file makes it visible
 * which callers do that (a network file system can make any of them slow). */
#define _GNU_SOURCE
#include "store_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double store__now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void store__log(store_registry *r, const char *fmt, ...) {
    if (!r->p.verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("adapterd: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
void store__free_strs(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* ---- helpers ---- */

/* snprintf for paths; a path that does not fit is cut (and then fails to open, naming itself). */
int store__pathf(char *dst, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(dst, n, fmt, ap);
    va_end(ap);
    return r;
}

/* 1 when dir/sub/file is a regular file (engine/files.h's rule). */
int store__file_in(const char *dir, const char *sub, const char *file) {
    char p[PATH_MAX];
    return store__pathf(p, sizeof p, "%s/%s", dir, sub) < (int)sizeof p && eng_file_exists_in(p, file);
}

int store__cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Lists the visible sub-directories of dir, sorted. Returns the count or a negative status. */
int store__list_subdirs(const char *dir, char ***out, eng_err *err) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return eng_err_set(err, ENG_IO, "%s: cannot open (%s)", dir, strerror(errno));
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[PATH_MAX];
        if (store__pathf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p || !eng_dir_exists(p)) continue;
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
    if (n) qsort(v, (size_t)n, sizeof *v, store__cmp_str);
    *out = v;
    return n;
oom:
    closedir(d);
    store__free_strs(v, n);
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
long store__version_number(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 18 || (n > 1 && s[0] == '0') || !all_digits(s)) return -1;
    return strtol(s, NULL, 10);
}

/* Digits with a leading zero: a version folder written wrongly, reported rather than ignored. */
int store__version_noncanonical(const char *s) { return s[0] == '0' && s[1] && all_digits(s); }

/* Task names: 1..128 of [A-Za-z0-9._-], not starting with '.'. */
int store__valid_name(const char *s) {
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
void (*store__fs_hook)(const char *path);

int store__dir_exists(const char *path) {
    if (store__fs_hook) store__fs_hook(path);
    return eng_dir_exists(path);
}

uint64_t store__fingerprint(const char *dir) {
    if (store__fs_hook) store__fs_hook(dir);
    fp_acc = 0;
    fp_base = strlen(dir);
    if (nftw(dir, fp_visit, NFTW_FDS, FTW_PHYS) != 0) return 0;
    return fp_acc;
}

/* The fingerprint's walk, remembered: every file and folder under a version folder with its
 * identity. While each still stats the same, the fingerprint is the one computed then: a stat per
 * entry instead of a walk (no open, no directory read); a folder whose entries changed has a new
 * mtime, a file written in place a new size or mtime, a file replaced a new inode. */
typedef struct {
    char *rel;               /* below the version folder ("" for itself) */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtim;
} fp_entry;

struct store_fp_cache {
    fp_entry *v;
    int n, cap, oom;
    uint64_t fp;
};

void store__fp_cache_free(store_fp_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->v[i].rel);
    free(c->v);
    free(c);
}

static __thread store_fp_cache *fp_building;
static int fp_visit_cached(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    store_fp_cache *c = fp_building;
    if (type != FTW_F && type != FTW_D) return type == FTW_DNR || type == FTW_NS ? (c->oom = 1, 0) : 0;
    if (c->n == c->cap) {
        int nc = c->cap ? 2 * c->cap : 8;
        fp_entry *nv = realloc(c->v, (size_t)nc * sizeof *nv);
        if (!nv) return c->oom = 1, 0;
        c->v = nv, c->cap = nc;
    }
    fp_entry *e = &c->v[c->n];
    if (!(e->rel = strdup(path + fp_base))) return c->oom = 1, 0;
    e->dev = sb->st_dev, e->ino = sb->st_ino, e->size = sb->st_size, e->mtim = sb->st_mtim;
    c->n++;
    return fp_visit(path, sb, type, ftw);
}

static int fp_cache_same(const char *dir, const store_fp_cache *c) {
    char p[PATH_MAX];
    struct stat sb;
    for (int i = 0; i < c->n; i++) {
        const fp_entry *e = &c->v[i];
        if (snprintf(p, sizeof p, "%s%s", dir, e->rel) >= (int)sizeof p || lstat(p, &sb)) return 0;
        if (sb.st_dev != e->dev || sb.st_ino != e->ino || sb.st_size != e->size || sb.st_mtim.tv_sec != e->mtim.tv_sec ||
            sb.st_mtim.tv_nsec != e->mtim.tv_nsec)
            return 0;
    }
    return c->n > 0;
}

uint64_t store__fingerprint_cached(const char *dir, store_fp_cache **cache) {
    if (*cache && fp_cache_same(dir, *cache)) {
        if (store__fs_hook) store__fs_hook(dir);
        return (*cache)->fp;
    }
    store__fp_cache_free(*cache);
    *cache = NULL;
    store_fp_cache *c = calloc(1, sizeof *c);
    if (!c) return store__fingerprint(dir);
    if (store__fs_hook) store__fs_hook(dir);
    fp_acc = 0;
    fp_base = strlen(dir);
    fp_building = c;
    int rc = nftw(dir, fp_visit_cached, NFTW_FDS, FTW_PHYS);
    fp_building = NULL;
    c->fp = rc ? 0 : fp_acc;
    if (rc || c->oom) { /* not remembered: the next look walks again */
        uint64_t fp = c->fp;
        store__fp_cache_free(c);
        return fp;
    }
    *cache = c;
    return c->fp;
}

static int rm_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

int store_remove_dir(const char *dir) { return nftw(dir, rm_visit, NFTW_FDS, FTW_DEPTH | FTW_PHYS) ? -1 : 0; }

/* ---- durability ---- */

/* A full disk (or a file size limit) is its own status: the client may retry elsewhere or later. */
eng_status store__io_status(int e) { return e == ENOSPC || e == EDQUOT || e == EFBIG ? ENG_NO_SPACE : ENG_IO; }

/* fsync of one file or directory (not following a link). Returns 0, or -1 with errno. */
int store__fsync_path(const char *p, int dir) {
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
    if (type == FTW_F && S_ISREG(sb->st_mode)) rc = store__fsync_path(path, 0);
    else if (type == FTW_DP) rc = store__fsync_path(path, 1);
    if (rc) sync_errno = errno;
    return rc ? 1 : 0;
}

/* fsyncs every regular file and directory under dir, contents before their directory, so that a
 * rename publishing dir never lands on disk ahead of what it names. Returns 0, or -1 with errno. */
int store__sync_tree(const char *dir) {
    sync_errno = 0;
    if (nftw(dir, sync_visit, NFTW_FDS, FTW_DEPTH | FTW_PHYS) == 0) return 0;
    if (sync_errno) errno = sync_errno;
    return -1;
}

/* Names a crashed writer of ours leaves in tasks/ and tasks/<name>/. */
static int ours_left_behind(const char *n) { return !strncmp(n, ".upload-", 8) || !strncmp(n, ".deleted-", 9); }

/* Removes what a killed server leaves behind: upload staging (tasks/.upload-*), folders moved aside
 * to be deleted (tasks/.deleted-*, tasks/<name>/.deleted-*), the state files' temporaries, and task
 * folders left empty (created for an upload that never got renamed in). Other '.' names may be a
 * writer's copy in progress and stay. A replica's upload in progress on the same registry would go
 * too (its staging name is the same kind): replicas are started while no upload runs. */
void store__sweep(store_registry *r) {
    char tasks[PATH_MAX], p[PATH_MAX], q[PATH_MAX];
    store__pathf(tasks, sizeof tasks, "%s/tasks", r->dir);
    DIR *d = opendir(tasks);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (store__pathf(p, sizeof p, "%s/%s", tasks, de->d_name) >= (int)sizeof p) continue;
        if (ours_left_behind(de->d_name)) {
            store__log(r, "removing %s/%s, left by an interrupted upload or deletion", "tasks", de->d_name);
            if (store_remove_dir(p)) store__log(r, "%s: could not remove everything (%s)", p, strerror(errno));
            continue;
        }
        if (de->d_name[0] == '.' || !eng_dir_exists(p)) continue;
        DIR *t = opendir(p);
        struct dirent *te;
        while (t && (te = readdir(t))) {
            if (!ours_left_behind(te->d_name) || store__pathf(q, sizeof q, "%s/%s", p, te->d_name) >= (int)sizeof q) continue;
            store__log(r, "removing tasks/%s/%s, left by an interrupted deletion", de->d_name, te->d_name);
            if (store_remove_dir(q)) store__log(r, "%s: could not remove everything (%s)", q, strerror(errno));
        }
        if (t) closedir(t);
        if (rmdir(p) == 0) store__log(r, "removed the empty task folder tasks/%s", de->d_name); /* fails unless empty */
    }
    if (d) closedir(d);
    /* under the writer lock: a replica on the same registry may be writing it right now (the
     * lock file is created only then: a registry that is only read gets no new file) */
    for (int i = 0; i < 2; i++) {
        store__pathf(p, sizeof p, "%s/%s.tmp", r->dir, i ? STATE_LOG : STATE_FILE);
        if (access(p, F_OK) != 0) continue;
        int held, lk = store__state_lock(r, &held);
        if (held) unlink(p);
        store__state_unlock(lk);
    }
    store__fsync_path(tasks, 1);
}

/* A copy of msg with the registry's folder cut from the paths it names: the listing shows where in
 * the registry, never where the registry is on the server. NULL when out of memory. */
char *store__registry_relative(const store_registry *r, const char *msg) {
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

/* Highest version number among the version directories of tasks/<name>/ on disk (dot names
 * excluded), or -1. */
long store__disk_max_version(store_registry *r, const char *name) {
    char tdir[PATH_MAX];
    store__pathf(tdir, sizeof tdir, "%s/tasks/%s", r->dir, name);
    char **vers = NULL;
    int nv = store__list_subdirs(tdir, &vers, NULL);
    long m = -1;
    for (int i = 0; i < nv; i++) {
        long v = store__version_number(vers[i]);
        if (v > m) m = v;
    }
    store__free_strs(vers, nv > 0 ? nv : 0);
    return m;
}

/* Takes the registry's writer lock (a POSIX record lock on .adapterd-state.lock, which NFS and
 * most shared volumes honour across hosts). Returns the descriptor to pass to state_unlock; *held
 * is 0 when the file system has no locks (the write then goes on unlocked). */
int store__state_lock(store_registry *r, int *held) {
    char path[PATH_MAX];
    store__pathf(path, sizeof path, "%s/%s", r->dir, STATE_LOCK);
    *held = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    while (fcntl(fd, F_SETLKW, &fl) < 0) {
        if (errno == EINTR) continue;
        store__log(r, "%s: no lock (%s); the state is written unlocked", path, strerror(errno));
        return fd;
    }
    *held = 1;
    return fd;
}

void store__state_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing releases the record lock */
}
