/* test_server.c - integration tests of `adapterd serve` (server/, proto/, adapters_store/): the real
 * binary on 127.0.0.1 with a free port, on tests/fixtures/registry (bert-tiny + fixture adapters),
 * called with libcurl. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/task.h"
#include "http_client.h"
#include "test_post.h"
#include "prom_text.h"
#include "engine/run.h"
#include "engine/tokenizer.h"

static test_server srv;

static void start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--max-body-bytes", "65536", "--max-inputs", "8", NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start");
}
static void stop(void) { cr_expect_eq(ts_stop(&srv), 0, "server did not exit 0 after SIGTERM"); }

static json_t *call(const char *method, const char *path, const char *tmpl, const char *body, long want) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, method, path, body, NULL, NULL, &r), 0, "%s %s: no answer", method, path);
    cr_assert_eq(r.status, want, "%s %s: status %ld, want %ld: %s", method, path, r.status, want, r.body);
    cr_assert(r.request_id[0], "%s %s: no X-Request-Id", method, path);
    json_t *doc = json_loads(r.body, 0, NULL);
    cr_assert(doc, "%s %s: body is not JSON: %s", method, path, r.body);
    char msg[512];
    cr_assert_eq(ts_validate(method, tmpl, want, doc, msg, sizeof msg), 0, "%s %s: %s\n%s", method, path, msg, r.body);
    ts_resp_free(&r);
    return doc;
}

static void expect_error(const char *method, const char *path, const char *tmpl, const char *body, const char *ctype,
                         long want, const char *code) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, method, path, body, ctype, NULL, &r), 0);
    cr_assert_eq(r.status, want, "%s %s %s: status %ld, want %ld: %s", method, path, body ? body : "", r.status, want,
                 r.body);
    json_t *doc = json_loads(r.body, 0, NULL);
    cr_assert(doc, "error body is not JSON: %s", r.body);
    json_t *e = json_object_get(doc, "error");
    if (!strncmp(path, "/v2/", 4)) {
        /* the KServe v2 protocol's shape, {"error": "<message>"}: no code to compare */
        cr_assert(json_is_string(e) && json_string_length(e) > 0 && json_object_size(doc) == 1,
                  "a v2 error body must be {\"error\": \"<message>\"}: %s", r.body);
        (void)code;
    } else {
        cr_assert(json_is_string(json_object_get(e, "code")) && json_is_string(json_object_get(e, "message")),
                  "error body must be {\"error\":{\"code\",\"message\"}}: %s", r.body);
        cr_assert_str_eq(json_string_value(json_object_get(e, "code")), code, "%s", r.body);
    }
    if (tmpl) {
        char msg[512];
        cr_assert_eq(ts_validate(method, tmpl, want, doc, msg, sizeof msg), 0, "%s", msg);
    }
    json_decref(doc);
    ts_resp_free(&r);
}

TestSuite(server, .init = start, .fini = stop, .timeout = 60);

Test(server, every_get_route_answers_and_matches_openapi) {
    const char *routes[][2] = {{"/healthz", "/healthz"},
                               {"/readyz", "/readyz"},
                               {"/v1/tasks", "/v1/tasks"},
                               {"/v1/tasks/cls_lora", "/v1/tasks/{name}"},
                               {"/v1/models", "/v1/models"},
                               {"/openapi.json", "/openapi.json"},
                               {"/v2/health/live", "/v2/health/live"},
                               {"/v2/health/ready", "/v2/health/ready"},
                               {"/v2/models/ml", "/v2/models/{task}"},
                               {"/v2/models/ml/ready", "/v2/models/{task}/ready"}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) json_decref(call("GET", routes[i][0], routes[i][1], NULL, 200));
    json_t *t = call("GET", "/v1/tasks", "/v1/tasks", NULL, 200);
    cr_assert_eq(json_array_size(json_object_get(t, "tasks")), 7);
    json_decref(t);
    t = call("GET", "/v1/tasks/cls_lora", "/v1/tasks/{name}", NULL, 200);
    cr_assert_str_eq(json_string_value(json_object_get(t, "version")), "1", "highest version wins");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(t, "skips"), "max")), 1, "task.json skips");
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(t, "labels"), 1)), "positive");
    json_decref(t);
}

Test(server, metrics_are_prometheus_text) {
    json_decref(call("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"the movie\",\"tasks\":[\"cls_lora\"]}", 200));
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "GET", "/metrics", NULL, NULL, NULL, &r), 0);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.content_type, "text/plain"));
    const char *want[] = {"adapterd_requests_total{route=\"/v1/predict\",code=\"200\"} 1",
                          "adapterd_request_duration_seconds_bucket{route=\"/v1/predict\"",
                          "adapterd_queue_wait_seconds_count",
                          "adapterd_batch_requests_bucket",
                          "adapterd_batch_tokens_bucket",
                          "adapterd_tokens_total 4",
                          "adapterd_task_requests_total{task=\"cls_lora\"} 1",
                          "adapterd_task_skip_total{task=\"cls_lora\",skip=\"0\"} 1",
                          "adapterd_tasks_resident 7",
                          "adapterd_task_resident{task=\"qa\"} 1",
                          "adapterd_inference_tokens_total{precision=\"fp32\"} 4",
                          "adapterd_inference_batches_total{precision=\"fp32\"} 1"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_expect(strstr(r.body, want[i]), "missing %s in\n%s", want[i], r.body);
    char msg[512];
    cr_expect_eq(prom_check(r.body, msg, sizeof msg), 0, "not exposition format: %s\n%s", msg, r.body);
    ts_resp_free(&r);
}

