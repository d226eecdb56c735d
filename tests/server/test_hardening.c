/* test_hardening.c - integration tests of the HTTP front against hostile clients (server/routes.c,
 * admin.c, url.c, server.c): the real `adapterd serve` on 127.0.0.1, spoken to over raw sockets so
 * every byte, pause and half-sent body is the test's choice. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"

#define TOKEN "t0ken"
#define AUTH "Authorization: Bearer " TOKEN

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Starts the server on reg with the admin token (unless admin is false) and extra args. */
static void start(test_server *s, const char *reg, bool admin, const char *const *extra) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[32] = {"--registry", reg, "--max-body-bytes", "65536", "--max-upload-bytes", "200000000"};
    int n = 6;
    if (admin) args[n++] = "--admin-token", args[n++] = TOKEN;
    for (int i = 0; extra && extra[i] && n < 31; i++) args[n++] = extra[i];
    args[n] = NULL;
    cr_assert_eq(ts_start(s, args, NULL), 0, "server did not start on %s", reg);
}

/* ---- raw sockets ---- */

static int dial(const test_server *s) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    return fd;
}

static int send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

/* Reads what arrives within ms (until the peer closes or the reply looks complete) into buf.
 * Returns the bytes read; *closed says whether the peer closed. */
static size_t read_reply(int fd, char *buf, size_t cap, int ms, bool *closed) {
    size_t n = 0;
    double end = now_s() + ms / 1e3;
    if (closed) *closed = false;
    while (n + 1 < cap) {
        int left = (int)((end - now_s()) * 1e3);
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) break;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0) {
            if (closed) *closed = true;
            break;
        }
        n += (size_t)r;
        buf[n] = '\0';
        /* a whole answer: headers and a Content-Length worth of body */
        const char *eoh = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "\r\nContent-Length:");
        if (eoh && cl && cl < eoh && n >= (size_t)(eoh + 4 - buf) + strtoul(cl + 17, NULL, 10)) break;
    }
    buf[n] = '\0';
    return n;
}

static int status_of(const char *reply) {
    int st = 0;
    return sscanf(reply, "HTTP/1.%*d %d", &st) == 1 ? st : 0;
}

static const char *body_of(const char *reply) {
    const char *b = strstr(reply, "\r\n\r\n");
    return b ? b + 4 : "";
}

/* Sends head (a request's headers, "\r\n\r\n" included) and nothing else; returns the status that
 * arrives within ms, 0 when none. reply (optional) keeps the answer. */
static int headers_only(const test_server *s, const char *head, int ms, char *reply, size_t rn) {
    int fd = dial(s);
    cr_assert_eq(send_all(fd, head, strlen(head)), 0);
    char buf[8192];
    read_reply(fd, buf, sizeof buf, ms, NULL);
    close(fd);
    if (reply) snprintf(reply, rn, "%s", buf);
    return status_of(buf);
}

static void expect_json_error(const char *reply, const char *code) {
    json_t *d = json_loads(body_of(reply), 0, NULL);
    cr_assert(d, "error body is not JSON: %s", reply);
    const char *c = json_string_value(json_object_get(json_object_get(d, "error"), "code"));
    cr_expect_str_eq(c ? c : "", code, "%s", reply);
    json_decref(d);
}

/* ---- item: URL decoding ---- */

