/* test_embed_long.c - embeddings of texts over the model's limit with "long": {"mode": "chunks"} on the
 * real `adapterd serve` over tests/fixtures/registry (server/predict.c reads the text in windows,
 * server/respond.c pools each window then averages them weighted by their tokens, then normalizes).
 *
 * The fixture model takes 64 positions. A text of two blocks A and B of 62 one-token words each is
 * read at stride 0 in exactly two windows, [CLS] A [SEP] and [CLS] B [SEP]: the same sequences as A
 * and B embedded alone, so the long text's vector must be the mean of theirs (both 64 tokens) to float
 * rounding, on /v1/embed, TEI's /embed and OpenAI's /v1/embeddings. The limits on long inputs hold. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "test_post.h"
#include "test_text.h"

#define BLOCK 62 /* one-token words: one window of the fixture's 64 with [CLS] and [SEP] */

static test_server srv;

static void start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--max-input-tokens", "300", "--max-windows", "4", NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start");
}
static void stop(void) { cr_expect_eq(ts_stop(&srv), 0, "server did not exit 0 after SIGTERM"); }

TestSuite(embed_long, .init = start, .fini = stop, .timeout = 60);


/* The first vector of an answer: /v1/embed's "embeddings"[0], TEI's [0], OpenAI's "data"[0].embedding. */
static json_t *vec0(json_t *d) {
    if (json_is_array(d)) return json_array_get(d, 0);
    json_t *e = json_object_get(d, "embeddings");
    if (e) return json_array_get(e, 0);
    return json_object_get(json_array_get(json_object_get(d, "data"), 0), "embedding");
}

static json_t *post_to(const char *path, const char *body, long want) {
    json_t *d = NULL;
    long st = ts_request(&srv, "POST", path, body, strlen(body), "application/json", NULL, &d);
    cr_assert_eq(st, want, "%s %.200s -> %ld", path, body, st);
    return d;
}

/* mean (pooling) vectors of A and B alone, unnormalized, and the long text's with "long" chunks */
Test(embed_long, chunks_are_the_windows_vectors_weighted_by_tokens) {
    char *a = fixture_words(BLOCK, 7u), *b = fixture_words(BLOCK, 8u), *body = NULL;
    cr_assert(asprintf(&body, "{\"inputs\":[\"%s\",\"%s\"],\"pooling\":\"mean\",\"normalize\":false}", a, b) > 0);
    json_t *alone = post_to("/v1/embed", body, 200);
    free(body);
    json_t *va = json_array_get(alone, 0), *vb = json_array_get(alone, 1);
    size_t H = json_array_size(va);
    cr_assert(H > 0 && json_array_size(vb) == H);
    for (int norm = 0; norm < 2; norm++) {
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s %s\"],\"pooling\":\"mean\",\"normalize\":%s,\"long\":{\"mode\":\"chunks\"}}", a, b,
                           norm ? "true" : "false") > 0);
        json_t *d = post_to("/v1/embed", body, 200), *v = vec0(d);
        free(body);
        cr_assert_eq(json_array_size(v), H);
        double ss = 0;
        for (size_t k = 0; k < H; k++) {
            double m = (json_number_value(json_array_get(va, k)) + json_number_value(json_array_get(vb, k))) / 2;
            ss += m * m;
        }
        for (size_t k = 0; k < H; k++) {
            double m = (json_number_value(json_array_get(va, k)) + json_number_value(json_array_get(vb, k))) / 2;
            if (norm) m /= sqrt(ss);
            double got = json_number_value(json_array_get(v, k));
            cr_expect(fabs(got - m) <= 1e-5 * fmax(1, fabs(m)), "normalize %d [%zu]: %.8g, want %.8g", norm, k, got, m);
        }
        json_decref(d);
    }
    /* windows of unequal length weigh by their tokens: A (64 with [CLS], [SEP]) and C (12) */
    char *c = fixture_words(10, 10u);
    cr_assert(asprintf(&body, "{\"inputs\":[\"%s\",\"%s %s\"],\"pooling\":\"mean\",\"normalize\":false,\"long\":{\"mode\":\"chunks\"}}",
                       c, a, c) > 0);
    json_t *uc = post_to("/v1/embed", body, 200);
    free(body);
    cr_assert_eq(json_array_size(uc), 2, "one vector a text");
    for (size_t k = 0; k < H; k++) {
        double m = (64 * json_number_value(json_array_get(va, k)) + 12 * json_number_value(json_array_get(json_array_get(uc, 0), k))) / 76;
        double got = json_number_value(json_array_get(json_array_get(uc, 1), k));
        cr_expect(fabs(got - m) <= 1e-5 * fmax(1, fabs(m)), "weighted [%zu]: %.8g, want %.8g", k, got, m);
    }
    json_decref(uc), free(c);
    /* TEI's /embed and OpenAI's /v1/embeddings take the same extension: same vector (both normalize) */
    cr_assert(asprintf(&body, "{\"inputs\":\"%s %s\",\"pooling\":\"mean\",\"long\":{\"mode\":\"chunks\"}}", a, b) > 0);
    json_t *ref = post_to("/v1/embed", body, 200);
    free(body);
    cr_assert(asprintf(&body, "{\"inputs\":\"%s %s\",\"long\":{\"mode\":\"chunks\"}}", a, b) > 0);
    json_t *tei = post_to("/embed", body, 200);
    free(body);
    cr_assert(asprintf(&body, "{\"input\":\"%s %s\",\"model\":\"bert-tiny\",\"long\":{\"mode\":\"chunks\"}}", a, b) > 0);
    json_t *oai = post_to("/v1/embeddings", body, 200);
    free(body);
    cr_assert(asprintf(&body, "{\"inputs\":\"%s %s\",\"long\":{\"mode\":\"chunks\"}}", a, b) > 0);
    json_t *dflt = post_to("/v1/embed", body, 200);
    free(body);
    for (size_t k = 0; k < H; k++) {
        double want = json_number_value(json_array_get(vec0(dflt), k));
        cr_expect(fabs(json_number_value(json_array_get(vec0(tei), k)) - want) <= 1e-6, "TEI [%zu]", k);
        cr_expect(fabs(json_number_value(json_array_get(vec0(oai), k)) - want) <= 1e-6, "OpenAI [%zu]", k);
    }
    (void)ref;
    json_decref(ref), json_decref(tei), json_decref(oai), json_decref(dflt), json_decref(alone);
    free(a), free(b);
}