Test(server, predict_all_heads_matches_openapi) {
    json_t *d = call("POST", "/v1/predict", "/v1/predict",
                     "{\"inputs\":[\"the movie was great\",{\"text\":\"who is john\",\"text_pair\":\"john is a player in paris\"}],"
                     "\"return\":{\"logits\":true,\"explain\":true}}",
                     200);
    json_t *res = json_object_get(d, "results");
    cr_assert_eq(json_array_size(res), 2);
    json_t *tasks = json_object_get(json_array_get(res, 1), "tasks");
    cr_assert_eq(json_object_size(tasks), 7, "default: every task");
    cr_assert(json_is_string(json_object_get(json_object_get(tasks, "cls_lora"), "label")));
    cr_assert(json_is_number(json_object_get(json_object_get(tasks, "reg"), "value")));
    cr_assert(json_is_array(json_object_get(json_object_get(tasks, "ml"), "labels")));
    json_t *toks = json_object_get(json_object_get(tasks, "ner"), "tokens");
    cr_assert_eq(json_array_size(toks), 9, "tagging: one entry per non-special token");
    json_t *ans = json_object_get(json_object_get(tasks, "qa"), "answer");
    const char *ctx = "john is a player in paris";
    int s0 = (int)json_integer_value(json_object_get(ans, "start")), s1 = (int)json_integer_value(json_object_get(ans, "end"));
    cr_assert(s0 >= 0 && s1 > s0 && s1 <= (int)strlen(ctx));
    cr_assert_eq(strncmp(json_string_value(json_object_get(ans, "text")), ctx + s0, (size_t)(s1 - s0)), 0,
                 "QA text is the context span [start, end)");
    cr_assert(json_is_array(json_object_get(json_object_get(d, "explain"), "layers")));
    json_decref(d);
}

/* The server's logits equal an eng_run of the same task on the same tokens in this process. */
Test(server, predictions_equal_the_engine) {
    const char *text = "the film was terrible and boring";
    json_t *d = call("POST", "/v1/predict", "/v1/predict",
                     "{\"inputs\":\"the film was terrible and boring\",\"tasks\":[\"cls_lora\",\"peft\"],"
                     "\"skip\":{\"cls_lora\":1},\"return\":{\"logits\":true}}",
                     200);
    eng_model *m;
    eng_tokenizer *tok;
    eng_task *t1, *t2;
    eng_err e;
    cr_assert_eq(eng_model_load(ADAPTERD_FIXTURES "/registry/models/bert-tiny", &m, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_tokenizer_load(ADAPTERD_FIXTURES "/registry/models/bert-tiny", &tok, &e), 0, "%s", e.msg);
    const char *d1[] = {ADAPTERD_FIXTURES "/registry/tasks/cls_lora/1/lora"};
    const char *d2[] = {ADAPTERD_FIXTURES "/registry/tasks/peft/1/peft_task"};
    eng_task_params tp = eng_task_default_params();
    cr_assert_eq(eng_task_load(m, d1, 1, &tp, &t1, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_task_load(m, d2, 1, &tp, &t2, &e), 0, "%s", e.msg);
    eng_tok_encoding enc;
    eng_tok_params pp = eng_tok_default_params();
    pp.max_length = 64;
    cr_assert_eq(eng_tok_encode(tok, text, strlen(text), NULL, 0, &pp, &enc, &e), 0);
    eng_task_req reqs[] = {{t1, 1}, {t2, 0}};
    eng_input in = {.ids = enc.ids, .type_ids = enc.type_ids, .len = (int)enc.n, .tasks = reqs, .n_tasks = 2};
    eng_task_out outs[2];
    eng_state *st = eng_state_new(1);
    cr_assert_eq(eng_run(m, st, &in, 1, outs, NULL, &e), 0, "%s", e.msg);
    json_t *tasks = json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks");
    const char *names[] = {"cls_lora", "peft"};
    for (int k = 0; k < 2; k++) {
        json_t *tr = json_object_get(tasks, names[k]);
        cr_assert_eq(json_integer_value(json_object_get(tr, "skip")), reqs[k].skip);
        json_t *lg = json_object_get(tr, "logits");
        cr_assert_eq((int)json_array_size(lg), outs[k].num_labels);
        for (int i = 0; i < outs[k].num_labels; i++) {
            double got = json_number_value(json_array_get(lg, (size_t)i));
            cr_expect(fabs(got - outs[k].logits[i]) <= 1e-5, "%s logit %d: server %g, engine %g", names[k], i, got,
                      outs[k].logits[i]);
        }
    }
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tokens")), (json_int_t)enc.n);
    eng_task_outs_free(outs, 2);
    eng_state_free(st);
    eng_tok_encoding_free(&enc);
    eng_task_free(t1);
    eng_task_free(t2);
    eng_tokenizer_free(tok);
    eng_model_free(m);
    json_decref(d);
}

Test(server, kserve_v2_infer) {
    json_t *d = call("POST", "/v2/models/cls_lora/infer", "/v2/models/{task}/infer",
                     "{\"inputs\":[{\"name\":\"text\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"great movie\",\"bad\"]}]}", 200);
    json_t *outs = json_object_get(d, "outputs");
    cr_assert_eq(json_array_size(outs), 3);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(outs, 0), "name")), "label");
    cr_assert_eq(json_array_size(json_object_get(json_array_get(outs, 2), "data")), 4, "scores is [2, 2]");
    json_decref(d);
    d = call("POST", "/v2/models/reg/infer", "/v2/models/{task}/infer",
             "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"x\"]}]}", 200);
    json_decref(d);
    expect_error("POST", "/v2/models/nope/infer", "/v2/models/{task}/infer",
                 "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"x\"]}]}", NULL, 404, "not_found");
    expect_error("POST", "/v2/models/ml/infer", "/v2/models/{task}/infer",
                 "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}", NULL, 422,
                 "invalid_argument");
}

