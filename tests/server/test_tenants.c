/* test_tenants.c - integration tests of --keys (server/keys.c, front.c, admin.c): the real `adapterd
 * serve` with a keys file, called with libcurl. Each rule from the outside: 401 with WWW-Authenticate,
 * a task out of scope answering 404 byte for byte as an unknown one, 403 on admin routes, 429 with
 * Retry-After, revocation by rewriting the file, a broken reload keeping the last good keys, the
 * audit line and the per-tenant metrics. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "h2_client.h"
#include "http_client.h"
#include "test_text.h"

#define OP "operat0r"

typedef struct {
    long status;
    char body[4096];
    size_t len;
    char headers[4096];
    size_t hlen;
} resp;

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    resp *r = ud;
    size_t k = sz * n, room = sizeof r->body - 1 - r->len;
    memcpy(r->body + r->len, p, k < room ? k : room);
    r->len += k < room ? k : room;
    r->body[r->len] = '\0';
    return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    resp *r = ud;
    size_t k = sz * n, room = sizeof r->headers - 1 - r->hlen;
    memcpy(r->headers + r->hlen, p, k < room ? k : room);
    r->hlen += k < room ? k : room;
    r->headers[r->hlen] = '\0';
    return sz * n;
}

/* One request with key as the bearer key (NULL: none); body NULL: GET. */
static resp call(const test_server *s, const char *method, const char *path, const char *body, const char *key) {
    resp r = {0};
    CURL *c = curl_easy_init();
    char url[512], auth[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    r.status = curl_easy_perform(c) == CURLE_OK ? (curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status), r.status) : -1;
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

static bool has_header(const resp *r, const char *line) { return strcasestr(r->headers, line) != NULL; }

static void digest_of(const char *key, char out[72]) {
    unsigned char d[32];
    cr_assert_eq(gnutls_hash_fast(GNUTLS_DIG_SHA256, key, strlen(key), d), 0);
    strcpy(out, "sha256:");
    for (int i = 0; i < 32; i++) sprintf(out + 7 + 2 * i, "%02x", d[i]);
}


/* Tenants: a (predict and administer cls), b (predict other-* only), slow (one request per 10 s), tok (one
 * token a second: any request leaves it in debt). */
static void keys_doc(char *out, size_t n, bool with_a) {
    char da[72], db[72], ds[72], dt[72];
    digest_of("key-a", da), digest_of("key-b", db), digest_of("key-slow", ds), digest_of("key-tok", dt);
    snprintf(out, n,
             "{\"tenants\": [%s%s%s"
             "{\"name\": \"b\", \"keys\": [\"%s\"], \"predict\": [\"other-*\"], \"admin\": [\"other-*\"]},"
             "{\"name\": \"slow\", \"keys\": [\"%s\"], \"predict\": [\"*\"], \"requests_per_s\": 0.1, \"burst\": 1,"
             " \"priority\": \"batch\"},"
             "{\"name\": \"tok\", \"keys\": [\"%s\"], \"predict\": [\"*\"], \"tokens_per_s\": 1}]}",
             with_a ? "{\"name\": \"a\", \"keys\": [\"" : "", with_a ? da : "",
             with_a ? "\"], \"predict\": [\"cls\"], \"admin\": [\"cls\"], \"share\": 2}," : "", db, ds, dt);
}

static char keys_path[256];
static int gport;

static void start(test_server *s, char **reg) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    *reg = ts_registry_ok("adapterd-tenants");
    snprintf(keys_path, sizeof keys_path, "%s/../%s.keys.json", *reg, strrchr(*reg, '/') + 1);
    char doc[2048];
    keys_doc(doc, sizeof doc, true);
    write_file_atomic(keys_path, doc);
    static char port[16];
    gport = h2c_free_port();
    snprintf(port, sizeof port, "%d", gport);
    const char *args[] = {"--registry", *reg, "--admin-token", OP, "--keys", keys_path, "--grpc-port", port, NULL};
    cr_assert_eq(ts_start(s, args, NULL), 0, "server did not start");
}

static void finish(test_server *s, char *reg) {
    ts_stop(s);
    ts_sh("rm -rf '%s' '%s'", keys_path, reg); /* the keys file first: its path goes through reg/.. */
    free(reg);
}

#define PREDICT(task) "{\"inputs\": \"the movie was great\", \"tasks\": [\"" task "\"]}"
#define V2_BODY "{\"inputs\": [{\"name\": \"text\", \"shape\": [1], \"datatype\": \"BYTES\", \"data\": [\"great\"]}]}"

