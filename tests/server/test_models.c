/* test_models.c - integration tests of server/models.c on the real `adapterd serve`: GET /v1/models in
 * OpenAI's list shape beside adapterd's, OpenAI's GET /v1/models/{id}, and --served-model-name's
 * rule on every route that takes a "model" (/v1/embeddings, /v1/embed, /v1/tokenize) and on TEI's
 * /info: with one model every name is an alias of it and the first is its listed id; the registry
 * name stays accepted; an unknown name is 404 naming every accepted name; with several models each
 * name is NAME=MODEL; a name that cannot be honoured stops the start with a message.
 *
 * An alias must give exactly the model's answer: the vectors are compared with /v1/embed's without a
 * name (whose numbers tests/server/test_embed.c checks against PyTorch). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "http_client.h"

#define TINY ADAPTERD_FIXTURES "/registry/models/bert-tiny"

static test_server srv;

/* GET or POST path; asserts the status and that the body is JSON, validated against the document's
 * schema of tmpl when tmpl is not NULL. Returns the body. */
static json_t *call(const char *method, const char *path, const char *tmpl, const char *body, long want) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, method, path, body, NULL, NULL, &r), 0, "%s %s: no answer", method, path);
    cr_assert_eq(r.status, want, "%s %s %.200s: status %ld, want %ld: %.500s", method, path, body ? body : "", r.status, want,
                 r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "%s %s: not JSON: %.300s", method, path, r.body);
    char msg[512];
    if (tmpl) cr_assert_eq(ts_validate(method, tmpl, want, d, msg, sizeof msg), 0, "%s %s: %s", method, path, msg);
    ts_resp_free(&r);
    return d;
}

static const char *str(json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* OpenAI's error shape: {"error": {"message", "type", "param": null, "code"}}; returns the message (in d). */
static const char *openai_error(json_t *d, const char *type) {
    json_t *e = json_object_get(d, "error");
    cr_assert(json_is_object(e), "not OpenAI's error shape");
    cr_expect_str_eq(str(e, "type"), type);
    cr_expect(json_is_null(json_object_get(e, "param")));
    cr_expect_str_eq(str(e, "code"), "not_found");
    return str(e, "message");
}

static void start_with(const char *names) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--served-model-name", names, NULL};
    cr_assert_eq(ts_start(&srv, names ? args : NULL, NULL), 0, "server did not start");
}
static void start_served(void) { start_with("text-embedding-ada-002, ada"); }
static void start_plain(void) { start_with(NULL); }
static void stop(void) { cr_expect_eq(ts_stop(&srv), 0, "server did not exit 0 after SIGTERM"); }

TestSuite(served, .init = start_served, .fini = stop, .timeout = 120);

Test(served, list_is_openai_shaped_with_the_first_name_as_id) {
    json_t *d = call("GET", "/v1/models", "/v1/models", NULL, 200);
    cr_expect_str_eq(str(d, "object"), "list");
    json_t *data = json_object_get(d, "data"), *models = json_object_get(d, "models");
    cr_assert_eq(json_array_size(data), 1);
    json_t *o = json_array_get(data, 0);
    cr_expect_str_eq(str(o, "id"), "text-embedding-ada-002", "vLLM lists the first served name");
    cr_expect_str_eq(str(o, "object"), "model");
    cr_expect_str_eq(str(o, "owned_by"), "adapterd");
    cr_expect_str_eq(str(o, "root"), "bert-tiny");
    cr_expect_gt(json_integer_value(json_object_get(o, "created")), 1600000000);
    /* adapterd's shape is still there, with the names */
    cr_assert_eq(json_array_size(models), 1);
    json_t *m = json_array_get(models, 0), *sn = json_object_get(m, "served_names");
    cr_expect_str_eq(str(m, "name"), "bert-tiny");
    cr_expect_eq(json_integer_value(json_object_get(m, "hidden")), 64);
    cr_assert_eq(json_array_size(sn), 2);
    cr_expect_str_eq(json_string_value(json_array_get(sn, 0)), "text-embedding-ada-002");
    cr_expect_str_eq(json_string_value(json_array_get(sn, 1)), "ada", "spaces around a name are not part of it");
    json_decref(d);
}

Test(served, retrieve_answers_to_every_name) {
    const char *names[] = {"text-embedding-ada-002", "ada", "bert-tiny"};
    for (size_t i = 0; i < 3; i++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/models/%s", names[i]);
        json_t *d = call("GET", path, "/v1/models/{id}", NULL, 200);
        cr_expect_str_eq(str(d, "id"), names[i], "the name asked for");
        cr_expect_str_eq(str(d, "object"), "model");
        cr_expect_str_eq(str(d, "root"), "bert-tiny");
        cr_expect_eq(json_integer_value(json_object_get(d, "max_model_len")), 64);
        json_decref(d);
    }
}

