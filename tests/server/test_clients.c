/* test_clients.c - integration tests of the routes other servers' clients call (server/embed.c
 * through TEI's and OpenAI's paths, proto/tei.c, proto/openai.c), on the real `adapterd serve`.
 *
 * The reference is POST /v1/embed, whose vectors tests/server/test_embed.c checks against the
 * float64 PyTorch reference (2e-5): a TEI path must answer byte for byte what /v1/embed answers for
 * the same body, OpenAI's answer the same floats (base64: the same float32 bits), and the
 * derived options are computed here from /v1/embed's raw vectors, in double: "dimensions" is the
 * first D values L2-normalized (Matryoshka, as TEI and sentence-transformers do it), "prompt_name"
 * is the prompt's text put before the input, "truncation_direction": "left" is [CLS] + the last
 * tokens + [SEP] of the whole tokenization (/v1/tokenize). The shapes of the errors are TEI's
 * ({"error": message, "error_type"}) and OpenAI's ({"error": {"message", "type", "param", "code"}}),
 * as their clients read them. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"

/* float32 values re-derived in double from another float32 answer: a few ulps. */
#define TOL 1e-6
/* The server's --max-seq-len here: short, so that a sentence is cut. */
#define MAX_SEQ 12

static test_server srv;

static void start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--max-seq-len", "12", NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start");
}
static void stop(void) { cr_expect_eq(ts_stop(&srv), 0, "server did not exit 0 after SIGTERM"); }

/* POST body to path; asserts the status; returns the body as JSON (the raw text in *raw when not NULL). */
static json_t *post(const char *path, const char *body, long want, char **raw) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "POST", path, body, NULL, NULL, &r), 0, "POST %s: no answer", path);
    cr_assert_eq(r.status, want, "POST %s %.300s: status %ld, want %ld: %.500s", path, body, r.status, want, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "POST %s: body is not JSON: %.300s", path, r.body);
    if (raw) *raw = strdup(r.body);
    ts_resp_free(&r);
    return d;
}

/* TEI's error: {"error": "<message>", "error_type": type}, nothing else. */
static void tei_error(const char *path, const char *body, const char *ctype, long want, const char *type) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "POST", path, body, ctype, NULL, &r), 0);
    cr_assert_eq(r.status, want, "%s %.200s: status %ld, want %ld: %s", path, body, r.status, want, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "%s", r.body);
    cr_expect(json_is_string(json_object_get(d, "error")) && json_string_length(json_object_get(d, "error")) > 0, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(d, "error_type")), type, "%s", r.body);
    cr_expect_eq(json_object_size(d), 2, "%s", r.body);
    json_decref(d);
    ts_resp_free(&r);
}

/* OpenAI's error: {"error": {"message", "type", "param": null, "code"}}. */
static void openai_error(const char *body, long want, const char *type, const char *code) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "POST", "/v1/embeddings", body, NULL, NULL, &r), 0);
    cr_assert_eq(r.status, want, "%.200s: status %ld, want %ld: %s", body, r.status, want, r.body);
    json_t *d = json_loads(r.body, 0, NULL), *e = json_object_get(d, "error");
    cr_assert(json_is_object(e), "%s", r.body);
    cr_expect(json_string_length(json_object_get(e, "message")) > 0, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), type, "%s", r.body);
    cr_expect(json_is_null(json_object_get(e, "param")), "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")), code, "%s", r.body);
    json_decref(d);
    ts_resp_free(&r);
}

static void expect_close(json_t *got, const double *want, int n, double tol, const char *what) {
    cr_assert_eq((int)json_array_size(got), n, "%s: %zu values, want %d", what, json_array_size(got), n);
    for (int k = 0; k < n; k++) {
        double g = json_number_value(json_array_get(got, (size_t)k));
        cr_assert(fabs(g - want[k]) <= tol, "%s[%d] = %.9g, want %.9g", what, k, g, want[k]);
    }
}

TestSuite(tei, .init = start, .fini = stop, .timeout = 120);

Test(tei, paths_answer_what_v1_embed_answers) {
    const char *bodies[] = {"{\"inputs\": \"hello world\"}", "{\"inputs\": [\"a cat\", \"the dog sat\"], \"normalize\": false}",
                            "{\"inputs\": [[2, 135, 3]]}"};
    for (size_t b = 0; b < sizeof bodies / sizeof *bodies; b++) {
        char *want, *got1, *got2;
        json_decref(post("/v1/embed", bodies[b], 200, &want));
        json_decref(post("/embed", bodies[b], 200, &got1));
        json_decref(post("/", bodies[b], 200, &got2));
        cr_expect_str_eq(got1, want, "/embed %s", bodies[b]);
        cr_expect_str_eq(got2, want, "POST / %s", bodies[b]);
        free(want), free(got1), free(got2);
    }
}

