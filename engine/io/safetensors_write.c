/* safetensors_write.c - the safetensors writer (layout and order in safetensors_write.h). */
#include "io/safetensors_write.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Largest element size first, then name: each tensor starts aligned to its element size. */
static int cmp_layout(const void *a, const void *b) {
    const eng_st_tensor *x = *(const eng_st_tensor *const *)a, *y = *(const eng_st_tensor *const *)b;
    size_t sx = eng__dtype_size(x->dtype), sy = eng__dtype_size(y->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int check_tensor(const eng_st_tensor *t, const char *path, eng_err *err) {
    if (!t->name || !t->name[0] || !strcmp(t->name, "__metadata__"))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: tensor name '%s' is not allowed", path,
                           t->name ? t->name : "(null)");
    if ((unsigned)t->dtype >= ENG_DT_COUNT)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: tensor '%s': unknown dtype", path, t->name);
    if (t->ndim < 0 || t->ndim > ENG_MAX_DIMS)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: tensor '%s': %d dimensions", path, t->name, t->ndim);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || (t->shape[d] && numel > UINT64_MAX / (uint64_t)t->shape[d]))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: tensor '%s': bad shape", path, t->name);
        numel *= (uint64_t)t->shape[d];
    }
    size_t es = eng__dtype_size(t->dtype);
    if (numel > SIZE_MAX / es || numel * es != t->nbytes || (t->nbytes && !t->data))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: tensor '%s': %zu bytes for its shape and dtype %s", path,
                           t->name, t->nbytes, eng__dtype_name(t->dtype));
    return 0;
}

/* The header JSON, unpadded; NULL on allocation failure. */
static char *build_header(const eng_st_tensor *const *order, size_t n, const char *const *meta, size_t n_meta) {
    json_t *root = json_object(), *md = n_meta ? json_object() : NULL;
    int bad = !root || (n_meta && !md);
    for (size_t i = 0; !bad && i < n_meta; i++) bad = json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
    if (md && !bad) {
        bad = json_object_set(root, "__metadata__", md);
    }
    json_decref(md);
    uint64_t off = 0;
    for (size_t i = 0; !bad && i < n; i++) {
        const eng_st_tensor *t = order[i];
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        bad = !e || !shape || !offs;
        for (int d = 0; !bad && d < t->ndim; d++) bad = json_array_append_new(shape, json_integer(t->shape[d]));
        if (!bad)
            bad = json_array_append_new(offs, json_integer((json_int_t)off)) ||
                  json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        if (!bad)
            bad = json_object_set_new(e, "dtype", json_string(eng__dtype_name(t->dtype))) ||
                  json_object_set(e, "shape", shape) || json_object_set(e, "data_offsets", offs) ||
                  json_object_set(root, t->name, e);
        json_decref(shape);
        json_decref(offs);
        json_decref(e);
        off += t->nbytes;
    }
    char *s = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}

static int write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1; }

int eng__st_write(const char *path, const eng_st_tensor *t, size_t n, const char *const *meta, size_t n_meta,
                 eng_err *err) {
    for (size_t i = 0; i < n; i++) {
        int rc = check_tensor(&t[i], path, err);
        if (rc) return rc;
    }
    for (size_t i = 0; i < n_meta; i++)
        if (!meta[2 * i] || !meta[2 * i + 1])
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: metadata entry %zu is NULL", path, i);
    const eng_st_tensor **order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) order[i] = &t[i];
    qsort(order, n, sizeof *order, cmp_layout);
    for (size_t i = 1; i < n; i++) /* a name given twice, whatever the dtypes (adapter files hold a few hundred) */
        for (size_t j = 0; j < i; j++)
            if (!strcmp(order[i]->name, order[j]->name)) {
                int rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: tensor '%s' given twice", path, order[i]->name);
                free(order);
                return rc;
            }
    char *hdr = build_header(order, n, meta, n_meta);
    if (!hdr) {
        free(order);
        return eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory building the header", path);
    }
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= sizeof tmp) {
        free(hdr);
        free(order);
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: path too long", path);
    }
    int rc = 0;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = eng_err_set(err, ENG_IO, "%s: cannot create (%s)", tmp, strerror(errno));
    } else {
        uint8_t len8[8];
        for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)padded >> (8 * b));
        static const char spaces[8] = "        ";
        int bad = write_all(f, len8, 8) || write_all(f, hdr, hlen) || write_all(f, spaces, padded - hlen);
        for (size_t i = 0; !bad && i < n; i++) bad = write_all(f, order[i]->data, order[i]->nbytes);
        if (fclose(f) || bad) rc = eng_err_set(err, ENG_IO, "%s: write failed (%s)", tmp, strerror(errno));
        if (!rc && rename(tmp, path)) rc = eng_err_set(err, ENG_IO, "%s: cannot rename into place (%s)", path, strerror(errno));
        if (rc) unlink(tmp);
    }
    free(hdr);
    free(order);
    return rc;
}
