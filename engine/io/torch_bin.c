/* torch_bin.c - torch.save zip archives read as state dicts (contract in torch_bin.h).
 *
 * Three stages, each distrusting the file completely:
 *  1. zip (io/zip.c): the archive's directory, entries checked to lie inside the file.
 *  2. pickle (io/pickle.c): a restricted, iterative unpickler over <folder>/data.pkl that interprets
 *     the few globals a state dict uses instead of executing anything.
 *  3. state dict (here): the pickle's result must be a dict of string -> tensor; each tensor is
 *     checked to be C-contiguous and inside its storage, and the tensors are handed to
 *     eng__st_from_tensors. */
#include "io/torch_bin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/pickle.h"
#include "io/zip.h"



/* Finds the single "<folder>/data.pkl" entry and sets z->prefix to "<folder>/". */
static int find_archive_folder(eng__zip *z, const char *label, const eng__zip_entry **pkl, eng_err *err) {
    *pkl = NULL;
    for (size_t i = 0; i < z->n; i++) {
        const eng__zip_entry *e = &z->e[i];
        if (e->name_len < 10 || memcmp(e->name + e->name_len - 9, "/data.pkl", 9) ||
            memchr(e->name, '/', e->name_len - 9))
            continue;
        if (*pkl) return eng_err_set(err, ENG_FORMAT, "%s: more than one <folder>/data.pkl in the archive", label);
        *pkl = e;
    }
    if (!*pkl)
        return eng_err_set(err, ENG_FORMAT, "%s: zip archive without <folder>/data.pkl: not a torch.save file", label);
    z->prefix = (*pkl)->name;
    z->prefix_len = (*pkl)->name_len - 8;
    if (z->prefix_len > TB_MAX_KEY) return eng_err_set(err, ENG_FORMAT, "%s: archive folder name too long", label);
    return 0;
}

static int check_byteorder(const eng__zip *z, const char *label, eng_err *err) {
    char name[TB_MAX_KEY + 16];
    memcpy(name, z->prefix, z->prefix_len);
    memcpy(name + z->prefix_len, "byteorder", 9);
    const eng__zip_entry *e = eng__zip_find(z, name, z->prefix_len + 9);
    if (!e) return 0; /* torch < 2.1 writes none and is little-endian on every platform we run on */
    const uint8_t *d;
    int rc = eng__zip_data(z, e, label, &d, err);
    if (rc) return rc;
    if (e->usize != 6 || memcmp(d, "little", 6))
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: byteorder entry is not 'little'; big-endian archives are not "
                                                 "supported", label);
    return 0;
}

