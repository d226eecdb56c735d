/* files.h - the file-system questions every module asks, answered once.
 *
 * "Is there a regular file / a directory at this path?" follows symbolic links (stat) and treats
 * any error (missing, no permission, path too long) as "no". */
#ifndef ADAPTERD_ENGINE_FILES_H
#define ADAPTERD_ENGINE_FILES_H

#include <stddef.h>

#include "engine/status.h"

/* 1 when path names a regular file, else 0. */
int eng_file_exists(const char *path);

/* 1 when path names a directory, else 0. */
int eng_dir_exists(const char *path);

/* 1 when dir/name is a regular file, else 0 (also when the joined path would not fit PATH_MAX). */
int eng_file_exists_in(const char *dir, const char *name);

/* Reads the whole file at path into a new NUL-terminated buffer (*out, freed by the caller; *len
 * bytes before the NUL). Returns 0, or ENG_NOT_FOUND when path is not a regular file, ENG_TOO_LARGE
 * when it holds more than max bytes, ENG_IO on a read error, with err set. The loaders that can
 * also parse from memory read their files through this, so a file and a buffer take the same
 * parse code. */
int eng_file_read(const char *path, size_t max, char **out, size_t *len, eng_err *err);

#endif
