/* test_codec.c - proto/codec.c: request parsing (every input shape, every refusal) and response
 * encoding, with no server. */
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

Test(codec, inputs_string_list_and_pairs) {
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

Test(codec, refusals_name_the_field) {
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

Test(codec, v2_infer_request) {
    proto_predict_req r;
    eng_err e;
    const char *b = "{\"inputs\":[{\"name\":\"text\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"a\",\"b\"]},"
                    "{\"name\":\"text_pair\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"c\",\"d\"]}],"
                    "\"parameters\":{\"skip\":1}}";
    cr_assert_eq(proto_v2_infer_parse(b, strlen(b), "sst2", NULL, &r, &e), 0, "%s", e.msg);
    cr_assert_eq(r.n_inputs, 2);
    cr_assert_str_eq(r.inputs[1].pair, "d");
    cr_assert_str_eq(r.tasks[0], "sst2");
    cr_assert_eq(r.skip, 1);
    proto_predict_free(&r);
    const char *bad = "{\"inputs\":[{\"name\":\"text\",\"shape\":[3],\"datatype\":\"BYTES\",\"data\":[\"a\"]}]}";
    cr_assert_eq(proto_v2_infer_parse(bad, strlen(bad), "t", NULL, &r, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "shape"));
}

Test(codec, predict_response_shape) {
    const char *labels[] = {"neg", "pos"};
    float scores[] = {0.25f, 0.75f}, logits[] = {-1, 1};
    proto_tag tags[] = {{0, 3, 0, 1, 0.9f}};
    proto_task_result res[2] = {
        {.task = "sent", .version = "3", .kind = PROTO_HEAD_CLASSIFICATION, .skip = 1, .n_labels = 2, .labels = labels,
         .scores = scores, .logits = logits, .n_rows = 1, .label = 1, .score = 0.75f},
        {.task = "ner", .version = "1", .kind = PROTO_HEAD_TAGGING, .n_labels = 2, .labels = labels, .tags = tags, .n_tags = 1},
    };
    int tokens[] = {5}, trunc[] = {0};
    proto_predict_resp pr = {.request_id = "r1", .model = "m", .n_inputs = 1, .n_tasks = 2, .results = res,
                             .tokens = tokens, .truncated = trunc, .ret_scores = 1, .batch_requests = 1};
    size_t len;
    char *s = proto_predict_encode(&pr, &len);
    cr_assert(s);
    cr_assert_eq(strlen(s), len);
    json_t *d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "sent");
    cr_assert_str_eq(json_string_value(json_object_get(t, "label")), "pos");
    cr_assert_eq(json_integer_value(json_object_get(t, "skip")), 1);
    cr_assert_float_eq(json_number_value(json_object_get(json_object_get(t, "scores"), "neg")), 0.25, 1e-7);
    cr_assert_eq(json_array_size(json_object_get(t, "logits")), 2);
    json_t *n = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "ner");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(n, "tokens"), 0), "label")), "pos");
    json_decref(d);
    free(s);
    s = proto_v2_infer_encode(&(proto_predict_resp){.request_id = "r", .model = "m", .n_inputs = 1, .n_tasks = 1,
                                                     .results = res, .tokens = tokens, .ret_scores = 1},
                              &len);
    cr_assert(s);
    cr_assert(strstr(s, "\"model_name\":\"sent\""), "%s", s);
    free(s);
}

/* timing: latency_exceeded is inference_ms > latency_target_ms, present only with a target; load_ms only
 * when a load happened. */
