/* test_budget.c - integration tests of `adapterd serve`'s compute budgets (split from test_server.c):
 * latency targets choosing skips or refusing, adaptive skips under load, latency_exceeded, and
 * explain (a request's share of its batch, equal to the command line's plan). The real binary on
 * 127.0.0.1 with a free port, on tests/fixtures/registry, called with libcurl. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "test_post.h"

static json_t *task_of(json_t *d, int input, const char *task) {
    return json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), (size_t)input), "tasks"), task);
}

static int skip_of(json_t *d, int input, const char *task) {
    return (int)json_integer_value(json_object_get(task_of(d, input, task), "skip"));
}

static const char *source_of(json_t *d, int input, const char *task) {
    return json_string_value(json_object_get(task_of(d, input, task), "skip_source"));
}

/* latency_ms: skips rise from the minimum only as far as the cost model needs; an unreachable target
 * is a 422 naming the prediction. With --allow-skip 2 every task of the 2-layer model allows 0..2.
 * The prediction counts a pass's fixed parts (set-up, embedding, heads), which no skip removes, and
 * the cost model learns from every pass, so the targets step down from the full-quality prediction
 * by 10% until the answer is a 422: on the way, some target must be met by raising skips. */
Test(budget, latency_ms_chooses_skips_within_range_or_refuses, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--allow-skip", "2", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    const char *tasks[] = {"cls_lora", "peft", "ml"};
    const char *inputs = "[\"the movie was great, and the actors were good too\",\"the plot was thin but the music was fine\"]";
    char body[512];
    snprintf(body, sizeof body, "{\"inputs\":%s,\"tasks\":[\"cls_lora\",\"peft\",\"ml\"],\"latency_ms\":100000}", inputs);
    json_t *d = post_ok(&s, body, 200);
    json_t *tm = json_object_get(d, "timing");
    double p0 = json_number_value(json_object_get(tm, "predicted_ms"));
    cr_assert(p0 > 0, "predicted_ms reported");
    cr_assert_float_eq(json_number_value(json_object_get(tm, "latency_target_ms")), 100000, 1e-9);
    cr_assert(json_is_false(json_object_get(tm, "latency_exceeded")), "a generous target is met");
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(skip_of(d, 0, tasks[k]), 0, "a generous target keeps full quality (%s)", tasks[k]);
        cr_assert_str_eq(source_of(d, 0, tasks[k]), "latency");
    }
    json_decref(d);
    int met_by_raising = 0, steps = 0;
    ts_resp r;
    for (double t = p0 * 0.9;; t *= 0.9, steps++) {
        cr_assert_lt(steps, 100, "no 422 down to %g ms", t);
        snprintf(body, sizeof body, "{\"inputs\":%s,\"tasks\":[\"cls_lora\",\"peft\",\"ml\"],\"latency_ms\":%.9g}", inputs, t);
        cr_assert_eq(ts_http(&s, "POST", "/v1/predict", body, NULL, NULL, &r), 0);
        if (r.status == 422) break;
        cr_assert_eq(r.status, 200, "%s", r.body);
        d = json_loads(r.body, 0, NULL);
        ts_resp_free(&r);
        int raised = 0;
        for (int k = 0; k < 3; k++) {
            int sk = skip_of(d, 0, tasks[k]);
            cr_assert(sk >= 0 && sk <= 2, "%s skip %d within 0..2", tasks[k], sk);
            raised += sk;
        }
        double p = json_number_value(json_object_get(json_object_get(d, "timing"), "predicted_ms"));
        cr_assert(p <= t && p > 0, "predicted %g ms for a target of %g ms", p, t);
        met_by_raising |= raised > 0;
        json_decref(d);
    }
    cr_assert(met_by_raising, "some target below the full-quality prediction was met by raising skips");
    d = json_loads(r.body, 0, NULL);
    /* unreachable: 422 with the prediction in the message */
    json_t *e = json_object_get(d, "error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "code")), "limit");
    cr_assert(strstr(json_string_value(json_object_get(e, "message")), "predicted at"), "%s", r.body);
    cr_assert(strstr(json_string_value(json_object_get(e, "message")), "cls_lora 2"), "names the skips tried: %s", r.body);
    json_decref(d);
    ts_resp_free(&r);
    /* latency_ms with skip: refused, never guessed */
    cr_assert_eq(ts_http(&s, "POST", "/v1/predict", "{\"inputs\":\"x\",\"latency_ms\":5,\"skip\":1}", NULL, NULL, &r), 0);
    cr_assert_eq(r.status, 422, "%s", r.body);
    ts_resp_free(&r);
    cr_assert_eq(ts_http(&s, "GET", "/metrics", NULL, NULL, NULL, &r), 0);
    cr_expect(strstr(r.body, "adapterd_latency_refused_total 1"), "%s", r.body);
    ts_resp_free(&r);
    cr_assert_eq(ts_stop(&s), 0);
}

