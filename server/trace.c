/* trace.c - OpenTelemetry traces: W3C Trace Context in, spans out over OTLP/HTTP.
 *
 * Why this shape. A request's spans are known only at its end (the batch it rode in, its status), and
 * every step runs on a different thread (the edge's, libuv's pool for a load, an engine worker for the
 * pass and the encoder), each one at a time: so a request stamps its steps in its own state
 * (srv_trace_req, no lock) and, at its answer, encodes all its spans at once as OTLP protobuf (Span
 * messages, ~1 us) into one buffer handed to the exporter through a bounded lock-free queue (Vyukov's
 * MPMC ring of sequence-numbered cells: one compare-and-swap per push, no global lock on the request
 * path). One exporter thread takes batches off it every OTEL_BSP_SCHEDULE_DELAY, or sooner once
 * OTEL_BSP_MAX_EXPORT_BATCH_SIZE spans wait (a semaphore posted when the count crosses it), wraps them in
 * one ExportTraceServiceRequest with the resource and scope, and POSTs it. A collector that is slow,
 * gone or answering 429/502/503/504 is retried with exponential back-off within the export timeout while
 * the queue fills; beyond OTEL_BSP_MAX_QUEUE_SIZE spans a request's spans are dropped and counted, so
 * the request never waits and memory stays bounded by the queue (each request's buffer is bounded too).
 *
 * The engine pass that served many requests is one span of its own (srv__trace_batch, on the worker
 * after the pass), a root in a trace of its own, linked to each request it served; each request's engine
 * step links back to it, so a caller's trace shows the batch it rode in.
 *
 * The encoder is hand-written: the few messages of opentelemetry-proto's trace service (field numbers
 * below, from trace.proto, common.proto, resource.proto, trace_service.proto) need only varints,
 * fixed64 and length-delimited fields. The HTTP client is libcurl: https to a vendor's collector,
 * proxies (HTTPS_PROXY), keep-alive and timeouts come with it, which a small socket client would each
 * have had to grow; it runs on the exporter thread alone.
 *
 * Ids are not secrets: a per-thread xoshiro256** seeded from getrandom makes them (W3C asks for random
 * ids, not unpredictable ones). */
#define _GNU_SOURCE
#include "trace.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "job.h"
#include "route.h"

/* Bytes of one attribute value kept (a task name, a message); longer ones are cut. */
#define ATTR_VALUE_MAX 256
/* Task names put on a span; more are counted in adapterd.tasks_more. */
#define SPAN_TASKS_MAX 32
/* Requests a batch span links to; more are counted in adapterd.links_more (dropped_links_count). */
#define BATCH_LINKS_MAX 128
/* The longest back-off between two tries of one export, seconds. */
#define RETRY_MAX_S 5.0
/* How long srv__tracer_free may spend exporting what is left, seconds. */
#define FLUSH_MAX_S 2.0

/* ---- hex, traceparent, tracestate, samplers (pure) ---- */

void srv__trace_hex(const uint8_t *b, size_t n, char *out) {
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) out[2 * i] = d[b[i] >> 4], out[2 * i + 1] = d[b[i] & 15];
    out[2 * n] = '\0';
}

static int lhex(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* n bytes from 2n lowercase hex digits; -1 on any other character. */
static int unhex(const char *s, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int h = lhex(s[2 * i]), l = lhex(s[2 * i + 1]);
        if (h < 0 || l < 0) return -1;
        out[i] = (uint8_t)(h << 4 | l);
    }
    return 0;
}

static bool all_zero(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (b[i]) return false;
    return true;
}

int srv__trace_parse_traceparent(const char *s, size_t n, srv_trace_parent *out) {
    uint8_t ver;
    if (!s || n < SRV_TRACEPARENT_LEN || unhex(s, &ver, 1) || ver == 0xff) return -1;
    if (ver == 0 && n != SRV_TRACEPARENT_LEN) return -1;
    if (ver > 0 && n > SRV_TRACEPARENT_LEN && s[SRV_TRACEPARENT_LEN] != '-') return -1;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-') return -1;
    srv_trace_parent p;
    if (unhex(s + 3, p.trace_id, 16) || unhex(s + 36, p.span_id, 8) || unhex(s + 53, &p.flags, 1)) return -1;
    if (all_zero(p.trace_id, 16) || all_zero(p.span_id, 8)) return -1;
    p.flags &= 1; /* only the sampled bit is known (version 00) and so propagated */
    *out = p;
    return 0;
}

static bool key_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/'; }

/* A list member's key: simple-key (lcalpha then up to 255 key chars) or multi-tenant-key
 * (tenant-id "@" system-id: a 1..241 char tenant starting lcalpha or digit, a 1..14 char system starting lcalpha). */
static bool key_valid(const char *k, size_t n) {
    const char *at = memchr(k, '@', n);
    if (!at) {
        if (n < 1 || n > 256 || !(k[0] >= 'a' && k[0] <= 'z')) return false;
        for (size_t i = 1; i < n; i++)
            if (!key_char(k[i])) return false;
        return true;
    }
    size_t t = (size_t)(at - k), sy = n - t - 1;
    if (t < 1 || t > 241 || sy < 1 || sy > 14) return false;
    if (!((k[0] >= 'a' && k[0] <= 'z') || (k[0] >= '0' && k[0] <= '9')) || !(at[1] >= 'a' && at[1] <= 'z')) return false;
    for (size_t i = 1; i < t; i++)
        if (!key_char(k[i])) return false;
    for (size_t i = 2; i < sy + 1; i++)
        if (!key_char(at[i])) return false;
    return true;
}

/* value: 0..255 chars of 0x20-0x7e except ',' and '=', then one such char that is not a space. */
static bool value_valid(const char *v, size_t n) {
    if (n < 1 || n > 256 || v[n - 1] == ' ') return false;
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0x20 || v[i] > 0x7e || v[i] == ',' || v[i] == '=') return false;
    return true;
}

