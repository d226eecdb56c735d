/* test_clients.c - proto/tei.c and proto/openai.c, and the error shapes of proto_error_encode_as,
 * with no server. Expected shapes are the other servers' documents: TEI's ErrorResponse
 * {"error", "error_type"}, OpenAI's {"error": {"message", "type", "param", "code"}}, KServe v2's
 * {"error": "<message>"}; base64 is RFC 4648's (test vectors below worked out by hand from the
 * float32 bit patterns). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

static json_t *load(char *s) {
    cr_assert(s);
    json_t *d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    free(s);
    return d;
}

Test(clients, error_shapes) {
    json_t *d = load(proto_error_encode_as(PROTO_DIALECT_TEI, "invalid_argument", 422, "bad", NULL));
    cr_expect_str_eq(json_string_value(json_object_get(d, "error")), "bad");
    cr_expect_str_eq(json_string_value(json_object_get(d, "error_type")), "Validation");
    json_decref(d);
    d = load(proto_error_encode_as(PROTO_DIALECT_TEI, "busy", 429, "full", NULL));
    cr_expect_str_eq(json_string_value(json_object_get(d, "error_type")), "Overloaded");
    json_decref(d);
    d = load(proto_error_encode_as(PROTO_DIALECT_TEI, "unavailable", 503, "x", NULL));
    cr_expect_str_eq(json_string_value(json_object_get(d, "error_type")), "Unhealthy");
    json_decref(d);
    d = load(proto_error_encode_as(PROTO_DIALECT_OPENAI, "not_found", 404, "no model", NULL));
    json_t *e = json_object_get(d, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "message")), "no model");
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), "not_found_error");
    cr_expect(json_is_null(json_object_get(e, "param")));
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")), "not_found");
    json_decref(d);
    d = load(proto_error_encode_as(PROTO_DIALECT_KSERVE, "not_found", 404, "no task", NULL));
    cr_expect_str_eq(json_string_value(json_object_get(d, "error")), "no task");
    cr_expect_eq(json_object_size(d), 1);
    json_decref(d);
    d = load(proto_error_encode_as(PROTO_DIALECT_ADAPTERD, "not_found", 404, "m", NULL));
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(d, "error"), "code")), "not_found");
    json_decref(d);
}

Test(clients, openai_request) {
    proto_predict_req r;
    eng_err e = {0};
    const char *b = "{\"input\":[\"a\",\"bc\"],\"model\":\"m\",\"encoding_format\":\"base64\",\"dimensions\":4,\"user\":\"u\"}";
    cr_assert_eq(proto_openai_embed_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.n_inputs, 2);
    cr_expect_eq(r.base64, 1);
    cr_expect_eq(r.dimensions, 4);
    cr_expect_eq(r.normalize, 1);
    cr_expect_eq(r.truncate, 0);
    cr_expect_str_eq(r.model, "m");
    proto_predict_free(&r);
    b = "{\"input\":[[1,2],[3]]}";
    cr_assert_eq(proto_openai_embed_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_expect(r.n_inputs == 2 && r.inputs[1].n_ids == 1 && r.inputs[1].ids[0] == 3);
    proto_predict_free(&r);
    b = "{\"input\":[5,6,7]}";
    cr_assert_eq(proto_openai_embed_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_expect(r.n_inputs == 1 && r.inputs[0].n_ids == 3);
    proto_predict_free(&r);
    const char *bad[][2] = {{"{\"model\":\"m\"}", "\"input\" is required"},
                            {"{\"input\":\"a\",\"encoding_format\":\"hex\"}", "encoding_format"},
                            {"{\"input\":\"a\",\"inputs\":\"b\"}", "unknown field \"inputs\""},
                            {"{\"input\":[{\"text\":\"a\",\"text_pair\":\"b\"}]}", "input[0]"},
                            {"{\"input\":[true]}", "input[0]"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(proto_openai_embed_parse(bad[i][0], strlen(bad[i][0]), NULL, &r, &e), ENG_INVALID_ARGUMENT, "%s", bad[i][0]);
        cr_expect(strstr(e.msg, bad[i][1]), "%s: '%s' lacks '%s'", bad[i][0], e.msg, bad[i][1]);
        cr_expect_null(r.inputs);
    }
}

Test(clients, openai_answer) {
    /* 1.0f = 00 00 80 3f, -2.0f = 00 00 00 c0 (little-endian): base64 of 00 00 80 3f 00 00 00 c0 */
    const float v[] = {1.0f, -2.0f, 0.5f, 0.25f};
    json_t *d = load(proto_openai_embed_encode(v, 2, 2, 1, "m", 7, NULL));
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(d, "data"), 0), "embedding")), "AACAPwAAAMA=");
    /* 0.5f = 00 00 00 3f, 0.25f = 00 00 80 3e */
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(d, "data"), 1), "embedding")), "AAAAPwAAgD4=");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(d, "usage"), "prompt_tokens")), 7);
    cr_expect_str_eq(json_string_value(json_object_get(d, "object")), "list");
    json_decref(d);
    d = load(proto_openai_embed_encode(v, 1, 4, 0, "m", 3, NULL));
    json_t *x = json_object_get(json_array_get(json_object_get(d, "data"), 0), "embedding");
    cr_expect_eq(json_array_size(x), 4);
    cr_expect_eq(json_real_value(json_array_get(x, 1)), -2.0);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(d, "data"), 0), "index")), 0);
    json_decref(d);
}

