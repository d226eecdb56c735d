/* grpc.c - gRPC's transport for KServe v2's GRPCInferenceService: HTTP/2 connections on --grpc-port,
 * each an nghttp2 session driven from the server's libuv loop, and the calls (streams) they carry
 * up to grpc_calls.c.
 *
 * Why nghttp2 on the loop (not Debian's libgrpc core): gRPC over HTTP/2 is small (a POST to
 * /inference.GRPCInferenceService/<Method>, content-type application/grpc, each message a 5-byte
 * prefix and the protobuf; the answer's HEADERS, DATA, then trailers grpc-status and grpc-message),
 * and nghttp2 is a plain C library that owns no thread and no socket: we feed it the bytes the loop
 * reads and write what it gives back. So the calls live on the same loop as the scheduler (a job's
 * done hook answers its call directly, no cross-thread hop), the server keeps one event loop and one
 * threading rule, and the dependency is two small C libraries (libnghttp2, libprotobuf-c). libgrpc's
 * core would bring its own completion queues and threads (a second event model beside libuv, with
 * its own polling threads), a C++ runtime, and a far larger surface for the ARM64 cross-build.
 *
 * Bounds. A call is decided on its headers, before a byte of its message is taken: a malformed
 * request (content-type, :method, an unknown method, grpc-timeout), a call on a connection in the
 * reserve and a ModelInfer beyond --max-queue (grpc_calls.c's begin hook) are answered there; such a
 * call's DATA is dropped as it arrives and its stream reset (NO_ERROR) once the answer is out, so its
 * client stops sending. HTTP/2's flow control is the back-pressure: automatic WINDOW_UPDATE is off,
 * every stream starts with a window of STREAM_WINDOW, and a stream's window is never given back. The
 * message's 5-byte prefix declares its length; only then, once the length is within --max-body-bytes
 * and within what is left of the connection's budget (--grpc-buffer-bytes, RESOURCE_EXHAUSTED beyond
 * either), is the message allocated whole and the stream's window raised to exactly prefix + message,
 * in one WINDOW_UPDATE (one round trip for a large message). A client cannot push more: DATA past a
 * stream's window is a flow-control error (nghttp2 resets the stream without handing us a byte), and
 * bytes past the declared message are INVALID_ARGUMENT at once. The connection's window is consumed as
 * DATA arrives, kept or dropped, so a refused stream never stalls the others. What a connection's
 * requests hold is thus at most its budget; a ModelInfer whose client left while its job runs keeps
 * its message until the job ends, and those are bounded by --max-queue.
 *
 * Connections are counted in conn.c together with HTTP's: --max-connections, --health-reserve and
 * --max-connections-per-ip are one set of limits for both protocols. A connection in the reserve
 * (beyond --max-connections) serves ServerLive and ServerReady, answers other calls UNAVAILABLE, and
 * goes away (GOAWAY) once it answered, so the reserve stays free for probes; while it has no call
 * open, a gRPC connection may be closed to make room, as an HTTP one waiting for headers. A connection
 * refused (over --max-connections-per-ip, or every connection in use) is still served long enough to
 * answer its calls UNAVAILABLE with the reason, then GOAWAY (ENHANCE_YOUR_CALM): gRPC clients report
 * that status and its message, where a connection closed at accept reads only "Connection reset by
 * peer", and a GOAWAY before any call makes them retry until their deadline (Debian's grpcio 1.51).
 * At most REFUSING_MAX connections are being refused at once, each for REFUSE_LINGER_S at most; past
 * that a refused connection is closed at accept. Also bounded: concurrent calls per connection
 * (SETTINGS_MAX_CONCURRENT_STREAMS), and bytes handed to the socket and not yet written (reading from
 * nghttp2 pauses beyond WRITE_MAX; HTTP/2 flow control holds the rest). SIGTERM sends GOAWAY: calls
 * under way finish, a connection closes once its last answer is out, and each open connection counts
 * as in flight for the server's drain until then.
 *
 * TLS (--tls-cert): GnuTLS runs on the same loop, over the same socket, with no thread and no blocking
 * call. Its transport is two functions over memory: pull hands it what is left of the read being
 * handled (EAGAIN when that is used up: GnuTLS keeps a partial record itself), push appends its records
 * to a buffer written to the socket as one uv_write after each GnuTLS call. A read drives the
 * handshake until it completes, then every record's plaintext goes to nghttp2 as a cleartext read
 * would; what nghttp2 has to send is sealed into records on its way to the socket (conn_flush). The
 * client must negotiate ALPN h2 (gRPC's clients all do); a handshake that fails, or one without h2, is
 * answered with its alert and closed, before nghttp2 sees a byte. A handshake is bounded by
 * --header-timeout-ms, as HTTP's headers; its credentials (tls.c) are held by the connection for its
 * life, so a certificate rotated meanwhile changes nothing for it. */
#define _GNU_SOURCE
#include "grpc.h"

#include <assert.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "conn.h"
#include "grpc_impl.h"
#include "tls.h"

/* Concurrent calls per connection (SETTINGS_MAX_CONCURRENT_STREAMS). */
#define STREAMS_MAX 100
/* Every stream's window until its message's prefix arrived (SETTINGS_INITIAL_WINDOW_SIZE): HTTP/2's
 * default, said explicitly. Smaller would save little (a refused stream's DATA is dropped as it
 * arrives, never held) and would change at the client's SETTINGS ACK: the windows of streams opened
 * before it would shrink by the difference, below what their prefix may already have raised them
 * to, and those calls would stall. It also lets a message of up to 64 KiB arrive with no round trip. */