Test(tei, embed_all_is_every_token_unnormalized) {
    char *want, *got;
    json_decref(post("/v1/embed", "{\"inputs\": [\"hello\", \"a b\"], \"pooling\": \"none\", \"normalize\": false}", 200, &want));
    json_decref(post("/embed_all", "{\"inputs\": [\"hello\", \"a b\"]}", 200, &got));
    cr_expect_str_eq(got, want);
    free(want), free(got);
    tei_error("/embed_all", "{\"inputs\": \"x\", \"pooling\": \"cls\"}", NULL, 422, "Validation");
}

Test(tei, dimensions_are_the_first_values_normalized) {
    json_t *raw = post("/v1/embed", "{\"inputs\": \"hello world\", \"normalize\": false}", 200, NULL);
    json_t *got = post("/embed", "{\"inputs\": \"hello world\", \"dimensions\": 5}", 200, NULL);
    json_t *v = json_array_get(raw, 0);
    double w[5], ss = 0;
    for (int k = 0; k < 5; k++) {
        w[k] = json_number_value(json_array_get(v, (size_t)k));
        ss += w[k] * w[k];
    }
    for (int k = 0; k < 5; k++) w[k] /= sqrt(ss);
    expect_close(json_array_get(got, 0), w, 5, TOL, "dimensions 5");
    json_decref(raw), json_decref(got);
    tei_error("/embed", "{\"inputs\": \"x\", \"dimensions\": 0}", NULL, 422, "Validation");
    tei_error("/embed", "{\"inputs\": \"x\", \"dimensions\": 100000}", NULL, 422, "Validation");
}

/* [CLS] + the last MAX_SEQ - 2 tokens + [SEP] of the text tokenized whole, as ids. */
static char *left_cut_ids(const char *text) {
    char body[512];
    snprintf(body, sizeof body, "{\"inputs\": \"%s\"}", text);
    json_t *t = post("/v1/tokenize", body, 200, NULL), *toks = json_array_get(t, 0);
    size_t n = json_array_size(toks);
    cr_assert_gt(n, MAX_SEQ, "the test's text must be longer than --max-seq-len: %zu tokens", n);
    char *out = NULL;
    size_t cap = 0;
    FILE *f = open_memstream(&out, &cap);
    fprintf(f, "[%lld", json_integer_value(json_object_get(json_array_get(toks, 0), "id")));
    for (size_t k = n - (MAX_SEQ - 1); k < n; k++)
        fprintf(f, ", %lld", json_integer_value(json_object_get(json_array_get(toks, k), "id")));
    fprintf(f, "]");
    fclose(f);
    json_decref(t);
    return out;
}

Test(tei, truncation_direction_left_keeps_the_end) {
    const char *text = "the quick brown fox jumps over the lazy dog and runs far away";
    char *ids = left_cut_ids(text), body[512], *want, *got;
    snprintf(body, sizeof body, "{\"inputs\": [%s]}", ids);
    json_decref(post("/v1/embed", body, 200, &want));
    snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"truncate\": true, \"truncation_direction\": \"left\"}", text);
    json_decref(post("/embed", body, 200, &got));
    cr_expect_str_eq(got, want, "left truncation of %s: ids %s", text, ids);
    /* right: a different vector (the start kept) */
    snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"truncate\": true, \"truncation_direction\": \"Right\"}", text);
    char *right;
    json_decref(post("/embed", body, 200, &right));
    cr_expect_str_neq(right, want);
    free(ids), free(want), free(got), free(right);
    snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"truncation_direction\": \"left\"}", text);
    tei_error("/embed", body, NULL, 422, "Validation"); /* not asked to truncate: refused, as TEI does */
    tei_error("/embed", "{\"inputs\": \"x\", \"truncation_direction\": \"up\"}", NULL, 422, "Validation");
}