Test(server, every_error_status) {
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\": [", NULL, 400, "malformed");
    expect_error("POST", "/v1/predict", "/v1/predict", "[1]", NULL, 400, "malformed");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"nope\"]}", NULL, 404, "not_found");
    expect_error("GET", "/v1/tasks/nope", "/v1/tasks/{name}", NULL, NULL, 404, "not_found");
    expect_error("GET", "/v2/models/nope", "/v2/models/{task}", NULL, NULL, 404, "not_found");
    expect_error("GET", "/no/such/route", NULL, NULL, NULL, 404, "not_found");
    expect_error("GET", "/v1/predict", NULL, NULL, NULL, 405, "method_not_allowed");
    expect_error("DELETE", "/v1/tasks", NULL, NULL, NULL, 405, "method_not_allowed");
    char *big = malloc(70000);
    memset(big, 'a', 69999);
    big[69999] = '\0';
    memcpy(big, "{\"inputs\":\"", 11);
    expect_error("POST", "/v1/predict", "/v1/predict", big, NULL, 413, "too_large");
    free(big);
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\"}", "text/plain", 415, "unsupported_media_type");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":42}", NULL, 422, "invalid_argument");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"bogus\":1}", NULL, 422, "invalid_argument");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"budget\":2}", NULL, 422, "invalid_argument");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}", NULL,
                 422, "limit");
    /* skips: out of the task's range is a 422 naming the range, never silently changed */
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"cls_lora\"],\"skip\":2}", NULL, 422,
                 "invalid_argument");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"peft\"],\"skip\":1}", NULL, 422,
                 "invalid_argument");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"peft\"],\"skip\":{\"cls_lora\":1}}",
                 NULL, 422, "invalid_argument");
    /* sequence length: bert-tiny has 64 positions */
    char longtxt[2048] = "{\"inputs\":\"";
    for (int i = 0; i < 100; i++) strcat(longtxt, "movie ");
    strcat(longtxt, "\",\"tasks\":[\"reg\"],\"truncate\":false}");
    expect_error("POST", "/v1/predict", "/v1/predict", longtxt, NULL, 422, "invalid_argument");
    strcpy(strstr(longtxt, "false"), "true}");
    json_t *d = call("POST", "/v1/predict", "/v1/predict", longtxt, 200);
    json_t *r0 = json_array_get(json_object_get(d, "results"), 0);
    cr_assert_eq(json_integer_value(json_object_get(r0, "tokens")), 64);
    cr_assert(json_is_true(json_object_get(r0, "truncated")));
    json_decref(d);
}

Test(server, budget_and_skip_map_into_the_allowed_range) {
    json_t *d = call("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"cls_lora\",\"peft\"],\"budget\":0}", 200);
    json_t *t = json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(t, "cls_lora"), "skip")), 1, "budget 0: largest skip");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(t, "peft"), "skip")), 0);
    json_decref(d);
    d = call("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"cls_lora\"],\"budget\":1}", 200);
    t = json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(t, "cls_lora"), "skip")), 0, "budget 1: smallest skip");
    json_decref(d);
}

/* Budgets at half-way points on an odd range: the server must give the engine's skip
 * (eng_skip_for_budget), whose documented definition (proto/openapi.yaml, "budget") is
 * min + round((1 - budget) * (max - min)) with halves rounded up. cls_lora allows skips 0..1 (its
 * task.json), so budget 0.5 gives 0 + round(0.5) = 1; the server once answered 0 there. */
Test(server, budget_rounds_like_the_engine_rule) {
    eng_model *m;
    eng_task *t;
    eng_err e;
    cr_assert_eq(eng_model_load(ADAPTERD_FIXTURES "/registry/models/bert-tiny", &m, &e), 0, "%s", e.msg);
    const char *dir[] = {ADAPTERD_FIXTURES "/registry/tasks/cls_lora/1/lora"};
    eng_task_params tp = eng_task_default_params();
    cr_assert_eq(eng_task_load(m, dir, 1, &tp, &t, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_task_set_skips(t, (eng_skip_range){0, 1, 0}, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_skip_for_budget(t, 0.5), 1, "the documented rule: 0 + round(0.5 * 1) = 1");
    const double budgets[] = {0.0, 0.25, 0.5, 0.5000001, 0.75, 1.0};
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"inputs\":\"x\",\"tasks\":[\"cls_lora\"],\"budget\":%.9g}", budgets[i]);
        json_t *d = call("POST", "/v1/predict", "/v1/predict", body, 200);
        json_t *tr = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "cls_lora");
        int want = eng_skip_for_budget(t, budgets[i]);
        cr_expect_eq(json_integer_value(json_object_get(tr, "skip")), want, "budget %g: server skip %lld, engine %d",
                     budgets[i], (long long)json_integer_value(json_object_get(tr, "skip")), want);
        cr_expect_str_eq(json_string_value(json_object_get(tr, "skip_source")), "budget");
        json_decref(d);
    }
    eng_task_free(t);
    eng_model_free(m);
}

Test(server, request_id_is_echoed) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "GET", "/healthz", NULL, NULL, "X-Request-Id: abc-123", &r), 0);
    cr_assert_str_eq(r.request_id, "abc-123");
    ts_resp_free(&r);
    cr_assert_eq(ts_http(&srv, "POST", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"reg\"]}", NULL, "X-Request-Id: req-7", &r), 0);
    cr_assert_str_eq(r.request_id, "req-7");
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(d, "id")), "req-7");
    json_decref(d);
    ts_resp_free(&r);
}

/* ---- concurrency: answers never mix ---- */

#define N_CLIENTS 8
#define N_EACH 12
static const char *const texts[] = {"the movie was great", "terrible plot", "stock market news", "who won the game",
                                    "paris is the capital of france", "i love this song", "bad acting", "the team lost"};
static const char *const tsets[] = {"[\"cls_lora\"]", "[\"peft\",\"ml\"]", "[\"ner\",\"reg\"]", "[\"fusion\",\"cls_lora\",\"qa\"]"};

