/* safetensors.c - mmap + validation of safetensors files (rules in safetensors.h). */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000ull

struct eng_st_file {
    void *owned;      /* heap buffer the tensors point into (eng__st_from_tensors), or NULL */
    void *map;        /* mmap'd region, or NULL for a caller's buffer */
    size_t map_len;
    const uint8_t *base;
    size_t len;
    eng_st_tensor *tensors; /* sorted by name for bsearch */
    size_t n;
    char **meta_keys, **meta_vals;
    size_t n_meta;
};

static const char *dtype_names[ENG_DT_COUNT] = {
    [ENG_DT_BOOL] = "BOOL", [ENG_DT_U8] = "U8",   [ENG_DT_I8] = "I8",   [ENG_DT_I16] = "I16",
    [ENG_DT_U16] = "U16",   [ENG_DT_F16] = "F16", [ENG_DT_BF16] = "BF16", [ENG_DT_I32] = "I32",
    [ENG_DT_U32] = "U32",   [ENG_DT_F32] = "F32", [ENG_DT_F64] = "F64", [ENG_DT_I64] = "I64",
    [ENG_DT_U64] = "U64",
};
static const size_t dtype_sizes[ENG_DT_COUNT] = {
    [ENG_DT_BOOL] = 1, [ENG_DT_U8] = 1,  [ENG_DT_I8] = 1,  [ENG_DT_I16] = 2, [ENG_DT_U16] = 2,
    [ENG_DT_F16] = 2,  [ENG_DT_BF16] = 2, [ENG_DT_I32] = 4, [ENG_DT_U32] = 4, [ENG_DT_F32] = 4,
    [ENG_DT_F64] = 8,  [ENG_DT_I64] = 8, [ENG_DT_U64] = 8,
};

size_t eng__dtype_size(eng_dtype dt) { return dt < ENG_DT_COUNT ? dtype_sizes[dt] : 0; }
const char *eng__dtype_name(eng_dtype dt) { return dt < ENG_DT_COUNT ? dtype_names[dt] : "?"; }

static int dtype_parse(const char *s) {
    for (int i = 0; i < ENG_DT_COUNT; i++)
        if (!strcmp(s, dtype_names[i])) return i;
    return -1;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const eng_st_tensor *)a)->name, ((const eng_st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
    const eng_st_tensor *x = *(eng_st_tensor *const *)a, *y = *(eng_st_tensor *const *)b;
    if ((const uint8_t *)x->data != (const uint8_t *)y->data)
        return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

void eng__st_close(eng_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    if (f->map) munmap(f->map, f->map_len);
    free(f->owned);
    free(f);
}

int eng__st_from_tensors(eng_st_tensor *tensors, size_t n, void *owned, void *map, size_t map_len, const char *label,
                        eng_st_file **out, eng_err *err) {
    *out = NULL;
    eng_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        for (size_t i = 0; i < n; i++) free((char *)tensors[i].name);
        free(tensors);
        free(owned);
        if (map) munmap(map, map_len);
        return eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", label);
    }
    f->tensors = tensors;
    f->n = n;
    f->owned = owned;
    f->map = map;
    f->map_len = map_len;
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_name);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name)) {
            eng_err_set(err, ENG_FORMAT, "%s: duplicate tensor '%s'", label, f->tensors[i].name);
            eng__st_close(f);
            return ENG_FORMAT;
        }
    *out = f;
    return 0;
}

static int parse_tensor(eng_st_file *f, const char *label, const char *name, json_t *v, const uint8_t *data,
                        uint64_t data_len, eng_st_tensor *t, eng_err *err) {
    if (!json_is_object(v)) return eng_err_set(err, ENG_FORMAT, "%s: tensor '%s': entry is not an object", label, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"), *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) || json_array_size(jo) != 2)
        return eng_err_set(err, ENG_FORMAT, "%s: tensor '%s': needs dtype, shape and data_offsets [begin, end]", label,
                           name);
    int dt = dtype_parse(json_string_value(jd));
    if (dt < 0)
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: tensor '%s': unsupported dtype '%s'", label, name,
                           json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > ENG_MAX_DIMS)
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: tensor '%s': %zu dimensions (at most %d)", label, name, nd,
                           ENG_MAX_DIMS);
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return eng_err_set(err, ENG_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer", label,
                               name, i);
        uint64_t dim = (uint64_t)json_integer_value(d);
        if (dim && numel > UINT64_MAX / dim)
            return eng_err_set(err, ENG_FORMAT, "%s: tensor '%s': shape overflows", label, name);
        numel *= dim;
        t->shape[i] = (int64_t)dim;
    }
    json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < json_integer_value(jb))
        return eng_err_set(err, ENG_FORMAT, "%s: tensor '%s': invalid data_offsets", label, name);
    uint64_t b = (uint64_t)json_integer_value(jb), e = (uint64_t)json_integer_value(je);
    if (e > data_len)
        return eng_err_set(err, ENG_FORMAT, "%s: tensor '%s': data_offsets end %llu beyond the %llu-byte buffer", label,
                           name, (unsigned long long)e, (unsigned long long)data_len);
    uint64_t esz = dtype_sizes[dt];
    if (numel > UINT64_MAX / esz || numel * esz != e - b)
        return eng_err_set(err, ENG_FORMAT,
                           "%s: tensor '%s': %llu bytes in data_offsets but shape x dtype needs %llu", label, name,
                           (unsigned long long)(e - b), (unsigned long long)(numel * esz));
    t->name = strdup(name);
    if (!t->name) return eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", label);
    t->dtype = (eng_dtype)dt;
    t->ndim = (int)nd;
    t->numel = (int64_t)numel;
    t->data = data + b;
    t->nbytes = (size_t)(e - b);
    (void)f;
    return 0;
}

