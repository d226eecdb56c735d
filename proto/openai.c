/* openai.c - OpenAI's embeddings API (POST /v1/embeddings): its request ("input" as a string, an
 * array of strings, token ids or arrays of them) into proto_predict_req, and its answer, a list of
 * embedding objects with the vectors as floats or as base64 of their little-endian float32 bytes
 * (what the `openai` npm client asks for by default). Its error shape is json.c's. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int proto_openai_embed_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    static const char *const keys[] = {"input", "model", "encoding_format", "dimensions", "user", "long", NULL};
    proto_limits dl;
    json_t *root = proto__req_begin(body, len, &lim, &dl, r, err), *v;
    if (!root) return err ? err->code : ENG_MALFORMED;
    r->truncate = 0;
    int rc;
    if ((rc = proto__known_keys(root, keys, err)) ||
        (rc = proto__parse_inputs(json_object_get(root, "input"), "input", lim, 1, r, err)) ||
        (rc = proto__model_field(root, r, err)) || (rc = proto__dimensions(root, r, err)) ||
        (rc = proto__embed_long(root, r, err))) /* adapterd's extension: OpenAI's API has no field for it */
        goto bad;
    for (int i = 0; i < r->n_inputs; i++)
        if (r->inputs[i].pair || (r->inputs[i].ids && r->inputs[i].type_ids)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "input[%d] must be a string or an array of token ids", i);
            goto bad;
        }
    if ((v = json_object_get(root, "encoding_format")) && !json_is_null(v)) {
        const char *f = json_string_value(v);
        if (f && !strcmp(f, "base64")) r->base64 = 1;
        else if (!f || strcmp(f, "float")) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"encoding_format\" must be \"float\" or \"base64\"");
            goto bad;
        }
    }
    return 0;
bad:
    proto_predict_free(r);
    return rc;
}

/* Standard base64 (RFC 4648, padded) of n bytes; malloc'd, NUL-terminated, or NULL. */
static char *base64(const unsigned char *p, size_t n) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *w++ = al[v >> 18 & 63];
        *w++ = al[v >> 12 & 63];
        *w++ = i + 1 < n ? al[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? al[v & 63] : '=';
    }
    *w = '\0';
    return o;
}

/* vector's float32s in little-endian byte order, as base64 */
static json_t *vector_base64(const float *v, int dim) {
    unsigned char *b = malloc((size_t)dim * 4);
    if (!b) return NULL;
    for (int k = 0; k < dim; k++) {
        uint32_t u;
        memcpy(&u, &v[k], 4);
        for (int q = 0; q < 4; q++) b[4 * k + q] = (unsigned char)(u >> (8 * q));
    }
    char *s = base64(b, (size_t)dim * 4);
    free(b);
    json_t *j = s ? json_string(s) : NULL;
    free(s);
    return j;
}

char *proto_openai_embed_encode(const float *vectors, int n, int dim, int b64, const char *model, int tokens, size_t *len) {
    json_t *data = json_array();
    for (int i = 0; data && i < n; i++) {
        const float *v = vectors + (size_t)i * dim;
        json_t *e = b64 ? vector_base64(v, dim) : proto__floats(v, dim);
        if (!e || json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", e))) {
            json_decref(data);
            data = NULL;
        }
    }
    if (!data) return NULL;
    return proto__dump(json_pack("{s:s,s:o,s:s,s:{s:i,s:i}}", "object", "list", "data", data, "model", model, "usage",
                                 "prompt_tokens", tokens, "total_tokens", tokens),
                       len);
}

/* ---- codec ---- */

static int openai_embed_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    return proto_openai_embed_parse(w->body, w->len, lim, out, err);
}

static char *openai_embed_encode(const proto_embed_resp *e, size_t *len) {
    return proto_openai_embed_encode(e->vectors, e->n_inputs, e->dim, e->req->base64, e->model, e->tokens, len);
}

const proto_codec proto_openai_embed_codec = {.name = "openai", .dialect = PROTO_DIALECT_OPENAI, .embed = 1,
                                              .decode = openai_embed_decode, .encode_embed = openai_embed_encode};
