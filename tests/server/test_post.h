/* test_post.h - a POST /v1/predict that must answer want, checked against the OpenAPI document,
 * for the server's integration tests (test_server.c, test_budget.c). */
#ifndef ADAPTERD_TESTS_SERVER_TEST_POST_H
#define ADAPTERD_TESTS_SERVER_TEST_POST_H

#include <criterion/criterion.h>
#include <jansson.h>

#include "http_client.h"

/* The answer's document (json_decref it); the test fails when the status is not want, the body is
 * not JSON, or the document does not match the route's schema for want. */
static inline json_t *post_ok(test_server *s, const char *body, long want) {
    ts_resp r;
    cr_assert_eq(ts_http(s, "POST", "/v1/predict", body, NULL, NULL, &r), 0);
    cr_assert_eq(r.status, want, "%s -> %ld: %s", body, r.status, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "not JSON: %s", r.body);
    char msg[512];
    cr_assert_eq(ts_validate("POST", "/v1/predict", want, d, msg, sizeof msg), 0, "%s\n%s", msg, r.body);
    ts_resp_free(&r);
    return d;
}

#endif
