/* test_grpc.c - integration tests of gRPC's transport (server/grpc.c) against hostile clients: the
 * real `adapterd serve --grpc-port` on the fixture registry, spoken to by an nghttp2 client session
 * (h2_client.c) that can also write DATA past the server's windows. Each case is a bound grpc.c's
 * opening paragraph promises: a call beyond --max-queue is refused on its headers and its message
 * never held (the server's peak memory, VmHWM, barely moves under 48 refused calls of 3 MiB); a
 * stream sending past its window is reset by flow control; a connection's calls hold at most
 * --grpc-buffer-bytes; gRPC and HTTP connections share --max-connections-per-ip, --max-connections
 * and the health reserve. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "h2_client.h"
#include "http_client.h"

#define TWO_INPUTS "{\"inputs\":[\"the movie\",\"a song\"]}"
#define MIB (1024 * 1024)

/* Starts the server with --grpc-port (a free port, in *gport) and extra args (NULL-terminated). */
static void start(test_server *s, int *gport, const char *const *extra) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static char port[16];
    *gport = h2c_free_port();
    snprintf(port, sizeof port, "%d", *gport);
    const char *args[32] = {"--grpc-port", port};
    int n = 2;
    for (int i = 0; extra && extra[i] && n < 31; i++) args[n++] = extra[i];
    args[n] = NULL;
    cr_assert_eq(ts_start(s, args, NULL), 0, "the server did not start");
}

