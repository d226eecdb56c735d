/* http.c - see http.h. Statuses come from the error table only (http_status.c); the Retry-After and
 * Allow headers follow from the status and the route, so no route sets them by hand. */
#define _GNU_SOURCE
#include "http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "clock.h"
#include "http_status.h"

/* Bytes of a formatted error message. */
#define ERROR_MSG_MAX 600

/* srv__send_body with one more header (name NULL: none). */
static enum MHD_Result send_body_with(srv_request *r, unsigned status, const char *ctype, char *body, size_t len,
                                      enum MHD_ResponseMemoryMode mode, const char *name, const char *value) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    if (name) MHD_add_response_header(resp, name, value);
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    if (r->trace.on) { /* the trace this request is part of, its server span as the parent (W3C Trace Context) */
        MHD_add_response_header(resp, "traceparent", r->trace.traceparent);
        if (r->trace.state[0]) MHD_add_response_header(resp, "tracestate", r->trace.state);
    }
    if (status == 429) {
        char ra[16]; /* a tenant's quota says how long; the queue, a second */
        snprintf(ra, sizeof ra, "%d", r->front.retry_after > 0 ? r->front.retry_after : 1);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (status == 503) MHD_add_response_header(resp, "Retry-After", "5");
    if (status == 405) MHD_add_response_header(resp, "Allow", r->route == SRV_ROUTE_PREDICT || r->route == SRV_ROUTE_V2_INFER ? "POST" : "GET");
    srv__front_release(&r->front); /* answered: it will not become a job */
    r->status = status;
    r->bytes_out = len;
    /* counted when the answer is queued, not when it is sent: a client that reads /metrics right
     * after its answer must see that answer counted (the completion callback may run later, on
     * another HTTP thread) */
    if (!r->counted) {
        srv__metrics_request_traced(r->srv->metrics, r->route, status, srv__now() - r->t0,
                                    r->trace.sampled ? r->trace.trace_id : NULL);
        r->counted = true;
    }
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result srv__send_body(srv_request *r, unsigned status, const char *ctype, char *body, size_t len,
                               enum MHD_ResponseMemoryMode mode) {
    return send_body_with(r, status, ctype, body, len, mode, NULL, NULL);
}

enum MHD_Result srv__send_v2_binary(srv_request *r, char *body, size_t len, size_t header_len) {
    char hl[24];
    snprintf(hl, sizeof hl, "%zu", header_len);
    return send_body_with(r, 200, "application/octet-stream", body, len, MHD_RESPMEM_MUST_FREE, "Inference-Header-Content-Length", hl);
}

enum MHD_Result srv__send_json(srv_request *r, unsigned status, char *json, size_t len) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"code\":\"out_of_memory\",\"message\":\"out of memory\"}}";
        return srv__send_body(r, srv__http_status(ENG_NO_MEMORY), "application/json", (char *)oom, sizeof oom - 1,
                              MHD_RESPMEM_PERSISTENT);
    }
    return srv__send_body(r, status, "application/json", json, len, MHD_RESPMEM_MUST_FREE);
}

