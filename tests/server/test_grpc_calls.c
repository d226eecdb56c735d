/* test_grpc_calls.c - integration tests of the gRPC edge of the front door (server/grpc_calls.c): the
 * real `adapterd serve --grpc-port` on the fixture registry, spoken to by an nghttp2 client session
 * (h2_client.c). Every method that reads the registry or decodes a message runs on the edge's prep
 * threads and comes back to the loop: each answers with its status and data; a client's mistake (a
 * message that is not a ModelInferRequest, bytes that are not UTF-8, an unknown model) is
 * INVALID_ARGUMENT or NOT_FOUND, never INTERNAL; many calls on one connection all come back; a
 * client that leaves while its calls are being prepared or run costs nothing (the server serves the
 * next connection, counts every decoded call, and exits 0 on SIGTERM, leak-free under ASan). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h2_client.h"
#include "http_client.h"

/* gRPC status codes (grpc/doc/statuscodes.md) */
enum { OK = 0, INVALID_ARGUMENT = 3, NOT_FOUND = 5, INTERNAL = 13 };

static test_server srv;
static int gport;

static void start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    static char port[16];
    gport = h2c_free_port();
    snprintf(port, sizeof port, "%d", gport);
    const char *args[] = {"--grpc-port", port, NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "the server did not start");
}

static void stop(void) { cr_expect_eq(ts_stop(&srv), 0, "the server did not exit 0 after SIGTERM"); }

TestSuite(grpc_calls, .init = start, .fini = stop, .timeout = 120);

/* A message with one length-delimited string field 1 (the name of ModelReady, ModelMetadata and
 * ModelStatistics requests), gRPC prefix included; malloc'd. */
static uint8_t *named_request(const char *name, size_t *len) {
    size_t n = strlen(name);
    uint8_t pb[130];
    cr_assert(n < 120);
    pb[0] = 0x0a, pb[1] = (uint8_t)n;
    memcpy(pb + 2, name, n);
    uint8_t *m = h2c_grpc_message(pb, n + 2, len);
    cr_assert(m);
    return m;
}

/* One call of method with message m (gRPC prefix included) on a new connection; its stream once closed. */
static h2c_stream call(h2c **cp, const char *method, const uint8_t *m, size_t len) {
    h2c *c = *cp = h2c_connect(gport, NULL);
    cr_assert(c, "cannot connect to the gRPC port");
    int i = h2c_call(c, method, m, len, true);
    cr_assert(i >= 0);
    cr_assert(h2c_run(c, 20000, NULL, NULL), "%s did not close in 20 s", method);
    return *h2c_stream_at(c, i);
}

static h2c_stream infer(const char *model, const char *text) {
    size_t rl = 0, ml = 0;
    uint8_t *req = h2c_infer_request(model, text, 0, &rl);
    cr_assert(req);
    uint8_t *m = h2c_grpc_message(req, rl, &ml);
    cr_assert(m);
    h2c *c = NULL;
    h2c_stream st = call(&c, "ModelInfer", m, ml);
    h2c_free(c);
    free(req), free(m);
    return st;
}