#define STREAM_WINDOW 65535
/* Bytes of answers handed to the socket and not yet written, per connection, beyond which no more
 * are taken from nghttp2 until a write completes. */
#define WRITE_MAX (1u << 20)
/* Largest header list a client may send (SETTINGS_MAX_HEADER_LIST_SIZE). */
#define HEADER_LIST_MAX 16384
/* Read buffer per read callback. */
#define READ_BUF 65536
#define LISTEN_BACKLOG 256
/* A connection with no call that read nothing for this long is closed (as libmicrohttpd's idle timeout). */
#define IDLE_TIMEOUT_S 60.0
/* How often the sweep looks for idle connections and slow requests, ms. */
#define SWEEP_MS 1000
/* Refused connections being served their refusal at once; past this, one is closed at accept. */
#define REFUSING_MAX 32
/* How long a refused connection stays for its calls' answers, seconds. */
#define REFUSE_LINGER_S 2.0

#define ONE_MESSAGE                                                                                                    \
    "a unary call takes exactly one message (a 5-byte prefix: flag 0 or 1, big-endian length; then the message)"

static void conn_flush(srv_grpc_conn *c);
static void conn_close(srv_grpc_conn *c);
static void conn_recv(srv_grpc_conn *c, const uint8_t *p, size_t n);

srv_server *srv__grpc_server(const srv_grpc *g) { return g->s; }

/* conn.c learns whether the connection has a call open (a connection with none may give way). */
static void conn_mark_idle(srv_grpc_conn *c, bool idle) {
    if (c->idle == idle) return;
    c->idle = idle;
    if (c->sc) srv__conn_phase(c->g->s->conns, c->sc, idle ? SRV_CONN_WAITING : SRV_CONN_BUSY);
}

/* ---- calls ---- */

static void call_closed(uv_handle_t *h) { free(h->data); }

/* The call's message is no longer needed: freed, and its bytes back in its connection's budget. */
void srv__grpc_call_drop_msg(srv_grpc_call *c) {
    if (c->msg && c->conn) c->conn->buffered -= c->want;
    free(c->msg);
    c->msg = NULL;
}

void srv__grpc_call_release(srv_grpc_call *c) {
    srv_grpc *g = c->g;
    if (c->prev) c->prev->next = c->next;
    else g->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->active) atomic_fetch_sub(&g->s->active, 1);
    srv__front_clear(&c->front); /* its admission, tasks, job and decoded request */
    srv__grpc_call_drop_msg(c);
    free(c->out), free(c->pend_out);
    uv_close((uv_handle_t *)&c->timer, call_closed);
}

static srv_grpc_call *call_new(srv_grpc_conn *conn, int32_t stream_id) {
    srv_grpc_call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    srv_grpc *g = conn->g;
    c->g = g, c->conn = conn, c->stream_id = stream_id, c->t0 = srv__now();
    c->method = PROTO_GRPC_UNKNOWN_METHOD;
    uv_timer_init(&g->s->loop, &c->timer);
    c->timer.data = c;
    unsigned long long k = (unsigned long long)atomic_fetch_add(&g->s->next_id, 1);
    snprintf(c->id, sizeof c->id, "%s-%llu", g->s->id_prefix, k);
    if ((c->next = g->calls)) c->next->prev = c;
    g->calls = c;
    conn->n_streams++;
    conn_mark_idle(conn, false);
    return c;
}

/* The call leaves its stream (closed, or its connection went away). */
static void call_detach(srv_grpc_call *c) {
    srv_grpc_conn *conn = c->conn;
    if (!conn) return;
    if (c->loading) conn->buffered -= c->msg ? c->want : 0; /* a prep thread reads it: freed with the call */
    else srv__grpc_call_drop_msg(c);
    conn->n_streams--;
    c->conn = NULL;
    if (!c->answered) { /* the client left first: nobody to answer */
        c->answered = true;
        uv_timer_stop(&c->timer);
    }
    if (c->active) {
        c->active = false;
        atomic_fetch_sub(&c->g->s->active, 1);
    }
    if (!c->job && !c->loading) srv__grpc_call_release(c);
}

/* ---- answers ---- */

