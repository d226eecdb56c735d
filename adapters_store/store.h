/* store.h - the registry of models and tasks that adapterd serves.
 *
 * A registry is a directory anyone can lay out by hand:
 *
 *     models/<name>/                 a Hugging Face model directory with its tokenizer files
 *     tasks/<name>/<version>/        AdapterHub / PEFT folders as the libraries saved them, plus an
 *                                    optional task.json:
 *         {"model": "bert-mini", "adapters": ["sst2"], "fusion": null, "head": null,
 *          "skips": {"min": 0, "max": 1, "default": 0}, "labels": ["negative", "positive"]}
 *
 * Without task.json the folders say it: sub-folders with adapter_config.json are the adapters (in
 * name order; a Stack), one with adapter_fusion_config.json is the fusion, one with only
 * head_config.json is the head, and the model is the registry's only model. The highest numeric
 * version is loaded; names starting with '.' are ignored (writers copy there, then rename).
 *
 * Lifetimes: store_open loads everything at start-up (issue 7 adds hot loading). Models and tasks
 * are reference counted: store_task_acquire gives the caller a reference that keeps the task, its
 * eng_task and its model alive until store_task_release, whatever the registry does meanwhile. The
 * registry's own references are dropped by store_free; the last release frees. This is what lets a
 * later version replace a task while requests still run on the old one.
 *
 * Threads: every function may be called from any thread; the task table is guarded by a mutex that
 * is never held during inference or loading I/O of requests. */
#ifndef ADAPTERD_STORE_H
#define ADAPTERD_STORE_H

#include <stddef.h>

#include "adapter.h"
#include "model.h"
#include "status.h"
#include "tokenizer.h"

typedef struct store_registry store_registry;
typedef struct store_model store_model;
typedef struct store_task store_task;

typedef struct {
    int allow_skip;    /* operator widening: every task accepts skips 0..allow_skip (capped at L); 0 */
    int verbose;       /* log each loaded task to stderr; 1 */
} store_params;

store_params store_default_params(void);

/* Scans and loads the registry at dir. Returns 0 and sets *out (release with store_free), or a
 * negative eng_status naming the folder or file at fault (a registry with no task is ENG_NOT_FOUND). */
int store_open(const char *dir, const store_params *p, store_registry **out, eng_err *err);

/* Drops the registry's references; tasks still acquired by callers live until released. */
void store_free(store_registry *r);

/* Number of tasks and models (fixed until hot loading lands). */
int store_n_tasks(const store_registry *r);
int store_n_models(const store_registry *r);

/* Returns a new reference to the task named name (len bytes), or NULL when there is none. */
store_task *store_task_acquire(store_registry *r, const char *name, size_t len);
/* Returns a new reference to the i-th task in name order (0 <= i < store_n_tasks), or NULL. */
store_task *store_task_acquire_at(store_registry *r, int i);
/* Returns a new reference to the i-th model in name order, or NULL. */
store_model *store_model_acquire_at(store_registry *r, int i);

/* Reference counting; releasing NULL does nothing. A count below zero is a programmer error. */
void store_task_retain(store_task *t);
void store_task_release(store_task *t);
void store_model_retain(store_model *m);
void store_model_release(store_model *m);

/* ---- task accessors: borrowed, valid while the caller holds a reference ---- */
const char *store_task_name(const store_task *t);
const char *store_task_version(const store_task *t);
const eng_task *store_task_engine(const store_task *t);
store_model *store_task_model(const store_task *t);       /* borrowed; the task holds a reference */
const eng_head *store_task_head(const store_task *t);
/* Labels: task.json's, else the head's id2label, else "LABEL_<i>"; num_labels entries. */
const char *const *store_task_labels(const store_task *t);
int store_task_num_labels(const store_task *t);
/* Allowed AdapterDrop skips [min, max] and the default used when a request names none. */
int store_task_skip_min(const store_task *t);
int store_task_skip_max(const store_task *t);
int store_task_skip_default(const store_task *t);

/* ---- model accessors ---- */
const char *store_model_name(const store_model *m);
const eng_model *store_model_engine(const store_model *m);
const eng_tokenizer *store_model_tokenizer(const store_model *m);
/* Longest sequence the model takes, special tokens included: min(tokenizer's, position table). */
int store_model_max_tokens(const store_model *m);

#endif
