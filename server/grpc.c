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
 * Bounds: connections (--max-connections, counted apart from HTTP's), streams per connection
 * (SETTINGS_MAX_CONCURRENT_STREAMS), one request message per call at most --max-body-bytes (the
 * rest is dropped and the call answers RESOURCE_EXHAUSTED), bytes handed to the socket and not yet
 * written (reading from nghttp2 pauses beyond WRITE_MAX; HTTP/2 flow control holds the rest).
 * SIGTERM sends GOAWAY: calls under way finish, a connection closes once its last answer is out,
 * and each open connection counts as in flight for the server's drain until then. */
#define _GNU_SOURCE
#include "grpc.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"

/* Concurrent calls per connection (SETTINGS_MAX_CONCURRENT_STREAMS). */
#define STREAMS_MAX 100
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

struct srv_grpc_conn {
    uv_tcp_t tcp;
    srv_grpc *g;
    nghttp2_session *h2;
    srv_grpc_conn *prev, *next;
    int n_streams;
    size_t writing;              /* bytes in uv_write requests not completed */
    bool closing, drain_counted;
    bool in_recv;                /* inside nghttp2_session_mem_recv: its callbacks may not send or close */
    double last_read;            /* srv__now() of the last bytes read */
};

struct srv_grpc {
    srv_server *s;
    uv_tcp_t listener;
    bool listening, draining;
    srv_grpc_conn *conns;
    int n_conns;
    srv_grpc_call *calls;
    srv_grpc_hooks hooks;
    uv_timer_t sweep;
};

typedef struct {
    uv_write_t req;
    srv_grpc_conn *c;
    size_t len;
    char data[];
} write_req;

static void conn_flush(srv_grpc_conn *c);
static void conn_close(srv_grpc_conn *c);

srv_server *srv__grpc_server(const srv_grpc *g) { return g->s; }

/* ---- calls ---- */

static void call_closed(uv_handle_t *h) { free(h->data); }

void srv__grpc_call_release(srv_grpc_call *c) {
    srv_grpc *g = c->g;
    if (c->prev) c->prev->next = c->next;
    else g->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->active) atomic_fetch_sub(&g->s->active, 1);
    srv__front_clear(&c->front); /* its admission, tasks, job and decoded request */
    free(c->msg), free(c->out), free(c->pend_out);
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
    return c;
}

/* The call leaves its stream (closed, or its connection went away). */
static void call_detach(srv_grpc_call *c) {
    srv_grpc_conn *conn = c->conn;
    if (!conn) return;
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
    srv__metrics_grpc(c->g->s->metrics, (int)c->method, status, srv__now() - c->t0);
    if (c->active) {
        c->active = false;
        atomic_fetch_sub(&c->g->s->active, 1);
    }
    srv_grpc_conn *conn = c->conn;
    if (!conn || conn->closing) {
        free(out);
        return;
    }
    c->status = status;
    snprintf(c->message, sizeof c->message, "%s", message ? message : "");
    int rc;
    if (out && status == PROTO_GRPC_OK) {
        c->out = out, c->out_len = len, c->out_off = 0;
        nghttp2_nv hd[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
        nghttp2_data_provider dp = {.source.ptr = c, .read_callback = read_answer};
        rc = nghttp2_submit_response(conn->h2, c->stream_id, hd, 2, &dp);
    } else {
        free(out);
        char st[16], esc[3 * sizeof c->message];
        snprintf(st, sizeof st, "%d", status);
        proto_grpc_message_escape(c->message, esc, sizeof esc);
        /* trailers-only: one HEADERS that ends the stream */
        nghttp2_nv hd[] = {NV(":status", "200"), NV("content-type", "application/grpc"), NV("grpc-status", st),
                           NV("grpc-message", esc)};
        rc = nghttp2_submit_response(conn->h2, c->stream_id, hd, esc[0] ? 4 : 3, NULL);
    }
    if (rc) nghttp2_submit_rst_stream(conn->h2, NGHTTP2_FLAG_NONE, c->stream_id, NGHTTP2_INTERNAL_ERROR);
    conn_flush(conn);
}

/* A request that is not gRPC at all (content-type): HTTP's 415, as gRPC over HTTP/2 says. */
static void answer_http(srv_grpc_call *c, const char *status) {
    c->answered = true;
    nghttp2_nv hd[] = {NV(":status", status)};
    nghttp2_submit_response(c->conn->h2, c->stream_id, hd, 1, NULL);
    conn_flush(c->conn);
}

static void on_deadline(uv_timer_t *t) {
    srv_grpc_call *c = t->data;
    if (!c->answered) c->g->hooks.deadline(c);
}

/* The request's last frame arrived: check the framing, then dispatch. */
static void request_complete(srv_grpc_call *c) {
    srv_server *s = c->g->s;
    char m[160];
    bool compressed = false;
    uint32_t n = 0;
    if (c->bad_ctype) return answer_http(c, "415");
    if (c->bad_method) return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED, "gRPC calls are POST requests", NULL, 0);
    if (c->method == PROTO_GRPC_UNKNOWN_METHOD)
        return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED,
                                "unknown method; inference.GRPCInferenceService serves ServerLive, ServerReady, ModelReady, "
                                "ServerMetadata, ModelMetadata, ModelInfer, ModelStatistics, RepositoryIndex",
                                NULL, 0);
    if (c->bad_timeout) return srv__grpc_answer(c, PROTO_GRPC_INVALID_ARGUMENT, "grpc-timeout is malformed", NULL, 0);
    if (c->too_large) {
        snprintf(m, sizeof m, "the request message is over the limit of %zu bytes (--max-body-bytes)", s->cfg.max_body_bytes);
        return srv__grpc_answer(c, PROTO_GRPC_RESOURCE_EXHAUSTED, m, NULL, 0);
    }
    if (c->len < PROTO_GRPC_PREFIX || proto_grpc_prefix_read(c->msg, &compressed, &n) || n != c->len - PROTO_GRPC_PREFIX)
        return srv__grpc_answer(c, PROTO_GRPC_INVALID_ARGUMENT,
                                "a unary call takes exactly one message (a 5-byte prefix: flag 0 or 1, big-endian length; then "
                                "the message)",
                                NULL, 0);
    if (compressed)
        return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED,
                                c->bad_encoding ? "grpc-encoding: only identity is supported"
                                                : "a compressed message without grpc-encoding (only identity is supported)",
                                NULL, 0);
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
    } else if (header_is(name, namelen, "grpc-timeout")) {
        double sec;
        if (proto_grpc_timeout_parse((const char *)value, valuelen, &sec)) c->bad_timeout = true;
        else c->deadline = c->t0 + sec;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len, void *ud) {
    srv_grpc_call *c = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (!c || c->too_large) return 0;
    size_t limit = c->g->s->cfg.max_body_bytes + PROTO_GRPC_PREFIX;
    if (c->len + len > limit) { /* answered now (nghttp2 then resets the rest of the request), the data dropped */
        c->too_large = true;
        free(c->msg);
        c->msg = NULL, c->len = c->cap = 0;
        char m[160];
        snprintf(m, sizeof m, "the request message is over the limit of %zu bytes (--max-body-bytes)", c->g->s->cfg.max_body_bytes);
        srv__grpc_answer(c, PROTO_GRPC_RESOURCE_EXHAUSTED, m, NULL, 0);
        return 0;
    }
    if (c->len + len > c->cap) {
        size_t cap = c->cap ? c->cap : 1024;
        while (cap < c->len + len) cap *= 2;
        if (cap > limit) cap = limit;
        uint8_t *m = realloc(c->msg, cap);
        if (!m) return NGHTTP2_ERR_CALLBACK_FAILURE;
        c->msg = m, c->cap = cap;
    }
    memcpy(c->msg + c->len, data, len);
    c->len += len;
    return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
    srv_grpc_call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!c || c->answered) return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST && c->deadline > 0) {
        double left = c->deadline - srv__now();
        uv_timer_start(&c->timer, on_deadline, left > 0 ? (uint64_t)(left * 1e3) + 1 : 0, 0);
    }
    if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) request_complete(c);
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
    if (c->prev) c->prev->next = c->next;
    else g->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n_conns--;
    if (c->drain_counted) atomic_fetch_sub(&g->s->active, 1);
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

