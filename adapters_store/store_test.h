/* store_test.h - the store's hooks for its tests and fuzz harnesses: not part of store.h, linked
 * from the same library. Tests reach it with adapters_store/ on their include path. */
#ifndef ADAPTERD_STORE_TEST_H
#define ADAPTERD_STORE_TEST_H

#include <stddef.h>

#include "adapters_store/store.h"

/* Reads and validates the version folder vdir of task name as store_version_add does before
 * publishing (metadata, then every weight loaded), with task_json (len bytes, no NUL needed) as
 * its task.json, or the folder's own when task_json is NULL; the version is the folder's last
 * name. Loads, lists and writes nothing, except that a refused version is listed as failed with
 * its reason (store_versions), as a scan lists it, until a check of the same name and version
 * passes. Returns 0 when the version would be accepted, else the status store_version_add would
 * answer, with err set. */
int store__version_check(store_registry *r, const char *name, const char *vdir, const char *task_json, size_t len,
                         eng_err *err);

/* Called, when set, before each check of a task or version folder a rescan makes (and before each
 * fingerprint), with its path: a test makes the file system slow here. Set it while no store call
 * runs; NULL (the default) calls nothing. */
extern void (*store__fs_hook)(const char *path);

/* The size at which the state's journal (.adapterd-state.log) is compacted into the base: -1 (the
 * default) for the larger of 64 KiB and the base's size; 0 compacts at every write. Set it while
 * no store call runs. */
extern long store__journal_limit;

#endif
