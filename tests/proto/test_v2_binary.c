/* test_v2_binary.c - proto/v2.c's binary tensor data extension (Triton's
 * docs/protocol/extension_binary_data.md): requests whose tensors follow the JSON header as raw bytes,
 * answers with binary outputs. The expected bytes are written out by hand from the document (BYTES:
 * 4-byte little-endian length, then the bytes; FP32: IEEE-754 single, little-endian), not taken from
 * the encoder. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

/* A body: the JSON header, then n raw bytes. */
typedef struct {
    char b[1024];
    size_t len, header;
} body;

static body make(const char *json, const void *raw, size_t n) {
    body x;
    x.header = strlen(json);
    cr_assert_lt(x.header + n, sizeof x.b);
    memcpy(x.b, json, x.header);
    memcpy(x.b + x.header, raw, n);
    x.len = x.header + n;
    return x;
}

static int parse(const body *x, proto_predict_req *r, eng_err *e) {
    return proto_v2_infer_parse_binary(x->b, x->len, x->header, "t", NULL, r, e);
}

#define TEXT_BIN(shape, size) \
    "{\"inputs\":[{\"name\":\"text\",\"shape\":" shape ",\"datatype\":\"BYTES\",\"parameters\":{\"binary_data_size\":" size "}}]}"

