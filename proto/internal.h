/* internal.h - what proto's files share and nobody outside proto sees (`proto__` names).
 *
 * proto/ is split by part of the wire format, each file depending only on those listed before it:
 *   json.c      JSON builders (non-finite numbers, label names, fusion views), wire names, the
 *               small answers every route shares (error, status); depends on nothing here
 *   parse.c     the v1 requests (predict, embed, tokenize) and their limits; json.c
 *   v1.c        the v1 answers of a prediction (predict, embed, tokenize); json.c
 *   v2.c        KServe v2: infer request and answer, model metadata, live/ready; parse.c, json.c
 *   registry.c  the registry's answers (GET /v1/tasks paginated, /v1/tasks/{name}, /v1/models in
 *               adapterd's and OpenAI's list shape at once, /v1/models/{id}); json.c
 *   tei.c       text-embeddings-inference's own answers (/info, prompts, its error shape); json.c
 *   openai.c    OpenAI's embeddings request and answer, its error shape; parse.c, json.c
 *   grpc.c      KServe v2's gRPC messages (grpc_service.proto, protoc-c) to and from the v2 JSON; json.c
 * A new protocol (an OpenAI- or TEI-shaped encoder) is a new file after these, built on json.c and
 * the request struct parse.c fills; tests/layout/file_cycles.py keeps the order honest. */
#ifndef ADAPTERD_PROTO_INTERNAL_H
#define ADAPTERD_PROTO_INTERNAL_H

#include <jansson.h>

#include "proto/proto.h"

/* ---- json.c ---- */

/* A JSON real, or null for NaN/inf (jansson's json_real refuses them; a score should not fail an
 * answer). New reference, NULL when out of memory. */
json_t *proto__num(double v);

/* Dumps j compactly (floats with 9 significant digits, a float's round trip) and releases it.
 * Returns a malloc'd NUL-terminated text (length in *len when len is not NULL), or NULL when j is
 * NULL or out of memory: builders pass a tree that failed to build straight through. */
char *proto__dump(json_t *j, size_t *len);

/* [v[0], ..., v[n-1]] with proto__num; NULL when out of memory. */
json_t *proto__floats(const float *v, int n);

/* A JSON array of n strings; NULL when out of memory. */
json_t *proto__strings(const char *const *s, int n);

/* {"kept": [...], "pruned": [...]}: a fusion's children as served; NULL when out of memory. */
json_t *proto__fusion_obj(const proto_fusion_view *f);

/* json_string(proto_label_name(labels, i, ...)): a label's wire name as a new JSON string; NULL
 * when out of memory. */
json_t *proto__label_json(const char *const *labels, int i);

/* ---- parse.c ---- */

/* The start of every request parser: *lim defaults to proto_default_limits() (stored in *dl) when
 * NULL, r gets its defaults (skip, budget, latency_ms unset; scores, truncate, normalize and special
 * tokens on) and owns the body parsed as a JSON object (duplicate keys refused). Returns the
 * document, or NULL with err set (ENG_MALFORMED). */
json_t *proto__req_begin(const char *body, size_t len, const proto_limits **lim, proto_limits *dl, proto_predict_req *r,
                         eng_err *err);

/* t borrows the string s (and pair, a string or null/NULL) of a document; where names the field in
 * errors. Returns 0, or ENG_INVALID_ARGUMENT / ENG_LIMIT with err set. */
int proto__set_text(proto_text *t, json_t *s, json_t *pair, const proto_limits *lim, const char *where, eng_err *err);

/* "inputs" of a request (a string, ids, or an array of strings / ids / {"text", "text_pair"} /
 * {"ids", "type_ids"}) into r->inputs; allow_ids 0 refuses ids. field names it in errors. */
int proto__parse_inputs(json_t *in, const char *field, const proto_limits *lim, int allow_ids, proto_predict_req *r,
                        eng_err *err);

/* "model" of root into r->model (a string or absent); "dimensions" (a positive integer) into
 * r->dimensions; refuses keys of root not in the NULL-terminated list keys. Each returns 0 or
 * ENG_INVALID_ARGUMENT with err naming the field. */
int proto__model_field(json_t *root, proto_predict_req *r, eng_err *err);
int proto__dimensions(json_t *root, proto_predict_req *r, eng_err *err);
int proto__known_keys(json_t *root, const char *const *keys, eng_err *err);

/* skip, budget, latency_ms, truncate and aggregation of root (a v1 body, or v2's "parameters")
 * into r. Returns 0 or a negative status with err naming the field. */
int proto__parse_common(json_t *root, const proto_limits *lim, proto_predict_req *r, eng_err *err);

#endif
