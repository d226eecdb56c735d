/* store_impl.h - the store's private structs and the functions its files share (store__ names).
 *
 * The store is one library in files by part, each depending only on those before it:
 *
 *     disk.c       paths, names, fingerprints, fsync, the sweep, the writers' lock   (no lock, may wait on disk)
 *     meta.c       models, a version's metadata (task.json or the folders), object lifetimes
 *     table.c      the table of tasks and versions, references, failed versions, lookups, accessors
 *     residency.c  loading, pacing, eviction, the current version, failed loads
 *     state.c      .adapterd-state.json and its journal: one task's entry written, the state read and followed
 *     open.c       store_open / store_free
 *     versions.c   add, activate, delete, pin, unload
 *     rescan.c     store_rescan
 *
 * tests/layout/file_cycles.py fails the build's tests on any call from a part to a later one.
 * Locks: reg->mu guards the table and residency (held for a few instructions, never over I/O or a
 * load); admin_mu serializes the operations that change versions (versions.c, rescan.c). */
#ifndef ADAPTERD_STORE_IMPL_H
#define ADAPTERD_STORE_IMPL_H

#include "adapters_store/store.h"
#include "engine/files.h"
#include "store_test.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define STATE_FILE ".adapterd-state.json"
#define TASK_JSON_MAX_BYTES ((size_t)16 << 20) /* labels of a large tagging task are kilobytes */
#define NFTW_FDS 16 /* directories a tree walk keeps open at once */
#define STATE_LOCK ".adapterd-state.lock"
#define STATE_FILE_MAX_BYTES ((size_t)64 << 20) /* about 60 bytes a task */
#define STATE_LOG ".adapterd-state.log"   /* the state file's journal (state.c) */
#define STATE_LOG_MIN_BYTES ((off_t)64 << 10) /* a journal compacts once over this and the base's size */

typedef struct store_fp_cache store_fp_cache; /* disk.c */

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
    store_fp_cache *fpc;        /* the walk behind it; rescans only (admin_mu, a reference held) */
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
    store_rollout rollout;      /* persisted; mode NONE: none (see store_rollout_get for when it is in force) */
    char *want, *want_why;      /* open only: the recorded current version that is not listed, and why */
} store_entry;

/* A failed version folder as last tried (a rescan tries it again only once its files change). */
typedef struct {
    char *key;               /* "name/version" */
    uint64_t fp;
} bad_folder;
#define BAD_MAX 4096

/* A version folder that did not read or load: kept on disk, listed with its reason. */
typedef struct {
    char *name, *version, *reason;
} broken_version;

/* One task's entry in the state file, as parsed. */
typedef struct {
    char *name;
    char *current;           /* NULL: none recorded */
    long max;                /* LONG_MAX when has_max is 0 */
    int has_max, pinned;
    store_rollout rollout;   /* mode NONE: none */
} state_rec;

/* The state file, as parsed (store__state_parse): entries sorted by name, tombstones. */
typedef struct {
    state_rec *tasks;
    int n_tasks;
    char **deleted;          /* "name/version" deleted but not removable from disk */
    int n_deleted;
    long long generation;    /* the base's; a journal of the same continues it (0: none does) */
} state_doc;

/* What the journal read so far says about the base (state.c). */
enum { LOG_NONE, LOG_CONTINUES, LOG_STALE };

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
    state_doc state;            /* the state file as last read or written; admin_mu (or open) */
    int state_known;            /* state is the file's content while its identity is state_id */
    struct stat state_id;
    unsigned state_gen;         /* +1 each time the file is found changed by another writer (read again, or gone) */
    unsigned state_followed;    /* state_gen when every task last followed the file (rescan.c) */
    int state_absent;           /* the last look found no file */
    int log_known;              /* state holds the journal's first log_off bytes; its identity is log_id */
    struct stat log_id;
    off_t log_off;              /* bytes read: whole lines only */
    size_t log_tail;            /* bytes after them (a line being written, or a crashed writer's) */
    int log_mode;               /* LOG_*: whether the journal continues the base */
    unsigned cur_gen;           /* +1 each time a task gains a current version (mu) */
    int entries_known;          /* every task with a current had an entry when cur_gen and state_gen */
    unsigned entries_cur_gen, entries_state_gen; /* were these (state.c: no walk of every task then) */
    bad_folder *bad;            /* version folders that failed, at the fingerprint they failed with; mu */
    int n_bad;                  /* at most BAD_MAX: one per failed folder on disk, forgotten with it */
    broken_version *broken;     /* guarded by mu */
    int n_broken;
    broken_version *bad_models; /* models/<name> that did not load (version unused); set at open */
    int n_bad_models;
};


/* Weights taken out of residency under reg->mu, to be freed after it (store__free_detached): the
 * first few inline, any number beyond them on the heap, so an eviction finishes what the budget
 * asks. Starts as {0}; never copied. */
typedef struct {
    eng_task *inl[8];
    eng_task **v;            /* inl, or the heap once more than 8 */
    int n, cap;
} detached;

/* The state file's word on one task. */
typedef struct {
    const char *name;
    const char *current;     /* NULL: none recorded */
    long max;                /* highest version on disk when current was recorded */
    int pinned;
    store_rollout rollout;   /* mode NONE: none */
} state_task;

