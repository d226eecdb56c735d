/* grpc.c - KServe v2's GRPCInferenceService messages (proto/grpc_service.proto, C from protoc-c at
 * build time) and gRPC's own small wire rules (the 5-byte message prefix, grpc-timeout,
 * grpc-message's escaping).
 *
 * ModelInfer is decoded straight into the request struct every protocol fills, and its answer
 * encoded straight from the response struct; no JSON in between. The two protocols still cannot
 * drift, because the rules are not written here: the parameters go through parse.c's setters
 * (proto__param_set), the outputs asked for through v2.c's (proto__v2_output_named, _binary), the
 * texts through the same limit, and the answer's tensors come from v2.c's one table
 * (proto__v2_answer_make) that REST's JSON is written from too. What is gRPC's own is checked here,
 * in the order and with the messages of the REST parser: the message's fields must be text where
 * REST's JSON would have to carry them (a client's mistake, INVALID_ARGUMENT naming the field), and
 * raw_input_contents is framed. The JSON round trip this replaced grew with the message whatever
 * it held: ~240 ms to write and parse a 1 MB request of a million shape entries before v2 refused
 * the shape; the decode is protobuf-c's unpack and one pass over the texts, a few ms there and a
 * few us for eight texts (bench/grpc/bench_grpc_decode.c, bench/README.md).
 *
 * The small calls (metadata, statistics, readiness) are still converted from their REST route's
 * JSON: a few hundred bytes each (the server makes them off its event loop, server/grpc_calls.c). */
#include "proto/grpc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "internal.h"

static const char *const method_names[] = {
#define PROTO__GRPC_METHOD_NAME(id, name) name,
    PROTO_GRPC_METHOD_LIST(PROTO__GRPC_METHOD_NAME)
#undef PROTO__GRPC_METHOD_NAME
    "other"};

#define SERVICE_PREFIX "/inference.GRPCInferenceService/"

const char *proto_grpc_method_name(proto_grpc_method m) {
    return m >= 0 && m < PROTO_GRPC_N_METHODS ? method_names[m] : "other";
}

proto_grpc_method proto_grpc_method_of(const char *path, size_t n) {
    size_t pl = sizeof SERVICE_PREFIX - 1;
    if (n <= pl || memcmp(path, SERVICE_PREFIX, pl)) return PROTO_GRPC_UNKNOWN_METHOD;
    for (int m = 0; m < PROTO_GRPC_UNKNOWN_METHOD; m++)
        if (strlen(method_names[m]) == n - pl && !memcmp(path + pl, method_names[m], n - pl)) return (proto_grpc_method)m;
    return PROTO_GRPC_UNKNOWN_METHOD;
}

const char *proto_grpc_code_name(int code) {
    static const char *const names[PROTO_GRPC_N_CODES] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
        "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
        "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    return code >= 0 && code < PROTO_GRPC_N_CODES ? names[code] : "UNKNOWN";
}

/* ---- framing ---- */

int proto_grpc_prefix_read(const uint8_t p[PROTO_GRPC_PREFIX], bool *compressed, uint32_t *len) {
    if (p[0] > 1) return ENG_MALFORMED;
    *compressed = p[0] == 1;
    *len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    return 0;
}

void proto_grpc_prefix_write(uint8_t p[PROTO_GRPC_PREFIX], uint32_t len) {
    p[0] = 0;
    p[1] = (uint8_t)(len >> 24), p[2] = (uint8_t)(len >> 16), p[3] = (uint8_t)(len >> 8), p[4] = (uint8_t)len;
}

int proto_grpc_timeout_parse(const char *v, size_t n, double *seconds) {
    /* TimeoutValue: at most 8 ASCII digits; TimeoutUnit: one letter (gRPC over HTTP/2, "Requests") */
    if (n < 2 || n > 9) return ENG_MALFORMED;
    double x = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9') return ENG_MALFORMED;
        x = x * 10 + (v[i] - '0');
    }
    switch (v[n - 1]) {
    case 'H': x *= 3600; break;
    case 'M': x *= 60; break;
    case 'S': break;
    case 'm': x *= 1e-3; break;
    case 'u': x *= 1e-6; break;
    case 'n': x *= 1e-9; break;
    default: return ENG_MALFORMED;
    }
    *seconds = x;
    return 0;
}

