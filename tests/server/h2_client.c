/* h2_client.c - see h2_client.h. The socket is non-blocking and every exchange goes through one
 * pump that reads whenever it waits to write, so a test that sends megabytes never deadlocks with a
 * server that answers meanwhile. What nghttp2 sends and the raw DATA frames share one output queue
 * of whole frames, so raw frames never split one of nghttp2's. */
#define _GNU_SOURCE
#include "h2_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Largest DATA frame payload a peer accepts without a SETTINGS of its own. */
#define FRAME_MAX 16384
/* Output queued before the pump stops taking frames from nghttp2. */
#define OUT_HIGH (1u << 20)

struct h2c {
    int fd;
    nghttp2_session *h2;
    h2c_stream st[H2C_STREAMS_MAX];
    int n;
    uint8_t *out;                /* frames waiting for the socket */
    size_t out_len, out_cap;
    bool eof, goaway;
    uint32_t goaway_code;
    char goaway_debug[256];
    size_t sent;
    char auth[256];              /* "authorization" metadata of the calls to come; "" none */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int out_append(h2c *c, const uint8_t *p, size_t n) {
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 65536;
        while (cap < c->out_len + n) cap *= 2;
        uint8_t *o = realloc(c->out, cap);
        if (!o) return -1;
        c->out = o, c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

/* Takes what nghttp2 has to send into the output queue. */
static int fill(h2c *c) {
    while (!c->eof && c->out_len < OUT_HIGH) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(c->h2, &d);
        if (n < 0) return -1;
        if (n == 0) break;
        if (out_append(c, d, (size_t)n)) return -1;
    }
    return 0;
}

/* One wait of at most ms: reads what arrived, writes what the socket takes. */
static void pump(h2c *c, int ms) {
    if (c->eof) return;
    if (fill(c)) {
        c->eof = true;
        return;
    }
    struct pollfd p = {.fd = c->fd, .events = POLLIN | (c->out_len ? POLLOUT : 0)};
    if (poll(&p, 1, ms) <= 0) return;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        uint8_t buf[65536];
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r > 0) {
            if (nghttp2_session_mem_recv(c->h2, buf, (size_t)r) < 0) c->eof = true;
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            c->eof = true;
        }
    }
    if (!c->eof && c->out_len && (p.revents & POLLOUT)) {
        ssize_t w = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
        if (w > 0) {
            memmove(c->out, c->out + w, c->out_len - (size_t)w);
            c->out_len -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            c->eof = true;
        }
    }
}

static h2c_stream *stream_of(nghttp2_session *h2, int32_t id) { return nghttp2_session_get_stream_user_data(h2, id); }

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl,
                     uint8_t flags, void *ud) {
    (void)flags, (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS) return 0;
    h2c_stream *s = stream_of(h2, f->hd.stream_id);
    if (!s) return 0;
    char v[512];
    snprintf(v, sizeof v, "%.*s", (int)(vl < sizeof v ? vl : sizeof v - 1), (const char *)value);
    if (nl == 7 && !memcmp(name, ":status", 7)) s->http_status = atoi(v);
    else if (nl == 11 && !memcmp(name, "grpc-status", 11)) s->grpc_status = atoi(v);
    else if (nl == 12 && !memcmp(name, "grpc-message", 12)) snprintf(s->grpc_message, sizeof s->grpc_message, "%s", v);
    return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *d, size_t len, void *ud) {
    (void)flags, (void)d, (void)ud;
    h2c_stream *s = stream_of(h2, id);
    if (s) s->data_len += len;
    return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
    h2c *c = ud;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->goaway = true;
        c->goaway_code = f->goaway.error_code;
        size_t n = f->goaway.opaque_data_len < sizeof c->goaway_debug ? f->goaway.opaque_data_len : sizeof c->goaway_debug - 1;
        if (n) memcpy(c->goaway_debug, f->goaway.opaque_data, n);
        c->goaway_debug[n] = '\0';
    } else if (f->hd.type == NGHTTP2_RST_STREAM) {
        h2c_stream *s = stream_of(h2, f->hd.stream_id);
        if (s) s->reset = true;
    }
    return 0;
}