bool srv__trace_state_valid(const char *s, size_t n) {
    if (!s || n >= SRV_TRACE_STATE_MAX) return false;
    const char *keys[32];
    size_t klen[32];
    int members = 0;
    size_t i = 0;
    while (i <= n) {
        size_t e = i;
        while (e < n && s[e] != ',') e++;
        size_t a = i, b = e; /* the member between optional whitespace (OWS: spaces and tabs) */
        while (a < b && (s[a] == ' ' || s[a] == '\t')) a++;
        while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
        if (b > a) { /* empty members are allowed and ignored */
            const char *eq = memchr(s + a, '=', b - a);
            if (!eq || members == 32) return false;
            size_t kl = (size_t)(eq - (s + a));
            if (!key_valid(s + a, kl) || !value_valid(eq + 1, b - a - kl - 1)) return false;
            for (int m = 0; m < members; m++)
                if (klen[m] == kl && !memcmp(keys[m], s + a, kl)) return false; /* a key at most once */
            keys[members] = s + a, klen[members] = kl, members++;
        }
        i = e + 1;
    }
    return true;
}

int srv__trace_sampler_parse(const char *name) {
    static const char *const names[] = {"always_on", "always_off", "traceidratio", "parentbased_always_on",
                                        "parentbased_always_off", "parentbased_traceidratio"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

/* traceidratio: the id's last 7 bytes (56 random bits, as W3C Trace Context Level 2's random flag
 * promises) below ratio x 2^56, so every service sampling at a ratio agrees on a trace. */
static bool ratio_sample(double ratio, const uint8_t id[16]) {
    if (ratio >= 1) return true;
    if (!(ratio > 0)) return false;
    uint64_t v = 0;
    for (int i = 9; i < 16; i++) v = v << 8 | id[i];
    return (double)v < ratio * 72057594037927936.0;
}

bool srv__trace_sample(srv_sampler s, double ratio, const uint8_t trace_id[16], const srv_trace_parent *parent) {
    switch (s) {
    case SRV_SAMPLE_ALWAYS_ON: return true;
    case SRV_SAMPLE_ALWAYS_OFF: return false;
    case SRV_SAMPLE_RATIO: return ratio_sample(ratio, trace_id);
    case SRV_SAMPLE_PB_ALWAYS_ON: return parent ? (parent->flags & 1) : true;
    case SRV_SAMPLE_PB_ALWAYS_OFF: return parent ? (parent->flags & 1) : false;
    case SRV_SAMPLE_PB_RATIO: return parent ? (parent->flags & 1) : ratio_sample(ratio, trace_id);
    }
    return false;
}

/* ---- ids ---- */

static _Thread_local uint64_t rng[4];
static _Thread_local bool rng_seeded;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman and Vigna), seeded once per thread from getrandom. */
static uint64_t next_u64(void) {
    if (!rng_seeded) {
        if (getrandom(rng, sizeof rng, 0) != sizeof rng) { /* no entropy yet: time and the thread's address */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            rng[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull, rng[1] = (uint64_t)ts.tv_sec;
            rng[2] = (uint64_t)(uintptr_t)&rng, rng[3] = 0x2545f4914f6cdd1dull;
        }
        rng_seeded = true;
    }
    uint64_t r = rotl(rng[1] * 5, 7) * 9, t = rng[1] << 17;
    rng[2] ^= rng[0], rng[3] ^= rng[1], rng[1] ^= rng[2], rng[0] ^= rng[3];
    rng[2] ^= t, rng[3] = rotl(rng[3], 45);
    return r;
}

/* n random bytes, never all zero (an all-zero id is invalid). */
static void new_id(uint8_t *out, size_t n) {
    do {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t v = next_u64();
            for (size_t k = 0; k < 8 && i + k < n; k++) out[i + k] = (uint8_t)(v >> (8 * k));
        }
    } while (all_zero(out, n));
}

/* ---- protobuf writer ---- */

typedef struct {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} pb;

static bool pb_room(pb *b, size_t n) {
    if (b->oom) return false;
    if (b->len + n <= b->cap) return true;
    size_t nc = b->cap ? b->cap * 2 : 2048; /* a request's spans fit in one (~1 kB) */
    while (nc < b->len + n) nc *= 2;
    uint8_t *np = realloc(b->p, nc);
    if (!np) return b->oom = true, false;
    b->p = np, b->cap = nc;
    return true;
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

static void put_varint_at(uint8_t *p, uint64_t v) {
    while (v >= 0x80) *p++ = (uint8_t)(v | 0x80), v >>= 7;
    *p = (uint8_t)v;
}

static void pb_varint(pb *b, uint64_t v) {
    if (!pb_room(b, 10)) return;
    put_varint_at(b->p + b->len, v);
    b->len += varint_len(v);
}

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2 };

static void pb_tag(pb *b, unsigned field, unsigned wt) { pb_varint(b, (uint64_t)field << 3 | wt); }

static void pb_bytes(pb *b, unsigned field, const void *d, size_t n) {
    pb_tag(b, field, WT_LEN);
    pb_varint(b, n);
    if (!pb_room(b, n)) return;
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

/* Bytes of the well-formed UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (k == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f))) return 0; /* overlong, surrogates */
    if (k == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))) return 0;
    return k;
}

/* A string field: at most ATTR_VALUE_MAX bytes, cut at a character's start, and valid UTF-8 (a byte that is
 * not becomes '?'): a collector refuses a whole export over one ill-formed string (a path's %FF). */