size_t proto_grpc_message_escape(const char *msg, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    if (!cap) return 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
        if (o + (plain ? 1 : 3) >= cap) break;
        if (plain) out[o++] = (char)*p;
        else out[o++] = '%', out[o++] = hex[*p >> 4], out[o++] = hex[*p & 15];
    }
    out[o] = '\0';
    return o;
}

/* ---- requests: ModelInfer ---- */

/* An InferParameter as a request parameter's value, for parse.c's setters; PROTO__NULL when p holds
 * nothing. A uint64 past int64's range is a real, as JSON would carry it. */
static proto__value param_value(const Inference__InferParameter *p) {
    proto__value v = {.kind = PROTO__NULL};
    if (!p) return v;
    switch (p->parameter_choice_case) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM: v.kind = PROTO__BOOL, v.b = p->bool_param != 0; break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM: v.kind = PROTO__INT, v.i = p->int64_param; break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        if (p->uint64_param > (uint64_t)INT64_MAX) v.kind = PROTO__REAL, v.x = (double)p->uint64_param;
        else v.kind = PROTO__INT, v.i = (long long)p->uint64_param;
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM: v.kind = PROTO__REAL, v.x = p->double_param; break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM: v.kind = PROTO__STRING, v.s = p->string_param; break;
    default: break;
    }
    return v;
}

/* The request's parameter key: its last entry, as protobuf keeps the last value of a map key sent
 * twice. */
static proto__value request_param(const Inference__ModelInferRequest *q, const char *key) {
    for (size_t i = q->n_parameters; i-- > 0;)
        if (!strcmp(q->parameters[i]->key, key)) return param_value(q->parameters[i]->value);
    return param_value(NULL);
}

static proto__value output_param(const Inference__ModelInferRequest__InferRequestedOutputTensor *o, const char *key) {
    for (size_t i = o->n_parameters; i-- > 0;)
        if (!strcmp(o->parameters[i]->key, key)) return param_value(o->parameters[i]->value);
    return param_value(NULL);
}

/* A C string of the message that is not UTF-8: ENG_INVALID_ARGUMENT naming it (what). */
static int utf8_field(const char *s, const char *what, eng_err *err) {
    if (proto__utf8_valid(s, strlen(s))) return 0;
    return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s is not UTF-8 text", what);
}

/* The elements of one BYTES input in order: contents.bytes_contents, or its raw_input_contents
 * entry (raw, non-NULL), where each element is a 4-byte little-endian length and that many bytes. */
typedef struct {
    const Inference__ModelInferRequest__InferInputTensor *x;
    const ProtobufCBinaryData *raw;
    size_t k, o;
} elems;

/* The next element into *p, *n: 1, 0 at the end, -1 when raw data ends inside an element. */
static int elem_next(elems *c, const uint8_t **p, size_t *n) {
    if (!c->raw) {
        if (!c->x->contents || c->k >= c->x->contents->n_bytes_contents) return 0;
        *p = c->x->contents->bytes_contents[c->k].data, *n = c->x->contents->bytes_contents[c->k].len;
        c->k++;
        return 1;
    }
    const uint8_t *d = c->raw->data;
    size_t left = c->raw->len - c->o;
    if (!left) return 0;
    if (left < 4) return -1;
    uint32_t l = (uint32_t)d[c->o] | (uint32_t)d[c->o + 1] << 8 | (uint32_t)d[c->o + 2] << 16 | (uint32_t)d[c->o + 3] << 24;
    if (l > left - 4) return -1;
    *p = d + c->o + 4, *n = l;
    c->o += 4 + (size_t)l;
    c->k++;
    return 1;
}

static elems elems_of(const Inference__ModelInferRequest *q, size_t i) {
    return (elems){.x = q->inputs[i], .raw = q->n_raw_input_contents ? &q->raw_input_contents[i] : NULL};
}

/* Input i's data holds text: each element UTF-8 without a NUL byte (REST's JSON cannot carry
 * either), raw data framed whole. A raw tensor of another datatype holds no text to check: v2's
 * datatype rule refuses it after. */