/* Turns the unpickled dict into tensors and hands them and *map to eng__st_from_tensors (then *map is NULL). */
static int make_file(pk_vm *vm, const pk_obj *d, void **map, size_t map_len, eng_st_file **out) {
    const char *label = vm->label;
    if (d->kind != PK_DICT)
        return eng_err_set(vm->err, ENG_FORMAT, "%s: data.pkl holds a %s, not a state dict", label,
                           eng__pk_kind_name(d->kind));
    size_t n = d->u.seq.n / 2;
    eng_st_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    if (!ts) return eng_err_set(vm->err, ENG_NO_MEMORY, "%s: out of memory", label);
    int rc = 0;
    size_t i = 0;
    for (; i < n; i++) {
        const pk_obj *k = d->u.seq.v[2 * i], *v = d->u.seq.v[2 * i + 1];
        char nb[160];
        if (k->kind != PK_STR || memchr(k->u.str.s, 0, k->u.str.len)) {
            rc = eng_err_set(vm->err, ENG_FORMAT, "%s: state dict key %zu is a %s, not a string name", label, i,
                             eng__pk_kind_name(k->kind));
            break;
        }
        const char *nm = eng__printable(k->u.str.s, k->u.str.len, nb, sizeof nb);
        if (v->kind != PK_TENSOR) {
            rc = eng_err_set(vm->err, ENG_FORMAT,
                             "%s: '%s' is a %s, not a tensor (only flat name -> tensor state dicts are supported)",
                             label, nm, eng__pk_kind_name(v->kind));
            break;
        }
        const pk_tensor *t = v->u.tensor;
        if (!t->contiguous) {
            char sh[160], sr[160];
            size_t a = 0, b = 0;
            for (int j = 0; j < t->ndim; j++) {
                a += (size_t)snprintf(sh + a, sizeof sh - a, "%s%lld", j ? ", " : "", (long long)t->shape[j]);
                b += (size_t)snprintf(sr + b, sizeof sr - b, "%s%lld", j ? ", " : "", (long long)t->stride[j]);
            }
            rc = eng_err_set(vm->err, ENG_UNSUPPORTED,
                             "%s: tensor '%s' is not contiguous (size [%s], stride [%s]); save it with .contiguous()",
                             label, nm, sh, sr);
            break;
        }
        char *name = malloc(k->u.str.len + 1);
        if (!name) {
            rc = eng_err_set(vm->err, ENG_NO_MEMORY, "%s: out of memory", label);
            break;
        }
        memcpy(name, k->u.str.s, k->u.str.len);
        name[k->u.str.len] = 0;
        ts[i].name = name;
        ts[i].dtype = t->dtype;
        ts[i].ndim = t->ndim;
        memcpy(ts[i].shape, t->shape, sizeof ts[i].shape);
        ts[i].numel = t->numel;
        ts[i].data = t->data;
        ts[i].nbytes = (size_t)t->numel * eng__dtype_size(t->dtype);
    }
    if (rc) {
        for (size_t j = 0; j < i; j++) free((char *)ts[j].name);
        free(ts);
        return rc;
    }
    void *m = *map;
    *map = NULL; /* eng__st_from_tensors owns it from here, success or not */
    return eng__st_from_tensors(ts, n, NULL, m, map_len, label, out, vm->err);
}

/* Parses the archive in [b, b + len). Always consumes map: handed to the file object, or unmapped on failure. */
static int parse(const uint8_t *b, size_t len, const char *label, void *map, size_t map_len, eng_st_file **out,
                 eng_err *err) {
    *out = NULL;
    eng_err local;
    if (!err) err = &local;
    eng__zip z = {.base = b, .len = len};
    pk_vm vm = {.label = label, .zip = &z, .err = err};
    const eng__zip_entry *pkl;
    const uint8_t *pd;
    int rc = eng__zip_open(&z, label, err);
    if (!rc) rc = find_archive_folder(&z, label, &pkl, err);
    if (!rc) rc = check_byteorder(&z, label, err);
    if (!rc) rc = eng__zip_data(&z, pkl, label, &pd, err);
    if (!rc) {
        pk_obj *result = NULL;
        vm.start = vm.p = pd;
        vm.end = pd + pkl->usize;
        vm.memo_limit = pkl->usize < TB_MAX_MEMO ? (size_t)pkl->usize : TB_MAX_MEMO;
        rc = eng__pickle_run(&vm, &result);
        if (!rc) rc = make_file(&vm, result, &map, map_len, out);
    }
    eng__pickle_free(&vm);
    eng__zip_free(&z);
    if (map) munmap(map, map_len);
    return rc;
}

int eng__torchbin_open_buffer(const void *buf, size_t len, const char *label, eng_st_file **out, eng_err *err) {
    return parse(buf, len, label ? label : "<buffer>", NULL, 0, out, err);
}

int eng__torchbin_open(const char *path, eng_st_file **out, eng_err *err) {
    *out = NULL;
    void *map;
    size_t len;
    int rc = eng__map_file(path, &map, &len, err);
    if (rc) return rc;
    if (len < 22) {
        if (map) munmap(map, len);
        return eng_err_set(err, ENG_FORMAT, "%s: %zu bytes is too short for a zip archive", path, len);
    }
    return parse(map, len, path, map, len, out, err);
}

