/* sparsify.c - a pruned copy of a saved bottleneck adapter (rules in engine/sparsify.h).
 *
 * Works on the file, not on a loaded task: the copy must keep every tensor of the original under
 * its saved name and dtype (a loaded task has folded, converted and renamed them), so it reads the
 * weights file with the engine's readers, zeroes bytes in copies of the projection matrices only,
 * and writes all tensors back with the safetensors writer. Zero bytes are +0.0 in every float
 * dtype, so pruning never converts a value. The other files of the folder are copied unchanged. */
#include "engine/sparsify.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/files.h"
#include "io/safetensors.h"
#include "io/safetensors_write.h"
#include "io/tensor_file.h"

static const char *const weight_files[] = {"adapter.safetensors", "pytorch_adapter.bin", NULL};

/* A bottleneck projection: a 2-D float "...adapter_down.<i>.weight" (the Linear of the Sequential;
 * with ln_before index 0 is a 1-D LayerNorm) or "...adapter_up.weight". */
static int is_projection(const eng_st_tensor *t) {
    if (t->ndim != 2 || !(t->dtype == ENG_DT_F32 || t->dtype == ENG_DT_F16 || t->dtype == ENG_DT_BF16 ||
                          t->dtype == ENG_DT_F64))
        return 0;
    size_t n = strlen(t->name);
    static const char up[] = "adapter_up.weight", down[] = "adapter_down.";
    if (n >= sizeof up - 1 && !strcmp(t->name + n - (sizeof up - 1), up)) return 1;
    const char *d = strstr(t->name, down);
    if (!d) return 0;
    d += sizeof down - 1;
    if (*d < '0' || *d > '9') return 0;
    while (*d >= '0' && *d <= '9') d++;
    return !strcmp(d, ".weight");
}

typedef struct {
    const float *mag;
    int64_t i;
} ranked;

/* Larger magnitude first; equal magnitudes by flat index. */
static int cmp_ranked(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    float mx = fabsf(x->mag[x->i]), my = fabsf(y->mag[y->i]);
    if (mx != my) return mx > my ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Number of weights a matrix of n keeps at density: round half up, at least 1. */
static int64_t keep_count(int64_t n, double density) {
    int64_t k = (int64_t)floor(density * (double)n + 0.5);
    return k < 1 ? 1 : k > n ? n : k;
}

/* Copies t's data into *out (malloc'd) with all but the k largest-magnitude weights zeroed. */
static int prune_copy(const eng_st_tensor *t, double density, void **out, int64_t *kept, eng_err *err) {
    int64_t n = t->numel, k = keep_count(n, density);
    size_t es = eng__dtype_size(t->dtype);
    uint8_t *dst = malloc(t->nbytes ? t->nbytes : 1);
    float *mag = malloc((size_t)n * sizeof *mag);
    ranked *r = malloc((size_t)n * sizeof *r);
    uint8_t *keep = calloc((size_t)n, 1);
    int rc = 0;
    if (!dst || !mag || !r || !keep) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "%s: out of memory", t->name);
        goto out;
    }
    if (eng__convert_to_f32(t->dtype, t->data, (size_t)n, mag)) {
        rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: dtype %s", t->name, eng__dtype_name(t->dtype));
        goto out;
    }
    for (int64_t i = 0; i < n; i++) r[i] = (ranked){mag, i};
    qsort(r, (size_t)n, sizeof *r, cmp_ranked);
    for (int64_t j = 0; j < k; j++) keep[r[j].i] = 1;
    memcpy(dst, t->data, t->nbytes);
    for (int64_t i = 0; i < n; i++)
        if (!keep[i]) memset(dst + (size_t)i * es, 0, es);
    *kept = k;
    *out = dst;
    dst = NULL;
out:
    free(dst);
    free(mag);
    free(r);
    free(keep);
    return rc;
}

static int copy_file(const char *from, const char *to, eng_err *err) {
    FILE *in = fopen(from, "rb");
    if (!in) return eng_err_set(err, ENG_IO, "%s: cannot open (%s)", from, strerror(errno));
    FILE *o = fopen(to, "wb");
    if (!o) {
        fclose(in);
        return eng_err_set(err, ENG_IO, "%s: cannot create (%s)", to, strerror(errno));
    }
    char buf[65536];
    size_t got;
    int bad = 0;
    while (!bad && (got = fread(buf, 1, sizeof buf, in)) > 0) bad = fwrite(buf, 1, got, o) != got;
    bad |= ferror(in);
    fclose(in);
    if (fclose(o) || bad) return eng_err_set(err, ENG_IO, "%s: copy failed (%s)", to, strerror(errno));
    return 0;
}

