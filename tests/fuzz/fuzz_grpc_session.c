/* fuzz_grpc_session.c - gRPC's transport (server/grpc.c) as a client's bytes reach it: the input,
 * after the client preface the harness sends first, is what a client writes on the connection
 * (SETTINGS, HEADERS with HPACK, DATA, RST_STREAM, WINDOW_UPDATE, ...), fed through the server's
 * nghttp2 session in chunks as socket reads would bring them, with no network: a memory connection
 * (srv__grpc_mem_open) whose output is only counted. The methods' side is a stub (the real one needs
 * a registry and a scheduler): begin refuses some ModelInfer calls on their headers, dispatch
 * answers ServerLive with a message, echoes ModelInfer's request message back as its answer's DATA
 * and refuses the rest, and a passed grpc-timeout answers DEADLINE_EXCEEDED.
 *
 * The first byte picks the case: bits 0-1 the connection (0, 1 plain, 2 in the reserve, 3 refused),
 * bits 2-3 the limits (--max-body-bytes and --grpc-buffer-bytes, from roomy to a few bytes), bits 4-6
 * the size of each read, bit 7 whether begin refuses ModelInfer on streams 3, 7, 11, ... Beyond
 * memory safety: a connection's calls never hold more than its budget, and none once it is closed;
 * every call is freed with its connection (LeakSanitizer). A broken contract aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static srv_server server;
static srv_grpc *transport;
static bool refuse_some;
static size_t out_bytes;

static void out(void *ud, const uint8_t *p, size_t n) {
    (void)ud;
    unsigned h = 0;
    for (size_t i = 0; i < n; i++) h += p[i]; /* every byte handed out is read (ASan) */
    fuzz_keep(h);
    out_bytes += n;
}

static int begin(srv_grpc_call *c) {
    if (c->method != PROTO_GRPC_MODEL_INFER || !refuse_some || c->stream_id % 4 != 3) return 0;
    srv__grpc_answer(c, PROTO_GRPC_RESOURCE_EXHAUSTED, "the queue is full (fuzz)", NULL, 0);
    return 1;
}

static void dispatch(srv_grpc_call *c) {
    if (c->method == PROTO_GRPC_SERVER_LIVE) {
        uint8_t *m = malloc(PROTO_GRPC_PREFIX + 2);
        if (!m) return srv__grpc_answer(c, PROTO_GRPC_INTERNAL, "out of memory", NULL, 0);
        proto_grpc_prefix_write(m, 2);
        m[PROTO_GRPC_PREFIX] = 0x08, m[PROTO_GRPC_PREFIX + 1] = 0x01; /* live: true */
        return srv__grpc_answer(c, PROTO_GRPC_OK, NULL, m, PROTO_GRPC_PREFIX + 2);
    }
    if (c->method == PROTO_GRPC_MODEL_INFER) {
        /* the request, prefix and message, read whole: dispatch's contract is that c->msg holds c->len bytes */
        uint8_t *m = malloc(c->len);
        if (!m) return srv__grpc_answer(c, PROTO_GRPC_INTERNAL, "out of memory", NULL, 0);
        memcpy(m, c->msg, c->len);
        return srv__grpc_answer(c, PROTO_GRPC_OK, NULL, m, c->len);
    }
    srv__grpc_answer(c, PROTO_GRPC_NOT_FOUND, "no such model (fuzz)", NULL, 0);
}

static void deadline(srv_grpc_call *c) { srv__grpc_answer(c, PROTO_GRPC_DEADLINE_EXCEEDED, "the deadline passed", NULL, 0); }

static void setup(void) {
    server.cfg = srv_default_config();
    snprintf(server.id_prefix, sizeof server.id_prefix, "fuzz");
    if (uv_loop_init(&server.loop) || !(server.metrics = srv__metrics_new(NULL)) ||
        !(transport = srv__grpc_new(&server, (srv_grpc_hooks){.begin = begin, .dispatch = dispatch, .deadline = deadline})))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const size_t body[4] = {1 << 20, 65536, 16, 1 << 20}, budget[4] = {8 << 20, 131072, 40, 100};
    static const size_t reads[8] = {1, 3, 7, 64, 1000, 16384, 65536, (size_t)-1};
    static const uint8_t magic[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    if (!transport) setup();
    if (size < 1) return 0;
    uint8_t opt = data[0];
    data++, size--;
    server.cfg.max_body_bytes = body[(opt >> 2) & 3];
    server.cfg.grpc_buffer_bytes = budget[(opt >> 2) & 3];
    refuse_some = opt & 0x80;
    size_t chunk = reads[(opt >> 4) & 7];
    int mode = opt & 3;
    srv_grpc_conn *c = srv__grpc_mem_open(transport, mode == 3 ? "too many connections from this address (fuzz)" : NULL,
                                          mode == 2, out, NULL);
    if (!c) return 0;
    int alive = srv__grpc_mem_recv(c, magic, sizeof magic - 1) == 0;
    for (size_t off = 0; alive && off < size;) {
        size_t n = size - off < chunk ? size - off : chunk;
        alive = srv__grpc_mem_recv(c, data + off, n) == 0;
        off += n;
        if (srv__grpc_conn_buffered(c) > server.cfg.grpc_buffer_bytes) abort(); /* over its budget */
        uv_run(&server.loop, UV_RUN_NOWAIT); /* deadlines already passed fire */
    }
    if (!alive && srv__grpc_conn_buffered(c)) abort(); /* closed, yet its calls hold bytes */
    fuzz_log("grpc_session", !alive, "the connection closed");
    srv__grpc_mem_close(c);
    /* the calls' timers close on the loop, then the calls are freed */
    uv_run(&server.loop, UV_RUN_NOWAIT);
    fuzz_keep(out_bytes);
    return 0;
}
