/* test_admin.c - integration tests of hot loading (adapters_store/, server/admin.c, tar.c, watch.c,
 * offload.c): the real `adapterd serve` on a registry copied to a temporary directory, versions
 * uploaded as .tar / .tar.gz built from the bert-tiny fixtures, called with libcurl. */
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "http_client.h"

#define AD ADAPTERD_FIXTURES "/adapters/bert-tiny"
#define TOKEN "t0ken"
#define AUTH "Authorization: Bearer " TOKEN

static void start_on(test_server *s, const char *reg, const char *extra1, const char *extra2) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--registry", reg, "--admin-token", TOKEN, "--max-upload-bytes", "2000000",
                          "--watch-interval-ms", "300", "--watch-debounce-ms", "50", extra1, extra2, NULL};
    if (!extra1) args[10] = NULL;
    cr_assert_eq(ts_start(s, args, NULL), 0, "server did not start on %s", reg);
}

/* Uploads the folder src (its contents become the version) as a .tar.gz; returns the status. */
static long upload_dir(const test_server *s, const char *task, int version, const char *src, int activate, json_t **out) {
    char path[256];
    size_t len;
    char *b = ts_tgz_of(src, &len);
    cr_assert(b, "cannot pack %s", src);
    snprintf(path, sizeof path, "/v1/tasks/%s/versions/%d%s", task, version, activate ? "?activate=true" : "");
    long st = ts_request(s, "PUT", path, b, len, "application/gzip", AUTH, out);
    free(b);
    return st;
}

static long upload_raw(const test_server *s, const char *task, int version, const void *b, size_t len, json_t **out) {
    char path[256];
    snprintf(path, sizeof path, "/v1/tasks/%s/versions/%d", task, version);
    return ts_request(s, "PUT", path, b, len, "application/x-tar", AUTH, out);
}

/* One ustar entry (header + padded data) appended to buf at *off. */
static void tar_entry(unsigned char *buf, size_t *off, const char *name, char type, const char *link, const void *data,
                      size_t n) {
    unsigned char *h = buf + *off;
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011zo", n);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (unsigned char)type;
    if (link) snprintf((char *)h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    *off += 512;
    if (n) memcpy(buf + *off, data, n);
    *off += (n + 511) & ~(size_t)511;
}

#define REJECT(call, ...)              \
    do {                               \
        long st_ = (call);             \
        expect_rejected(&s, st_, d, __VA_ARGS__); \
    } while (0)

static void expect_rejected(const test_server *s, long status, json_t *doc, long want, const char *code, const char *needle,
                            const char *what) {
    cr_expect_eq(status, want, "%s: status %ld, want %ld: %s", what, status, want, doc ? json_dumps(doc, 0) : "(no json)");
    json_t *e = json_object_get(doc, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")) ?: "", code, "%s", what);
    const char *msg = json_string_value(json_object_get(e, "message"));
    cr_expect(msg && strstr(msg, needle), "%s: message should name \"%s\": %s", what, needle, msg ? msg : "");
    (void)s;
}

/* The version and the scores a predict of task answered. */
static int predict(const test_server *s, const char *task, char *version, size_t vn, json_t **scores) {
    char body[256];
    snprintf(body, sizeof body, "{\"inputs\":\"the movie was great\",\"tasks\":[\"%s\"]}", task);
    json_t *d = NULL;
    long st = ts_request(s, "POST", "/v1/predict", body, strlen(body), "application/json", NULL, &d);
    if (st != 200) {
        json_decref(d);
        return (int)st;
    }
    json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), task);
    snprintf(version, vn, "%s", json_string_value(json_object_get(t, "version")));
    if (scores) *scores = json_incref(json_object_get(t, "scores"));
    json_decref(d);
    return 200;
}

/* Two score maps of one version (or of one adapter in two layouts) agree to 1e-5. */
static int close_scores(json_t *a, json_t *b) { return ts_scores_close(a, b, 1e-5); }

static const char *current_of(json_t *versions_doc) { return json_string_value(json_object_get(versions_doc, "current")); }

/* ---- tests ---- */

Test(admin, routes_need_the_token, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    test_server s;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--registry", reg, NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    json_t *d = NULL;
    cr_expect_eq(ts_request(&s, "GET", "/v1/tasks/cls/versions", NULL, 0, NULL, AUTH, &d), 404, "admin off: 404");
    json_decref(d);
    cr_expect_eq(ts_request(&s, "POST", "/v2/repository/index", "", 0, NULL, AUTH, NULL), 404);
    cr_assert_eq(ts_stop(&s), 0);
    start_on(&s, reg, NULL, NULL);
    cr_expect_eq(ts_request(&s, "GET", "/v1/tasks/cls/versions", NULL, 0, NULL, NULL, &d), 401, "no token: 401");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(d, "error"), "code")), "unauthenticated");
    json_decref(d);
    cr_expect_eq(ts_request(&s, "GET", "/v1/tasks/cls/versions", NULL, 0, NULL, "Authorization: Bearer nope", NULL), 401);
    cr_expect_eq(ts_request(&s, "GET", "/v1/tasks/cls/versions", NULL, 0, NULL, AUTH, &d), 200);
    cr_expect_str_eq(current_of(d), "1");
    cr_expect_eq(json_array_size(json_object_get(d, "versions")), 2);
    json_decref(d);
    cr_expect_eq(ts_request(&s, "POST", "/v2/repository/index", "", 0, NULL, AUTH, &d), 200);
    cr_expect_eq(json_array_size(d), 1);
    json_decref(d);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