Test(tei, errors_are_in_tei_shape) {
    tei_error("/embed", "{\"inputs\": 5}", NULL, 422, "Validation");
    tei_error("/embed", "{\"inputs\": \"x\", \"bogus\": 1}", NULL, 422, "Validation");
    tei_error("/", "not json", NULL, 400, "Validation");
    tei_error("/embed", "{\"inputs\": \"x\"}", "text/plain", 415, "Validation");
    tei_error("/embed", "{\"inputs\": \"x\", \"prompt_name\": \"query\"}", NULL, 422, "Validation"); /* no prompts */
    tei_error("/tokenize", "{\"inputs\": 1}", NULL, 422, "Validation");
    /* adapterd's own routes keep adapterd's shape */
    json_t *d = post("/v1/embed", "{\"inputs\": 5}", 422, NULL);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(d, "error"), "code")), "invalid_argument");
    json_decref(d);
}

Test(tei, tokenize_info_health) {
    char *want, *got;
    json_decref(post("/v1/tokenize", "{\"inputs\": [\"hello world\"]}", 200, &want));
    json_decref(post("/tokenize", "{\"inputs\": [\"hello world\"]}", 200, &got));
    cr_expect_str_eq(got, want);
    free(want), free(got);
    json_t *info = NULL;
    cr_assert_eq(ts_request(&srv, "GET", "/info", NULL, 0, NULL, NULL, &info), 200);
    cr_expect_str_eq(json_string_value(json_object_get(info, "model_id")), "bert-tiny");
    cr_expect_eq(json_integer_value(json_object_get(info, "max_input_length")), 64); /* the model's, not the cap */
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(info, "model_type"), "embedding"), "pooling")),
                     "cls");
    cr_expect(json_is_string(json_object_get(info, "version")));
    json_decref(info);
    cr_expect_eq(ts_request(&srv, "GET", "/health", NULL, 0, NULL, NULL, NULL), 200);
}

/* /decode: the ids /tokenize gives a lowercase text decode back to that text (the fixture is an
 * uncased WordPiece vocabulary; Hugging Face's decode with clean_up_tokenization_spaces answers the
 * same for these texts), special tokens kept when asked. */
Test(tei, decode_gives_the_text_back) {
    const char *texts[] = {"hello world, it's fine.", "don't stop! where are we?", "a cat sat"};
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        char body[512];
        snprintf(body, sizeof body, "{\"inputs\": \"%s\"}", texts[t]);
        json_t *tk = post("/tokenize", body, 200, NULL), *toks = json_array_get(tk, 0);
        json_t *ids = json_array();
        for (size_t k = 0; k < json_array_size(toks); k++) json_array_append(ids, json_object_get(json_array_get(toks, k), "id"));
        json_t *req = json_pack("{s:o}", "ids", ids);
        char *rb = json_dumps(req, 0);
        json_t *d = post("/decode", rb, 200, NULL);
        cr_expect_str_eq(json_string_value(json_array_get(d, 0)), texts[t]);
        json_decref(d);
        json_object_set_new(req, "skip_special_tokens", json_false());
        free(rb);
        rb = json_dumps(req, 0);
        d = post("/decode", rb, 200, NULL);
        const char *w = json_string_value(json_array_get(d, 0));
        cr_expect(w && !strncmp(w, "[CLS] ", 6) && strstr(w, texts[t]) && !strcmp(w + strlen(w) - 6, " [SEP]"), "%s", w);
        json_decref(d), json_decref(req), json_decref(tk);
        free(rb);
    }
    json_t *d = post("/decode", "{\"ids\": [[2, 135, 3], [2, 3]]}", 200, NULL);
    cr_expect_eq(json_array_size(d), 2);
    cr_expect_str_eq(json_string_value(json_array_get(d, 1)), "");
    json_decref(d);
    tei_error("/decode", "{\"ids\": [99999999]}", NULL, 422, "Validation");
    tei_error("/decode", "{\"ids\": \"abc\"}", NULL, 422, "Validation");
    tei_error("/decode", "{\"ids\": [1], \"skip_special_tokens\": 0}", NULL, 422, "Validation");
}

TestSuite(openai, .init = start, .fini = stop, .timeout = 120);

/* The token count /v1/tokenize gives text (special tokens included). */
static int n_tokens(const char *text) {
    char body[256];
    snprintf(body, sizeof body, "{\"inputs\": [\"%s\"]}", text);
    json_t *t = post("/v1/tokenize", body, 200, NULL);
    int n = (int)json_array_size(json_array_get(t, 0));
    json_decref(t);
    return n;
}

