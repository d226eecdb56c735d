/* test_embed.c - integration tests of POST /v1/embed, POST /v1/tokenize and token-id inputs
 * (server/embed.c, the embed path of server/scheduler.c and server/respond.c), on the real
 * `adapterd serve` over tests/fixtures/registry.
 *
 * The registry's model is tests/fixtures/models/bert-tiny (the same file), whose expected/ holds the
 * float64 PyTorch reference's outputs for known token ids (tools/reference/gen_encoder.py): the
 * embeddings are checked against those, with the encoder unit test's tolerance (2e-5). Mean
 * pooling and L2 normalization are computed here from the reference's last hidden state, in double.
 * Tokenization is checked against the engine's tokenizer, itself parity-tested against
 * transformers.js (tests/parity/tokenizer). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "engine/tokenizer.h"
#include "http_client.h"

/* |server - reference| bound: the encoder unit test's (float32 engine vs float64 reference). */
#define TOL 2e-5
/* Packed in one batch vs alone (tests/engine/model/test_encoder.c's bound). */
#define TOL_ALONE 1e-5

static test_server srv;

static void start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--max-inputs", "16", NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start");
}
static void stop(void) { cr_expect_eq(ts_stop(&srv), 0, "server did not exit 0 after SIGTERM"); }

TestSuite(embed, .init = start, .fini = stop, .timeout = 120);

/* POST path with body; asserts the status and, for 200, that the body matches the document. */
static json_t *post(const char *path, const char *body, long want) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "POST", path, body, NULL, NULL, &r), 0, "POST %s: no answer", path);
    cr_assert_eq(r.status, want, "POST %s %.300s: status %ld, want %ld: %.500s", path, body, r.status, want, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "POST %s: body is not JSON: %.300s", path, r.body);
    char msg[512];
    cr_assert_eq(ts_validate("POST", path, want, d, msg, sizeof msg), 0, "POST %s: %s", path, msg);
    ts_resp_free(&r);
    return d;
}

static void post_error(const char *path, const char *body, const char *ctype, long want, const char *code) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "POST", path, body, ctype, NULL, &r), 0);
    cr_assert_eq(r.status, want, "%s %.200s: status %ld, want %ld: %s", path, body, r.status, want, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(d, "error"), "code")), code, "%s", r.body);
    json_decref(d);
    ts_resp_free(&r);
}

/* ---- the reference ---- */

typedef struct {
    eng_st_file *f;
    int n_seq, n_tok, H;
    const int32_t *ids, *types, *lens;
    const float *hidden, *cls, *pooler; /* (n_tok, H), (n_seq, H), (n_seq, H) */
} reference;

static void ref_open(reference *r, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/bert-tiny/expected/%s.safetensors", ADAPTERD_FIXTURES, name);
    eng_err e = {0};
    cr_assert_eq(eng__st_open(path, &r->f, &e), 0, "%s", e.msg);
    const eng_st_tensor *ids = eng__st_find(r->f, "input_ids"), *ty = eng__st_find(r->f, "token_type_ids"),
                        *ln = eng__st_find(r->f, "seq_lens"), *hs = eng__st_find(r->f, "last_hidden_state"),
                        *cls = eng__st_find(r->f, "cls"), *po = eng__st_find(r->f, "pooler_output");
    cr_assert(ids && ty && ln && hs && cls && po, "%s: missing tensors", path);
    cr_assert(ids->dtype == ENG_DT_I32 && hs->dtype == ENG_DT_F32 && po->dtype == ENG_DT_F32);
    r->n_seq = (int)ln->numel, r->n_tok = (int)ids->numel, r->H = (int)(hs->numel / ids->numel);
    r->ids = ids->data, r->types = ty->data, r->lens = ln->data;
    r->hidden = hs->data, r->cls = cls->data, r->pooler = po->data;
}

/* {"inputs":[{"ids":[...],"type_ids":[...]}, ...], <extra>} for the reference's sequences. */
static char *ids_body(const reference *r, const char *extra) {
    json_t *in = json_array();
    for (int s = 0, off = 0; s < r->n_seq; off += r->lens[s], s++) {
        json_t *ids = json_array(), *ty = json_array();
        for (int t = 0; t < r->lens[s]; t++) {
            json_array_append_new(ids, json_integer(r->ids[off + t]));
            json_array_append_new(ty, json_integer(r->types[off + t]));
        }
        json_array_append_new(in, json_pack("{s:o,s:o}", "ids", ids, "type_ids", ty));
    }
    char *in_s = json_dumps(in, JSON_COMPACT), *body = NULL;
    json_decref(in);
    cr_assert(asprintf(&body, "{\"inputs\":%s,%s}", in_s, extra) > 0);
    free(in_s);
    return body;
}