static char *body_for(int c, int i) {
    char *b = malloc(512);
    /* every input is a pair: QA needs its context */
    snprintf(b, 512, "{\"inputs\":[{\"text\":\"%s\",\"text_pair\":\"%s\"},{\"text\":\"%s\",\"text_pair\":\"%s\"}],\"tasks\":%s}",
             texts[(c + i) % 8], texts[(c + 5) % 8], texts[(c * 3 + i) % 8], texts[(i + 3) % 8], tsets[(c + 2 * i) % 4]);
    return b;
}

/* Compares the results of two answers: same labels, scores within 1e-4. */
static int same_results(json_t *a, json_t *b) {
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_number(a)) return fabs(json_number_value(a) - json_number_value(b)) <= 1e-4;
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) if (!same_results(v, json_object_get(b, k))) return 0;
        return 1;
    }
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same_results(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    return json_equal(a, b);
}

static json_t *alone[N_CLIENTS][N_EACH];
static int mismatches, failures;

static void *client(void *arg) {
    int c = (int)(intptr_t)arg;
    for (int i = 0; i < N_EACH; i++) {
        char *b = body_for(c, i);
        ts_resp r;
        if (ts_http(&srv, "POST", "/v1/predict", b, NULL, NULL, &r) || r.status != 200) {
            __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
        } else {
            json_t *d = json_loads(r.body, 0, NULL);
            if (!d || !same_results(json_object_get(d, "results"), alone[c][i])) __atomic_add_fetch(&mismatches, 1, __ATOMIC_SEQ_CST);
            json_decref(d);
        }
        ts_resp_free(&r);
        free(b);
    }
    return NULL;
}

Test(server, concurrent_clients_never_mix_answers) {
    for (int c = 0; c < N_CLIENTS; c++)
        for (int i = 0; i < N_EACH; i++) {
            char *b = body_for(c, i);
            json_t *d = call("POST", "/v1/predict", "/v1/predict", b, 200);
            alone[c][i] = json_incref(json_object_get(d, "results"));
            json_decref(d);
            free(b);
        }
    pthread_t th[N_CLIENTS];
    for (int c = 0; c < N_CLIENTS; c++) pthread_create(&th[c], NULL, client, (void *)(intptr_t)c);
    for (int c = 0; c < N_CLIENTS; c++) pthread_join(th[c], NULL);
    cr_assert_eq(failures, 0, "%d requests failed", failures);
    cr_assert_eq(mismatches, 0, "%d answers differ from the same request sent alone", mismatches);
    /* and batching did happen */
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "GET", "/metrics", NULL, NULL, NULL, &r), 0);
    cr_assert(strstr(r.body, "adapterd_batch_requests_count"));
    ts_resp_free(&r);
    for (int c = 0; c < N_CLIENTS; c++)
        for (int i = 0; i < N_EACH; i++) json_decref(alone[c][i]);
}

/* ---- servers with their own settings ---- */

#define TWO_INPUTS "{\"inputs\":[\"the movie\",\"a song\"]}"

/* Every step waits for the state it needs (bounded), not for a fixed time: the requests are queued
 * before SIGTERM, readiness has turned false before new work is tried, and the queued jobs are
 * still queued then, so their 200s were answered by the drain. The batch's 3 s quiet window is the
 * only margin, and it is one for a stalled machine, not a schedule. */
