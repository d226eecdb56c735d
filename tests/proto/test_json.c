/* test_json.c - proto/json.c: the builders every answer shares, the error answer, and the OpenAPI document. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

Test(json, error_and_openapi) {
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

/* Hugging Face's default label names where a head has none: the whole array missing, or one entry. */
Test(json, label_names_fall_back_to_label_i) {
    char buf[PROTO_LABEL_BUF];
    const char *named[] = {"neg", NULL};
    cr_expect_str_eq(proto_label_name(named, 0, buf, sizeof buf), "neg");
    cr_expect_str_eq(proto_label_name(named, 1, buf, sizeof buf), "LABEL_1");
    cr_expect_str_eq(proto_label_name(NULL, 12, buf, sizeof buf), "LABEL_12");
}