static ssize_t read_answer(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *flags,
                           nghttp2_data_source *src, void *ud) {
    srv_grpc_call *c = src->ptr;
    size_t n = c->out_len - c->out_off;
    if (n > length) n = length;
    memcpy(buf, c->out + c->out_off, n);
    c->out_off += n;
    if (c->out_off == c->out_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        char st[16];
        snprintf(st, sizeof st, "%d", c->status);
        nghttp2_nv tr[] = {{(uint8_t *)"grpc-status", (uint8_t *)st, 11, strlen(st), NGHTTP2_NV_FLAG_NONE}};
        if (nghttp2_submit_trailer(h2, stream_id, tr, 1)) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

void srv__grpc_answer(srv_grpc_call *c, int status, const char *message, uint8_t *out, size_t len) {
    if (c->answered) {
        free(out);
        return;
    }
    c->answered = true;
    uv_timer_stop(&c->timer);
    srv_server *s = c->g->s;
    srv__metrics_grpc(s->metrics, (int)c->method, status, srv__now() - c->t0, c->trace.sampled ? c->trace.trace_id : NULL);
    if (c->trace.sampled) {
        const srv_front *f = &c->front;
        const srv_job *j = c->traced_job; /* a job still in a pass (the deadline passed) is not read */
        srv_trace_end e = {.rpc_method = proto_grpc_method_name(c->method), .grpc_status = status, .request_id = c->id,
                           .message = status ? message : NULL, .t0 = c->t0};
        if (!c->loading) { /* else a prep thread or the pool is at the request and its steps: the server span alone */
            e.protocol = f->decoded ? f->codec->name : NULL;
            e.tasks = (const char *const *)f->req.tasks, e.n_tasks = f->decoded ? f->req.n_tasks : 0;
            srv__trace_end(s->tracer, &c->trace, &e, j);
        } else {
            srv_trace_req only = {.on = true, .sampled = true, .has_parent = c->trace.has_parent};
            memcpy(only.trace_id, c->trace.trace_id, sizeof only.trace_id);
            memcpy(only.span_id, c->trace.span_id, sizeof only.span_id);
            memcpy(only.parent_id, c->trace.parent_id, sizeof only.parent_id);
            memcpy(only.state, c->trace.state, sizeof only.state);
            srv__trace_end(s->tracer, &only, &e, NULL);
        }
    }
    if (c->active) {
        c->active = false;
        atomic_fetch_sub(&s->active, 1);
    }
    srv__front_release(&c->front); /* answered before a job took its place: free for the next call now */
    if (!c->loading) srv__grpc_call_drop_msg(c); /* a prep thread may be reading it: dropped when it is back */
    srv_grpc_conn *conn = c->conn;
    if (!conn || conn->closing) {
        free(out);
        return;
    }
    conn->answered_any = true;
    c->status = status;
    snprintf(c->message, sizeof c->message, "%s", message ? message : "");
    int rc;
    /* the trace context in the initial metadata (W3C Trace Context, as HTTP's headers) */
    nghttp2_nv tr[2] = {NV("traceparent", c->trace.traceparent), NV("tracestate", c->trace.state)};
    size_t ntr = c->trace.on ? (c->trace.state[0] ? 2 : 1) : 0;
    if (out && status == PROTO_GRPC_OK) {
        c->out = out, c->out_len = len, c->out_off = 0;
        nghttp2_nv hd[] = {NV(":status", "200"), NV("content-type", "application/grpc"), tr[0], tr[1]};
        nghttp2_data_provider dp = {.source.ptr = c, .read_callback = read_answer};
        rc = nghttp2_submit_response(conn->h2, c->stream_id, hd, 2 + ntr, &dp);
    } else {
        free(out);
        char st[16], esc[3 * sizeof c->message];
        snprintf(st, sizeof st, "%d", status);
        proto_grpc_message_escape(c->message, esc, sizeof esc);
        /* trailers-only: one HEADERS that ends the stream */
        nghttp2_nv hd[] = {NV(":status", "200"), NV("content-type", "application/grpc"), tr[0], tr[1], NV("grpc-status", st),
                           NV("grpc-message", esc)};
        size_t n = 2 + ntr;
        hd[n++] = hd[4], hd[n++] = hd[5]; /* grpc-status, grpc-message after the context */
        rc = nghttp2_submit_response(conn->h2, c->stream_id, hd, esc[0] ? n : n - 1, NULL);
    }
    if (rc) nghttp2_submit_rst_stream(conn->h2, NGHTTP2_FLAG_NONE, c->stream_id, NGHTTP2_INTERNAL_ERROR);
    conn_flush(conn);
}

/* A request that is not gRPC at all (content-type): HTTP's 415, as gRPC over HTTP/2 says. */
static void answer_http(srv_grpc_call *c, const char *status) {
    c->answered = true;
    uv_timer_stop(&c->timer);
    nghttp2_nv hd[] = {NV(":status", status)};
    nghttp2_submit_response(c->conn->h2, c->stream_id, hd, 1, NULL);
    conn_flush(c->conn);
}

static void on_deadline(uv_timer_t *t) {
    srv_grpc_call *c = t->data;
    if (!c->answered) c->g->hooks.deadline(c);
}

/* The request's headers are complete: everything that can be refused on them is, before a byte of
 * its message is taken. */
static void request_begin(srv_grpc_call *c) {
    srv_grpc_conn *conn = c->conn;
    const srv_config *cfg = &c->g->s->cfg;
    srv__trace_begin(c->g->s->tracer, &c->trace, c->tp_in[0] ? c->tp_in : NULL, c->ts_in[0] ? c->ts_in : NULL);
    if (c->deadline > 0) {
        double left = c->deadline - srv__now();
        uv_timer_start(&c->timer, on_deadline, left > 0 ? (uint64_t)(left * 1e3) + 1 : 0, 0);
    }
    if (conn->refuse[0]) return srv__grpc_answer(c, PROTO_GRPC_UNAVAILABLE, conn->refuse, NULL, 0);
    if (c->bad_ctype) return answer_http(c, "415");
    if (c->bad_method) return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED, "gRPC calls are POST requests", NULL, 0);
    if (c->method == PROTO_GRPC_UNKNOWN_METHOD)
        return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED,
                                "unknown method; inference.GRPCInferenceService serves ServerLive, ServerReady, ModelReady, "
                                "ServerMetadata, ModelMetadata, ModelInfer, ModelStatistics, RepositoryIndex",
                                NULL, 0);
    if (c->bad_timeout) return srv__grpc_answer(c, PROTO_GRPC_INVALID_ARGUMENT, "grpc-timeout is malformed", NULL, 0);
    if (conn->reserve && c->method != PROTO_GRPC_SERVER_LIVE && c->method != PROTO_GRPC_SERVER_READY) {
        char m[200];
        snprintf(m, sizeof m,
                 "the server is at its connection limit (--max-connections %d); connections beyond it serve ServerLive "
                 "and ServerReady only: retry",
                 cfg->max_connections);
        return srv__grpc_answer(c, PROTO_GRPC_UNAVAILABLE, m, NULL, 0);
    }
    if (c->g->hooks.begin && c->g->hooks.begin(c)) assert(c->answered);
}

