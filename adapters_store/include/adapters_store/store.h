/* store.h - the registry of models and tasks that adapterd serves, with versions that change while
 * it serves and a memory budget for the adapters.
 *
 * A registry is a directory anyone can lay out by hand:
 *
 *     models/<name>/                 a Hugging Face model directory with its tokenizer files
 *     tasks/<name>/<version>/        AdapterHub / PEFT folders as the libraries saved them, plus an
 *                                    optional task.json:
 *         {"model": "bert-mini", "adapters": ["sst2"], "fusion": null, "head": null,
 *          "skips": {"min": 0, "max": 1, "default": 0}, "labels": ["negative", "positive"],
 *          "pinned": false}
 *     .adapterd-state.json           every task's current version and max (the highest version
 *                                    number on disk when it was recorded), pins, deletions that
 *                                    could not remove files, as of its generation
 *     .adapterd-state.log            its journal: one line a change since (one task's whole entry,
 *                                    appended under a record lock and fsynced; compacted into a
 *                                    new base once it outgrows it)
 *     .adapterd-state.lock           the writers' lock (replicas sharing the registry)
 *
 * Without task.json the folders say it: sub-folders with adapter_config.json are the adapters (in
 * name order; a Stack), one with adapter_fusion_config.json is the fusion, one with only
 * head_config.json is the head, and the model is the registry's only model. A version folder with
 * adapter_config.json at its top is itself the task's one adapter (a folder as save_adapter or
 * save_pretrained wrote it); it may not also hold adapter folders. Versions are numbers
 * written plainly ("1", not "01": a folder with a leading zero is listed as failed); names starting
 * with '.' are ignored (writers copy there, then rename).
 *
 * Versions. A task has versions and one `current`, the one requests get. Versions are immutable: a
 * version is validated (loaded against its model) before it is listed, and `current` moves only to
 * a version that loaded. At start-up and at every rescan the current version is the one the state
 * file records (every change of current is recorded before it is acknowledged), unless a version
 * numbered above the entry's max exists (dropped in by hand), then the highest; a task with no
 * entry serves its highest. Replicas sharing the registry apply that rule to the same files, so
 * an admin change on one reaches the others at their next rescan.
 *
 * Crash consistency and start-up. Every change is on disk (fsynced) before it is visible, so a
 * kill at any moment restarts on the registry as it was before or after the change in progress,
 * never a mix; what a kill leaves half done (tasks/.upload-*, .deleted-* folders) is removed by
 * store_open (a replica starting while another uploads removes that upload's staging: start
 * replicas while no upload runs). Start-up is not all-or-nothing: a version that does not
 * read or load is kept on disk and listed as failed with its reason (store_versions); a task whose
 * current version fails serves its newest version that loads (store_task_fallback says so); a task
 * with none is not served. With a memory budget only pinned versions load at start; the others are
 * checked at first use, with the same outcome: a version whose load fails (for any reason but
 * memory) is unlisted and listed as failed, and a current one is replaced by the newest remaining
 * version, which store_task_fallback then names.
 *
 * Lifetimes. A store_task is one version of a task. store_task_acquire gives the caller a
 * reference to the current version that keeps it, its model and (once loaded) its weights alive
 * until store_task_release, whatever the registry does meanwhile. When a version stops being
 * current, or is deleted, its weights are freed as its last reference goes.
 *
 * Residency. With a memory budget (store_params.memory_budget > 0) only metadata is read at
 * start-up: a version's weights are loaded by store_task_ensure (called off the request path, on a
 * worker thread) and the least recently used unreferenced, unpinned versions are evicted when the
 * resident bytes would exceed the budget. Without a budget everything current loads at start-up.
 * store_task_engine is NULL while a version is not resident; a caller holding a reference to a
 * resident version keeps it resident.
 *
 * Threads: every function may be called from any thread. Residency is guarded by one mutex that is
 * never held while loading or freeing weights; the operations that change versions (add, activate,
 * delete, rescan) are serialized by a second one and may take as long as loading takes. */
#ifndef ADAPTERD_STORE_H
#define ADAPTERD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/task.h"
#include "engine/model.h"
#include "engine/status.h"
#include "engine/tokenizer.h"

typedef struct store_registry store_registry;
typedef struct store_model store_model;
typedef struct store_task store_task;

typedef struct {
    int allow_skip;          /* operator widening: every task accepts skips 0..allow_skip (capped at L); 0 */
    int verbose;             /* log loads, evictions and version changes to stderr; 1 */
    size_t memory_budget;    /* bytes of adapter weights kept resident; 0: no budget, load all at start */
    size_t load_rate;        /* bytes per second a load may convert beyond its first load_burst; 0: unpaced */
    size_t load_burst;       /* bytes of each load converted at full speed; 16 MB */
    eng_precision precision; /* of models without a model.json naming one (models/NAME/model.json:
                              * {"precision": "bf16"}); fp32. A model whose precision this CPU has no
                              * fast kernel for is not served (logged, its tasks listed as failed). */
} store_params;

