/* test_shapes.c - a mutation test of the loaders' shape checks.
 *
 * For every reference case in tests/fixtures/adapters/<backbone>/<case>/ and every tensor of every
 * folder it loads (adapters, fusion, head), a copy of that folder is written with that one tensor's
 * shape changed by one in one dimension (+1 for each dimension in turn, and -1 where the dimension
 * is above 1). The task is then loaded with the copy in place of the original, and the load must
 * fail with ENG_SHAPE and a message naming the tensor: never succeed, never crash (the unit label
 * runs this under ASan and UBSan too). The copy keeps the other files as symbolic links and writes
 * the tensors as safetensors (the loaders prefer it to a .bin of the same folder), whatever the
 * original format; the mutated tensor's data repeats the original values to its new length.
 *
 * Tensors that the loaders skip by design (the per-layer aliases of a prefix pool in .bin files,
 * docs/ADAPTER_FORMATS.md §5) are not mutated. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/model.h"
#include "engine/task.h"
#include "io/safetensors.h"
#include "io/tensor_file.h"
#include "ref_case.h"
#include "test_tmp.h"

/* Tensor file names a loader reads, safetensors first; the copy is written under the first name of its row. */
static const char *const tensor_files[][2] = {
    {"adapter.safetensors", "pytorch_adapter.bin"},
    {"model_head.safetensors", "pytorch_model_head.bin"},
    {"model_adapter_fusion.safetensors", "pytorch_model_adapter_fusion.bin"},
    {"adapter_model.safetensors", "adapter_model.bin"},
};
#define N_TENSOR_FILES (sizeof tensor_files / sizeof tensor_files[0])

/* Writes the tensors of f to path as safetensors; tensor `which` gets shape `shape` (its data repeated). */
static int write_st(const char *path, const eng_st_file *f, size_t which, const int64_t *shape) {
    size_t n = eng__st_count(f), off = 0;
    size_t hcap = 256 + n * 512, hl = 0;
    char *hdr = malloc(hcap);
    size_t *sizes = calloc(n, sizeof *sizes);
    if (!hdr || !sizes) {
        free(hdr);
        free(sizes);
        return -1;
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{");
    for (size_t i = 0; i < n; i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        const int64_t *sh = i == which ? shape : t->shape;
        int64_t numel = 1;
        hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t->name,
                               eng__dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) {
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s%lld", d ? "," : "", (long long)sh[d]);
            numel *= sh[d];
        }
        sizes[i] = (size_t)numel * eng__dtype_size(t->dtype);
        hl += (size_t)snprintf(hdr + hl, hcap - hl, "],\"data_offsets\":[%zu,%zu]}", off, off + sizes[i]);
        off += sizes[i];
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    cr_assert_lt(hl, hcap, "header buffer too small");
    FILE *o = fopen(path, "wb");
    int bad = !o;
    uint64_t hlen = hl;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
    if (!bad) bad = fwrite(le, 1, 8, o) != 8 || fwrite(hdr, 1, hl, o) != hl;
    for (size_t i = 0; i < n && !bad; i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        for (size_t w = 0; w < sizes[i] && !bad;) { /* the original bytes, repeated to the new size */
            size_t k = t->nbytes < sizes[i] - w ? t->nbytes : sizes[i] - w;
            if (!k) { /* an empty original cannot be repeated: zeros */
                bad = fputc(0, o) == EOF;
                w++;
                continue;
            }
            bad = fwrite(t->data, 1, k, o) != k;
            w += k;
        }
    }
    if (o && fclose(o)) bad = 1;
    free(hdr);
    free(sizes);
    return bad ? -1 : 0;
}

/* Makes dst a copy of src with every file but the two names of tensor_files[row] linked; returns 0. */
static int link_folder(const char *src, const char *dst, size_t row) {
    if (mkdir(dst, 0700)) return -1;
    DIR *d = opendir(src);
    if (!d) return -1;
    struct dirent *de;
    int bad = 0;
    while ((de = readdir(d)) && !bad) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, tensor_files[row][0]) || !strcmp(de->d_name, tensor_files[row][1]))
            continue;
        char a[PATH_MAX + 260], b[PATH_MAX * 2 + 260];
        snprintf(a, sizeof a, "%s/%s", src, de->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, de->d_name);
        bad = symlink(a, b);
    }
    closedir(d);
    return bad;
}

static void remove_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[PATH_MAX * 2 + 260];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