Test(hardening, encoded_nul_control_or_slash_in_a_segment_is_400, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-hard");
    test_server s;
    start(&s, reg, true, NULL);
    char reply[8192];
    /* %00 once cut the path: this DELETE removed the whole task */
    cr_expect_eq(headers_only(&s, "DELETE /v1/tasks/cls%00/versions/1 HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n\r\n", 5000, reply,
                              sizeof reply), 400, "%s", reply);
    expect_json_error(reply, "malformed");
    cr_expect_eq(headers_only(&s, "DELETE /v1/tasks/cl%2Fs HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n\r\n", 5000, reply, sizeof reply), 400,
                 "%s", reply);
    cr_expect_eq(headers_only(&s, "GET /v1/tasks/cls%0a HTTP/1.1\r\nHost: t\r\n\r\n", 5000, reply, sizeof reply), 400, "%s", reply);
    cr_expect_eq(headers_only(&s, "GET /v1/tasks/cls%7f HTTP/1.1\r\nHost: t\r\n\r\n", 5000, reply, sizeof reply), 400, "%s", reply);
    /* the task is still there, and ordinary escapes still decode */
    cr_expect_eq(headers_only(&s, "GET /v1/tasks/cl%73 HTTP/1.1\r\nHost: t\r\n\r\n", 5000, reply, sizeof reply), 200, "%s", reply);
    cr_expect_eq(headers_only(&s, "GET /v1/tasks/cls/versions HTTP/1.1\r\nHost: t\r\n" AUTH "\r\n\r\n", 5000, reply, sizeof reply),
                 200, "%s", reply);
    cr_expect(strstr(body_of(reply), "\"version\":\"1\""), "version 1 is still listed: %s", reply);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- item: authentication and limits before the body ---- */

/* An upload's headers announce 100 MB and send none of it: the refusal must come at once. */
#define BIG_PUT(auth) \
    "PUT /v1/tasks/cls/versions/9 HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-tar\r\nContent-Length: 100000000\r\n" auth "\r\n"

Test(hardening, admin_is_refused_on_the_headers, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-hard");
    test_server s;
    char reply[8192];
    start(&s, reg, false, NULL);
    cr_expect_eq(headers_only(&s, BIG_PUT(AUTH "\r\n"), 3000, reply, sizeof reply), 404, "admin off: 404 before the body: %s", reply);
    expect_json_error(reply, "not_found");
    cr_assert_eq(ts_stop(&s), 0);
    start(&s, reg, true, NULL);
    cr_expect_eq(headers_only(&s, BIG_PUT(""), 3000, reply, sizeof reply), 401, "no token: 401 before the body: %s", reply);
    expect_json_error(reply, "unauthenticated");
    cr_expect_eq(headers_only(&s, BIG_PUT("Authorization: Bearer nope\r\n"), 3000, reply, sizeof reply), 401, "%s", reply);
    /* the token is right: the server waits for the body, so no answer arrives */
    cr_expect_eq(headers_only(&s, BIG_PUT(AUTH "\r\n"), 1000, reply, sizeof reply), 0, "%s", reply);
    /* per-route limits from Content-Length: an :activate body is a small JSON document */
    cr_expect_eq(headers_only(&s,
                              "POST /v1/tasks/cls:activate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                              "Content-Length: 1000000\r\n" AUTH "\r\n\r\n",
                              3000, reply, sizeof reply),
                 413, "%s", reply);
    cr_expect_eq(headers_only(&s, "GET /v1/tasks HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n", 3000, reply, sizeof reply),
                 413, "a route that takes no body: %s", reply);
    /* the upload's media type is checked before the body too */
    cr_expect_eq(headers_only(&s,
                              "PUT /v1/tasks/cls/versions/9 HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
                              "Content-Length: 100000\r\n" AUTH "\r\n\r\n",
                              3000, reply, sizeof reply),
                 415, "%s", reply);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* A chunked body (no Content-Length) that passes the limit is not read to its end: the server
 * answers 413 or, where libmicrohttpd cannot answer mid-body, closes the connection at once. */
Test(hardening, streamed_body_over_the_limit_is_413_before_its_end, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-hard");
    test_server s;
    start(&s, reg, true, NULL);
    int fd = dial(&s);
    const char *head = "POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    cr_assert_eq(send_all(fd, head, strlen(head)), 0);
    static char chunk[16384 + 16];
    int hn = snprintf(chunk, sizeof chunk, "4000\r\n");
    memset(chunk + hn, 'x', 16384);
    memcpy(chunk + hn + 16384, "\r\n", 2);
    for (int i = 0; i < 6; i++) /* 96 KiB against 64 KiB, and no final chunk */
        if (send_all(fd, chunk, (size_t)hn + 16384 + 2)) break;
    char reply[8192];
    bool closed = false;
    read_reply(fd, reply, sizeof reply, 3000, &closed);
    close(fd);
    if (status_of(reply)) {
        cr_expect_eq(status_of(reply), 413, "%s", reply);
        expect_json_error(reply, "too_large");
    } else {
        cr_expect(closed, "the server kept reading a body past its limit");
    }
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

static int count_body_files(const char *reg) {
    char p[512];
    snprintf(p, sizeof p, "%s/tasks", reg);
    DIR *d = opendir(p);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) n += !strncmp(de->d_name, ".upload-", 8) && strstr(de->d_name, ".body");
    if (d) closedir(d);
    return n;
}

static long peak_rss_kb(pid_t pid) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

/* An upload's body goes to a file in the registry's upload area while it arrives, not to memory:
 * the file exists mid-upload, the server's peak RSS does not grow by the body, and nothing is left. */
Test(hardening, uploads_stream_to_a_file_in_the_upload_area, .timeout = 90) {
    char *reg = ts_registry_ok("adapterd-hard");
    test_server s;
    start(&s, reg, true, NULL);
    long rss0 = peak_rss_kb(s.pid);
    size_t total = (size_t)120 << 20;
    char head[512];
    snprintf(head, sizeof head,
             "PUT /v1/tasks/cls/versions/9 HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-tar\r\nContent-Length: %zu\r\n" AUTH
             "\r\n\r\n",
             total);
    int fd = dial(&s);
    cr_assert_eq(send_all(fd, head, strlen(head)), 0);
    static char block[1 << 20];
    memset(block, 'z', sizeof block); /* not a tar: refused once whole */
    for (size_t sent = 0; sent < total / 2; sent += sizeof block) cr_assert_eq(send_all(fd, block, sizeof block), 0);
    ts_sleep_ms(200);
    cr_expect_eq(count_body_files(reg), 1, "mid-upload, the body is a file in tasks/.upload-*");
    for (size_t sent = total / 2; sent < total; sent += sizeof block) cr_assert_eq(send_all(fd, block, sizeof block), 0);
    char reply[8192];
    read_reply(fd, reply, sizeof reply, 20000, NULL);
    close(fd);
    cr_expect(status_of(reply) == 400 || status_of(reply) == 422, "%s", reply);
    long rss1 = peak_rss_kb(s.pid);
    cr_expect(rss0 > 0 && rss1 - rss0 < 48 * 1024, "peak RSS grew by %ld KiB for a %zu MiB upload", rss1 - rss0, total >> 20);
    for (int i = 0; i < 100 && count_body_files(reg); i++) ts_sleep_ms(10);
    cr_expect_eq(count_body_files(reg), 0, "the body file is removed with the request");
    cr_expect(!strstr(reply, reg), "the answer names no server path: %s", reply);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- item: the drain deadline ---- */

/* Requests still queued at the drain deadline get a JSON 503 and the process exits 0; it once
 * aborted inside libmicrohttpd (exit 134, "called while we have suspended connections") and the
 * clients got empty replies. The log's in-flight count is the number of requests (jobs were
 * counted twice). */
Test(hardening, drain_deadline_answers_503_and_exits_0, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char log[] = "adapterd-drain-log-XXXXXX";
    int lfd = mkstemp(log);
    cr_assert(lfd >= 0);
    int saved = dup(2);
    dup2(lfd, 2);
    setenv("ADAPTERD_TEST_LOG", "1", 1);
    test_server s;
    /* batches wait 3 s for company, far past a 300 ms drain deadline */
    const char *args[] = {"--drain-timeout-ms", "300", "--max-wait-us", "3000000", "--max-batch-tokens", "100000", NULL};
    int started = ts_start(&s, args, NULL);
    unsetenv("ADAPTERD_TEST_LOG");
    dup2(saved, 2);
    close(saved);
    cr_assert_eq(started, 0);
    enum { N = 6 };
    ts_post a[N];
    for (int i = 0; i < N; i++) cr_assert_eq(ts_post_start(&a[i], &s, "/v1/predict", "{\"inputs\":[\"the movie\",\"a song\"]}"), 0);
    cr_assert_eq(ts_wait_metric(&s, "adapterd_queue_depth", N, 20000), N, "all requests queued before SIGTERM");
    kill(s.pid, SIGTERM);
    for (int i = 0; i < N; i++) ts_post_join(&a[i]);
    int st = 0;
    for (int i = 0; i < 500 && waitpid(s.pid, &st, WNOHANG) != s.pid; i++) ts_sleep_ms(10);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d (signal %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    for (int i = 0; i < N; i++) {
        cr_expect_eq(a[i].resp.status, 503, "client %d: status %ld: %s", i, a[i].resp.status, a[i].resp.body);
        char reply[1100];
        snprintf(reply, sizeof reply, "HTTP/1.1 503\r\n\r\n%.1000s", a[i].resp.body);
        if (a[i].resp.status == 503) expect_json_error(reply, "unavailable");
        ts_resp_free(&a[i].resp);
    }
    char text[65536] = "";
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    unlink(log);
    char want[128];
    snprintf(want, sizeof want, "drain timeout with %d requests in flight (", N);
    cr_expect(strstr(text, want), "the log should say \"%s\":\n%s", want, text);
    cr_expect(!strstr(text, "suspended connections"), "%s", text);
}

/* ---- item: small ones ---- */

static long post(const test_server *s, const char *path, const char *body, const char *ctype, char *out, size_t on) {
    ts_resp r;
    long st = ts_http(s, "POST", path, body, ctype, NULL, &r) ? -1 : r.status;
    if (out) snprintf(out, on, "%s", r.body ? r.body : "");
    ts_resp_free(&r);
    return st;
}

Test(hardening, media_type_and_v2_names_are_matched_exactly, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    cr_assert_eq(ts_start(&s, NULL, NULL), 0);
    const char *body = "{\"inputs\":\"the movie\",\"tasks\":[\"cls_lora\"]}";
    char out[4096];
    cr_expect_eq(post(&s, "/v1/predict", body, "application/jsonfoo", out, sizeof out), 415, "%s", out);
    cr_expect_eq(post(&s, "/v1/predict", body, "application/json-patch+json", out, sizeof out), 415, "%s", out);
    cr_expect_eq(post(&s, "/v1/predict", body, "application/json; charset=utf-8", out, sizeof out), 200, "%s", out);
    cr_expect_eq(post(&s, "/v1/predict", body, "Application/JSON", out, sizeof out), 200, "%s", out);
    const char *dup = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]},"
                      "{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"b\"]}]}";
    cr_expect_eq(post(&s, "/v2/models/cls_lora/infer", dup, NULL, out, sizeof out), 422, "two inputs named text: %s", out);
    const char *unknown = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}],"
                          "\"outputs\":[{\"name\":\"nope\"}]}";
    cr_expect_eq(post(&s, "/v2/models/cls_lora/infer", unknown, NULL, out, sizeof out), 422, "%s", out);
    const char *wrong_kind = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}],"
                             "\"outputs\":[{\"name\":\"value\"}]}";
    cr_expect_eq(post(&s, "/v2/models/cls_lora/infer", wrong_kind, NULL, out, sizeof out), 422,
                 "a classification task has no \"value\": %s", out);
    const char *fine = "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"a\"]}],"
                       "\"outputs\":[{\"name\":\"label\"}]}";
    cr_expect_eq(post(&s, "/v2/models/cls_lora/infer", fine, NULL, out, sizeof out), 200, "%s", out);
    cr_assert_eq(ts_stop(&s), 0);
}