Test(codec, predict_timing_flags) {
    proto_task_result res[1] = {{.task = "sent", .version = "1", .kind = PROTO_HEAD_REGRESSION, .n_rows = 1}};
    int tokens[] = {5};
    struct {
        double target, inference, load;
        int has_flag, exceeded, has_load;
    } cases[] = {{-1, 9, 0, 0, 0, 0}, {10, 9, 0, 1, 0, 0}, {10, 10, 0, 1, 0, 0}, {10, 10.5, 3.5, 1, 1, 1}, {-1, 9, 2, 0, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        proto_predict_resp pr = {.request_id = "r", .model = "m", .n_inputs = 1, .n_tasks = 1, .results = res,
                                 .tokens = tokens, .inference_ms = cases[c].inference, .total_ms = 20,
                                 .latency_target_ms = cases[c].target, .predicted_ms = cases[c].target > 0 ? 8 : -1,
                                 .load_ms = cases[c].load};
        size_t len;
        char *s = proto_predict_encode(&pr, &len);
        cr_assert(s);
        json_t *d = json_loads(s, 0, NULL), *tm = json_object_get(d, "timing"), *x = json_object_get(tm, "latency_exceeded");
        cr_assert_eq(x != NULL, cases[c].has_flag, "case %zu: %s", c, s);
        if (x) cr_assert_eq(json_is_true(x), cases[c].exceeded, "case %zu: %s", c, s);
        cr_assert_eq(json_object_get(tm, "load_ms") != NULL, cases[c].has_load, "case %zu: %s", c, s);
        if (cases[c].has_load) cr_assert_float_eq(json_number_value(json_object_get(tm, "load_ms")), cases[c].load, 1e-9);
        json_decref(d);
        free(s);
    }
}

Test(codec, error_and_openapi) {
    size_t len;
    char *s = proto_error_encode("busy", "queue \"full\"", &len);
    cr_assert_str_eq(s, "{\"error\":{\"code\":\"busy\",\"message\":\"queue \\\"full\\\"\"}}");
    free(s);
    const char *doc = proto_openapi_json(&len);
    json_t *d = json_loadb(doc, len, 0, NULL);
    cr_assert(d, "openapi.json parses");
    cr_assert_str_eq(json_string_value(json_object_get(d, "openapi")), "3.1.0");
    cr_assert(json_object_get(json_object_get(d, "paths"), "/v1/predict"));
    json_decref(d);
}

Test(codec, token_ids_as_inputs) {
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

Test(codec, embed_and_tokenize_requests) {
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
    proto_predict_free(&r);
    struct {
        int tokenize;
        const char *body, *needle;
    } bad[] = {{0, "{\"inputs\":\"a\",\"pooling\":\"max\"}", "pooling"},
               {0, "{\"inputs\":\"a\",\"truncation_direction\":\"left\"}", "truncation_direction"},
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

/* The embed answer is TEI's bare array; every float survives the text round trip exactly. */
Test(codec, embed_answer_round_trips_floats) {
    const float v[] = {0.1f, -2.5e-8f, 3.14159274f, 1e30f, -0.0f, 7.0f};
    size_t len = 0;
    char *t = proto_embed_encode(v, 3, NULL, 2, &len);
    cr_assert(t);
    cr_assert_eq(strlen(t), len);
    json_t *d = json_loads(t, 0, NULL);
    cr_assert(json_is_array(d) && json_array_size(d) == 3, "%s", t);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++)
            cr_expect_eq((float)json_number_value(json_array_get(json_array_get(d, i), k)), v[2 * i + k], "%s", t);
    json_decref(d);
    free(t);
    const int rows[] = {1, 2};
    t = proto_embed_encode(v, 2, rows, 2, &len);
    d = json_loads(t, 0, NULL);
    cr_assert(d, "%s", t);
    cr_expect_eq(json_array_size(json_array_get(d, 0)), 1);
    cr_expect_eq(json_array_size(json_array_get(d, 1)), 2);
    cr_expect_eq((float)json_number_value(json_array_get(json_array_get(json_array_get(d, 1), 1), 1)), v[5]);
    json_decref(d);
    free(t);
}

/* v2: a second input tensor of one name was silently dropped; outputs that do not exist were ignored. */
Test(codec, v2_duplicate_inputs_and_unknown_outputs_are_invalid) {
    proto_predict_req r;
    eng_err e;
    const char *dup = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]},"
                      "{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"b\"]}]}";
    cr_expect_eq(proto_v2_infer_parse(dup, strlen(dup), "t", NULL, &r, &e), ENG_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "second tensor named \"text\""), "%s", e.msg);
    const char *unknown = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}],"
                          "\"outputs\":[{\"name\":\"label\"},{\"name\":\"logits\"}]}";
    cr_expect_eq(proto_v2_infer_parse(unknown, strlen(unknown), "t", NULL, &r, &e), ENG_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "unknown output \"logits\""), "%s", e.msg);
    const char *twice = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}],"
                        "\"outputs\":[{\"name\":\"score\"},{\"name\":\"score\"}]}";
    cr_expect_eq(proto_v2_infer_parse(twice, strlen(twice), "t", NULL, &r, &e), ENG_INVALID_ARGUMENT);
    const char *ok = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}],"
                     "\"outputs\":[{\"name\":\"label\"},{\"name\":\"scores\"}]}";
    cr_assert_eq(proto_v2_infer_parse(ok, strlen(ok), "t", NULL, &r, &e), 0, "%s", e.msg);
    cr_expect_eq(r.v2_outputs, PROTO_V2_OUT_LABEL | PROTO_V2_OUT_SCORES);
    proto_predict_free(&r);
}

