/* test_rollout.c - canary and shadow versions of a task, from the outside (issue 40; adapters_store
 * state.c and versions.c keep the rollout, server/front.c and predict.c route it, scheduler.c drops
 * shadows first, server/rollout.c compares).
 *
 * What is proved: a canary answers its share of the requests within statistical bounds, sticky per
 * input and per route key, and a named version wins; a shadow leaves the callers' answers byte for
 * byte what a server without the rollout answers, its compared answers are the candidate's own (asked
 * directly), it runs on the same trunk pass (the engine's rows per layer), and it is dropped first
 * under a full queue; rules promote and abort at their thresholds, and a second replica on the same
 * registry follows; bad rollouts are refused with clear errors and change nothing; a rollout
 * survives a restart and ends when its candidate is deleted. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"

#define AD ADAPTERD_FIXTURES "/adapters/bert-tiny"
#define AUTH "Authorization: Bearer t0ken"
#define INTERVAL_MS 300

static void start(test_server *s, const char *reg, const char *const *more) {
    const char *args[32] = {"--registry", reg, "--admin-token", "t0ken", "--watch", "poll", "--watch-interval-ms", "300",
                            "--allow-skip", "1", "--rollout-samples", "64"};
    int n = 12;
    for (int i = 0; more && more[i] && n < 31; i++) args[n++] = more[i];
    args[n] = NULL;
    cr_assert_eq(ts_start(s, args, NULL), 0, "the server did not start on %s", reg);
}

static long call(const test_server *s, const char *method, const char *path, const char *body, json_t **out) {
    return ts_request(s, method, path, body, body ? strlen(body) : 0, body ? "application/json" : NULL, AUTH, out);
}

/* A registry whose task cls serves version 1, with version 2 (another adapter, another answer)
 * listed beside it and version 0 broken (listed as failed). */
static char *registry(const char *name) {
    char *reg = ts_registry_ok(name);
    ts_sh_ok("echo '{not json' > %s/tasks/cls/0/lora/adapter_config.json", reg);
    return reg;
}

static void upload_candidate(const test_server *s) {
    size_t len;
    char *b = ts_tgz_of(AD "/seq_bn_st/adapters", &len);
    cr_assert(b);
    cr_assert_eq(ts_request(s, "PUT", "/v1/tasks/cls/versions/2", b, len, "application/gzip", AUTH, NULL), 201);
    free(b);
}

/* The cls result of one predict of body, and its version; returns the status. */
static long predict(const test_server *s, const char *body, char *version, size_t vn, json_t **result) {
    json_t *d = NULL;
    long st = call(s, "POST", "/v1/predict", body, &d);
    json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "cls");
    if (version) snprintf(version, vn, "%s", st == 200 ? json_string_value(json_object_get(t, "version")) ?: "" : "");
    if (result) *result = st == 200 ? json_incref(t) : NULL;
    json_decref(d);
    return st;
}

static json_t *rollout_of(const test_server *s) {
    json_t *d = NULL;
    cr_assert_eq(call(s, "GET", "/v1/tasks/cls/rollout", NULL, &d), 200);
    char msg[300];
    cr_expect_eq(ts_validate("GET", "/v1/tasks/{name}/rollout", 200, d, msg, sizeof msg), 0, "%s", msg);
    return d;
}