Test(grpc_calls, every_method_answers_and_client_mistakes_are_not_internal) {
    h2c_stream st = infer("cls_lora", "a fine and moving film");
    cr_expect_eq(st.grpc_status, OK, "ModelInfer: %d %s", st.grpc_status, st.grpc_message);
    cr_expect_gt(st.data_len, 5, "an OK answer carries its ModelInferResponse");

    st = infer("no_such_task", "text");
    cr_expect_eq(st.grpc_status, NOT_FOUND, "unknown model: %d %s", st.grpc_status, st.grpc_message);
    cr_expect(strstr(st.grpc_message, "no_such_task"), "names the model: %s", st.grpc_message);

    /* not a ModelInferRequest at all: field 1 declared longer than the message */
    static const uint8_t garbage[] = {0x0a, 0x7f, 'x'};
    size_t ml = 0;
    uint8_t *m = h2c_grpc_message(garbage, sizeof garbage, &ml);
    h2c *c = NULL;
    st = call(&c, "ModelInfer", m, ml);
    h2c_free(c), free(m);
    cr_expect_eq(st.grpc_status, INVALID_ARGUMENT, "garbage: %d %s", st.grpc_status, st.grpc_message);

    /* a text that is not UTF-8 */
    st = infer("cls_lora", "caf\xe9 au lait");
    cr_expect_eq(st.grpc_status, INVALID_ARGUMENT, "not UTF-8: %d %s", st.grpc_status, st.grpc_message);

    const char *methods[] = {"ModelReady", "ModelMetadata", "ModelStatistics"};
    for (int k = 0; k < 3; k++) {
        m = named_request("cls_lora", &ml);
        st = call(&c, methods[k], m, ml);
        h2c_free(c), free(m);
        cr_expect_eq(st.grpc_status, OK, "%s: %d %s", methods[k], st.grpc_status, st.grpc_message);
        cr_expect_gt(st.data_len, 5, "%s carries its answer", methods[k]);
        m = named_request("no_such_task", &ml);
        st = call(&c, methods[k], m, ml);
        h2c_free(c), free(m);
        cr_expect_eq(st.grpc_status, NOT_FOUND, "%s of an unknown model: %d %s", methods[k], st.grpc_status, st.grpc_message);
    }
    /* ModelStatistics without a name: every task, walked off the loop */
    static const uint8_t empty[5] = {0};
    st = call(&c, "ModelStatistics", empty, sizeof empty);
    h2c_free(c);
    cr_expect_eq(st.grpc_status, OK, "ModelStatistics of every model: %d %s", st.grpc_status, st.grpc_message);
}

static bool n_closed(h2c *c, void *ud) {
    int want = *(int *)ud, n = 0;
    for (int i = 0; i < want; i++) n += h2c_stream_at(c, i)->closed;
    return n == want;
}

Test(grpc_calls, many_calls_on_one_connection_and_a_client_that_leaves) {
    long before = ts_metric(&srv, "adapterd_decoded_requests_total{protocol=\"kserve_v2_grpc\"}");
    if (before < 0) before = 0;
    size_t rl = 0, ml = 0;
    uint8_t *req = h2c_infer_request("cls_lora", "the home team won the match in the last minute", 0, &rl);
    uint8_t *m = h2c_grpc_message(req, rl, &ml);
    cr_assert(req && m);
    enum { N = 32 };
    h2c *c = h2c_connect(gport, NULL);
    cr_assert(c);
    for (int i = 0; i < N; i++) cr_assert_eq(h2c_call(c, "ModelInfer", m, ml, true), i);
    int want = N;
    cr_assert(h2c_run(c, 60000, n_closed, &want), "not every call came back");
    for (int i = 0; i < N; i++)
        cr_expect_eq(h2c_stream_at(c, i)->grpc_status, OK, "call %d: %d %s", i, h2c_stream_at(c, i)->grpc_status,
                     h2c_stream_at(c, i)->grpc_message);
    h2c_free(c);
    /* 16 more, and the client goes away at once: the calls are decoded, prepared and run for nobody */
    c = h2c_connect(gport, NULL);
    cr_assert(c);
    for (int i = 0; i < 16; i++) cr_assert_eq(h2c_call(c, "ModelInfer", m, ml, true), i);
    h2c_run(c, 5, NULL, NULL); /* hand them to the socket */
    h2c_free(c);
    /* the server goes on: a new connection is served */
    static const uint8_t empty[5] = {0};
    h2c_stream st = call(&c, "ServerLive", empty, sizeof empty);
    h2c_free(c);
    cr_expect_eq(st.grpc_status, OK);
    long after = ts_wait_metric(&srv, "adapterd_decoded_requests_total{protocol=\"kserve_v2_grpc\"}", before + N, 10000);
    cr_expect_geq(after, before + N, "every answered call went through the gRPC codec: %ld -> %ld", before, after);
    free(req), free(m);
}