/* Largest |got - want| over a vector of H. */
static double vec_diff(json_t *got, const double *want, int H) {
    cr_assert_eq((int)json_array_size(got), H, "vector of %zu, want %d", json_array_size(got), H);
    double d = 0;
    for (int k = 0; k < H; k++) {
        double x = fabs(json_number_value(json_array_get(got, (size_t)k)) - want[k]);
        d = x > d || isnan(x) ? x : d;
    }
    return d;
}

static void check_case(const char *name) {
    reference r;
    ref_open(&r, name);
    int H = r.H;
    double *want = malloc(sizeof(double) * (size_t)H);
    cr_assert(want);
    /* every token's vector: the last hidden state */
    char *b = ids_body(&r, "\"pooling\":\"none\",\"normalize\":false");
    json_t *d = post("/v1/embed", b, 200);
    free(b);
    cr_assert_eq((int)json_array_size(d), r.n_seq);
    double worst = 0;
    for (int s = 0, off = 0; s < r.n_seq; off += r.lens[s], s++) {
        json_t *seq = json_array_get(d, (size_t)s);
        cr_assert_eq((int)json_array_size(seq), r.lens[s], "%s: sequence %d", name, s);
        for (int t = 0; t < r.lens[s]; t++) {
            for (int k = 0; k < H; k++) want[k] = r.hidden[(size_t)(off + t) * H + k];
            double x = vec_diff(json_array_get(seq, (size_t)t), want, H);
            worst = x > worst ? x : worst;
        }
    }
    cr_expect(worst <= TOL, "%s: per-token vectors differ from the reference by %g > %g", name, worst, TOL);
    json_decref(d);
    /* pooled forms */
    const char *pools[] = {"cls", "pooler", "mean", "mean_normalized"};
    for (size_t p = 0; p < sizeof pools / sizeof pools[0]; p++) {
        int norm = !strcmp(pools[p], "mean_normalized");
        char extra[128];
        snprintf(extra, sizeof extra, "\"pooling\":\"%s\",\"normalize\":%s", norm ? "mean" : pools[p], norm ? "true" : "false");
        b = ids_body(&r, extra);
        d = post("/v1/embed", b, 200);
        free(b);
        cr_assert_eq((int)json_array_size(d), r.n_seq);
        worst = 0;
        for (int s = 0, off = 0; s < r.n_seq; off += r.lens[s], s++) {
            for (int k = 0; k < H; k++) {
                if (!strcmp(pools[p], "cls")) want[k] = r.cls[(size_t)s * H + k];
                else if (!strcmp(pools[p], "pooler")) want[k] = r.pooler[(size_t)s * H + k];
                else {
                    double acc = 0;
                    for (int t = 0; t < r.lens[s]; t++) acc += r.hidden[(size_t)(off + t) * H + k];
                    want[k] = acc / r.lens[s];
                }
            }
            if (norm) {
                double ss = 0;
                for (int k = 0; k < H; k++) ss += want[k] * want[k];
                for (int k = 0; k < H; k++) want[k] /= sqrt(ss);
            }
            double x = vec_diff(json_array_get(d, (size_t)s), want, H);
            worst = x > worst ? x : worst;
        }
        cr_expect(worst <= TOL, "%s, pooling %s: differs from the reference by %g > %g", name, pools[p], worst, TOL);
        json_decref(d);
    }
    free(want);
    eng__st_close(r.f);
}

Test(embed, equals_the_pytorch_reference_packed) { check_case("packed"); }
Test(embed, equals_the_pytorch_reference_pairs) { check_case("pair"); }

/* ---- tokenize, and text vs its ids ---- */

static eng_tokenizer *fixture_tokenizer(void) {
    eng_tokenizer *tok;
    eng_err e = {0};
    cr_assert_eq(eng_tokenizer_load(ADAPTERD_FIXTURES "/registry/models/bert-tiny", &tok, &e), 0, "%s", e.msg);
    return tok;
}