static int parse(eng_st_file *f, const char *label, eng_err *err) {
    if (f->len < 8) return eng_err_set(err, ENG_FORMAT, "%s: file too short for a safetensors header", label);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | f->base[i];
    if (n > ST_MAX_HEADER) return eng_err_set(err, ENG_FORMAT, "%s: header length %llu exceeds 100 MB", label, (unsigned long long)n);
    if (n > f->len - 8)
        return eng_err_set(err, ENG_FORMAT, "%s: header length %llu runs past the end of the file (truncated?)", label,
                           (unsigned long long)n);
    json_error_t je;
    json_t *root = json_loadb((const char *)f->base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root) return eng_err_set(err, ENG_FORMAT, "%s: header is not valid JSON: %s", label, je.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = eng_err_set(err, ENG_FORMAT, "%s: header is not a JSON object", label);
        goto done;
    }
    const uint8_t *data = f->base + 8 + n;
    uint64_t data_len = f->len - 8 - n;
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (!f->tensors) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", label);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                rc = eng_err_set(err, ENG_FORMAT, "%s: __metadata__ is not an object", label);
                goto done;
            }
            size_t m = json_object_size(val);
            f->meta_keys = calloc(m ? m : 1, sizeof(char *));
            f->meta_vals = calloc(m ? m : 1, sizeof(char *));
            if (!f->meta_keys || !f->meta_vals) {
                rc = eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", label);
                goto done;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = eng_err_set(err, ENG_FORMAT, "%s: __metadata__['%s'] is not a string", label, mk);
                    goto done;
                }
                f->meta_keys[f->n_meta] = strdup(mk);
                f->meta_vals[f->n_meta] = strdup(json_string_value(mv));
                f->n_meta++;
                if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1]) {
                    rc = eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", label);
                    goto done;
                }
            }
            continue;
        }
        rc = parse_tensor(f, label, key, val, data, data_len, &f->tensors[f->n], err);
        if (rc) goto done;
        f->n++;
    }
    /* The tensors must tile [0, data_len) exactly: sort by offset and walk. */
    eng_st_tensor **by_off = malloc((f->n ? f->n : 1) * sizeof *by_off);
    if (!by_off) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", label);
        goto done;
    }
    for (size_t i = 0; i < f->n; i++) by_off[i] = &f->tensors[i];
    qsort(by_off, f->n, sizeof *by_off, cmp_offset);
    const uint8_t *pos = data;
    for (size_t i = 0; i < f->n; i++) {
        const uint8_t *b = by_off[i]->data;
        if (b != pos) {
            rc = eng_err_set(err, ENG_FORMAT, "%s: tensor '%s' %s the previous tensor's data (offset %zu, expected %zu)",
                             label, by_off[i]->name, b < pos ? "overlaps" : "leaves a gap after",
                             (size_t)(b - data), (size_t)(pos - data));
            free(by_off);
            goto done;
        }
        pos = b + by_off[i]->nbytes;
    }
    free(by_off);
    if ((uint64_t)(pos - data) != data_len) {
        rc = eng_err_set(err, ENG_FORMAT, "%s: %llu bytes after the last tensor's data (file size does not match header)",
                         label, (unsigned long long)(data_len - (uint64_t)(pos - data)));
        goto done;
    }
    qsort(f->tensors, f->n, sizeof *f->tensors, cmp_name);
done:
    json_decref(root);
    return rc;
}

int eng__st_open_buffer(const void *buf, size_t len, const char *label, eng_st_file **out, eng_err *err) {
    *out = NULL;
    eng_st_file *f = calloc(1, sizeof *f);
    if (!f) return eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", label);
    f->base = buf;
    f->len = len;
    int rc = parse(f, label, err);
    if (rc) {
        eng__st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int eng__map_file(const char *path, void **map, size_t *len, eng_err *err) {
    *map = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return eng_err_set(err, errno == ENOENT ? ENG_NOT_FOUND : ENG_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return eng_err_set(err, ENG_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    if (n > 0) {
        void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        int e = errno;
        if (m == MAP_FAILED) {
            close(fd);
            return eng_err_set(err, ENG_IO, "%s: mmap: %s", path, strerror(e));
        }
        *map = m;
    }
    close(fd);
    *len = n;
    return 0;
}

int eng__st_open(const char *path, eng_st_file **out, eng_err *err) {
    *out = NULL;
    void *map;
    size_t len;
    int rc = eng__map_file(path, &map, &len, err);
    if (rc) return rc;
    eng_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (map) munmap(map, len);
        return eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", path);
    }
    f->map = map;
    f->map_len = len;
    f->base = map;
    f->len = len;
    rc = parse(f, path, err);
    if (rc) {
        eng__st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

size_t eng__st_count(const eng_st_file *f) { return f->n; }
const eng_st_tensor *eng__st_at(const eng_st_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }

const eng_st_tensor *eng__st_find(const eng_st_file *f, const char *name) {
    eng_st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, f->n, sizeof *f->tensors, cmp_name);
}

const char *eng__st_metadata(const eng_st_file *f, const char *key) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
    return NULL;
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int eng__convert_to_f32(eng_dtype dt, const void *src, size_t n, float *dst) {
    const uint8_t *s = src;
    switch (dt) {
    case ENG_DT_F32:
        memcpy(dst, src, n * 4);
        return 0;
    case ENG_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        return 0;
    case ENG_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return 0;
    case ENG_DT_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        return 0;
    default:
        return ENG_UNSUPPORTED;
    }
}