static int input_data_ok(const Inference__ModelInferRequest *q, size_t i, eng_err *err) {
    const Inference__ModelInferRequest__InferInputTensor *x = q->inputs[i];
    const char *field = q->n_raw_input_contents ? "raw_input_contents" : "contents.bytes_contents";
    if (q->n_raw_input_contents && x->contents)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu] has both contents and raw_input_contents", i);
    if (q->n_raw_input_contents && strcmp(x->datatype, "BYTES")) return 0;
    elems c = elems_of(q, i);
    const uint8_t *p;
    size_t n;
    int more;
    while ((more = elem_next(&c, &p, &n)) > 0) {
        if (n && memchr(p, 0, n))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].%s[%zu] holds a NUL byte", i, field, c.k - 1);
        if (!proto__utf8_valid(p, n)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].%s[%zu] is not UTF-8 text", i, field, c.k - 1);
    }
    if (more < 0)
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "raw_input_contents[%zu]: a BYTES element is a 4-byte little-endian length and that many bytes; the "
                           "data ends inside one",
                           i);
    return 0;
}

/* What the message itself must be before v2's rules are applied: a model name, one raw entry per
 * input or none, and text wherever text is read (the id, every parameter, the tensors' names and
 * data, the outputs' names), every value of a parameter map set. Sets t. */
static int infer_message_ok(const Inference__ModelInferRequest *q, proto_grpc_infer_target *t, eng_err *err) {
    char what[96];
    if (!q->model_name[0]) return eng_err_set(err, ENG_INVALID_ARGUMENT, "model_name is empty");
    int sl = q->model_version[0] ? snprintf(t->spec, sizeof t->spec, "%s@%s", q->model_name, q->model_version)
                                 : snprintf(t->spec, sizeof t->spec, "%s", q->model_name);
    if (sl < 0 || (size_t)sl >= sizeof t->spec)
        return eng_err_set(err, ENG_NOT_FOUND, "unknown model \"%.60s...\" (the name is too long)", q->model_name);
    if (q->n_raw_input_contents && q->n_raw_input_contents != q->n_inputs)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "raw_input_contents has %zu entries for %zu inputs; send one per input or none",
                           q->n_raw_input_contents, q->n_inputs);
    int rc = utf8_field(q->id, "id", err);
    for (size_t i = 0; !rc && i < q->n_parameters; i++) {
        const Inference__ModelInferRequest__ParametersEntry *e = q->parameters[i];
        proto__value v = param_value(e->value);
        snprintf(what, sizeof what, "a key of \"parameters\" (entry %zu)", i);
        if ((rc = utf8_field(e->key, what, err))) break;
        if (v.kind == PROTO__NULL) rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "parameters[\"%.60s\"] holds no value", e->key);
        else if (v.kind == PROTO__STRING && !proto__utf8_valid(v.s, strlen(v.s)))
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "parameters[\"%.60s\"] is not UTF-8 text", e->key);
        else if (v.kind == PROTO__REAL && !isfinite(v.x)) /* JSON has no such number */
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "parameters[\"%.60s\"] is not a finite number", e->key);
    }
    for (size_t i = 0; !rc && i < q->n_inputs; i++) {
        if ((rc = input_data_ok(q, i, err))) break;
        snprintf(what, sizeof what, "inputs[%zu].name", i);
        rc = utf8_field(q->inputs[i]->name, what, err);
    }
    for (size_t i = 0; !rc && i < q->n_outputs; i++) {
        snprintf(what, sizeof what, "outputs[%zu].name", i);
        rc = utf8_field(q->outputs[i]->name, what, err);
    }
    return rc;
}

/* Input i as v2's "text" or "text_pair" (slots 0, 1): v2's datatype, shape and name rules and
 * messages (proto_v2_infer_parse), with its element count in *count. */
static int infer_input_slot(const Inference__ModelInferRequest *q, size_t i, size_t slot_of[2], size_t *count, eng_err *err) {
    const Inference__ModelInferRequest__InferInputTensor *x = q->inputs[i];
    if (strcmp(x->datatype, "BYTES")) return eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].datatype must be \"BYTES\"", i);
    elems c = elems_of(q, i);
    const uint8_t *p;
    size_t n;
    while (elem_next(&c, &p, &n) > 0) {}
    *count = c.k;
    if (x->n_shape < 1 || x->n_shape > 2 || x->shape[0] != (int64_t)c.k || (x->n_shape == 2 && x->shape[1] != 1))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].shape must be [N] (or [N, 1]) with N the number of data entries", i);
    int slot = !strcmp(x->name, "text_pair") ? 1 : !strcmp(x->name, "text") || q->n_inputs == 1 ? 0 : -1;
    if (slot < 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu]: unknown tensor \"%.60s\" (text, text_pair)", i, x->name);
    if (slot_of[slot] != SIZE_MAX)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu]: a second tensor named \"%.60s\"", i, x->name);
    slot_of[slot] = i;
    return 0;
}