/* Whatever reaches the router is answered in JSON, however odd the request: an unknown method,
 * HTTP/1.0, a 16 KiB path or header (within libmicrohttpd's 32 KiB; its own answers past that
 * cannot be replaced, docs/SECURITY.md). */
Test(hardening, every_answer_past_libmicrohttpd_is_json, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    cr_assert_eq(ts_start(&s, NULL, NULL), 0);
    static char head[40000], reply[8192];
    static const struct {
        const char *what, *req, *code;
        int status;
    } cases[] = {
        {"unknown method", "BREW /v1/predict HTTP/1.1\r\nHost: t\r\n\r\n", "method_not_allowed", 405},
        {"HTTP/1.0", "GET /nope HTTP/1.0\r\n\r\n", "not_found", 404},
        {"OPTIONS", "OPTIONS /v1/predict HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", "method_not_allowed", 405},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_expect_eq(headers_only(&s, cases[i].req, 3000, reply, sizeof reply), cases[i].status, "%s: %s", cases[i].what, reply);
        cr_expect(strcasestr(reply, "\r\nContent-Type: application/json"), "%s: %s", cases[i].what, reply);
        expect_json_error(reply, cases[i].code);
    }
    int o = snprintf(head, sizeof head, "GET /v1/tasks/");
    memset(head + o, 'a', 16384);
    snprintf(head + o + 16384, sizeof head - (size_t)o - 16384, " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    cr_expect_eq(headers_only(&s, head, 3000, reply, sizeof reply), 404, "16 KiB path: %.300s", reply);
    expect_json_error(reply, "not_found");
    o = snprintf(head, sizeof head, "GET /v1/tasks/nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Big: ");
    memset(head + o, 'a', 16384);
    snprintf(head + o + 16384, sizeof head - (size_t)o - 16384, "\r\n\r\n");
    cr_expect_eq(headers_only(&s, head, 3000, reply, sizeof reply), 404, "16 KiB header: %.300s", reply);
    expect_json_error(reply, "not_found");
    cr_assert_eq(ts_stop(&s), 0);
}

/* One ustar entry appended to b (cap bytes) at *off. */
static void tar_put(unsigned char *b, size_t *off, const char *name, const char *data) {
    unsigned n = (unsigned)strlen(data) & 0xffffff;
    unsigned char *h = b + *off;
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 124, 12, "%011o", n);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = '0';
    memcpy(h + 257, "ustar\0" "00", 8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    *off += 512;
    memcpy(b + *off, data, n);
    *off += (n + 511) & ~(size_t)511;
}

/* A version that does not load is refused with the loader's reason, naming its files as the
 * archive does: never where the server keeps them. */
Test(hardening, upload_errors_name_no_server_path, .timeout = 60) {
    char *reg = ts_registry_ok("adapterd-hard");
    test_server s;
    start(&s, reg, true, NULL);
    static unsigned char tarb[8192];
    size_t off = 0;
    tar_put(tarb, &off, "adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": 4, \"target_modules\": [\"query\"]}");
    tar_put(tarb, &off, "adapter_model.safetensors", "not a safetensors file");
    off += 1024;
    char head[512];
    snprintf(head, sizeof head,
             "PUT /v1/tasks/cls/versions/7 HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-tar\r\nContent-Length: %zu\r\n" AUTH
             "\r\n\r\n",
             off);
    int fd = dial(&s);
    cr_assert_eq(send_all(fd, head, strlen(head)), 0);
    cr_assert_eq(send_all(fd, tarb, off), 0);
    char reply[8192];
    read_reply(fd, reply, sizeof reply, 20000, NULL);
    close(fd);
    cr_expect(status_of(reply) == 422 || status_of(reply) == 400, "%s", reply);
    char cwd[1024];
    cr_assert(getcwd(cwd, sizeof cwd));
    cr_expect(!strstr(reply, reg) && !strstr(reply, cwd) && !strstr(reply, ".upload-"), "the answer names a server path: %s", reply);
    cr_assert_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- item: connections ---- */

/* Sends one header byte every 250 ms; returns the seconds until the server closed the connection
 * (or gave up after limit_s). */
static double slow_headers(const test_server *s, double limit_s) {
    int fd = dial(s);
    const char *req = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    double t0 = now_s();
    for (size_t i = 0; req[i] && now_s() - t0 < limit_s; i++) {
        if (send(fd, req + i, 1, MSG_NOSIGNAL) != 1) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 250) > 0) {
            char b[256];
            if (recv(fd, b, sizeof b, 0) <= 0) break;
        }
    }
    double dt = now_s() - t0;
    close(fd);
    return dt;
}