Test(admin, upload_activate_roll_back_delete, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    test_server s;
    start_on(&s, reg, NULL, NULL);
    char v[32];
    json_t *sc1 = NULL, *sc2 = NULL, *sc = NULL, *d = NULL;
    cr_assert_eq(predict(&s, "cls", v, sizeof v, &sc1), 200);
    cr_assert_str_eq(v, "1");
    /* upload: listed, not current */
    cr_assert_eq(upload_dir(&s, "cls", 2, AD "/seq_bn_st/adapters", 0, &d), 201, "%s", json_dumps(d, 0));
    cr_expect_str_eq(current_of(d), "1");
    json_decref(d);
    cr_assert_eq(predict(&s, "cls", v, sizeof v, NULL), 200);
    cr_expect_str_eq(v, "1", "an upload does not move current");
    /* activate */
    cr_assert_eq(ts_request(&s, "POST", "/v1/tasks/cls:activate", "{\"version\":\"2\"}", 15, "application/json", AUTH, &d), 200);
    cr_expect_str_eq(current_of(d), "2");
    json_decref(d);
    cr_assert_eq(predict(&s, "cls", v, sizeof v, &sc2), 200);
    cr_expect_str_eq(v, "2");
    cr_expect(!close_scores(sc1, sc2), "versions 1 and 2 answer differently");
    /* roll back */
    cr_assert_eq(ts_request(&s, "POST", "/v1/tasks/cls:activate", "{\"version\":1}", 13, "application/json", AUTH, NULL), 200);
    cr_assert_eq(predict(&s, "cls", v, sizeof v, &sc), 200);
    cr_expect_str_eq(v, "1");
    cr_expect(close_scores(sc, sc1), "rolled back: the same answers as before");
    json_decref(sc);
    cr_expect_eq(ts_request(&s, "POST", "/v1/tasks/cls:activate", "{\"version\":\"9\"}", 15, "application/json", AUTH, NULL), 404);
    /* deletes: not the current one while others exist; a version; the whole task */
    cr_expect_eq(ts_request(&s, "DELETE", "/v1/tasks/cls/versions/1", NULL, 0, NULL, AUTH, NULL), 422);
    cr_expect_eq(ts_request(&s, "DELETE", "/v1/tasks/cls/versions/2", NULL, 0, NULL, AUTH, &d), 200);
    cr_expect_eq(json_array_size(json_object_get(d, "versions")), 2);
    json_decref(d);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/tasks/cls/2", reg);
    cr_expect_neq(stat(p, &st), 0, "a deleted version's files are gone");
    cr_expect_eq(ts_request(&s, "DELETE", "/v1/tasks/cls", NULL, 0, NULL, AUTH, NULL), 200);
    cr_expect_eq(predict(&s, "cls", v, sizeof v, NULL), 404);
    /* a new task by upload, activated at once; KServe load / unload */
    cr_assert_eq(upload_dir(&s, "fresh", 1, AD "/ia3/adapters", 1, NULL), 201);
    cr_expect_eq(predict(&s, "fresh", v, sizeof v, NULL), 200);
    cr_expect_eq(ts_request(&s, "POST", "/v2/repository/models/fresh/unload", "", 0, NULL, AUTH, NULL), 200);
    cr_expect_eq(ts_request(&s, "POST", "/v2/repository/models/fresh/load", "", 0, NULL, AUTH, &d), 200);
    cr_expect_str_eq(json_string_value(json_object_get(d, "state")), "READY");
    json_decref(d);
    json_decref(sc1), json_decref(sc2);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

Test(admin, bad_uploads_are_rejected_with_the_reason, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    test_server s;
    start_on(&s, reg, NULL, NULL);
    char work[256], cmd[2048];
    snprintf(work, sizeof work, "%s/../adapterd-bad-%d", reg, (int)getpid());
    json_t *d = NULL;
    /* corrupt tensor: a truncated safetensors file */
    ts_sh_ok("rm -rf %s && mkdir -p %s && cp -rL %s/lora_ah/adapters/lora %s/ && truncate -s 300 %s/lora/adapter.safetensors", work,
       work, AD, work, work);
    REJECT(upload_dir(&s, "cls", 7, work, 1, &d), 422, "invalid_argument", "adapter.safetensors", "corrupt tensor");
    json_decref(d);
    /* wrong shapes for this backbone: a well-formed file whose first LoRA matrix is (8, 32), not (8, 64) */
    ts_sh_ok("rm -rf %s && mkdir -p %s && cp -rL %s/lora_ah/adapters/lora %s/ && python3 %s/tests/server/reshape_tensor.py %s/lora/adapter.safetensors",
       work, work, AD, work, ADAPTERD_SOURCE_DIR, work);
    REJECT(upload_dir(&s, "cls", 7, work, 1, &d), 422, "invalid_argument", "shape_mismatch", "wrong shapes");
    json_decref(d);
    /* a bottleneck whose adapter_up width (5) does not match adapter_down's (4): once loaded, and then read out
     * of bounds by every prediction; now refused naming the tensor */
    ts_sh_ok("rm -rf %s && mkdir -p %s && cp -rL %s/seq_bn_st/adapters/sst %s/ && python3 %s/tests/server/reshape_tensor.py "
       "%s/sst/adapter.safetensors bert.encoder.layer.1.output.adapters.sst.adapter_up.weight 1 1",
       work, work, AD, work, ADAPTERD_SOURCE_DIR, work);
    REJECT(upload_dir(&s, "cls", 7, work, 1, &d), 422, "invalid_argument",
           "bert.encoder.layer.1.output.adapters.sst.adapter_up.weight", "bottleneck widths");
    json_decref(d);
    /* unknown method */
    ts_sh_ok("rm -rf %s && mkdir -p %s && cp -rL %s/lora_ah/adapters/lora %s/ && sed -i 's/\"architecture\": \"lora\"/\"architecture\": \"hyperloop\"/' %s/lora/adapter_config.json",
       work, work, AD, work, work);
    REJECT(upload_dir(&s, "cls", 7, work, 1, &d), 422, "invalid_argument", "hyperloop", "unknown method");
    json_decref(d);
    /* archives: traversal, absolute path, links, devices, not a tar */
    unsigned char *buf = calloc(1, 1 << 16);
    size_t off = 0;
    tar_entry(buf, &off, "../evil.txt", '0', NULL, "x", 1);
    REJECT(upload_raw(&s, "cls", 7, buf, off + 1024, &d), 422, "invalid_argument", "..", "traversal");
    json_decref(d);
    off = 0;
    memset(buf, 0, 1 << 16);
    tar_entry(buf, &off, "/etc/evil", '0', NULL, "x", 1);
    REJECT(upload_raw(&s, "cls", 7, buf, off + 1024, &d), 422, "invalid_argument", "absolute", "absolute path");
    json_decref(d);
    off = 0;
    memset(buf, 0, 1 << 16);
    tar_entry(buf, &off, "lora", '2', "/etc", NULL, 0);
    REJECT(upload_raw(&s, "cls", 7, buf, off + 1024, &d), 422, "invalid_argument", "link", "symlink");
    json_decref(d);
    off = 0;
    memset(buf, 0, 1 << 16);
    tar_entry(buf, &off, "dev", '3', NULL, NULL, 0);
    REJECT(upload_raw(&s, "cls", 7, buf, off + 1024, &d), 422, "invalid_argument", "entry type", "device");
    json_decref(d);
    REJECT(upload_raw(&s, "cls", 7, "hello, not a tar file at all.........", 37, &d), 400, "malformed", "archive",
                    "not a tar");
    json_decref(d);
    /* oversize body (limit 2000000) and a gzip bomb (40 MB of zeros, unpacked limit 8 MB) */
    size_t big = 2100000;
    char *bb = calloc(1, big);
    REJECT(upload_raw(&s, "cls", 7, bb, big, &d), 413, "too_large", "limit", "oversize");
    json_decref(d);
    free(bb);
    size_t zn = 40u << 20;
    unsigned char *zeros = calloc(1, zn + 1024);
    off = 0;
    tar_entry(zeros, &off, "big.bin", '0', NULL, NULL, 0);
    snprintf((char *)zeros + 124, 12, "%011zo", zn - 512); /* the header claims the zeros that follow */
    memset(zeros + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += zeros[i];
    snprintf((char *)zeros + 148, 8, "%06o", sum);
    uLongf gl = compressBound(zn) + 64;
    unsigned char *gz = malloc(gl);
    z_stream z = {0};
    cr_assert_eq(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = zeros, z.avail_in = (uInt)zn, z.next_out = gz, z.avail_out = (uInt)gl;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t gzn = z.total_out;
    deflateEnd(&z);
    REJECT(ts_request(&s, "PUT", "/v1/tasks/cls/versions/7", gz, gzn, "application/gzip", AUTH, &d), 413, "too_large",
                    "unpacks", "gzip bomb");
    json_decref(d);
    free(gz), free(zeros), free(buf);
    /* an existing version is immutable; a bad name */
    REJECT(upload_dir(&s, "cls", 1, AD "/ia3/adapters", 0, &d), 409, "conflict", "immutable", "existing version");
    json_decref(d);
    /* the task kept serving its current version; nothing was left behind */
    char v[32];
    cr_assert_eq(predict(&s, "cls", v, sizeof v, NULL), 200);
    cr_expect_str_eq(v, "1");
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s/tasks | grep -v '^cls$')\" && test ! -e %s/tasks/cls/7", reg, reg);
    cr_expect_eq(system(cmd), 0, "rejected uploads leave no files in tasks/");
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s %s", work, reg); /* work first: it is named through reg */
    free(reg);
}

static int wait_version(const test_server *s, const char *task, const char *want) {
    char v[32] = "";
    for (int i = 0; i < 100; i++) {
        if (predict(s, task, v, sizeof v, NULL) == 200 && !strcmp(v, want)) return 1;
        ts_sleep_ms(50);
    }
    return 0;
}

Test(admin, watch_loads_renamed_versions_and_reports_changed_files, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    test_server s;
    start_on(&s, reg, NULL, NULL);
    /* a writer copies into a '.' name and renames: picked up, and numbered above 1 it becomes current */
    ts_sh_ok("mkdir -p %s/tasks/cls/.incoming && cp -rL %s/seq_bn_st/adapters/* %s/tasks/cls/.incoming/ && mv %s/tasks/cls/.incoming %s/tasks/cls/5",
       reg, AD, reg, reg, reg);
    cr_expect(wait_version(&s, "cls", "5"), "version 5 was not picked up");
    /* a new task directory */
    ts_sh_ok("mkdir -p %s/tasks/.new/1 && cp -rL %s/ia3/adapters/* %s/tasks/.new/1/ && mv %s/tasks/.new %s/tasks/watched", reg, AD, reg,
       reg, reg);
    cr_expect(wait_version(&s, "watched", "1"), "a new task directory was not picked up");
    /* a broken version dropped in is rejected (logged, counted), the task keeps serving */
    ts_sh_ok("mkdir -p %s/tasks/cls/.b && cp -rL %s/lora_ah/adapters/lora %s/tasks/cls/.b/ && truncate -s 100 %s/tasks/cls/.b/lora/adapter.safetensors && mv %s/tasks/cls/.b %s/tasks/cls/6",
       reg, AD, reg, reg, reg, reg);
    cr_expect_geq(ts_wait_metric(&s, "adapterd_adapter_load_failures_total", 1, 3000), 1);
    char v[32];
    cr_assert_eq(predict(&s, "cls", v, sizeof v, NULL), 200);
    cr_expect_str_eq(v, "5");
    /* versions are immutable: a file changed inside one is reported, not reloaded */
    ts_sh_ok("echo ' ' >> %s/tasks/cls/5/sst/adapter_config.json", reg);
    cr_expect_eq(ts_wait_metric(&s, "adapterd_registry_changed_versions_total", 1, 3000), 1);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

Test(admin, restart_keeps_the_registry_state, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    test_server s;
    start_on(&s, reg, NULL, NULL);
    json_t *d = NULL;
    cr_assert_eq(upload_dir(&s, "cls", 2, AD "/seq_bn_st/adapters", 0, NULL), 201);
    cr_assert_eq(upload_dir(&s, "cls", 3, AD "/ia3/adapters", 0, NULL), 201);
    cr_assert_eq(ts_request(&s, "POST", "/v1/tasks/cls:activate", "{\"version\":\"2\"}", 15, "application/json", AUTH, NULL), 200);
    cr_assert_eq(ts_request(&s, "POST", "/v1/tasks/cls:pin", "", 0, NULL, AUTH, NULL), 200);
    cr_assert_eq(ts_request(&s, "DELETE", "/v1/tasks/cls/versions/0", NULL, 0, NULL, AUTH, NULL), 200);
    cr_assert_eq(ts_stop(&s), 0);
    start_on(&s, reg, NULL, NULL);
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/cls/versions", NULL, 0, NULL, AUTH, &d), 200);
    cr_expect_str_eq(current_of(d), "2", "the activated version survives a restart (not the highest, 3)");
    json_t *vs = json_object_get(d, "versions");
    cr_expect_eq(json_array_size(vs), 3, "versions 1, 2, 3 (0 was deleted)");
    json_t *v2 = json_array_get(vs, 1);
    cr_expect(json_is_true(json_object_get(v2, "pinned")), "the pin survives a restart");
    json_decref(d);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

Test(admin, budget_loads_lazily_and_evicts_least_recently_used, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    /* four tasks of ~41 KB (LoRA), one pinned by task.json; room for about two */
    ts_sh_ok("for t in a b c; do mkdir -p %s/tasks/$t/1 && cp -rL %s/lora_ah/adapters/lora %s/tasks/$t/1/; done", reg, AD, reg);
    ts_sh_ok("mkdir -p %s/tasks/p/1 && cp -rL %s/lora_ah/adapters/lora %s/tasks/p/1/ && echo '{\"pinned\": true}' > %s/tasks/p/1/task.json",
       reg, AD, reg, reg);
    ts_sh_ok("rm -rf %s/tasks/cls", reg);
    test_server s;
    start_on(&s, reg, "--adapter-memory", "100000");
    json_t *d = NULL;
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/a", NULL, 0, NULL, NULL, &d), 200);
    cr_expect(json_is_false(json_object_get(d, "resident")), "lazy: a is not loaded before its first request");
    cr_expect(json_is_null(json_object_get(d, "head")), "head unknown before the first load");
    json_decref(d);
    cr_expect_eq(ts_metric(&s, "adapterd_tasks_resident"), 1, "only the pinned task at start");
    char v[32];
    cr_assert_eq(predict(&s, "a", v, sizeof v, NULL), 200);
    cr_assert_eq(predict(&s, "b", v, sizeof v, NULL), 200);
    cr_assert_eq(predict(&s, "c", v, sizeof v, NULL), 200);
    cr_expect_geq(ts_metric(&s, "adapterd_adapter_evictions_total"), 2, "a and b were evicted for c");
    cr_expect_eq(ts_metric(&s, "adapterd_adapter_loads_total"), 4);
    cr_expect_eq(ts_metric(&s, "adapterd_tasks_resident"), 2, "p (pinned) and c");
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/p", NULL, 0, NULL, NULL, &d), 200);
    cr_expect(json_is_true(json_object_get(d, "resident")), "pinned tasks are never evicted");
    json_decref(d);
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/a", NULL, 0, NULL, NULL, &d), 200);
    cr_expect(json_is_false(json_object_get(d, "resident")));
    json_decref(d);
    /* the response says how long the request waited for its load (timing.load_ms), and only then */
    const char *body = "{\"inputs\":\"the movie was great\",\"tasks\":[\"a\"]}";
    cr_assert_eq(ts_request(&s, "POST", "/v1/predict", body, strlen(body), "application/json", NULL, &d), 200,
                 "an evicted task loads again on demand");
    json_t *tm = json_object_get(d, "timing");
    double load = json_number_value(json_object_get(tm, "load_ms"));
    cr_expect(load > 0, "a lazy load's time is in timing.load_ms");
    cr_expect_geq(json_number_value(json_object_get(tm, "total_ms")), load, "total_ms includes the load");
    json_decref(d);
    cr_assert_eq(ts_request(&s, "POST", "/v1/predict", body, strlen(body), "application/json", NULL, &d), 200);
    cr_expect_null(json_object_get(json_object_get(d, "timing"), "load_ms"), "a resident task loads nothing");
    json_decref(d);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* A file on the server that breaks after listing is the server's fault, not the request's: the
 * request that loads it lazily, and KServe's repository load, answer 500 malformed_file (as the
 * document says), naming the file but not the registry's path; the load is timed in
 * adapterd_lazy_load_seconds only when it succeeds. */
static void expect_documented_error(const char *method, const char *tmpl, long st, json_t *d, long want, const char *code) {
    char msg[512];
    cr_expect_eq(st, want, "%s %s: status %ld, want %ld: %s", method, tmpl, st, want, d ? json_dumps(d, 0) : "(no json)");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(d, "error"), "code")) ?: "", code, "%s %s", method, tmpl);
    cr_expect_eq(ts_validate(method, tmpl, st, d, msg, sizeof msg), 0, "%s", msg);
}