/* The message's prefix arrived: its declared length is checked against --max-body-bytes and the
 * connection's budget, the message allocated whole, and the stream allowed to send exactly that
 * much. Returns 0, or -1 after answering the call. */
static int message_begin(srv_grpc_conn *conn, srv_grpc_call *c) {
    const srv_config *cfg = &c->g->s->cfg;
    bool compressed = false;
    uint32_t n = 0;
    char m[300];
    if (proto_grpc_prefix_read(c->head, &compressed, &n)) {
        srv__grpc_answer(c, PROTO_GRPC_INVALID_ARGUMENT, ONE_MESSAGE, NULL, 0);
        return -1;
    }
    if (compressed) {
        srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED,
                         c->bad_encoding ? "grpc-encoding: only identity is supported"
                                         : "a compressed message without grpc-encoding (only identity is supported)",
                         NULL, 0);
        return -1;
    }
    /* a stream's window cannot pass 2^31 - 1 */
    size_t limit = cfg->max_body_bytes;
    if (limit > (size_t)NGHTTP2_MAX_WINDOW_SIZE - PROTO_GRPC_PREFIX) limit = (size_t)NGHTTP2_MAX_WINDOW_SIZE - PROTO_GRPC_PREFIX;
    if (n > limit) {
        snprintf(m, sizeof m, "the request message of %u bytes is over the limit of %zu bytes (--max-body-bytes)", n, limit);
        srv__grpc_answer(c, PROTO_GRPC_RESOURCE_EXHAUSTED, m, NULL, 0);
        return -1;
    }
    size_t want = PROTO_GRPC_PREFIX + (size_t)n;
    if (want > cfg->grpc_buffer_bytes - (conn->buffered < cfg->grpc_buffer_bytes ? conn->buffered : cfg->grpc_buffer_bytes)) {
        snprintf(m, sizeof m,
                 "this connection's calls hold %zu bytes of request messages; %zu more would pass its budget of %zu bytes "
                 "(--grpc-buffer-bytes): retry, or spread the calls over more connections",
                 conn->buffered, want, cfg->grpc_buffer_bytes);
        srv__grpc_answer(c, PROTO_GRPC_RESOURCE_EXHAUSTED, m, NULL, 0);
        return -1;
    }
    if (!(c->msg = malloc(want))) {
        srv__grpc_answer(c, PROTO_GRPC_RESOURCE_EXHAUSTED, "out of memory for the request message", NULL, 0);
        return -1;
    }
    memcpy(c->msg, c->head, PROTO_GRPC_PREFIX);
    c->want = want;
    conn->buffered += want;
    /* one WINDOW_UPDATE for the rest of the message, never more: the stream's window is not given
     * back as its bytes arrive (automatic WINDOW_UPDATE is off) */
    if (want > STREAM_WINDOW && nghttp2_session_set_local_window_size(conn->h2, NGHTTP2_FLAG_NONE, c->stream_id, (int32_t)want)) {
        srv__grpc_answer(c, PROTO_GRPC_RESOURCE_EXHAUSTED, "out of memory for the request message", NULL, 0);
        return -1;
    }
    return 0;
}

/* The request's last frame arrived: check the framing, then dispatch. */
static void request_complete(srv_grpc_call *c) {
    srv_server *s = c->g->s;
    if (!c->want || c->len != c->want) return srv__grpc_answer(c, PROTO_GRPC_INVALID_ARGUMENT, ONE_MESSAGE, NULL, 0);
    if (c->deadline > 0 && srv__now() >= c->deadline)
        return srv__grpc_answer(c, PROTO_GRPC_DEADLINE_EXCEEDED, "the deadline passed before the call ran", NULL, 0);
    c->active = true;
    atomic_fetch_add(&s->active, 1);
    c->g->hooks.dispatch(c);
}

/* ---- nghttp2's callbacks ---- */

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
    srv_grpc_conn *conn = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    srv_grpc_call *c = call_new(conn, f->hd.stream_id);
    if (!c) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* out of memory: the stream is reset */
    nghttp2_session_set_stream_user_data(h2, f->hd.stream_id, c);
    return 0;
}