/* n bytes at p (NULL when n is 0) and a NUL at *o; advances *o past them. */
static const char *copy_text(char **o, const uint8_t *p, size_t n) {
    char *s = *o;
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    *o += n + 1;
    return s;
}

/* The texts of the "text" input (and "text_pair", pair SIZE_MAX when none) into r->inputs (n),
 * each checked against the text limit first and then copied with a NUL after it into one buffer r
 * owns, which also takes the id and the spec (r->v2_id, r->tasks[0]). */
static int infer_texts(const Inference__ModelInferRequest *q, size_t text, size_t pair, size_t n, const proto_grpc_infer_target *t,
                       const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    elems ct = elems_of(q, text), cp = pair != SIZE_MAX ? elems_of(q, pair) : (elems){0};
    const uint8_t *p, *pp = NULL;
    size_t len, pl = 0, total = strlen(q->id) + strlen(t->spec) + 2;
    char where[48];
    for (size_t i = 0; i < n; i++) {
        elem_next(&ct, &p, &len);
        if (pair != SIZE_MAX) elem_next(&cp, &pp, &pl);
        snprintf(where, sizeof where, "text[%zu]", i);
        int rc = proto__text_fits(len, pl, lim, where, err);
        if (rc) return rc;
        total += len + 1 + (pair != SIZE_MAX ? pl + 1 : 0);
    }
    char *b = malloc(total), *o = b;
    if (!b || proto__req_own(r, b)) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    ct = elems_of(q, text), cp = pair != SIZE_MAX ? elems_of(q, pair) : (elems){0};
    for (size_t i = 0; i < n; i++) {
        proto_text *x = &r->inputs[i];
        elem_next(&ct, &p, &len);
        x->text = copy_text(&o, p, len), x->len = len;
        if (pair == SIZE_MAX) continue;
        elem_next(&cp, &pp, &pl);
        x->pair = copy_text(&o, pp, pl), x->pair_len = pl;
    }
    r->tasks[r->n_tasks++] = strcpy(o, t->spec);
    o += strlen(t->spec) + 1;
    if (q->id[0]) r->v2_id = strcpy(o, q->id);
    return 0;
}

/* v2's rules over a message infer_message_ok passed, in proto_v2_infer_parse's order: the inputs,
 * their texts, the parameters, the outputs, the id. */
static int infer_fill(const Inference__ModelInferRequest *q, const proto_grpc_infer_target *t, const proto_limits *lim,
                      proto_predict_req *r, eng_err *err) {
    if (q->n_inputs < 1 || q->n_inputs > 2)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"inputs\" must hold a BYTES tensor \"text\" and optionally \"text_pair\"");
    size_t slot_of[2] = {SIZE_MAX, SIZE_MAX}, count[2] = {0, 0};
    int rc;
    for (size_t i = 0; i < q->n_inputs; i++)
        if ((rc = infer_input_slot(q, i, slot_of, &count[i], err))) return rc;
    if (slot_of[0] == SIZE_MAX) return eng_err_set(err, ENG_INVALID_ARGUMENT, "no \"text\" input tensor");
    size_t n = count[slot_of[0]];
    if (slot_of[1] != SIZE_MAX && count[slot_of[1]] != n)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"text_pair\" must have as many entries as \"text\"");
    if (n == 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "the \"text\" tensor is empty");
    if (n > (size_t)lim->max_inputs)
        return eng_err_set(err, ENG_LIMIT, "the \"text\" tensor has %zu entries, over the limit of %d", n, lim->max_inputs);
    if (!(r->inputs = calloc(n, sizeof *r->inputs)) || !(r->tasks = malloc(sizeof *r->tasks)))
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    r->n_inputs = (int)n;
    if ((rc = infer_texts(q, slot_of[0], slot_of[1], n, t, lim, r, err))) return rc;
    for (const char *const *k = proto__common_params; *k; k++) {
        proto__value v = request_param(q, *k);
        if ((rc = proto__param_set(r, *k, &v, lim, err))) return rc;
    }
    proto__v2_outs outs = {0};
    for (size_t i = 0; i < q->n_outputs; i++) {
        unsigned bit;
        if ((rc = proto__v2_output_named(i, q->outputs[i]->name, &outs, &bit, err))) return rc;
        proto__value v = output_param(q->outputs[i], "binary_data");
        if ((rc = proto__v2_output_binary(i, &v, bit, &outs, err))) return rc;
    }
    proto__value all = request_param(q, "binary_data_output");
    if ((rc = proto__param_set(r, "binary_data_output", &all, lim, err))) return rc;
    proto__v2_outputs_end(r, &outs);
    return 0;
}