/* "hello" and "abc" as two BYTES elements: 4 + 5 + 4 + 3 = 16 bytes. */
static const unsigned char HELLO_ABC[] = {5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o', 3, 0, 0, 0, 'a', 'b', 'c'};

Test(v2_binary, bytes_inputs_follow_the_json_header) {
    proto_predict_req r;
    eng_err e = {0};
    body x = make(TEXT_BIN("[2]", "16"), HELLO_ABC, sizeof HELLO_ABC);
    cr_assert_eq(parse(&x, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.n_inputs, 2);
    cr_expect_eq(r.inputs[0].len, 5);
    cr_expect_eq(memcmp(r.inputs[0].text, "hello", 5), 0);
    cr_expect_eq(r.inputs[1].len, 3);
    cr_expect_eq(memcmp(r.inputs[1].text, "abc", 3), 0);
    proto_predict_free(&r);

    /* [N, 1] and a JSON text_pair beside a binary text; the binary tensor needs not come first */
    const char *mixed = "{\"inputs\":[{\"name\":\"text_pair\",\"shape\":[2,1],\"datatype\":\"BYTES\",\"data\":[[\"p\"],[\"q\"]]},"
                        "{\"name\":\"text\",\"shape\":[2,1],\"datatype\":\"BYTES\",\"parameters\":{\"binary_data_size\":16}}]}";
    x = make(mixed, HELLO_ABC, sizeof HELLO_ABC);
    cr_assert_eq(parse(&x, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(memcmp(r.inputs[1].text, "abc", 3), 0);
    cr_expect_str_eq(r.inputs[1].pair, "q");
    proto_predict_free(&r);

    /* two binary tensors: their bytes in input order; an empty string is a length of 0 */
    static const unsigned char two[] = {1, 0, 0, 0, 'a', 0, 0, 0, 0};
    const char *both = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"parameters\":{\"binary_data_size\":5}},"
                       "{\"name\":\"text_pair\",\"shape\":[1],\"datatype\":\"BYTES\",\"parameters\":{\"binary_data_size\":4}}]}";
    x = make(both, two, sizeof two);
    cr_assert_eq(parse(&x, &r, &e), 0, "%s", e.msg);
    cr_expect_str_eq(r.inputs[0].text, "a");
    cr_expect_eq(r.inputs[0].pair_len, 0);
    proto_predict_free(&r);

    /* no binary data at all: the plain parse */
    const char *plain = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"z\"]}]}";
    x = make(plain, "", 0);
    cr_assert_eq(parse(&x, &r, &e), 0, "%s", e.msg);
    proto_predict_free(&r);
}

/* Every size that does not add up is a 400 (ENG_MALFORMED) naming what is wrong, never a read past
 * the body (ASan watches this test run). */
Test(v2_binary, sizes_that_do_not_add_up_are_malformed) {
    static const struct {
        const char *json;
        const unsigned char *raw;
        size_t n;
        int header_extra; /* added to the header length */
        int want;
        const char *says;
    } cases[] = {
        {TEXT_BIN("[2]", "16"), HELLO_ABC, 16, 17, ENG_MALFORMED, "past the body's end"},
        {TEXT_BIN("[2]", "17"), HELLO_ABC, 16, 0, ENG_MALFORMED, "runs past the body's end"},
        {TEXT_BIN("[1]", "9"), HELLO_ABC, 16, 0, ENG_MALFORMED, "add up to 9"},
        {TEXT_BIN("[3]", "16"), HELLO_ABC, 16, 0, ENG_MALFORMED, "holds 2 BYTES elements, its shape says 3"},
        {TEXT_BIN("[1]", "16"), HELLO_ABC, 16, 0, ENG_MALFORMED, "more than the 1"},
        {TEXT_BIN("[1]", "8"), HELLO_ABC, 8, 0, ENG_MALFORMED, "runs past the tensor"},
        {TEXT_BIN("[1]", "2"), HELLO_ABC, 2, 0, ENG_MALFORMED, "4-byte length"},
        {TEXT_BIN("[1]", "-1"), HELLO_ABC, 0, 0, ENG_MALFORMED, "non-negative"},
        {TEXT_BIN("[1]", "\"4\""), HELLO_ABC, 0, 0, ENG_MALFORMED, "non-negative"},
        {TEXT_BIN("[-1]", "9"), HELLO_ABC, 9, 0, ENG_MALFORMED, "shape[0]"},
        {TEXT_BIN("[1]", "5"), NULL, 0, 0, ENG_MALFORMED, "runs past the body's end"},
        {"{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"],"
         "\"parameters\":{\"binary_data_size\":9}}]}",
         HELLO_ABC, 9, 0, ENG_MALFORMED, "both"},
        /* bytes after the header that no input claims */
        {"{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}]}", HELLO_ABC, 4, 0, ENG_MALFORMED,
         "add up to 0"},
        /* a fixed-size datatype's bytes must be its shape's: FP32 [2] is 8 bytes */
        {"{\"inputs\":[{\"name\":\"text\",\"shape\":[2],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":7}}]}", HELLO_ABC,
         7, 0, ENG_MALFORMED, "2 FP32 elements of 4 bytes"},
        /* ... and when they agree, the datatype is still not what the model takes */
        {"{\"inputs\":[{\"name\":\"text\",\"shape\":[2],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":8}}]}", HELLO_ABC,
         8, 0, ENG_INVALID_ARGUMENT, "BYTES"},
        /* a shape whose element count overflows, and one whose byte count does (2^62 x 8 = 2^65, 0 mod 2^64) */
        {"{\"inputs\":[{\"name\":\"text\",\"shape\":[4611686018427387904,2],\"datatype\":\"FP64\","
         "\"parameters\":{\"binary_data_size\":0}}]}", HELLO_ABC, 0, 0, ENG_MALFORMED, "more elements"},
        {"{\"inputs\":[{\"name\":\"text\",\"shape\":[4611686018427387904],\"datatype\":\"FP64\","
         "\"parameters\":{\"binary_data_size\":0}}]}", HELLO_ABC, 0, 0, ENG_MALFORMED, "disagrees"},
        /* a header that is cut inside the JSON */
        {TEXT_BIN("[2]", "16"), HELLO_ABC, 16, -3, ENG_MALFORMED, "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        body x = make(cases[i].json, cases[i].raw ? cases[i].raw : (const unsigned char *)"", cases[i].n);
        x.header = (size_t)((long)x.header + cases[i].header_extra);
        if (cases[i].header_extra > 0) x.header = x.len + 1; /* one byte past the end */
        proto_predict_req r;
        eng_err e = {0};
        cr_expect_eq(parse(&x, &r, &e), cases[i].want, "case %zu: %s", i, e.msg);
        if (cases[i].says) cr_expect(strstr(e.msg, cases[i].says), "case %zu: %s", i, e.msg);
    }
}