Test(clients, tei_prompts_and_info) {
    const char *cfg = "{\"prompts\": {\"query\": \"query: \", \"doc\": \"\"}, \"default_prompt_name\": \"doc\"}";
    size_t n = 0;
    eng_err e = {0};
    char *p = proto_tei_prompt(cfg, strlen(cfg), "query", &n, &e);
    cr_assert(p);
    cr_expect_str_eq(p, "query: ");
    cr_expect_eq(n, 7);
    free(p);
    p = proto_tei_prompt(cfg, strlen(cfg), NULL, &n, &e); /* the default */
    cr_assert(p);
    cr_expect_eq(n, 0);
    free(p);
    cr_expect_null(proto_tei_prompt(cfg, strlen(cfg), "nope", &n, &e));
    cr_expect_eq(e.code, ENG_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "nope"));
    cr_expect_null(proto_tei_prompt(NULL, 0, NULL, &n, &e));
    cr_expect_eq(e.code, 0, "no config and no name: no prompt, no error");
    proto_tei_info ti = {.model_id = "m", .dtype = "fp32", .pooling = "mean", .version = "0.1.0", .max_input_length = 512};
    json_t *d = load(proto_tei_info_encode(&ti, NULL));
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(d, "model_type"), "embedding"), "pooling")),
                     "mean");
    cr_expect_eq(json_integer_value(json_object_get(d, "max_input_length")), 512);
    cr_expect(json_is_null(json_object_get(d, "model_sha")));
    json_decref(d);
}

/* A message quoting a client's bytes that are not UTF-8 (a task name from a path, "%FF") is still an
 * error body: those bytes become '?', in every dialect (it was NULL, which the server answered 500). */
Test(clients, error_message_not_utf8) {
    const proto_dialect ds[] = {PROTO_DIALECT_ADAPTERD, PROTO_DIALECT_TEI, PROTO_DIALECT_OPENAI, PROTO_DIALECT_KSERVE};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        char *s = proto_error_encode_as(ds[i], "not_found", 404, "unknown task \"\xff\xc3\" (x)", NULL);
        cr_assert(s, "dialect %d: no body", (int)ds[i]);
        cr_expect(strstr(s, "unknown task \\\"??\\\" (x)"), "dialect %d: %s", (int)ds[i], s);
        json_decref(load(s));
    }
    char *s = proto_error_encode_as(PROTO_DIALECT_ADAPTERD, "not_found", 404, "caf\xc3\xa9", NULL);
    cr_expect(s && strstr(s, "caf\xc3\xa9"), "valid UTF-8 kept: %s", s ? s : "");
    free(s);
}