/* One write of the state file: which task's entry, and how (store__state_change gives the
 * defaults: the task as this process serves it, written unconditionally). */
typedef struct {
    const char *name;
    const char *current;     /* the current version as it will be (the disk goes first); NULL: the table's */
    long extra_max;          /* a version number about to appear, counted in max; -1: none */
    long only_if_above;      /* >= 0: skip the write when the entry on disk has a current with max >= this */
    const store_rollout *rollout; /* the task's rollout as it will be (mode NONE: ended); NULL: the table's */
} state_change;

/* disk.c */
double store__now_s(void);
/* a line on stderr, "adapterd: " first, when the registry is verbose */
void store__log(store_registry *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void store__free_strs(char **v, int n);
/* snprintf for paths; a path that does not fit is cut (and then fails to open, naming itself) */
int store__pathf(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int store__file_in(const char *dir, const char *sub, const char *file);
int store__cmp_str(const void *a, const void *b);
int store__list_subdirs(const char *dir, char ***out, eng_err *err);
long store__version_number(const char *s);
int store__version_noncanonical(const char *s);
int store__valid_name(const char *s);
uint64_t store__fingerprint(const char *dir);
/* store__fingerprint, with its walk remembered in *cache (NULL at first; freed with
 * store__fp_cache_free): while every file and folder it saw stats the same, the value is the
 * remembered one, at the cost of a stat each. */
uint64_t store__fingerprint_cached(const char *dir, store_fp_cache **cache);
void store__fp_cache_free(store_fp_cache *c);
/* eng_dir_exists of a version or task folder, through the test hook (store_test.h) */
int store__dir_exists(const char *path);
eng_status store__io_status(int e);
int store__fsync_path(const char *p, int dir);
int store__sync_tree(const char *dir);
void store__sweep(store_registry *r);
char *store__registry_relative(const store_registry *r, const char *msg);
long store__disk_max_version(store_registry *r, const char *name);
int store__state_lock(store_registry *r, int *held);
void store__state_unlock(int fd);

/* meta.c */
void store__model_retain(store_model *m);
void store__task_destroy(store_task *t);
int store__load_model(const char *root, const char *name, const store_params *p, store_model **out, eng_err *err);
int store__meta_parse(store_registry *r, const char *name, const char *vname, const char *vdir, const char *task_json, size_t len, store_task **out, eng_err *err);
int store__meta_read(store_registry *r, const char *name, const char *vname, const char *vdir, store_task **out, eng_err *err);

/* table.c */
void store__task_retain(store_task *t);
int store__broken_find(const store_registry *r, const char *name, const char *version);
void store__broken_add_locked(store_registry *r, const char *name, const char *version, const char *reason);
void store__broken_remove_at(store_registry *r, int i);
void store__broken_remove_locked(store_registry *r, const char *name, const char *version);
void store__broken_add(store_registry *r, const char *name, const char *version, const char *reason);
int store__entry_pinned(const store_entry *e);
store_entry *store__get_entry(store_registry *r, const char *name);
store_entry *store__make_entry(store_registry *r, const char *name);
store_task *store__find_version(const store_entry *e, const char *version);
int store__add_version_locked(store_entry *e, store_task *t);
void store__unlist_locked(store_registry *r, store_entry *e, store_task *t);
void store__drop_entry_locked(store_registry *r, store_entry *e);
void store__entry_free(store_entry *e);
int store__tomb_index(const store_registry *r, const char *name, const char *version);
int store__bad_seen(store_registry *r, const char *name, const char *version, uint64_t fp, int add);
store_task *store__take(store_registry *r, store_task *t);
const store_rollout *store__rollout_live(const store_entry *e, store_task **cand);

/* residency.c */
int store__weights_load(const store_task *t, eng_task **out, eng_err *err);
int store__detach_locked(store_registry *r, store_task *t, detached *d);
void store__free_detached(detached *d);
void store__evict_locked(store_registry *r, const store_task *keep, detached *d);
void store__publish_locked(store_registry *r, store_task *t, eng_task *et, double seconds);
int store__ensure_loaded(store_registry *r, store_task *t, eng_err *err);
void store__set_current_locked(store_registry *r, store_entry *e, store_task *t, detached *d);

/* state.c: the one parser (store__state_parse), the one writer (store__state_write) */
int store__state_parse(const char *text, size_t len, state_doc *out, eng_err *err);
int store__state_apply_line(state_doc *d, const char *line, size_t len);
void store__state_doc_free(state_doc *d);
char *store__state_format(const state_doc *d);
state_rec *store__state_find(const state_doc *d, const char *name);
state_task store__state_of(const state_doc *d, const char *name);
state_change store__state_change(const char *name);
int store__state_write(store_registry *r, const state_change *c, int *skipped, eng_err *err);
store_task *store__rule_current(const store_entry *e, const state_task *st);
int store__state_read(store_registry *r, eng_err *err);
const state_doc *store__state_load(store_registry *r);

/* versions.c */
int store__validate(store_registry *r, store_task *t, eng_task **et, double *dt, eng_err *err);
int store__list_validated(store_registry *r, store_task *t, eng_task *et, double dt, int make_current, eng_err *err);

#endif