typedef struct {
    int mutations, loaded, wrong, crashed; /* tried; loaded although mutated; failed without naming the tensor; crashed */
} tally;

#define CHILD_CRASHED 1000

/* Loads the case's task in a child process, so that a load that corrupts memory is counted as a crash
 * and cannot disturb the loads after it. Returns the load's status (the message in e), or
 * CHILD_CRASHED when the child died. */
static int load_in_child(const ref_case *c, const eng_model *m, eng_err *e) {
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork");
    if (pid == 0) {
        close(fd[0]);
        eng_task *task = NULL;
        eng_err ce = {0};
        int rc = ref_case_load_task(c, m, NULL, &task, &ce);
        eng_task_free(task);
        ssize_t w = write(fd[1], &rc, sizeof rc);
        w += write(fd[1], ce.msg, sizeof ce.msg);
        _exit(w == (ssize_t)(sizeof rc + sizeof ce.msg) ? 0 : 3);
    }
    close(fd[1]);
    int rc = 0;
    size_t got = 0;
    char buf[sizeof rc + sizeof e->msg];
    for (ssize_t r; got < sizeof buf && (r = read(fd[0], buf + got, sizeof buf - got)) > 0;) got += (size_t)r;
    close(fd[0]);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != sizeof buf) {
        snprintf(e->msg, sizeof e->msg, "child status 0x%x", status);
        return CHILD_CRASHED;
    }
    memcpy(&rc, buf, sizeof rc);
    memcpy(e->msg, buf + sizeof rc, sizeof e->msg);
    e->msg[sizeof e->msg - 1] = 0;
    e->code = rc;
    return rc;
}

/* Points every folder of c that is `from` (a case may name one folder as adapter and as head) to `to`. */
static void set_slots(ref_case *c, const char *from, const char *to) {
    cr_assert_lt(strlen(to), PATH_MAX);
    char *slots[ENG_MAX_FUSE + 2];
    int n = 0;
    for (int i = 0; i < c->n_adapters; i++) slots[n++] = c->adapters[i];
    slots[n++] = c->fusion;
    slots[n++] = c->head;
    for (int i = 0; i < n; i++)
        if (!strcmp(slots[i], from)) memcpy(slots[i], to, strlen(to) + 1);
}

/* Mutates every tensor of the tensor file tensor_files[row] in the folder slot (a path inside c), one
 * dimension at a time, and loads the case with the copy in the slot. */
static void mutate_file(ref_case *c, const eng_model *m, char *slot, size_t row, const char *scratch, tally *tl) {
    char orig[PATH_MAX];
    snprintf(orig, sizeof orig, "%s", slot);
    eng_st_file *f = NULL;
    for (int j = 0; j < 2 && !f; j++) {
        char p[PATH_MAX * 2];
        snprintf(p, sizeof p, "%s/%s", orig, tensor_files[row][j]);
        if (access(p, R_OK)) continue;
        eng_err e = {0};
        cr_assert_eq(eng__tensors_open(p, &f, &e), 0, "%s: %s", p, e.msg);
    }
    if (!f) return;
    char copy[PATH_MAX * 2], file[PATH_MAX * 3];
    snprintf(copy, sizeof copy, "%s/copy", scratch);
    snprintf(file, sizeof file, "%s/%s", copy, tensor_files[row][0]);
    for (size_t i = 0; i < eng__st_count(f); i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        if (strstr(t->name, ".pool.prefix_tunings.")) continue; /* aliases the loader skips */
        for (int d = 0; d < t->ndim; d++)
            for (int delta = 1; delta >= -1; delta -= 2) {
                if (delta < 0 && t->shape[d] <= 1) continue;
                int64_t shape[ENG_MAX_DIMS];
                memcpy(shape, t->shape, sizeof shape);
                shape[d] += delta;
                cr_assert_eq(link_folder(orig, copy, row), 0, "cannot copy %s", orig);
                cr_assert_eq(write_st(file, f, i, shape), 0, "cannot write %s", file);
                set_slots(c, orig, copy);
                eng_err e = {0};
                int rc = load_in_child(c, m, &e);
                set_slots(c, copy, orig);
                tl->mutations++;
                if (rc == CHILD_CRASHED) {
                    tl->crashed++;
                    cr_log_error("%s: '%s' dim %d %+d: the load crashed: %s", orig, t->name, d, delta, e.msg);
                } else if (rc == 0) {
                    tl->loaded++;
                    cr_log_error("%s: '%s' dim %d %+d loaded", orig, t->name, d, delta);
                } else if (rc != ENG_SHAPE || !strstr(e.msg, t->name)) {
                    tl->wrong++;
                    cr_log_error("%s: '%s' dim %d %+d: status %d, message does not name it: %s", orig, t->name, d,
                                 delta, rc, e.msg);
                }
                remove_folder(copy);
            }
    }
    eng__st_close(f);
}