Test(tenants, keys_scopes_and_shapes, .timeout = 60) {
    test_server s;
    char *reg;
    start(&s, &reg);
    /* 401: no key, an unknown key; WWW-Authenticate; each protocol's error shape */
    resp r = call(&s, "POST", "/v1/predict", PREDICT("cls"), NULL);
    cr_expect_eq(r.status, 401, "%s", r.body);
    cr_expect(has_header(&r, "WWW-Authenticate: Bearer"), "%s", r.headers);
    cr_expect(strstr(r.body, "\"code\":\"unauthenticated\"") || strstr(r.body, "\"code\": \"unauthenticated\""), "v1 shape: %s", r.body);
    r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "not-a-key");
    cr_expect_eq(r.status, 401, "%s", r.body);
    r = call(&s, "POST", "/v2/models/cls/infer", V2_BODY, NULL);
    cr_expect_eq(r.status, 401, "%s", r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_expect(json_is_string(json_object_get(d, "error")), "v2 shape {\"error\": \"...\"}: %s", r.body);
    json_decref(d);
    r = call(&s, "POST", "/v1/embeddings", "{\"input\": \"hi\", \"model\": \"bert-tiny\"}", NULL);
    cr_expect_eq(r.status, 401, "%s", r.body);
    /* a key in scope works */
    r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-a");
    cr_expect_eq(r.status, 200, "%s", r.body);
    r = call(&s, "POST", "/v2/models/cls/infer", V2_BODY, "key-a");
    cr_expect_eq(r.status, 200, "%s", r.body);
    /* out of scope: byte for byte an unknown task, v1 and v2 */
    resp out = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-b");
    resp unk = call(&s, "POST", "/v1/predict", PREDICT("nosuch"), "key-b");
    cr_expect_eq(out.status, 404, "%s", out.body);
    cr_expect_eq(unk.status, 404);
    cr_expect(strstr(out.body, "\\\"cls\\\"") != NULL, "%s", out.body);
    char want[4096];
    snprintf(want, sizeof want, "%s", unk.body);
    char *p = strstr(want, "nosuch");
    cr_assert(p);
    memmove(p + 3, p + 6, strlen(p + 6) + 1), memcpy(p, "cls", 3);
    cr_expect_str_eq(out.body, want, "out of scope must read as unknown");
    out = call(&s, "POST", "/v2/models/cls/infer", V2_BODY, "key-b");
    cr_expect_eq(out.status, 404, "%s", out.body);
    /* listings: only the tasks in scope; a lookup out of scope reads as unknown */
    r = call(&s, "GET", "/v1/tasks", NULL, NULL);
    cr_expect_eq(r.status, 401, "%s", r.body);
    r = call(&s, "GET", "/v1/tasks", NULL, "key-a");
    cr_expect(r.status == 200 && strstr(r.body, "\"cls\""), "%s", r.body);
    r = call(&s, "GET", "/v1/tasks", NULL, "key-b");
    cr_expect(r.status == 200 && !strstr(r.body, "\"cls\""), "%s", r.body);
    out = call(&s, "GET", "/v2/models/cls", NULL, "key-b");
    unk = call(&s, "GET", "/v2/models/nosuch", NULL, "key-b");
    cr_expect_eq(out.status, 404, "%s", out.body);
    cr_expect_eq(out.len + 3, unk.len, "%s vs %s", out.body, unk.body);
    cr_expect_eq(call(&s, "GET", "/v2/models/cls/ready", NULL, "key-b").status, 404);
    cr_expect_eq(call(&s, "GET", "/v2/models/cls", NULL, "key-a").status, 200);
    /* admin: 401, 403, the operator everything */
    const char *act = "{\"version\": \"1\"}";
    r = call(&s, "POST", "/v1/tasks/cls:activate", act, NULL);
    cr_expect_eq(r.status, 401, "%s", r.body);
    r = call(&s, "POST", "/v1/tasks/cls:activate", act, "key-b");
    cr_expect_eq(r.status, 403, "%s", r.body);
    cr_expect(strstr(r.body, "forbidden") != NULL, "%s", r.body);
    r = call(&s, "GET", "/v1/tasks/cls/versions", NULL, "key-a");
    cr_expect_eq(r.status, 200, "%s", r.body);
    r = call(&s, "GET", "/v1/tasks/cls/versions", NULL, OP);
    cr_expect_eq(r.status, 200, "%s", r.body);
    /* 429 with Retry-After */
    r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-slow");
    cr_expect_eq(r.status, 200, "%s", r.body);
    r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-slow");
    cr_expect_eq(r.status, 429, "%s", r.body);
    char *ra = strcasestr(r.headers, "Retry-After: ");
    cr_expect(ra && atoi(ra + 13) >= 1 && atoi(ra + 13) <= 10, "%s", r.headers);
    /* the token bucket: the first request is admitted and charged its tokens after tokenizing (the bucket goes
     * into debt), the next one is refused at admission until the debt is paid */
    r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-tok");
    cr_expect_eq(r.status, 200, "%s", r.body);
    r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-tok");
    cr_expect_eq(r.status, 429, "%s", r.body);
    ra = strcasestr(r.headers, "Retry-After: ");
    cr_expect(ra && atoi(ra + 13) >= 1, "%s", r.headers);
    r = call(&s, "POST", "/v2/models/cls/infer", V2_BODY, "key-tok");
    cr_expect_eq(r.status, 429, "KServe v2 too: %s", r.body);
    /* open routes stay open */
    cr_expect_eq(call(&s, "GET", "/healthz", NULL, NULL).status, 200);
    cr_expect_eq(call(&s, "GET", "/metrics", NULL, NULL).status, 200);
    /* per-tenant metrics */
    cr_expect_geq(ts_metric(&s, "adapterd_tenant_requests_total{tenant=\"a\"}"), 2);
    cr_expect_geq(ts_metric(&s, "adapterd_tenant_refusals_total{tenant=\"slow\",reason=\"rate_limited_requests\"}"), 1);
    cr_expect_geq(ts_metric(&s, "adapterd_tenant_refusals_total{tenant=\"b\",reason=\"forbidden\"}"), 1);
    cr_expect_geq(ts_metric(&s, "adapterd_tenant_refusals_total{tenant=\"tok\",reason=\"rate_limited_tokens\"}"), 2);
    cr_expect_geq(ts_metric(&s, "adapterd_unauthenticated_total"), 4);
    finish(&s, reg);
}