static void pb_str(pb *b, unsigned field, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strnlen(s, ATTR_VALUE_MAX + 1), w = 0, i = 0;
    char out[ATTR_VALUE_MAX];
    while (i < n) {
        size_t k = utf8_len(u + i, n - i);
        if (w + (k ? k : 1) > sizeof out) break;
        if (k) memcpy(out + w, u + i, k), w += k, i += k;
        else out[w++] = '?', i++;
    }
    pb_bytes(b, field, out, w);
}

static void pb_fixed64(pb *b, unsigned field, uint64_t v) {
    pb_tag(b, field, WT_I64);
    if (!pb_room(b, 8)) return;
    for (int i = 0; i < 8; i++) b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

/* A nested message: open returns where its length goes, close writes it (moving the body when the
 * length needs more than the one byte kept). */
static size_t pb_open(pb *b, unsigned field) {
    pb_tag(b, field, WT_LEN);
    if (!pb_room(b, 1)) return 0;
    b->p[b->len++] = 0;
    return b->len;
}

static void pb_close(pb *b, size_t at) {
    if (b->oom) return;
    size_t n = b->len - at, extra = varint_len(n) - 1;
    if (extra) {
        if (!pb_room(b, extra)) return;
        memmove(b->p + at + extra, b->p + at, n);
        b->len += extra;
    }
    put_varint_at(b->p + at - 1, n);
}

/* KeyValue { key = 1; AnyValue value = 2 }, AnyValue { string_value = 1; bool_value = 2; int_value = 3;
 * double_value = 4; array_value = 5 }, ArrayValue { repeated AnyValue values = 1 }. */
static void attr_str(pb *b, unsigned field, const char *key, const char *v) {
    size_t kv = pb_open(b, field);
    pb_str(b, 1, key);
    size_t av = pb_open(b, 2);
    pb_str(b, 1, v ? v : "");
    pb_close(b, av);
    pb_close(b, kv);
}

static void attr_int(pb *b, unsigned field, const char *key, int64_t v) {
    size_t kv = pb_open(b, field);
    pb_str(b, 1, key);
    size_t av = pb_open(b, 2);
    pb_tag(b, 3, WT_VARINT);
    pb_varint(b, (uint64_t)v);
    pb_close(b, av);
    pb_close(b, kv);
}

static void attr_strs(pb *b, unsigned field, const char *key, const char *const *v, int n) {
    size_t kv = pb_open(b, field);
    pb_str(b, 1, key);
    size_t av = pb_open(b, 2);
    size_t arr = pb_open(b, 5);
    for (int i = 0; i < n; i++) {
        size_t e = pb_open(b, 1);
        pb_str(b, 1, v[i]);
        pb_close(b, e);
    }
    pb_close(b, arr);
    pb_close(b, av);
    pb_close(b, kv);
}

static void attr_ints(pb *b, unsigned field, const char *key, const int *v, int n) {
    size_t kv = pb_open(b, field);
    pb_str(b, 1, key);
    size_t av = pb_open(b, 2);
    size_t arr = pb_open(b, 5);
    for (int i = 0; i < n; i++) {
        size_t e = pb_open(b, 1);
        pb_tag(b, 3, WT_VARINT);
        pb_varint(b, (uint64_t)(int64_t)v[i]);
        pb_close(b, e);
    }
    pb_close(b, arr);
    pb_close(b, av);
    pb_close(b, kv);
}

/* ---- the queue ---- */

/* One request's (or batch's) spans, encoded as ScopeSpans.spans fields (tag 2), ready to concatenate. */
typedef struct {
    uint8_t *p;
    size_t len;
    int n_spans;
} blob;

typedef struct {
    atomic_size_t seq;
    blob b;
} cell;

struct srv_tracer {
    /* configuration */
    char endpoint[1024];
    struct curl_slist *headers;
    srv_sampler sampler;
    double ratio;
    double delay_s, timeout_s, request_s; /* an export with its retries; one POST of it */
    int max_queue, max_batch;
    pb resource;                 /* ResourceSpans.resource (field 1) and the scope, encoded once */
    pb scope;                    /* ScopeSpans.scope (field 1) */
    /* the queue: Vyukov's bounded MPMC ring, cells a power of two >= max_queue */
    cell *cells;
    size_t mask;
    _Alignas(64) atomic_size_t head; /* next cell to push into */
    _Alignas(64) atomic_size_t tail; /* next cell to pop (the exporter alone) */
    _Alignas(64) atomic_int queued_spans;
    sem_t wake;
    atomic_bool stop;
    atomic_bool flushing;        /* the exporter's last exports at stop: transfers are not aborted any more */
    pthread_t thread;
    bool started;
    /* counters */
    atomic_uint_fast64_t exported, dropped_queue, dropped_export, export_errors;
    double wall_minus_mono;      /* CLOCK_REALTIME - CLOCK_MONOTONIC at start, seconds: spans' times are wall clock */
};

static bool push(srv_tracer *t, blob b) {
    /* spans, not cells, are what the queue bounds (OTEL_BSP_MAX_QUEUE_SIZE) */
    int q = atomic_fetch_add_explicit(&t->queued_spans, b.n_spans, memory_order_relaxed);
    if (q + b.n_spans > t->max_queue) {
        atomic_fetch_sub_explicit(&t->queued_spans, b.n_spans, memory_order_relaxed);
        return false;
    }
    size_t pos = atomic_load_explicit(&t->head, memory_order_relaxed);
    for (;;) {
        cell *c = &t->cells[pos & t->mask];
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        intptr_t dif = (intptr_t)seq - (intptr_t)pos;
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&t->head, &pos, pos + 1, memory_order_relaxed, memory_order_relaxed)) {
                c->b = b;
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
                break;
            }
        } else if (dif < 0) { /* full (cannot happen while spans bound it: a blob has at least one span) */
            atomic_fetch_sub_explicit(&t->queued_spans, b.n_spans, memory_order_relaxed);
            return false;
        } else {
            pos = atomic_load_explicit(&t->head, memory_order_relaxed);
        }
    }
    /* wake the exporter once a full export batch waits (only the push that crosses the mark posts) */
    if (q < t->max_batch && q + b.n_spans >= t->max_batch) sem_post(&t->wake);
    return true;
}

