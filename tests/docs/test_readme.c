/* test_readme.c - the README's token-id example against the bundled example model, so that it cannot
 * go stale again (it once held bert-base-uncased's ids, [101, 2023, 102], which mean nothing in the
 * example model's own vocabulary, whose [CLS] is 2 and [SEP] is 3).
 *
 * The README's sh block says the sentence the ids stand for ("# token ids in the example model's
 * vocabulary: [CLS] <words> [SEP]") above the curl line that sends them. This test reads both from
 * README.md, has `adapterd serve --registry examples/registry` tokenize the words (they must give
 * exactly those ids, [CLS] first and [SEP] last, one token a word) and decode the ids (they must give
 * the words back), sends the curl line's body as it stands (200), and checks that every other id list
 * in README.md (prose, `--ids`) and the /decode example of proto/openapi.yaml is the same list. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"

#define README ADAPTERD_SOURCE_DIR "/README.md"
#define EXAMPLES ADAPTERD_SOURCE_DIR "/examples/registry"
/* Ids in one list. */
#define IDS_MAX 64

static test_server srv;

static void start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--registry", EXAMPLES, NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start on %s", EXAMPLES);
}
static void stop(void) { cr_expect_eq(ts_stop(&srv), 0, "server did not exit 0 after SIGTERM"); }

/* POST body (JSON) to path; asserts 200; returns the answer. */
static json_t *post(const char *path, const char *body) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "POST", path, body, NULL, NULL, &r), 0, "POST %s: no answer", path);
    cr_assert_eq(r.status, 200, "POST %s %.300s: %ld %.500s", path, body, r.status, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "POST %s: not JSON: %.300s", path, r.body);
    ts_resp_free(&r);
    return d;
}

/* The README's example, as read from it. */
typedef struct {
    char *text;          /* README.md, malloc'd */
    char body[512];      /* the curl line's -d '...' */
    char words[256];     /* the comment's words between [CLS] and [SEP] */
    long ids[IDS_MAX];   /* the body's inputs[0] */
    int n;
} example;

static void read_example(example *ex) {
    size_t len;
    ex->text = ts_read_file(README, &len);
    cr_assert(ex->text, "cannot read %s", README);
    const char *mark = "# token ids in the example model's vocabulary: [CLS] ";
    const char *c = strstr(ex->text, mark);
    cr_assert(c, "README.md has no line \"%s... [SEP]\" above its token-id example", mark);
    c += strlen(mark);
    const char *sep = strstr(c, " [SEP]"), *eol = strchr(c, '\n');
    cr_assert(sep && eol && sep < eol, "the comment's words must end with [SEP] on the same line");
    snprintf(ex->words, sizeof ex->words, "%.*s", (int)(sep - c), c);
    /* the next line: curl ... -d '{...}' */
    const char *d = strstr(eol, " -d '"), *next = strchr(eol + 1, '\n');
    cr_assert(d && next && d < next && strstr(eol, "/v1/predict") < next, "no curl -d '...' to /v1/predict after the comment");
    d += 5;
    const char *q = strchr(d, '\'');
    cr_assert(q && q < next);
    snprintf(ex->body, sizeof ex->body, "%.*s", (int)(q - d), d);
    json_error_t je;
    json_t *b = json_loads(ex->body, 0, &je);
    cr_assert(b, "the curl body is not JSON (%s): %s", je.text, ex->body);
    json_t *ids = json_array_get(json_object_get(b, "inputs"), 0);
    cr_assert(json_is_array(ids) && json_array_size(ids) > 2 && json_array_size(ids) <= IDS_MAX, "%s", ex->body);
    ex->n = (int)json_array_size(ids);
    for (int i = 0; i < ex->n; i++) ex->ids[i] = (long)json_integer_value(json_array_get(ids, (size_t)i));
    json_decref(b);
}

TestSuite(readme, .init = start, .fini = stop, .timeout = 120);

