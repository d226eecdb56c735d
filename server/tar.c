/* tar.c - see tar.h. Uploads come from the network, so every field is distrusted: checksums are
 * verified, sizes parsed strictly, paths cleaned component by component, files created with
 * O_EXCL | O_NOFOLLOW under a directory the server made, and gzip output is bounded while it
 * inflates (a bomb stops at the limit, it is never held whole). */
#define _GNU_SOURCE
#include "tar.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_DEPTH 16
#define BLOCK 512 /* a tar record: every header, and every body padded to a multiple of it */

/* Inflates gzip data into a malloc'd buffer, bounded by lim. */
static int gunzip(const unsigned char *in, size_t len, const srv_tar_limits *lim, unsigned char **out, size_t *out_len,
                  eng_err *err) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (zlib)");
    /* the buffer never grows past max_bytes + 1: one byte over the limit is enough to refuse */
    size_t limit = lim->max_bytes < SIZE_MAX ? lim->max_bytes + 1 : SIZE_MAX;
    size_t cap = len < (SIZE_MAX - 65536) / 4 ? len * 4 + 65536 : SIZE_MAX, n = 0;
    if (cap > limit) cap = limit;
    unsigned char *buf = malloc(cap);
    int rc = 0;
    if (!buf) {
        inflateEnd(&z);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    z.next_in = (unsigned char *)in;
    size_t left = len;
    for (;;) {
        if (n == cap) {
            if (cap == limit) {
                rc = eng_err_set(err, ENG_TOO_LARGE, "archive: unpacks to more than %zu bytes", lim->max_bytes);
                break;
            }
            size_t nc = cap <= limit / 2 ? cap * 2 : limit;
            unsigned char *nb = realloc(buf, nc);
            if (!nb) {
                rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
                break;
            }
            buf = nb, cap = nc;
        }
        uInt chunk_in = left > (1u << 30) ? (1u << 30) : (uInt)left;
        z.avail_in = chunk_in;
        size_t room = cap - n;
        z.next_out = buf + n;
        z.avail_out = room > (1u << 30) ? (1u << 30) : (uInt)room;
        uInt before_out = z.avail_out;
        int zr = inflate(&z, Z_NO_FLUSH);
        left -= chunk_in - z.avail_in;
        n += before_out - z.avail_out;
        if (n > lim->max_bytes) {
            rc = eng_err_set(err, ENG_TOO_LARGE, "archive: unpacks to more than %zu bytes", lim->max_bytes);
            break;
        }
        if (n > (16u << 20) && (double)n > lim->max_ratio * (double)len) {
            rc = eng_err_set(err, ENG_TOO_LARGE, "archive: gzip expands more than %.0fx (%zu bytes from %zu); refused as a bomb",
                             lim->max_ratio, n, len);
            break;
        }
        if (zr == Z_STREAM_END) break;
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = eng_err_set(err, ENG_MALFORMED, "archive: corrupt gzip data (%s)", z.msg ? z.msg : "inflate failed");
            break;
        }
        if (zr == Z_BUF_ERROR && left == 0 && z.avail_out) {
            rc = eng_err_set(err, ENG_MALFORMED, "archive: truncated gzip data");
            break;
        }
    }
    inflateEnd(&z);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_len = n;
    return 0;
}

/* Strict octal field (NUL/space padded). Returns -1 when malformed or base-256. */
static long long octal(const unsigned char *p, size_t n) {
    if (p[0] & 0x80) return -1;
    size_t i = 0;
    while (i < n && p[i] == ' ') i++;
    long long v = 0;
    int digits = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '7'; i++, digits++) {
        if (v > (1LL << 40)) return -1;
        v = v * 8 + (p[i] - '0');
    }
    for (; i < n; i++)
        if (p[i] != ' ' && p[i] != '\0') return -1;
    return digits ? v : -1;
}

/* Largest entry size the reader accepts from any field (octal, base-256, pax "size"): far above
 * every limit, and small enough that size + BLOCK and its padding never wrap. */
#define SIZE_FIELD_MAX ((long long)1 << 50)

/* The size field at h + 124: octal, or GNU base-256 (first byte 0x80, big-endian value). Returns
 * -1 when malformed, negative or over SIZE_FIELD_MAX. */
static long long size_field(const unsigned char *h) {
    const unsigned char *p = h + 124;
    if (!(p[0] & 0x80)) return octal(p, 12);
    if (p[0] != 0x80) return -1; /* 0xff...: a negative base-256 value */
    long long v = 0;
    for (int i = 1; i < 12; i++) {
        if (v > SIZE_FIELD_MAX >> 8) return -1;
        v = (v << 8) | p[i];
    }
    return v;
}