Test(lifecycle, drain_on_sigterm_completes_in_flight_requests, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    /* a batch closes only once no job has arrived for 3 s: the requests stay queued through SIGTERM */
    const char *args[] = {"--max-wait-us", "3000000", "--max-batch-tokens", "100000", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    enum { N = 12 };
    ts_post a[N];
    for (int i = 0; i < N; i++) cr_assert_eq(ts_post_start(&a[i], &s, "/v1/predict", TWO_INPUTS), 0);
    cr_assert_eq(ts_wait_metric(&s, "adapterd_queue_depth", N, 20000), N, "all requests queued before SIGTERM");
    kill(s.pid, SIGTERM);
    ts_resp r;
    int ready = 200;
    for (int waited = 0; ready != 503 && waited < 20000; waited += 5) {
        cr_assert_eq(ts_http(&s, "GET", "/readyz", NULL, NULL, NULL, &r), 0, "the server answers while draining");
        ready = (int)r.status;
        ts_resp_free(&r);
        if (ready != 503) ts_sleep_ms(5);
    }
    cr_expect_eq(ready, 503, "readiness turns false while draining");
    cr_assert_eq(ts_http(&s, "POST", "/v1/predict", "{\"inputs\":\"x\"}", NULL, NULL, &r), 0);
    cr_expect_eq(r.status, 503, "new work is refused while draining");
    ts_resp_free(&r);
    cr_expect_eq(ts_metric(&s, "adapterd_queue_depth"), N, "the in-flight requests were still queued when the drain began");
    for (int i = 0; i < N; i++) {
        ts_post_join(&a[i]);
        cr_expect_eq(a[i].resp.status, 200, "in-flight request %d: status %ld", i, a[i].resp.status);
        ts_resp_free(&a[i].resp);
    }
    cr_assert_eq(ts_wait_exit(&s, 20000), 0, "the drain ends the process, exit status 0");
}

Test(lifecycle, flood_gets_429_with_retry_after, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--max-queue", "2", "--max-wait-us", "200000", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    enum { N = 16 };
    ts_post a[N];
    for (int i = 0; i < N; i++) cr_assert_eq(ts_post_start(&a[i], &s, "/v1/predict", TWO_INPUTS), 0);
    int ok = 0, busy = 0;
    for (int i = 0; i < N; i++) {
        ts_post_join(&a[i]);
        if (a[i].resp.status == 200) ok++;
        else if (a[i].resp.status == 429) {
            busy++;
            cr_expect(a[i].resp.retry_after[0], "429 without Retry-After");
        } else
            cr_expect(0, "unexpected status %ld", a[i].resp.status);
        ts_resp_free(&a[i].resp);
    }
    cr_expect(ok >= 1 && busy >= 1, "%d ok, %d busy", ok, busy);
    cr_assert_eq(ts_stop(&s), 0);
}

Test(lifecycle, config_precedence_flags_file_env, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char cfg[] = "adapterd-cfg-XXXXXX";
    int fd = mkstemp(cfg);
    cr_assert(fd >= 0);
    dprintf(fd, "{\"max-inputs\": 2, \"max_tasks\": 1}\n");
    close(fd);
    test_server s;
    const char *args[] = {"--config", cfg, NULL};
    const char *env[] = {"ADAPTERD_MAX_INPUTS=1", "ADAPTERD_MAX_TASKS=5", NULL};
    cr_assert_eq(ts_start(&s, args, env), 0);
    ts_resp r;
    ts_http(&s, "POST", "/v1/predict", "{\"inputs\":[\"a\",\"b\"],\"tasks\":[\"reg\"]}", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "file (2) beats env (1): %s", r.body);
    ts_resp_free(&r);
    ts_http(&s, "POST", "/v1/predict", "{\"inputs\":[\"a\",\"b\"],\"tasks\":[\"reg\",\"ml\"]}", NULL, NULL, &r);
    cr_expect_eq(r.status, 422, "file max_tasks 1 beats env 5: %s", r.body);
    ts_resp_free(&r);
    cr_assert_eq(ts_stop(&s), 0);
    const char *args2[] = {"--config", cfg, "--max-inputs", "3", NULL};
    cr_assert_eq(ts_start(&s, args2, env), 0);
    ts_http(&s, "POST", "/v1/predict", "{\"inputs\":[\"a\",\"b\",\"c\"],\"tasks\":[\"reg\"]}", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "flag (3) beats file (2): %s", r.body);
    ts_resp_free(&r);
    cr_assert_eq(ts_stop(&s), 0);
    unlink(cfg);
}

Test(lifecycle, allow_skip_widens_the_range, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--allow-skip", "2", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    ts_resp r;
    ts_http(&s, "POST", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"peft\"],\"skip\":2}", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    ts_resp_free(&r);
    ts_http(&s, "POST", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"peft\"],\"skip\":3}", NULL, NULL, &r);
    cr_expect_eq(r.status, 422, "skip 3 > L = 2: %s", r.body);
    ts_resp_free(&r);
    cr_assert_eq(ts_stop(&s), 0);
}

/* ---- heads people can read: QA answers, tagging entities, typed v2 outputs ---- */

/* Runs `adapterd predict` on the fixture registry's task folder with extra arguments; returns its JSON. */
static json_t *cli_predict(const char *folder, const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/tools/adapterd predict --model %s/registry/models/bert-tiny --adapter %s/registry/tasks/%s %s",
             ADAPTERD_BINARY_DIR, ADAPTERD_FIXTURES, ADAPTERD_FIXTURES, folder, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    static char out[1 << 20];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    json_t *d = json_loads(out, 0, NULL);
    cr_assert(d, "not JSON: %s", out);
    return d;
}

/* The issue this fixes: the command line answered a span starting at [SEP] with a summed-logit
 * score while the server answered the context's text with a probability. Now one function answers
 * both; both must give the same span of the context and the same probability (1e-5 relative: the
 * server's batch and the command line's run are separate engine runs of the same tokens). */
Test(server, qa_command_line_and_server_agree) {
    static const char *const qs[][2] = {{"who is john", "john is a player in paris"},
                                        {"where does he play", "he plays for a club in london and lives in paris"},
                                        {"what", "the movie was great but the ending was bad"},
                                        {"when", "in the morning"}};
    for (size_t c = 0; c < sizeof qs / sizeof qs[0]; c++) {
        char body[512], args[512];
        snprintf(body, sizeof body, "{\"inputs\":[{\"text\":\"%s\",\"text_pair\":\"%s\"}],\"tasks\":[\"qa\"]}", qs[c][0], qs[c][1]);
        json_t *d = call("POST", "/v1/predict", "/v1/predict", body, 200);
        json_t *sa = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "qa"),
                                     "answer");
        snprintf(args, sizeof args, "--text '%s' --text-pair '%s'", qs[c][0], qs[c][1]);
        json_t *cli = cli_predict("qa/1/squad", args);
        json_t *ca = json_object_get(json_object_get(json_object_get(cli, "tasks"), "squad"), "answer");
        cr_assert(json_is_object(sa) && json_is_object(ca), "both answer case %zu", c);
        int s0 = (int)json_integer_value(json_object_get(sa, "start")), s1 = (int)json_integer_value(json_object_get(sa, "end"));
        cr_expect(s0 >= 0 && s1 > s0 && s1 <= (int)strlen(qs[c][1]), "case %zu: [%d, %d) inside the context", c, s0, s1);
        cr_expect_eq(json_integer_value(json_object_get(ca, "start")), s0, "case %zu start", c);
        cr_expect_eq(json_integer_value(json_object_get(ca, "end")), s1, "case %zu end", c);
        cr_expect_str_eq(json_string_value(json_object_get(ca, "text")), json_string_value(json_object_get(sa, "text")));
        cr_expect_eq(strncmp(json_string_value(json_object_get(sa, "text")), qs[c][1] + s0, (size_t)(s1 - s0)), 0);
        double ss = json_number_value(json_object_get(sa, "score")), cs = json_number_value(json_object_get(ca, "score"));
        cr_expect(ss > 0 && ss <= 1 && fabs(ss - cs) <= 1e-5 * ss, "case %zu score: server %g, command line %g", c, ss, cs);
        json_decref(d);
        json_decref(cli);
    }
}