Test(v2_binary, bytes_that_are_not_text_are_invalid) {
    static const unsigned char bad_utf8[] = {2, 0, 0, 0, 0xc3, 0x28};
    static const unsigned char nul[] = {3, 0, 0, 0, 'a', 0, 'b'};
    static const unsigned char utf8[] = {5, 0, 0, 0, 'c', 'a', 'f', 0xc3, 0xa9};
    proto_predict_req r;
    eng_err e = {0};
    body x = make(TEXT_BIN("[1]", "6"), bad_utf8, sizeof bad_utf8);
    cr_expect_eq(parse(&x, &r, &e), ENG_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "UTF-8"), "%s", e.msg);
    x = make(TEXT_BIN("[1]", "7"), nul, sizeof nul);
    cr_expect_eq(parse(&x, &r, &e), ENG_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "NUL"), "%s", e.msg);
    x = make(TEXT_BIN("[1]", "9"), utf8, sizeof utf8);
    cr_assert_eq(parse(&x, &r, &e), 0, "%s", e.msg);
    cr_expect_str_eq(r.inputs[0].text, "caf\xc3\xa9");
    proto_predict_free(&r);
}

/* "binary_data" on an output overrides the request's "binary_data_output". */
Test(v2_binary, which_outputs_come_back_binary) {
    proto_predict_req r;
    eng_err e = {0};
    const char *in = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}]";
    char b[512];
    snprintf(b, sizeof b, "%s,\"outputs\":[{\"name\":\"label\"},{\"name\":\"score\",\"parameters\":{\"binary_data\":true}}]}", in);
    cr_assert_eq(proto_v2_infer_parse(b, strlen(b), "t", NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.v2_binary, PROTO_V2_OUT_SCORE);
    proto_predict_free(&r);
    snprintf(b, sizeof b, "%s,\"parameters\":{\"binary_data_output\":true},\"outputs\":[{\"name\":\"label\",\"parameters\":"
                          "{\"binary_data\":false}},{\"name\":\"score\"}]}", in);
    cr_assert_eq(proto_v2_infer_parse(b, strlen(b), "t", NULL, &r, &e), 0, "%s", e.msg);
    cr_expect(r.v2_binary & PROTO_V2_OUT_SCORE);
    cr_expect(!(r.v2_binary & PROTO_V2_OUT_LABEL));
    proto_predict_free(&r);
    snprintf(b, sizeof b, "%s,\"parameters\":{\"binary_data_output\":true}}", in);
    cr_assert_eq(proto_v2_infer_parse(b, strlen(b), "t", NULL, &r, &e), 0, "%s", e.msg);
    cr_expect(r.v2_binary & PROTO_V2_OUT_LABEL && r.v2_binary & PROTO_V2_OUT_SCORES, "every output");
    proto_predict_free(&r);
    snprintf(b, sizeof b, "%s,\"parameters\":{\"binary_data_output\":1}}", in);
    cr_expect_eq(proto_v2_infer_parse(b, strlen(b), "t", NULL, &r, &e), ENG_INVALID_ARGUMENT);
    snprintf(b, sizeof b, "%s,\"outputs\":[{\"name\":\"label\",\"parameters\":{\"binary_data\":\"yes\"}}]}", in);
    cr_expect_eq(proto_v2_infer_parse(b, strlen(b), "t", NULL, &r, &e), ENG_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "outputs[0].parameters.binary_data"), "%s", e.msg);
}

/* A classification answer with label, score and scores binary: the JSON names their sizes and
 * carries no data; the bytes follow in output order. 0.75f is 0x3f400000, 0.25f 0x3e800000. */