Test(openai, embeddings_equal_v1_embed) {
    json_t *want = post("/v1/embed", "{\"inputs\": [\"hello world\", \"a cat\"]}", 200, NULL);
    const char *paths[] = {"/v1/embeddings", "/embeddings"};
    for (int p = 0; p < 2; p++) {
        json_t *d = post(paths[p], "{\"input\": [\"hello world\", \"a cat\"], \"model\": \"bert-tiny\"}", 200, NULL);
        cr_expect_str_eq(json_string_value(json_object_get(d, "object")), "list");
        cr_expect_str_eq(json_string_value(json_object_get(d, "model")), "bert-tiny");
        json_t *data = json_object_get(d, "data");
        cr_assert_eq(json_array_size(data), 2);
        for (int i = 0; i < 2; i++) {
            json_t *e = json_array_get(data, (size_t)i);
            cr_expect_str_eq(json_string_value(json_object_get(e, "object")), "embedding");
            cr_expect_eq(json_integer_value(json_object_get(e, "index")), i);
            cr_expect(json_equal(json_object_get(e, "embedding"), json_array_get(want, (size_t)i)), "%s input %d", paths[p], i);
        }
        int tok = n_tokens("hello world") + n_tokens("a cat");
        json_t *u = json_object_get(d, "usage");
        cr_expect_eq(json_integer_value(json_object_get(u, "prompt_tokens")), tok);
        cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")), tok);
        json_decref(d);
    }
    json_decref(want);
}

/* RFC 4648 base64 decoding (no whitespace); returns the byte count. */
static size_t unbase64(const char *s, unsigned char *out) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(al, *s);
        cr_assert(p, "not base64: %c", *s);
        acc = acc << 6 | (unsigned)(p - al);
        if ((bits += 6) >= 8) out[n++] = (unsigned char)(acc >> (bits -= 8));
    }
    return n;
}

Test(openai, base64_holds_the_same_float32s) {
    json_t *f = post("/v1/embeddings", "{\"input\": \"hello world\", \"dimensions\": 7}", 200, NULL);
    json_t *b = post("/v1/embeddings", "{\"input\": \"hello world\", \"dimensions\": 7, \"encoding_format\": \"base64\"}", 200, NULL);
    json_t *fv = json_object_get(json_array_get(json_object_get(f, "data"), 0), "embedding");
    const char *s = json_string_value(json_object_get(json_array_get(json_object_get(b, "data"), 0), "embedding"));
    cr_assert(s);
    unsigned char bytes[64];
    cr_assert_eq(unbase64(s, bytes), 7 * 4);
    for (int k = 0; k < 7; k++) {
        uint32_t u = (uint32_t)bytes[4 * k] | (uint32_t)bytes[4 * k + 1] << 8 | (uint32_t)bytes[4 * k + 2] << 16 |
                     (uint32_t)bytes[4 * k + 3] << 24; /* little-endian, as numpy's frombuffer reads it */
        float x;
        memcpy(&x, &u, 4);
        cr_expect_eq(x, (float)json_number_value(json_array_get(fv, (size_t)k)), "value %d", k);
    }
    json_decref(f), json_decref(b);
}

Test(openai, token_ids_and_arrays_of_them) {
    char *want;
    json_t *w = post("/v1/embed", "{\"inputs\": [[2, 135, 3], [2, 84, 84, 3]]}", 200, &want);
    json_t *d = post("/v1/embeddings", "{\"input\": [[2, 135, 3], [2, 84, 84, 3]]}", 200, NULL);
    for (int i = 0; i < 2; i++)
        cr_expect(json_equal(json_object_get(json_array_get(json_object_get(d, "data"), (size_t)i), "embedding"),
                             json_array_get(w, (size_t)i)));
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(d, "usage"), "prompt_tokens")), 7);
    json_decref(d);
    d = post("/v1/embeddings", "{\"input\": [2, 135, 3]}", 200, NULL);
    cr_expect(json_equal(json_object_get(json_array_get(json_object_get(d, "data"), 0), "embedding"), json_array_get(w, 0)));
    json_decref(d), json_decref(w), free(want);
}

Test(openai, errors_are_in_openai_shape) {
    openai_error("{\"input\": \"x\", \"encoding_format\": \"hex\"}", 422, "invalid_request_error", "invalid_argument");
    openai_error("{\"model\": \"bert-tiny\"}", 422, "invalid_request_error", "invalid_argument"); /* no input */
    openai_error("{\"input\": []}", 422, "invalid_request_error", "invalid_argument");
    openai_error("{\"input\": \"x\", \"model\": \"gpt-9\"}", 404, "not_found_error", "not_found");
    openai_error("{\"input\": \"x\", \"dimensions\": -1}", 422, "invalid_request_error", "invalid_argument");
    openai_error("{\"input\": [{\"text\": \"a\", \"text_pair\": \"b\"}]}", 422, "invalid_request_error", "invalid_argument");
    openai_error("[1", 400, "invalid_request_error", "malformed");
    openai_error("{\"input\": \"the quick brown fox jumps over the lazy dog and runs far away\"}", 422, "invalid_request_error",
                 "invalid_argument"); /* over --max-seq-len: OpenAI refuses too, it never cuts */
}

