/* test_safetensors_write.c - eng__st_write: what it writes reads back through eng__st_open unchanged,
 * with the layout the format's reference writer uses (header padded to 8 bytes, each tensor aligned
 * to its element size), and bad input is refused without leaving a file. The same writer's output
 * is also read by Python's reader (tools/reference/st.py) in tests/tools/adapterd/test_sparsify.c. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/safetensors_write.h"
#include "test_tmp.h"

static char dir[512];

static void make_dir(void) { cr_assert(mkdtemp(test_tmp_template(dir, sizeof dir, "stw"))); }
static void remove_dir(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(st_write, .init = make_dir, .fini = remove_dir);

Test(st_write, round_trip_through_the_reader) {
    float w[6] = {1.5f, -2, 0, 3.25f, -0.0f, 7};
    uint16_t h[3] = {0x3c00, 0xc000, 0x7bff}; /* F16 1, -2, 65504 */
    int64_t ids[2] = {-1, INT64_MAX};
    uint8_t flag = 1;
    eng_st_tensor in[] = {
        {.name = "layer.w", .dtype = ENG_DT_F32, .ndim = 2, .shape = {2, 3}, .data = w, .nbytes = sizeof w},
        {.name = "half", .dtype = ENG_DT_F16, .ndim = 1, .shape = {3}, .data = h, .nbytes = sizeof h},
        {.name = "ids \"quoted\"", .dtype = ENG_DT_I64, .ndim = 1, .shape = {2}, .data = ids, .nbytes = sizeof ids},
        {.name = "scalar", .dtype = ENG_DT_U8, .ndim = 0, .data = &flag, .nbytes = 1},
        {.name = "empty", .dtype = ENG_DT_F32, .ndim = 2, .shape = {0, 4}, .data = NULL, .nbytes = 0},
    };
    const char *meta[] = {"format", "pt", "note", "written by the test"};
    char path[600];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    eng_err e = {0};
    cr_assert_eq(eng__st_write(path, in, 5, meta, 2, &e), 0, "%s", e.msg);

    /* the layout: header length a multiple of 8, padded with spaces; data 8-aligned from the file start */
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    uint8_t len8[8];
    cr_assert_eq(fread(len8, 1, 8, f), 8);
    uint64_t hl = 0;
    for (int b = 0; b < 8; b++) hl |= (uint64_t)len8[b] << (8 * b);
    cr_assert_eq(hl % 8, 0, "header length %llu", (unsigned long long)hl);
    char *hdr = calloc(1, hl + 1);
    cr_assert(hdr);
    cr_assert_eq(fread(hdr, 1, hl, f), hl);
    fclose(f);
    cr_assert(hdr[0] == '{');
    for (size_t i = strlen(hdr); i > 0 && hdr[i - 1] != '}'; i--) cr_assert_eq(hdr[i - 1], ' ');
    free(hdr);

    eng_st_file *sf = NULL;
    cr_assert_eq(eng__st_open(path, &sf, &e), 0, "%s", e.msg);
    cr_assert_eq(eng__st_count(sf), 5);
    cr_assert_str_eq(eng__st_metadata(sf, "format"), "pt");
    cr_assert_str_eq(eng__st_metadata(sf, "note"), "written by the test");
    const uint8_t *base = NULL;
    for (size_t i = 0; i < 5; i++) {
        const eng_st_tensor *t = eng__st_find(sf, in[i].name);
        cr_assert(t, "%s missing", in[i].name);
        cr_assert_eq(t->dtype, in[i].dtype);
        cr_assert_eq(t->ndim, in[i].ndim);
        for (int d = 0; d < t->ndim; d++) cr_assert_eq(t->shape[d], in[i].shape[d]);
        cr_assert_eq(t->nbytes, in[i].nbytes);
        if (t->nbytes) cr_assert_eq(memcmp(t->data, in[i].data, t->nbytes), 0, "%s differs", t->name);
        if (!strcmp(t->name, "ids \"quoted\"")) base = t->data; /* I64 comes first: the data start */
    }
    /* largest element first: I64 at offset 0, then F32 (name order: empty, layer.w), F16, U8 */
    cr_assert_eq((const uint8_t *)eng__st_find(sf, "layer.w")->data - base, 16);
    cr_assert_eq((const uint8_t *)eng__st_find(sf, "half")->data - base, 40);
    cr_assert_eq((const uint8_t *)eng__st_find(sf, "scalar")->data - base, 46);
    eng__st_close(sf);

    /* rewriting the same tensors gives the same bytes (name order inside a size class) */
    char path2[600];
    snprintf(path2, sizeof path2, "%s/b.safetensors", dir);
    eng_st_tensor rev[5];
    for (int i = 0; i < 5; i++) rev[i] = in[4 - i];
    cr_assert_eq(eng__st_write(path2, rev, 5, meta, 2, &e), 0, "%s", e.msg);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, path2);
    cr_assert_eq(system(cmd), 0, "input order changed the file");
}

Test(st_write, no_tensors_is_a_valid_file) {
    char path[600];
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    eng_err e = {0};
    cr_assert_eq(eng__st_write(path, NULL, 0, NULL, 0, &e), 0, "%s", e.msg);
    eng_st_file *sf = NULL;
    cr_assert_eq(eng__st_open(path, &sf, &e), 0, "%s", e.msg);
    cr_assert_eq(eng__st_count(sf), 0);
    eng__st_close(sf);
}

static void refused(const eng_st_tensor *t, size_t n, const char *why) {
    char path[600], cmd[700];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    eng_err e = {0};
    cr_assert_eq(eng__st_write(path, t, n, NULL, 0, &e), ENG_INVALID_ARGUMENT, "%s accepted", why);
    cr_assert(e.msg[0]);
    cr_assert_eq(access(path, F_OK), -1, "%s left a file", why);
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    cr_assert_eq(system(cmd), 0, "%s left a temporary file", why);
}

Test(st_write, bad_input_is_refused) {
    float w[4] = {0};
    eng_st_tensor a = {.name = "w", .dtype = ENG_DT_F32, .ndim = 2, .shape = {2, 2}, .data = w, .nbytes = 16};
    eng_st_tensor two[2] = {a, a};
    two[1].dtype = ENG_DT_I32; /* same name, another size class */
    refused(two, 2, "a duplicate name");
    eng_st_tensor b = a;
    b.nbytes = 12;
    refused(&b, 1, "nbytes that disagree with the shape");
    b = a;
    b.name = "__metadata__";
    refused(&b, 1, "the name __metadata__");
    b = a;
    b.name = "";
    refused(&b, 1, "an empty name");
    b = a;
    b.dtype = ENG_DT_COUNT;
    refused(&b, 1, "an unknown dtype");
    b = a;
    b.shape[1] = -2;
    refused(&b, 1, "a negative dimension");
}

Test(st_write, unwritable_path_is_an_io_error) {
    float w = 1;
    eng_st_tensor a = {.name = "w", .dtype = ENG_DT_F32, .ndim = 1, .shape = {1}, .data = &w, .nbytes = 4};
    char path[600];
    snprintf(path, sizeof path, "%s/no/such/folder/x.safetensors", dir);
    eng_err e = {0};
    cr_assert_eq(eng__st_write(path, &a, 1, NULL, 0, &e), ENG_IO);
    cr_assert(strstr(e.msg, "cannot create"), "%s", e.msg);
}