Test(embed, tokenize_equals_the_tokenizer) {
    const char *text = "The movie, said Jürgen, was great!", *q = "who is john", *ctx = "john is a player in paris";
    json_t *d = post("/v1/tokenize",
                     "{\"inputs\":[\"The movie, said J\\u00fcrgen, was great!\",{\"text\":\"who is john\",\"text_pair\":"
                     "\"john is a player in paris\"}]}",
                     200);
    eng_tokenizer *tok = fixture_tokenizer();
    eng_tok_params p = eng_tok_default_params();
    p.truncation = ENG_TOK_TRUNCATE_NONE;
    for (int i = 0; i < 2; i++) {
        eng_tok_encoding enc;
        eng_err e = {0};
        const char *t = i ? q : text, *pair = i ? ctx : NULL;
        cr_assert_eq(eng_tok_encode(tok, t, strlen(t), pair, pair ? strlen(pair) : 0, &p, &enc, &e), 0, "%s", e.msg);
        json_t *toks = json_array_get(d, (size_t)i);
        cr_assert_eq(json_array_size(toks), enc.n, "input %d", i);
        for (size_t k = 0; k < enc.n; k++) {
            json_t *o = json_array_get(toks, k);
            cr_expect_eq(json_integer_value(json_object_get(o, "id")), enc.ids[k]);
            cr_expect_str_eq(json_string_value(json_object_get(o, "token")), eng_tok_id_to_token(tok, enc.ids[k]));
            cr_expect_eq(json_is_true(json_object_get(o, "special")), enc.special_mask[k] == 1);
            if (enc.special_mask[k]) {
                cr_expect(json_is_null(json_object_get(o, "start")));
                continue;
            }
            int s0 = (int)json_integer_value(json_object_get(o, "start")), s1 = (int)json_integer_value(json_object_get(o, "stop"));
            cr_expect_eq(s0, enc.offsets[2 * k]);
            cr_expect_eq(s1, enc.offsets[2 * k + 1]);
            const char *src = enc.seq_ids[k] == 1 ? pair : t;
            int b0 = enc.byte_offsets[2 * k], b1 = enc.byte_offsets[2 * k + 1];
            cr_expect(strlen(json_string_value(json_object_get(o, "text"))) == (size_t)(b1 - b0) &&
                          !strncmp(json_string_value(json_object_get(o, "text")), src + b0, (size_t)(b1 - b0)),
                      "token %zu text \"%s\" is not the input's span", k, json_string_value(json_object_get(o, "text")));
            cr_expect_eq(json_integer_value(json_object_get(o, "seq")), enc.seq_ids[k]);
        }
        eng_tok_encoding_free(&enc);
    }
    json_decref(d);
    /* without special tokens */
    d = post("/v1/tokenize", "{\"inputs\":\"who is john\",\"add_special_tokens\":false}", 200);
    json_t *toks = json_array_get(d, 0);
    for (size_t k = 0; k < json_array_size(toks); k++) cr_expect(json_is_false(json_object_get(json_array_get(toks, k), "special")));
    json_decref(d);
    eng_tokenizer_free(tok);
}

/* "[101, 7, 102]" as JSON from a tokenize answer's first input. */
static char *ids_of(json_t *tokenized) {
    json_t *a = json_array(), *toks = json_array_get(tokenized, 0);
    for (size_t k = 0; k < json_array_size(toks); k++) json_array_append(a, json_object_get(json_array_get(toks, k), "id"));
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

Test(embed, text_and_its_ids_give_the_same_answers) {
    json_t *t = post("/v1/tokenize", "{\"inputs\":\"the film was terrible and boring\"}", 200);
    char *ids = ids_of(t), *b1 = NULL, *b2 = NULL;
    json_decref(t);
    /* embed: default pooling (no 1_Pooling config in the fixture: cls) and normalization (on) */
    json_t *a = post("/v1/embed", "{\"inputs\":\"the film was terrible and boring\"}", 200);
    cr_assert(asprintf(&b1, "{\"inputs\":[%s],\"pooling\":\"cls\"}", ids) > 0);
    json_t *b = post("/v1/embed", b1, 200);
    json_t *va = json_array_get(a, 0), *vb = json_array_get(b, 0);
    double ss = 0, diff = 0;
    for (size_t k = 0; k < json_array_size(va); k++) {
        double x = json_number_value(json_array_get(va, k));
        ss += x * x;
        double d = fabs(x - json_number_value(json_array_get(vb, k)));
        diff = d > diff ? d : diff;
    }
    cr_expect(json_array_size(va) == 64 && json_array_size(vb) == 64);
    cr_expect(fabs(ss - 1) < 1e-5, "normalize defaults to true: |v|^2 = %g", ss);
    cr_expect(diff <= TOL_ALONE, "text and its ids embed differently: %g", diff);
    json_decref(a), json_decref(b);
    /* predict: the same logits */
    a = post("/v1/predict", "{\"inputs\":\"the film was terrible and boring\",\"tasks\":[\"cls_lora\",\"ner\"],\"return\":{\"logits\":true}}", 200);
    cr_assert(asprintf(&b2, "{\"inputs\":[%s],\"tasks\":[\"cls_lora\",\"ner\"],\"return\":{\"logits\":true}}", ids) > 0);
    b = post("/v1/predict", b2, 200);
    json_t *la = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(a, "results"), 0), "tasks"), "cls_lora"), "logits");
    json_t *lb = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(b, "results"), 0), "tasks"), "cls_lora"), "logits");
    cr_assert_eq(json_array_size(la), 2);
    cr_assert_eq(json_array_size(lb), 2);
    for (size_t k = 0; k < 2; k++)
        cr_expect(fabs(json_number_value(json_array_get(la, k)) - json_number_value(json_array_get(lb, k))) <= TOL_ALONE);
    json_t *ta = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(a, "results"), 0), "tasks"), "ner"), "tokens");
    json_t *tb = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(b, "results"), 0), "tasks"), "ner"), "tokens");
    cr_expect_eq(json_array_size(ta), json_array_size(tb), "tagging leaves the same special tokens out");
    for (size_t k = 0; k < json_array_size(ta) && k < json_array_size(tb); k++)
        cr_expect_str_eq(json_string_value(json_object_get(json_array_get(ta, k), "label")),
                         json_string_value(json_object_get(json_array_get(tb, k), "label")));
    json_decref(a), json_decref(b);
    free(ids), free(b1), free(b2);
}