Test(tenants, revocation_and_broken_reloads, .timeout = 60) {
    test_server s;
    char *reg;
    start(&s, &reg);
    resp r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-a");
    cr_assert_eq(r.status, 200, "%s", r.body);
    /* broken: the last good keys stay, the error is counted */
    write_file_atomic(keys_path, "{\"tenants\": [{\"name\": \"a\", \"keys\": [\"key-a\"]}]}");
    cr_expect_eq(ts_wait_metric(&s, "adapterd_keys_reload_errors_total", 1, 3000), 1);
    r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-a");
    cr_expect_eq(r.status, 200, "the last good keys: %s", r.body);
    /* revoked while the client keeps sending: refused within ~1.5 s */
    char doc[2048];
    keys_doc(doc, sizeof doc, false);
    write_file_atomic(keys_path, doc);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double dt = 0;
    for (;;) {
        r = call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-a");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (r.status == 401 || dt > 5) break;
        ts_sleep_ms(20);
    }
    cr_expect_eq(r.status, 401, "still served %.2f s after the revocation", dt);
    cr_expect_lt(dt, 1.5, "revoked after %.2f s", dt);
    finish(&s, reg);
}

Test(tenants, one_audit_line_per_admin_action, .timeout = 60) {
    /* the server's stderr into a file of ours (the helper sends it to /dev/null unless ADAPTERD_TEST_LOG) */
    char log[] = "/tmp/adapterd-audit-XXXXXX";
    int fd = mkstemp(log), saved = dup(2);
    cr_assert(fd >= 0 && saved >= 0);
    setenv("ADAPTERD_TEST_LOG", "1", 1);
    dup2(fd, 2);
    test_server s;
    char *reg;
    start(&s, &reg);
    dup2(saved, 2);
    close(saved), close(fd);
    unsetenv("ADAPTERD_TEST_LOG");
    resp r = call(&s, "POST", "/v1/tasks/cls:pin", "{\"version\": \"1\"}", "key-b");
    cr_expect_eq(r.status, 403, "%s", r.body);
    r = call(&s, "GET", "/v1/tasks/cls/versions", NULL, OP);
    cr_expect_eq(r.status, 200, "%s", r.body);
    r = call(&s, "DELETE", "/v1/tasks/cls/versions/0", NULL, "nope");
    cr_expect_eq(r.status, 401, "%s", r.body);
    finish(&s, reg);
    size_t len = 0;
    char *text = ts_read_file(log, &len);
    cr_assert_not_null(text);
    cr_expect(strstr(text, "audit caller=b action=pin task=cls version=- status=403 request=") != NULL, "%s", text);
    cr_expect(strstr(text, "audit caller=operator action=list_versions task=cls version=- status=200 request=") != NULL, "%s",
              text);
    cr_expect(strstr(text, "audit caller=- action=delete_version task=cls version=0 status=401 request=") != NULL, "%s", text);
    free(text);
    unlink(log);
}