Test(hardening, headers_have_a_deadline_and_bodies_a_minimum_rate, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--header-timeout-ms", "1000", "--min-body-rate", "4096", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    double dt = slow_headers(&s, 15);
    cr_expect(dt < 3.0, "a client sending a header byte every 250 ms was closed after %.2f s (deadline 1 s)", dt);
    /* a body trickling at 40 bytes/s against 4096 */
    int fd = dial(&s);
    const char *head = "POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n";
    cr_assert_eq(send_all(fd, head, strlen(head)), 0);
    double t0 = now_s();
    bool closed = false;
    while (!closed && now_s() - t0 < 15) {
        if (send(fd, "          ", 10, MSG_NOSIGNAL) != 10) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 250) > 0) {
            char b[512];
            if (recv(fd, b, sizeof b, 0) <= 0) closed = true;
        }
    }
    dt = now_s() - t0;
    close(fd);
    cr_expect(dt < 4.0, "a body at 40 bytes/s was closed after %.2f s", dt);
    /* an ordinary client is not affected */
    ts_resp r;
    cr_assert_eq(ts_http(&s, "POST", "/v1/predict", "{\"inputs\":\"the movie\",\"tasks\":[\"cls_lora\"]}", NULL, NULL, &r), 0);
    cr_expect_eq(r.status, 200);
    ts_resp_free(&r);
    cr_assert_eq(ts_stop(&s), 0);
}