Test(server, qa_without_text_pair_is_refused) {
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"who is john\",\"tasks\":[\"qa\"]}", NULL, 422,
                 "text_pair_required");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":[[2, 239, 3]],\"tasks\":[\"qa\"]}", NULL, 422,
                 "text_pair_required");
    /* every task (none named): the QA task answers null rather than refusing the other tasks' input */
    json_t *d = call("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"who is john\"}", 200);
    json_t *qa = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "qa");
    cr_expect(json_is_null(json_object_get(qa, "answer")), "no context, no answer");
    json_decref(d);
    expect_error("POST", "/v2/models/qa/infer", "/v2/models/{task}/infer",
                 "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"who\"]}]}", NULL, 422,
                 "text_pair_required");
    expect_error("POST", "/v1/predict", "/v1/predict", "{\"inputs\":\"x\",\"tasks\":[\"ner\"],\"aggregation\":\"max\"}", NULL, 422,
                 "invalid_argument");
}

/* Entities of every aggregation: the server's equal the command line's (same engine function), with
 * character offsets whose text is the word; "first" never splits a word of several pieces. */
Test(server, tagging_entities_agree_with_the_command_line) {
    const char *text = "john is a player in paris and unhappy in london";
    static const char *const aggs[] = {"none", "simple", "first"};
    for (int a = 0; a < 3; a++) {
        char body[512], args[512];
        snprintf(body, sizeof body, "{\"inputs\":\"%s\",\"tasks\":[\"ner\"],\"aggregation\":\"%s\"}", text, aggs[a]);
        json_t *d = call("POST", "/v1/predict", "/v1/predict", body, 200);
        json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "ner");
        cr_assert_str_eq(json_string_value(json_object_get(t, "aggregation")), aggs[a]);
        json_t *se = json_object_get(t, "entities");
        snprintf(args, sizeof args, "--text '%s' --aggregation %s", text, aggs[a]);
        json_t *cli = cli_predict("ner/1/ner", args);
        json_t *ce = json_object_get(json_object_get(json_object_get(cli, "tasks"), "ner"), "entities");
        cr_assert(json_is_array(se) && json_is_array(ce));
        cr_assert_eq(json_array_size(se), json_array_size(ce), "%s: server %zu entities, command line %zu", aggs[a],
                     json_array_size(se), json_array_size(ce));
        cr_expect_gt(json_array_size(se), 0, "%s: the fixture tagger finds something", aggs[a]);
        const char *key = a == 0 ? "entity" : "entity_group";
        for (size_t i = 0; i < json_array_size(se); i++) {
            json_t *x = json_array_get(se, i), *y = json_array_get(ce, i);
            int s0 = (int)json_integer_value(json_object_get(x, "start")), s1 = (int)json_integer_value(json_object_get(x, "end"));
            cr_expect_str_eq(json_string_value(json_object_get(x, key)), json_string_value(json_object_get(y, key)));
            cr_expect_eq(s0, json_integer_value(json_object_get(y, "start")));
            cr_expect_eq(s1, json_integer_value(json_object_get(y, "end")));
            cr_expect(fabs(json_number_value(json_object_get(x, "score")) - json_number_value(json_object_get(y, "score"))) <= 1e-5);
            cr_expect(s0 >= 0 && s1 > s0 && s1 <= (int)strlen(text));
            cr_expect_eq(strncmp(json_string_value(json_object_get(x, "word")), text + s0, (size_t)(s1 - s0)), 0, "word = text[start:end]");
            if (a == 2) /* whole words: start at the text's start or after a space, end at its end or before one */
                cr_expect((s0 == 0 || text[s0 - 1] == ' ') && (text[s1] == '\0' || text[s1] == ' '), "first: [%d, %d)", s0, s1);
            cr_expect_str_neq(json_string_value(json_object_get(x, key)), "O");
        }
        json_decref(d);
        json_decref(cli);
    }
}

static json_t *v2_output(json_t *d, const char *name) {
    json_t *outs = json_object_get(d, "outputs");
    for (size_t i = 0; i < json_array_size(outs); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(outs, i), "name")), name)) return json_array_get(outs, i);
    return NULL;
}