/* A model folder with sentence-transformers prompts: a registry of its own. */
static char *preg;
static void start_prompts(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    preg = ts_registry_new("adapterd-clients");
    cr_assert(preg);
    char path[1024];
    snprintf(path, sizeof path, "%s/models/bert-tiny/config_sentence_transformers.json", preg);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("{\"prompts\": {\"query\": \"query: \", \"passage\": \"passage: \"}, \"default_prompt_name\": null}", f);
    fclose(f);
    const char *args[] = {"--registry", preg, NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start");
}
static void stop_prompts(void) {
    cr_expect_eq(ts_stop(&srv), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", preg);
    cr_expect_eq(system(cmd), 0);
    free(preg);
}

TestSuite(prompts, .init = start_prompts, .fini = stop_prompts, .timeout = 120);

Test(prompts, prompt_name_puts_the_prompt_first) {
    char *want, *got, *plain;
    json_decref(post("/v1/embed", "{\"inputs\": [\"query: where is the cat\"]}", 200, &want));
    json_decref(post("/embed", "{\"inputs\": [\"where is the cat\"], \"prompt_name\": \"query\"}", 200, &got));
    json_decref(post("/embed", "{\"inputs\": [\"where is the cat\"]}", 200, &plain)); /* no default prompt */
    cr_expect_str_eq(got, want);
    cr_expect_str_neq(plain, want);
    free(want), free(got), free(plain);
    tei_error("/embed", "{\"inputs\": \"x\", \"prompt_name\": \"nope\"}", NULL, 422, "Validation");
    tei_error("/embed", "{\"inputs\": [[2, 3]], \"prompt_name\": \"query\"}", NULL, 422, "Validation");
}

/* ---- KServe v2, from the protocol document (kserve/docs predict-api v2 REST) ---- */

TestSuite(kserve, .init = start, .fini = stop, .timeout = 120);

static json_t *get(const char *path, long want) {
    json_t *d = NULL;
    long st = ts_request(&srv, "GET", path, NULL, 0, NULL, NULL, &d);
    cr_assert_eq(st, want, "GET %s: %ld, want %ld", path, st, want);
    cr_assert(d, "GET %s: not JSON", path);
    return d;
}

/* The protocol's error: {"error": "<message>"} and nothing else. */
static void kserve_error(json_t *d, const char *what) {
    cr_expect(json_is_string(json_object_get(d, "error")) && json_string_length(json_object_get(d, "error")) > 0 &&
                  json_object_size(d) == 1,
              "%s: not {\"error\": \"<message>\"}", what);
}

Test(kserve, server_metadata) {
    json_t *d = get("/v2", 200);
    cr_expect_str_eq(json_string_value(json_object_get(d, "name")), "adapterd");
    cr_expect(json_string_length(json_object_get(d, "version")) > 0);
    json_t *ext = json_object_get(d, "extensions");
    cr_assert(json_is_array(ext));
    int repo = 0;
    for (size_t i = 0; i < json_array_size(ext); i++) repo |= !strcmp(json_string_value(json_array_get(ext, i)), "model_repository");
    cr_expect(repo, "the repository extension is served (/v2/repository/...)");
    int stats = 0;
    for (size_t i = 0; i < json_array_size(ext); i++) stats |= !strcmp(json_string_value(json_array_get(ext, i)), "statistics");
    cr_expect(stats, "the statistics extension is served (/v2/models/{m}/stats)");
    json_decref(d);
}

Test(kserve, versioned_model_routes) {
    json_t *t = get("/v1/tasks/cls_lora", 200);
    const char *v = json_string_value(json_object_get(t, "version"));
    cr_assert(v);
    char path[256];
    json_t *plain = get("/v2/models/cls_lora", 200);
    snprintf(path, sizeof path, "/v2/models/cls_lora/versions/%s", v);
    json_t *ver = get(path, 200);
    cr_expect(json_equal(plain, ver), "the current version's metadata is the model's");
    snprintf(path, sizeof path, "/v2/models/cls_lora/versions/%s/ready", v);
    json_t *rd = get(path, 200);
    cr_expect(json_is_boolean(json_object_get(rd, "ready")));
    json_t *e = get("/v2/models/cls_lora/versions/no-such-version", 404);
    kserve_error(e, "unknown version");
    json_t *e2 = get("/v2/models/cls_lora/versions/no-such-version/ready", 404);
    kserve_error(e2, "unknown version ready");
    json_decref(t), json_decref(plain), json_decref(ver), json_decref(rd), json_decref(e), json_decref(e2);
}

Test(kserve, id_is_echoed_and_nested_data_read) {
    json_t *a = post("/v2/models/cls_lora/infer",
                     "{\"id\": \"req-42\", \"inputs\": [{\"name\": \"text\", \"shape\": [2, 1], \"datatype\": \"BYTES\", "
                     "\"data\": [[\"a fine day\"], [\"awful\"]]}]}",
                     200, NULL);
    cr_expect_str_eq(json_string_value(json_object_get(a, "id")), "req-42");
    json_t *b = post("/v2/models/cls_lora/infer",
                     "{\"inputs\": [{\"name\": \"text\", \"shape\": [2], \"datatype\": \"BYTES\", \"data\": [\"a fine day\", \"awful\"]}]}",
                     200, NULL);
    cr_expect(json_equal(json_object_get(a, "outputs"), json_object_get(b, "outputs")), "nested [N, 1] data answers as flat [N]");
    cr_expect_str_neq(json_string_value(json_object_get(b, "id")), "req-42");
    json_decref(a), json_decref(b);
}

Test(kserve, errors_in_the_protocols_shape) {
    json_t *d = post("/v2/models/nope/infer", "{\"inputs\": [{\"name\": \"text\", \"shape\": [1], \"datatype\": \"BYTES\", \"data\": [\"x\"]}]}",
                     404, NULL);
    kserve_error(d, "unknown model");
    json_decref(d);
    d = post("/v2/models/cls_lora/infer", "{\"inputs\": [{\"name\": \"text\", \"shape\": [2, 1], \"datatype\": \"BYTES\", "
                                          "\"data\": [[\"a\", \"b\"], [\"c\", \"d\"]]}]}",
             422, NULL);
    kserve_error(d, "a nested row of two");
    json_decref(d);
    d = post("/v2/models/cls_lora/infer", "{\"id\": 5, \"inputs\": [{\"name\": \"text\", \"shape\": [1], \"datatype\": \"BYTES\", \"data\": [\"x\"]}]}",
             422, NULL);
    kserve_error(d, "a numeric id");
    json_decref(d);
    d = post("/v2/models/cls_lora/infer", "{", 400, NULL);
    kserve_error(d, "not JSON");
    json_decref(d);
    d = get("/v2/models/nope", 404);
    kserve_error(d, "unknown model metadata");
    json_decref(d);
}

/* ---- TEI's /predict and /rerank, against /v1/predict's scores, logits and values ---- */

TestSuite(tei_tasks, .init = start, .fini = stop, .timeout = 120);

Test(tei_tasks, predict_is_the_tasks_labels_by_score) {
    json_t *v1 = post("/v1/predict", "{\"inputs\": [\"a fine day\", {\"text\": \"awful\", \"text_pair\": \"x\"}], \"tasks\": [\"cls_lora\"], "
                                     "\"return\": {\"logits\": true}}",
                      200, NULL);
    json_t *one = post("/predict?task=cls_lora", "{\"inputs\": \"a fine day\"}", 200, NULL);
    json_t *batch = post("/predict?task=cls_lora", "{\"inputs\": [[\"a fine day\"], [\"awful\", \"x\"]], \"raw_scores\": true}", 200, NULL);
    json_t *pair = post("/predict?task=cls_lora", "{\"inputs\": [\"awful\", \"x\"]}", 200, NULL); /* TEI: a pair */
    for (int i = 0; i < 2; i++) {
        json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(v1, "results"), (size_t)i), "tasks"), "cls_lora");
        json_t *scores = json_object_get(t, "scores"), *logits = json_object_get(t, "logits");
        json_t *probs = i == 0 ? one : pair, *raw = json_array_get(batch, (size_t)i);
        cr_assert_eq(json_array_size(probs), json_object_size(scores));
        for (size_t k = 0; k < json_array_size(probs); k++) {
            json_t *e = json_array_get(probs, k);
            const char *label = json_string_value(json_object_get(e, "label"));
            /* one input alone against the same input in a batch of two: the kernels block the rows differently
             * by row count (on AVX-512 machines), so the logits may differ in their last bits (seen: 3e-6
             * relative in a probability of 8e-4); the labels, their order and the raw scores below are exact */
            double got = json_real_value(json_object_get(e, "score")), want = json_real_value(json_object_get(scores, label));
            cr_expect(fabs(got - want) <= 1e-5 * fabs(want) + 1e-9, "%s: %.9g against %.9g", label, got, want);
            if (k) cr_expect_geq(json_real_value(json_object_get(json_array_get(probs, k - 1), "score")), json_real_value(json_object_get(e, "score")));
        }
        /* raw: the logits, label i's logit at index i of /v1/predict's "logits" (labels in head order) */
        const char *lab;
        json_t *sv;
        size_t idx = 0;
        json_object_foreach(scores, lab, sv) {
            double want = json_real_value(json_array_get(logits, idx++));
            int found = 0;
            for (size_t k = 0; k < json_array_size(raw); k++)
                if (!strcmp(json_string_value(json_object_get(json_array_get(raw, k), "label")), lab)) {
                    cr_expect_eq(json_real_value(json_object_get(json_array_get(raw, k), "score")), want, "raw %s", lab);
                    found = 1;
                }
            cr_expect(found, "label %s", lab);
        }
    }
    json_decref(v1), json_decref(one), json_decref(batch), json_decref(pair);
    tei_error("/predict", "{\"inputs\": \"x\"}", NULL, 422, "Validation"); /* several tasks, none named */
    tei_error("/predict?task=nope", "{\"inputs\": \"x\"}", NULL, 404, "Validation");
    tei_error("/predict?task=cls_lora", "{\"inputs\": [[\"a\", \"b\", \"c\"]]}", NULL, 422, "Validation");
    tei_error("/predict?task=cls_lora", "{\"inputs\": \"x\", \"raw_scores\": 1}", NULL, 422, "Validation");
}