int proto_grpc_infer_decode(const uint8_t *msg, size_t n, const proto_limits *lim, proto_predict_req *out, proto_grpc_infer_target *t,
                            eng_err *err) {
    proto_limits dl = proto_default_limits();
    if (!lim) lim = &dl;
    proto__req_init(out);
    memset(t, 0, sizeof *t);
    Inference__ModelInferRequest *q = inference__model_infer_request__unpack(NULL, n, msg);
    if (!q) return eng_err_set(err, ENG_MALFORMED, "the message is not a ModelInferRequest");
    int rc = infer_message_ok(q, t, err);
    if (!rc) rc = infer_fill(q, t, lim, out, err);
    /* raw answers for raw inputs, or when an output the request answers is asked as binary data:
     * gRPC has no per-output choice (raw_output_contents holds every output or none), so one
     * binary output makes them all raw, as Triton answers raw whenever raw is used */
    if (!rc) t->raw = q->n_raw_input_contents > 0 || (out->v2_binary & (out->v2_outputs ? out->v2_outputs : ~0u));
    inference__model_infer_request__free_unpacked(q, NULL);
    if (rc) proto_predict_free(out);
    return rc;
}

/* ---- requests: the other calls ---- */

int proto_grpc_model_request(const uint8_t *msg, size_t n, bool name_optional, char *name, char *version, size_t cap,
                             eng_err *err) {
    /* ModelReadyRequest, ModelMetadataRequest and ModelStatisticsRequest have the same fields and numbers */
    Inference__ModelReadyRequest *q = inference__model_ready_request__unpack(NULL, n, msg);
    if (!q) return eng_err_set(err, ENG_MALFORMED, "the message is not a model request (name, version)");
    int rc = 0;
    if (!q->name[0] && !name_optional) rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "name is empty");
    else if (strlen(q->name) >= cap || strlen(q->version) >= cap)
        rc = eng_err_set(err, ENG_NOT_FOUND, "unknown model \"%.60s...\" (the name is too long)", q->name);
    else snprintf(name, cap, "%s", q->name), snprintf(version, cap, "%s", q->version);
    inference__model_ready_request__free_unpacked(q, NULL);
    return rc;
}

int proto_grpc_index_request(const uint8_t *msg, size_t n, bool *ready_only, eng_err *err) {
    Inference__RepositoryIndexRequest *q = inference__repository_index_request__unpack(NULL, n, msg);
    if (!q) return eng_err_set(err, ENG_MALFORMED, "the message is not a RepositoryIndexRequest");
    *ready_only = q->ready;
    inference__repository_index_request__free_unpacked(q, NULL);
    return 0;
}

int proto_grpc_empty_request(proto_grpc_method m, const uint8_t *msg, size_t n, eng_err *err) {
    /* the three have no fields: any valid protobuf is one (unknown fields are skipped) */
    ProtobufCMessage *q = protobuf_c_message_unpack(m == PROTO_GRPC_SERVER_LIVE    ? &inference__server_live_request__descriptor
                                                    : m == PROTO_GRPC_SERVER_READY ? &inference__server_ready_request__descriptor
                                                                                   : &inference__server_metadata_request__descriptor,
                                                    NULL, n, msg);
    if (!q) return eng_err_set(err, ENG_MALFORMED, "the message is not a %s request", proto_grpc_method_name(m));
    protobuf_c_message_free_unpacked(q, NULL);
    return 0;
}

/* ---- answers ---- */

/* m packed after a prefix into a new buffer. */
static int pack(const ProtobufCMessage *m, uint8_t **out, size_t *len) {
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > UINT32_MAX) return ENG_LIMIT;
    uint8_t *b = malloc(PROTO_GRPC_PREFIX + n);
    if (!b) return ENG_NO_MEMORY;
    proto_grpc_prefix_write(b, (uint32_t)n);
    protobuf_c_message_pack(m, b + PROTO_GRPC_PREFIX);
    *out = b;
    *len = PROTO_GRPC_PREFIX + n;
    return 0;
}