/* v2 answers typed tensors for every head, and the model metadata names each with its datatype. */
Test(server, kserve_v2_typed_outputs_match_metadata) {
    static const struct {
        const char *task, *body;
    } cases[] = {
        {"qa", "{\"inputs\":[{\"name\":\"text\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"who is john\",\"where\"]},"
               "{\"name\":\"text_pair\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"john is a player in paris\",\"in london\"]}]}"},
        {"ner", "{\"inputs\":[{\"name\":\"text\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"john is in paris\",\"unhappy london\"]}],"
                "\"parameters\":{\"aggregation\":\"simple\"}}"},
        {"ml", "{\"inputs\":[{\"name\":\"text\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"great movie\",\"bad\"]}]}"},
        {"cls_lora", "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"great movie\"]}]}"},
        {"reg", "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"great movie\"]}]}"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[128];
        snprintf(path, sizeof path, "/v2/models/%s", cases[c].task);
        json_t *meta = call("GET", path, "/v2/models/{task}", NULL, 200);
        snprintf(path, sizeof path, "/v2/models/%s/infer", cases[c].task);
        json_t *d = call("POST", path, "/v2/models/{task}/infer", cases[c].body, 200);
        json_t *mo = json_object_get(meta, "outputs"), *outs = json_object_get(d, "outputs");
        cr_assert_eq(json_array_size(mo), json_array_size(outs), "%s: metadata lists %zu outputs, infer answers %zu", cases[c].task,
                     json_array_size(mo), json_array_size(outs));
        for (size_t i = 0; i < json_array_size(outs); i++) {
            json_t *o = json_array_get(outs, i), *m = json_array_get(mo, i);
            cr_expect_str_eq(json_string_value(json_object_get(o, "name")), json_string_value(json_object_get(m, "name")));
            cr_expect_str_eq(json_string_value(json_object_get(o, "datatype")), json_string_value(json_object_get(m, "datatype")));
            json_t *sh = json_object_get(o, "shape"), *msh = json_object_get(m, "shape");
            cr_expect_eq(json_array_size(sh), json_array_size(msh), "%s.%s rank", cases[c].task, json_string_value(json_object_get(o, "name")));
            size_t want = 1;
            for (size_t k = 0; k < json_array_size(sh); k++) want *= (size_t)json_integer_value(json_array_get(sh, k));
            cr_expect_eq(json_array_size(json_object_get(o, "data")), want, "%s.%s: data fills the shape", cases[c].task,
                         json_string_value(json_object_get(o, "name")));
            cr_expect(!json_is_string(json_array_get(json_object_get(o, "data"), 0)) ||
                          json_string_value(json_array_get(json_object_get(o, "data"), 0))[0] != '{',
                      "no JSON inside a BYTES tensor");
        }
        if (!strcmp(cases[c].task, "qa")) {
            json_t *ans = v2_output(d, "answer"), *st = v2_output(d, "start"), *en = v2_output(d, "end");
            cr_assert(ans && st && en && v2_output(d, "score"));
            cr_expect_str_eq(json_string_value(json_object_get(st, "datatype")), "INT32");
            int s0 = (int)json_integer_value(json_array_get(json_object_get(st, "data"), 0));
            int s1 = (int)json_integer_value(json_array_get(json_object_get(en, "data"), 0));
            cr_expect_eq(strncmp(json_string_value(json_array_get(json_object_get(ans, "data"), 0)), "john is a player in paris" + s0,
                                 (size_t)(s1 - s0)),
                         0);
        } else if (!strcmp(cases[c].task, "ner")) {
            json_t *in = v2_output(d, "input");
            cr_assert(in && v2_output(d, "entity") && v2_output(d, "word"));
            for (size_t k = 1; k < json_array_size(json_object_get(in, "data")); k++)
                cr_expect_geq(json_integer_value(json_array_get(json_object_get(in, "data"), k)),
                              json_integer_value(json_array_get(json_object_get(in, "data"), k - 1)), "entities in input order");
        } else if (!strcmp(cases[c].task, "ml")) {
            /* labels: [N, K], the labels over 0.5 then ""; the same labels v1 lists */
            json_t *lb = v2_output(d, "labels"), *sc = v2_output(d, "scores");
            cr_assert(lb && sc);
            size_t K = (size_t)json_integer_value(json_array_get(json_object_get(lb, "shape"), 1));
            json_t *v1 = call("POST", "/v1/predict", "/v1/predict", "{\"inputs\":[\"great movie\",\"bad\"],\"tasks\":[\"ml\"]}", 200);
            for (size_t i = 0; i < 2; i++) {
                json_t *want = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(v1, "results"), i), "tasks"), "ml"),
                                               "labels");
                size_t k = 0;
                for (; k < K && json_string_value(json_array_get(json_object_get(lb, "data"), i * K + k))[0]; k++)
                    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(lb, "data"), i * K + k)),
                                     json_string_value(json_array_get(want, k)));
                cr_expect_eq(k, json_array_size(want), "input %zu: every label over the threshold", i);
            }
            json_decref(v1);
        }
        json_decref(meta);
        json_decref(d);
    }
    expect_error("POST", "/v2/models/qa/infer", "/v2/models/{task}/infer",
                 "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"w\"]},"
                 "{\"name\":\"text_pair\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"c\"]}],\"outputs\":[{\"name\":\"label\"}]}",
                 NULL, 422, "invalid_argument");
}

/* Adapter names the same everywhere: GET /v1/tasks/{name} and `adapterd predict` name a task's
 * adapter forms alike, in AdapterHub's config vocabulary (docs/REGISTRY.md). */
Test(server, adapter_names_agree_with_the_command_line) {
    static const char *const known[] = {"seq_bn", "double_seq_bn", "par_bn", "prefix_tuning", "lora", "ia3", "fusion", NULL};
    static const char *const tasks[][2] = {{"ner", "ner/1/ner"}, {"cls_lora", "cls_lora/1/lora"}, {"peft", "peft/1/peft_task"}};
    for (size_t c = 0; c < sizeof tasks / sizeof tasks[0]; c++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/tasks/%s", tasks[c][0]);
        json_t *d = call("GET", path, "/v1/tasks/{name}", NULL, 200);
        json_t *cli = cli_predict(tasks[c][1], "--text 'the movie'");
        const char *srv_kind = json_string_value(json_object_get(d, "adapters"));
        json_t *tr = NULL;
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(cli, "tasks"), k, v) tr = v;
        cr_assert(srv_kind && tr, "%s: both name the adapters", tasks[c][0]);
        cr_expect_str_eq(srv_kind, json_string_value(json_object_get(tr, "kind")), "%s", tasks[c][0]);
        char buf[128];
        snprintf(buf, sizeof buf, "%s", srv_kind);
        for (char *save = NULL, *part = strtok_r(buf, "+", &save); part; part = strtok_r(NULL, "+", &save)) {
            int ok = 0;
            for (int i = 0; known[i]; i++) ok |= !strcmp(part, known[i]);
            cr_expect(ok, "%s: \"%s\" is not one of AdapterHub's config names", tasks[c][0], part);
        }
        json_decref(d);
        json_decref(cli);
    }
}

/* ---- a pruned fusion is visible ---- */

/* A registry whose task "fusion" has version 1 (4 adapters) and version 2, the same files with a
 * fusion_pruning.json keeping t1 and t3. GET /v1/tasks/{name}, the server's explain and the command
 * line's explain name the kept and the pruned adapters; version 2 holds fewer bytes (the load freed
 * the pruned adapters' weights) and answers as the command line does with the pruned folder. */
