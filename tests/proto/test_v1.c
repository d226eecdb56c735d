/* test_v1.c - proto/v1.c: the v1 answers of a prediction (predict, embed), with no server. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

Test(v1, predict_response_shape) {
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
Test(v1, predict_timing_flags) {
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

/* The embed answer is TEI's bare array; every float survives the text round trip exactly. */
Test(v1, embed_answer_round_trips_floats) {
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

/* A head without label names answers LABEL_i in the label, the scores and the tags; a non-finite
 * score is null rather than a failed answer. */
Test(v1, unnamed_labels_and_non_finite_scores) {
    float scores[] = {0.25f, NAN}, logits[] = {-1, 1};
    proto_tag tags[] = {{0, 3, 0, 1, 0.9f}};
    proto_task_result res[2] = {
        {.task = "sent", .version = "1", .kind = PROTO_HEAD_CLASSIFICATION, .n_labels = 2, .scores = scores,
         .logits = logits, .n_rows = 1, .label = 1, .score = NAN},
        {.task = "ner", .version = "1", .kind = PROTO_HEAD_TAGGING, .n_labels = 2, .tags = tags, .n_tags = 1},
    };
    int tokens[] = {5};
    proto_predict_resp pr = {.request_id = "r", .model = "m", .n_inputs = 1, .n_tasks = 2, .results = res,
                             .tokens = tokens, .ret_scores = 1};
    size_t len;
    char *s = proto_predict_encode(&pr, &len);
    json_t *d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    json_t *tasks = json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks");
    json_t *t = json_object_get(tasks, "sent");
    cr_expect_str_eq(json_string_value(json_object_get(t, "label")), "LABEL_1");
    cr_expect(json_is_null(json_object_get(t, "score")), "%s", s);
    cr_expect_float_eq(json_number_value(json_object_get(json_object_get(t, "scores"), "LABEL_0")), 0.25, 1e-7);
    cr_expect(json_is_null(json_object_get(json_object_get(t, "scores"), "LABEL_1")), "%s", s);
    json_t *tag = json_array_get(json_object_get(json_object_get(tasks, "ner"), "tokens"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(tag, "label")), "LABEL_1");
    json_decref(d);
    free(s);
}

/* The command line's answer: each task object as the server's, plus kind and start_layer; no
 * version when the caller has none; the plan with its fusion views only when asked. */
Test(v1, local_predict_answer) {
    const char *labels[] = {"neg", "pos"};
    float scores[] = {0.25f, 0.75f}, logits[] = {-1, 1};
    proto_task_result res[1] = {{.task = "lora", .kind = PROTO_HEAD_CLASSIFICATION, .skip = 1, .n_labels = 2,
                                 .labels = labels, .scores = scores, .logits = logits, .n_rows = 1, .label = 1,
                                 .score = 0.75f}};
    const char *kinds[] = {"lora"};
    int starts[] = {1}, streams[] = {1, 2}, trunks[] = {1, 0}, rows[] = {4, 8};
    double gflops[] = {0.5, 0.25}, ms[] = {1, 2};
    const char *children[] = {"a", "b", "c"};
    uint8_t kept[] = {1, 0, 1};
    proto_fusion_view fv = {.task = "lora", .children = children, .kept = kept, .n = 3};
    proto_local_plan plan = {.tokens = 4, .threads = 2, .blas_core = "Haswell", .gflop = 0.75, .n_layers = 2,
                             .streams = streams, .trunks = trunks, .rows = rows, .gflops = gflops, .ms = ms,
                             .fusions = &fv, .n_fusions = 1};
    proto_local_predict p = {.n_tasks = 1, .results = res, .kinds = kinds, .start_layers = starts};
    size_t len;
    char *s = proto_local_predict_encode(&p, &len);
    cr_assert(s);
    cr_expect_str_eq(s, "{\"tasks\":{\"lora\":{\"head\":\"classification\",\"skip\":1,\"label\":\"pos\",\"score\":0.75,"
                        "\"scores\":{\"neg\":0.25,\"pos\":0.75},\"logits\":[-1.0,1.0],\"kind\":\"lora\",\"start_layer\":1}}}");
    free(s);
    p.plan = &plan;
    s = proto_local_predict_encode(&p, &len);
    json_t *d = json_loads(s, 0, NULL), *pl = json_object_get(d, "plan");
    cr_assert(pl, "%s", s);
    cr_expect_eq(json_array_size(json_object_get(pl, "layers")), 2);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(pl, "layers"), 1), "rows")), 8);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(json_object_get(pl, "fusion"), "lora"),
                                                                      "pruned"), 0)), "b");
    json_decref(d);
    free(s);
}
