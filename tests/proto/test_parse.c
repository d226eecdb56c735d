/* test_parse.c - proto/parse.c: the v1 request bodies (every input shape, every refusal), with no server. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

static int parse(const char *body, proto_predict_req *r, eng_err *e) {
    proto_limits lim = proto_default_limits();
    lim.max_inputs = 3;
    lim.max_tasks = 2;
    return proto_predict_parse(body, strlen(body), &lim, r, e);
}

Test(parse, inputs_string_list_and_pairs) {
    proto_predict_req r;
    eng_err e;
    cr_assert_eq(parse("{\"inputs\":\"hello\"}", &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.n_inputs, 1);
    cr_assert_eq(r.inputs[0].len, 5);
    cr_assert_null(r.inputs[0].pair);
    cr_assert_eq(r.n_tasks, 0);
    cr_assert_eq(r.skip, -1);
    cr_assert(r.ret_scores && !r.ret_logits && r.truncate);
    proto_predict_free(&r);
    cr_assert_eq(parse("{\"inputs\":[\"a\",{\"text\":\"q\",\"text_pair\":\"ctx\"}],\"tasks\":[\"x\",\"y\"],"
                       "\"skip\":{\"x\":2},\"return\":{\"logits\":true,\"scores\":false},\"truncate\":false}",
                       &r, &e),
                 0, "%s", e.msg);
    cr_assert_eq(r.n_inputs, 2);
    cr_assert_str_eq(r.inputs[1].pair, "ctx");
    cr_assert_eq(r.n_tasks, 2);
    cr_assert_eq(r.n_skips, 1);
    cr_assert_eq(r.skips[0].skip, 2);
    cr_assert(r.ret_logits && !r.ret_scores && !r.truncate);
    proto_predict_free(&r);
    cr_assert_eq(parse("{\"inputs\":\"a\",\"budget\":0.5}", &r, &e), 0);
    cr_assert_float_eq(r.budget, 0.5, 1e-12);
    proto_predict_free(&r);
}

Test(parse, refusals_name_the_field) {
    struct {
        const char *body;
        int code;
        const char *needle;
    } cases[] = {
        {"{", ENG_MALFORMED, "not valid JSON"},
        {"[]", ENG_MALFORMED, "JSON object"},
        {"{\"inputs\":\"a\",\"inputs\":\"b\"}", ENG_MALFORMED, "duplicate"},
        {"{}", ENG_INVALID_ARGUMENT, "\"inputs\" is required"},
        {"{\"inputs\":[]}", ENG_INVALID_ARGUMENT, "empty"},
        {"{\"inputs\":[true]}", ENG_INVALID_ARGUMENT, "inputs[0]"},
        {"{\"inputs\":[1,-2]}", ENG_INVALID_ARGUMENT, "inputs[1]"},
        {"{\"inputs\":[[1,2],[\"a\"]]}", ENG_INVALID_ARGUMENT, "inputs[1][0]"},
        {"{\"inputs\":[{\"ids\":[]}]}", ENG_INVALID_ARGUMENT, "inputs[0].ids is empty"},
        {"{\"inputs\":[{\"ids\":[1],\"type_ids\":[0,1]}]}", ENG_INVALID_ARGUMENT, "type_ids"},
        {"{\"inputs\":[{\"ids\":[1],\"text\":\"a\"}]}", ENG_INVALID_ARGUMENT, "unknown field \"text\""},
        {"{\"inputs\":[{\"txt\":\"a\"}]}", ENG_INVALID_ARGUMENT, "inputs[0].text"},
        {"{\"inputs\":[\"a\",\"b\",\"c\",\"d\"]}", ENG_LIMIT, "limit of 3"},
        {"{\"inputs\":\"a\",\"tasks\":[\"x\",\"y\",\"z\"]}", ENG_LIMIT, "limit of 2"},
        {"{\"inputs\":\"a\",\"tasks\":[\"x\",\"x\"]}", ENG_INVALID_ARGUMENT, "twice"},
        {"{\"inputs\":\"a\",\"tasks\":[]}", ENG_INVALID_ARGUMENT, "empty"},
        {"{\"inputs\":\"a\",\"skip\":-1}", ENG_INVALID_ARGUMENT, "skip"},
        {"{\"inputs\":\"a\",\"skip\":{\"x\":\"1\"}}", ENG_INVALID_ARGUMENT, "skip.x"},
        {"{\"inputs\":\"a\",\"budget\":1.5}", ENG_INVALID_ARGUMENT, "budget"},
        {"{\"inputs\":\"a\",\"budget\":0.5,\"skip\":1}", ENG_INVALID_ARGUMENT, "not both"},
        {"{\"inputs\":\"a\",\"return\":{\"logit\":true}}", ENG_INVALID_ARGUMENT, "logit"},
        {"{\"inputs\":\"a\",\"truncate\":1}", ENG_INVALID_ARGUMENT, "truncate"},
        {"{\"inputs\":\"a\",\"extra\":1}", ENG_INVALID_ARGUMENT, "extra"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proto_predict_req r;
        eng_err e = {0};
        int rc = parse(cases[i].body, &r, &e);
        cr_expect_eq(rc, cases[i].code, "%s: got %d (%s)", cases[i].body, rc, e.msg);
        cr_expect(strstr(e.msg, cases[i].needle), "%s: message '%s' lacks '%s'", cases[i].body, e.msg, cases[i].needle);
        cr_expect_null(r.inputs, "a refused request owns nothing");
    }
}

Test(parse, token_ids_as_inputs) {
    proto_predict_req r;
    eng_err e = {0};
    const char *b = "{\"inputs\":[\"text\",[101,7,102],{\"ids\":[5,6],\"type_ids\":[0,1]}]}";
    cr_assert_eq(proto_predict_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.n_inputs, 3);
    cr_expect_null(r.inputs[0].ids);
    cr_assert_eq(r.inputs[1].n_ids, 3);
    cr_expect_eq(r.inputs[1].ids[0], 101);
    cr_expect_eq(r.inputs[1].ids[2], 102);
    cr_expect_null(r.inputs[1].type_ids);
    cr_expect_null(r.inputs[1].text);
    cr_assert_eq(r.inputs[2].n_ids, 2);
    cr_expect_eq(r.inputs[2].type_ids[1], 1);
    proto_predict_free(&r);
    /* a flat array of integers is one input */
    b = "{\"inputs\":[101,102]}";
    cr_assert_eq(proto_predict_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.n_inputs, 1);
    cr_expect_eq(r.inputs[0].n_ids, 2);
    proto_predict_free(&r);
}