static bool header_is(const uint8_t *name, size_t n, const char *want) { return n == strlen(want) && !memcmp(name, want, n); }

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *ud) {
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    srv_grpc_call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!c) return 0;
    if (header_is(name, namelen, ":method")) c->bad_method = !(valuelen == 4 && !memcmp(value, "POST", 4));
    else if (header_is(name, namelen, ":path")) c->method = proto_grpc_method_of((const char *)value, valuelen);
    else if (header_is(name, namelen, "content-type")) {
        /* application/grpc, alone or as application/grpc+proto or with parameters */
        const size_t pl = sizeof "application/grpc" - 1;
        c->bad_ctype = !(valuelen >= pl && !strncasecmp((const char *)value, "application/grpc", pl) &&
                         (valuelen == pl || value[pl] == '+' || value[pl] == ';'));
    } else if (header_is(name, namelen, "grpc-encoding")) {
        c->bad_encoding = !(valuelen == 8 && !memcmp(value, "identity", 8));
    } else if (header_is(name, namelen, "authorization")) {
        snprintf(c->auth, sizeof c->auth, "%.*s", (int)(valuelen < sizeof c->auth ? valuelen : sizeof c->auth - 1), (const char *)value);
    } else if (header_is(name, namelen, "traceparent")) {
        /* 63 bytes keep what the parser reads of any version (its first 55, and whether a '-' follows) */
        snprintf(c->tp_in, sizeof c->tp_in, "%.*s", (int)(valuelen < sizeof c->tp_in ? valuelen : sizeof c->tp_in - 1), (const char *)value);
    } else if (header_is(name, namelen, "tracestate")) {
        if (valuelen < sizeof c->ts_in) snprintf(c->ts_in, sizeof c->ts_in, "%.*s", (int)valuelen, (const char *)value);
        else c->ts_in[0] = '\0'; /* too long to propagate whole: dropped */
    } else if (header_is(name, namelen, "grpc-timeout")) {
        double sec;
        if (proto_grpc_timeout_parse((const char *)value, valuelen, &sec)) c->bad_timeout = true;
        else c->deadline = c->t0 + sec;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len, void *ud) {
    srv_grpc_conn *conn = ud;
    /* kept or dropped, these bytes leave the connection's window now, so a refused stream never
     * holds up the others; the stream's own window is not given back (see message_begin) */
    if (nghttp2_session_consume_connection(h2, len)) return NGHTTP2_ERR_CALLBACK_FAILURE;
    srv_grpc_call *c = nghttp2_session_get_stream_user_data(h2, stream_id);
    while (c && !c->answered && len) { /* an answered call's DATA is dropped */
        if (!c->want) {                /* the prefix, maybe split across frames */
            size_t k = PROTO_GRPC_PREFIX - c->len;
            if (k > len) k = len;
            memcpy(c->head + c->len, data, k);
            c->len += k, data += k, len -= k;
            if (c->len == PROTO_GRPC_PREFIX && message_begin(conn, c)) break;
            continue;
        }
        if (len > c->want - c->len) {
            srv__grpc_answer(c, PROTO_GRPC_INVALID_ARGUMENT, ONE_MESSAGE, NULL, 0);
            break;
        }
        memcpy(c->msg + c->len, data, len);
        c->len += len;
        break;
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
    srv_grpc_call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!c) return 0;
    if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) c->ended = true;
    if (c->answered) return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) request_begin(c);
    if (!c->answered && c->ended) request_complete(c);
    return 0;
}

/* A call answered before its request ended: once its answer is out (the HEADERS that end the
 * stream), RST_STREAM NO_ERROR tells the client to stop sending (RFC 9113, 8.1). Sent after the
 * answer, not with it: a stream reset before its HEADERS went out would drop them. */
static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
    if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
    srv_grpc_call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (c && !c->ended && nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t error_code, void *ud) {
    srv_grpc_call *c = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (c) call_detach(c);
    return 0;
}

/* ---- connections ---- */

static void conn_closed(uv_handle_t *h) { free(h->data); }

static void conn_close(srv_grpc_conn *c) {
    if (c->closing) return;
    c->closing = true;
    srv_grpc *g = c->g;
    for (srv_grpc_call *k = g->calls, *next; k; k = next) {
        next = k->next;
        if (k->conn == c) call_detach(k);
    }
    nghttp2_session_del(c->h2);
    c->h2 = NULL;
    srv__grpc_tls_end(c);
    if (c->prev) c->prev->next = c->next;
    else g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n_conns--;
    if (c->refuse[0]) g->n_refusing--;
    /* conn.c forgets the connection before its socket closes: it may shut a registered one down */
    if (c->sc) srv__conn_close(g->s->conns, c->sc);
    c->sc = NULL;
    if (c->drain_counted) atomic_fetch_sub(&g->s->active, 1);
    if (c->out) return; /* a memory connection: srv__grpc_mem_close frees it */
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void on_written(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    srv_grpc_conn *c = w->c;
    c->writing -= w->len;
    free(w);
    if (c->closing) return;
    if (status < 0) return conn_close(c);
    conn_flush(c);
}

/* ---- TLS (--tls-cert): GnuTLS over the connection's bytes ---- */

/* The records GnuTLS produced, to the socket. Returns -1 when the write could not start. */
static int tls_write(srv_grpc_conn *c) {
    write_req *w = c->tout;
    if (!w) return 0;
    c->tout = NULL, c->tout_cap = 0;
    w->c = c;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
        free(w);
        return -1;
    }
    c->writing += w->len;
    return 0;
}

/* A handshake that failed, or a client that did not negotiate h2: its alert goes out, then the
 * connection closes (conn_flush). Nothing was served on it. */