/* One gRPC call of method with message m (prefix included) and key (NULL: none); its stream once closed. */
static h2c_stream gcall(const char *method, const uint8_t *m, size_t len, const char *key) {
    h2c *c = h2c_connect(gport, NULL);
    cr_assert(c, "cannot connect to the gRPC port");
    char auth[128] = "";
    if (key) snprintf(auth, sizeof auth, "Bearer %s", key);
    h2c_set_auth(c, auth);
    int i = h2c_call(c, method, m, len, true);
    cr_assert(i >= 0);
    cr_assert(h2c_run(c, 20000, NULL, NULL), "%s did not close in 20 s", method);
    h2c_stream st = *h2c_stream_at(c, i);
    h2c_free(c);
    return st;
}

static h2c_stream ginfer(const char *model, const char *key) {
    size_t rl = 0, ml = 0;
    uint8_t *req = h2c_infer_request(model, "a fine and moving film", 0, &rl);
    uint8_t *m = req ? h2c_grpc_message(req, rl, &ml) : NULL;
    cr_assert(m);
    h2c_stream st = gcall("ModelInfer", m, ml, key);
    free(req), free(m);
    return st;
}

static h2c_stream gnamed(const char *method, const char *name, const char *key) {
    size_t n = strlen(name), ml = 0;
    uint8_t pb[130];
    pb[0] = 0x0a, pb[1] = (uint8_t)n;
    memcpy(pb + 2, name, n);
    uint8_t *m = h2c_grpc_message(pb, n + 2, &ml);
    cr_assert(m);
    h2c_stream st = gcall(method, m, ml, key);
    free(m);
    return st;
}

enum { G_OK = 0, G_NOT_FOUND = 5, G_RESOURCE_EXHAUSTED = 8, G_UNAUTHENTICATED = 16 };

Test(tenants, grpc_keys_scopes_and_quotas, .timeout = 60) {
    test_server s;
    char *reg;
    start(&s, &reg);
    h2c_stream st = ginfer("cls", NULL);
    cr_expect_eq(st.grpc_status, G_UNAUTHENTICATED, "no key: %d %s", st.grpc_status, st.grpc_message);
    st = ginfer("cls", "not-a-key");
    cr_expect_eq(st.grpc_status, G_UNAUTHENTICATED, "unknown key: %d %s", st.grpc_status, st.grpc_message);
    st = ginfer("cls", "key-a");
    cr_expect_eq(st.grpc_status, G_OK, "in scope: %d %s", st.grpc_status, st.grpc_message);
    h2c_stream out = ginfer("cls", "key-b"), unk = ginfer("nosuch", "key-b");
    cr_expect_eq(out.grpc_status, G_NOT_FOUND, "out of scope: %d %s", out.grpc_status, out.grpc_message);
    cr_expect_eq(unk.grpc_status, G_NOT_FOUND);
    cr_expect_eq(strlen(out.grpc_message) + 3, strlen(unk.grpc_message), "%s vs %s", out.grpc_message, unk.grpc_message);
    st = gnamed("ModelMetadata", "cls", "key-b");
    cr_expect_eq(st.grpc_status, G_NOT_FOUND, "metadata out of scope: %d %s", st.grpc_status, st.grpc_message);
    st = gnamed("ModelMetadata", "cls", "key-a");
    cr_expect_eq(st.grpc_status, G_OK, "metadata in scope: %d %s", st.grpc_status, st.grpc_message);
    st = gnamed("ModelReady", "cls", NULL);
    cr_expect_eq(st.grpc_status, G_UNAUTHENTICATED, "ready without a key: %d %s", st.grpc_status, st.grpc_message);
    st = ginfer("cls", "key-slow");
    cr_expect_eq(st.grpc_status, G_OK, "%d %s", st.grpc_status, st.grpc_message);
    st = ginfer("cls", "key-slow");
    cr_expect_eq(st.grpc_status, G_RESOURCE_EXHAUSTED, "over quota: %d %s", st.grpc_status, st.grpc_message);
    finish(&s, reg);
}

/* ---- a request split across engine passes (server/scheduler.c, "Split jobs") ---- */

#define SPLIT_BODY                                                                                                     \
    "{\"inputs\": [\"the movie was great\", \"a dull and tired plot\", \"the actors did well\", \"i left early\","      \
    " \"what a waste of an evening\", \"fine music\", \"the best film of the year\", \"not for me\"], \"tasks\": [\"cls\"]}"

typedef struct {
    const test_server *s;
    int n, same;
    const char *ref;
    size_t ref_len;
} flood_arg;