static bool pop(srv_tracer *t, blob *out) {
    size_t pos = atomic_load_explicit(&t->tail, memory_order_relaxed);
    cell *c = &t->cells[pos & t->mask];
    size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    if ((intptr_t)seq - (intptr_t)(pos + 1) < 0) return false; /* empty */
    *out = c->b;
    atomic_store_explicit(&t->tail, pos + 1, memory_order_relaxed);
    atomic_store_explicit(&c->seq, pos + t->mask + 1, memory_order_release);
    return true;
}

static void enqueue(srv_tracer *t, pb *b, int n_spans) {
    if (b->oom || !push(t, (blob){.p = b->p, .len = b->len, .n_spans = n_spans})) {
        atomic_fetch_add_explicit(&t->dropped_queue, (uint64_t)n_spans, memory_order_relaxed);
        free(b->p);
    }
    b->p = NULL;
}

/* ---- the exporter ---- */

static size_t discard(char *p, size_t size, size_t n, void *ud) {
    (void)p, (void)ud;
    return size * n;
}

/* libcurl's progress callback: a transfer under way when the server stops (a collector that hangs for the
 * export timeout) is cut, so the stop never waits for it; the flush that follows has its own short deadline. */
static int on_progress(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln) {
    (void)dlt, (void)dln, (void)ult, (void)uln;
    srv_tracer *t = ud;
    return atomic_load(&t->stop) && !atomic_load(&t->flushing);
}

/* POSTs body once: 0 accepted, 1 worth retrying (429, 502, 503, 504, no connection, timeout), -1 refused;
 * *retry_after: the seconds a 429 or 503 asked to wait (Retry-After), else 0. */
static int post(srv_tracer *t, CURL *h, const uint8_t *body, size_t len, double timeout_s, double *retry_after) {
    *retry_after = 0;
    curl_easy_setopt(h, CURLOPT_URL, t->endpoint);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, (const char *)body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1e3 > 1 ? timeout_s * 1e3 : 1));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout_s * 1e3 > 1 ? timeout_s * 1e3 : 1));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, t);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "adapterd/" ADAPTERD_VERSION_STRING);
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) return 1;
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200 && code < 300) return 0;
    curl_off_t ra = 0;
    if ((code == 429 || code == 503) && !curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &ra) && ra > 0) *retry_after = (double)ra;
    return code == 429 || code == 502 || code == 503 || code == 504 ? 1 : -1;
}

static double mono(void) { return srv__now(); }

/* Exports up to max_batch queued spans as one request, retried with back-off until deadline_s (absolute,
 * srv__now()). Returns the spans taken off the queue (0: none waited). */
static int export_batch(srv_tracer *t, CURL *h, pb *req, double deadline_s) {
    blob bs[256];
    int nb = 0, spans = 0;
    size_t bytes = 0;
    while (nb < (int)(sizeof bs / sizeof bs[0]) && spans < t->max_batch && pop(t, &bs[nb])) {
        spans += bs[nb].n_spans, bytes += bs[nb].len;
        nb++;
    }
    if (!nb) return 0;
    atomic_fetch_sub_explicit(&t->queued_spans, spans, memory_order_relaxed);
    /* ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }
     * ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2 }
     * ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2 } */
    req->len = 0, req->oom = false;
    size_t rs = pb_open(req, 1);
    if (pb_room(req, t->resource.len)) memcpy(req->p + req->len, t->resource.p, t->resource.len), req->len += t->resource.len;
    size_t ss = pb_open(req, 2);
    if (pb_room(req, t->scope.len)) memcpy(req->p + req->len, t->scope.p, t->scope.len), req->len += t->scope.len;
    if (pb_room(req, bytes))
        for (int i = 0; i < nb; i++) memcpy(req->p + req->len, bs[i].p, bs[i].len), req->len += bs[i].len;
    pb_close(req, ss);
    pb_close(req, rs);
    for (int i = 0; i < nb; i++) free(bs[i].p);
    if (req->oom) {
        atomic_fetch_add_explicit(&t->dropped_export, (uint64_t)spans, memory_order_relaxed);
        return spans;
    }
    double backoff = 0.1;
    for (;;) {
        double left = deadline_s - mono();
        double ra = 0;
        int rc = left > 0 ? post(t, h, req->p, req->len, left < t->request_s ? left : t->request_s, &ra) : 1;
        if (!rc) {
            atomic_fetch_add_explicit(&t->exported, (uint64_t)spans, memory_order_relaxed);
            return spans;
        }
        atomic_fetch_add_explicit(&t->export_errors, 1, memory_order_relaxed);
        /* jittered exponential back-off (the OTLP spec's retry), within the export timeout */
        double wait = backoff * (0.5 + (double)(next_u64() >> 11) / 9007199254740992.0);
        if (ra > wait) wait = ra; /* the collector's Retry-After, within the export timeout (beyond it: dropped) */
        if (rc < 0 || mono() + wait >= deadline_s || atomic_load(&t->stop)) {
            atomic_fetch_add_explicit(&t->dropped_export, (uint64_t)spans, memory_order_relaxed);
            return spans;
        }
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : backoff * 2;
    }
}