Test(embed, errors) {
    post_error("/v1/embed", "{\"inputs\":\"x\"}", "text/plain", 415, "unsupported_media_type");
    /* the media type is compared whole, as for /v1/predict: a longer type that starts alike is refused */
    post_error("/v1/embed", "{\"inputs\":\"x\"}", "application/jsonx", 415, "unsupported_media_type");
    post_error("/v1/tokenize", "{\"inputs\":\"x\"}", "application/jsonx", 415, "unsupported_media_type");
    post_error("/v1/predict", "{\"inputs\":\"x\"}", "application/jsonx", 415, "unsupported_media_type");
    post_error("/v1/embed", "{\"inputs\":", NULL, 400, "malformed");
    post_error("/v1/embed", "{\"inputs\":\"x\",\"pooling\":\"max\"}", NULL, 422, "invalid_argument");
    post_error("/v1/embed", "{\"inputs\":\"x\",\"model\":\"nope\"}", NULL, 404, "not_found");
    post_error("/v1/embed", "{\"inputs\":[[2,5000,3]]}", NULL, 422, "invalid_argument");
    post_error("/v1/embed", "{\"inputs\":[{\"ids\":[2,5,3],\"type_ids\":[0,2,0]}]}", NULL, 422, "invalid_argument");
    post_error("/v1/predict", "{\"inputs\":[[2,5000,3]],\"tasks\":[\"reg\"]}", NULL, 422, "invalid_argument");
    post_error("/v1/tokenize", "{\"inputs\":[[2,5,3]]}", NULL, 422, "invalid_argument");
    post_error("/v1/embed", "{\"inputs\":\"x\",\"bogus\":1}", NULL, 422, "invalid_argument");
    /* bert-tiny has 64 positions: a longer text is refused unless truncated, ids never are */
    char body[2048] = "{\"inputs\":\"";
    for (int i = 0; i < 100; i++) strcat(body, "movie ");
    strcat(body, "\"}");
    post_error("/v1/embed", body, NULL, 422, "invalid_argument");
    strcpy(body + strlen(body) - 1, ",\"truncate\":true}");
    json_decref(post("/v1/embed", body, 200));
    strcpy(body, "{\"inputs\":[[2");
    for (int i = 0; i < 64; i++) strcat(body, ",5");
    strcat(body, "]],\"truncate\":true}");
    post_error("/v1/embed", body, NULL, 422, "invalid_argument");
}

/* Embeds and predictions from many clients at once share the queue and the workers; each answer
 * equals the one its request gets alone. */
typedef struct {
    int id;
    double worst;
    int failures;
} client;

