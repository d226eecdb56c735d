/* tensor_file.c - tensor files of either format, the shape check, first-of-candidates (tensor_file.h). */
#include "io/tensor_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/files.h"
#include "io/torch_bin.h"

int eng__tensors_open(const char *path, eng_st_file **out, eng_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return eng_err_set(err, errno == ENOENT ? ENG_NOT_FOUND : ENG_IO, "%s: %s", path, strerror(errno));
    uint8_t head[4] = {0};
    ssize_t got = read(fd, head, sizeof head);
    int e = errno;
    close(fd);
    if (got < 0) return eng_err_set(err, ENG_IO, "%s: read: %s", path, strerror(e));
    if (got == 4 && !memcmp(head, "PK\x03\x04", 4)) return eng__torchbin_open(path, out, err);
    if (got == 4 && head[0] == 0x80 && head[1] == 2 && head[2] == 0x8a && head[3] == 0x0a)
        return eng_err_set(err, ENG_UNSUPPORTED,
                           "%s: legacy torch.save format (before torch 1.6) is not supported; re-save it with a "
                           "recent torch or as safetensors", path);
    return eng__st_open(path, out, err);
}

int eng__tensors_open_first(const char *dir, const char *const *names, eng_st_file **out, eng_err *err) {
    *out = NULL;
    for (int i = 0; names[i]; i++)
        if (eng_file_exists_in(dir, names[i])) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            return eng__tensors_open(p, out, err);
        }
    return eng_err_set(err, ENG_NOT_FOUND, "%s: no weights file (%s%s%s)", dir, names[0], names[1] ? " or " : "",
                       names[1] ? names[1] : "");
}

int eng__tensor_check_shape(const eng_st_tensor *t, int64_t d0, int64_t d1, const char *label, eng_err *err) {
    int ok = d1 ? (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1)
                : (t->ndim == 1 && (d0 < 0 || t->shape[0] == d0)) || (d0 == 1 && t->numel == 1);
    if (ok) return 0;
    char got[96] = "", want[64];
    size_t o = 0;
    for (int i = 0; i < t->ndim && o + 24 < sizeof got; i++)
        o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (d1)
        snprintf(want, sizeof want, "%lld, %lld", (long long)d0, (long long)d1);
    else if (d0 >= 0)
        snprintf(want, sizeof want, "%lld", (long long)d0);
    else
        snprintf(want, sizeof want, "n");
    return eng_err_set(err, ENG_SHAPE, "%s%stensor '%s' has shape (%s), expected (%s)", label ? label : "",
                       label ? ": " : "", t->name, got, want);
}

int eng__tensor_load_f32(const eng_st_tensor *t, int64_t d0, int64_t d1, const char *label, float *dst, eng_err *err) {
    int rc = eng__tensor_check_shape(t, d0, d1, label, err);
    if (rc) return rc;
    if (eng__convert_to_f32(t->dtype, t->data, (size_t)t->numel, dst))
        return eng_err_set(err, ENG_UNSUPPORTED, "%s%stensor '%s' has dtype %s (F32, F16, BF16 or F64 expected)",
                           label ? label : "", label ? ": " : "", t->name, eng__dtype_name(t->dtype));
    return 0;
}