static long long compared_of(const test_server *s) {
    json_t *d = rollout_of(s);
    long long n = json_integer_value(json_object_get(json_object_get(json_object_get(d, "rollout"), "comparison"), "compared"));
    json_decref(d);
    return n;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

Test(rollout, canary_share_stickiness_and_named_versions, .timeout = 120) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = registry("test-rollout-canary");
    test_server s;
    start(&s, reg, NULL);
    upload_candidate(&s);
    json_t *d = NULL;
    cr_assert_eq(call(&s, "POST", "/v1/tasks/cls:rollout", "{\"version\": \"2\", \"mode\": \"canary\", \"percent\": 20}", &d), 201);
    char msg[300];
    cr_expect_eq(ts_validate("POST", "/v1/tasks/{name}:rollout", 201, d, msg, sizeof msg), 0, "%s", msg);
    json_decref(d);
    /* the listing shows it */
    cr_assert_eq(call(&s, "GET", "/v1/tasks", NULL, &d), 200);
    json_t *ro = json_object_get(json_array_get(json_object_get(d, "tasks"), 0), "rollout");
    cr_expect_str_eq(json_string_value(json_object_get(ro, "version")), "2");
    cr_expect_str_eq(json_string_value(json_object_get(ro, "mode")), "canary");
    json_decref(d);

    /* 300 distinct inputs: binomial(300, 0.2) is 60 +- 6.9; 4 standard deviations either way */
    int cand = 0, n = 300;
    char body[256], v[32], v2[32];
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"review number %d of the film\"], \"tasks\": [\"cls\"]}", i);
        cr_assert_eq(predict(&s, body, v, sizeof v, NULL), 200);
        cand += !strcmp(v, "2");
        if (i % 50 == 0) { /* a retry lands on the same version */
            for (int r = 0; r < 3; r++) {
                cr_assert_eq(predict(&s, body, v2, sizeof v2, NULL), 200);
                cr_expect_str_eq(v2, v, "input %d answered by %s, then by %s on a retry", i, v, v2);
            }
        }
    }
    cr_log_info("canary at 20%%: %d of %d requests answered by the candidate", cand, n);
    cr_expect(cand >= 33 && cand <= 87, "the candidate answered %d of %d requests at 20%%", cand, n);

    /* a route key: the same version whatever the input */
    int seen[2] = {0};
    for (int key = 0; key < 40; key++) {
        char first[32] = "";
        for (int i = 0; i < 3; i++) {
            snprintf(body, sizeof body, "{\"inputs\": [\"text %d %d\"], \"tasks\": [\"cls\"], \"route_key\": \"user-%d\"}", key,
                     i * 7919, key);
            cr_assert_eq(predict(&s, body, v, sizeof v, NULL), 200);
            if (!first[0]) snprintf(first, sizeof first, "%s", v);
            cr_expect_str_eq(v, first, "route key user-%d got %s, then %s", key, first, v);
        }
        seen[!strcmp(first, "2")]++;
        /* the same key through KServe v2's "parameters": the same version */
        snprintf(body, sizeof body, "{\"inputs\": [{\"name\": \"text\", \"shape\": [1], \"datatype\": \"BYTES\", \"data\": "
                 "[\"v2 text %d\"]}], \"parameters\": {\"route_key\": \"user-%d\"}}", key, key);
        json_t *kd = NULL;
        cr_assert_eq(call(&s, "POST", "/v2/models/cls/infer", body, &kd), 200);
        cr_expect_str_eq(json_string_value(json_object_get(kd, "model_version")) ?: "", first, "KServe v2 with route key user-%d",
                         key);
        json_decref(kd);
    }
    cr_expect(seen[0] > 0 && seen[1] > 0, "40 keys were all routed one way (%d current, %d candidate)", seen[0], seen[1]);

    /* naming a version wins, either way */
    for (int i = 0; i < 20; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"named %d\"], \"tasks\": [\"cls@1\"]}", i);
        cr_assert_eq(predict(&s, body, v, sizeof v, NULL), 200);
        cr_expect_str_eq(v, "1");
        snprintf(body, sizeof body, "{\"inputs\": [\"named %d\"], \"tasks\": [{\"name\": \"cls\", \"version\": \"2\"}]}", i);
        cr_assert_eq(predict(&s, body, v, sizeof v, NULL), 200);
        cr_expect_str_eq(v, "2");
    }
    /* the requests each version answered are counted, in the API and in /metrics */
    d = rollout_of(&s);
    json_t *req = json_object_get(json_object_get(json_object_get(d, "rollout"), "comparison"), "requests");
    long long rc = json_integer_value(json_object_get(req, "candidate"));
    cr_expect_geq(rc, cand, "candidate requests counted: %lld", rc);
    json_decref(d);
    cr_expect_geq(ts_metric(&s, "adapterd_rollout_requests_total{task=\"cls\",candidate=\"2\",version=\"candidate\"}"), cand);

    /* promoted by hand: every request gets version 2, and the rollout is over */
    cr_assert_eq(call(&s, "POST", "/v1/tasks/cls:promote", "", &d), 200);
    cr_expect_eq(ts_validate("POST", "/v1/tasks/{name}:promote", 200, d, msg, sizeof msg), 0, "%s", msg);
    cr_expect_str_eq(json_string_value(json_object_get(d, "current")), "2");
    json_decref(d);
    for (int i = 0; i < 10; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"after %d\"], \"tasks\": [\"cls\"]}", i);
        cr_assert_eq(predict(&s, body, v, sizeof v, NULL), 200);
        cr_expect_str_eq(v, "2");
    }
    d = rollout_of(&s);
    cr_expect(json_is_null(json_object_get(d, "rollout")));
    json_decref(d);
    cr_expect_eq(call(&s, "POST", "/v1/tasks/cls:abort", "", NULL), 404, "no rollout is left to abort");
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* The task results of body on s as canonical JSON (sorted keys), the request's timings left out. */
static char *results_of(const test_server *s, const char *body) {
    json_t *d = NULL;
    cr_assert_eq(call(s, "POST", "/v1/predict", body, &d), 200);
    char *j = json_dumps(json_object_get(d, "results"), JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(d);
    return j;
}

/* The rows the engine ran at layer l in the pass of an answer with "explain". */
static long batch_rows(json_t *d, int l) {
    json_t *layer = json_array_get(json_object_get(json_object_get(d, "explain"), "layers"), (size_t)l);
    return (long)json_integer_value(json_object_get(json_object_get(layer, "batch"), "rows"));
}

Test(rollout, shadow_answers_unchanged_compared_on_the_shared_trunk, .timeout = 120) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = registry("test-rollout-shadow");
    test_server s, plain;
    const char *with_text[] = {"--rollout-sample-text", "true", NULL};
    start(&s, reg, with_text);
    upload_candidate(&s);
    /* the reference: a server on a copy of the registry, no rollout */
    char *reg2 = ts_registry_ok("test-rollout-plain");
    ts_sh_ok("rm -rf %s && cp -r %s %s", reg2, reg, reg2);
    start(&plain, reg2, NULL);
    cr_assert_eq(call(&s, "POST", "/v1/tasks/cls:rollout",
                      "{\"version\": \"2\", \"mode\": \"shadow\", \"percent\": 100, \"max_share\": 1}", NULL), 201);
    /* answers byte-identical to the server without the rollout; the candidate's own answers asked
     * directly give the agreement the comparison must find */
    const char *texts[] = {"the movie was great", "awful film", "it was ok", "i loved it", "not my thing at all",
                           "a masterpiece", "boring and long", "fine", "the actors were superb", "never again"};
    int n = 10, agree = 0;
    char body[256];
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"tasks\": [\"cls\"], \"return\": {\"scores\": true}}", texts[i]);
        char *a = results_of(&s, body), *b = results_of(&plain, body);
        cr_expect_str_eq(a, b, "the answer to \"%s\" differs with the shadow", texts[i]);
        free(a), free(b);
        json_t *cur = NULL, *cand = NULL;
        snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"tasks\": [\"cls@1\"]}", texts[i]);
        cr_assert_eq(predict(&plain, body, NULL, 0, &cur), 200);
        snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"tasks\": [\"cls@2\"]}", texts[i]);
        cr_assert_eq(predict(&plain, body, NULL, 0, &cand), 200);
        agree += !strcmp(json_string_value(json_object_get(cur, "label")), json_string_value(json_object_get(cand, "label")));
        json_decref(cur), json_decref(cand);
    }
    json_t *d = rollout_of(&s);
    json_t *c = json_object_get(json_object_get(d, "rollout"), "comparison");
    cr_expect_eq(json_integer_value(json_object_get(c, "compared")), n);
    cr_expect(fabs(json_number_value(json_object_get(c, "agreement")) - (double)agree / n) < 1e-9,
              "agreement %g, the versions asked directly agree on %d of %d", json_number_value(json_object_get(c, "agreement")),
              agree, n);
    /* each disagreement kept (with its text: --rollout-sample-text) holds the candidate's own label and
     * score, as the candidate answers that text when asked directly */
    size_t i;
    json_t *e;
    cr_expect_eq(json_array_size(json_object_get(c, "disagreements")), (size_t)(n - agree));
    json_array_foreach(json_object_get(c, "disagreements"), i, e) {
        const char *rid = json_string_value(json_object_get(e, "request_id")), *tx = json_string_value(json_object_get(e, "text"));
        cr_expect(rid && rid[0], "a disagreement names its request");
        cr_assert(tx, "the text is kept when configured");
        json_t *cand = NULL;
        snprintf(body, sizeof body, "{\"inputs\": [\"%s\"], \"tasks\": [\"cls@2\"]}", tx);
        cr_assert_eq(predict(&plain, body, NULL, 0, &cand), 200);
        char want[128];
        snprintf(want, sizeof want, "%s (%.3f)", json_string_value(json_object_get(cand, "label")),
                 json_number_value(json_object_get(cand, "score")));
        cr_expect_str_eq(json_string_value(json_object_get(e, "candidate")), want, "the shadow's answer to \"%s\"", tx);
        json_decref(cand);
    }
    cr_log_info("shadow: %d of %d compared answers agree; disagreements kept: %zu", agree, n,
                json_array_size(json_object_get(c, "disagreements")));
    json_decref(d);
    cr_expect_eq(ts_metric(&s, "adapterd_rollout_compared_total{task=\"cls\",candidate=\"2\"}"), n);

    /* the same trunk pass: at skip 1, layer 0 holds the input's rows once (the trunk), layer 1 the
     * current version's stream and the shadow's */
    d = NULL;
    cr_assert_eq(call(&s, "POST", "/v1/predict",
                      "{\"inputs\": [\"the movie was great\"], \"tasks\": [\"cls\"], \"skip\": 1, \"return\": {\"explain\": true}}", &d),
                 200);
    int tokens = (int)json_integer_value(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tokens"));
    cr_assert(json_is_array(json_object_get(json_object_get(d, "explain"), "layers")), "explain names the rows per layer");
    cr_expect_eq(batch_rows(d, 0), tokens, "layer 0 ran the trunk once (%d tokens)", tokens);
    cr_expect_eq(batch_rows(d, 1), 2 * tokens, "layer 1 ran both versions' streams");
    json_decref(d);
    cr_assert_eq(call(&plain, "POST", "/v1/predict",
                      "{\"inputs\": [\"the movie was great\"], \"tasks\": [\"cls\"], \"skip\": 1, \"return\": {\"explain\": true}}", &d),
                 200);
    cr_expect_eq(batch_rows(d, 0), tokens);
    cr_expect_eq(batch_rows(d, 1), tokens, "without the shadow, one stream at layer 1");
    json_decref(d);
    cr_assert_eq(call(&s, "POST", "/v1/tasks/cls:abort", "", NULL), 200);
    cr_assert_eq(ts_stop(&plain), 0);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s %s", reg, reg2);
    free(reg), free(reg2);
}