static void *client_main(void *arg) {
    client *c = arg;
    const char *texts[] = {"the movie was great", "a terrible boring film", "who is john", "paris in the spring"};
    for (int n = 0; n < 8; n++) {
        const char *t = texts[(c->id + n) % 4];
        char body[256];
        int embed = (c->id + n) % 2 == 0;
        if (embed) snprintf(body, sizeof body, "{\"inputs\":\"%s\",\"normalize\":false}", t);
        else snprintf(body, sizeof body, "{\"inputs\":\"%s\",\"tasks\":[\"cls_lora\"],\"return\":{\"logits\":true}}", t);
        ts_resp r, alone;
        if (ts_http(&srv, "POST", embed ? "/v1/embed" : "/v1/predict", body, NULL, NULL, &r) || r.status != 200) {
            c->failures++;
            continue;
        }
        /* the same request again, alone afterwards (the test's main thread holds no other) */
        if (ts_http(&srv, "POST", embed ? "/v1/embed" : "/v1/predict", body, NULL, NULL, &alone) || alone.status != 200) {
            c->failures++;
            ts_resp_free(&r);
            continue;
        }
        json_t *a = json_loads(r.body, 0, NULL), *b = json_loads(alone.body, 0, NULL);
        json_t *va = embed ? json_array_get(a, 0)
                           : json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(a, "results"), 0), "tasks"), "cls_lora"), "logits");
        json_t *vb = embed ? json_array_get(b, 0)
                           : json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(b, "results"), 0), "tasks"), "cls_lora"), "logits");
        if (!va || !vb || json_array_size(va) != json_array_size(vb) || json_array_size(va) != (embed ? 64u : 2u)) c->failures++;
        for (size_t k = 0; va && vb && k < json_array_size(va); k++) {
            double d = fabs(json_number_value(json_array_get(va, k)) - json_number_value(json_array_get(vb, k)));
            c->worst = d > c->worst ? d : c->worst;
        }
        json_decref(a), json_decref(b);
        ts_resp_free(&r), ts_resp_free(&alone);
    }
    return NULL;
}

Test(embed, embeds_and_predictions_share_the_queue) {
    enum { N = 6 };
    client cs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        cs[i] = (client){.id = i};
        cr_assert_eq(pthread_create(&th[i], NULL, client_main, &cs[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(cs[i].failures, 0, "client %d", i);
        cr_expect(cs[i].worst <= TOL_ALONE, "client %d: batched and later answers differ by %g", i, cs[i].worst);
    }
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "GET", "/metrics", NULL, NULL, NULL, &r), 0);
    cr_expect(strstr(r.body, "adapterd_requests_total{route=\"/v1/embed\",code=\"200\"}"), "embeds are counted by route");
    cr_expect(strstr(r.body, "adapterd_task_request_duration_seconds_bucket{task=\"cls_lora\",le=\"+Inf\"}"),
              "predictions are timed per task");
    ts_resp_free(&r);
}

/* GET /docs: the page, its script and their licence texts when the build found Redoc, else a 503
 * that says why. */
Test(embed, docs_page_or_a_reason) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "GET", "/docs", NULL, NULL, NULL, &r), 0);
    if (r.status == 503) {
        /* No cr_skip_test here: a skipped test does not run the suite's .fini, and the server it
         * leaves behind holds ctest's output pipe open until the timeout. */
        cr_expect(strstr(r.body, "redoc"), "%s", r.body);
        cr_log_info("this build has no Redoc bundle: checked the 503's reason only");
        ts_resp_free(&r);
        return;
    }
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.content_type, "text/html"));
    cr_expect(strstr(r.body, "spec-url=\"openapi.json\"") && strstr(r.body, "docs/redoc.standalone.js"));
    ts_resp_free(&r);
    cr_assert_eq(ts_http(&srv, "GET", "/docs/redoc.standalone.js", NULL, NULL, NULL, &r), 0);
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.content_type, "javascript"));
    cr_expect_gt(r.len, 100000, "the whole bundle");
    cr_expect(strstr(r.body, "redoc.standalone.js.LICENSE.txt"), "the bundle names its licence file");
    ts_resp_free(&r);
    /* Redoc's MIT licence and its bundle's notices travel with it, where the bundle says */
    cr_assert_eq(ts_http(&srv, "GET", "/docs/redoc.standalone.js.LICENSE.txt", NULL, NULL, NULL, &r), 0);
    cr_expect_eq(r.status, 200);
    cr_expect(strstr(r.content_type, "text/plain"));
    cr_expect(strstr(r.body, "The MIT License") && strstr(r.body, "Rebilly"), "Redoc's own licence first");
    cr_expect(strstr(r.body, "ReDoc - OpenAPI/Swagger-generated API Reference Documentation"), "then the bundle's notices");
    ts_resp_free(&r);
}
