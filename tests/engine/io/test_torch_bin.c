/* test_torch_bin.c - the torch.save .bin reader (engine/io/torch_bin.c).
 *
 * Valid archives come from tools/reference/gen_torch_bin.py (torch.save itself), each with an expected
 * safetensors file of the same tensors written from torch's bytes: values are compared bit for bit. The real
 * AdapterHub mBERT files are checked against sums and sample values torch.load produced
 * (tests/fixtures/torch_bin/expected_mbert_md.json). Hostile input is built here: hand-written pickles in
 * hand-written zips for each rejection rule, every truncation of a valid archive, and a few thousand
 * deterministic byte mutations that must each end in an error or a file whose tensors lie inside the buffer. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/tensor_file.h"
#include "io/torch_bin.h"
#include "test_tmp.h"

#define FIX(name) ADAPTERD_FIXTURES "/torch_bin/" name
#define MBERT_DIR ADAPTERD_DATA_DIR "/adapters/adapterhub-mbert-md" /* shared data, read in place */

/* ---------------------------------------------------------------- helpers */

typedef struct {
    unsigned char *b;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (!n) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->b = realloc(b->b, b->cap);
        cr_assert(b->b);
    }
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void put8(buf *b, unsigned v) { unsigned char c = (unsigned char)v; put(b, &c, 1); }
static void put16(buf *b, unsigned v) { put8(b, v & 0xff), put8(b, v >> 8 & 0xff); }
static void put32(buf *b, uint32_t v) { put16(b, v & 0xffff), put16(b, v >> 16); }

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    cr_assert(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

typedef struct {
    const char *name;
    const void *data;
    size_t len;
    unsigned method;
} zentry;

/* A minimal zip writer (no CRCs: the reader does not check them). */
static buf make_zip(const zentry *e, int n) {
    buf z = {0}, cd = {0};
    for (int i = 0; i < n; i++) {
        uint32_t off = (uint32_t)z.n;
        size_t nl = strlen(e[i].name);
        put32(&z, 0x04034b50), put16(&z, 20), put16(&z, 0), put16(&z, e[i].method), put32(&z, 0), put32(&z, 0);
        put32(&z, (uint32_t)e[i].len), put32(&z, (uint32_t)e[i].len), put16(&z, (unsigned)nl), put16(&z, 0);
        put(&z, e[i].name, nl), put(&z, e[i].data, e[i].len);
        put32(&cd, 0x02014b50), put16(&cd, 20), put16(&cd, 20), put16(&cd, 0), put16(&cd, e[i].method);
        put32(&cd, 0), put32(&cd, 0), put32(&cd, (uint32_t)e[i].len), put32(&cd, (uint32_t)e[i].len);
        put16(&cd, (unsigned)nl), put16(&cd, 0), put16(&cd, 0), put16(&cd, 0), put16(&cd, 0), put32(&cd, 0);
        put32(&cd, off), put(&cd, e[i].name, nl);
    }
    uint32_t cd_off = (uint32_t)z.n;
    put(&z, cd.b, cd.n);
    put32(&z, 0x06054b50), put16(&z, 0), put16(&z, 0), put16(&z, (unsigned)n), put16(&z, (unsigned)n);
    put32(&z, (uint32_t)cd.n), put32(&z, cd_off), put16(&z, 0);
    free(cd.b);
    return z;
}

/* Pickle writers (protocol 2 opcodes, as torch.save emits them). */
static void p_str(buf *p, const char *s) { put8(p, 'X'), put32(p, (uint32_t)strlen(s)), put(p, s, strlen(s)); }
static void p_int(buf *p, int32_t v) { put8(p, 'J'), put32(p, (uint32_t)v); }
static void p_glob(buf *p, const char *mod, const char *name) {
    put8(p, 'c'), put(p, mod, strlen(mod)), put8(p, '\n'), put(p, name, strlen(name)), put8(p, '\n');
}
/* The argument tuple (('storage', torch.<st>, key, 'cpu', numel), offset, shape, stride, False, {}). */
static void p_tensor_args(buf *p, const char *st, const char *key, int numel, int offset, int nd, const int *shape,
                          const int *stride) {
    put8(p, '('), put8(p, '('), p_str(p, "storage"), p_glob(p, "torch", st), p_str(p, key), p_str(p, "cpu");
    p_int(p, numel), put8(p, 't'), put8(p, 'Q'), p_int(p, offset);
    put8(p, '(');
    for (int i = 0; i < nd; i++) p_int(p, shape[i]);
    put8(p, 't'), put8(p, '(');
    for (int i = 0; i < nd; i++) p_int(p, stride[i]);
    put8(p, 't'), put8(p, 0x89), put8(p, '}'), put8(p, 't');
}

/* _rebuild_tensor_v2(<p_tensor_args>) */
static void p_tensor(buf *p, const char *st, const char *key, int numel, int offset, int nd, const int *shape,
                     const int *stride) {
    p_glob(p, "torch._utils", "_rebuild_tensor_v2");
    p_tensor_args(p, st, key, numel, offset, nd, shape, stride);
    put8(p, 'R');
}

/* {"w": _rebuild_from_type_v2(_rebuild_tensor_v2, torch.Tensor, <args>, {} or {"x": None})} */
static buf from_type(int with_state) {
    buf p = {0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, '}'), p_str(&p, "w");
    p_glob(&p, "torch._tensor", "_rebuild_from_type_v2");
    put8(&p, '('), p_glob(&p, "torch._utils", "_rebuild_tensor_v2"), p_glob(&p, "torch._tensor", "Tensor");
    p_tensor_args(&p, "FloatStorage", "0", 8, 0, 2, (const int[]){4, 2}, (const int[]){2, 1});
    put8(&p, '}');
    if (with_state) p_str(&p, "x"), put8(&p, 'N'), put8(&p, 's');
    put8(&p, 't'), put8(&p, 'R'), put8(&p, 's'), put8(&p, '.');
    return p;
}

static const float STORE0[8] = {1, 2, 3, 4, 5, 6, 7, 8}; /* archive/data/0, F32 */

/* Opens a zip of archive/data.pkl = pkl and archive/data/0 = STORE0 (plus extra entries). */
static int open_pickle(const buf *pkl, const zentry *extra, int n_extra, eng_st_file **f, eng_err *e) {
    zentry es[8] = {{"archive/data.pkl", pkl->b, pkl->n, 0}, {"archive/data/0", STORE0, sizeof STORE0, 0},
                    {"archive/version", "3\n", 2, 0}};
    int n = 3;
    for (int i = 0; i < n_extra; i++) es[n++] = extra[i];
    buf z = make_zip(es, n);
    int rc = eng__torchbin_open_buffer(z.b, z.n, "t.bin", f, e);
    if (rc == 0) { /* the file points into z.b: check what we need here, then the caller only looks at rc */
        for (size_t i = 0; i < eng__st_count(*f); i++) {
            const eng_st_tensor *t = eng__st_at(*f, i);
            cr_assert((const unsigned char *)t->data >= z.b && (const unsigned char *)t->data + t->nbytes <= z.b + z.n);
        }
        eng__st_close(*f);
        *f = NULL;
    }
    free(z.b);
    return rc;
}

/* Expects pkl to be rejected with code and a message containing needle. */
static void expect_reject(const buf *pkl, eng_status code, const char *needle) {
    eng_st_file *f = (eng_st_file *)1;
    eng_err e = {0};
    int rc = open_pickle(pkl, NULL, 0, &f, &e);
    cr_expect_eq(rc, code, "want %s, got %d: %s", eng_status_name(code), rc, e.msg);
    cr_expect_null(f);
    cr_expect(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
}

/* Compares every tensor of bin with the expected safetensors file, bit for bit. */
static eng_st_file *open_and_compare(const char *bin, const char *expected) {
    eng_st_file *f, *x;
    eng_err e = {0};
    cr_assert_eq(eng__torchbin_open(bin, &f, &e), 0, "%s", e.msg);
    cr_assert_eq(eng__st_open(expected, &x, &e), 0, "%s", e.msg);
    cr_assert_eq(eng__st_count(f), eng__st_count(x));
    for (size_t i = 0; i < eng__st_count(x); i++) {
        const eng_st_tensor *w = eng__st_at(x, i), *g = eng__st_find(f, w->name);
        cr_assert(g, "%s: no tensor '%s'", bin, w->name);
        cr_expect_eq(g->dtype, w->dtype, "%s: dtype", w->name);
        cr_assert_eq(g->ndim, w->ndim, "%s: ndim", w->name);
        for (int d = 0; d < w->ndim; d++) cr_expect_eq(g->shape[d], w->shape[d], "%s: shape[%d]", w->name, d);
        cr_expect_eq(g->numel, w->numel, "%s", w->name);
        cr_assert_eq(g->nbytes, w->nbytes, "%s", w->name);
        cr_expect(!memcmp(g->data, w->data, w->nbytes), "%s: values differ", w->name);
    }
    eng__st_close(x);
    return f;
}

/* ---------------------------------------------------------------- torch.save fixtures */

Test(torch_bin, every_storage_dtype) {
    eng_st_file *f = open_and_compare(FIX("dtypes.bin"), FIX("expected/dtypes.safetensors"));
    const struct { const char *n; eng_dtype dt; } want[] = {
        {"f32", ENG_DT_F32}, {"f64", ENG_DT_F64}, {"f16", ENG_DT_F16}, {"bf16", ENG_DT_BF16}, {"i64", ENG_DT_I64},
        {"i32", ENG_DT_I32}, {"i16", ENG_DT_I16}, {"i8", ENG_DT_I8},   {"u8", ENG_DT_U8},     {"bool", ENG_DT_BOOL},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect_eq(eng__st_find(f, want[i].n)->dtype, want[i].dt, "%s", want[i].n);
    int64_t big;
    memcpy(&big, (const char *)eng__st_find(f, "i64")->data + 3 * 8, 8);
    cr_expect_eq(big, -(INT64_C(1) << 62));
    eng__st_close(f);
}

Test(torch_bin, shared_storages_views_and_edge_shapes) {
    eng_st_file *f = open_and_compare(FIX("views.bin"), FIX("expected/views.safetensors"));
    const char *base = eng__st_find(f, "base")->data;
    cr_expect_eq(eng__st_find(f, "grid")->data, base);
    cr_expect_eq((const char *)eng__st_find(f, "slice")->data, base + 4 * 4);
    cr_expect_eq((const char *)eng__st_find(f, "block")->data, base + 6 * 4);
    cr_expect_eq((const char *)eng__st_find(f, "row")->data, base + 12 * 4);
    cr_expect_eq((const char *)eng__st_find(f, "elem")->data, base + 5 * 4);
    cr_expect_eq(eng__st_find(f, "pool.alias")->data, eng__st_find(f, "canonical.alias")->data);
    const eng_st_tensor *s = eng__st_find(f, "scalar"), *z = eng__st_find(f, "empty");
    cr_expect_eq(s->ndim, 0);
    cr_expect_eq(s->numel, 1);
    float v;
    memcpy(&v, s->data, 4);
    cr_expect_eq(v, 3.5f);
    cr_expect_eq(z->ndim, 2);
    cr_expect_eq(z->numel, 0);
    cr_expect_eq(z->nbytes, 0);
    eng__st_close(f);
}

Test(torch_bin, zip64_records_other_folder_name_unaligned_data) {
    eng_st_file *f = open_and_compare(FIX("zip64.bin"), FIX("expected/views.safetensors"));
    int unaligned = 0;
    for (size_t i = 0; i < eng__st_count(f); i++) unaligned |= (uintptr_t)eng__st_at(f, i)->data % 4 != 0;
    cr_expect(unaligned, "the fixture is meant to place data at odd offsets");
    float got[6], base[24];
    cr_assert_eq(eng__convert_to_f32(ENG_DT_F32, eng__st_find(f, "slice")->data, 6, got), 0);
    cr_assert_eq(eng__convert_to_f32(ENG_DT_F32, eng__st_find(f, "base")->data, 24, base), 0);
    cr_expect_eq(memcmp(got, base + 4, sizeof got), 0);
    eng__st_close(f);
}

Test(torch_bin, tensors_open_dispatches_on_content) {
    eng_st_file *f;
    eng_err e = {0};
    cr_assert_eq(eng__tensors_open(FIX("views.bin"), &f, &e), 0, "%s", e.msg);
    cr_expect(eng__st_find(f, "grid"));
    eng__st_close(f);
    cr_assert_eq(eng__tensors_open(FIX("expected/views.safetensors"), &f, &e), 0, "%s", e.msg);
    cr_expect(eng__st_find(f, "grid"));
    eng__st_close(f);
    cr_expect_eq(eng__tensors_open(FIX("no_such_file.bin"), &f, &e), ENG_NOT_FOUND);
    cr_expect_null(f);

    char path[1024];
    int fd = mkstemp(test_tmp_template(path, sizeof path, "legacy"));
    cr_assert(fd >= 0);
    const unsigned char legacy[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    cr_assert_eq(write(fd, legacy, sizeof legacy), (ssize_t)sizeof legacy);
    close(fd);
    cr_expect_eq(eng__tensors_open(path, &f, &e), ENG_UNSUPPORTED);
    cr_expect(strstr(e.msg, "legacy"), "%s", e.msg);
    unlink(path);
}

Test(torch_bin, rejects_the_broken_fixtures) {
    const struct {
        const char *file;
        eng_status code;
        const char *needle;
    } cases[] = {
        {FIX("noncontig.bin"), ENG_UNSUPPORTED, "tensor 't' is not contiguous (size [4, 3], stride [1, 4])"},
        {FIX("forbidden_global.bin"), ENG_UNSUPPORTED, "'os.system'"},
        {FIX("truncated.bin"), ENG_FORMAT, "end-of-central-directory"},
        {FIX("deflated.bin"), ENG_UNSUPPORTED, "zip entry 'dtypes/data/0' is compressed (method 8, DEFLATE)"},
        {FIX("missing.bin"), ENG_NOT_FOUND, "missing.bin"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        eng_st_file *f = (eng_st_file *)1;
        eng_err e = {0};
        int rc = eng__torchbin_open(cases[i].file, &f, &e);
        cr_expect_eq(rc, cases[i].code, "%s: got %d: %s", cases[i].file, rc, e.msg);
        cr_expect_null(f);
        cr_expect(strstr(e.msg, cases[i].needle), "%s: message '%s' lacks '%s'", cases[i].file, e.msg,
                  cases[i].needle);
    }
}

/* ---------------------------------------------------------------- the real AdapterHub files */

static void check_real(const char *file, json_t *want, size_t want_count) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", MBERT_DIR, file);
    if (access(path, R_OK)) cr_skip("%s is absent: set ADAPTERD_DATA_DIR to the shared data", path);
    eng_st_file *f;
    eng_err e = {0};
    cr_assert_eq(eng__tensors_open(path, &f, &e), 0, "%s", e.msg);
    json_t *exp = json_object_get(want, file);
    cr_assert(json_is_object(exp));
    cr_assert_eq(eng__st_count(f), json_object_size(exp));
    cr_assert_eq(eng__st_count(f), want_count);
    const char *name;
    json_t *v;
    json_object_foreach(exp, name, v) {
        const eng_st_tensor *t = eng__st_find(f, name);
        cr_assert(t, "no tensor '%s'", name);
        cr_expect_str_eq(eng__dtype_name(t->dtype), json_string_value(json_object_get(v, "dtype")), "%s", name);
        json_t *sh = json_object_get(v, "shape");
        cr_assert_eq((size_t)t->ndim, json_array_size(sh), "%s", name);
        for (int d = 0; d < t->ndim; d++)
            cr_expect_eq(t->shape[d], json_integer_value(json_array_get(sh, (size_t)d)), "%s[%d]", name, d);
        float *x = malloc((size_t)t->numel * sizeof *x);
        cr_assert(x);
        cr_assert_eq(eng__convert_to_f32(t->dtype, t->data, (size_t)t->numel, x), 0);
        double sum = 0;
        for (int64_t i = 0; i < t->numel; i++) sum += x[i];
        double ws = json_real_value(json_object_get(v, "sum"));
        cr_expect(fabs(sum - ws) <= 1e-9 * (1 + fabs(ws)), "%s: sum %.17g, torch %.17g", name, sum, ws);
        size_t k;
        json_t *at;
        json_array_foreach(json_object_get(v, "at"), k, at) {
            json_int_t idx = json_integer_value(json_array_get(at, 0));
            cr_assert(idx >= 0 && idx < t->numel);
            cr_expect_eq(x[idx], (float)json_real_value(json_array_get(at, 1)), "%s[%lld]", name, (long long)idx);
        }
        free(x);
    }
    eng__st_close(f);
}

static json_t *load_mbert_expected(void) {
    json_error_t je;
    json_t *want = json_load_file(FIX("expected_mbert_md.json"), 0, &je);
    cr_assert(want, "%s", je.text);
    return want;
}

Test(torch_bin, real_adapterhub_adapter) {
    json_t *want = load_mbert_expected();
    check_real("pytorch_adapter.bin", want, 48);
    /* the names AdapterHub gives a Pfeiffer adapter "md" on bert */
    eng_st_file *f;
    eng_err e = {0};
    cr_assert_eq(eng__torchbin_open(MBERT_DIR "/pytorch_adapter.bin", &f, &e), 0, "%s", e.msg);
    const char *part[] = {"adapter_down.0.weight", "adapter_down.0.bias", "adapter_up.weight", "adapter_up.bias"};
    const int64_t rows[] = {48, 48, 768, 768}, cols[] = {768, 0, 48, 0};
    for (int l = 0; l < 12; l++)
        for (int p = 0; p < 4; p++) {
            char n[128];
            snprintf(n, sizeof n, "bert.encoder.layer.%d.output.adapters.md.%s", l, part[p]);
            const eng_st_tensor *t = eng__st_find(f, n);
            cr_assert(t, "no '%s'", n);
            cr_expect_eq(t->dtype, ENG_DT_F32);
            cr_expect_eq(t->ndim, cols[p] ? 2 : 1, "%s", n);
            cr_expect_eq(t->shape[0], rows[p], "%s", n);
            if (cols[p]) cr_expect_eq(t->shape[1], cols[p], "%s", n);
        }
    eng__st_close(f);
    json_decref(want);
}

Test(torch_bin, real_adapterhub_head) {
    json_t *want = load_mbert_expected();
    check_real("pytorch_model_head.bin", want, 4);
    json_decref(want);
}

/* ---------------------------------------------------------------- hand-made pickles */

static const int SH23[] = {2, 3}, ST23[] = {3, 1};

/* {name: tensor} via EMPTY_DICT, BINPUT, MARK ... SETITEMS, STOP. */
static buf tensor_in(const char *key, const char *st, int numel, int offset, int nd, const int *shape,
                     const int *stride) {
    buf p = {0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, '}'), put8(&p, 'q'), put8(&p, 0), put8(&p, '(');
    p_str(&p, "w");
    p_tensor(&p, st, key, numel, offset, nd, shape, stride);
    put8(&p, 'u'), put8(&p, '.');
    return p;
}

/* {"w": tensor} on archive/data/0. */
static buf one_tensor(const char *st, int numel, int offset, int nd, const int *shape, const int *stride) {
    return tensor_in("0", st, numel, offset, nd, shape, stride);
}

Test(torch_bin, hand_made_valid_pickles) {
    eng_st_file *f = NULL;
    eng_err e = {0};
    buf p = one_tensor("FloatStorage", 8, 2, 2, SH23, ST23);
    cr_expect_eq(open_pickle(&p, NULL, 0, &f, &e), 0, "%s", e.msg);
    free(p.b);

    /* protocol-4 spellings: FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL, BINGET, LONG1, an OrderedDict with
     * BUILD state, a Parameter, and an empty dict as a whole state dict */
    p = (buf){0};
    put8(&p, 0x80), put8(&p, 4), put8(&p, 0x95), put32(&p, 0), put32(&p, 0);
    put8(&p, 0x8c), put8(&p, 11), put(&p, "collections", 11), put8(&p, 0x94);
    put8(&p, 0x8c), put8(&p, 11), put(&p, "OrderedDict", 11), put8(&p, 0x94), put8(&p, 0x93), put8(&p, 0x94);
    put8(&p, ')'), put8(&p, 'R'), put8(&p, 0x94); /* memo 3 = the dict */
    put8(&p, 0x8c), put8(&p, 1), put8(&p, 'p');
    p_glob(&p, "torch._utils", "_rebuild_parameter");
    put8(&p, '(');
    p_tensor(&p, "FloatStorage", "0", 8, 0, 2, SH23, ST23);
    put8(&p, 0x88), put8(&p, 'h'), put8(&p, 2), put8(&p, ')'), put8(&p, 'R'), put8(&p, 't'), put8(&p, 'R');
    put8(&p, 's');
    put8(&p, 0x8c), put8(&p, 1), put8(&p, 'q');
    p_glob(&p, "torch._utils", "_rebuild_tensor_v2");
    put8(&p, '('), put8(&p, '('), p_str(&p, "storage"), p_glob(&p, "torch", "FloatStorage"), p_str(&p, "0");
    p_str(&p, "cpu"), put8(&p, 0x8a), put8(&p, 1), put8(&p, 8), put8(&p, 't'), put8(&p, 'Q');
    put8(&p, 0x8a), put8(&p, 0), put8(&p, ')'), put8(&p, ')'), put8(&p, 0x89), put8(&p, 'N');
    put8(&p, 't'), put8(&p, 'R');
    put8(&p, 's');
    put8(&p, '}'), put8(&p, 0x8c), put8(&p, 9), put(&p, "_metadata", 9), put8(&p, 'N'), put8(&p, 's'), put8(&p, 'b');
    put8(&p, '.');
    cr_expect_eq(open_pickle(&p, NULL, 0, &f, &e), 0, "%s", e.msg);
    free(p.b);

    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, '}'), put8(&p, '.');
    cr_expect_eq(open_pickle(&p, NULL, 0, &f, &e), 0, "%s", e.msg);
    free(p.b);

    p = from_type(0); /* how newer torch saves tensor subclasses */
    cr_expect_eq(open_pickle(&p, NULL, 0, &f, &e), 0, "%s", e.msg);
    free(p.b);
    p = from_type(1);
    cr_expect_eq(open_pickle(&p, NULL, 0, &f, &e), ENG_UNSUPPORTED);
    cr_expect(strstr(e.msg, "_rebuild_from_type_v2"), "%s", e.msg);
    free(p.b);
}

Test(torch_bin, rejects_hostile_and_odd_pickles) {
    buf p = {0};
    put8(&p, 0x80), put8(&p, 2), p_glob(&p, "builtins", "eval"), p_str(&p, "1"), put8(&p, 0x85), put8(&p, 'R');
    put8(&p, '.');
    expect_reject(&p, ENG_UNSUPPORTED, "'builtins.eval'");
    free(p.b);

    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, 0x8c), put8(&p, 11), put(&p, "__builtin__", 11);
    put8(&p, 0x8c), put8(&p, 7), put(&p, "getattr", 7), put8(&p, 0x93), put8(&p, '.');
    expect_reject(&p, ENG_UNSUPPORTED, "'__builtin__.getattr'");
    free(p.b);

    /* calling a storage type, INST (a protocol-0 way to call anything), a list as the state dict */
    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2), p_glob(&p, "torch", "FloatStorage"), put8(&p, ')'), put8(&p, 'R'), put8(&p, '.');
    expect_reject(&p, ENG_UNSUPPORTED, "torch.FloatStorage cannot be called");
    free(p.b);
    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, '('), put(&p, "ios\nsystem\n", 11), put8(&p, '.');
    expect_reject(&p, ENG_UNSUPPORTED, "opcode 0x69 ('i')");
    free(p.b);
    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, ']'), put8(&p, '.');
    expect_reject(&p, ENG_FORMAT, "holds a list, not a state dict");
    free(p.b);

    /* a non-tensor value, a nested dict */
    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, '}'), p_str(&p, "a"), p_int(&p, 1), put8(&p, 's'), put8(&p, '.');
    expect_reject(&p, ENG_FORMAT, "'a' is a int, not a tensor");
    free(p.b);
    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2), put8(&p, '}'), p_str(&p, "a"), put8(&p, '}'), put8(&p, 's'), put8(&p, '.');
    expect_reject(&p, ENG_FORMAT, "'a' is a dict, not a tensor");
    free(p.b);

    /* machine errors: underflow, across a MARK, no STOP, unset memo, MARK nesting, huge memo index */
    const struct {
        const char *bytes;
        size_t n;
        eng_status code;
        const char *needle;
    } raw[] = {
#define RAW(s) s, sizeof(s) - 1
        {RAW("\x80\x02s."), ENG_FORMAT, "underflow"},
        {RAW("\x80\x02}(X\x01\0\0\0as."), ENG_FORMAT, "underflow"}, /* SETITEM reaching below a MARK */
        {RAW("\x80\x02" "b."), ENG_FORMAT, "underflow"},
        {RAW("\x80\x02}"), ENG_FORMAT, "without STOP"},
        {RAW("\x80\x02h\x05."), ENG_FORMAT, "unset index"},
        {RAW("\x80\x02}r\xff\xff\xff\x00."), ENG_LIMIT, "memo index"},
        {RAW("\x80\x02X\xff\xff\xff\xff."), ENG_FORMAT, "string runs past"},
        {RAW("\x80\x02\x8a\x09"), ENG_UNSUPPORTED, "wider than 64"},
        {RAW("\x80\x02t."), ENG_FORMAT, "needs a MARK"},
        {RAW("\x80\x02]Nb."), ENG_UNSUPPORTED, "BUILD on something"},
        {RAW("\x80\x02}cos\nsys"), ENG_FORMAT, "short line"},
        {RAW("\x80\x02}X\x01\0\0\0a(X\x07\0\0\0storagectorch\nFloatStorage\nK\x05\x87Qs."), ENG_FORMAT,
         "persistent id is not"},
#undef RAW
    };
    for (size_t i = 0; i < sizeof raw / sizeof *raw; i++) {
        buf q = {0};
        put(&q, raw[i].bytes, raw[i].n);
        expect_reject(&q, raw[i].code, raw[i].needle);
        free(q.b);
    }
    p = (buf){0};
    put8(&p, 0x80), put8(&p, 2);
    for (int i = 0; i < 100; i++) put8(&p, '(');
    put8(&p, '.');
    expect_reject(&p, ENG_LIMIT, "MARKs nested");
    free(p.b);
}