static void *exporter_main(void *arg) {
    srv_tracer *t = arg;
    CURL *h = curl_easy_init();
    pb req = {0};
    while (!atomic_load(&t->stop)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + t->delay_s;
        ts.tv_sec = (time_t)at, ts.tv_nsec = (long)((at - (double)(time_t)at) * 1e9);
        while (sem_timedwait(&t->wake, &ts) && errno == EINTR) {
        }
        if (atomic_load(&t->stop)) break;
        /* everything that waits, a batch at a time; a batch that came meanwhile does not wait a delay */
        while (h && export_batch(t, h, &req, mono() + t->timeout_s) > 0 && !atomic_load(&t->stop)) {
        }
        if (!h) { /* no handle: what waits is dropped and counted, never kept */
            blob b;
            while (pop(t, &b)) {
                atomic_fetch_sub_explicit(&t->queued_spans, b.n_spans, memory_order_relaxed);
                atomic_fetch_add_explicit(&t->dropped_export, (uint64_t)b.n_spans, memory_order_relaxed);
                free(b.p);
            }
        }
    }
    /* the flush at stop: what is queued, one try per batch (stop is set: no retry), within FLUSH_MAX_S */
    double until = mono() + (t->timeout_s < FLUSH_MAX_S ? t->timeout_s : FLUSH_MAX_S);
    atomic_store(&t->flushing, true);
    while (h && mono() < until && export_batch(t, h, &req, until) > 0) {
    }
    free(req.p);
    if (h) curl_easy_cleanup(h);
    return NULL;
}

/* ---- start, stop ---- */

/* OTEL_EXPORTER_OTLP_HEADERS: "k1=v1,k2=v2", values percent-decoded (the W3C Baggage format). */
static int add_headers(srv_tracer *t, const char *spec, eng_err *err) {
    const char *p = spec;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char item[1024], line[1100];
        if (n >= sizeof item) return eng_err_set(err, ENG_INVALID_ARGUMENT, "trace-headers: a header longer than 1 KiB");
        memcpy(item, p, n), item[n] = '\0';
        char *eq = strchr(item, '=');
        if (n && !eq) return eng_err_set(err, ENG_INVALID_ARGUMENT, "trace-headers: '%.100s' is not key=value", item);
        if (eq) {
            *eq = '\0';
            char *k = item, *v = eq + 1;
            while (*k == ' ') k++;
            for (char *z = k + strlen(k); z > k && z[-1] == ' '; *--z = '\0') {
            }
            while (*v == ' ') v++;
            char *w = v; /* percent-decoding in place */
            for (char *r = v; *r; r++) {
                int hi, lo;
                if (*r == '%' && r[1] && r[2] && (hi = lhex((char)(r[1] | 0x20))) >= 0 && (lo = lhex((char)(r[2] | 0x20))) >= 0)
                    *w++ = (char)(hi << 4 | lo), r += 2;
                else *w++ = *r;
            }
            *w = '\0';
            for (char *z = v + strlen(v); z > v && z[-1] == ' '; *--z = '\0') {
            }
            if (!*k || strpbrk(k, ": \r\n") || strpbrk(v, "\r\n"))
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "trace-headers: bad header name or value '%.100s'", k);
            snprintf(line, sizeof line, "%s: %s", k, v);
            struct curl_slist *nl = curl_slist_append(t->headers, line);
            if (!nl) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            t->headers = nl;
        }
        p += n + (e ? 1 : 0);
    }
    return 0;
}

/* Resource { repeated KeyValue attributes = 1 }: service.name, the SDK's, then OTEL_RESOURCE_ATTRIBUTES'
 * (k=v,k2=v2, percent-decoded), whose service.name yields to the service name option. */
static void encode_resource(srv_tracer *t, const srv_config *c) {
    pb *b = &t->resource;
    size_t r = pb_open(b, 1);
    attr_str(b, 1, "service.name", c->trace_service_name[0] ? c->trace_service_name : "adapterd");
    attr_str(b, 1, "service.version", ADAPTERD_VERSION_STRING);
    attr_str(b, 1, "telemetry.sdk.name", "adapterd");
    attr_str(b, 1, "telemetry.sdk.language", "c");
    attr_str(b, 1, "telemetry.sdk.version", ADAPTERD_VERSION_STRING);
    const char *p = c->trace_resource_attributes;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char item[ATTR_VALUE_MAX * 2];
        if (n < sizeof item) {
            memcpy(item, p, n), item[n] = '\0';
            char *eq = strchr(item, '=');
            if (eq && eq > item) {
                *eq = '\0';
                char *w = eq + 1;
                for (char *rd = eq + 1; *rd; rd++) {
                    int hi, lo;
                    if (*rd == '%' && rd[1] && rd[2] && (hi = lhex((char)(rd[1] | 0x20))) >= 0 && (lo = lhex((char)(rd[2] | 0x20))) >= 0)
                        *w++ = (char)(hi << 4 | lo), rd += 2;
                    else *w++ = *rd;
                }
                *w = '\0';
                if (strcmp(item, "service.name") || !c->trace_service_name[0]) attr_str(b, 1, item, eq + 1);
            }
        }
        p += n + (e ? 1 : 0);
    }
    pb_close(b, r);
    /* InstrumentationScope { name = 1; version = 2 } */
    size_t s = pb_open(&t->scope, 1);
    pb_str(&t->scope, 1, "adapterd");
    pb_str(&t->scope, 2, ADAPTERD_VERSION_STRING);
    pb_close(&t->scope, s);
}