/* Opens n connections that send nothing. */
static void idle_open(const test_server *s, int *fds, int n) {
    for (int i = 0; i < n; i++) fds[i] = dial(s);
}

static int get_status(const test_server *s, const char *path, int ms) {
    char head[256];
    snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", path);
    return headers_only(s, head, ms, NULL, 0);
}

Test(hardening, per_address_cap, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--max-connections-per-ip", "4", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    int fds[4];
    idle_open(&s, fds, 4);
    ts_sleep_ms(100);
    cr_expect_eq(get_status(&s, "/healthz", 2000), 0, "a fifth connection from the address is refused");
    for (int i = 0; i < 4; i++) close(fds[i]);
    int st = 0; /* the server sees the closes within moments (longer under ThreadSanitizer): wait for them */
    for (int t = 0; t < 10000 && (st = get_status(&s, "/healthz", 2000)) != 200; t += 100) ts_sleep_ms(100);
    cr_expect_eq(st, 200, "below the cap again");
    cr_assert_eq(ts_stop(&s), 0);
}

/* 40 idle connections against a limit of 16: health and readiness still answer at once (through the
 * reserve, while the longest-idle connections are closed to make room). */
Test(hardening, health_stays_answerable_at_the_connection_limit, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--max-connections", "16", "--health-reserve", "4", "--max-connections-per-ip", "0", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    enum { IDLE = 40 };
    int fds[IDLE];
    idle_open(&s, fds, IDLE);
    ts_sleep_ms(300);
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        cr_expect_eq(get_status(&s, "/healthz", 2000), 200, "healthz at the limit (round %d)", k);
        cr_expect_eq(get_status(&s, "/readyz", 2000), 200, "readyz at the limit (round %d)", k);
        cr_expect(now_s() - t0 < 2.0, "health took %.2f s", now_s() - t0);
        /* more idle clients keep coming */
        for (int i = 0; i < 8; i++) close(fds[i]), fds[i] = dial(&s);
    }
    for (int i = 0; i < IDLE; i++) close(fds[i]);
    cr_assert_eq(ts_stop(&s), 0);
}