Test(torch_bin, rejects_bad_tensors_and_storages) {
    const int sh4[] = {4, 2}, st4[] = {2, 1}, shn[] = {2, 3}, stn[] = {1, 2}, sh1[] = {1, 3}, st1[] = {7, 1};
    struct {
        buf p;
        eng_status code;
        const char *needle;
    } c[] = {
        {one_tensor("FloatStorage", 8, 3, 2, SH23, ST23), ENG_FORMAT, "runs past the end of its storage"},
        {one_tensor("FloatStorage", 8, -1, 2, SH23, ST23), ENG_FORMAT, "runs past the end of its storage"},
        {one_tensor("FloatStorage", 9, 0, 2, SH23, ST23), ENG_FORMAT, "claims 9 F32 elements but its entry has 32"},
        {one_tensor("DoubleStorage", 5, 0, 2, SH23, ST23), ENG_FORMAT, "claims 5 F64 elements"},
        {one_tensor("FloatStorage", 8, 0, 2, shn, stn), ENG_UNSUPPORTED, "'w' is not contiguous"},
        {one_tensor("ComplexFloatStorage", 4, 0, 2, sh4, st4), ENG_UNSUPPORTED, "'torch.ComplexFloatStorage'"},
        {one_tensor("FloatStorage", 8, 0, 2, sh4, st4), 0, ""},
        {one_tensor("FloatStorage", 8, 5, 2, sh1, st1), 0, ""}, /* size-1 dim, any stride */
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        eng_st_file *f = NULL;
        eng_err e = {0};
        int rc = open_pickle(&c[i].p, NULL, 0, &f, &e);
        cr_expect_eq(rc, c[i].code, "case %zu: got %d: %s", i, rc, e.msg);
        cr_expect(strstr(e.msg, c[i].needle), "case %zu: message '%s' lacks '%s'", i, e.msg, c[i].needle);
        free(c[i].p.b);
    }

    /* a storage key with no entry, a big-endian archive, a deflated data.pkl */
    buf p = tensor_in("7", "FloatStorage", 8, 0, 2, SH23, ST23);
    eng_st_file *f = NULL;
    eng_err e = {0};
    cr_expect_eq(open_pickle(&p, NULL, 0, &f, &e), ENG_FORMAT);
    cr_expect(strstr(e.msg, "storage '7' has no zip entry 'archive/data/7'"), "%s", e.msg);
    free(p.b);

    p = one_tensor("FloatStorage", 8, 0, 2, SH23, ST23);
    zentry bo = {"archive/byteorder", "big", 3, 0};
    cr_expect_eq(open_pickle(&p, &bo, 1, &f, &e), ENG_UNSUPPORTED);
    cr_expect(strstr(e.msg, "byteorder"), "%s", e.msg);
    zentry lo = {"archive/byteorder", "little", 6, 0};
    cr_expect_eq(open_pickle(&p, &lo, 1, &f, &e), 0, "%s", e.msg);

    zentry es[] = {{"archive/data.pkl", p.b, p.n, 8}, {"archive/data/0", STORE0, sizeof STORE0, 0}};
    buf z = make_zip(es, 2);
    cr_expect_eq(eng__torchbin_open_buffer(z.b, z.n, "t.bin", &f, &e), ENG_UNSUPPORTED);
    cr_expect(strstr(e.msg, "'archive/data.pkl' is compressed"), "%s", e.msg);
    free(z.b);

    /* two archives in one zip, none at all, duplicate entries */
    zentry two[] = {{"a/data.pkl", p.b, p.n, 0}, {"b/data.pkl", p.b, p.n, 0}};
    z = make_zip(two, 2);
    cr_expect_eq(eng__torchbin_open_buffer(z.b, z.n, "t.bin", &f, &e), ENG_FORMAT);
    cr_expect(strstr(e.msg, "more than one"), "%s", e.msg);
    free(z.b);
    z = make_zip(two, 0);
    cr_expect_eq(eng__torchbin_open_buffer(z.b, z.n, "t.bin", &f, &e), ENG_FORMAT);
    cr_expect(strstr(e.msg, "without <folder>/data.pkl"), "%s", e.msg);
    free(z.b);
    zentry dup[] = {{"a/data.pkl", p.b, p.n, 0}, {"a/data.pkl", p.b, p.n, 0}};
    z = make_zip(dup, 2);
    cr_expect_eq(eng__torchbin_open_buffer(z.b, z.n, "t.bin", &f, &e), ENG_FORMAT);
    cr_expect(strstr(e.msg, "appears twice"), "%s", e.msg);
    free(z.b);
    free(p.b);
}

