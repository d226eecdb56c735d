/* files.h - the file-system questions every module asks, answered once.
 *
 * "Is there a regular file / a directory at this path?" follows symbolic links (stat) and treats
 * any error (missing, no permission, path too long) as "no". */
#ifndef ADAPTERD_ENGINE_FILES_H
#define ADAPTERD_ENGINE_FILES_H

/* 1 when path names a regular file, else 0. */
int eng_file_exists(const char *path);

/* 1 when path names a directory, else 0. */
int eng_dir_exists(const char *path);

/* 1 when dir/name is a regular file, else 0 (also when the joined path would not fit PATH_MAX). */
int eng_file_exists_in(const char *dir, const char *name);

#endif
