/* test_safetensors.c - the validation rules of safetensors.h, one broken file per rule. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

/* Builds [u64 len][header padded to 8][data_len bytes of data] into a malloc'd buffer. */
static unsigned char *build(const char *header, size_t data_len, size_t *out_len) {
    size_t h = strlen(header), hp = (h + 7) / 8 * 8;
    unsigned char *b = calloc(1, 8 + hp + data_len + 1);
    cr_assert(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hp >> (8 * i));
    memcpy(b + 8, header, h);
    memset(b + 8 + h, ' ', hp - h);
    for (size_t i = 0; i < data_len; i++) b[8 + hp + i] = (unsigned char)i;
    *out_len = 8 + hp + data_len;
    return b;
}

static int open_hdr(const char *header, size_t data_len, eng_err *e) {
    size_t len;
    unsigned char *b = build(header, data_len, &len);
    eng_st_file *f = NULL;
    int rc = eng__st_open_buffer(b, len, "t", &f, e);
    eng__st_close(f);
    free(b);
    return rc;
}

Test(safetensors, valid_file_and_lookup) {
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                      "\"z\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[28,28]}}";
    size_t len;
    unsigned char *b = build(hdr, 28, &len);
    eng_st_file *f;
    eng_err e = {0};
    cr_assert_eq(eng__st_open_buffer(b, len, "t", &f, &e), 0, "%s", e.msg);
    cr_assert_eq(eng__st_count(f), 3);
    const eng_st_tensor *a = eng__st_find(f, "a");
    cr_assert(a);
    cr_assert_eq(a->ndim, 2);
    cr_assert_eq(a->shape[1], 3);
    cr_assert_eq(a->numel, 6);
    cr_assert_eq(a->dtype, ENG_DT_F32);
    cr_assert_eq((const unsigned char *)a->data - b, 8 + (long)((strlen(hdr) + 7) / 8 * 8));
    cr_assert_str_eq(eng__st_metadata(f, "format"), "pt");
    cr_assert_null(eng__st_find(f, "missing"));
    eng__st_close(f);
    free(b);
}

Test(safetensors, rejects_each_broken_rule) {
    struct {
        const char *hdr;
        size_t data;
        const char *needle;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, "shape x dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "after the last tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "beyond"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unsupported dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "JSON"},
        {"[1,2]", 0, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
         "overflows"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eng_err e = {0};
        int rc = open_hdr(cases[i].hdr, cases[i].data, &e);
        cr_assert_neq(rc, 0, "case %zu accepted", i);
        cr_assert(strstr(e.msg, cases[i].needle), "case %zu: message '%s' lacks '%s'", i, e.msg, cases[i].needle);
    }
}

Test(safetensors, rejects_truncated_headers) {
    unsigned char tiny[4] = {1, 0, 0, 0};
    eng_st_file *f;
    eng_err e = {0};
    cr_assert_eq(eng__st_open_buffer(tiny, sizeof tiny, "t", &f, &e), ENG_FORMAT);
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    cr_assert_eq(eng__st_open_buffer(big, sizeof big, "t", &f, &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "exceeds 100 MB"), "%s", e.msg);
    unsigned char past[16] = {64, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    cr_assert_eq(eng__st_open_buffer(past, sizeof past, "t", &f, &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "past the end"), "%s", e.msg);
    cr_assert_eq(eng__st_open("/nonexistent/x.safetensors", &f, &e), ENG_NOT_FOUND);
}

Test(safetensors, converts_half_types) {
    /* 1.0, -2.5, 65504 (max half), a subnormal (2^-24) */
    uint16_t h[4] = {0x3c00, 0xc100, 0x7bff, 0x0001};
    float out[4];
    cr_assert_eq(eng__convert_to_f32(ENG_DT_F16, h, 4, out), 0);
    cr_assert_float_eq(out[0], 1.0f, 0);
    cr_assert_float_eq(out[1], -2.5f, 0);
    cr_assert_float_eq(out[2], 65504.0f, 0);
    cr_assert_float_eq(out[3], 5.9604644775390625e-8f, 0);
    uint16_t bf[2] = {0x3f80, 0xc020}; /* 1.0, -2.5 */
    cr_assert_eq(eng__convert_to_f32(ENG_DT_BF16, bf, 2, out), 0);
    cr_assert_float_eq(out[0], 1.0f, 0);
    cr_assert_float_eq(out[1], -2.5f, 0);
    cr_assert_eq(eng__convert_to_f32(ENG_DT_I32, bf, 1, out), ENG_UNSUPPORTED);
}
