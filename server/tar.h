/* tar.h - a small, strict reader for the archives of admin uploads: ustar (POSIX and GNU
 * variants, pax "path" records, GNU long names), optionally gzip-compressed. Regular files and
 * directories only. Internal to the server. */
#ifndef ADAPTERD_SERVER_TAR_H
#define ADAPTERD_SERVER_TAR_H

#include <stddef.h>

#include "engine/status.h"

typedef struct {
    size_t max_bytes;        /* unpacked archive (gzip output) and total file bytes */
    int max_entries;         /* headers in the archive */
    double max_ratio;        /* gzip: unpacked / packed beyond 16 MiB unpacked */
} srv_tar_limits;

/* Extracts the .tar or .tar.gz (gzip detected by its magic) in data[0..len) into dir, which
 * exists. Rejects absolute paths and '..' (ENG_INVALID_ARGUMENT), links, devices and other entry
 * types (ENG_INVALID_ARGUMENT), archives over the limits or compressed beyond the ratio
 * (ENG_TOO_LARGE), and corrupt archives (ENG_MALFORMED), naming the entry. On failure dir may hold
 * part of the files; the caller removes it. Returns 0 and the number of files in *n_files. */
int srv__untar(const void *data, size_t len, const char *dir, const srv_tar_limits *lim, int *n_files, eng_err *err);

#endif