static void mutate_folder(ref_case *c, const eng_model *m, char *slot, const char *scratch, tally *tl) {
    for (size_t row = 0; row < N_TENSOR_FILES; row++) mutate_file(c, m, slot, row, scratch, tl);
}

static void mutate_backbone(const char *backbone, int min_cases) {
    char dir[PATH_MAX], tmpl[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/adapters/%s", ADAPTERD_FIXTURES, backbone);
    char *scratch = mkdtemp(test_tmp_template(tmpl, sizeof tmpl, "shapes"));
    cr_assert(scratch, "no scratch folder");
    DIR *d = opendir(dir);
    cr_assert(d, "no %s", dir);
    struct dirent *de;
    eng_model *m = NULL;
    tally tl = {0};
    int cases = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        const char *only = getenv("ADAPTERD_SHAPES_CASE"); /* one case, to look at its mutations alone */
        if (only && *only && strcmp(only, de->d_name)) continue;
        char cdir[PATH_MAX * 2], msg[2048];
        snprintf(cdir, sizeof cdir, "%s/%s", dir, de->d_name);
        ref_case c;
        cr_assert_eq(ref_case_open(&c, ADAPTERD_FIXTURES, cdir, msg, sizeof msg), 0, "%s", msg);
        eng_err e = {0};
        if (!m) cr_assert_eq(eng_model_load(c.backbone, &m, &e), 0, "%s", e.msg);
        /* the unmutated case loads, so a failure below is the mutation's */
        eng_task *task = NULL;
        cr_assert_eq(ref_case_load_task(&c, m, NULL, &task, &e), 0, "%s: %s", cdir, e.msg);
        eng_task_free(task);
        tally before = tl;
        for (int i = 0; i < c.n_adapters; i++) mutate_folder(&c, m, c.adapters[i], scratch, &tl);
        if (c.fusion[0]) mutate_folder(&c, m, c.fusion, scratch, &tl);
        int head_is_adapter = 0; /* then its files were mutated with the adapter's */
        for (int i = 0; i < c.n_adapters; i++) head_is_adapter |= !strcmp(c.head, c.adapters[i]);
        if (c.head[0] && !head_is_adapter) mutate_folder(&c, m, c.head, scratch, &tl);
        cr_log_info("%s/%s: %d mutations, %d loaded, %d crashed, %d without the tensor's name", backbone, de->d_name,
                    tl.mutations - before.mutations, tl.loaded - before.loaded, tl.crashed - before.crashed,
                    tl.wrong - before.wrong);
        ref_case_close(&c);
        cases++;
    }
    closedir(d);
    eng_model_free(m);
    rmdir(scratch);
    /* on stderr: a criterion warning would turn the exit status to failure */
    fprintf(stderr, "%s: %d cases, %d mutations, %d loaded, %d crashed, %d refused without naming the tensor\n",
            backbone, cases, tl.mutations, tl.loaded, tl.crashed, tl.wrong);
    if (getenv("ADAPTERD_SHAPES_CASE") && *getenv("ADAPTERD_SHAPES_CASE")) min_cases = cases ? 1 : 0;
    cr_assert_geq(cases, min_cases);
    cr_assert_gt(tl.mutations, 10 * cases, "too few mutations: the walk over tensors is broken");
    cr_expect_eq(tl.crashed, 0, "%s: %d mutated tensors crashed the load", backbone, tl.crashed);
    cr_expect_eq(tl.loaded, 0, "%s: %d mutated tensors loaded", backbone, tl.loaded);
    cr_expect_eq(tl.wrong, 0, "%s: %d mutated tensors refused without a shape error naming them", backbone, tl.wrong);
}

Test(shapes, bert_tiny_every_tensor, .timeout = 300) { mutate_backbone("bert-tiny", 20); }
Test(shapes, roberta_tiny_every_tensor, .timeout = 300) { mutate_backbone("roberta-tiny", 4); }
Test(shapes, distilbert_tiny_every_tensor, .timeout = 300) { mutate_backbone("distilbert-tiny", 4); }