Test(codec, tasks_named_with_a_version) {
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

Test(codec, aggregation_is_parsed_in_v1_and_v2) {
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

static json_t *v2_out(json_t *d, const char *name) {
    json_t *o = json_object_get(d, "outputs");
    for (size_t i = 0; i < json_array_size(o); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(o, i), "name")), name)) return json_array_get(o, i);
    return NULL;
}

/* Typed v2 tensors: QA per input, tagging one row per entity over all inputs, multi-label's labels
 * [N, K] padded with "" (every label over 0.5, however many); "outputs" filters. */
Test(codec, v2_typed_outputs) {
    const char *ctx = "john is in paris";
    proto_task_result qa[2] = {{.task = "qa", .version = "1", .kind = PROTO_HEAD_QA, .has_answer = 1, .ans_start = 11,
                                .ans_end = 16, .ans_score = 0.5f, .ans_text = ctx + 11, .ans_text_len = 5},
                               {.task = "qa", .version = "1", .kind = PROTO_HEAD_QA}};
    proto_predict_resp pr = {.request_id = "r", .model = "m", .n_inputs = 2, .n_tasks = 1, .results = qa};
    size_t len;
    char *s = proto_v2_infer_encode(&pr, &len);
    json_t *d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    cr_expect_eq(json_array_size(json_object_get(d, "outputs")), 4);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(v2_out(d, "answer"), "data"), 0)), "paris");
    cr_expect_str_eq(json_string_value(json_object_get(v2_out(d, "start"), "datatype")), "INT32");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(v2_out(d, "end"), "data"), 0)), 16);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(v2_out(d, "start"), "data"), 1)), -1, "no answer: -1");
    json_decref(d), free(s);

    proto_entity e0[] = {{.name = "PER", .score = 0.9f, .start = 0, .end = 4, .word = ctx, .word_len = 4},
                         {.name = "LOC", .score = 0.8f, .start = 11, .end = 16, .word = ctx + 11, .word_len = 5}};
    proto_entity e1[] = {{.name = "LOC", .score = 0.7f, .start = 0, .end = 5, .word = "paris", .word_len = 5}};
    proto_task_result tg[2] = {
        {.task = "ner", .version = "1", .kind = PROTO_HEAD_TAGGING, .aggregation = PROTO_AGG_SIMPLE, .entities = e0, .n_entities = 2},
        {.task = "ner", .version = "1", .kind = PROTO_HEAD_TAGGING, .aggregation = PROTO_AGG_SIMPLE, .entities = e1, .n_entities = 1}};
    pr.results = tg;
    s = proto_v2_infer_encode(&pr, &len);
    d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    json_t *in = v2_out(d, "input"), *w = v2_out(d, "word");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(in, "shape"), 0)), 3, "M = 3 entities");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(in, "data"), 2)), 1);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(w, "data"), 1)), "paris");
    json_decref(d), free(s);
    pr.v2_outputs = PROTO_V2_OUT_ENTITY;
    s = proto_v2_infer_encode(&pr, &len);
    d = json_loads(s, 0, NULL);
    cr_expect_eq(json_array_size(json_object_get(d, "outputs")), 1, "\"outputs\" filters: %s", s);
    json_decref(d), free(s);

    const char *labels[] = {"a", "b", "c"};
    float sc[] = {0.9f, 0.2f, 0.6f};
    proto_task_result ml = {.task = "ml", .version = "1", .kind = PROTO_HEAD_MULTILABEL, .n_labels = 3, .labels = labels, .scores = sc};
    pr = (proto_predict_resp){.request_id = "r", .model = "m", .n_inputs = 1, .n_tasks = 1, .results = &ml};
    s = proto_v2_infer_encode(&pr, &len);
    d = json_loads(s, 0, NULL);
    json_t *lb = v2_out(d, "labels");
    cr_assert(lb, "%s", s);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(lb, "shape"), 1)), 3);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(lb, "data"), 0)), "a");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(lb, "data"), 1)), "c");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(lb, "data"), 2)), "");
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(v2_out(d, "label"), "data"), 0)), "a", "the top label");
    json_decref(d), free(s);

    proto_task_info ti = {.name = "ml", .version = "1", .head = PROTO_HEAD_MULTILABEL, .head_known = 1, .n_labels = 3};
    s = proto_v2_model_encode(&ti, &len);
    d = json_loads(s, 0, NULL);
    json_t *mo = json_object_get(d, "outputs");
    cr_assert_eq(json_array_size(mo), 4, "%s", s);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(mo, 3), "name")), "labels");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(json_array_get(mo, 3), "shape"), 1)), 3);
    json_decref(d), free(s);
}