static int checksum_ok(const unsigned char *h) {
    long long want = octal(h + 148, 8);
    long long sum = 0;
    for (int i = 0; i < BLOCK; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return want == sum;
}

/* Cleans an archive path into out ("a/b/c"): strips "./", rejects absolute paths, "..", empty
 * components beyond slashes and depth over MAX_DEPTH. Returns 0, 1 for "nothing" ("./"), -1. */
static int clean_path(const char *in, char *out, size_t outn, const char **why) {
    if (in[0] == '/') return *why = "absolute paths are not allowed", -1;
    size_t o = 0;
    int depth = 0;
    const char *p = in;
    while (*p) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return *why = "'..' is not allowed in paths", -1;
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (++depth > MAX_DEPTH) return *why = "path nested too deep", -1;
            if (o + n + 2 > outn) return *why = "path too long", -1;
            if (o) out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
        if (*p == '/') p++;
    }
    out[o] = '\0';
    return o ? 0 : 1;
}

/* mkdir of path (rel inside the archive): an existing directory is fine, an existing file or
 * link is the archive's contradiction (422, naming the archive's path, never the server's). */
static int make_dir(const char *path, const char *rel, eng_err *err) {
    if (!mkdir(path, 0755)) return 0;
    struct stat st;
    if (errno == EEXIST && !lstat(path, &st) && S_ISDIR(st.st_mode)) return 0;
    if (errno == EEXIST || errno == ENOTDIR)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: %.200s is both a file and a directory", rel);
    return eng_err_set(err, ENG_IO, "archive: cannot create the directory %.200s (%s)", rel, strerror(errno));
}

/* mkdir -p of rel's parent directories (or rel itself when whole) under dir. */
static int make_dirs(const char *dir, const char *rel, int whole, eng_err *err) {
    char path[PATH_MAX];
    size_t dl = strlen(dir);
    if (dl + strlen(rel) + 2 > sizeof path) return eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: path too long: %.200s", rel);
    memcpy(path, dir, dl);
    path[dl] = '/';
    strcpy(path + dl + 1, rel);
    int rc;
    for (char *c = path + dl + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        rc = make_dir(path, path + dl + 1, err);
        *c = '/';
        if (rc) return rc;
    }
    return whole ? make_dir(path, rel, err) : 0;
}

static int write_file(const char *dir, const char *rel, const unsigned char *p, size_t n, eng_err *err) {
    int rc = make_dirs(dir, rel, 0, err);
    if (rc) return rc;
    char path[PATH_MAX];
    int pn = snprintf(path, sizeof path, "%s/%s", dir, rel);
    if (pn < 0 || (size_t)pn >= sizeof path) return eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: path too long: %.200s", rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        struct stat st;
        if (errno == EEXIST && !lstat(path, &st) && S_ISDIR(st.st_mode))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: %.200s is both a file and a directory", rel);
        if (errno == EEXIST) return eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: %.200s appears twice", rel);
        if (errno == ENOTDIR || errno == EISDIR)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: %.200s is both a file and a directory", rel);
        return eng_err_set(err, ENG_IO, "archive: cannot create %.200s (%s)", rel, strerror(errno));
    }
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            close(fd);
            return eng_err_set(err, ENG_IO, "archive: cannot write %.200s (%s)", rel, strerror(e));
        }
        p += w, n -= (size_t)w;
    }
    if (close(fd)) return eng_err_set(err, ENG_IO, "archive: cannot write %.200s (%s)", rel, strerror(errno));
    return 0;
}

/* A pax extended header: records "<len> <key>=<value>\n". The "path" record goes to name (nn
 * bytes), the "size" record to *size (left alone when absent). Every length is checked against
 * what is left before it is used, so no record can point outside the header or wrap. Returns 0, or
 * an error naming the entry at byte at. */
static int pax_header(const unsigned char *p, size_t n, size_t at, char *name, size_t nn, long long *size, eng_err *err) {
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        for (; j < n && p[j] >= '0' && p[j] <= '9'; j++) {
            if (len > (n - i) / 10) return eng_err_set(err, ENG_MALFORMED, "archive: pax record length too large at byte %zu", at);
            len = len * 10 + (size_t)(p[j] - '0');
        }
        if (j >= n || p[j] != ' ' || j == i || len > n - i || len < j - i + 3 || p[i + len - 1] != '\n')
            return eng_err_set(err, ENG_MALFORMED, "archive: malformed pax record at byte %zu", at);
        const char *kv = (const char *)p + j + 1;
        size_t kvn = i + len - 1 - (j + 1); /* without the newline */
        if (kvn >= 5 && !memcmp(kv, "path=", 5)) {
            size_t vn = kvn - 5;
            if (vn >= nn || memchr(kv + 5, '\0', vn))
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: pax path at byte %zu is too long or holds a NUL", at);
            memcpy(name, kv + 5, vn);
            name[vn] = '\0';
        } else if (kvn >= 5 && !memcmp(kv, "size=", 5)) {
            long long v = 0;
            size_t k = 5;
            for (; k < kvn && kv[k] >= '0' && kv[k] <= '9'; k++) {
                if (v > SIZE_FIELD_MAX / 10) return eng_err_set(err, ENG_MALFORMED, "archive: pax size too large at byte %zu", at);
                v = v * 10 + (kv[k] - '0');
            }
            if (k == 5 || k != kvn || v > SIZE_FIELD_MAX)
                return eng_err_set(err, ENG_MALFORMED, "archive: malformed pax size at byte %zu", at);
            *size = v;
        }
        i += len;
    }
    return 0;
}