enum MHD_Result srv__send_error(srv_request *r, eng_status code, const char *fmt, ...) {
    char msg[ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *body;
    size_t len = 0;
    unsigned status = srv__error_body_as(r->dialect, code, msg, &body, &len);
    return srv__send_json(r, status, body, len);
}

proto_dialect srv__route_dialect(srv_route route) {
    switch (route) {
    case SRV_ROUTE_TEI_EMBED:
    case SRV_ROUTE_TEI_EMBED_ALL:
    case SRV_ROUTE_TEI_TOKENIZE:
    case SRV_ROUTE_TEI_INFO:
    case SRV_ROUTE_TEI_PREDICT:
    case SRV_ROUTE_TEI_RERANK:
    case SRV_ROUTE_TEI_DECODE:
    case SRV_ROUTE_TEI_HEALTH: return PROTO_DIALECT_TEI;
    case SRV_ROUTE_OPENAI_EMBEDDINGS:
    case SRV_ROUTE_OPENAI_MODEL: return PROTO_DIALECT_OPENAI;
    case SRV_ROUTE_V2_SERVER:
    case SRV_ROUTE_V2_STATS:
    case SRV_ROUTE_V2_LIVE:
    case SRV_ROUTE_V2_READY:
    case SRV_ROUTE_V2_MODEL:
    case SRV_ROUTE_V2_MODEL_READY:
    case SRV_ROUTE_V2_INFER:
    case SRV_ROUTE_V2_REPO_INDEX:
    case SRV_ROUTE_V2_REPO_LOAD:
    case SRV_ROUTE_V2_REPO_UNLOAD: return PROTO_DIALECT_KSERVE;
    default: return PROTO_DIALECT_ADAPTERD;
    }
}

void srv__set_request_id(srv_request *r) {
    const char *given = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = 0;
    if (given) {
        /* echo printable ASCII only, and not too long: the id goes into logs and headers */
        for (; given[n] && n < SRV_REQUEST_ID_ECHO_MAX; n++)
            if (given[n] < 0x21 || given[n] > 0x7e) break;
        if (given[n] == '\0' && n > 0) {
            memcpy(r->id, given, n + 1);
            return;
        }
    }
    unsigned long long k = (unsigned long long)atomic_fetch_add(&r->srv->next_id, 1);
    snprintf(r->id, sizeof r->id, "%s-%llu", r->srv->id_prefix, k);
}

/* First allocation of a request body. */
#define BODY_INITIAL_CAP 4096

int srv__append_body(srv_request *r, const char *data, size_t n, size_t limit) {
    if (r->body_len + n > limit) {
        r->too_large = true;
        free(r->body);
        r->body = NULL;
        r->body_len = r->body_cap = 0;
        return 0;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t nc = r->body_cap ? r->body_cap : BODY_INITIAL_CAP;
        while (nc < r->body_len + n + 1) nc *= 2;
        char *nb = realloc(r->body, nc);
        if (!nb) return -1;
        r->body = nb, r->body_cap = nc;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return 0;
}

bool srv__media_type_is(const char *ct, const char *want) {
    if (!ct) return false;
    size_t n = strlen(want);
    if (strncasecmp(ct, want, n)) return false;
    const char *p = ct + n;
    while (*p == ' ' || *p == '\t') p++;
    return *p == '\0' || *p == ';';
}

bool srv__refuse_json_body(srv_request *r, enum MHD_Result *ans) {
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    if (!srv__media_type_is(ct, "application/json"))
        *ans = srv__send_error(r, ENG_MEDIA_TYPE, "Content-Type must be application/json (got %.100s)", ct ? ct : "none");
    else if (r->too_large)
        *ans = srv__send_error(r, ENG_TOO_LARGE, "request body over the limit of %zu bytes", r->srv->cfg.max_body_bytes);
    else
        return false;
    return true;
}

proto_limits srv__proto_limits(const srv_server *s) {
    return (proto_limits){.max_inputs = s->cfg.max_inputs, .max_tasks = s->cfg.max_tasks, .max_text_bytes = s->cfg.max_body_bytes};
}

void srv__scrub_path(char *msg, size_t cap, const char *path, const char *as) {
    size_t pn = strlen(path), an = strlen(as);
    if (!pn || !cap) return;
    char out[ERROR_MSG_MAX * 2];
    size_t o = 0, lim = cap < sizeof out ? cap : sizeof out;
    for (const char *p = msg; *p && o + 1 < lim;) {
        if (!strncmp(p, path, pn)) {
            for (size_t k = 0; k < an && o + 1 < lim; k++) out[o++] = as[k];
            p += pn;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    memcpy(msg, out, o + 1);
}

void srv__access_log(const srv_request *r, unsigned status, double seconds, bool completed) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03ldZ %s %s %s %u %zu %.3fms%s\n", when, ts.tv_nsec / 1000000, r->id, r->method, r->path, status,
            r->bytes_out, seconds * 1e3, completed ? "" : " (aborted)");
}
