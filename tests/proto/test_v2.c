/* test_v2.c - proto/v2.c: KServe v2 requests, typed answers and model metadata, with no server. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

Test(v2, v2_infer_request) {
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

/* v2: a second input tensor of one name was silently dropped; outputs that do not exist were ignored. */
Test(v2, v2_duplicate_inputs_and_unknown_outputs_are_invalid) {
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

static json_t *v2_out(json_t *d, const char *name) {
    json_t *o = json_object_get(d, "outputs");
    for (size_t i = 0; i < json_array_size(o); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(o, i), "name")), name)) return json_array_get(o, i);
    return NULL;
}

/* Typed v2 tensors: QA per input, tagging one row per entity over all inputs, multi-label's labels
 * [N, K] padded with "" (every label over 0.5, however many); "outputs" filters. */
Test(v2, v2_typed_outputs) {
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