static void *flood_main(void *p) { /* one connection of the flood: n requests, counting answers equal to ref */
    flood_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        resp r = call(a->s, "POST", "/v1/predict", SPLIT_BODY, "key-flood");
        /* the request's id, timing and batch are its own: the answer is what lies between */
        const char *from = strstr(r.body, "\"model\""), *to = strstr(r.body, ",\"timing\"");
        a->same += r.status == 200 && from && to && (size_t)(to - from) == a->ref_len && memcmp(from, a->ref, a->ref_len) == 0;
    }
    return NULL;
}

static size_t on_big(char *p, size_t sz, size_t n, void *ud) {
    char **b = ud;
    size_t have = *b ? strlen(*b) : 0, k = sz * n;
    char *nb = realloc(*b, have + k + 1);
    if (!nb) return 0;
    memcpy(nb + have, p, k);
    nb[have + k] = '\0';
    *b = nb;
    return k;
}

/* adapterd_batch_inputs_bucket{le="<le>"} of /metrics. */
static double batch_inputs_le(const test_server *s, const char *le) {
    char url[256], *body = NULL, line[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", s->port);
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_big);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    cr_assert_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_cleanup(c);
    cr_assert(body);
    snprintf(line, sizeof line, "adapterd_batch_inputs_bucket{le=\"%s\"} ", le);
    char *at = strstr(body, line);
    cr_assert(at, "no %s in /metrics", line);
    double v = strtod(at + strlen(line), NULL);
    free(body);
    return v;
}

/* One worker, a tenant flooding with 8-input requests beside a light one: the light-tenant cap cuts the
 * flood's requests across passes (passes of 3-4 inputs appear, which whole 8-input requests and 1-input
 * ones cannot make), and every flood answer is byte for byte the answer of the same request run whole
 * on the idle server (but for the request's own id, timing and batch). */
Test(tenants, a_split_request_answers_as_the_unsplit_one, .timeout = 60) {
    test_server s;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = ts_registry_ok("adapterd-split");
    snprintf(keys_path, sizeof keys_path, "%s/../%s.keys.json", reg, strrchr(reg, '/') + 1);
    char df[72], dq[72], doc[512];
    digest_of("key-flood", df), digest_of("key-quiet", dq);
    snprintf(doc, sizeof doc,
             "{\"tenants\": [{\"name\": \"flood\", \"keys\": [\"%s\"], \"predict\": [\"*\"]},"
             " {\"name\": \"quiet\", \"keys\": [\"%s\"], \"predict\": [\"*\"]}]}", df, dq);
    write_file_atomic(keys_path, doc);
    const char *args[] = {"--registry", reg, "--keys", keys_path, "--workers", "1", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0, "server did not start");
    resp ref = call(&s, "POST", "/v1/predict", SPLIT_BODY, "key-flood"); /* alone: one whole pass */
    cr_assert_eq(ref.status, 200, "%s", ref.body);
    cr_assert_lt(ref.len, sizeof ref.body - 1, "the answer fits the buffer");
    cr_assert(strstr(ref.body, "\"model\"") && strstr(ref.body, ",\"timing\""));
    double split0 = batch_inputs_le(&s, "4") - batch_inputs_le(&s, "2");
    enum { CONNS = 4, EACH = 6 };
    flood_arg fa[CONNS];
    pthread_t th[CONNS];
    for (int i = 0; i < CONNS; i++) {
        fa[i] = (flood_arg){.s = &s, .n = EACH, .ref = strstr(ref.body, "\"model\""),
                            .ref_len = (size_t)(strstr(ref.body, ",\"timing\"") - strstr(ref.body, "\"model\""))};
        cr_assert_eq(pthread_create(&th[i], NULL, flood_main, &fa[i]), 0);
    }
    for (int i = 0; i < 12; i++) { /* the light tenant: one input now and then */
        cr_expect_eq(call(&s, "POST", "/v1/predict", PREDICT("cls"), "key-quiet").status, 200);
        usleep(20000);
    }
    int same = 0;
    for (int i = 0; i < CONNS; i++) pthread_join(th[i], NULL), same += fa[i].same;
    cr_expect_eq(same, CONNS * EACH, "%d of %d flood answers equal the unsplit one", same, CONNS * EACH);
    double split = batch_inputs_le(&s, "4") - batch_inputs_le(&s, "2") - split0;
    cr_expect_gt(split, 0, "passes of 3-4 inputs: the flood's requests were split");
    ts_stop(&s);
    ts_sh("rm -rf '%s' '%s'", keys_path, reg);
    free(reg);
}
