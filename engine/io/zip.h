/* zip.h - a strict reader of zip archives held in memory (the container of torch.save files).
 *
 * eng__zip_open finds the end-of-central-directory record (and its ZIP64 twin), walks the central
 * directory, checks every entry's local header, and keeps (name, method, data offset, size) for
 * entries that lie inside the file before the central directory, sorted by name so lookups are a
 * binary search. Only STORED entries can be read: torch never compresses, and zlib is not an
 * engine dependency. CRCs are not checked. */
#ifndef ADAPTERD_ENGINE_IO_ZIP_H
#define ADAPTERD_ENGINE_IO_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

typedef struct {
    const char *name; /* inside the file, not NUL-terminated */
    size_t name_len;
    uint16_t flags, method;
    uint64_t data_off, csize, usize;
} eng__zip_entry;

typedef struct {
    const uint8_t *base;
    size_t len;
    eng__zip_entry *e; /* sorted by name */
    size_t n;
    const char *prefix; /* torch.save: the archive's "<folder>/", inside the file (set by torch_bin.c) */
    size_t prefix_len;
} eng__zip;

/* Reads the directory of the archive z->base (z->len bytes) into z; release with eng__zip_free. */
int eng__zip_open(eng__zip *z, const char *label, eng_err *err);
void eng__zip_free(eng__zip *z);

/* The entry named name[0..len), or NULL. */
const eng__zip_entry *eng__zip_find(const eng__zip *z, const char *name, size_t len);

/* *data = the bytes of a STORED, unencrypted entry; otherwise fails naming it. */
int eng__zip_data(const eng__zip *z, const eng__zip_entry *e, const char *label, const uint8_t **data, eng_err *err);

/* Little-endian reads. */
static inline uint16_t eng__rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t eng__rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t eng__rd64(const uint8_t *p) { return (uint64_t)eng__rd32(p) | (uint64_t)eng__rd32(p + 4) << 32; }

/* Copies at most cap-1 bytes of s into buf, replacing non-printable bytes with '?', for error messages. */
const char *eng__printable(const char *s, size_t n, char *buf, size_t cap);

#endif