store_params store_default_params(void);

/* Scans the registry at dir and applies its state file. Returns 0 and sets *out (release with
 * store_free), or a negative eng_status naming the folder or file at fault: no model that loads
 * (a registry with no model folder is ENG_NOT_FOUND), an unreadable state file, out of memory. A
 * registry with no task is served empty (tasks can be added later). A model that does not load
 * is logged and the versions of its tasks are listed as failed; failed task versions are not
 * errors here. */
int store_open(const char *dir, const store_params *p, store_registry **out, eng_err *err);

/* Drops the registry's references; tasks still acquired by callers live until released. Must not
 * run concurrently with other calls on r. */
void store_free(store_registry *r);

const char *store_dir(const store_registry *r);

/* Removes dir and everything under it, following no symbolic link (a link is removed, never its
 * target). For the registry's own folders and staging folders a caller made (an upload's). Returns
 * 0, or -1 with errno set when something could not be removed. */
int store_remove_dir(const char *dir);

/* Number of tasks (a count for logs and tests: tasks change with hot loading, so it says nothing
 * about a later call; "every task" is store_tasks_acquire) and of models (fixed at open). */
int store_n_tasks(const store_registry *r);
int store_n_models(const store_registry *r);

/* Returns a new reference to the current version of the task named name (len bytes), or NULL
 * when there is none. The version may not be resident (see store_task_ensure). */
store_task *store_task_acquire(store_registry *r, const char *name, size_t len);
/* Every task at once: references to the current version of each task, in name order, all taken
 * under one lock, so a task added or deleted meanwhile is either wholly in or wholly out. Returns
 * the count and sets *out to a malloc'd array of that many references (release them all with
 * store_tasks_release, which frees the array; or each with store_task_release, then free the
 * array), or ENG_NO_MEMORY with *out NULL. */
int store_tasks_acquire(store_registry *r, store_task ***out);
/* Drops the n references of a store_tasks_acquire array under one lock and frees the array;
 * NULL does nothing. */
void store_tasks_release(store_task **v, int n);
/* Returns a new reference to version `version` of task `name`, or NULL. */
store_task *store_task_acquire_version(store_registry *r, const char *name, const char *version);
/* Returns a new reference to the i-th model in name order, or NULL. */
store_model *store_model_acquire_at(store_registry *r, int i);

/* Makes t resident: loads its weights (blocking; call it on a worker thread, never on the event
 * loop or in a request handler), evicting least recently used versions beyond the budget, and
 * marks it used. The caller holds a reference. Returns 0, or the load's negative status; on a
 * failure other than ENG_NO_MEMORY t is listed as failed from then on, and when it was current the
 * newest remaining version is current in its place (store_task_acquire returns it). */
int store_task_ensure(store_registry *r, store_task *t, eng_err *err);
/* store_task_ensure for the n tasks one request holds together, in order, within the memory
 * budget: with a budget, more than one task whose weights together exceed it is ENG_LIMIT, with a
 * reason naming the sizes (found before loading what the last loads already measured, else after
 * one load too many), so a fan-out is refused instead of pinning several times the budget. One task
 * alone may exceed the budget. Returns 0, or the first failure's status with *failed (when not
 * NULL) set to its index. */
int store_tasks_ensure(store_registry *r, store_task *const *v, int n, int *failed, eng_err *err);
/* 1 when t's weights are loaded. */
int store_task_resident(const store_task *t);

/* Reference counting (references come from the acquire functions); releasing NULL does nothing. A
 * count below zero is a programmer error. */
void store_task_release(store_task *t);
void store_model_release(store_model *m);

/* ---- version management (serialized; each persists the state file) ---- */

/* Validates the version folder staged (a directory on the registry's file system, normally
 * tasks/<name>/.upload-*) by loading it, renames it to tasks/<name>/<version> and lists it. It
 * becomes current when activate is set or the task had no version. Versions are immutable: an
 * existing version is ENG_CONFLICT; a version with a leading zero is ENG_INVALID_ARGUMENT. The
 * version's files are on disk (fsynced) and the state file records the outcome before this returns
 * 0; a full disk is ENG_NO_SPACE. On failure staged is left for the caller to remove (nothing is
 * published) and the task keeps serving its current version; err carries the reason. */
int store_version_add(store_registry *r, const char *name, const char *version, const char *staged, int activate,
                      eng_err *err);