Test(tei_tasks, rerank_orders_texts_by_the_sigmoid_of_the_score) {
    const char *texts[] = {"a", "bb b", "c"};
    json_t *v1 = post("/v1/predict", "{\"inputs\": [{\"text\": \"q\", \"text_pair\": \"a\"}, {\"text\": \"q\", \"text_pair\": \"bb b\"}, "
                                     "{\"text\": \"q\", \"text_pair\": \"c\"}], \"tasks\": [\"reg\"]}",
                      200, NULL);
    json_t *rr = post("/rerank?task=reg", "{\"query\": \"q\", \"texts\": [\"a\", \"bb b\", \"c\"], \"return_text\": true}", 200, NULL);
    json_t *raw = post("/rerank?task=reg", "{\"query\": \"q\", \"texts\": [\"a\", \"bb b\", \"c\"], \"raw_scores\": true}", 200, NULL);
    cr_assert_eq(json_array_size(rr), 3);
    for (size_t k = 0; k < 3; k++) {
        json_t *e = json_array_get(rr, k), *r = json_array_get(raw, k);
        int i = (int)json_integer_value(json_object_get(e, "index"));
        double v = json_real_value(json_object_get(
            json_object_get(json_object_get(json_array_get(json_object_get(v1, "results"), (size_t)i), "tasks"), "reg"), "value"));
        cr_expect(fabs(json_real_value(json_object_get(e, "score")) - 1.0 / (1.0 + exp(-v))) < TOL, "text %d", i);
        cr_expect_str_eq(json_string_value(json_object_get(e, "text")), texts[i]);
        cr_expect_eq(json_integer_value(json_object_get(r, "index")), i, "the sigmoid keeps the order");
        cr_expect_eq(json_real_value(json_object_get(r, "score")), v);
        if (k) cr_expect_geq(json_real_value(json_object_get(json_array_get(rr, k - 1), "score")), json_real_value(json_object_get(e, "score")));
    }
    json_decref(v1), json_decref(rr), json_decref(raw);
    tei_error("/rerank?task=reg", "{\"texts\": [\"a\"]}", NULL, 422, "Validation");
    tei_error("/rerank?task=reg", "{\"query\": \"q\", \"texts\": []}", NULL, 422, "Validation");
    tei_error("/rerank?task=reg", "{\"query\": \"q\", \"texts\": [1]}", NULL, 422, "Validation");
}

