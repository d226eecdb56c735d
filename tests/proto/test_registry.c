/* test_registry.c - proto/registry.c: GET /v1/tasks' page (limit, after) and its answer with the
 * next cursor, GET /v1/tasks/{name}, /v1/models (OpenAI's list and adapterd's descriptions in one
 * object) and /v1/models/{id}, with no server. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

Test(registry, tasks_page_limits_and_cursor) {
    proto_tasks_page p;
    eng_err e = {0};
    cr_assert_eq(proto_tasks_page_parse(NULL, NULL, &p, &e), 0);
    cr_expect_eq(p.limit, PROTO_TASKS_LIMIT_DEFAULT);
    cr_expect_null(p.after);
    cr_expect(proto_tasks_page_after(&p, ""), "the first page takes every name");
    cr_assert_eq(proto_tasks_page_parse("1000", "ner", &p, &e), 0, "%s", e.msg);
    cr_expect_eq(p.limit, PROTO_TASKS_LIMIT_MAX);
    cr_expect(!proto_tasks_page_after(&p, "ner"), "the cursor itself is on the page before");
    cr_expect(!proto_tasks_page_after(&p, "cls"));
    cr_expect(proto_tasks_page_after(&p, "ner2"));
    cr_expect(proto_tasks_page_after(&p, "qa"));
    static const char *const bad[][2] = {{"0", NULL}, {"1001", NULL}, {"abc", NULL}, {"10x", NULL}, {"", NULL},
                                         {" 5", NULL}, {"-3", NULL}, {"99999999999999999999", NULL}, {NULL, ""}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(proto_tasks_page_parse(bad[i][0], bad[i][1], &p, &e), ENG_INVALID_ARGUMENT, "limit %s after %s",
                     bad[i][0] ? bad[i][0] : "-", bad[i][1] ? bad[i][1] : "-");
        cr_expect(strstr(e.msg, bad[i][0] ? "\"limit\"" : "\"after\""), "%s", e.msg);
    }
}

Test(registry, tasks_answer_carries_next) {
    const char *labels[] = {"neg", "pos"};
    proto_task_info t[2] = {{.name = "a", .version = "1", .model = "m", .kind = "lora", .head_known = 1, .n_labels = 2,
                             .labels = labels},
                            {.name = "b", .version = "2", .model = "m", .kind = "seq_bn", .head_known = 1, .n_labels = 2,
                             .labels = labels}};
    proto_version_info fv = {.version = "1", .state = "failed", .reason = "bad"};
    proto_unserved_task u = {.name = "c", .versions = &fv, .n_versions = 1};
    size_t len;
    char *s = proto_tasks_encode(t, 2, &u, 1, "b", &len);
    json_t *d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    cr_expect_str_eq(json_string_value(json_object_get(d, "next")), "b");
    cr_expect_eq(json_array_size(json_object_get(d, "tasks")), 2);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(d, "unserved"), 0), "name")), "c");
    json_decref(d), free(s);
    s = proto_tasks_encode(t, 1, NULL, 0, NULL, &len);
    d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    cr_expect(json_is_null(json_object_get(d, "next")), "the last page: null");
    cr_expect_eq(json_array_size(json_object_get(d, "unserved")), 0);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(d, "tasks"), 0), "adapters")), "lora");
    json_decref(d), free(s);
}

Test(registry, models_answer_in_openai_and_adapterd_shape) {
    const char *served[] = {"text-embedding-ada-002", "ada"};
    proto_model_info m[2] = {{.name = "bert-tiny", .model_type = "bert", .hidden = 64, .layers = 2, .max_tokens = 64, .vocab = 1024,
                              .served = served, .n_served = 2, .created = 1700000000},
                             {.name = "plain", .model_type = "bert", .max_tokens = 128, .created = 1700000000}};
    cr_expect_str_eq(proto_model_id(&m[0]), "text-embedding-ada-002", "the first served name");
    cr_expect_str_eq(proto_model_id(&m[1]), "plain", "no served name: the registry's");
    size_t len;
    char *s = proto_models_encode(m, 2, &len);
    json_t *d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    cr_expect_str_eq(json_string_value(json_object_get(d, "object")), "list");
    json_t *data = json_object_get(d, "data"), *models = json_object_get(d, "models");
    cr_assert_eq(json_array_size(data), 2, "%s", s);
    const char *ids[] = {"text-embedding-ada-002", "plain"}, *roots[] = {"bert-tiny", "plain"};
    for (size_t i = 0; i < 2; i++) {
        json_t *o = json_array_get(data, i);
        cr_expect_str_eq(json_string_value(json_object_get(o, "id")), ids[i]);
        cr_expect_str_eq(json_string_value(json_object_get(o, "object")), "model");
        cr_expect_str_eq(json_string_value(json_object_get(o, "owned_by")), "adapterd");
        cr_expect_eq(json_integer_value(json_object_get(o, "created")), 1700000000);
        cr_expect_str_eq(json_string_value(json_object_get(o, "root")), roots[i]);
        cr_expect_eq(json_integer_value(json_object_get(o, "max_model_len")), m[i].max_tokens);
    }
    /* adapterd's own list keeps its fields, with the served names beside them */
    cr_assert_eq(json_array_size(models), 2);
    json_t *a = json_array_get(models, 0);
    cr_expect_str_eq(json_string_value(json_object_get(a, "name")), "bert-tiny");
    cr_expect_eq(json_integer_value(json_object_get(a, "hidden")), 64);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(a, "served_names"), 1)), "ada");
    cr_expect_eq(json_array_size(json_object_get(json_array_get(models, 1), "served_names")), 0);
    json_decref(d), free(s);
    s = proto_model_object_encode(&m[0], "ada", &len);
    d = json_loads(s, 0, NULL);
    cr_assert(d, "%s", s);
    cr_expect_str_eq(json_string_value(json_object_get(d, "id")), "ada", "retrieve answers the name asked for");
    cr_expect_str_eq(json_string_value(json_object_get(d, "root")), "bert-tiny");
    json_decref(d), free(s);
}