/* ---------------------------------------------------------------- hostile bytes */

/* Iterations per fuzz test; longer runs by hand with ADAPTERD_FUZZ_ITERS=1000000. */
static int fuzz_iters(int dflt) {
    const char *env = getenv("ADAPTERD_FUZZ_ITERS");
    return env && atoi(env) > 0 ? atoi(env) : dflt;
}

static volatile unsigned sink; /* keeps the reads of tensor data */

/* Opens buf; on success every tensor must lie inside it and be readable (ASan checks the reads). */
static int open_and_touch(const unsigned char *b, size_t n) {
    eng_st_file *f = NULL;
    eng_err e = {0};
    int rc = eng__torchbin_open_buffer(b, n, "m.bin", &f, &e);
    if (rc) {
        cr_assert_null(f);
        cr_assert(rc < 0 && e.code == rc && e.msg[0], "rc %d without a message", rc);
        return rc;
    }
    unsigned sum = 0;
    for (size_t i = 0; i < eng__st_count(f); i++) {
        const eng_st_tensor *t = eng__st_at(f, i);
        const unsigned char *d = t->data;
        cr_assert(d >= b && t->nbytes <= (size_t)(b + n - d), "tensor '%s' outside the buffer", t->name);
        cr_assert_eq(t->nbytes, (size_t)t->numel * eng__dtype_size(t->dtype));
        for (size_t k = 0; k < t->nbytes; k++) sum += d[k];
    }
    sink = sum;
    eng__st_close(f);
    return 0;
}