Test(kserve, statistics_count_the_tasks_requests) {
    json_t *a = get("/v2/models/reg/stats", 200);
    json_t *m = json_array_get(json_object_get(a, "model_stats"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(m, "name")), "reg");
    json_int_t n0 = json_integer_value(json_object_get(m, "inference_count"));
    json_int_t ns0 = json_integer_value(json_object_get(json_object_get(json_object_get(m, "inference_stats"), "success"), "ns"));
    for (int i = 0; i < 3; i++)
        json_decref(post("/v2/models/reg/infer", "{\"inputs\": [{\"name\": \"text\", \"shape\": [1], \"datatype\": \"BYTES\", \"data\": [\"x\"]}]}",
                         200, NULL));
    json_t *b = get("/v2/models/reg/stats", 200);
    json_t *m2 = json_array_get(json_object_get(b, "model_stats"), 0);
    cr_expect_eq(json_integer_value(json_object_get(m2, "inference_count")), n0 + 3);
    json_t *succ = json_object_get(json_object_get(m2, "inference_stats"), "success");
    cr_expect_eq(json_integer_value(json_object_get(succ, "count")), n0 + 3);
    cr_expect_gt(json_integer_value(json_object_get(succ, "ns")), ns0, "three requests took some time");
    json_decref(a), json_decref(b);
    json_t *e = get("/v2/models/nope/stats", 404);
    kserve_error(e, "stats of an unknown model");
    json_decref(e);
}