int proto_grpc_bool_response(proto_grpc_method m, bool v, uint8_t **out, size_t *len) {
    /* the three answers are one bool at field 1 */
    Inference__ServerLiveResponse live = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
    Inference__ServerReadyResponse ready = INFERENCE__SERVER_READY_RESPONSE__INIT;
    Inference__ModelReadyResponse model = INFERENCE__MODEL_READY_RESPONSE__INIT;
    live.live = ready.ready = model.ready = v;
    return pack(m == PROTO_GRPC_SERVER_LIVE ? &live.base : m == PROTO_GRPC_SERVER_READY ? &ready.base : &model.base, out, len);
}

int proto_grpc_infer_encode(const proto_predict_resp *r, bool raw, uint8_t **out, size_t *len) {
    proto__v2_answer a;
    int rc = proto__v2_answer_make(r, &a);
    size_t n = (size_t)a.n, n_bytes = 0, n_raw = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        if (a.t[i].type == PROTO__V2_BYTES) n_bytes += a.t[i].n;
        n_raw += raw ? proto__v2_raw_size(&a.t[i]) : 0;
    }
    Inference__ModelInferResponse m = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    Inference__ModelInferResponse__InferOutputTensor *tv = calloc(n + 1, sizeof *tv), **pv = calloc(n + 1, sizeof *pv);
    Inference__InferTensorContents *cv = calloc(n + 1, sizeof *cv);
    ProtobufCBinaryData *rv = calloc(n + 1, sizeof *rv), *bv = raw ? NULL : calloc(n_bytes + 1, sizeof *bv);
    uint8_t *rb = raw ? malloc(n_raw + 1) : NULL;
    if (!rc && (!tv || !pv || !cv || !rv || (!raw && !bv) || (raw && !rb))) rc = ENG_NO_MEMORY;
    /* FP32 and INT32 contents are the typed tensors' own arrays; BYTES point at their strings */
    for (size_t i = 0, b = 0, o = 0; !rc && i < n; i++) {
        const proto__v2_tensor *t = &a.t[i];
        inference__model_infer_response__infer_output_tensor__init(&tv[i]);
        tv[i].name = (char *)t->name, tv[i].datatype = (char *)t->datatype;
        tv[i].shape = (int64_t *)t->shape, tv[i].n_shape = (size_t)t->n_shape;
        pv[i] = &tv[i];
        if (raw) {
            rv[i].data = rb + o, rv[i].len = proto__v2_raw_size(t);
            proto__v2_raw_write(t, rb + o);
            o += rv[i].len;
            continue;
        }
        inference__infer_tensor_contents__init(&cv[i]);
        tv[i].contents = &cv[i];
        if (t->type == PROTO__V2_FP32) cv[i].fp32_contents = t->f32, cv[i].n_fp32_contents = t->n;
        else if (t->type == PROTO__V2_INT32) cv[i].int_contents = t->i32, cv[i].n_int_contents = t->n;
        else {
            cv[i].bytes_contents = bv + b, cv[i].n_bytes_contents = t->n;
            for (size_t k = 0; k < t->n; k++) bv[b + k] = (ProtobufCBinaryData){.len = t->str_len[k], .data = (uint8_t *)t->str[k]};
            b += t->n;
        }
    }
    if (!rc) {
        m.model_name = (char *)a.model_name, m.model_version = (char *)a.model_version, m.id = (char *)a.id;
        m.outputs = pv, m.n_outputs = n;
        if (raw) m.raw_output_contents = rv, m.n_raw_output_contents = n;
        rc = pack(&m.base, out, len);
    }
    free(tv), free(pv), free(cv), free(rv), free(bv), free(rb);
    proto__v2_answer_free(&a);
    return rc;
}

static json_t *load(const char *json, size_t n) { return json_loadb(json, n, JSON_DISABLE_EOF_CHECK, NULL); }

/* The strings of a JSON array into a new char * array (borrowed from the document); NULL when out
 * of memory (an empty array gives a 1-entry allocation). */
static char **strings_of(json_t *a, size_t *n) {
    *n = json_array_size(a);
    char **v = calloc(*n + 1, sizeof *v);
    for (size_t i = 0; v && i < *n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        v[i] = (char *)(s ? s : "");
    }
    return v;
}

