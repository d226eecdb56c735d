/* test_openapi.c - proto/openapi.yaml against the server's own tables: every API error code of the
 * one error table (engine/status.h) is in the document's Error.code enum and nothing else is; every
 * HTTP status the table maps to (server/http_status.c) is a documented response somewhere; every
 * route of the route table (server/route.h) is a path (and method) of the document. A code or route
 * added to the server without documenting it fails here. Reads the generated openapi.json. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "http_status.h"
#include "route.h"

static json_t *doc(void) {
    json_error_t je;
    json_t *d = json_load_file(ADAPTERD_BINARY_DIR "/proto/openapi.json", 0, &je);
    cr_assert(d, "openapi.json: %s", je.text);
    return d;
}

static const eng_status all_codes[] = {
#define ALL_CODES(name, value, code, desc) ENG_##name,
    ENG_STATUS_LIST(ALL_CODES)
#undef ALL_CODES
};
#define N_CODES (sizeof all_codes / sizeof all_codes[0])

Test(openapi, error_codes_are_exactly_the_tables) {
    json_t *d = doc();
    json_t *en = json_object_get(
        json_object_get(json_object_get(json_object_get(json_object_get(json_object_get(json_object_get(d, "components"), "schemas"), "Error"),
                                                        "properties"),
                                        "error"),
                        "properties"),
        "code");
    json_t *vals = json_object_get(en, "enum");
    cr_assert(json_is_array(vals), "Error.error.code has no enum");
    for (size_t i = 0; i < N_CODES; i++) {
        if (all_codes[i] == ENG_OK) continue;
        const char *c = eng_status_name(all_codes[i]);
        int found = 0;
        for (size_t k = 0; k < json_array_size(vals); k++) found |= !strcmp(json_string_value(json_array_get(vals, k)), c);
        cr_expect(found, "error code \"%s\" (HTTP %u) is not in the document", c, srv__http_status(all_codes[i]));
    }
    for (size_t k = 0; k < json_array_size(vals); k++) {
        const char *c = json_string_value(json_array_get(vals, k));
        int found = 0;
        for (size_t i = 0; i < N_CODES; i++) found |= all_codes[i] != ENG_OK && !strcmp(eng_status_name(all_codes[i]), c);
        cr_expect(found, "the document lists \"%s\", which the server never sends", c);
    }
    json_decref(d);
}

Test(openapi, every_status_the_table_maps_to_is_documented) {
    json_t *d = doc(), *paths = json_object_get(d, "paths"), *item, *op;
    const char *p, *m;
    for (size_t i = 0; i < N_CODES; i++) {
        /* 405 answers a method a path has no operation for: OpenAPI has no place for it, so the
         * document says it in info.description (checked below) */
        if (all_codes[i] == ENG_METHOD_NOT_ALLOWED) continue;
        char want[8];
        snprintf(want, sizeof want, "%u", srv__http_status(all_codes[i]));
        int found = 0;
        json_object_foreach(paths, p, item) {
            json_object_foreach(item, m, op) found |= json_object_get(json_object_get(op, "responses"), want) != NULL;
        }
        cr_expect(found, "HTTP %s (%s) is in no operation's responses", want, eng_status_name(all_codes[i]));
    }
    cr_expect(strstr(json_string_value(json_object_get(json_object_get(d, "info"), "description")), "405 (method_not_allowed)"));
    json_decref(d);
}

Test(openapi, every_route_is_documented) {
    static const char *const routes[] = {
#define ROUTE_PATH(name, path) path,
        SRV_ROUTE_LIST(ROUTE_PATH)
#undef ROUTE_PATH
    };
    json_t *d = doc(), *paths = json_object_get(d, "paths");
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const char *r = routes[i], *method = NULL;
        if (!strcmp(r, "other")) continue;
        if (!strncmp(r, "DELETE ", 7)) r += 7, method = "delete";
        json_t *item = json_object_get(paths, r);
        cr_expect(item, "route %s is not a path of the document", routes[i]);
        if (item && method) cr_expect(json_object_get(item, method), "route %s has no %s operation", routes[i], method);
    }
    json_decref(d);
}