Test(admin, a_broken_file_on_the_server_is_a_5xx, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    ts_sh_ok("for t in a x; do mkdir -p %s/tasks/$t/1 && cp -rL %s/lora_ah/adapters/lora %s/tasks/$t/1/; done", reg, AD, reg);
    test_server s;
    start_on(&s, reg, "--adapter-memory", "100000");
    cr_expect_eq(ts_metric(&s, "adapterd_lazy_load_seconds_count{}"), 0, "nothing loaded lazily yet");
    char v[32];
    cr_assert_eq(predict(&s, "a", v, sizeof v, NULL), 200);
    cr_expect_eq(ts_metric(&s, "adapterd_lazy_load_seconds_count{}"), 1, "a's first request waited for its load");
    cr_assert_eq(predict(&s, "a", v, sizeof v, NULL), 200);
    cr_expect_eq(ts_metric(&s, "adapterd_lazy_load_seconds_count{}"), 1, "a resident: no load to wait for");
    /* x is listed (metadata only under the budget); its weights break before its first load */
    ts_sh_ok("truncate -s 300 %s/tasks/x/1/lora/adapter.safetensors", reg);
    json_t *d = NULL;
    const char *b = "{\"inputs\":\"the movie was great\",\"tasks\":[\"x\"]}";
    long st = ts_request(&s, "POST", "/v1/predict", b, strlen(b), "application/json", NULL, &d);
    expect_documented_error("POST", "/v1/predict", st, d, 500, "malformed_file");
    const char *m = json_string_value(json_object_get(json_object_get(d, "error"), "message"));
    cr_expect(m && strstr(m, "adapter.safetensors") && !strstr(m, reg), "names the file, not the registry path: %s", m ?: "");
    json_decref(d);
    st = ts_request(&s, "POST", "/v2/repository/models/x/load", "", 0, NULL, AUTH, &d);
    /* KServe's route answers in KServe's shape, {"error": "<message>"} */
    char vmsg[512];
    cr_expect_eq(st, 500, "repository load: %ld", st);
    m = json_string_value(json_object_get(d, "error"));
    cr_expect(m && strstr(m, "adapter.safetensors") && !strstr(m, reg), "names the file, not the registry path: %s", m ?: "");
    cr_expect_eq(ts_validate("POST", "/v2/repository/models/{task}/load", st, d, vmsg, sizeof vmsg), 0, "%s", vmsg);
    json_decref(d);
    cr_expect_eq(ts_metric(&s, "adapterd_lazy_load_seconds_count{}"), 1, "a failed load is not timed");
    cr_assert_eq(predict(&s, "a", v, sizeof v, NULL), 200, "the other task still answers");
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* --load-rate paces a load beyond its first --load-burst bytes: with no burst, a task's first
 * request (which loads it) takes at least its bytes / rate; unpaced, far less. */
static double first_predict_seconds(const char *reg, const char *rate, long *bytes) {
    test_server s;
    const char *args[] = {"--registry", reg, "--admin-token", TOKEN, "--watch", "false", "--adapter-memory", "100000",
                          "--load-burst", "0", "--load-rate", rate, NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0, "server did not start on %s", reg);
    char v[32];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(predict(&s, "a", v, sizeof v, NULL), 200);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *bytes = ts_metric(&s, "adapterd_adapter_bytes");
    cr_assert_eq(ts_stop(&s), 0);
    return (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

Test(admin, load_rate_paces_large_loads, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = ts_registry_ok("adapterd-admin");
    ts_sh_ok("mkdir -p %s/tasks/a/1 && cp -rL %s/lora_ah/adapters/lora %s/tasks/a/1/ && rm -rf %s/tasks/cls", reg, AD, reg, reg);
    long bytes = 0, bytes0 = 0;
    double paced = first_predict_seconds(reg, "50000", &bytes);
    double unpaced = first_predict_seconds(reg, "0", &bytes0);
    cr_assert_gt(bytes, 10000, "the task holds %ld bytes", bytes);
    /* the pacer counts the bytes read from the tensor files; the resident bytes are more (the weights
     * packed at load have padding), so the floor comes from the files, less their JSON headers */
    char path[1024];
    struct stat a, h;
    snprintf(path, sizeof path, "%s/tasks/a/1/lora/adapter.safetensors", reg);
    cr_assert_eq(stat(path, &a), 0, "%s", path);
    snprintf(path, sizeof path, "%s/tasks/a/1/lora/model_head.safetensors", reg);
    cr_assert_eq(stat(path, &h), 0, "%s", path);
    long read = (long)(a.st_size + h.st_size);
    double floor = (double)read / 50000.0;
    cr_expect_geq(paced, 0.9 * floor, "paced load took %.3f s, %ld file bytes at 50 KB/s need %.3f s", paced, read, floor);
    cr_expect_lt(unpaced, 0.5 * floor, "unpaced load took %.3f s", unpaced);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- soak: predictions never fail and never mix versions while versions change ---- */

#define SOAK_VERSIONS 100
#define SOAK_CLIENTS 4
static const char *const soak_src[] = {AD "/lora_ah/adapters", AD "/seq_bn_st/adapters", AD "/par_bn/adapters",
                                       AD "/ia3/adapters", AD "/prefix/adapters", AD "/seq_bn_bin/adapters"};
#define N_SRC (int)(sizeof soak_src / sizeof soak_src[0])
static json_t *soak_ref[N_SRC];
static test_server soak_srv;
static atomic_int soak_stop, soak_ok, soak_failed, soak_mixed;
static int soak_seen[SOAK_VERSIONS + 1];

static void *soak_client(void *arg) {
    (void)arg;
    while (!atomic_load(&soak_stop)) {
        char v[32];
        json_t *sc = NULL;
        int st = predict(&soak_srv, "soak", v, sizeof v, &sc);
        if (st != 200) {
            atomic_fetch_add(&soak_failed, 1);
            continue;
        }
        int ver = atoi(v);
        if (ver < 1 || ver > SOAK_VERSIONS || !close_scores(sc, soak_ref[(ver - 1) % N_SRC])) atomic_fetch_add(&soak_mixed, 1);
        else __atomic_store_n(&soak_seen[ver], 1, __ATOMIC_RELAXED);
        atomic_fetch_add(&soak_ok, 1);
        json_decref(sc);
    }
    return NULL;
}

Test(admin, soak_versions_change_under_traffic, .timeout = 120) {
    char *reg = ts_registry_ok("adapterd-admin");
    start_on(&soak_srv, reg, NULL, NULL);
    char v[32];
    /* each source's answer alone, as versions of a probe task */
    for (int k = 0; k < N_SRC; k++) {
        cr_assert_eq(upload_dir(&soak_srv, "probe", k + 1, soak_src[k], 1, NULL), 201, "source %d", k);
        cr_assert_eq(predict(&soak_srv, "probe", v, sizeof v, &soak_ref[k]), 200);
        for (int j = 0; j < k; j++) cr_assert(!close_scores(soak_ref[k], soak_ref[j]), "sources %d and %d answer alike", j, k);
    }
    cr_assert_eq(upload_dir(&soak_srv, "soak", 1, soak_src[0], 1, NULL), 201);
    pthread_t th[SOAK_CLIENTS];
    for (int c = 0; c < SOAK_CLIENTS; c++) pthread_create(&th[c], NULL, soak_client, NULL);
    for (int ver = 2; ver <= SOAK_VERSIONS; ver++) {
        json_t *d = NULL;
        long st = upload_dir(&soak_srv, "soak", ver, soak_src[(ver - 1) % N_SRC], 1, &d);
        cr_expect_eq(st, 201, "upload %d: %s", ver, d ? json_dumps(d, 0) : "");
        json_decref(d);
        ts_sleep_ms(5);
    }
    ts_sleep_ms(200);
    atomic_store(&soak_stop, 1);
    for (int c = 0; c < SOAK_CLIENTS; c++) pthread_join(th[c], NULL);
    int seen = 0;
    for (int i = 1; i <= SOAK_VERSIONS; i++) seen += soak_seen[i];
    cr_log_info("soak: %d answers, %d versions seen answering", atomic_load(&soak_ok), seen);
    cr_expect_eq(atomic_load(&soak_failed), 0, "%d requests failed", atomic_load(&soak_failed));
    cr_expect_eq(atomic_load(&soak_mixed), 0, "%d answers match no version's reference", atomic_load(&soak_mixed));
    cr_expect_gt(atomic_load(&soak_ok), 50);
    cr_expect_gt(seen, SOAK_VERSIONS / 3, "traffic ran across many versions");
    /* old versions were freed as their last request ended: only the current one is resident */
    /* (a request's reference goes in its completion callback, just after its answer: poll briefly) */
    int resident = 0;
    for (int tries = 0; tries < 40; tries++) {
        json_t *d = NULL;
        cr_assert_eq(ts_request(&soak_srv, "GET", "/v1/tasks/soak/versions", NULL, 0, NULL, AUTH, &d), 200);
        resident = 0;
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(d, "versions"), i, e) resident += json_is_true(json_object_get(e, "resident"));
        json_decref(d);
        if (resident == 1) break;
        ts_sleep_ms(25);
    }
    cr_expect_eq(resident, 1, "old versions are unloaded");
    for (int k = 0; k < N_SRC; k++) json_decref(soak_ref[k]);
    cr_assert_eq(ts_stop(&soak_srv), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- versions asked for by name, listed with their states ---- */

Test(admin, versions_are_named_listed_and_unloaded, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    test_server s;
    start_on(&s, reg, NULL, NULL);
    char v[32];
    json_t *sc1 = NULL, *sc2 = NULL, *sc = NULL, *d = NULL;
    cr_assert_eq(predict(&s, "cls", v, sizeof v, &sc1), 200);
    cr_assert_eq(upload_dir(&s, "cls", 2, AD "/seq_bn_st/adapters", 0, NULL), 201);
    /* "cls@2": the uploaded version, while requests naming "cls" keep getting current */
    cr_assert_eq(predict(&s, "cls@2", v, sizeof v, NULL), 200);
    json_t *all = NULL;
    const char *b2 = "{\"inputs\":\"the movie was great\",\"tasks\":[\"cls@2\"]}";
    cr_assert_eq(ts_request(&s, "POST", "/v1/predict", b2, strlen(b2), "application/json", NULL, &all), 200);
    json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(all, "results"), 0), "tasks"), "cls");
    cr_assert(t, "the answer is keyed by the task's name: %s", json_dumps(all, 0));
    cr_expect_str_eq(json_string_value(json_object_get(t, "version")), "2", "the answer names the version used");
    sc2 = json_incref(json_object_get(t, "scores"));
    json_decref(all);
    cr_expect(!close_scores(sc1, sc2), "versions 1 and 2 answer differently");
    cr_assert_eq(predict(&s, "cls", v, sizeof v, &sc), 200);
    cr_expect_str_eq(v, "1");
    cr_expect(close_scores(sc, sc1));
    json_decref(sc);
    /* the object form names the same version */
    const char *bo = "{\"inputs\":\"the movie was great\",\"tasks\":[{\"name\":\"cls\",\"version\":\"2\"}]}";
    cr_assert_eq(ts_request(&s, "POST", "/v1/predict", bo, strlen(bo), "application/json", NULL, &all), 200);
    t = json_object_get(json_object_get(json_array_get(json_object_get(all, "results"), 0), "tasks"), "cls");
    cr_expect_str_eq(json_string_value(json_object_get(t, "version")), "2");
    cr_expect(close_scores(json_object_get(t, "scores"), sc2), "object form: the scores of cls@2");
    json_decref(all);
    /* unknown versions, failed forms, two versions of one task */
    cr_expect_eq(predict(&s, "cls@9", v, sizeof v, NULL), 404);
    const char *bad[] = {"{\"inputs\":\"x\",\"tasks\":[\"cls\",\"cls@2\"]}", "{\"inputs\":\"x\",\"tasks\":[{\"version\":\"2\"}]}",
                         "{\"inputs\":\"x\",\"tasks\":[{\"name\":\"cls\",\"v\":\"2\"}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long st = ts_request(&s, "POST", "/v1/predict", bad[i], strlen(bad[i]), "application/json", NULL, &d);
        cr_expect(st == 400 || st == 422, "%s: %ld", bad[i], st);
        json_decref(d);
    }
    /* KServe's versioned infer */
    const char *vb = "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"the movie was great\"]}]}";
    cr_assert_eq(ts_request(&s, "POST", "/v2/models/cls/versions/2/infer", vb, strlen(vb), "application/json", NULL, &d), 200);
    cr_expect_str_eq(json_string_value(json_object_get(d, "model_version")), "2");
    cr_expect_str_eq(json_string_value(json_object_get(d, "model_name")), "cls");
    json_decref(d);
    cr_assert_eq(ts_request(&s, "POST", "/v2/models/cls/versions/1/infer", vb, strlen(vb), "application/json", NULL, &d), 200);
    cr_expect_str_eq(json_string_value(json_object_get(d, "model_version")), "1");
    json_decref(d);
    cr_expect_eq(ts_request(&s, "POST", "/v2/models/cls/versions/7/infer", vb, strlen(vb), "application/json", NULL, NULL), 404);
    /* listings: every version with its state, bytes and when it was added */
    time_t now = time(NULL);
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/cls", NULL, 0, NULL, NULL, &d), 200);
    json_t *vs = json_object_get(d, "versions");
    cr_assert_eq(json_array_size(vs), 3, "versions 0, 1, 2: %s", json_dumps(d, 0));
    json_t *v0 = json_array_get(vs, 0), *v1 = json_array_get(vs, 1), *v2 = json_array_get(vs, 2);
    cr_expect_str_eq(json_string_value(json_object_get(v0, "version")), "0");
    cr_expect_str_eq(json_string_value(json_object_get(v0, "state")), "available");
    cr_expect_str_eq(json_string_value(json_object_get(v1, "version")), "1");
    cr_expect_str_eq(json_string_value(json_object_get(v1, "state")), "current");
    cr_expect(json_integer_value(json_object_get(v1, "bytes")) > 0);
    cr_expect_str_eq(json_string_value(json_object_get(v2, "version")), "2");
    const char *st2 = json_string_value(json_object_get(v2, "state"));
    cr_expect(st2 && (!strcmp(st2, "loaded") || !strcmp(st2, "available")), "version 2: %s", st2 ? st2 : "(none)");
    json_int_t added = json_integer_value(json_object_get(v2, "added"));
    cr_expect(added > now - 600 && added <= now + 5, "version 2 was added just now: %lld", (long long)added);
    json_decref(d);
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks", NULL, 0, NULL, NULL, &d), 200);
    cr_expect_eq(json_array_size(json_object_get(json_array_get(json_object_get(d, "tasks"), 0), "versions")), 3);
    json_decref(d);
    cr_assert_eq(ts_request(&s, "GET", "/v2/models/cls", NULL, 0, NULL, NULL, &d), 200);
    vs = json_object_get(d, "versions");
    cr_expect(json_array_size(vs) == 3 && !strcmp(json_string_value(json_array_get(vs, 2)) ?: "", "2"), "%s", json_dumps(d, 0));
    json_decref(d);
    /* KServe: unloaded is not ready; a request loads it again */
    cr_assert_eq(ts_request(&s, "GET", "/v2/models/cls/ready", NULL, 0, NULL, NULL, &d), 200);
    cr_expect(json_is_true(json_object_get(d, "ready")));
    json_decref(d);
    cr_assert_eq(ts_request(&s, "POST", "/v2/repository/models/cls/unload", "", 0, NULL, AUTH, NULL), 200);
    cr_assert_eq(ts_request(&s, "GET", "/v2/models/cls/ready", NULL, 0, NULL, NULL, &d), 200);
    cr_expect(json_is_false(json_object_get(d, "ready")), "unloaded: not ready");
    json_decref(d);
    cr_assert_eq(predict(&s, "cls", v, sizeof v, NULL), 200);
    cr_assert_eq(ts_request(&s, "GET", "/v2/models/cls/ready", NULL, 0, NULL, NULL, &d), 200);
    cr_expect(json_is_true(json_object_get(d, "ready")), "loaded again by a request");
    json_decref(d);
    json_decref(sc1), json_decref(sc2);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* The scores version v of task answers (v1 predict, "task@v"). */
static json_t *scores_of(const test_server *s, const char *task, const char *v) {
    char body[256];
    snprintf(body, sizeof body, "{\"inputs\":\"the movie was great\",\"tasks\":[\"%s@%s\"]}", task, v);
    json_t *d = NULL;
    cr_assert_eq(ts_request(s, "POST", "/v1/predict", body, strlen(body), "application/json", NULL, &d), 200, "%s@%s", task, v);
    json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), task);
    cr_assert_str_eq(json_string_value(json_object_get(t, "version")), v);
    json_t *sc = json_incref(json_object_get(t, "scores"));
    json_decref(d);
    return sc;
}

Test(admin, a_version_folder_may_be_one_saved_adapter, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-admin");
    test_server s;
    start_on(&s, reg, NULL, NULL);
    json_t *d = NULL;
    /* AdapterHub: the same adapter as a sub-folder (2) and as the archive's top (3) */
    cr_assert_eq(upload_dir(&s, "cls", 2, AD "/lora_ah/adapters", 0, &d), 201, "%s", json_dumps(d, 0));
    json_decref(d);
    cr_assert_eq(upload_dir(&s, "cls", 3, AD "/lora_ah/adapters/lora", 0, &d), 201, "%s", json_dumps(d, 0));
    json_decref(d);
    json_t *a = scores_of(&s, "cls", "2"), *b = scores_of(&s, "cls", "3");
    cr_expect(close_scores(a, b), "one adapter, two layouts, the same answers");
    json_decref(a), json_decref(b);
    /* GET /v1/tasks/{name} shows where the current version's parts are and where that came from */
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/cls", NULL, 0, NULL, NULL, &d), 200);
    json_t *lay = json_object_get(d, "layout");
    cr_expect_str_eq(json_string_value(json_object_get(lay, "from")) ?: "", "task.json", "%s", json_dumps(d, 0));
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(lay, "adapters"), 0)) ?: "", "lora");
    json_decref(d);
    cr_assert_eq(ts_request(&s, "POST", "/v1/tasks/cls:activate", "{\"version\":\"3\"}", 15, "application/json", AUTH, NULL), 200);
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/cls", NULL, 0, NULL, NULL, &d), 200);
    lay = json_object_get(d, "layout");
    cr_expect_str_eq(json_string_value(json_object_get(lay, "from")) ?: "", "inferred", "%s", json_dumps(d, 0));
    cr_expect_eq(json_array_size(json_object_get(lay, "adapters")), 1);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(lay, "adapters"), 0)) ?: "", ".");
    cr_expect(json_is_null(json_object_get(lay, "fusion")));
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(d, "skips"), "max")), 0, "no task.json: skips 0..0");
    json_decref(d);
    /* PEFT's save_pretrained folder likewise */
    cr_assert_eq(upload_dir(&s, "pf", 1, AD "/peft_lora/adapters", 1, &d), 201, "%s", json_dumps(d, 0));
    json_decref(d);
    cr_assert_eq(upload_dir(&s, "pf", 2, AD "/peft_lora/adapters/peft_task", 0, &d), 201, "%s", json_dumps(d, 0));
    json_decref(d);
    a = scores_of(&s, "pf", "1"), b = scores_of(&s, "pf", "2");
    cr_expect(close_scores(a, b), "PEFT: the same answers in both layouts");
    json_decref(a), json_decref(b);
    /* both layouts in one version is ambiguous: refused with the reason */
    char mix[256];
    snprintf(mix, sizeof mix, "adapterd-mix-%d", (int)getpid());
    ts_sh_ok("rm -rf %s && mkdir -p %s && cp -r %s/lora_ah/adapters/lora/. %s/ && cp -r %s/seq_bn_st/adapters/. %s/", mix, mix, AD, mix,
       AD, mix);
    long st = upload_dir(&s, "cls", 4, mix, 0, &d);
    expect_rejected(&s, st, d, 422, "invalid_argument", "one layout per version", "mixed layouts");
    json_decref(d);
    ts_sh_ok("rm -rf %s", mix);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}