static int on_close(nghttp2_session *h2, int32_t id, uint32_t code, void *ud) {
    (void)ud;
    h2c_stream *s = stream_of(h2, id);
    if (s) s->closed = true, s->close_code = code;
    return 0;
}

static ssize_t read_body(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length, uint32_t *flags, nghttp2_data_source *src,
                         void *ud) {
    (void)h2, (void)id;
    h2c *c = ud;
    h2c_stream *s = src->ptr;
    size_t n = s->body_len - s->body_off;
    if (n > length) n = length;
    memcpy(buf, s->body + s->body_off, n);
    s->body_off += n;
    c->sent += n;
    if (s->body_off == s->body_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (!s->end) *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return (ssize_t)n;
}

h2c *h2c_connect(int port, const char *from) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = -1;
    for (double end = now_s() + 2.0;;) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return NULL;
        if (from) {
            struct sockaddr_in b = {.sin_family = AF_INET};
            inet_pton(AF_INET, from, &b.sin_addr);
            if (bind(fd, (struct sockaddr *)&b, sizeof b)) {
                close(fd);
                return NULL;
            }
        }
        if (!connect(fd, (struct sockaddr *)&a, sizeof a)) break;
        close(fd);
        if (errno != ECONNREFUSED || now_s() > end) return NULL;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    h2c *c = calloc(1, sizeof *c);
    nghttp2_session_callbacks *cb = NULL;
    if (!c || nghttp2_session_callbacks_new(&cb)) {
        free(c);
        close(fd);
        return NULL;
    }
    c->fd = fd;
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    int rc = nghttp2_session_client_new(&c->h2, cb, c);
    nghttp2_session_callbacks_del(cb);
    if (rc || nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, NULL, 0)) {
        h2c_free(c);
        return NULL;
    }
    return c;
}