static void tls_refuse(srv_grpc_conn *c, int rc) {
    if (rc == GNUTLS_E_NO_APPLICATION_PROTOCOL || rc == 0)
        gnutls_alert_send(c->tls, GNUTLS_AL_FATAL, GNUTLS_A_NO_APPLICATION_PROTOCOL);
    else
        gnutls_alert_send_appropriate(c->tls, rc);
    c->tls_failed = true;
    if (tls_write(c)) return conn_close(c);
    conn_flush(c);
}

/* Bytes read from a TLS connection: the handshake driven while it lasts, then each record's
 * plaintext handed to nghttp2 (conn_recv), until GnuTLS has taken the whole read. */
static void tls_recv(srv_grpc_conn *c, const uint8_t *p, size_t n) {
    if (c->tls_failed) return; /* refused: what else it sends is dropped while its alert goes out */
    c->last_read = srv__now();
    c->tin = p, c->tin_len = n;
    if (!c->tls_up) {
        int rc = gnutls_handshake(c->tls);
        if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) {
            if (tls_write(c)) conn_close(c);
            return;
        }
        if (rc < 0) return tls_refuse(c, rc);
        gnutls_datum_t proto = {0};
        /* a client that offered no ALPN at all passes GnuTLS's mandatory check: refused here */
        if (gnutls_alpn_get_selected_protocol(c->tls, &proto) || proto.size != 2 || memcmp(proto.data, "h2", 2))
            return tls_refuse(c, 0);
        c->tls_up = true;
        if (tls_write(c)) return conn_close(c);
        conn_flush(c); /* the SETTINGS nghttp2 queued at accept */
        if (c->closing) return;
    }
    /* until GnuTLS asks for more than the read had: EAGAIN only once it holds no whole record, decrypted
     * or not (records that came with the handshake's last flight are in its buffers, not in tin) */
    uint8_t buf[16384];
    for (;;) {
        ssize_t r = gnutls_record_recv(c->tls, buf, sizeof buf);
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) break;
        if (r == 0) return conn_close(c); /* close_notify */
        if (r < 0) {
            if (gnutls_error_is_fatal((int)r)) return conn_close(c);
            continue; /* a warning alert, a renegotiation asked for (ignored) */
        }
        conn_recv(c, buf, (size_t)r);
        if (c->closing) return;
    }
    if (tls_write(c)) conn_close(c); /* a key update's answer */
}

/* What nghttp2 has to send goes to a memory connection's output. Returns -1 when the session failed. */
static int conn_send_mem(srv_grpc_conn *c) {
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0) return -1;
        if (n == 0) return 0;
        c->out(c->out_ud, data, (size_t)n);
    }
}

/* Hands what nghttp2 has to send to the socket (up to WRITE_MAX in flight); closes the connection
 * when neither side has more to say, or, draining, once its last call is answered and written. A
 * refused or reserve connection that answered says GOAWAY first (after the whole read was taken, so
 * that every call that arrived with it is answered, not retried). */
static void conn_flush(srv_grpc_conn *c) {
    if (c->closing || c->in_recv) return; /* on_read flushes after the receive */
    if (c->tls && !c->tls_up) {
        /* nghttp2 waits for the handshake; a refused one closes once its alert is out, and a drain closes one
         * still shaking hands (it carries no call) */
        if (c->tls_failed ? !c->writing : c->g->draining) conn_close(c);
        return;
    }
    if ((c->refuse[0] || c->reserve) && c->answered_any && !c->goaway) {
        c->goaway = true;
        uint32_t code = c->refuse[0] ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_NO_ERROR;
        if (nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->h2), code,
                                  (const uint8_t *)c->refuse, strlen(c->refuse)))
            return conn_close(c);
    }
    if (c->out) {
        if (conn_send_mem(c)) return conn_close(c);
    } else {
        /* everything nghttp2 has (frame by frame) gathered into one write: one syscall, one packet for a
         * small answer's HEADERS, DATA and trailers */
        write_req *w = NULL;
        size_t cap = 0;
        while (c->writing + (w ? w->len : 0) < WRITE_MAX) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(c->h2, &data);
            if (n < 0) {
                free(w);
                return conn_close(c);
            }
            if (n == 0) break;
            size_t have = w ? w->len : 0;
            if (have + (size_t)n > cap) {
                size_t nc = cap ? cap : 4096;
                while (nc < have + (size_t)n) nc *= 2;
                write_req *nw = realloc(w, sizeof *nw + nc);
                if (!nw) {
                    free(w);
                    return conn_close(c);
                }
                if (!w) nw->len = 0;
                w = nw, cap = nc;
            }
            memcpy(w->data + w->len, data, (size_t)n);
            w->len += (size_t)n;
        }
        if (w && c->tls) { /* the plaintext into records (tls_push), written as one */
            for (size_t off = 0; off < w->len;) {
                ssize_t r = gnutls_record_send(c->tls, w->data + off, w->len - off);
                if (r < 0) {
                    free(w);
                    return conn_close(c);
                }
                off += (size_t)r;
            }
            free(w);
            w = NULL;
            if (tls_write(c)) return conn_close(c);
        }
        if (w) {
            w->c = c;
            uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
            if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
                free(w);
                return conn_close(c);
            }
            c->writing += w->len;
        }
    }
    if (c->writing) return;
    bool want_write = nghttp2_session_want_write(c->h2);
    bool idle = !nghttp2_session_want_read(c->h2) && !want_write;
    if (idle || (c->g->draining && c->n_streams == 0)) return conn_close(c);
    /* with no call open and every byte written, it may give way to a new connection (conn.c) */
    if (!c->n_streams && !want_write) conn_mark_idle(c, true);
}