Test(readme, token_ids_are_cls_the_words_sep_in_the_example_vocabulary) {
    example ex;
    read_example(&ex);
    char body[512];
    snprintf(body, sizeof body, "{\"inputs\": [\"%s\"]}", ex.words);
    json_t *t = post("/v1/tokenize", body), *toks = json_array_get(t, 0);
    cr_assert_eq((int)json_array_size(toks), ex.n, "\"%s\" is %zu tokens here, the README lists %d ids", ex.words,
                 json_array_size(toks), ex.n);
    for (int i = 0; i < ex.n; i++) {
        json_t *k = json_array_get(toks, (size_t)i);
        cr_expect_eq(json_integer_value(json_object_get(k, "id")), ex.ids[i], "token %d (%s): id %lld, the README says %ld", i,
                     json_string_value(json_object_get(k, "token")), json_integer_value(json_object_get(k, "id")), ex.ids[i]);
    }
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(toks, 0), "token")), "[CLS]");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(toks, (size_t)ex.n - 1), "token")), "[SEP]");
    /* one token a word: the ids read as the sentence, not as pieces of it */
    char joined[256] = "";
    for (int i = 1; i < ex.n - 1; i++) {
        const char *w = json_string_value(json_object_get(json_array_get(toks, (size_t)i), "token"));
        strncat(joined, i > 1 ? " " : "", sizeof joined - strlen(joined) - 1);
        strncat(joined, w, sizeof joined - strlen(joined) - 1);
    }
    cr_expect_str_eq(joined, ex.words);
    json_decref(t);
    /* and back: TEI's /decode of the ids gives the words */
    char ids[256] = "";
    for (int i = 0; i < ex.n; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%ld", i ? ", " : "", ex.ids[i]);
    snprintf(body, sizeof body, "{\"ids\": [%s]}", ids);
    json_t *dec = post("/decode", body);
    cr_expect_str_eq(json_string_value(json_array_get(dec, 0)), ex.words);
    json_decref(dec);
    free(ex.text);
}

Test(readme, the_curl_line_runs_as_written) {
    example ex;
    read_example(&ex);
    json_t *d = post("/v1/predict", ex.body);
    json_t *res = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "sentiment");
    cr_expect(json_is_string(json_object_get(res, "label")), "%s", ex.body);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tokens")), ex.n);
    json_decref(d);
    free(ex.text);
}

/* Reads a list of at least 3 integers at p: "[a, b, c]" (sep ", ") or "a,b,c" (sep ","). Returns the
 * count, 0 when p holds no such list. */
static int read_list(const char *p, const char *sep, long *out) {
    int n = 0;
    while (isdigit((unsigned char)*p) && n < IDS_MAX) {
        char *end;
        out[n++] = strtol(p, &end, 10);
        p = end;
        if (strncmp(p, sep, strlen(sep))) break;
        p += strlen(sep);
    }
    return n >= 3 ? n : 0;
}

Test(readme, every_id_list_in_the_docs_is_the_examples) {
    example ex;
    read_example(&ex);
    int seen = 0;
    long got[IDS_MAX];
    for (const char *p = ex.text; *p; p++) {
        int n = 0;
        if (p[0] == '[' && isdigit((unsigned char)p[1])) n = read_list(p + 1, ", ", got);
        else if (!strncmp(p, "--ids ", 6)) n = read_list(p + 6, ",", got);
        if (!n) continue;
        int line = 1;
        for (const char *q = ex.text; q < p; q++) line += *q == '\n';
        cr_expect(n == ex.n && !memcmp(got, ex.ids, sizeof *got * (size_t)n), "README.md:%d holds an id list other than the example's", line);
        seen++;
    }
    cr_expect_geq(seen, 3, "the curl line, the prose and the encode command: %d lists", seen);
    /* the OpenAPI document's /decode example (what dredd sends) */
    json_error_t je;
    json_t *doc = json_load_file(ADAPTERD_BINARY_DIR "/proto/openapi.json", 0, &je);
    cr_assert(doc, "openapi.json: %s", je.text);
    json_t *dx = doc;
    const char *path[] = {"paths", "/decode", "post", "requestBody", "content", "application/json", "example"};
    for (size_t i = 0; i < sizeof path / sizeof *path; i++) dx = json_object_get(dx, path[i]);
    json_t *ids = json_object_get(dx, "ids");
    cr_assert_eq((int)json_array_size(ids), ex.n, "the /decode example's ids");
    for (int i = 0; i < ex.n; i++) cr_expect_eq(json_integer_value(json_array_get(ids, (size_t)i)), ex.ids[i]);
    json_decref(doc);
    free(ex.text);
}