Test(parse, embed_and_tokenize_requests) {
    proto_predict_req r;
    eng_err e = {0};
    const char *b = "{\"inputs\":\"a\"}";
    cr_assert_eq(proto_embed_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.normalize, 1, "TEI's default");
    cr_expect_eq(r.truncate, 0, "TEI's default");
    cr_expect_eq(r.pooling, PROTO_POOL_DEFAULT);
    cr_expect_null(r.model);
    proto_predict_free(&r);
    b = "{\"inputs\":[[1,2]],\"normalize\":false,\"truncate\":true,\"pooling\":\"mean\",\"model\":\"m\","
        "\"truncation_direction\":\"Right\"}";
    cr_assert_eq(proto_embed_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.normalize, 0);
    cr_expect_eq(r.truncate, 1);
    cr_expect_eq(r.pooling, PROTO_POOL_MEAN);
    cr_expect_str_eq(r.model, "m");
    cr_expect_eq(r.truncate_left, 0);
    proto_predict_free(&r);
    /* TEI's fields: a prompt by name, the start cut, Matryoshka dimensions */
    b = "{\"inputs\":\"a\",\"truncation_direction\":\"left\",\"prompt_name\":\"query\",\"dimensions\":8}";
    cr_assert_eq(proto_embed_parse(b, strlen(b), NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.truncate_left, 1);
    cr_expect_str_eq(r.prompt_name, "query");
    cr_expect_eq(r.dimensions, 8);
    proto_limits lim = proto_default_limits();
    cr_assert_eq(proto_req_prefix_text(&r, 0, "query: ", 7, &lim, &e), 0, "%s", e.msg);
    cr_expect_eq(r.inputs[0].len, 8);
    cr_expect_eq(memcmp(r.inputs[0].text, "query: a", 8), 0);
    lim.max_text_bytes = 4;
    cr_expect_eq(proto_req_prefix_text(&r, 0, "query: ", 7, &lim, &e), ENG_LIMIT);
    const int32_t ids[] = {2, 7, 3}, types[] = {0, 0, 0};
    cr_assert_eq(proto_req_set_ids(&r, 0, ids, types, 3), 0);
    cr_expect(!r.inputs[0].text && r.inputs[0].n_ids == 3 && r.inputs[0].ids[1] == 7 && r.inputs[0].type_ids[2] == 0);
    proto_predict_free(&r);
    struct {
        int tokenize;
        const char *body, *needle;
    } bad[] = {{0, "{\"inputs\":\"a\",\"pooling\":\"max\"}", "pooling"},
               {0, "{\"inputs\":\"a\",\"truncation_direction\":\"up\"}", "truncation_direction"},
               {0, "{\"inputs\":\"a\",\"prompt_name\":\"\"}", "prompt_name"},
               {0, "{\"inputs\":\"a\",\"dimensions\":0}", "dimensions"},
               {0, "{\"inputs\":\"a\",\"dimensions\":1.5}", "dimensions"},
               {0, "{\"inputs\":\"a\",\"tasks\":[\"x\"]}", "unknown field \"tasks\""},
               {0, "{\"inputs\":\"a\",\"normalize\":1}", "normalize"},
               {1, "{\"inputs\":[[1,2]]}", "token ids are not accepted"},
               {1, "{\"inputs\":\"a\",\"add_special_tokens\":\"no\"}", "add_special_tokens"},
               {1, "{\"inputs\":\"a\",\"model\":3}", "model"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = bad[i].tokenize ? proto_tokenize_parse(bad[i].body, strlen(bad[i].body), NULL, &r, &e)
                                 : proto_embed_parse(bad[i].body, strlen(bad[i].body), NULL, &r, &e);
        cr_expect_eq(rc, ENG_INVALID_ARGUMENT, "%s", bad[i].body);
        cr_expect(strstr(e.msg, bad[i].needle), "%s: '%s' lacks '%s'", bad[i].body, e.msg, bad[i].needle);
        cr_expect_null(r.inputs);
    }
}

Test(parse, tasks_named_with_a_version) {
    proto_predict_req r;
    eng_err e;
    cr_assert_eq(parse("{\"inputs\":\"x\",\"tasks\":[{\"name\":\"a\",\"version\":\"2\"},\"b@7\"]}", &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.n_tasks, 2);
    cr_expect_str_eq(r.tasks[0], "a@2", "the object form reads as name@version");
    cr_expect_str_eq(r.tasks[1], "b@7");
    proto_predict_free(&r);
    cr_assert_eq(parse("{\"inputs\":\"x\",\"tasks\":[{\"name\":\"c\"}]}", &r, &e), 0, "%s", e.msg);
    cr_expect_str_eq(r.tasks[0], "c", "no version: the current one");
    proto_predict_free(&r);
    static const char *const bad[][2] = {
        {"{\"inputs\":\"x\",\"tasks\":[\"a\",\"a@2\"]}", "named twice"},
        {"{\"inputs\":\"x\",\"tasks\":[{\"name\":\"a\",\"version\":\"1\"},\"a@2\"]}", "named twice"},
        {"{\"inputs\":\"x\",\"tasks\":[{\"version\":\"2\"}]}", "needs a \"name\""},
        {"{\"inputs\":\"x\",\"tasks\":[{\"name\":\"a\",\"ver\":\"2\"}]}", "unknown field"},
        {"{\"inputs\":\"x\",\"tasks\":[{\"name\":\"a\",\"version\":2}]}", "must be a string"},
        {"{\"inputs\":\"x\",\"tasks\":[{\"name\":\"a@1\"}]}", "'@'"},
        {"{\"inputs\":\"x\",\"tasks\":[3]}", "must be a task name"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(parse(bad[i][0], &r, &e), ENG_INVALID_ARGUMENT, "%s", bad[i][0]);
        cr_expect(strstr(e.msg, bad[i][1]), "%s: %s", bad[i][0], e.msg);
    }
}

Test(parse, aggregation_is_parsed_in_v1_and_v2) {
    proto_predict_req r;
    eng_err e;
    cr_assert_eq(parse("{\"inputs\":\"a\"}", &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.aggregation, PROTO_AGG_TOKENS, "left out: the per-token list");
    proto_predict_free(&r);
    cr_assert_eq(parse("{\"inputs\":\"a\",\"aggregation\":\"first\"}", &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.aggregation, PROTO_AGG_FIRST);
    proto_predict_free(&r);
    cr_expect_eq(parse("{\"inputs\":\"a\",\"aggregation\":\"max\"}", &r, &e), ENG_INVALID_ARGUMENT);
    cr_expect_eq(parse("{\"inputs\":\"a\",\"aggregation\":1}", &r, &e), ENG_INVALID_ARGUMENT);
    const char *v2 = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"x\"]}],"
                     "\"parameters\":{\"aggregation\":\"simple\"},\"outputs\":[{\"name\":\"entity\"},{\"name\":\"input\"}]}";
    cr_assert_eq(proto_v2_infer_parse(v2, strlen(v2), "ner", NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.aggregation, PROTO_AGG_SIMPLE);
    cr_expect_eq(r.v2_outputs, PROTO_V2_OUT_ENTITY | PROTO_V2_OUT_INPUT);
    proto_predict_free(&r);
}