/* Takes n bytes the client sent; then sends what they called for. */
static void conn_recv(srv_grpc_conn *c, const uint8_t *p, size_t n) {
    c->last_read = srv__now();
    c->in_recv = true;
    ssize_t rc = n ? nghttp2_session_mem_recv(c->h2, p, n) : 0;
    c->in_recv = false;
    if (rc < 0) return conn_close(c);
    conn_flush(c);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
    buf->base = malloc(READ_BUF);
    buf->len = buf->base ? READ_BUF : 0;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
    srv_grpc_conn *c = st->data;
    if (n < 0 || c->closing) {
        free(buf->base);
        if (n < 0) conn_close(c);
        return;
    }
    if (c->tls) tls_recv(c, (const uint8_t *)buf->base, (size_t)n);
    else conn_recv(c, (const uint8_t *)buf->base, (size_t)n);
    free(buf->base);
}

/* The connection's nghttp2 session, with its SETTINGS and the connection's window queued. Returns 0 or -1. */
static int conn_session(srv_grpc_conn *c) {
    const srv_config *cfg = &c->g->s->cfg;
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_option *opt = NULL;
    int rc = -1;
    if (nghttp2_session_callbacks_new(&cb) || nghttp2_option_new(&opt)) goto done;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    /* windows are given back by hand: the connection's as DATA arrives, a stream's only as much as
     * its message needs (message_begin) */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    if (nghttp2_session_server_new2(&c->h2, cb, c, opt)) goto done;
    nghttp2_settings_entry set[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, STREAMS_MAX},
                                    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, HEADER_LIST_MAX},
                                    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW}};
    /* the connection's window: what its calls may hold (at least HTTP/2's initial 64 KiB), so a
     * message as large as the budget arrives in one window; kept and dropped bytes are consumed at
     * once, so it is never what bounds memory */
    size_t win = cfg->grpc_buffer_bytes;
    if (win < STREAM_WINDOW) win = STREAM_WINDOW;
    if (win > NGHTTP2_MAX_WINDOW_SIZE) win = NGHTTP2_MAX_WINDOW_SIZE;
    if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, set, sizeof set / sizeof set[0]) ||
        nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, (int32_t)win))
        goto done;
    rc = 0;
done:
    nghttp2_option_del(opt);
    if (cb) nghttp2_session_callbacks_del(cb);
    if (rc && c->h2) {
        nghttp2_session_del(c->h2);
        c->h2 = NULL;
    }
    return rc;
}

static void conn_link(srv_grpc *g, srv_grpc_conn *c) {
    c->g = g;
    if ((c->next = g->conns)) c->next->prev = c;
    g->conns = c;
    g->n_conns++;
    if (c->refuse[0]) g->n_refusing++;
    c->last_read = c->t_open = srv__now();
}

static void conn_refused(uv_handle_t *h) { free(h); }

/* Why a connection conn.c would not count is refused, for the client to read in its calls' status. */
static void refusal(const srv_config *cfg, srv_conn_verdict why, char *m, size_t n) {
    if (why == SRV_CONN_OVER_PER_IP)
        snprintf(m, n, "too many connections from this address (--max-connections-per-ip %d): close some, or retry later",
                 cfg->max_connections_per_ip);
    else
        snprintf(m, n, "the server is at its connection limit (--max-connections %d and --health-reserve %d in use): retry later",
                 cfg->max_connections, cfg->health_reserve);
}

static void on_connection(uv_stream_t *ls, int status) {
    srv_grpc *g = ls->data;
    if (status < 0) return;
    srv_grpc_conn *c = calloc(1, sizeof *c);
    uv_tcp_t *t = c ? &c->tcp : malloc(sizeof *t);
    if (!t) return;
    uv_tcp_init(&g->s->loop, t);
    bool refuse = uv_accept(ls, (uv_stream_t *)t) || !c || g->draining;
    if (!refuse && g->s->conns) {
        /* counted with HTTP's connections, by the peer's address */
        struct sockaddr_storage peer;
        int plen = sizeof peer;
        uv_os_fd_t fd;
        bool known = !uv_tcp_getpeername(t, (struct sockaddr *)&peer, &plen);
        srv_conn_verdict why = SRV_CONN_OK;
        if (uv_fileno((uv_handle_t *)t, &fd)) refuse = true;
        else if ((c->sc = srv__conn_accept(g->s->conns, fd, known ? (struct sockaddr *)&peer : NULL, SRV_CONN_GRPC, &why)))
            c->reserve = srv__conn_reserve(c->sc), c->idle = true;
        else if (why == SRV_CONN_OK || g->n_refusing >= REFUSING_MAX) refuse = true; /* out of memory, or too many refusing */
        else refusal(&g->s->cfg, why, c->refuse, sizeof c->refuse);
    }
    if (refuse) {
        t->data = c ? (void *)c : (void *)t;
        uv_close((uv_handle_t *)t, c ? conn_closed : conn_refused);
        return;
    }
    c->tcp.data = c;
    conn_link(g, c);
    if (conn_session(c) || (g->s->tls && srv__grpc_tls_begin(c))) return conn_close(c);
    uv_tcp_nodelay(t, 1);
    uv_read_start((uv_stream_t *)t, on_alloc, on_read);
    conn_flush(c);
}

