/* test_tasks_page.c - GET /v1/tasks a page at a time (server/routes.c, proto/registry.c): walking
 * the pages by their `next` cursor lists every served task once, in name order, as one large page
 * does; the unserved tasks come on the first page only; bad limits and cursors are 422; every answer
 * matches proto/openapi.yaml. The registry: the fixture model, the task cls copied under 9 names,
 * and one task whose only version is broken (unserved). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"

#define N_TASKS 10 /* cls + the 9 copies */

static json_t *get_page(const test_server *s, const char *query, long want) {
    char path[256];
    snprintf(path, sizeof path, "/v1/tasks%s", query);
    json_t *d = NULL;
    long st = ts_request(s, "GET", path, NULL, 0, NULL, NULL, &d);
    cr_assert_eq(st, want, "GET %s: %ld", path, st);
    cr_assert(d, "GET %s: no JSON", path);
    char msg[512];
    cr_assert_eq(ts_validate("GET", "/v1/tasks", want, d, msg, sizeof msg), 0, "GET %s: %s", path, msg);
    return d;
}

Test(tasks_page, pages_walk_every_task_once_in_order, .timeout = 120) {
    char *reg = ts_registry_ok("tasks-page");
    for (int i = 0; i < N_TASKS - 1; i++) ts_sh_ok("cp -r '%s/tasks/cls' '%s/tasks/t%d'", reg, reg, i);
    ts_sh_ok("mkdir -p '%s/tasks/broken/1' && echo '{' > '%s/tasks/broken/1/task.json'", reg, reg);
    const char *args[] = {"--registry", reg, NULL};
    test_server s;
    cr_assert_eq(ts_start(&s, args, NULL), 0, "server did not start on %s", reg);

    json_t *all = get_page(&s, "?limit=1000", 200);
    json_t *names = json_object_get(all, "tasks");
    cr_assert_eq(json_array_size(names), N_TASKS, "every served task on one large page");
    cr_expect(json_is_null(json_object_get(all, "next")), "one page: no next");
    cr_expect_eq(json_array_size(json_object_get(all, "unserved")), 1, "the broken task is unserved");
    for (size_t i = 1; i < N_TASKS; i++)
        cr_expect_lt(strcmp(json_string_value(json_object_get(json_array_get(names, i - 1), "name")),
                            json_string_value(json_object_get(json_array_get(names, i), "name"))),
                     0, "name order");

    for (int limit = 1; limit <= 4; limit++) {
        char query[256], after[128] = "";
        size_t seen = 0;
        for (int page = 0;; page++) {
            snprintf(query, sizeof query, "?limit=%d%s%s", limit, after[0] ? "&after=" : "", after);
            json_t *d = get_page(&s, query, 200);
            json_t *ts = json_object_get(d, "tasks"), *next = json_object_get(d, "next");
            cr_assert_leq(json_array_size(ts), (size_t)limit);
            cr_expect_eq(json_array_size(json_object_get(d, "unserved")), page == 0 ? 1u : 0u, "unserved on the first page only");
            for (size_t i = 0; i < json_array_size(ts); i++, seen++)
                cr_expect_str_eq(json_string_value(json_object_get(json_array_get(ts, i), "name")),
                                 json_string_value(json_object_get(json_array_get(names, seen), "name")),
                                 "limit %d page %d: task %zu", limit, page, i);
            if (json_is_null(next)) {
                json_decref(d);
                break;
            }
            cr_assert_eq(json_array_size(ts), (size_t)limit, "a page with a next is full");
            cr_expect_str_eq(json_string_value(next), json_string_value(json_object_get(json_array_get(ts, limit - 1), "name")));
            snprintf(after, sizeof after, "%s", json_string_value(next));
            json_decref(d);
            cr_assert_lt(page, N_TASKS, "the cursor moves on");
        }
        cr_expect_eq(seen, N_TASKS, "limit %d: every task once", limit);
    }

    json_t *d = get_page(&s, "", 200);
    cr_expect_eq(json_array_size(json_object_get(d, "tasks")), N_TASKS, "the default page (100) holds them all");
    json_decref(d);
    d = get_page(&s, "?after=zzz", 200);
    cr_expect_eq(json_array_size(json_object_get(d, "tasks")), 0, "after the last name: an empty page");
    cr_expect(json_is_null(json_object_get(d, "next")));
    json_decref(d);
    static const char *const bad[] = {"?limit=0", "?limit=1001", "?limit=abc", "?limit=5x", "?limit=", "?limit=-1", "?after="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = get_page(&s, bad[i], 422);
        const char *msg = json_string_value(json_object_get(json_object_get(d, "error"), "message"));
        cr_expect(msg && (strstr(msg, "\"limit\"") || strstr(msg, "\"after\"")), "%s: %s", bad[i], msg);
        json_decref(d);
    }
    json_decref(all);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf '%s'", reg);
    free(reg);
}
