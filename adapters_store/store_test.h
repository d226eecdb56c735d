/* store_test.h - the store's hooks for its tests and fuzz harnesses: not part of store.h, linked
 * from the same library. Tests reach it with adapters_store/ on their include path. */
#ifndef ADAPTERD_STORE_TEST_H
#define ADAPTERD_STORE_TEST_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

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

/* The calls state.c makes on the state's files (.adapterd-state.json, .adapterd-state.log, their
 * temporaries and the registry folder's fsync), each with the real call's contract (-1 or a short
 * count, errno set): the real calls by default. A test replaces one to fail it (EIO, EINTR, a short
 * write, a full disk) and puts the default back. Set it while no store call runs. */
typedef struct {
    int (*open)(const char *path, int flags, mode_t mode);
    int (*stat)(const char *path, struct stat *st);
    int (*fstat)(int fd, struct stat *st);
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
    ssize_t (*write)(int fd, const void *buf, size_t n);
    int (*fsync)(int fd);
    int (*ftruncate)(int fd, off_t len);
    int (*rename)(const char *from, const char *to);
    int (*close)(int fd);
} store__io_calls;
extern store__io_calls store__state_io;

#endif
