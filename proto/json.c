/* json.c - what every part of proto builds answers with: JSON values that cannot fail on a
 * non-finite float, the dump every encoder ends with, label names with Hugging Face's LABEL_i
 * fallback, a fusion's children, the wire names of enums, the two small answers every route
 * shares (errors, health), and the UTF-8 check of text that arrives outside JSON (gRPC's strings
 * and bytes). Depends on no other file of proto (see internal.h for the order). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *proto_aggregation_name(proto_aggregation a) {
    switch (a) {
    case PROTO_AGG_TOKENS: return "tokens";
    case PROTO_AGG_NONE: return "none";
    case PROTO_AGG_SIMPLE: return "simple";
    case PROTO_AGG_FIRST: return "first";
    }
    return "tokens";
}

const char *proto_head_kind_name(proto_head_kind k) {
    switch (k) {
    case PROTO_HEAD_CLASSIFICATION: return "classification";
    case PROTO_HEAD_MULTILABEL: return "multilabel";
    case PROTO_HEAD_REGRESSION: return "regression";
    case PROTO_HEAD_TAGGING: return "tagging";
    case PROTO_HEAD_QA: return "qa";
    }
    return "unknown";
}

const char *proto_pooling_name(proto_pooling p) {
    switch (p) {
    case PROTO_POOL_DEFAULT: return "default";
    case PROTO_POOL_CLS: return "cls";
    case PROTO_POOL_MEAN: return "mean";
    case PROTO_POOL_POOLER: return "pooler";
    case PROTO_POOL_NONE: return "none";
    }
    return "default";
}

json_t *proto__num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

bool proto__utf8_valid(const void *p, size_t n) {
    if (!n) return true; /* p may be NULL then */
    const unsigned char *s = p, *end = s + n;
    while (s < end) {
        /* texts are mostly ASCII: eight bytes at a time until a byte has its high bit */
        while (end - s >= 8) {
            uint64_t w;
            memcpy(&w, s, sizeof w);
            if (w & 0x8080808080808080ull) break;
            s += 8;
        }
        if (s == end) break;
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        /* RFC 3629: no overlong forms, no surrogates (U+D800..U+DFFF), nothing past U+10FFFF; the
         * same as jansson's check, so a text JSON refuses is refused here too */
        size_t k = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || (size_t)(end - s) < k) return false;
        uint32_t cp = c & (k == 2 ? 0x1f : k == 3 ? 0x0f : 0x07);
        for (size_t i = 1; i < k; i++) {
            if ((s[i] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        s += k;
    }
    return true;
}

/* Builders: each json_object_set_new consumes its value even on failure, so an allocation that
 * fails leaves a NULL somewhere; the failure is checked once at the end by dumping. */
char *proto__dump(json_t *j, size_t *len) {
    if (!j) return NULL;
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (s && len) *len = strlen(s);
    return s;
}

json_t *proto__floats(const float *v, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, proto__num(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *proto__strings(const char *const *s, int n) {
    json_t *a = json_array();
    int bad = !a;
    for (int i = 0; !bad && i < n; i++) bad |= json_array_append_new(a, json_string(s[i]));
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

json_t *proto__fusion_obj(const proto_fusion_view *f) {
    json_t *o = json_pack("{s:[],s:[]}", "kept", "pruned");
    for (int i = 0; o && i < f->n; i++)
        if (json_array_append_new(json_object_get(o, f->kept[i] ? "kept" : "pruned"), json_string(f->children[i]))) {
            json_decref(o);
            o = NULL;
        }
    return o;
}

const char *proto_label_name(const char *const *labels, int i, char *buf, size_t n) {
    if (labels && labels[i]) return labels[i];
    snprintf(buf, n, "LABEL_%d", i);
    return buf;
}

json_t *proto__label_json(const char *const *labels, int i) {
    char buf[PROTO_LABEL_BUF];
    return json_string(proto_label_name(labels, i, buf, sizeof buf));
}

char *proto_error_encode(const char *code, const char *msg, size_t *len) {
    return proto__dump(json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg), len);
}

char *proto_status_encode(const char *status, int ready, size_t *len) {
    return proto__dump(json_pack("{s:s,s:b}", "status", status, "ready", ready), len);
}

/* TEI's ErrorType and OpenAI's error type for an HTTP status. */
static const char *tei_error_type(unsigned status) {
    if (status == 429) return "Overloaded";
    if (status == 503) return "Unhealthy";
    if (status >= 500) return "Backend";
    return "Validation";
}

static const char *openai_error_type(unsigned status) {
    if (status == 401) return "authentication_error";
    if (status == 404) return "not_found_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
}

static char *error_encode(proto_dialect d, const char *code, unsigned http_status, const char *msg, size_t *len);

/* A message quoting what a client sent (a task name from a path) may hold bytes that are not UTF-8,
 * which JSON cannot carry: they become '?' (every byte from 0x80 on: a rare path, kept simple) rather
 * than the answer becoming a 500. */
char *proto_error_encode_as(proto_dialect d, const char *code, unsigned http_status, const char *msg, size_t *len) {
    size_t n = strlen(msg);
    if (proto__utf8_valid(msg, n)) return error_encode(d, code, http_status, msg, len);
    char *clean = malloc(n + 1);
    if (!clean) return NULL;
    for (size_t i = 0; i <= n; i++) clean[i] = (unsigned char)msg[i] >= 0x80 ? '?' : msg[i];
    char *out = error_encode(d, code, http_status, clean, len);
    free(clean);
    return out;
}

static char *error_encode(proto_dialect d, const char *code, unsigned http_status, const char *msg, size_t *len) {
    switch (d) {
    case PROTO_DIALECT_TEI:
        return proto__dump(json_pack("{s:s,s:s}", "error", msg, "error_type", tei_error_type(http_status)), len);
    case PROTO_DIALECT_OPENAI:
        return proto__dump(json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message", msg, "type", openai_error_type(http_status),
                                     "param", "code", code),
                           len);
    case PROTO_DIALECT_KSERVE: return proto__dump(json_pack("{s:s}", "error", msg), len);
    case PROTO_DIALECT_ADAPTERD: break;
    }
    return proto_error_encode(code, msg, len);
}