/* A ts_post's answer as JSON (NULL unless it is 200), freeing the text. */
static json_t *joined_doc(ts_post *p) {
    ts_post_join(p);
    json_t *d = p->resp.status == 200 ? json_loads(p->resp.body, 0, NULL) : NULL;
    ts_resp_free(&p->resp);
    return d;
}

/* Adaptive mode with a 1 ms queue target and a 20 ms batching wait: every batch waits over the target,
 * so tasks left at their default skip are raised within their range; pinned ones are not; the
 * answers are those of the raised skip run on purpose; metrics count the raises. */
Test(budget, adaptive_skips_raise_default_skips_under_load, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--adaptive-skips", "true", "--target-queue-ms", "1", "--max-wait-us", "20000", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    enum { N = 8 };
    ts_post a[N];
    json_t *doc[N];
    for (int i = 0; i < N; i++) {
        /* odd clients pin cls_lora at 0; peft allows only 0 */
        const char *body = i % 2 ? "{\"inputs\":\"the movie was great\",\"tasks\":[\"cls_lora\",\"peft\"],\"skip\":{\"cls_lora\":0}}"
                                 : "{\"inputs\":\"the movie was great\",\"tasks\":[\"cls_lora\",\"peft\"]}";
        cr_assert_eq(ts_post_start(&a[i], &s, "/v1/predict", body), 0);
    }
    for (int i = 0; i < N; i++) doc[i] = joined_doc(&a[i]);
    for (int i = 0; i < N; i++) {
        cr_assert(doc[i], "request %d did not answer 200", i);
        char msg[512];
        cr_assert_eq(ts_validate("POST", "/v1/predict", 200, doc[i], msg, sizeof msg), 0, "%s", msg);
        if (i % 2) {
            cr_expect_eq(skip_of(doc[i], 0, "cls_lora"), 0, "a pinned skip is never raised");
            cr_expect_str_eq(source_of(doc[i], 0, "cls_lora"), "request");
        } else {
            cr_expect_eq(skip_of(doc[i], 0, "cls_lora"), 1, "default skip raised to the task's maximum");
            cr_expect_str_eq(source_of(doc[i], 0, "cls_lora"), "adaptive");
        }
        cr_expect_eq(skip_of(doc[i], 0, "peft"), 0, "peft allows only 0");
        cr_expect_str_eq(source_of(doc[i], 0, "peft"), "default");
    }
    /* the raised answer is the skip-1 answer */
    json_t *d = post_ok(&s, "{\"inputs\":\"the movie was great\",\"tasks\":[\"cls_lora\",\"peft\"],\"skip\":{\"cls_lora\":1}}", 200);
    cr_assert(ts_scores_close(json_object_get(task_of(d, 0, "cls_lora"), "scores"), json_object_get(task_of(doc[0], 0, "cls_lora"), "scores"), 1e-4));
    json_decref(d);
    for (int i = 0; i < N; i++) json_decref(doc[i]);
    ts_resp r;
    cr_assert_eq(ts_http(&s, "GET", "/metrics", NULL, NULL, NULL, &r), 0);
    const char *p = strstr(r.body, "\nadapterd_adaptive_raises_total ");
    cr_assert(p, "%s", r.body);
    cr_expect(atoi(p + strlen("\nadapterd_adaptive_raises_total ")) >= N / 2, "%s", p);
    cr_expect(strstr(r.body, "adapterd_task_skip_total{task=\"cls_lora\",skip=\"1\"}"), "skips used count the raised skip");
    cr_expect(strstr(r.body, "adapterd_adaptive_level 1") || strstr(r.body, "adapterd_adaptive_level 2"), "level is exported");
    ts_resp_free(&r);
    cr_assert_eq(ts_stop(&s), 0);
}

/* A response says when its inference exceeded its latency target. The target is planned for the
 * request alone; a long batching wait puts it in one pass with a request 32x its size, so the pass
 * (its inference_ms) takes several times the target, and the response says so. */