Test(served, unknown_name_is_404_naming_the_served_names) {
    json_t *d = call("GET", "/v1/models/gpt-9", "/v1/models/{id}", NULL, 404);
    const char *msg = openai_error(d, "not_found_error");
    cr_expect(strstr(msg, "gpt-9") && strstr(msg, "\"text-embedding-ada-002\"") && strstr(msg, "\"ada\"") &&
                  strstr(msg, "\"bert-tiny\""),
              "%s", msg);
    json_decref(d);
    /* one model served, and still no stand-in for a name that is not its own */
    d = call("POST", "/v1/embeddings", "/v1/embeddings", "{\"model\": \"text-embedding-3-small\", \"input\": \"x\"}", 404);
    msg = openai_error(d, "not_found_error");
    cr_expect(strstr(msg, "text-embedding-3-small") && strstr(msg, "\"text-embedding-ada-002\""), "%s", msg);
    json_decref(d);
    d = call("POST", "/v1/embed", "/v1/embed", "{\"model\": \"gpt-9\", \"inputs\": \"x\"}", 404);
    cr_expect_str_eq(str(json_object_get(d, "error"), "code"), "not_found", "adapterd's shape on its own route");
    cr_expect(strstr(str(json_object_get(d, "error"), "message"), "\"ada\""));
    json_decref(d);
}

Test(served, an_alias_embeds_as_its_model) {
    json_t *want = call("POST", "/v1/embed", NULL, "{\"inputs\": [\"hello world\", \"a cat\"]}", 200);
    const char *body[] = {"{\"model\": \"text-embedding-ada-002\", \"input\": [\"hello world\", \"a cat\"], \"encoding_format\": \"float\"}",
                          "{\"model\": \"ada\", \"input\": [\"hello world\", \"a cat\"]}",
                          "{\"model\": \"bert-tiny\", \"input\": [\"hello world\", \"a cat\"]}",
                          "{\"input\": [\"hello world\", \"a cat\"]}"};
    const char *echo[] = {"text-embedding-ada-002", "ada", "bert-tiny", "text-embedding-ada-002"};
    for (size_t b = 0; b < 4; b++) {
        json_t *d = call("POST", "/v1/embeddings", "/v1/embeddings", body[b], 200);
        cr_expect_str_eq(str(d, "model"), echo[b], "the answer names the model as asked (else by its id): %s", body[b]);
        for (size_t i = 0; i < 2; i++)
            cr_expect(json_equal(json_object_get(json_array_get(json_object_get(d, "data"), i), "embedding"), json_array_get(want, i)),
                      "%s: input %zu differs from /v1/embed's", body[b], i);
        json_decref(d);
    }
    json_t *d = call("POST", "/v1/embed", NULL, "{\"model\": \"ada\", \"inputs\": [\"hello world\", \"a cat\"]}", 200);
    cr_expect(json_equal(d, want), "/v1/embed takes the alias too");
    json_decref(d), json_decref(want);
    json_t *t1 = call("POST", "/v1/tokenize", NULL, "{\"inputs\": \"hello world\"}", 200);
    json_t *t2 = call("POST", "/v1/tokenize", NULL, "{\"model\": \"text-embedding-ada-002\", \"inputs\": \"hello world\"}", 200);
    cr_expect(json_equal(t1, t2), "/v1/tokenize takes the alias");
    json_decref(t1), json_decref(t2);
}

Test(served, tei_info_names_the_model_by_its_id) {
    json_t *d = call("GET", "/info", "/info", NULL, 200);
    cr_expect_str_eq(str(d, "model_id"), "text-embedding-ada-002");
    json_decref(d);
}

/* Without --served-model-name: the registry's names, in both shapes. */
TestSuite(plain, .init = start_plain, .fini = stop, .timeout = 120);