int proto_grpc_server_metadata_response(const char *json, size_t n, uint8_t **out, size_t *len) {
    json_t *j = load(json, n);
    const char *name = json_string_value(json_object_get(j, "name")), *ver = json_string_value(json_object_get(j, "version"));
    if (!name || !ver) {
        json_decref(j);
        return ENG_MALFORMED;
    }
    Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
    r.name = (char *)name, r.version = (char *)ver;
    r.extensions = strings_of(json_object_get(j, "extensions"), &r.n_extensions);
    int rc = r.extensions ? pack(&r.base, out, len) : ENG_NO_MEMORY;
    free(r.extensions);
    json_decref(j);
    return rc;
}

/* A TensorMetadata list from [{"name","datatype","shape"}], into v (n entries, shapes in sh). */
static int tensor_meta(json_t *a, Inference__ModelMetadataResponse__TensorMetadata *v, Inference__ModelMetadataResponse__TensorMetadata **pv,
                       int64_t *sh, size_t max_shape) {
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *t = json_array_get(a, i), *s = json_object_get(t, "shape");
        inference__model_metadata_response__tensor_metadata__init(&v[i]);
        const char *name = json_string_value(json_object_get(t, "name")), *dt = json_string_value(json_object_get(t, "datatype"));
        if (!name || !dt || json_array_size(s) > max_shape) return ENG_MALFORMED;
        v[i].name = (char *)name, v[i].datatype = (char *)dt;
        v[i].shape = sh + i * max_shape;
        v[i].n_shape = json_array_size(s);
        for (size_t k = 0; k < v[i].n_shape; k++) v[i].shape[k] = json_integer_value(json_array_get(s, k));
        pv[i] = &v[i];
    }
    return 0;
}

/* Dimensions of a metadata or output tensor's shape the converters take. */
#define MAX_DIMS 8

int proto_grpc_model_metadata_response(const char *json, size_t n, uint8_t **out, size_t *len) {
    json_t *j = load(json, n), *ins = json_object_get(j, "inputs"), *outs = json_object_get(j, "outputs");
    const char *name = json_string_value(json_object_get(j, "name")), *platform = json_string_value(json_object_get(j, "platform"));
    if (!name) {
        json_decref(j);
        return ENG_MALFORMED;
    }
    size_t ni = json_array_size(ins), no = json_array_size(outs), nt = ni + no + 1;
    Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
    Inference__ModelMetadataResponse__TensorMetadata *tv = calloc(nt, sizeof *tv), **pv = calloc(nt, sizeof *pv);
    int64_t *sh = calloc(nt * MAX_DIMS, sizeof *sh);
    r.name = (char *)name, r.platform = (char *)(platform ? platform : "");
    r.versions = strings_of(json_object_get(j, "versions"), &r.n_versions);
    int rc = !tv || !pv || !sh || !r.versions ? ENG_NO_MEMORY : 0;
    if (!rc) rc = tensor_meta(ins, tv, pv, sh, MAX_DIMS);
    if (!rc) rc = tensor_meta(outs, tv + ni, pv + ni, sh + ni * MAX_DIMS, MAX_DIMS);
    r.inputs = pv, r.n_inputs = ni, r.outputs = pv + ni, r.n_outputs = no;
    if (!rc) rc = pack(&r.base, out, len);
    free(tv), free(pv), free(sh), free(r.versions);
    json_decref(j);
    return rc;
}

/* A {"count", "ns"} object as a StatisticDuration, or NULL when absent. */
static Inference__StatisticDuration *duration(json_t *o, Inference__StatisticDuration *d) {
    if (!json_is_object(o)) return NULL;
    inference__statistic_duration__init(d);
    d->count = (uint64_t)json_integer_value(json_object_get(o, "count"));
    d->ns = (uint64_t)json_integer_value(json_object_get(o, "ns"));
    return d;
}

/* The InferStatistics fields by name, in the message's field order. */
#define STAT_FIELDS 8
static const char *const stat_names[STAT_FIELDS] = {"success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
                                                    "cache_hit", "cache_miss"};