int srv__untar(const void *data, size_t len, const char *dir, const srv_tar_limits *lim, int *n_files, eng_err *err) {
    const unsigned char *p = data;
    unsigned char *owned = NULL;
    size_t n = len;
    int rc = 0, entries = 0, files = 0;
    if (len >= 2 && p[0] == 0x1f && p[1] == 0x8b) {
        if ((rc = gunzip(p, len, lim, &owned, &n, err))) return rc;
        p = owned;
    } else if (len > lim->max_bytes) {
        return eng_err_set(err, ENG_TOO_LARGE, "archive: more than %zu bytes", lim->max_bytes);
    }
    char next_name[PATH_MAX] = "", name[PATH_MAX], rel[PATH_MAX];
    size_t total = 0, off = 0;
    long long next_size = -1; /* a pax "size" for the next entry */
    int ended = 0;
    while (off + BLOCK <= n) {
        const unsigned char *h = p + off;
        int zero = 1;
        for (int i = 0; i < BLOCK && zero; i++) zero = h[i] == 0;
        if (zero) {
            ended = 1;
            break;
        }
        if (++entries > lim->max_entries) {
            rc = eng_err_set(err, ENG_TOO_LARGE, "archive: more than %d entries", lim->max_entries);
            break;
        }
        if (!checksum_ok(h)) {
            rc = eng_err_set(err, ENG_MALFORMED, "archive: bad header checksum at byte %zu (not a tar file?)", off);
            break;
        }
        int posix = !memcmp(h + 257, "ustar\0", 6), gnu = !memcmp(h + 257, "ustar  \0", 8);
        if (!posix && !gnu) {
            rc = eng_err_set(err, ENG_MALFORMED, "archive: entry at byte %zu is not ustar", off);
            break;
        }
        long long size = size_field(h);
        if (size < 0 || size > SIZE_FIELD_MAX) {
            rc = eng_err_set(err, ENG_MALFORMED, "archive: bad size field at byte %zu", off);
            break;
        }
        char type = (char)h[156];
        if (next_size >= 0 && type != 'x' && type != 'g') size = next_size, next_size = -1;
        /* off + BLOCK <= n here, and size <= 2^50: the padding cannot wrap */
        size_t padded = ((size_t)size + BLOCK - 1) & ~(size_t)(BLOCK - 1);
        if (padded > n - off - BLOCK) {
            rc = eng_err_set(err, ENG_MALFORMED, "archive: truncated (entry at byte %zu wants %lld bytes)", off, size);
            break;
        }
        const unsigned char *body = h + BLOCK;
        if (next_name[0]) {
            snprintf(name, sizeof name, "%s", next_name);
            next_name[0] = '\0';
        } else if (posix && h[345]) {
            snprintf(name, sizeof name, "%.155s/%.100s", (const char *)h + 345, (const char *)h);
        } else {
            snprintf(name, sizeof name, "%.100s", (const char *)h);
        }
        size_t at = off;
        off += BLOCK + padded;
        if (type == 'x') {
            if ((rc = pax_header(body, (size_t)size, at, next_name, sizeof next_name, &next_size, err))) break;
            continue;
        }
        if (type == 'g') continue;
        if (type == 'L') {
            /* GNU long name: the name, NUL-terminated or not; never cut to fit */
            size_t k = strnlen((const char *)body, (size_t)size);
            if (k >= sizeof next_name) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: long name at byte %zu is over %zu bytes", at,
                                 sizeof next_name - 1);
                break;
            }
            memcpy(next_name, body, k);
            next_name[k] = '\0';
            continue;
        }
        const char *why = NULL;
        int cr = clean_path(name, rel, sizeof rel, &why);
        if (cr < 0) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: %.200s: %s", name, why);
            break;
        }
        if (type == '1' || type == '2') {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: %.200s is a %s link; links are not allowed", name,
                             type == '1' ? "hard" : "symbolic");
            break;
        }
        if (type == '5') {
            if (cr == 0 && (rc = make_dirs(dir, rel, 1, err))) break;
            continue;
        }
        if (type != '0' && type != '\0' && type != '7') {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: %.200s has entry type '%c'; only files and directories are allowed",
                             name, type);
            break;
        }
        if (cr == 1) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: a file entry has an empty name");
            break;
        }
        total += (size_t)size;
        if (total > lim->max_bytes) {
            rc = eng_err_set(err, ENG_TOO_LARGE, "archive: files add up to more than %zu bytes", lim->max_bytes);
            break;
        }
        if ((rc = write_file(dir, rel, body, (size_t)size, err))) break;
        files++;
    }
    if (!rc && !ended && off < n) rc = eng_err_set(err, ENG_MALFORMED, "archive: truncated header at byte %zu", off);
    if (!rc && files == 0) rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "archive: no files");
    free(owned);
    if (!rc && n_files) *n_files = files;
    return rc;
}