/* Every SWEEP_MS: a request still arriving after --header-timeout-ms that averages under --min-body-rate
 * is answered DEADLINE_EXCEEDED (HTTP's rules for slow clients); a connection with no call that read
 * nothing for IDLE_TIMEOUT_S is closed (a reserve one after --header-timeout-ms, as HTTP's waiting for
 * headers), and a refused one after REFUSE_LINGER_S whatever it does. */
static void on_sweep(uv_timer_t *t) {
    srv_grpc *g = t->data;
    const srv_config *cfg = &g->s->cfg;
    double now = srv__now(), wait = cfg->header_timeout_ms / 1e3;
    for (srv_grpc_call *c = g->calls; c; c = c->next) {
        double age = now - c->t0;
        if (c->answered || c->active || !c->conn || age <= wait) continue;
        if (!c->len || (cfg->min_body_rate && (double)c->len / age < (double)cfg->min_body_rate))
            srv__grpc_answer(c, PROTO_GRPC_DEADLINE_EXCEEDED,
                             "the request did not arrive in time (--header-timeout-ms, then --min-body-rate bytes/s)", NULL, 0);
    }
    for (srv_grpc_conn *c = g->conns, *next; c; c = next) {
        next = c->next;
        double idle_max = c->reserve ? wait : IDLE_TIMEOUT_S;
        if (c->refuse[0] ? now - c->t_open > REFUSE_LINGER_S : !c->n_streams && !c->writing && now - c->last_read > idle_max)
            conn_close(c);
        else if (c->tls && !c->tls_up && now - c->t_open > wait) /* a TLS handshake is bounded as HTTP's headers */
            conn_close(c);
    }
}

srv_grpc *srv__grpc_new(srv_server *s, srv_grpc_hooks hooks) {
    srv_grpc *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->s = s;
    g->hooks = hooks;
    return g;
}

int srv__grpc_start(srv_server *s, srv_grpc_hooks hooks, srv_grpc **out, eng_err *err) {
    srv_grpc *g = *out = srv__grpc_new(s, hooks);
    if (!g) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    struct sockaddr_in addr;
    if (uv_ip4_addr(s->cfg.host, s->cfg.grpc_port, &addr))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "host: '%s' is not an IPv4 address", s->cfg.host);
    uv_tcp_init(&s->loop, &g->listener);
    g->listener.data = g;
    g->listening = true;
    int rc = uv_tcp_bind(&g->listener, (const struct sockaddr *)&addr, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&g->listener, LISTEN_BACKLOG, on_connection);
    if (rc) return eng_err_set(err, ENG_UNAVAILABLE, "cannot listen for gRPC on %s:%d (%s)", s->cfg.host, s->cfg.grpc_port, uv_strerror(rc));
    uv_timer_init(&s->loop, &g->sweep);
    g->sweep.data = g;
    uv_timer_start(&g->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
    fprintf(stderr, "adapterd: gRPC (KServe v2 GRPCInferenceService) on %s:%d\n", s->cfg.host, s->cfg.grpc_port);
    return 0;
}

void srv__grpc_drain(srv_grpc *g) {
    if (!g || g->draining) return;
    g->draining = true;
    if (g->listening) uv_close((uv_handle_t *)&g->listener, NULL), g->listening = false;
    for (srv_grpc_conn *c = g->conns, *next; c; c = next) {
        next = c->next;
        c->drain_counted = true;
        atomic_fetch_add(&g->s->active, 1);
        nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->h2), NGHTTP2_NO_ERROR, NULL, 0);
        conn_flush(c);
    }
}

void srv__grpc_free(srv_grpc *g) {
    if (!g) return;
    /* the loop closed every handle (without our close callbacks): free what they belonged to */
    while (g->calls) {
        srv_grpc_call *c = g->calls;
        g->calls = c->next;
        c->front.admitted = false; /* the scheduler is gone: no place to give back */
        srv__front_clear(&c->front);
        free(c->msg), free(c->out), free(c->pend_out);
        free(c);
    }
    while (g->conns) {
        srv_grpc_conn *c = g->conns;
        g->conns = c->next;
        nghttp2_session_del(c->h2);
        srv__grpc_tls_end(c);
        free(c);
    }
    free(g);
}

/* ---- without the network ---- */

srv_grpc_conn *srv__grpc_mem_open(srv_grpc *g, const char *refuse, bool reserve,
                                  void (*out)(void *ud, const uint8_t *p, size_t n), void *ud) {
    srv_grpc_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->out = out, c->out_ud = ud, c->reserve = reserve, c->idle = true;
    if (refuse) snprintf(c->refuse, sizeof c->refuse, "%s", refuse);
    conn_link(g, c);
    if (conn_session(c)) {
        srv__grpc_mem_close(c);
        return NULL;
    }
    conn_flush(c);
    return c;
}

int srv__grpc_mem_recv(srv_grpc_conn *c, const uint8_t *p, size_t n) {
    if (!c->closing) conn_recv(c, p, n);
    return c->closing ? -1 : 0;
}

size_t srv__grpc_conn_buffered(const srv_grpc_conn *c) { return c->buffered; }

void srv__grpc_mem_close(srv_grpc_conn *c) {
    if (!c) return;
    conn_close(c);
    free(c);
}