/* The folder's regular files other than the weights, copied into out_dir. */
static int copy_other_files(const char *dir, const char *out_dir, eng_err *err) {
    DIR *d = opendir(dir);
    if (!d) return eng_err_set(err, ENG_IO, "%s: cannot list (%s)", dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        int skip = de->d_name[0] == '.';
        for (int i = 0; !skip && weight_files[i]; i++) skip = !strcmp(de->d_name, weight_files[i]);
        if (skip || !eng_file_exists_in(dir, de->d_name)) continue;
        char from[PATH_MAX], to[PATH_MAX];
        if ((size_t)snprintf(from, sizeof from, "%s/%s", dir, de->d_name) >= sizeof from ||
            (size_t)snprintf(to, sizeof to, "%s/%s", out_dir, de->d_name) >= sizeof to)
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/%s: path too long", out_dir, de->d_name);
        else
            rc = copy_file(from, to, err);
    }
    closedir(d);
    return rc;
}

/* Creates out_dir, or accepts an existing empty one. */
static int make_out_dir(const char *out_dir, eng_err *err) {
    if (!mkdir(out_dir, 0755)) return 0;
    if (errno != EEXIST) return eng_err_set(err, ENG_IO, "%s: cannot create (%s)", out_dir, strerror(errno));
    DIR *d = opendir(out_dir);
    if (!d) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s exists and is not a folder", out_dir);
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d))) empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    return empty ? 0 : eng_err_set(err, ENG_INVALID_ARGUMENT, "%s is not empty: give a new folder", out_dir);
}

int eng_adapter_sparsify(const char *adapter_dir, double density, const char *out_dir, eng_sparsify_report *rep,
                         eng_err *err) {
    if (!(density > 0 && density <= 1))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "density %g: give a share of weights to keep, 0 < d <= 1",
                           density);
    eng_sparsify_report r = {0};
    json_t *cfg = eng__json_object_load(adapter_dir, "adapter_config.json", err);
    if (!cfg) return err ? err->code : ENG_NOT_FOUND;
    int rc = 0;
    if (json_object_get(cfg, "peft_type"))
        rc = eng_err_set(err, ENG_UNSUPPORTED,
                         "%s: a PEFT adapter; sparsify reads AdapterHub bottleneck adapters (save_adapter)", adapter_dir);
    json_decref(cfg);
    if (rc) return rc;

    eng_st_file *f = NULL;
    if ((rc = eng__tensors_open_first(adapter_dir, weight_files, &f, err))) return rc;
    size_t n = eng__st_count(f);
    eng_st_tensor *out = calloc(n ? n : 1, sizeof *out);
    void **owned = calloc(n ? n : 1, sizeof *owned);
    if (!out || !owned) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        out[i] = *t;
        if (strstr(t->name, "deepspeed_experts.")) {
            rc = eng_err_set(err, ENG_UNSUPPORTED,
                             "%s: AdaMix experts ('%s'); pruning each expert would not make their average sparse",
                             adapter_dir, t->name);
            break;
        }
        if (!is_projection(t)) continue;
        int64_t kept = 0;
        if ((rc = prune_copy(t, density, &owned[i], &kept, err))) break;
        out[i].data = owned[i];
        r.matrices++;
        r.weights += t->numel;
        r.kept += kept;
    }
    if (!rc && r.matrices == 0)
        rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: no bottleneck weight matrix (adapter_down / adapter_up) to prune",
                         adapter_dir);
    if (rc) goto done;
    if ((rc = make_out_dir(out_dir, err))) goto done;
    char dens[32], path[PATH_MAX];
    snprintf(dens, sizeof dens, "%g", density);
    const char *meta[] = {"format", "pt", "sparsify_density", dens};
    if ((size_t)snprintf(path, sizeof path, "%s/%s", out_dir, weight_files[0]) >= sizeof path) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: path too long", out_dir);
        goto done;
    }
    if ((rc = eng__st_write(path, out, n, meta, 2, err))) goto done;
    rc = copy_other_files(adapter_dir, out_dir, err);
    r.tensors = (int)n;
done:
    for (size_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(out);
    eng__st_close(f);
    if (!rc && rep) *rep = r;
    return rc;
}