int proto_grpc_stats_response(const char *json, size_t n, uint8_t **out, size_t *len) {
    json_t *j = load(json, n), *ms = json_object_get(j, "model_stats");
    if (!json_is_array(ms)) {
        json_decref(j);
        return ENG_MALFORMED;
    }
    size_t k = json_array_size(ms);
    Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    Inference__ModelStatistics *v = calloc(k + 1, sizeof *v), **pv = calloc(k + 1, sizeof *pv);
    Inference__InferStatistics *is = calloc(k + 1, sizeof *is);
    Inference__StatisticDuration *d = calloc((k + 1) * STAT_FIELDS, sizeof *d);
    int rc = !v || !pv || !is || !d ? ENG_NO_MEMORY : 0;
    for (size_t i = 0; !rc && i < k; i++) {
        json_t *m = json_array_get(ms, i), *st = json_object_get(m, "inference_stats");
        const char *name = json_string_value(json_object_get(m, "name")), *ver = json_string_value(json_object_get(m, "version"));
        if (!name) {
            rc = ENG_MALFORMED;
            break;
        }
        inference__model_statistics__init(&v[i]);
        inference__infer_statistics__init(&is[i]);
        v[i].name = (char *)name, v[i].version = (char *)(ver ? ver : "");
        v[i].last_inference = (uint64_t)json_integer_value(json_object_get(m, "last_inference"));
        v[i].inference_count = (uint64_t)json_integer_value(json_object_get(m, "inference_count"));
        v[i].execution_count = (uint64_t)json_integer_value(json_object_get(m, "execution_count"));
        Inference__StatisticDuration **f[STAT_FIELDS] = {&is[i].success,       &is[i].fail,          &is[i].queue,     &is[i].compute_input,
                                                         &is[i].compute_infer, &is[i].compute_output, &is[i].cache_hit, &is[i].cache_miss};
        for (int x = 0; x < STAT_FIELDS; x++) *f[x] = duration(json_object_get(st, stat_names[x]), &d[i * STAT_FIELDS + x]);
        if (json_is_object(st)) v[i].inference_stats = &is[i];
        pv[i] = &v[i];
    }
    r.model_stats = pv, r.n_model_stats = k;
    if (!rc) rc = pack(&r.base, out, len);
    free(v), free(pv), free(is), free(d);
    json_decref(j);
    return rc;
}

int proto_grpc_index_response(const proto_grpc_index_entry *e, int n, uint8_t **out, size_t *len) {
    Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
    Inference__RepositoryIndexResponse__ModelIndex *v = calloc((size_t)n + 1, sizeof *v), **pv = calloc((size_t)n + 1, sizeof *pv);
    int rc = !v || !pv ? ENG_NO_MEMORY : 0;
    for (int i = 0; !rc && i < n; i++) {
        inference__repository_index_response__model_index__init(&v[i]);
        v[i].name = (char *)e[i].name, v[i].version = (char *)e[i].version, v[i].state = (char *)e[i].state;
        v[i].reason = (char *)(e[i].reason ? e[i].reason : "");
        pv[i] = &v[i];
    }
    r.models = pv, r.n_models = (size_t)n;
    if (!rc) rc = pack(&r.base, out, len);
    free(v), free(pv);
    return rc;
}

void proto_grpc_error_message(const char *json, size_t n, char *out, size_t cap) {
    json_t *j = load(json, n), *e = json_object_get(j, "error");
    const char *m = json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "message"));
    if (m) snprintf(out, cap, "%s", m);
    else snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), json);
    json_decref(j);
}

/* ---- codec ---- */

/* The codec: the message (no prefix) is the body; the model it names is the task. */
static int grpc_infer_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    proto_grpc_infer_target t;
    int rc = proto_grpc_infer_decode((const uint8_t *)w->body, w->len, lim, out, &t, err);
    if (rc) return rc;
    /* v2 has no per-token list: its default is the pipeline's "none" */
    if (out->aggregation == PROTO_AGG_TOKENS) out->aggregation = PROTO_AGG_NONE;
    out->grpc_raw = t.raw;
    return 0;
}

static int grpc_infer_encode(const proto_predict_resp *r, char **body, size_t *len, size_t *head_len) {
    uint8_t *out = NULL;
    *head_len = 0;
    int rc = proto_grpc_infer_encode(r, r->req->grpc_raw, &out, len);
    *body = (char *)out;
    return rc;
}

const proto_codec proto_grpc_infer_codec = {.name = "kserve_v2_grpc", .dialect = PROTO_DIALECT_KSERVE, .decode = grpc_infer_decode,
                                            .encode = grpc_infer_encode};