/* ---- a full queue: shadows go first ---- */

typedef struct {
    const test_server *s;
    int n, ok, id;
    double max_ms;
} flood_arg;

static void *flood(void *p) {
    flood_arg *a = p;
    char body[200];
    for (int i = 0; i < a->n; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"flood request %d with a few more words to tokenize\"], \"tasks\": [\"cls\"]}",
                 i + 1000 * a->id);
        double t0 = now_ms();
        long st = predict(a->s, body, NULL, 0, NULL);
        double dt = now_ms() - t0;
        a->ok += st == 200;
        if (dt > a->max_ms) a->max_ms = dt;
    }
    return NULL;
}

Test(rollout, shadows_are_dropped_first_under_a_full_queue, .timeout = 120) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = registry("test-rollout-load");
    test_server s;
    /* a pass of about one request: with 8 clients the queue is always behind */
    const char *more[] = {"--max-batch-tokens", "16", "--threads", "1", NULL};
    start(&s, reg, more);
    upload_candidate(&s);
    cr_assert_eq(call(&s, "POST", "/v1/tasks/cls:rollout",
                      "{\"version\": \"2\", \"mode\": \"shadow\", \"percent\": 100, \"max_share\": 1}", NULL), 201);
    pthread_t th[8];
    flood_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (flood_arg){.s = &s, .n = 40, .id = i};
        pthread_create(&th[i], NULL, flood, &a[i]);
    }
    int ok = 0;
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL), ok += a[i].ok;
    cr_expect_eq(ok, 320, "every caller was answered (%d of 320)", ok);
    json_t *d = rollout_of(&s);
    json_t *c = json_object_get(json_object_get(d, "rollout"), "comparison");
    long long compared = json_integer_value(json_object_get(c, "compared")),
              dropped = json_integer_value(json_object_get(c, "shadow_dropped"));
    cr_log_info("under a full queue: %lld shadows compared, %lld dropped, of 320 sampled", compared, dropped);
    cr_expect_eq(compared + dropped, 320, "every sampled input was either compared or dropped");
    cr_expect_gt(dropped, 160, "most shadows were dropped while the queue was behind (%lld)", dropped);
    json_decref(d);
    cr_expect_gt(ts_metric(&s, "adapterd_rollout_shadow_dropped_total{task=\"cls\",candidate=\"2\"}"), 160);
    /* once the queue is empty the shadow runs again */
    cr_assert_eq(predict(&s, "{\"inputs\": [\"quiet now\"], \"tasks\": [\"cls\"]}", NULL, 0, NULL), 200);
    cr_expect_eq(compared_of(&s), compared + 1);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- rules, with two replicas following the same state ---- */