Test(torch_bin, every_truncation_fails_cleanly) {
    size_t n;
    unsigned char *b = slurp(FIX("views.bin"), &n);
    cr_assert(b);
    for (size_t len = 0; len < n; len++) {
        unsigned char *c = malloc(len ? len : 1); /* exact-size copy so ASan sees any overread */
        memcpy(c, b, len);
        cr_expect_neq(open_and_touch(c, len), 0, "truncated to %zu bytes yet accepted", len);
        free(c);
    }
    cr_expect_eq(open_and_touch(b, n), 0);
    free(b);
}

Test(torch_bin, byte_mutations_never_crash) {
    const char *files[] = {FIX("views.bin"), FIX("dtypes.bin"), FIX("zip64.bin")};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int ok = 0, failed = 0, iters = fuzz_iters(4000);
    for (size_t fi = 0; fi < 3; fi++) {
        size_t n;
        unsigned char *b = slurp(files[fi], &n);
        cr_assert(b);
        const unsigned char *pk = memmem(b + 30, n - 30, "\x80\x02", 2); /* start of data.pkl */
        cr_assert(pk);
        size_t pk_off = (size_t)(pk - b), pk_len = n - pk_off < 1000 ? n - pk_off : 1000;
        unsigned char *c = malloc(n);
        for (int it = 0; it < iters; it++) {
            memcpy(c, b, n);
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            int k = 1 + (int)(s % 4);
            for (int j = 0; j < k; j++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                size_t at = (s >> 8) % 2 ? pk_off + (s >> 16) % pk_len : (s >> 16) % n;
                unsigned v = (unsigned)(s >> 40);
                c[at] = (s >> 9) % 3 == 0 ? (unsigned char)(c[at] ^ (1u << (v % 8))) : (unsigned char)v;
            }
            if (open_and_touch(c, n) == 0)
                ok++;
            else
                failed++;
        }
        free(c);
        free(b);
    }
    cr_log_info("mutations: %d accepted, %d rejected", ok, failed);
    cr_expect(failed > 3 * iters / 4 && ok > iters / 16, "mutations should both fail and pass (%d ok, %d failed)", ok,
              failed);
}

Test(torch_bin, random_opcode_soup_never_crashes) {
    /* every opcode the reader knows, MARK-heavy, plus bytes that make small operands */
    static const unsigned char alphabet[] = "\x80\x95.(}])N\x88\x89t\x85\x86\x87X\x8c\x8dqr\x94hjJKM\x8aGc\x93RQsuaeb"
                                            "\x00\x01\x02\x05\n";
    uint64_t s = 0x2545f4914f6cdd1dull;
    int iters = fuzz_iters(3000);
    for (int it = 0; it < iters; it++) {
        buf p = {0};
        put8(&p, 0x80), put8(&p, 2);
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int n = 1 + (int)(s % 48);
        for (int i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            put8(&p, alphabet[(s >> 11) % (sizeof alphabet - 1)]);
        }
        put8(&p, '.');
        eng_st_file *f = NULL;
        eng_err e = {0};
        int rc = open_pickle(&p, NULL, 0, &f, &e);
        cr_assert(rc == 0 || (rc < 0 && e.msg[0]), "rc %d", rc);
        free(p.b);
    }
}