/* The server's peak resident memory (VmHWM), kB; -1 when unreadable. */
static long vm_hwm_kb(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

static h2c *connect_ok(int port, const char *from) {
    h2c *c = h2c_connect(port, from);
    cr_assert(c, "cannot connect to the gRPC port %d from %s", port, from ? from : "any");
    return c;
}

/* One call on c of method with an empty message; returns its stream once closed (the test fails when
 * it does not close within 10 s). */
static h2c_stream *call_empty(h2c *c, const char *method) {
    static const uint8_t empty[5] = {0};
    int i = h2c_call(c, method, empty, sizeof empty, true);
    cr_assert(i >= 0);
    h2c_stream *st = h2c_stream_at(c, i);
    cr_assert(h2c_run(c, 10000, NULL, NULL), "%s did not close in 10 s", method);
    return st;
}

/* A plain TCP connection to the HTTP port from source address from (NULL: any). */
static int tcp_dial(int port, const char *from) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    if (from) {
        struct sockaddr_in b = {.sin_family = AF_INET};
        inet_pton(AF_INET, from, &b.sin_addr);
        cr_assert_eq(bind(fd, (struct sockaddr *)&b, sizeof b), 0, "bind %s: %s", from, strerror(errno));
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    return fd;
}

/* GET path over a new connection from `from`; the status that arrives within ms, 0 when the
 * connection is closed without an answer (refused) or nothing arrives. */
static int http_get(int port, const char *from, const char *path, int ms) {
    int fd = tcp_dial(port, from);
    char req[256], buf[4096];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", path);
    send(fd, req, (size_t)n, MSG_NOSIGNAL);
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (got + 1 < sizeof buf && poll(&p, 1, ms) > 0) {
        ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    close(fd);
    int st = 0;
    return sscanf(buf, "HTTP/1.%*d %d", &st) == 1 ? st : 0;
}

/* Sends req on a new connection to the HTTP port and reads what answers it up to the end of the
 * first response's head (10 s at most) into buf (NUL-terminated); returns the connection. */
static int http_send_head(int port, const char *req, char *buf, size_t cap) {
    int fd = tcp_dial(port, NULL);
    cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (got + 1 < cap && !memmem(buf, got, "\r\n\r\n", 4) && poll(&p, 1, 10000) > 0) {
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    return fd;
}

/* A plain TCP connection to the HTTP port that the server has accepted and counted: one keep-alive
 * GET /healthz is answered on it first (a connection only dialed may still sit in the kernel's
 * backlog, uncounted, when the next step runs - as under ThreadSanitizer on a loaded machine). */
static int http_open(int port) {
    char buf[1024];
    int fd = http_send_head(port, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", buf, sizeof buf), st = 0;
    cr_assert(sscanf(buf, "HTTP/1.%*d %d", &st) == 1 && st == 200, "an HTTP connection is served: %s", buf);
    return fd;
}

/* GET /healthz from 127.0.0.1 until it is answered 200 (the server may not have seen a closed
 * connection go yet); true within ms. */
static bool http_served_within(int port, int ms) {
    for (int t = 0; t < ms; t += 100) {
        if (http_get(port, NULL, "/healthz", 2000) == 200) return true;
        ts_sleep_ms(100);
    }
    return false;
}

/* A gRPC connection from 127.0.0.1 whose ServerLive is answered OK, retried until ms have passed
 * (the server may not have seen a closed connection go yet); NULL when none is. */
static h2c *grpc_served_within(int gport, int ms) {
    for (int t = 0; t < ms; t += 100) {
        h2c *c = connect_ok(gport, NULL);
        if (call_empty(c, "ServerLive")->grpc_status == 0) return c;
        h2c_free(c);
        ts_sleep_ms(100);
    }
    return NULL;
}

/* A connection whose request is in its body phase (headers sent, the body never comes): busy, so
 * it neither gives way to new connections nor is idle. Its "Expect: 100-continue" is answered once
 * the server has read the headers, which proves the connection accepted and counted. */
static int http_busy(int port) {
    const char *h = "POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
                    "Expect: 100-continue\r\n\r\n";
    char buf[256];
    int fd = http_send_head(port, h, buf, sizeof buf);
    cr_assert(!strncmp(buf, "HTTP/1.1 100", 12), "the busy connection's headers are read: %s", buf);
    return fd;
}

static bool closed_or_eof(h2c *c, void *ud) { return h2c_eof(c) || h2c_stream_at(c, *(int *)ud)->closed; }

static bool is_eof(h2c *c, void *ud) {
    (void)ud;
    return h2c_eof(c);
}

/* --max-queue 1 held by a REST request waiting for its batch to close (a 5 s quiet window; refused
 * calls are not arrivals): 48 ModelInfer calls of 3 MiB on one connection are each answered
 * RESOURCE_EXHAUSTED on their headers. The client gets to send at most a stream's initial window of
 * each (64 KiB) before the answer and the reset stop it, none of it is kept, and the server's peak
 * memory grows by less than 16 MiB (it grew by 56 MiB when each call buffered its message before
 * asking for a place). */
Test(grpc, a_call_beyond_the_queue_is_refused_on_its_headers_and_never_buffered, .timeout = 120) {
    test_server s;
    int gport;
    const char *args[] = {"--max-queue", "1", "--max-wait-us", "5000000", "--max-body-bytes", "4194304", NULL};
    start(&s, &gport, args);
    ts_post held;
    cr_assert_eq(ts_post_start(&held, &s, "/v1/predict", TWO_INPUTS), 0);
    cr_assert_eq(ts_wait_metric(&s, "adapterd_admitted_requests", 1, 20000), 1, "the REST request holds the only place");
    long hwm0 = vm_hwm_kb(s.pid);
    enum { CALLS = 48 };
    size_t len = 0;
    uint8_t *msg = h2c_grpc_message(NULL, 3 * MIB, &len);
    cr_assert(msg);
    h2c *c = connect_ok(gport, NULL);
    for (int i = 0; i < CALLS; i++) cr_assert_eq(h2c_call(c, "ModelInfer", msg, len, true), i);
    bool all = h2c_run(c, 60000, NULL, NULL);
    long hwm1 = vm_hwm_kb(s.pid);
    cr_assert(all, "every call is answered");
    for (int i = 0; i < CALLS; i++) {
        h2c_stream *st = h2c_stream_at(c, i);
        cr_expect_eq(st->grpc_status, 8, "call %d: grpc-status %d (%s)", i, st->grpc_status, st->grpc_message);
        cr_expect(strstr(st->grpc_message, "queue"), "call %d: %s", i, st->grpc_message);
    }
    cr_expect_leq(h2c_sent(c), (size_t)CALLS * 65535, "the client sent %zu bytes: more than each stream's first window", h2c_sent(c));
    fprintf(stderr, "grpc: %d refused calls of 3 MiB: server VmHWM %ld -> %ld kB (+%.1f MiB); the client sent %.1f MiB of %d MiB\n",
            CALLS, hwm0, hwm1, (hwm1 - hwm0) / 1024.0, h2c_sent(c) / (double)MIB, CALLS * 3);
    cr_expect(hwm0 > 0 && hwm1 - hwm0 < 16 * 1024, "peak memory grew by %ld kB", hwm1 - hwm0);
    h2c_free(c);
    free(msg);
    ts_post_join(&held);
    cr_expect_eq(held.resp.status, 200, "the admitted request completes: %s", held.resp.body);
    ts_resp_free(&held.resp);
    cr_expect_eq(ts_metric(&s, "adapterd_grpc_requests_total{method=\"ModelInfer\",code=\"RESOURCE_EXHAUSTED\"}"), CALLS);
    cr_expect_eq(ts_metric(&s, "adapterd_admitted_requests"), 0, "every place was given back");
    cr_assert_eq(ts_stop(&s), 0);
}

/* A client that ignores its window: the message's prefix declares 100,000 bytes, so the stream may
 * send exactly 100,005; 60,000 more are written anyway. nghttp2 resets the stream
 * (FLOW_CONTROL_ERROR) at the first frame past the window, without handing a byte of it to the
 * server, and the connection stays usable. */
Test(grpc, data_past_a_streams_window_resets_it, .timeout = 60) {
    test_server s;
    int gport;
    start(&s, &gport, NULL);
    h2c *c = connect_ok(gport, NULL);
    int i = h2c_call(c, "ModelInfer", NULL, 0, false);
    cr_assert_geq(i, 0);
    h2c_run(c, 300, NULL, NULL); /* the headers are taken: admitted, nothing answered */
    cr_expect(!h2c_stream_at(c, i)->closed, "a call with a queue place is not answered before its message");
    size_t len = 0;
    uint8_t *msg = h2c_grpc_message(NULL, 100000, &len);
    uint8_t *more = calloc(60000, 1);
    cr_assert(msg && more);
    cr_assert_eq(h2c_raw_data(c, i, msg, len, false), 0);
    h2c_raw_data(c, i, more, 60000, false); /* may fail once the server resets: the point */
    h2c_run(c, 5000, closed_or_eof, &i);
    h2c_stream *st = h2c_stream_at(c, i);
    cr_expect(st->closed && st->reset, "the stream is reset");
    cr_expect_eq(st->close_code, NGHTTP2_FLOW_CONTROL_ERROR, "reset with FLOW_CONTROL_ERROR (code %u)", st->close_code);
    cr_expect_eq(st->grpc_status, -1, "and not answered");
    cr_expect(!h2c_eof(c), "the connection stays");
    h2c_stream *live = call_empty(c, "ServerLive");
    cr_expect_eq(live->grpc_status, 0, "ServerLive on the same connection: %d %s", live->grpc_status, live->grpc_message);
    h2c_free(c);
    free(msg), free(more);
    cr_expect_eq(ts_metric(&s, "adapterd_admitted_requests"), 0, "the reset call gave its place back");
    cr_assert_eq(ts_stop(&s), 0);
}

/* --grpc-buffer-bytes 1,000,000: one call holding 600,005 bytes (its message half sent) leaves too
 * little for a second of the same size on that connection, which is answered RESOURCE_EXHAUSTED
 * at its prefix; the first completes, and once it is answered its bytes are free for the next. */
Test(grpc, a_connections_calls_hold_at_most_its_budget, .timeout = 60) {
    test_server s;
    int gport;
    const char *args[] = {"--grpc-buffer-bytes", "1000000", NULL};
    start(&s, &gport, args);
    size_t rlen = 0, len = 0;
    uint8_t *req = h2c_infer_request("cls_lora", "a fine and moving film", 600000, &rlen);
    cr_assert(req);
    uint8_t *msg = h2c_grpc_message(req, rlen, &len);
    cr_assert(msg);
    h2c *c = connect_ok(gport, NULL);
    int a = h2c_call(c, "ModelInfer", NULL, 0, false), b = h2c_call(c, "ModelInfer", NULL, 0, false);
    cr_assert(a >= 0 && b >= 0);
    cr_assert_eq(h2c_raw_data(c, a, msg, len / 2, false), 0);
    cr_assert_eq(h2c_raw_data(c, b, msg, len / 2, false), 0);
    h2c_run(c, 5000, closed_or_eof, &b);
    h2c_stream *sb = h2c_stream_at(c, b), *sa = h2c_stream_at(c, a);
    cr_expect_eq(sb->grpc_status, 8, "the second call: grpc-status %d (%s)", sb->grpc_status, sb->grpc_message);
    cr_expect(strstr(sb->grpc_message, "--grpc-buffer-bytes"), "%s", sb->grpc_message);
    cr_expect(!sa->closed, "the first call goes on");
    cr_assert_eq(h2c_raw_data(c, a, msg + len / 2, len - len / 2, true), 0);
    h2c_run(c, 20000, closed_or_eof, &a);
    cr_expect_eq(sa->grpc_status, 0, "the first call is answered: %d (%s)", sa->grpc_status, sa->grpc_message);
    cr_expect_gt(sa->data_len, 0);
    int d = h2c_call(c, "ModelInfer", msg, len, true);
    h2c_run(c, 20000, closed_or_eof, &d);
    cr_expect_eq(h2c_stream_at(c, d)->grpc_status, 0, "a third, once the first was answered: %d (%s)",
                 h2c_stream_at(c, d)->grpc_status, h2c_stream_at(c, d)->grpc_message);
    h2c_free(c);
    free(msg), free(req);
    cr_assert_eq(ts_stop(&s), 0);
}

/* --max-connections-per-ip 4 counts both protocols: two HTTP and two gRPC connections from
 * 127.0.0.1 fill it; a fifth gRPC connection from there answers its call UNAVAILABLE naming the
 * option, then GOAWAY ENHANCE_YOUR_CALM, and a fifth HTTP one is closed unanswered; 127.0.0.2 is
 * another address; with one connection closed, 127.0.0.1 is served again. */
Test(grpc, the_cap_per_address_counts_grpc_and_http_together, .timeout = 60) {
    test_server s;
    int gport;
    const char *args[] = {"--max-connections-per-ip", "4", NULL};
    start(&s, &gport, args);
    int h1 = http_open(s.port), h2 = http_open(s.port);
    h2c *g1 = connect_ok(gport, NULL), *g2 = connect_ok(gport, NULL);
    cr_expect_eq(call_empty(g1, "ServerLive")->grpc_status, 0);
    cr_expect_eq(call_empty(g2, "ServerLive")->grpc_status, 0);
    h2c *g3 = connect_ok(gport, NULL);
    h2c_stream *st = call_empty(g3, "ServerLive");
    cr_expect_eq(st->grpc_status, 14, "a fifth connection: grpc-status %d (%s)", st->grpc_status, st->grpc_message);
    cr_expect(strstr(st->grpc_message, "max-connections-per-ip"), "%s", st->grpc_message);
    h2c_run(g3, 3000, is_eof, NULL);
    uint32_t code = 0;
    cr_expect(h2c_goaway(g3, &code, NULL) && code == NGHTTP2_ENHANCE_YOUR_CALM, "GOAWAY ENHANCE_YOUR_CALM (%u)", code);
    cr_expect(h2c_eof(g3), "then the refused connection closes");
    h2c_free(g3);
    cr_expect_eq(http_get(s.port, NULL, "/healthz", 2000), 0, "a fifth HTTP connection is refused");
    h2c *other = connect_ok(gport, "127.0.0.2");
    cr_expect_eq(call_empty(other, "ServerLive")->grpc_status, 0, "another address is not capped");
    cr_expect_eq(http_get(s.port, "127.0.0.2", "/healthz", 2000), 200);
    close(h1);
    h2c *g4 = grpc_served_within(gport, 10000);
    cr_expect(g4, "below the cap again once an HTTP connection closed");
    close(h2);
    cr_expect(http_served_within(s.port, 10000), "and for HTTP");
    h2c_free(g1), h2c_free(g2), h2c_free(other);
    if (g4) h2c_free(g4);
    cr_assert_eq(ts_stop(&s), 0);
}

/* --max-connections 4 and --health-reserve 2 over both protocols. Two busy HTTP connections and two
 * gRPC connections with a call open fill the limit; a gRPC connection beyond it is in the reserve:
 * ModelInfer UNAVAILABLE, ServerLive served, each then sent away (GOAWAY) so the reserve stays free;
 * HTTP's /healthz is served from the reserve and other routes get 503. With the reserve held too,
 * a further gRPC connection answers UNAVAILABLE naming the limit, an HTTP one is closed unanswered. */
Test(grpc, connections_of_both_protocols_share_the_limit_and_the_reserve, .timeout = 60) {
    test_server s;
    int gport;
    const char *args[] = {"--max-connections", "4", "--health-reserve", "2", "--max-connections-per-ip", "0", NULL};
    start(&s, &gport, args);
    int b1 = http_busy(s.port), b2 = http_busy(s.port);
    h2c *g[2];
    for (int k = 0; k < 2; k++) {
        g[k] = connect_ok(gport, NULL);
        int i = h2c_call(g[k], "ModelInfer", NULL, 0, false); /* a call open: busy */
        cr_assert_geq(i, 0);
        h2c_run(g[k], 300, closed_or_eof, &i);
        cr_expect(!h2c_stream_at(g[k], i)->closed, "a connection within the limit takes its call");
    }
    size_t rlen = 0, len = 0;
    uint8_t *req = h2c_infer_request("cls_lora", "a fine film", 0, &rlen);
    uint8_t *msg = h2c_grpc_message(req, rlen, &len);
    h2c *r = connect_ok(gport, NULL);
    int i = h2c_call(r, "ModelInfer", msg, len, true);
    h2c_run(r, 5000, closed_or_eof, &i);
    h2c_stream *st = h2c_stream_at(r, i);
    cr_expect_eq(st->grpc_status, 14, "ModelInfer in the reserve: %d (%s)", st->grpc_status, st->grpc_message);
    cr_expect(strstr(st->grpc_message, "--max-connections 4"), "%s", st->grpc_message);
    h2c_run(r, 3000, is_eof, NULL);
    cr_expect(h2c_goaway(r, NULL, NULL) && h2c_eof(r), "the reserve connection is sent away");
    h2c_free(r);
    r = connect_ok(gport, NULL);
    cr_expect_eq(call_empty(r, "ServerLive")->grpc_status, 0, "ServerLive is served in the reserve");
    h2c_run(r, 3000, is_eof, NULL);
    cr_expect(h2c_eof(r), "and sent away after it");
    h2c_free(r);
    ts_sleep_ms(200);
    cr_expect_eq(http_get(s.port, NULL, "/healthz", 2000), 200, "HTTP health in the reserve");
    cr_expect_eq(http_get(s.port, NULL, "/v1/tasks", 2000), 503, "other HTTP routes in the reserve");
    /* the reserve held: two gRPC connections beyond the limit, each with a health call open */
    h2c *held[2];
    for (int k = 0; k < 2; k++) {
        held[k] = connect_ok(gport, NULL);
        int j = h2c_call(held[k], "ServerLive", NULL, 0, false);
        h2c_run(held[k], 300, closed_or_eof, &j);
        cr_expect(!h2c_stream_at(held[k], j)->closed, "a health call open in the reserve");
    }
    h2c *full = connect_ok(gport, NULL);
    st = call_empty(full, "ServerLive");
    cr_expect_eq(st->grpc_status, 14, "every connection in use: %d (%s)", st->grpc_status, st->grpc_message);
    cr_expect(strstr(st->grpc_message, "--health-reserve 2"), "%s", st->grpc_message);
    h2c_free(full);
    cr_expect_eq(http_get(s.port, NULL, "/healthz", 2000), 0, "an HTTP connection beyond the reserve is refused");
    for (int k = 0; k < 2; k++) h2c_free(held[k]), h2c_free(g[k]);
    close(b1), close(b2);
    free(msg), free(req);
    cr_assert_eq(ts_stop(&s), 0);
}