/* Loads (validates) version and then makes it current. ENG_NOT_FOUND for an unknown task/version. */
int store_activate(store_registry *r, const char *name, const char *version, eng_err *err);
/* Deletes one version (not the current one while others exist; a failed one too) or the whole
 * task, files included. Requests holding them finish on what they hold. */
int store_delete_version(store_registry *r, const char *name, const char *version, eng_err *err);
int store_delete_task(store_registry *r, const char *name, eng_err *err);
/* Pins (never evicted; loads now) or unpins the task's current version. */
int store_pin(store_registry *r, const char *name, int pinned, eng_err *err);
/* Evicts the task's current version when no request holds it (KServe unload); unpins it. */
int store_unload(store_registry *r, const char *name, eng_err *err);

/* Looks at tasks/ again: new version directories are loaded, validated and listed (a version
 * numbered above the current one becomes current), vanished task directories are dropped, and
 * files changed inside listed versions are reported once each (log + store_stats.changed). Returns
 * the number of versions added. Blocking: call it on a worker thread. */
int store_rescan(store_registry *r, eng_err *err);
/* store_rescan spread over time: after every slice task folders (each step of the walk: a folder
 * scanned, a known task's folder checked, a task following the state file) it calls pause(ctx) with
 * no lock of the registry held; pause sleeps (the caller's choice of how thinly) and returns nonzero
 * to end the walk early (the server stopping: what was not looked at waits for the next rescan).
 * slice <= 0 or pause NULL: store_rescan. */
int store_rescan_paced(store_registry *r, int slice, int (*pause)(void *ctx), void *ctx, eng_err *err);
/* Looks again at the n task folders named (what file events said changed), as store_rescan does
 * for every folder: new versions listed, versions and task folders gone unlisted, changed files
 * reported, the task's current version and pin followed from the state file; then, when another
 * writer changed the state file since every task last followed it, every task follows it (in
 * memory, without looking at their folders). Invalid names are skipped. Returns the number of
 * versions added. Blocking: call it on a worker thread. */
int store_rescan_tasks(store_registry *r, char *const *names, int n, eng_err *err);

/* Copies the visible task names into names (malloc'd array of malloc'd strings; free each and the
 * array) and returns their count, or a negative status. */
int store_task_names(store_registry *r, char ***names);

/* Copies into names (as store_task_names) the names of tasks that have failed versions and none
 * that loads: tasks not served, whose versions store_versions still lists with their reasons.
 * Returns their count (in name order), or a negative status. */
int store_unserved_task_names(store_registry *r, char ***names);

/* ---- rollouts: a candidate version beside the current one (canary or shadow) ----
 *
 * A rollout is part of the task's entry in the registry state (state.c), so it survives restarts
 * and every replica sharing the registry follows it at its next rescan, like the current version.
 * It names a listed version other than the current one; it ends when that version is promoted
 * (made current), aborted, deleted, made current by an activation, or unlisted. The store only
 * keeps it: the server routes requests by it and compares the answers (server/rollout.c). */
typedef enum {
    STORE_ROLLOUT_NONE = 0,
    STORE_ROLLOUT_CANARY,    /* percent of the requests that name no version are answered by the candidate */
    STORE_ROLLOUT_SHADOW,    /* the candidate also runs on percent of the inputs; its answers are only compared */
} store_rollout_mode;

typedef struct {
    int mode;                /* store_rollout_mode; NONE: no rollout */
    char version[32];        /* the candidate */
    double percent;          /* 0..100 */
    double max_share;        /* shadow: the candidate's rows at most this share of a pass's rows (0..1]; 0: 0.25 */
    /* rules, each off at 0: promote once promote_after inputs were compared with an agreement of at
     * least promote_agreement and a candidate error rate no higher than the current's; abort when the
     * candidate's error rate is above abort_error_rate, or its latency over the current's above
     * abort_latency_ratio, once rule_min inputs were seen (0: promote_after, else 100) */
    long promote_after;
    double promote_agreement;
    double abort_error_rate;
    double abort_latency_ratio;
    long rule_min;
    int64_t started;         /* Unix seconds */
    uint64_t id;             /* tells two rollouts of one task and version apart (the comparisons restart) */
} store_rollout;

/* Wire name of a mode: "none", "canary", "shadow"; the parser returns -1 for another name. */
const char *store_rollout_mode_name(int mode);
int store_rollout_mode_parse(const char *s);

/* Starts a rollout of ro->version on task name: the candidate is loaded (validated) and the rollout
 * recorded in the registry state before this returns 0. Refused, nothing changed: an unknown task or
 * version (ENG_NOT_FOUND), a version that failed to load, the current version, a candidate on
 * another model, a percent outside 0..100, a max_share outside 0..1 (ENG_INVALID_ARGUMENT), a task
 * that already has a rollout (ENG_CONFLICT). ro->id and ro->started are set here. */