typedef struct {
    const test_server *s;
    const char *body;
    long status;
    char head[256];
} big_arg;

static void *big_client(void *arg) {
    big_arg *a = arg;
    ts_resp r;
    a->status = ts_http(a->s, "POST", "/v1/predict", a->body, NULL, NULL, &r) ? -1 : r.status;
    snprintf(a->head, sizeof a->head, "%.200s", r.body ? r.body : "");
    ts_resp_free(&r);
    return NULL;
}

/* A request whose engine pass is running at the deadline is answered 503 at once (the pass cannot
 * be interrupted; the job outlives its request and is freed when the pass ends), and the process
 * still exits 0. Four requests of 64 long inputs x every task: each is its own pass of a few
 * hundred ms, so at a deadline 70 ms after the first is queued, it is running and the others wait. */
Test(hardening, drain_deadline_abandons_a_running_pass, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static char body[200000];
    size_t o = (size_t)snprintf(body, sizeof body, "{\"truncate\":true,\"inputs\":[");
    for (int i = 0; i < 64; i++) {
        o += (size_t)snprintf(body + o, sizeof body - o, "%s\"", i ? "," : "");
        for (int w = 0; w < 40; w++) o += (size_t)snprintf(body + o, sizeof body - o, "the movie was long and the actors were great but the story was weak ");
        o += (size_t)snprintf(body + o, sizeof body - o, "\"");
    }
    snprintf(body + o, sizeof body - o, "]}");
    test_server s;
    const char *args[] = {"--drain-timeout-ms", "50", "--max-inputs", "64", "--max-body-bytes", "4000000", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    enum { N = 4 };
    pthread_t th[N];
    big_arg a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (big_arg){.s = &s, .body = body};
        pthread_create(&th[i], NULL, big_client, &a[i]);
    }
    /* once a job is queued the idle worker starts its pass within a millisecond (sanitizer builds
     * tokenize slowly, so a fixed delay would not do) */
    ts_wait_metric(&s, "adapterd_queue_depth", 1, 10000);
    ts_sleep_ms(20);
    kill(s.pid, SIGTERM);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    int st = 0;
    for (int i = 0; i < 1000 && waitpid(s.pid, &st, WNOHANG) != s.pid; i++) ts_sleep_ms(10);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d (signal %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    for (int i = 0; i < N; i++) cr_expect_eq(a[i].status, 503, "client %d: status %ld: %s", i, a[i].status, a[i].head);
}

/* ---- item: the document lists what any request can be refused with ---- */

/* The refusals decided before a request reaches its route's own code apply to every operation, so
 * each operation of proto/openapi.yaml must list them: 413 for a Content-Length over the route's
 * limit, 400 for a path parameter holding an escaped NUL, 415 for a JSON route sent another media
 * type, and 503 for a connection beyond --max-connections (health routes excepted). Each answer
 * is sent to every operation of the generated openapi.json and validated against that operation. */
static json_t *openapi_doc(void) {
    json_error_t je;
    json_t *d = json_load_file(ADAPTERD_BINARY_DIR "/proto/openapi.json", 0, &je);
    cr_assert(d, "openapi.json: %s", je.text);
    return d;
}

/* The path of an operation under template tmpl: its parameters set to the fixture registry's task
 * "cls" and version "1", or the first one to bad when bad is given. Returns whether the template
 * has a parameter. */
static bool op_path(const char *tmpl, const char *bad, char *out, size_t n) {
    size_t o = 0;
    bool any = false;
    for (const char *p = tmpl; *p && o + 1 < n;) {
        if (*p != '{') {
            out[o++] = *p++;
            continue;
        }
        const char *e = strchr(p, '}');
        cr_assert(e, "%s", tmpl);
        const char *val = !strncmp(p, "{version}", 9) ? "1" : "cls";
        o += (size_t)snprintf(out + o, n - o, "%s", bad && !any ? bad : val);
        any = true;
        p = e + 1;
    }
    out[o < n ? o : n - 1] = '\0';
    return any;
}

static bool is_health_path(const char *tmpl) {
    return !strcmp(tmpl, "/healthz") || !strcmp(tmpl, "/readyz") || !strncmp(tmpl, "/v2/health/", 11);
}

/* Sends head to s and checks the answer is want, JSON, and documented for (method, tmpl). */
static void expect_documented(const test_server *s, const char *head, const char *method, const char *tmpl, int want,
                              const char *what) {
    char reply[8192], msg[512];
    int st = headers_only(s, head, 5000, reply, sizeof reply);
    cr_expect_eq(st, want, "%s %s, %s: status %d: %s", method, tmpl, what, st, reply);
    json_t *d = json_loads(body_of(reply), 0, NULL);
    cr_expect(d, "%s %s, %s: not JSON: %s", method, tmpl, what, reply);
    if (st == want && d)
        cr_expect_eq(ts_validate(method, tmpl, st, d, msg, sizeof msg), 0, "%s, %s", msg, what);
    json_decref(d);
}

Test(hardening, every_operation_documents_the_refusals_any_request_can_get, .timeout = 120) {
    char *reg = ts_registry_ok("adapterd-hard");
    json_t *doc = openapi_doc(), *paths = json_object_get(doc, "paths"), *item, *op;
    const char *tmpl, *m;
    char path[512], head[1024], method[8];
    int ops = 0;
    test_server s;
    start(&s, reg, true, NULL);
    json_object_foreach(paths, tmpl, item) {
        json_object_foreach(item, m, op) {
            if (strcmp(m, "get") && strcmp(m, "post") && strcmp(m, "put") && strcmp(m, "delete")) continue;
            for (int i = 0; m[i] && i < 7; i++) method[i] = (char)(m[i] & ~0x20), method[i + 1] = '\0';
            ops++;
            /* 413: over every route's limit (uploads: --max-upload-bytes 200000000) */
            op_path(tmpl, NULL, path, sizeof path);
            snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 300000000\r\n" AUTH
                     "\r\nConnection: close\r\n\r\n",
                     method, path);
            expect_documented(&s, head, method, tmpl, 413, "a body over the limit");
            /* 400: an escaped NUL in a path parameter */
            if (op_path(tmpl, "x%00y", path, sizeof path)) {
                snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n" AUTH "\r\nConnection: close\r\n\r\n",
                         method, path);
                expect_documented(&s, head, method, tmpl, 400, "an escaped NUL in the path");
            }
            /* 415: a JSON route sent text (admin routes other than uploads take their small bodies as they come) */
            json_t *rb = json_object_get(json_object_get(json_object_get(op, "requestBody"), "content"), "application/json");
            if (rb && !json_object_get(op, "security")) {
                op_path(tmpl, NULL, path, sizeof path);
                snprintf(head, sizeof head,
                         "%s %s HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                         method, path);
                expect_documented(&s, head, method, tmpl, 415, "a body that is not JSON");
            }
        }
    }
    cr_assert_eq(ts_stop(&s), 0);
    cr_expect_gt(ops, 20, "the document's operations were found");
    /* 503: one connection allowed and held idle, so each request arrives in the reserve */
    const char *const extra[] = {"--max-connections", "1", "--health-reserve", "4", "--max-connections-per-ip", "0", NULL};
    start(&s, reg, true, extra);
    json_object_foreach(paths, tmpl, item) {
        if (is_health_path(tmpl)) continue;
        json_object_foreach(item, m, op) {
            if (strcmp(m, "get") && strcmp(m, "post") && strcmp(m, "put") && strcmp(m, "delete")) continue;
            for (int i = 0; m[i] && i < 7; i++) method[i] = (char)(m[i] & ~0x20), method[i + 1] = '\0';
            int idle = dial(&s);
            ts_sleep_ms(250); /* accepted and counted before the next one arrives (sanitizer builds are slow) */
            op_path(tmpl, NULL, path, sizeof path);
            snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n" AUTH "\r\nConnection: close\r\n\r\n",
                     method, path);
            expect_documented(&s, head, method, tmpl, 503, "beyond the connection limit");
            close(idle);
        }
    }
    cr_assert_eq(ts_stop(&s), 0);
    json_decref(doc);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