Test(v2_binary, binary_outputs_follow_the_json) {
    const char *labels[] = {"neg", "pos"};
    float sc[] = {0.25f, 0.75f};
    proto_task_result t = {.task = "sst2", .version = "1", .kind = PROTO_HEAD_CLASSIFICATION, .n_labels = 2, .labels = labels,
                           .scores = sc, .label = 1, .score = 0.75f};
    proto_predict_resp pr = {.request_id = "r", .model = "m", .n_inputs = 1, .n_tasks = 1, .results = &t,
                             .v2_binary = PROTO_V2_OUT_LABEL | PROTO_V2_OUT_SCORE | PROTO_V2_OUT_SCORES};
    size_t len = 0, hl = 0;
    char *s = proto_v2_infer_encode_binary(&pr, &len, &hl);
    cr_assert(s);
    cr_assert_gt(hl, 0);
    static const unsigned char want[] = {3, 0, 0, 0, 'p', 'o', 's',                    /* label */
                                         0x00, 0x00, 0x40, 0x3f,                      /* score */
                                         0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x40, 0x3f}; /* scores */
    cr_assert_eq(len - hl, sizeof want, "%zu binary bytes", len - hl);
    cr_expect_eq(memcmp(s + hl, want, sizeof want), 0);
    json_error_t je;
    json_t *d = json_loadb(s, hl, 0, &je);
    cr_assert(d, "the first Inference-Header-Content-Length bytes are the JSON: %s", je.text);
    json_t *outs = json_object_get(d, "outputs");
    cr_assert_eq(json_array_size(outs), 3);
    static const long sizes[] = {7, 4, 8};
    for (size_t i = 0; i < 3; i++) {
        json_t *o = json_array_get(outs, i);
        cr_expect_null(json_object_get(o, "data"), "a binary output has no \"data\"");
        cr_expect_eq(json_integer_value(json_object_get(json_object_get(o, "parameters"), "binary_data_size")), sizes[i]);
    }
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(json_array_get(outs, 2), "shape"), 1)), 2, "scores [1, 2]");
    json_decref(d), free(s);

    /* only score binary: label and scores stay JSON, the bytes are score's alone */
    pr.v2_binary = PROTO_V2_OUT_SCORE;
    s = proto_v2_infer_encode_binary(&pr, &len, &hl);
    cr_assert_eq(len - hl, 4);
    cr_expect_eq(memcmp(s + hl, want + 7, 4), 0);
    d = json_loadb(s, hl, 0, &je);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(json_array_get(json_object_get(d, "outputs"), 0), "data"), 0)),
                     "pos");
    json_decref(d), free(s);

    /* none binary: JSON alone, no header length, the same text as the JSON encoder's */
    pr.v2_binary = 0;
    s = proto_v2_infer_encode_binary(&pr, &len, &hl);
    size_t jl = 0;
    char *j = proto_v2_infer_encode(&pr, &jl);
    cr_expect_eq(hl, 0);
    cr_expect_eq(len, jl);
    cr_expect_str_eq(s, j);
    free(s), free(j);

    /* INT32 as little-endian two's complement: QA's start -1 (no answer) is ff ff ff ff */
    proto_task_result qa = {.task = "qa", .version = "1", .kind = PROTO_HEAD_QA};
    pr = (proto_predict_resp){.request_id = "r", .model = "m", .n_inputs = 1, .n_tasks = 1, .results = &qa,
                              .v2_outputs = PROTO_V2_OUT_START, .v2_binary = PROTO_V2_OUT_START};
    s = proto_v2_infer_encode_binary(&pr, &len, &hl);
    static const unsigned char minus1[] = {0xff, 0xff, 0xff, 0xff};
    cr_assert_eq(len - hl, 4);
    cr_expect_eq(memcmp(s + hl, minus1, 4), 0);
    free(s);
}