/* The front door: the same classification through every HTTP protocol is decoded once by its own codec
 * (adapterd_decoded_requests_total{protocol} rises by one for each) and answers the same label and
 * score (one input each, so the batches have the same shape and the scores are equal to the bit). The
 * gRPC protocol's share of this check is tests/grpc/test_grpc.py's. */
static long decoded(const char *protocol) {
    char name[96];
    snprintf(name, sizeof name, "adapterd_decoded_requests_total{protocol=\"%s\"}", protocol);
    long v = ts_metric(&srv, name);
    return v < 0 ? 0 : v;
}

Test(kserve, every_protocol_goes_through_its_codec) {
    const char *protocols[] = {"adapterd", "tei", "kserve_v2"};
    long before[3];
    for (int i = 0; i < 3; i++) before[i] = decoded(protocols[i]);
    json_t *v1 = post("/v1/predict", "{\"inputs\": [\"a fine day\"], \"tasks\": [\"cls_lora\"]}", 200, NULL);
    json_t *tei = post("/predict?task=cls_lora", "{\"inputs\": \"a fine day\"}", 200, NULL);
    json_t *v2 = post("/v2/models/cls_lora/infer",
                      "{\"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\", \"shape\": [1], \"data\": [\"a fine day\"]}]}", 200,
                      NULL);
    /* KServe v2's binary tensor data: the same text as a 4-byte little-endian length and its bytes */
    const char *head = "{\"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\", \"shape\": [1], \"parameters\": "
                       "{\"binary_data_size\": 14}}]}";
    char bin[256];
    size_t hl = strlen(head);
    memcpy(bin, head, hl);
    memcpy(bin + hl, "\x0a\x00\x00\x00" "a fine day", 14);
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %zu", hl);
    json_t *v2b = NULL;
    long st = ts_request(&srv, "POST", "/v2/models/cls_lora/infer", bin, hl + 14, "application/octet-stream", hdr, &v2b);
    cr_assert_eq(st, 200, "binary: %ld", st);
    cr_expect_eq(decoded("adapterd"), before[0] + 1, "v1 decoded once");
    cr_expect_eq(decoded("tei"), before[1] + 1, "TEI decoded once");
    cr_expect_eq(decoded("kserve_v2"), before[2] + 2, "KServe v2 JSON and binary, once each");
    json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(v1, "results"), 0), "tasks"), "cls_lora");
    const char *label = json_string_value(json_object_get(t, "label"));
    double score = json_real_value(json_object_get(t, "score"));
    cr_assert(label);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(tei, 0), "label")), label, "TEI");
    cr_expect_eq(json_real_value(json_object_get(json_array_get(tei, 0), "score")), score, "TEI");
    json_t *v2s[2] = {v2, v2b};
    for (int k = 0; k < 2; k++) {
        json_t *outs = json_object_get(v2s[k], "outputs"), *o;
        size_t i;
        int seen = 0;
        json_array_foreach(outs, i, o) {
            const char *n = json_string_value(json_object_get(o, "name"));
            json_t *d = json_array_get(json_object_get(o, "data"), 0);
            if (!strcmp(n, "label")) {
                cr_expect_str_eq(json_string_value(d), label, "v2 %d", k);
                seen++;
            }
            if (!strcmp(n, "score")) {
                cr_expect_eq(json_real_value(d), score, "v2 %d", k);
                seen++;
            }
        }
        cr_expect_eq(seen, 2, "v2 %d answers label and score", k);
    }
    json_decref(v1), json_decref(tei), json_decref(v2), json_decref(v2b);
}