typedef struct {
    const test_server *s;
    const char *data;
    size_t len;
    long status;
} upload_arg;

static void *upload_client(void *arg) {
    upload_arg *a = arg;
    a->status = ts_request(a->s, "PUT", "/v1/tasks/cls/versions/7?activate=true", a->data, a->len, "application/gzip", AUTH, NULL);
    return NULL;
}

/* An upload whose version is being checked on the pool at the drain deadline is not answered 503
 * while its change may still land: it finishes, the client gets the true answer (201), the
 * process exits 0, and a restart serves the version it was told about. The check is slowed to
 * about 4 s by pacing the load (--load-rate) against a 300 ms deadline. */
Test(hardening, drain_deadline_lets_an_upload_finish_and_answers_it_truly, .timeout = 90) {
    char *reg = ts_registry_ok("adapterd-hard");
    size_t len = 0;
    char *tgz = ts_tgz_of(ADAPTERD_FIXTURES "/adapters/bert-tiny/lora_ah/adapters", &len);
    cr_assert(tgz);
    test_server s;
    const char *extra[] = {"--drain-timeout-ms", "300", "--adapter-memory", "100000000", "--load-rate", "10000",
                           "--load-burst", "1000", NULL};
    start(&s, reg, true, extra);
    upload_arg a = {.s = &s, .data = tgz, .len = len, .status = 0};
    pthread_t th;
    pthread_create(&th, NULL, upload_client, &a);
    ts_sleep_ms(1000); /* the body is in; its check runs at 10 KB/s */
    double t0 = now_s();
    cr_expect_eq(ts_stop(&s), 0, "the drain ends with exit 0");
    pthread_join(th, NULL);
    cr_expect_eq(a.status, 201, "the upload that completed is answered 201 (got %ld)", a.status);
    cr_log_info("drain with an upload in its check: %.1f s after SIGTERM", now_s() - t0);
    start(&s, reg, true, NULL);
    json_t *d = NULL;
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/cls/versions", NULL, 0, NULL, AUTH, &d), 200);
    cr_expect_str_eq(json_string_value(json_object_get(d, "current")) ?: "", "7", "a restart serves what the client was told");
    json_decref(d);
    cr_assert_eq(ts_stop(&s), 0);
    free(tgz);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}