Test(plain, the_registry_name_is_the_id) {
    json_t *d = call("GET", "/v1/models", "/v1/models", NULL, 200);
    json_t *o = json_array_get(json_object_get(d, "data"), 0), *m = json_array_get(json_object_get(d, "models"), 0);
    cr_expect_str_eq(str(o, "id"), "bert-tiny");
    cr_expect_str_eq(str(m, "name"), "bert-tiny");
    cr_expect_eq(json_array_size(json_object_get(m, "served_names")), 0);
    json_decref(d);
    d = call("GET", "/v1/models/bert-tiny", "/v1/models/{id}", NULL, 200);
    cr_expect_str_eq(str(d, "id"), "bert-tiny");
    json_decref(d);
    d = call("GET", "/v1/models/nope/x", "/v1/models/{id}", NULL, 404);
    const char *msg = openai_error(d, "not_found_error");
    cr_expect(strstr(msg, "\"nope/x\"") && strstr(msg, "\"bert-tiny\""), "%s", msg);
    json_decref(d);
    d = call("GET", "/info", NULL, NULL, 200);
    cr_expect_str_eq(str(d, "model_id"), "bert-tiny");
    json_decref(d);
}

/* A registry of two models: bert-tiny and plain (bert-tiny's files again). */
static char *reg2;
static char *two_models(void) {
    char *dir = ts_registry_ok("adapterd-models");
    ts_sh_ok("cp -rL %s %s/models/plain", TINY, dir);
    return dir;
}

static void start_several(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    reg2 = two_models();
    const char *args[] = {"--registry", reg2, "--served-model-name", "small=bert-tiny,org/other=plain,tiny=bert-tiny", NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start");
}
static void stop_several(void) {
    stop();
    ts_sh("rm -rf %s", reg2);
    free(reg2);
}

TestSuite(several, .init = start_several, .fini = stop_several, .timeout = 120);

Test(several, each_name_means_its_model) {
    json_t *d = call("GET", "/v1/models", "/v1/models", NULL, 200), *data = json_object_get(d, "data");
    cr_assert_eq(json_array_size(data), 2);
    cr_expect_str_eq(str(json_array_get(data, 0), "id"), "small", "models in the registry's order, each by its first name");
    cr_expect_str_eq(str(json_array_get(data, 1), "id"), "org/other");
    cr_expect_str_eq(str(json_array_get(data, 1), "root"), "plain");
    json_decref(d);
    d = call("GET", "/v1/models/org/other", "/v1/models/{id}", NULL, 200);
    cr_expect_str_eq(str(d, "id"), "org/other", "a name holding '/' is the rest of the path");
    cr_expect_str_eq(str(d, "root"), "plain");
    json_decref(d);
    json_t *want = call("POST", "/v1/embed", NULL, "{\"model\": \"plain\", \"inputs\": [\"hello world\"]}", 200);
    d = call("POST", "/v1/embeddings", "/v1/embeddings", "{\"model\": \"org/other\", \"input\": [\"hello world\"]}", 200);
    cr_expect(json_equal(json_object_get(json_array_get(json_object_get(d, "data"), 0), "embedding"), json_array_get(want, 0)));
    cr_expect_str_eq(str(d, "model"), "org/other");
    json_decref(d), json_decref(want);
    /* several models and no name: the caller must choose (as before) */
    d = call("POST", "/v1/embeddings", "/v1/embeddings", "{\"input\": \"x\"}", 422);
    cr_expect_str_eq(str(json_object_get(d, "error"), "type"), "invalid_request_error");
    json_decref(d);
    d = call("GET", "/info", NULL, NULL, 200);
    cr_expect_str_eq(str(d, "model_id"), "small", "TEI's /info: the first model, by its id");
    json_decref(d);
}

/* `adapterd serve` with these arguments must refuse to start, saying why (want in its output). */
static void refused(const char *registry, const char *names, const char *want) {
    char cmd[2048];
    /* bounded: a server that started after all would otherwise serve until killed */
    snprintf(cmd, sizeof cmd, "timeout 60 %s/tools/adapterd serve --registry '%s' --port 0 --threads 1 --served-model-name '%s' 2>&1",
             ADAPTERD_BINARY_DIR, registry, names);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char out[4096];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0, "--served-model-name '%s' started (status %d): %s", names, st, out);
    cr_expect(strstr(out, want), "--served-model-name '%s': no \"%s\" in: %s", names, want, out);
}

Test(names, that_cannot_be_honoured_stop_the_start, .timeout = 120) {
    char *dir = two_models();
    refused(dir, "ada", "write NAME=MODEL");
    refused(dir, "plain=bert-tiny", "the name of another model");
    refused(dir, "a=bert-tiny,a=plain", "given twice");
    refused(dir, "a=nope", "no model \"nope\"");
    refused(ADAPTERD_FIXTURES "/registry", "a,,b", "is not NAME or NAME=MODEL");
    refused(ADAPTERD_FIXTURES "/registry", "a=", "is not NAME or NAME=MODEL");
    ts_sh("rm -rf %s", dir);
    free(dir);
}