int srv__tracer_start(const srv_config *c, srv_tracer **out, eng_err *err) {
    *out = NULL;
    if (!c->trace_endpoint[0]) return 0;
    if (strncmp(c->trace_endpoint, "http://", 7) && strncmp(c->trace_endpoint, "https://", 8))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "trace-endpoint: '%.200s' is not an http:// or https:// URL",
                           c->trace_endpoint);
    int smp = srv__trace_sampler_parse(c->trace_sampler[0] ? c->trace_sampler : "parentbased_always_on");
    if (smp < 0)
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "trace-sampler: '%.60s' is not always_on, always_off, traceidratio, parentbased_always_on, "
                           "parentbased_always_off or parentbased_traceidratio",
                           c->trace_sampler);
    double ratio = 1;
    if (c->trace_sampler_arg[0] && (smp == SRV_SAMPLE_RATIO || smp == SRV_SAMPLE_PB_RATIO)) {
        char *end;
        ratio = strtod(c->trace_sampler_arg, &end);
        if (*end || !(ratio >= 0 && ratio <= 1))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "trace-sampler-arg: expected a ratio in 0..1, got '%.40s'",
                               c->trace_sampler_arg);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) return eng_err_set(err, ENG_INTERNAL, "cannot initialize libcurl");
    srv_tracer *t = calloc(1, sizeof *t);
    if (!t) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    snprintf(t->endpoint, sizeof t->endpoint, "%s", c->trace_endpoint);
    t->sampler = (srv_sampler)smp, t->ratio = ratio;
    t->delay_s = c->trace_schedule_delay_ms / 1e3, t->timeout_s = c->trace_export_timeout_ms / 1e3,
    t->request_s = c->trace_request_timeout_ms / 1e3;
    t->max_queue = c->trace_max_queue;
    t->max_batch = c->trace_max_export_batch < c->trace_max_queue ? c->trace_max_export_batch : c->trace_max_queue;
    size_t cells = 1;
    while (cells < (size_t)t->max_queue) cells *= 2;
    t->cells = calloc(cells, sizeof *t->cells);
    t->mask = cells - 1;
    struct curl_slist *ct = curl_slist_append(NULL, "Content-Type: application/x-protobuf");
    t->headers = ct;
    int rc = 0;
    if (!t->cells || !ct) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    else rc = add_headers(t, c->trace_headers, err);
    if (!rc) {
        for (size_t i = 0; i < cells; i++) atomic_init(&t->cells[i].seq, i);
        encode_resource(t, c);
        if (t->resource.oom || t->scope.oom) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    struct timespec w, m;
    clock_gettime(CLOCK_REALTIME, &w), clock_gettime(CLOCK_MONOTONIC, &m);
    t->wall_minus_mono = ((double)w.tv_sec - (double)m.tv_sec) + (w.tv_nsec - m.tv_nsec) * 1e-9;
    if (!rc && sem_init(&t->wake, 0, 0)) rc = eng_err_set(err, ENG_INTERNAL, "cannot create the exporter's semaphore");
    if (!rc) {
        if (pthread_create(&t->thread, NULL, exporter_main, t)) {
            sem_destroy(&t->wake);
            rc = eng_err_set(err, ENG_INTERNAL, "cannot start the trace exporter thread");
        } else {
            t->started = true;
        }
    }
    if (rc) {
        curl_slist_free_all(t->headers);
        free(t->cells), free(t->resource.p), free(t->scope.p), free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void srv__tracer_free(srv_tracer *t) {
    if (!t) return;
    if (t->started) {
        atomic_store(&t->stop, true);
        sem_post(&t->wake);
        pthread_join(t->thread, NULL);
        sem_destroy(&t->wake);
    }
    blob b;
    while (pop(t, &b)) free(b.p);
    curl_slist_free_all(t->headers);
    free(t->cells), free(t->resource.p), free(t->scope.p);
    free(t);
    curl_global_cleanup();
}

void srv__trace_counts(const srv_tracer *t, srv_trace_counts *out) {
    *out = (srv_trace_counts){0};
    if (!t) return;
    srv_tracer *m = (srv_tracer *)t; /* atomics are read, not written */
    out->exported = atomic_load_explicit(&m->exported, memory_order_relaxed);
    out->dropped_queue = atomic_load_explicit(&m->dropped_queue, memory_order_relaxed);
    out->dropped_export = atomic_load_explicit(&m->dropped_export, memory_order_relaxed);
    out->export_errors = atomic_load_explicit(&m->export_errors, memory_order_relaxed);
    int q = atomic_load_explicit(&m->queued_spans, memory_order_relaxed);
    out->queued = q > 0 ? (uint64_t)q : 0;
}

/* ---- a request's context ---- */

void srv__trace_begin(srv_tracer *t, srv_trace_req *r, const char *traceparent, const char *tracestate) {
    r->on = false, r->sampled = false, r->has_parent = false, r->state[0] = '\0';
    if (!t) return;
    r->on = true;
    srv_trace_parent p;
    if (traceparent && !srv__trace_parse_traceparent(traceparent, strlen(traceparent), &p)) {
        r->has_parent = true;
        memcpy(r->trace_id, p.trace_id, 16);
        memcpy(r->parent_id, p.span_id, 8);
        /* tracestate belongs to the caller's trace: kept only with a valid traceparent */
        size_t n = tracestate ? strlen(tracestate) : 0;
        if (n && srv__trace_state_valid(tracestate, n)) memcpy(r->state, tracestate, n + 1);
    } else {
        new_id(r->trace_id, 16);
    }
    new_id(r->span_id, 8);
    r->sampled = srv__trace_sample(t->sampler, t->ratio, r->trace_id, r->has_parent ? &p : NULL);
    memset(r->mark, 0, sizeof r->mark);
    char tid[33], sid[17];
    srv__trace_hex(r->trace_id, 16, tid);
    srv__trace_hex(r->span_id, 8, sid);
    snprintf(r->traceparent, sizeof r->traceparent, "00-%s-%s-%s", tid, sid, r->sampled ? "01" : "00");
}

/* ---- spans ---- */

enum { KIND_INTERNAL = 1, KIND_SERVER = 2 };
enum { STATUS_UNSET = 0, STATUS_OK = 1, STATUS_ERROR = 2 };

static uint64_t unix_ns(const srv_tracer *t, double mono_s) {
    double w = mono_s + t->wall_minus_mono;
    return w > 0 ? (uint64_t)(w * 1e9) : 0;
}

/* Span { trace_id = 1; span_id = 2; trace_state = 3; parent_span_id = 4; name = 5; kind = 6;
 * start_time_unix_nano = 7; end_time_unix_nano = 8; attributes = 9; events = 11; links = 13;
 * dropped_links_count = 14; status = 15 }: opened here, its attributes and links written by the caller,
 * closed by span_close with its status. */
static size_t span_open(pb *b, const srv_tracer *t, const uint8_t *trace_id, const uint8_t *span_id, const uint8_t *parent,
                        const char *state, const char *name, int kind, double t0, double t1) {
    size_t s = pb_open(b, 2); /* ScopeSpans.spans */
    pb_bytes(b, 1, trace_id, 16);
    pb_bytes(b, 2, span_id, 8);
    if (state && *state) pb_bytes(b, 3, state, strlen(state));
    if (parent) pb_bytes(b, 4, parent, 8);
    pb_str(b, 5, name);
    pb_tag(b, 6, WT_VARINT);
    pb_varint(b, (uint64_t)kind);
    pb_fixed64(b, 7, unix_ns(t, t0));
    pb_fixed64(b, 8, unix_ns(t, t1 > t0 ? t1 : t0));
    return s;
}

/* Status { message = 2; code = 3 } */
static void span_close(pb *b, size_t s, int code, const char *message) {
    if (code != STATUS_UNSET) {
        size_t st = pb_open(b, 15);
        if (message && *message && code == STATUS_ERROR) pb_str(b, 2, message);
        pb_tag(b, 3, WT_VARINT);
        pb_varint(b, (uint64_t)code);
        pb_close(b, st);
    }
    pb_close(b, s);
}

/* Link { trace_id = 1; span_id = 2; attributes = 4 } */
static void span_link(pb *b, const uint8_t *trace_id, const uint8_t *span_id, const char *kind) {
    size_t l = pb_open(b, 13);
    pb_bytes(b, 1, trace_id, 16);
    pb_bytes(b, 2, span_id, 8);
    attr_str(b, 4, "adapterd.link", kind);
    pb_close(b, l);
}

/* Event { time_unix_nano = 1; name = 2; attributes = 3 } */
static void span_event_int(pb *b, const srv_tracer *t, double at, const char *name, const char *key, int64_t v) {
    size_t e = pb_open(b, 11);
    pb_fixed64(b, 1, unix_ns(t, at));
    pb_str(b, 2, name);
    attr_int(b, 3, key, v);
    pb_close(b, e);
}

/* A child step of the server span, [t0, t1], when both are known. Returns 1 when written. */
static int step(pb *b, const srv_tracer *t, const srv_trace_req *r, const char *name, double t0, double t1) {
    if (!(t0 > 0) || !(t1 >= t0)) return 0;
    uint8_t id[8];
    new_id(id, 8);
    size_t s = span_open(b, t, r->trace_id, id, r->span_id, r->state, name, KIND_INTERNAL, t0, t1);
    span_close(b, s, STATUS_UNSET, NULL);
    return 1;
}

/* gRPC's server span is an error for these codes (the semantic conventions' list), HTTP's for 5xx. */
static bool grpc_server_error(int code) { return code == 2 || code == 4 || code == 12 || code == 13 || code == 14 || code == 15; }

void srv__trace_end(srv_tracer *t, const srv_trace_req *r, const srv_trace_end *e, const srv_job *j) {
    if (!t || !r->sampled) return;
    double now = srv__now();
    pb b = {0};
    int n = 0;
    char name[160];
    if (e->rpc_method) snprintf(name, sizeof name, "inference.GRPCInferenceService/%s", e->rpc_method);
    else if (e->route) snprintf(name, sizeof name, "%s %s", e->method ? e->method : "HTTP", e->route);
    else snprintf(name, sizeof name, "%s", e->method ? e->method : "HTTP"); /* no route: the method alone (semantic conventions) */
    size_t s = span_open(&b, t, r->trace_id, r->span_id, r->has_parent ? r->parent_id : NULL, r->state, name, KIND_SERVER,
                         e->t0, now);
    int code = STATUS_UNSET;
    char st[16];
    if (e->rpc_method) {
        attr_str(&b, 9, "rpc.system", "grpc");
        attr_str(&b, 9, "rpc.service", "inference.GRPCInferenceService");
        attr_str(&b, 9, "rpc.method", e->rpc_method);
        attr_int(&b, 9, "rpc.grpc.status_code", e->grpc_status);
        if (grpc_server_error(e->grpc_status)) {
            code = STATUS_ERROR;
            snprintf(st, sizeof st, "%d", e->grpc_status);
            attr_str(&b, 9, "error.type", st);
        }
    } else {
        attr_str(&b, 9, "http.request.method", e->method ? e->method : "_OTHER");
        attr_str(&b, 9, "url.path", e->path ? e->path : "");
        attr_str(&b, 9, "url.scheme", "http");
        if (e->route) attr_str(&b, 9, "http.route", e->route);
        attr_int(&b, 9, "http.response.status_code", e->http_status);
        if (e->http_status >= 500) {
            code = STATUS_ERROR;
            snprintf(st, sizeof st, "%u", e->http_status);
            attr_str(&b, 9, "error.type", st);
        }
    }
    if (e->request_id) attr_str(&b, 9, "adapterd.request_id", e->request_id);
    if (e->protocol) attr_str(&b, 9, "adapterd.protocol", e->protocol);
    if (e->message && *e->message) attr_str(&b, 9, "adapterd.error", e->message);
    const char *names[SPAN_TASKS_MAX];
    int nt = 0, more = 0;
    if (j && j->n_tasks) {
        for (int k = 0; k < j->n_tasks; k++)
            if (nt < SPAN_TASKS_MAX) names[nt++] = store_task_name(j->tasks[k]);
            else more++;
    } else if (e->tasks) {
        for (int k = 0; k < e->n_tasks; k++)
            if (nt < SPAN_TASKS_MAX) names[nt++] = e->tasks[k];
            else more++;
    }
    if (nt) attr_strs(&b, 9, "adapterd.tasks", names, nt);
    if (more) attr_int(&b, 9, "adapterd.tasks_more", more);
    if (j && j->embed && j->model_ref) attr_str(&b, 9, "adapterd.model", j->model_id ? j->model_id : store_model_name(j->model_ref));
    if (j) {
        attr_int(&b, 9, "adapterd.input_count", j->n_texts ? j->n_texts : j->n_inputs);
        attr_int(&b, 9, "adapterd.sequence_count", j->n_inputs);
        attr_int(&b, 9, "adapterd.token_count", j->tokens);
        if (j->batch_requests) attr_int(&b, 9, "adapterd.batch.requests", j->batch_requests);
        if (j->adaptive_raised) span_event_int(&b, t, j->t_start, "adapterd.skips_raised", "adapterd.layers", j->adaptive_raised);
    }
    span_close(&b, s, code, e->message);
    n++;
    /* the steps */
    const double *m = r->mark;
    n += step(&b, t, r, "admission", e->t0, m[SRV_TRACE_ADMITTED]);
    n += step(&b, t, r, "decode", m[SRV_TRACE_DECODE0], m[SRV_TRACE_DECODED]);
    n += step(&b, t, r, "load", m[SRV_TRACE_LOAD0], m[SRV_TRACE_LOADED]);
    n += step(&b, t, r, "tokenize", m[SRV_TRACE_PREP0], m[SRV_TRACE_PREPARED]);
    if (j && j->t_submit > 0) n += step(&b, t, r, "queue", j->t_submit, j->t_start > 0 ? j->t_start : now);
    if (j && j->t_start > 0 && j->trace.t_pass_end > 0) {
        uint8_t id[8];
        new_id(id, 8);
        size_t es = span_open(&b, t, r->trace_id, id, r->span_id, r->state, "engine", KIND_INTERNAL, j->t_start, j->trace.t_pass_end);
        attr_int(&b, 9, "adapterd.batch.requests", j->batch_requests);
        attr_int(&b, 9, "adapterd.batch.inputs", j->batch_inputs);
        attr_int(&b, 9, "adapterd.batch.tokens", j->batch_tokens);
        if (!all_zero(j->trace.batch_span_id, 8)) span_link(&b, j->trace.batch_trace_id, j->trace.batch_span_id, "batch");
        span_close(&b, es, STATUS_UNSET, NULL);
        n++;
        n += step(&b, t, r, "encode", j->trace.t_enc0, j->trace.t_enc1);
    }
    enqueue(t, &b, n);
}

void srv__trace_batch(srv_tracer *t, srv_job *jobs, int n_jobs, int n_in, int tokens, double t_start, double t_end,
                      const char *model, const char *precision, const char *kernel, bool ok) {
    if (!t) return;
    int sampled = 0;
    for (srv_job *j = jobs; j; j = j->next) {
        j->trace.t_pass_end = t_end;
        sampled += j->trace.sampled;
    }
    if (!sampled) return;
    uint8_t tid[16], sid[8];
    new_id(tid, 16);
    new_id(sid, 8);
    pb b = {0};
    size_t s = span_open(&b, t, tid, sid, NULL, NULL, "batch", KIND_INTERNAL, t_start, t_end);
    attr_int(&b, 9, "adapterd.batch.requests", n_jobs);
    attr_int(&b, 9, "adapterd.batch.inputs", n_in);
    attr_int(&b, 9, "adapterd.batch.tokens", tokens);
    attr_int(&b, 9, "adapterd.batch.sampled_requests", sampled);
    if (model) attr_str(&b, 9, "adapterd.model", model);
    if (precision) attr_str(&b, 9, "adapterd.precision", precision);
    if (kernel) attr_str(&b, 9, "adapterd.kernel", kernel);
    /* the distinct tasks of the pass and the skip each ran at (a task asked at two skips is two entries) */
    const char *names[SPAN_TASKS_MAX];
    int skips[SPAN_TASKS_MAX], nt = 0, more = 0;
    for (srv_job *j = jobs; j; j = j->next)
        for (int k = 0; k < j->n_tasks; k++) {
            const char *nm = store_task_name(j->tasks[k]);
            int sk = j->treqs ? j->treqs[k].skip : 0, seen = 0;
            for (int i = 0; i < nt && !seen; i++) seen = skips[i] == sk && !strcmp(names[i], nm);
            if (seen) continue;
            if (nt < SPAN_TASKS_MAX) names[nt] = nm, skips[nt++] = sk;
            else more++;
        }
    if (nt) {
        attr_strs(&b, 9, "adapterd.tasks", names, nt);
        attr_ints(&b, 9, "adapterd.skips", skips, nt);
    }
    if (more) attr_int(&b, 9, "adapterd.tasks_more", more);
    int links = 0;
    for (srv_job *j = jobs; j; j = j->next) {
        if (!j->trace.sampled) continue;
        memcpy(j->trace.batch_trace_id, tid, 16);
        memcpy(j->trace.batch_span_id, sid, 8);
        if (links++ < BATCH_LINKS_MAX) span_link(&b, j->trace.trace_id, j->trace.span_id, "request");
    }
    if (links > BATCH_LINKS_MAX) {
        pb_tag(&b, 14, WT_VARINT);
        pb_varint(&b, (uint64_t)(links - BATCH_LINKS_MAX));
    }
    span_close(&b, s, ok ? STATUS_UNSET : STATUS_ERROR, ok ? NULL : "the engine pass failed");
    enqueue(t, &b, 1);
}