/* Hands what nghttp2 has to send to the socket (up to WRITE_MAX in flight); closes the connection
 * when neither side has more to say, or, draining, once its last call is answered and written. */
static void conn_flush(srv_grpc_conn *c) {
    if (c->closing || c->in_recv) return; /* on_read flushes after the receive */
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
    if (w) {
        w->c = c;
        uv_buf_t b = uv_buf_init(w->data, (unsigned)w->len);
        if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
            free(w);
            return conn_close(c);
        }
        c->writing += w->len;
    }
    if (c->writing) return;
    bool idle = !nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2);
    if (idle || (c->g->draining && c->n_streams == 0)) conn_close(c);
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
    c->last_read = srv__now();
    c->in_recv = true;
    ssize_t rc = n ? nghttp2_session_mem_recv(c->h2, (const uint8_t *)buf->base, (size_t)n) : 0;
    c->in_recv = false;
    free(buf->base);
    if (rc < 0) return conn_close(c);
    conn_flush(c);
}

static void conn_refused(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *ls, int status) {
    srv_grpc *g = ls->data;
    if (status < 0) return;
    srv_grpc_conn *c = calloc(1, sizeof *c);
    uv_tcp_t *t = c ? &c->tcp : malloc(sizeof *t);
    if (!t) return;
    uv_tcp_init(&g->s->loop, t);
    if (uv_accept(ls, (uv_stream_t *)t) || !c || g->draining || g->n_conns >= g->s->cfg.max_connections) {
        t->data = c ? (void *)c : (void *)t;
        uv_close((uv_handle_t *)t, c ? conn_closed : conn_refused);
        return;
    }
    c->g = g;
    c->tcp.data = c;
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb)) {
        uv_close((uv_handle_t *)t, conn_closed);
        return;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    int rc = nghttp2_session_server_new(&c->h2, cb, c);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry set[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, STREAMS_MAX},
                                    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, HEADER_LIST_MAX}};
    if (rc || nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, set, 2)) {
        nghttp2_session_del(c->h2);
        uv_close((uv_handle_t *)t, conn_closed);
        return;
    }
    uv_tcp_nodelay(t, 1);
    if ((c->next = g->conns)) c->next->prev = c;
    g->conns = c;
    g->n_conns++;
    c->last_read = srv__now();
    uv_read_start((uv_stream_t *)t, on_alloc, on_read);
    conn_flush(c);
}

/* Every SWEEP_MS: a request still arriving after --header-timeout-ms that averages under --min-body-rate
 * is answered DEADLINE_EXCEEDED (HTTP's rules for slow clients), and a connection with no call that read
 * nothing for IDLE_TIMEOUT_S is closed. */
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
        if (!c->n_streams && !c->writing && now - c->last_read > IDLE_TIMEOUT_S) conn_close(c);
    }
}

int srv__grpc_start(srv_server *s, srv_grpc_hooks hooks, srv_grpc **out, eng_err *err) {
    srv_grpc *g = calloc(1, sizeof *g);
    *out = g;
    if (!g) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    g->s = s;
    g->hooks = hooks;
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
        free(c);
    }
    free(g);
}