/* Polls until s's rollout of cls is null (want_current: then the current version), bounded. */
static double until_ended(const test_server *s, const char *want_current) {
    double t0 = now_ms();
    while (now_ms() - t0 < 15000) {
        json_t *d = NULL;
        long st = call(s, "GET", "/v1/tasks/cls/rollout", NULL, &d);
        int done = st == 200 && json_is_null(json_object_get(d, "rollout")) &&
                   !strcmp(json_string_value(json_object_get(d, "current")) ?: "", want_current);
        json_decref(d);
        if (done) return now_ms() - t0;
        ts_sleep_ms(20);
    }
    return -1;
}

static double until_rollout(const test_server *s, const char *version) {
    double t0 = now_ms();
    while (now_ms() - t0 < 15000) {
        json_t *d = NULL;
        call(s, "GET", "/v1/tasks/cls/rollout", NULL, &d);
        const char *v = json_string_value(json_object_get(json_object_get(d, "rollout"), "version"));
        int ok = v && !strcmp(v, version);
        json_decref(d);
        if (ok) return now_ms() - t0;
        ts_sleep_ms(20);
    }
    return -1;
}

Test(rollout, rules_promote_and_abort_at_their_thresholds_on_both_replicas, .timeout = 120) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = registry("test-rollout-rules");
    test_server a, b;
    start(&a, reg, NULL);
    start(&b, reg, NULL);
    upload_candidate(&a);
    /* abort on latency: the candidate's rows over the current's above 0.25 after 8 inputs compared */
    cr_assert_eq(call(&a, "POST", "/v1/tasks/cls:rollout",
                      "{\"version\": \"2\", \"mode\": \"shadow\", \"percent\": 100, \"max_share\": 1, "
                      "\"rules\": {\"abort_latency_ratio\": 0.25, \"min_inputs\": 8}}",
                      NULL), 201);
    double dt = until_rollout(&b, "2");
    cr_expect(dt >= 0, "the other replica follows the rollout (%.0f ms)", dt);
    char body[160];
    for (int i = 0; i < 7; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"abort rule %d\"], \"tasks\": [\"cls\"]}", i);
        cr_assert_eq(predict(&a, body, NULL, 0, NULL), 200);
    }
    ts_sleep_ms(100);
    json_t *d = rollout_of(&a);
    cr_expect(!json_is_null(json_object_get(d, "rollout")), "7 inputs: below min_inputs, no verdict yet");
    json_decref(d);
    cr_assert_eq(predict(&a, "{\"inputs\": [\"abort rule 7\"], \"tasks\": [\"cls\"]}", NULL, 0, NULL), 200);
    cr_expect_geq(until_ended(&a, "1"), 0, "the 8th input aborted the rollout on the replica that compared");
    d = NULL;
    cr_expect_geq(until_ended(&b, "1"), 0, "and the other replica followed");

    /* promote after 12 inputs with an agreement of at least 0: through b this time */
    cr_assert_eq(call(&b, "POST", "/v1/tasks/cls:rollout",
                      "{\"version\": \"2\", \"mode\": \"shadow\", \"percent\": 100, \"max_share\": 1, "
                      "\"rules\": {\"promote_after\": 12, \"promote_agreement\": 0}}",
                      NULL), 201);
    cr_expect_geq(until_rollout(&a, "2"), 0);
    for (int i = 0; i < 11; i++) {
        snprintf(body, sizeof body, "{\"inputs\": [\"promote rule %d\"], \"tasks\": [\"cls\"]}", i);
        cr_assert_eq(predict(&b, body, NULL, 0, NULL), 200);
    }
    ts_sleep_ms(100);
    d = rollout_of(&b);
    cr_expect_str_eq(json_string_value(json_object_get(d, "current")), "1", "11 inputs: not promoted yet");
    json_decref(d);
    cr_assert_eq(predict(&b, "{\"inputs\": [\"promote rule 11\"], \"tasks\": [\"cls\"]}", NULL, 0, NULL), 200);
    cr_expect_geq(until_ended(&b, "2"), 0, "the 12th input promoted version 2");
    cr_expect_geq(until_ended(&a, "2"), 0, "and the other replica serves it");
    char v[32];
    cr_assert_eq(predict(&a, "{\"inputs\": [\"after\"], \"tasks\": [\"cls\"]}", v, sizeof v, NULL), 200);
    cr_expect_str_eq(v, "2");
    cr_assert_eq(ts_stop(&a), 0);
    cr_assert_eq(ts_stop(&b), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- bad input, restarts, deletion ---- */

static char *state_of(const char *reg) {
    char *j = NULL;
    if (asprintf(&j, "cat %s/.adapterd-state.json %s/.adapterd-state.log 2>/dev/null", reg, reg) < 0) return NULL;
    FILE *f = popen(j, "r");
    free(j);
    char *out = calloc(1, 1 << 16);
    size_t n = f && out ? fread(out, 1, (1 << 16) - 1, f) : 0;
    if (f) pclose(f);
    if (out) out[n] = '\0';
    return out;
}

static void expect_refused(const test_server *s, const char *reg, const char *body, long status, const char *words) {
    char *before = state_of(reg);
    json_t *d = NULL;
    long st = call(s, "POST", "/v1/tasks/cls:rollout", body, &d);
    const char *msg = json_string_value(json_object_get(json_object_get(d, "error"), "message"));
    cr_expect_eq(st, status, "%s: answered %ld (%s)", body, st, msg ? msg : "");
    cr_expect(msg && strstr(msg, words), "%s: the message \"%s\" says \"%s\"", body, msg ? msg : "", words);
    json_decref(d);
    char *after = state_of(reg);
    cr_expect_str_eq(before, after, "%s changed the registry state", body);
    free(before), free(after);
}

Test(rollout, bad_rollouts_are_refused_and_change_nothing_restarts_and_deletion, .timeout = 120) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = registry("test-rollout-bad");
    test_server s;
    start(&s, reg, NULL);
    upload_candidate(&s);
    expect_refused(&s, reg, "{\"version\": \"0\", \"mode\": \"canary\", \"percent\": 10}", 422, "failed to load");
    expect_refused(&s, reg, "{\"version\": \"1\", \"mode\": \"canary\", \"percent\": 10}", 422, "current version");
    expect_refused(&s, reg, "{\"version\": \"2\", \"mode\": \"canary\", \"percent\": 101}", 422, "0 to 100");
    expect_refused(&s, reg, "{\"version\": \"2\", \"mode\": \"canary\", \"percent\": -1}", 422, "0 to 100");
    expect_refused(&s, reg, "{\"version\": \"2\", \"mode\": \"sideways\", \"percent\": 10}", 422, "\"canary\" or \"shadow\"");
    expect_refused(&s, reg, "{\"version\": \"9\", \"mode\": \"canary\", \"percent\": 10}", 404, "no version 9");
    cr_assert_eq(call(&s, "POST", "/v1/tasks/cls:rollout", "{\"version\": \"2\", \"mode\": \"canary\", \"percent\": 10}", NULL), 201);
    expect_refused(&s, reg, "{\"version\": \"2\", \"mode\": \"shadow\", \"percent\": 50}", 409, "already has a canary rollout");
    json_t *d = rollout_of(&s);
    json_t *ro = json_object_get(d, "rollout");
    cr_expect_str_eq(json_string_value(json_object_get(ro, "mode")), "canary", "the refused second rollout changed nothing");
    cr_expect_eq(json_number_value(json_object_get(ro, "percent")), 10);
    json_decref(d);
    /* a restart keeps it */
    cr_assert_eq(ts_stop(&s), 0);
    start(&s, reg, NULL);
    d = rollout_of(&s);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(d, "rollout"), "version")) ?: "", "2",
                     "the rollout survives a restart");
    json_decref(d);
    /* the command line against the running server: its status, a refusal (exit 1), an abort, a shadow */
    char cli[512];
    snprintf(cli, sizeof cli, "ADAPTERD_SERVER=http://127.0.0.1:%d ADAPTERD_ADMIN_TOKEN=t0ken %s/tools/adapterd rollout cls",
             s.port, ADAPTERD_BINARY_DIR);
    ts_sh_ok("%s | grep -q '\"mode\":\"canary\"'", cli);
    cr_expect_neq(ts_sh("%s 2 --shadow 20 2>/dev/null", cli), 0, "a second rollout is refused through the command line too");
    ts_sh_ok("%s --abort | grep -q '\"ended\":\"aborted\"'", cli);
    ts_sh_ok("%s 2 --shadow 20 --max-share 0.5 --promote-after 1000 | grep -q '\"max_share\":0.5'", cli);
    /* deleting the candidate ends it, and that is recorded too */
    cr_assert_eq(call(&s, "DELETE", "/v1/tasks/cls/versions/2", NULL, NULL), 200);
    d = rollout_of(&s);
    cr_expect(json_is_null(json_object_get(d, "rollout")), "deleting the candidate ends its rollout");
    json_decref(d);
    cr_assert_eq(ts_stop(&s), 0);
    start(&s, reg, NULL);
    d = rollout_of(&s);
    cr_expect(json_is_null(json_object_get(d, "rollout")), "and it stays ended after a restart");
    json_decref(d);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}
