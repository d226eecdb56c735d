/* safetensors.h - read-only access to safetensors files, validated as the reference reader does.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON header, then the data buffer that the
 * header's data_offsets point into. eng__st_open() maps the file and checks everything before
 * returning: N <= 100 MB and inside the file, a JSON object without duplicate keys, known dtypes,
 * non-negative shapes whose byte size (without overflow) equals end - begin, tensors that tile the
 * buffer from 0 with no gap or overlap, and a buffer that ends exactly at the end of the file.
 * A file that passes can be read without further bounds checks.
 *
 * Usage:
 *     eng_st_file *f; eng_err e;
 *     if (eng__st_open("model.safetensors", &f, &e)) { puts(e.msg); return; }
 *     const eng_st_tensor *t = eng__st_find(f, "pooler.dense.weight");
 *     eng__st_close(f); */
#ifndef ADAPTERD_ENGINE_IO_SAFETENSORS_H
#define ADAPTERD_ENGINE_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

#define ENG_MAX_DIMS 8

typedef enum {
    ENG_DT_BOOL,
    ENG_DT_U8,
    ENG_DT_I8,
    ENG_DT_I16,
    ENG_DT_U16,
    ENG_DT_F16,
    ENG_DT_BF16,
    ENG_DT_I32,
    ENG_DT_U32,
    ENG_DT_F32,
    ENG_DT_F64,
    ENG_DT_I64,
    ENG_DT_U64,
    ENG_DT_COUNT
} eng_dtype;

/* Size of one element in bytes. */
size_t eng__dtype_size(eng_dtype dt);
/* safetensors spelling ("F32", "BF16", ...). */
const char *eng__dtype_name(eng_dtype dt);

typedef struct {
    const char *name;              /* owned by the file */
    eng_dtype dtype;
    int ndim;
    int64_t shape[ENG_MAX_DIMS];
    int64_t numel;
    const void *data;              /* inside the mapping; valid until eng__st_close */
    size_t nbytes;
} eng_st_tensor;

typedef struct eng_st_file eng_st_file;

/* Maps and validates path; on success *out owns the mapping. Returns 0 or a negative eng_status
 * (ENG_IO for open/read errors, ENG_FORMAT for an invalid file) with err naming the problem. */
int eng__st_open(const char *path, eng_st_file **out, eng_err *err);

/* Validates an in-memory safetensors image of len bytes. The caller keeps buf alive and unchanged
 * until eng__st_close; the file object does not free it. */
int eng__st_open_buffer(const void *buf, size_t len, const char *label, eng_st_file **out, eng_err *err);

/* Builds a file object from tensors found by another reader (e.g. torch_bin.c). Takes ownership
 * of `tensors` (malloc'd array of n; each name malloc'd), of `owned` (freed with free(), may be
 * NULL) and of the mapping [map, map + map_len) (munmap'd, may be NULL). Tensor data must point into
 * the mapping or `owned`. Returns 0 or ENG_FORMAT for duplicate names, releasing everything on
 * failure. */
int eng__st_from_tensors(eng_st_tensor *tensors, size_t n, void *owned, void *map, size_t map_len, const char *label,
                        eng_st_file **out, eng_err *err);

/* Maps the regular file at path read-only: *map (NULL for an empty file) and *len; release with
 * munmap(*map, *len). Returns 0, ENG_NOT_FOUND, or ENG_IO naming the file. Shared by the readers. */
int eng__map_file(const char *path, void **map, size_t *len, eng_err *err);

/* Unmaps and frees; eng__st_close(NULL) does nothing. */
void eng__st_close(eng_st_file *f);

size_t eng__st_count(const eng_st_file *f);
const eng_st_tensor *eng__st_at(const eng_st_file *f, size_t i);
/* Returns the tensor called name, or NULL. */
const eng_st_tensor *eng__st_find(const eng_st_file *f, const char *name);
/* Value of a __metadata__ key, or NULL. Owned by the file. */
const char *eng__st_metadata(const eng_st_file *f, const char *key);

/* Converts n elements of F32, F16, BF16 or F64 data to float32 into dst (n floats). Returns 0, or
 * ENG_UNSUPPORTED for other dtypes. src may be unaligned. */
int eng__convert_to_f32(eng_dtype dt, const void *src, size_t n, float *dst);

#endif