Test(budget, latency_exceeded_when_the_pass_runs_over_the_target, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--max-wait-us", "300000", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    const char *light = "{\"inputs\":\"the movie was great\",\"tasks\":[\"cls_lora\"],\"latency_ms\":100000}";
    double p = 0;
    for (int i = 0; i < 4; i++) { /* the cost model learns from these passes; the last prediction counts */
        json_t *d = post_ok(&s, light, 200);
        p = json_number_value(json_object_get(json_object_get(d, "timing"), "predicted_ms"));
        json_decref(d);
    }
    cr_assert(p > 0);
    char lbody[256], *hbody = malloc(16384);
    cr_assert(hbody);
    snprintf(lbody, sizeof lbody, "{\"inputs\":\"the movie was great\",\"tasks\":[\"cls_lora\"],\"latency_ms\":%.9g}", 3 * p);
    size_t o = (size_t)snprintf(hbody, 16384, "{\"inputs\":[");
    for (int i = 0; i < 32; i++)
        o += (size_t)snprintf(hbody + o, 16384 - o, "%s\"the plot of this movie was thin but the music and the actors were "
                              "fine %d\"", i ? "," : "", i);
    snprintf(hbody + o, 16384 - o, "],\"tasks\":[\"cls_lora\",\"peft\",\"ml\"]}");
    ts_post a[2];
    cr_assert_eq(ts_post_start(&a[0], &s, "/v1/predict", hbody), 0);
    cr_assert_eq(ts_post_start(&a[1], &s, "/v1/predict", lbody), 0);
    json_t *doc[2];
    for (int i = 0; i < 2; i++) {
        ts_post_join(&a[i]);
        cr_assert_eq(a[i].resp.status, 200, "request %d: %s", i, a[i].resp.body ? a[i].resp.body : "?");
        doc[i] = json_loads(a[i].resp.body, 0, NULL);
        cr_assert(doc[i]);
        ts_resp_free(&a[i].resp);
    }
    json_t *tm = json_object_get(doc[1], "timing");
    char msg[512];
    cr_assert_eq(ts_validate("POST", "/v1/predict", 200, doc[1], msg, sizeof msg), 0, "%s", msg);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(doc[1], "batch"), "requests")), 2, "one pass");
    double inf = json_number_value(json_object_get(tm, "inference_ms"));
    cr_expect_gt(inf, 3 * p, "the pass took %g ms for a target of %g ms", inf, 3 * p);
    cr_expect(json_is_true(json_object_get(tm, "latency_exceeded")), "the response says the target was exceeded");
    cr_expect_null(json_object_get(json_object_get(doc[0], "timing"), "latency_exceeded"), "no target, no flag");
    for (int i = 0; i < 2; i++) json_decref(doc[i]);
    free(hbody);
    cr_assert_eq(ts_stop(&s), 0);
}

/* explain is this request's share of its batch: two requests batched together split the batch's
 * rows per layer exactly, and their GFLOP shares add up to 1. */
