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
 *   grpc.c      KServe v2's gRPC messages (grpc_service.proto, protoc-c): ModelInfer decoded into the
 *               request struct with v2's rules (v2.c's outputs, parse.c's parameters and texts) and
 *               its answer encoded from v2.c's typed tensors; the other calls from and to the v2
 *               JSON; v2.c, parse.c, json.c
 * A new protocol (an OpenAI- or TEI-shaped encoder) is a new file after these, built on json.c and
 * the request struct parse.c fills; tests/layout/file_cycles.py keeps the order honest. */
#ifndef ADAPTERD_PROTO_INTERNAL_H
#define ADAPTERD_PROTO_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

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

/* 1 when the n bytes at p are UTF-8 (RFC 3629, as jansson checks a JSON string: no overlong forms,
 * no surrogates, nothing past U+10FFFF). A NUL byte is UTF-8; callers that refuse it say so. */
bool proto__utf8_valid(const void *p, size_t n);

/* ---- parse.c ---- */

/* r with every field at its default (skip, budget, latency_ms unset; scores, truncate, normalize and
 * special tokens on), owning nothing. */
void proto__req_init(proto_predict_req *r);

/* Keeps p (malloc'd) with r until proto_predict_free. Returns 0, or frees p and returns -1 when out
 * of memory. */
int proto__req_own(proto_predict_req *r, void *p);

/* The start of every request parser: *lim defaults to proto_default_limits() (stored in *dl) when
 * NULL, r gets its defaults (skip, budget, latency_ms unset; scores, truncate, normalize and special
 * tokens on) and owns the body parsed as a JSON object (duplicate keys refused). Returns the
 * document, or NULL with err set (ENG_MALFORMED). */
json_t *proto__req_begin(const char *body, size_t len, const proto_limits **lim, proto_limits *dl, proto_predict_req *r,
                         eng_err *err);

/* t borrows the string s (and pair, a string or null/NULL) of a document; where names the field in
 * errors. Returns 0, or ENG_INVALID_ARGUMENT / ENG_LIMIT with err set. */
int proto__set_text(proto_text *t, json_t *s, json_t *pair, const proto_limits *lim, const char *where, eng_err *err);
/* The text limit alone: 0, or ENG_LIMIT naming where when a text and its pair (len, pair_len bytes)
 * are over lim->max_text_bytes. proto__set_text's check, for texts that come from no document. */
int proto__text_fits(size_t len, size_t pair_len, const proto_limits *lim, const char *where, eng_err *err);

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

/* A request parameter's value as its wire carried it: a JSON value of a body, or gRPC's
 * InferParameter (bool, int64, uint64, double, string). */
typedef enum {
    PROTO__NULL,   /* absent or null: the parameter is not given */
    PROTO__BOOL,
    PROTO__INT,
    PROTO__REAL,
    PROTO__STRING,
    PROTO__OBJECT, /* JSON only: "skip": {"task": N} */
    PROTO__OTHER,  /* an array: every parameter refuses it */
} proto__kind;

typedef struct {
    proto__kind kind;
    int b;         /* BOOL */
    long long i;   /* INT */
    double x;      /* REAL */
    const char *s; /* STRING, NUL-terminated, UTF-8; borrowed */
    json_t *obj;   /* OBJECT, borrowed */
} proto__value;

/* A JSON value (NULL: absent) as a parameter value; strings and objects stay the document's. */
proto__value proto__value_json(json_t *v);

/* Sets the request parameter key of r from v: skip, budget, latency_ms, truncate, aggregation,
 * binary_data_output. The one place each parameter is checked, for JSON bodies and gRPC alike.
 * A PROTO__NULL value or a key that is none of these does nothing. Returns 0, or a negative status
 * with err naming the parameter. */
int proto__param_set(proto_predict_req *r, const char *key, const proto__value *v, const proto_limits *lim, eng_err *err);

/* The parameters proto__parse_common reads, in its order (NULL-terminated): a v1 body's fields,
 * v2's "parameters", gRPC's map (then v2 reads binary_data_output after its outputs). */