void h2c_free(h2c *c) {
    if (!c) return;
    nghttp2_session_del(c->h2);
    close(c->fd);
    free(c->out);
    free(c);
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

void h2c_set_auth(h2c *c, const char *value) { snprintf(c->auth, sizeof c->auth, "%s", value ? value : ""); }

int h2c_call(h2c *c, const char *method, const uint8_t *body, size_t len, bool end) {
    if (c->n == H2C_STREAMS_MAX) return -1;
    h2c_stream *s = &c->st[c->n];
    memset(s, 0, sizeof *s);
    s->grpc_status = -1;
    s->body = body, s->body_len = len, s->end = end;
    char path[128];
    snprintf(path, sizeof path, "/inference.GRPCInferenceService/%s", method);
    nghttp2_nv hd[] = {NV(":method", "POST"), NV(":scheme", "http"), NV(":path", path), NV(":authority", "adapterd"),
                       NV("content-type", "application/grpc"), NV("te", "trailers"), NV("authorization", c->auth)};
    size_t nhd = sizeof hd / sizeof hd[0] - !c->auth[0];
    int32_t id;
    if (body) {
        nghttp2_data_provider dp = {.source.ptr = s, .read_callback = read_body};
        id = nghttp2_submit_request(c->h2, NULL, hd, nhd, &dp, s);
    } else {
        id = nghttp2_submit_headers(c->h2, end ? NGHTTP2_FLAG_END_STREAM : NGHTTP2_FLAG_NONE, -1, NULL, hd, nhd, s);
    }
    if (id < 0) return -1;
    s->id = id;
    return c->n++;
}

/* Sends every queued byte, reading meanwhile, for up to ms. */
static int drain_out(h2c *c, int ms) {
    double end = now_s() + ms / 1e3;
    while (!c->eof && now_s() < end) {
        if (fill(c)) return -1;
        if (!c->out_len) return 0;
        pump(c, 50);
    }
    return c->out_len ? -1 : 0;
}

int h2c_raw_data(h2c *c, int i, const uint8_t *p, size_t n, bool end) {
    h2c_stream *s = &c->st[i];
    if (drain_out(c, 10000)) return -1; /* nghttp2's frames first: the raw ones go after whole frames */
    do {
        size_t k = n < FRAME_MAX ? n : FRAME_MAX;
        uint8_t hd[9] = {(uint8_t)(k >> 16), (uint8_t)(k >> 8), (uint8_t)k, NGHTTP2_DATA,
                         (uint8_t)(end && k == n ? NGHTTP2_FLAG_END_STREAM : 0), (uint8_t)(s->id >> 24), (uint8_t)(s->id >> 16),
                         (uint8_t)(s->id >> 8), (uint8_t)s->id};
        if (out_append(c, hd, 9) || out_append(c, p, k)) return -1;
        c->sent += k;
        p += k, n -= k;
        if (c->out_len >= OUT_HIGH && drain_out(c, 10000)) return -1;
    } while (n);
    return drain_out(c, 10000);
}

bool h2c_all_closed(h2c *c, void *unused) {
    (void)unused;
    for (int i = 0; i < c->n; i++)
        if (!c->st[i].closed) return false;
    return true;
}

bool h2c_run(h2c *c, int ms, bool (*pred)(h2c *c, void *ud), void *ud) {
    if (!pred) pred = h2c_all_closed;
    double end = now_s() + ms / 1e3;
    while (!pred(c, ud)) {
        double left = end - now_s();
        if (c->eof || left <= 0) return pred(c, ud);
        pump(c, left < 0.05 ? (int)(left * 1e3) + 1 : 50);
    }
    return true;
}

h2c_stream *h2c_stream_at(h2c *c, int i) { return &c->st[i]; }

bool h2c_goaway(const h2c *c, uint32_t *code, const char **debug) {
    if (code) *code = c->goaway_code;
    if (debug) *debug = c->goaway_debug;
    return c->goaway;
}

bool h2c_eof(const h2c *c) { return c->eof; }

size_t h2c_sent(const h2c *c) { return c->sent; }

uint8_t *h2c_grpc_message(const uint8_t *msg, size_t n, size_t *out_len) {
    uint8_t *b = malloc(n + 5);
    if (!b) return NULL;
    b[0] = 0;
    b[1] = (uint8_t)(n >> 24), b[2] = (uint8_t)(n >> 16), b[3] = (uint8_t)(n >> 8), b[4] = (uint8_t)n;
    if (msg) memcpy(b + 5, msg, n);
    else memset(b + 5, 'x', n);
    *out_len = n + 5;
    return b;
}

/* ---- protobuf, by hand (wire format: tag = field << 3 | type; 2 = length-delimited) ---- */

static size_t varint(uint8_t *p, size_t v) {
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* field (length-delimited) holding n bytes of d; returns the bytes written at p */
static size_t field(uint8_t *p, unsigned num, const void *d, size_t n) {
    size_t o = varint(p, num << 3 | 2);
    o += varint(p + o, n);
    memcpy(p + o, d, n);
    return o + n;
}

uint8_t *h2c_infer_request(const char *model, const char *text, size_t min_len, size_t *len) {
    size_t tl = strlen(text), ml = strlen(model);
    uint8_t contents[64 + 4096], tensor[256 + 4096];
    if (tl > 4096) return NULL;
    size_t cn = field(contents, 8, text, tl); /* InferTensorContents.bytes_contents */
    size_t tn = field(tensor, 1, "text", 4);  /* InferInputTensor.name, datatype, shape [1], contents */
    tn += field(tensor + tn, 2, "BYTES", 5);
    tn += field(tensor + tn, 3, "\x01", 1);
    tn += field(tensor + tn, 5, contents, cn);
    size_t cap = ml + tn + min_len + 64;
    uint8_t *b = malloc(cap);
    if (!b) return NULL;
    size_t o = field(b, 1, model, ml); /* ModelInferRequest.model_name, inputs */
    o += field(b + o, 5, tensor, tn);
    if (o + 16 < min_len) { /* field 15, unknown to ModelInferRequest: skipped by decoders */
        size_t pad = min_len - o - 16;
        o += varint(b + o, 15 << 3 | 2);
        o += varint(b + o, pad);
        memset(b + o, 'p', pad);
        o += pad;
    }
    *len = o;
    return b;
}

int h2c_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t n = sizeof a;
    if (fd < 0) return -1;
    int ok = !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &n);
    close(fd);
    return ok ? ntohs(a.sin_port) : -1;
}