Test(budget, explain_is_this_requests_share_of_the_batch, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--max-wait-us", "300000", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    const char *body[2] = {"{\"inputs\":[\"the movie was great\",\"bad\"],\"tasks\":[\"cls_lora\",\"peft\"],\"skip\":{\"cls_lora\":1},"
                           "\"return\":{\"explain\":true}}",
                           "{\"inputs\":\"stock market news today\",\"tasks\":[\"ml\"],\"return\":{\"explain\":true}}"};
    ts_post a[2];
    json_t *doc[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(ts_post_start(&a[i], &s, "/v1/predict", body[i]), 0);
    for (int i = 0; i < 2; i++) doc[i] = joined_doc(&a[i]);
    double share = 0;
    json_t *x[2];
    for (int i = 0; i < 2; i++) {
        cr_assert(doc[i], "request %d did not answer 200", i);
        char msg[512];
        cr_assert_eq(ts_validate("POST", "/v1/predict", 200, doc[i], msg, sizeof msg), 0, "%s", msg);
        x[i] = json_object_get(doc[i], "explain");
        cr_assert_str_eq(json_string_value(json_object_get(x[i], "scope")), "request");
        cr_assert_eq(json_integer_value(json_object_get(json_object_get(x[i], "batch"), "requests")), 2, "both in one batch");
        share += json_number_value(json_object_get(x[i], "share"));
    }
    cr_expect_float_eq(share, 1.0, 1e-6, "shares add up to the batch");
    /* request 0: below cls_lora's skip each input keeps a trunk (layer 0); peft's streams run from 0 */
    json_t *l0 = json_array_get(json_object_get(x[0], "layers"), 0), *l1 = json_array_get(json_object_get(x[0], "layers"), 1);
    cr_expect_eq(json_integer_value(json_object_get(l0, "trunks")), 2, "a trunk per input below cls_lora's skip");
    cr_expect_eq(json_integer_value(json_object_get(l1, "trunks")), 0);
    cr_expect_eq(json_integer_value(json_object_get(l1, "streams")), 4, "2 inputs x 2 tasks at layer 1");
    for (int l = 0; l < 2; l++) {
        json_t *e0 = json_array_get(json_object_get(x[0], "layers"), (size_t)l), *e1 = json_array_get(json_object_get(x[1], "layers"), (size_t)l);
        json_int_t rows = json_integer_value(json_object_get(e0, "rows")) + json_integer_value(json_object_get(e1, "rows"));
        cr_expect_eq(rows, json_integer_value(json_object_get(json_object_get(e0, "batch"), "rows")), "layer %d: rows split exactly", l);
        json_int_t st = json_integer_value(json_object_get(e0, "streams")) + json_integer_value(json_object_get(e1, "streams"));
        cr_expect_eq(st, json_integer_value(json_object_get(json_object_get(e0, "batch"), "streams")), "layer %d: streams split exactly", l);
    }
    for (int i = 0; i < 2; i++) json_decref(doc[i]);
    cr_assert_eq(ts_stop(&s), 0);
}

/* The command line's --explain and the server's explain describe the same plan for the same input:
 * per layer, its trunks, streams and rows. ml is a Pfeiffer (output-site) adapter from layer 0, a
 * late split (the trunk runs layer 0 for it); cls_lora a LoRA (attention) adapter, split at 0; with
 * skip 1 the split moves to 1. */
Test(budget, command_line_and_server_explain_agree, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    cr_assert_eq(ts_start(&s, NULL, NULL), 0);
    static const struct {
        const char *task, *folder;
        int skip;
    } cases[] = {{"ml", "ml/1/ml", 0}, {"cls_lora", "cls_lora/1/lora", 0}, {"cls_lora", "cls_lora/1/lora", 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char body[256], cmd[2048];
        snprintf(body, sizeof body, "{\"inputs\":\"the movie was great\",\"tasks\":[\"%s\"],\"skip\":%d,\"return\":{\"explain\":true}}",
                 cases[c].task, cases[c].skip);
        json_t *d = post_ok(&s, body, 200);
        snprintf(cmd, sizeof cmd,
                 "%s/tools/adapterd predict --model %s/registry/models/bert-tiny --adapter %s/registry/tasks/%s --skip %d "
                 "--text 'the movie was great' --explain",
                 ADAPTERD_BINARY_DIR, ADAPTERD_FIXTURES, ADAPTERD_FIXTURES, cases[c].folder, cases[c].skip);
        FILE *p = popen(cmd, "r");
        cr_assert(p);
        char out[65536];
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        cr_assert_eq(pclose(p), 0, "%s", cmd);
        json_t *cli = json_loads(out, 0, NULL);
        cr_assert(cli, "not JSON: %s", out);
        json_t *sl = json_object_get(json_object_get(d, "explain"), "layers"), *cl = json_object_get(json_object_get(cli, "plan"), "layers");
        cr_assert(json_array_size(sl) > 0 && json_array_size(sl) == json_array_size(cl), "%s", out);
        int trunks = 0;
        for (size_t l = 0; l < json_array_size(sl); l++) {
            json_t *a = json_array_get(sl, l), *b = json_array_get(cl, l);
            static const char *const keys[] = {"trunks", "streams", "rows"};
            for (int k = 0; k < 3; k++)
                cr_expect_eq(json_integer_value(json_object_get(a, keys[k])), json_integer_value(json_object_get(b, keys[k])),
                             "%s skip %d layer %zu %s: server %lld, command line %lld", cases[c].task, cases[c].skip, l,
                             keys[k], (long long)json_integer_value(json_object_get(a, keys[k])),
                             (long long)json_integer_value(json_object_get(b, keys[k])));
            cr_expect(json_object_get(b, "trunks"), "the command line says trunks");
            trunks += (int)json_integer_value(json_object_get(a, "trunks"));
        }
        int want = c == 1 ? 0 : 1; /* the late split and the skip keep a trunk for layer 0 */
        cr_expect_eq(trunks, want, "%s skip %d: trunk layers", cases[c].task, cases[c].skip);
        json_decref(cli);
        json_decref(d);
    }
    cr_assert_eq(ts_stop(&s), 0);
}
