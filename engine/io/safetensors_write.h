/* safetensors_write.h - writing safetensors files the readers here and elsewhere accept.
 *
 * The layout is the one safetensors.h reads: u64 little-endian header length N, N bytes of JSON
 * header ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__" of
 * strings}), then the data. Like the format's reference writer, the header is padded with spaces
 * to a multiple of 8 bytes, so the data starts 8-byte aligned, and tensors are laid out by element
 * size (largest first), then by name: every tensor then starts aligned to its own element size,
 * and the same tensors always give the same bytes. The file is written beside its final name and
 * renamed into place, so a reader never sees a half-written file.
 *
 * Usage:
 *     eng_st_tensor t = {.name = "w", .dtype = ENG_DT_F32, .ndim = 2, .shape = {2, 3}, .numel = 6,
 *                        .data = w, .nbytes = sizeof w};
 *     if (eng__st_write("out.safetensors", &t, 1, NULL, 0, &err)) puts(err.msg); */
#ifndef ADAPTERD_ENGINE_IO_SAFETENSORS_WRITE_H
#define ADAPTERD_ENGINE_IO_SAFETENSORS_WRITE_H

#include <stddef.h>

#include "io/safetensors.h"

/* Writes the n tensors (name, dtype, ndim, shape, data and nbytes are read; numel is not) and
 * n_meta key/value pairs of metadata (meta[2i] the key, meta[2i + 1] the value; NULL when none) to
 * path. Returns 0, or ENG_INVALID_ARGUMENT (duplicate or empty name, a name "__metadata__", a
 * dtype out of range, nbytes that disagree with the shape), ENG_NO_MEMORY or ENG_IO naming the
 * file; on failure nothing is left at path or beside it. */
int eng__st_write(const char *path, const eng_st_tensor *t, size_t n, const char *const *meta, size_t n_meta,
                 eng_err *err);

#endif