int store_rollout_start(store_registry *r, const char *name, const store_rollout *ro, eng_err *err);
/* Ends task name's rollout: promote makes the candidate current (in the same state write), else it
 * is aborted. With only_id nonzero, only the rollout with that id (a rule's decision made on it).
 * ENG_NOT_FOUND: unknown task, or no such rollout. The ended rollout into *ended when not NULL. */
int store_rollout_finish(store_registry *r, const char *name, int promote, uint64_t only_id, store_rollout *ended,
                         eng_err *err);
/* Task name's rollout into *out: returns 1 (one in force), 0 (none: *out zeroed) or ENG_NOT_FOUND. */
int store_rollout_get(store_registry *r, const char *name, store_rollout *out);
/* A new reference to the candidate of task name's rollout, with the rollout in *out, taken under the
 * lock current versions are acquired under; NULL (and *out zeroed) when the task has none. */
store_task *store_rollout_acquire(store_registry *r, const char *name, store_rollout *out);

typedef struct {
    char version[32];
    char state[12];          /* "available", or "failed" (not served: reason says why) */
    char reason[200];        /* empty unless failed */
    int current, resident, pinned;
    int in_flight;           /* references held by callers (requests) */
    size_t bytes;            /* weights when resident (else the last loaded size, or 0) */
    int64_t added;           /* when the version's folder was published (its mtime, Unix seconds); 0: unknown */
} store_version_info;

/* Fills up to max versions of task name in version order, failed ones included; returns the
 * count, or ENG_NOT_FOUND when the task has none. */
int store_versions(store_registry *r, const char *name, store_version_info *out, int max);

typedef struct {
    int n_tasks, n_versions, n_resident;
    size_t resident_bytes, budget;
    uint64_t loads, load_failures, evictions, changed, unloads;
    double load_seconds_sum, load_seconds_max;
} store_stats;

void store_get_stats(store_registry *r, store_stats *out);

/* ---- task accessors: borrowed, valid while the caller holds a reference ---- */
const char *store_task_name(const store_task *t);
const char *store_task_version(const store_task *t);
/* The engine task, or NULL when not resident. */
const eng_task *store_task_engine(const store_task *t);
store_model *store_task_model(const store_task *t);       /* borrowed; the task holds a reference */
/* The head, or NULL when not resident. */
const eng_head *store_task_head(const store_task *t);
/* The head's eng_head_type as of the last load, or -1 before the first load. */
int store_task_head_type(const store_task *t);
/* Adapter forms ("seq_bn", ...) once loaded, else "". */
const char *store_task_kind(const store_task *t);
/* The children of the version's AdapterFusion once loaded, in fusion order: returns their count
 * (0: no fusion, or not loaded yet) and sets *names and *kept (1: runs, 0: pruned by its
 * fusion_pruning.json, whose weights the load freed). Borrowed, like the accessors above. */
int store_task_fusion(const store_task *t, const char *const **names, const uint8_t **kept);
/* Labels: task.json's, else the head's id2label, else "LABEL_<i>"; num_labels entries (0 before
 * the first load when task.json names none). */
const char *const *store_task_labels(const store_task *t);
int store_task_num_labels(const store_task *t);
/* Allowed AdapterDrop skips [min, max] and the default used when a request names none. */
int store_task_skip_min(const store_task *t);
int store_task_skip_max(const store_task *t);
int store_task_skip_default(const store_task *t);
/* When t serves because the version recorded as current failed (at start-up, or at its first load
 * under a memory budget): returns why (and that
 * version's name in *from when from is not NULL); NULL once another version was made current. */
const char *store_task_fallback(const store_task *t, const char **from);
/* Bytes of weights when resident, else of the last load, else 0. */
size_t store_task_bytes(const store_task *t);
/* Where a version's parts are, as task.json said or as the folders were read without one (then
 * skips are 0..0, widened only by store_params.allow_skip). Folder names are relative to the
 * version folder; "." is the folder itself. Borrowed, like the accessors above. */
typedef struct {
    int from_task_json;                  /* 0: inferred from the folders */
    const char *const *adapters;         /* n_adapters folders, in Stack order */
    int n_adapters;
    const char *fusion, *head;           /* folders, or NULL */
} store_task_layout;
store_task_layout store_task_layout_of(const store_task *t);

/* ---- model accessors ---- */
const char *store_model_name(const store_model *m);
const eng_model *store_model_engine(const store_model *m);
const eng_tokenizer *store_model_tokenizer(const store_model *m);
/* Longest sequence the model takes, special tokens included: min(tokenizer's, position table). */
int store_model_max_tokens(const store_model *m);

#endif