extern const char *const proto__common_params[];

/* An embedding request's "long" (adapterd's extension on every embedding route): {"mode": "chunks",
 * "stride": N} reads a text over the model's limit in windows, pooled per window then averaged weighted
 * by the windows' tokens; "aggregate" can only be "mean". Returns 0 or a negative status with err. */
int proto__embed_long(json_t *root, proto_predict_req *r, eng_err *err);

/* 1 when k names a question-answering parameter (max_answer_len, top_k, ...). */
int proto__is_qa_param(const char *k);

/* proto__common_params of root (a v1 body, or v2's "parameters") into r through proto__param_set.
 * Returns 0 or a negative status with err naming the field. */
int proto__parse_common(json_t *root, const proto_limits *lim, proto_predict_req *r, eng_err *err);

/* ---- v2.c ---- */

/* The "outputs" of a v2 request as they are read, entry by entry. */
typedef struct {
    unsigned mask;          /* the outputs named (PROTO_V2_OUT_*) */
    unsigned bin_on, bin_off; /* those whose "binary_data" is true, false */
} proto__v2_outs;

/* outputs[i], named name: its bit into o->mask (*bit). Returns 0, or ENG_INVALID_ARGUMENT when no
 * head answers a tensor of that name or it is named twice. */
int proto__v2_output_named(size_t i, const char *name, proto__v2_outs *o, unsigned *bit, eng_err *err);
/* outputs[i]'s "binary_data" (v; PROTO__NULL when not given) for the output bit. Returns 0, or
 * ENG_INVALID_ARGUMENT when it is not a boolean. */
int proto__v2_output_binary(size_t i, const proto__value *v, unsigned bit, proto__v2_outs *o, eng_err *err);
/* Once the outputs and the request's binary_data_output are read: r->v2_outputs, r->v2_binary. */
void proto__v2_outputs_end(proto_predict_req *r, const proto__v2_outs *o);

/* One output tensor of a v2 answer, with its values typed: what REST's JSON, REST's binary data and
 * gRPC's ModelInferResponse are all written from. */
typedef enum { PROTO__V2_BYTES, PROTO__V2_FP32, PROTO__V2_INT32 } proto__v2_type;
typedef struct {
    const char *name, *datatype; /* "scores", "FP32" */
    proto__v2_type type;
    unsigned bit;                /* PROTO_V2_OUT_* */
    int64_t shape[2];            /* [rows] or [rows, K] */
    int n_shape;
    size_t n;                    /* elements: the product of the shape */
    const char **str;            /* BYTES (n): UTF-8, str_len[i] bytes each, not NUL-terminated */
    size_t *str_len;             /* BYTES (n) */
    float *f32;                  /* FP32 (n): NaN where a value is not finite (JSON's null) */
    int32_t *i32;                /* INT32 (n) */
    char *names_;                /* internal: LABEL_i names of labels the task does not name */
} proto__v2_tensor;

typedef struct {
    const char *model_name, *model_version, *id; /* borrowed from the response */
    proto__v2_tensor *t;         /* (n) in the head's table order, those "outputs" asked for */
    int n;
} proto__v2_answer;

/* The tensors of r's v2 answer (one task, at least one input). Returns 0, or ENG_NO_MEMORY, or
 * ENG_INTERNAL when r is not one task's answer or a string of it is not UTF-8 (the engine's,
 * not the client's). Release with proto__v2_answer_free, also after a failure. */
int proto__v2_answer_make(const proto_predict_resp *r, proto__v2_answer *a);
void proto__v2_answer_free(proto__v2_answer *a);
/* Tensor t as the binary tensor data extension and gRPC's raw_output_contents lay it out: each
 * element little-endian (INT32, FP32 as its bits), a BYTES element as a 4-byte length and its
 * bytes. _size: its bytes; _write: writes them at p (that many bytes). */
size_t proto__v2_raw_size(const proto__v2_tensor *t);
void proto__v2_raw_write(const proto__v2_tensor *t, uint8_t *p);

#endif