static json_t *get_ok(test_server *s, const char *path) {
    ts_resp r;
    cr_assert_eq(ts_http(s, "GET", path, NULL, NULL, NULL, &r), 0);
    cr_assert_eq(r.status, 200, "%s: %s", path, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "not JSON: %s", r.body);
    char msg[512];
    cr_assert_eq(ts_validate("GET", "/v1/tasks/{name}", 200, d, msg, sizeof msg), 0, "%s\n%s", msg, r.body);
    ts_resp_free(&r);
    return d;
}

static void expect_names(json_t *a, const char *const *want, int n, const char *what) {
    cr_assert_eq(json_array_size(a), (size_t)n, "%s: %zu names", what, json_array_size(a));
    for (int i = 0; i < n; i++)
        cr_assert_str_eq(json_string_value(json_array_get(a, (size_t)i)), want[i], "%s[%d]", what, i);
}

Test(fusion_view, pruned_fusion_is_listed_explained_and_smaller, .timeout = 90) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char reg[] = "adapterd-fusionview-XXXXXX";
    cr_assert(mkdtemp(reg));
    cr_assert_eq(ts_sh("mkdir -p '%s/tasks/fusion' && cp -rL '%s/registry/models' '%s/' && "
                       "cp -rL '%s/registry/tasks/fusion/1' '%s/tasks/fusion/1' && "
                       "cp -rL '%s/registry/tasks/fusion/1' '%s/tasks/fusion/2' && "
                       "printf '{\"keep\": [\"t1\", \"t3\"]}' > '%s/tasks/fusion/2/fusion/fusion_pruning.json'",
                       reg, ADAPTERD_FIXTURES, reg, ADAPTERD_FIXTURES, reg, ADAPTERD_FIXTURES, reg, reg), 0);
    test_server s;
    const char *args[] = {"--registry", reg, NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    static const char *const kept[] = {"t1", "t3"}, *const pruned[] = {"t0", "t2"}, *const all[] = {"t0", "t1", "t2", "t3"};

    json_t *d = get_ok(&s, "/v1/tasks/fusion");
    cr_assert_str_eq(json_string_value(json_object_get(d, "version")), "2");
    json_t *fu = json_object_get(d, "fusion");
    expect_names(json_object_get(fu, "kept"), kept, 2, "GET kept");
    expect_names(json_object_get(fu, "pruned"), pruned, 2, "GET pruned");
    json_decref(d);

    /* explain, current (pruned) version and version 1 */
    json_t *p2 = post_ok(&s, "{\"inputs\":\"the movie was great\",\"tasks\":[\"fusion\"],\"return\":{\"explain\":true}}", 200);
    fu = json_object_get(json_object_get(json_object_get(p2, "explain"), "fusion"), "fusion");
    expect_names(json_object_get(fu, "kept"), kept, 2, "explain kept");
    expect_names(json_object_get(fu, "pruned"), pruned, 2, "explain pruned");
    json_t *p1 = post_ok(&s, "{\"inputs\":\"the movie was great\",\"tasks\":[\"fusion@1\"],\"return\":{\"explain\":true}}", 200);
    fu = json_object_get(json_object_get(json_object_get(p1, "explain"), "fusion"), "fusion");
    expect_names(json_object_get(fu, "kept"), all, 4, "v1 kept");
    expect_names(json_object_get(fu, "pruned"), NULL, 0, "v1 pruned");
    json_decref(p1);
    json_t *p0 = post_ok(&s, "{\"inputs\":\"the movie was great\",\"tasks\":[\"fusion\"]}", 200);
    cr_assert_null(json_object_get(json_object_get(p0, "explain"), "fusion"), "no explain asked");
    json_decref(p0);

    /* both versions are now loaded: the pruned one holds fewer bytes */
    d = get_ok(&s, "/v1/tasks/fusion");
    json_t *vs = json_object_get(d, "versions");
    cr_assert_eq(json_array_size(vs), 2);
    json_int_t b1 = json_integer_value(json_object_get(json_array_get(vs, 0), "bytes"));
    json_int_t b2 = json_integer_value(json_object_get(json_array_get(vs, 1), "bytes"));
    cr_log_info("fusion v1 (4 adapters) %lld bytes, v2 (2 kept) %lld bytes", (long long)b1, (long long)b2);
    cr_assert(b1 > 0 && b2 > 0 && b2 < b1, "v1 %lld bytes, v2 %lld", (long long)b1, (long long)b2);
    cr_assert_eq(json_integer_value(json_object_get(d, "bytes")), b2);
    json_decref(d);

    /* the command line on the pruned folder: the same kept set and the same logits */
    char cmd[4096], out[65536];
    snprintf(cmd, sizeof cmd,
             "%s/tools/adapterd predict --model %s/models/bert-tiny --adapter %s/tasks/fusion/2/t0 --adapter "
             "%s/tasks/fusion/2/t1 --adapter %s/tasks/fusion/2/t2 --adapter %s/tasks/fusion/2/t3 --fusion "
             "%s/tasks/fusion/2/fusion --head %s/tasks/fusion/2/head --text 'the movie was great' --explain",
             ADAPTERD_BINARY_DIR, reg, reg, reg, reg, reg, reg, reg);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    json_t *cli = json_loads(out, 0, NULL);
    cr_assert(cli, "not JSON: %s", out);
    cr_assert(json_equal(json_object_get(json_object_get(cli, "plan"), "fusion"),
                         json_object_get(json_object_get(p2, "explain"), "fusion")),
              "command line %s vs server", out);
    json_decref(cli);
    json_decref(p2);
    cr_assert_eq(ts_stop(&s), 0);
    cr_assert_eq(ts_sh("rm -rf '%s'", reg), 0);
}