/* Short texts beside a long one read in windows, in one request, embed bit for bit as alone (the
 * windows are more packed rows of the same pass, each row summed in an order that does not depend
 * on the others: engine/math/gemm.c; attention never crosses a sequence). */
Test(embed_long, short_texts_beside_a_long_one_are_unchanged) {
    char *a = fixture_words(BLOCK, 13u), *b = fixture_words(BLOCK + 20, 14u), *s1 = fixture_words(5, 15u), *s2 = fixture_words(17, 16u), *body = NULL;
    static const char *const poolings[] = {"mean", "pooler"}; /* the pooler: one product over the batch's [CLS] rows */
    for (size_t p = 0; p < sizeof poolings / sizeof poolings[0]; p++) {
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\",\"%s\"],\"pooling\":\"%s\"}", s1, s2, poolings[p]) > 0);
        json_t *alone = post_to("/v1/embed", body, 200);
        free(body);
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\",\"%s %s\",\"%s\"],\"pooling\":\"%s\",\"long\":{\"mode\":\"chunks\","
                                  "\"stride\":8}}", s1, a, b, s2, poolings[p]) > 0);
        json_t *mixed = post_to("/v1/embed", body, 200);
        free(body);
        cr_assert_eq(json_array_size(mixed), 3);
        for (int i = 0; i < 2; i++) { /* the vectors' JSON bytes, every digit */
            char *x = json_dumps(json_array_get(alone, (size_t)i), JSON_COMPACT | JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY);
            char *y = json_dumps(json_array_get(mixed, (size_t)(i ? 2 : 0)), JSON_COMPACT | JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY);
            cr_assert(x && y);
            cr_expect_str_eq(x, y, "%s: short text %d changed beside the long one", poolings[p], i);
            free(x), free(y);
        }
        json_decref(alone), json_decref(mixed);
    }
    free(a), free(b), free(s1), free(s2);
}

/* --max-input-tokens 300 and --max-windows 4 (start()) hold embeddings read in windows too: 413 */
Test(embed_long, limits) {
    char *five = fixture_words(4 * BLOCK + 10, 11u), *big = fixture_words(320, 12u), *body = NULL;
    static const char *const says[] = {"--max-windows", "--max-input-tokens"};
    const char *texts[] = {five, big};
    for (int i = 0; i < 2; i++) {
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"long\":{\"mode\":\"chunks\"}}", texts[i]) > 0);
        ts_resp r;
        cr_assert_eq(ts_http(&srv, "POST", "/v1/embed", body, NULL, NULL, &r), 0);
        cr_expect_eq(r.status, 413, "%s: %ld %s", says[i], r.status, r.body);
        cr_expect(strstr(r.body, says[i]), "%s", r.body);
        ts_resp_free(&r);
        free(body);
    }
    free(five), free(big);
}

/* Without "long" a text over the limit is refused as before (TEI's rule); "long" with per-token
 * vectors or "aggregate": "max", or a stride not below a window, is refused. */
Test(embed_long, refusals) {
    char *a = fixture_words(2 * BLOCK, 9u), *body = NULL;
    cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"]}", a) > 0);
    json_t *d = NULL;
    long st = ts_request(&srv, "POST", "/v1/embed", body, strlen(body), "application/json", NULL, &d);
    cr_expect(st == 413 || st == 422, "over the limit without \"long\": %ld", st);
    json_decref(d), free(body);
    static const char *const bad[] = {"\"pooling\":\"none\",\"long\":{\"mode\":\"chunks\"}",
                                      "\"long\":{\"mode\":\"chunks\",\"aggregate\":\"max\"}",
                                      "\"long\":{\"mode\":\"chunks\",\"stride\":62}", "\"long\":{\"mode\":\"all\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],%s}", a, bad[i]) > 0);
        d = NULL;
        st = ts_request(&srv, "POST", "/v1/embed", body, strlen(body), "application/json", NULL, &d);
        cr_expect_eq(st, 422, "%s: %ld", bad[i], st);
        json_decref(d), free(body);
    }
    free(a);
}
