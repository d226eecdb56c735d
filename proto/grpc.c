/* grpc.c - KServe v2's GRPCInferenceService messages (proto/grpc_service.proto, C from protoc-c at
 * build time) to and from the JSON of the REST v2 routes, and gRPC's own small wire rules (the
 * 5-byte message prefix, grpc-timeout, grpc-message's escaping).
 *
 * Why through JSON: a ModelInfer request becomes the body POST /v2/models/{m}/infer would take and
 * goes through the same parser (proto_v2_infer_parse: the same checks, limits and messages), and its
 * answer is the v2 encoder's JSON re-framed as a ModelInferResponse. So the two protocols cannot
 * drift: a new output tensor, a head or a parameter reaches gRPC with no change here, and the tests
 * compare gRPC's answers with REST's value for value. The cost is a JSON round trip of a request of a
 * few hundred bytes, microseconds against a forward pass of milliseconds (bench/grpc measures the
 * whole call). Depends on json.c only. */
#include "proto/grpc.h"

#include <math.h>
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

/* ---- requests ---- */

/* An InferParameter as JSON (a new reference), or NULL when it holds nothing or out of memory. */
static json_t *param_json(const Inference__InferParameter *p) {
    if (!p) return NULL;
    switch (p->parameter_choice_case) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM: return json_boolean(p->bool_param);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM: return json_integer((json_int_t)p->int64_param);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM: return json_string(p->string_param);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM: return json_real(p->double_param);
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        return p->uint64_param > (uint64_t)INT64_MAX ? json_real((double)p->uint64_param) : json_integer((json_int_t)p->uint64_param);
    default: return NULL;
    }
}

/* Bytes as a JSON string: NULL with err set when they are not UTF-8 (a REST body could not carry
 * them either). */
static json_t *bytes_json(const uint8_t *b, size_t n, size_t input, size_t k, const char *field, eng_err *err) {
    json_t *s = json_stringn((const char *)b, n);
    if (!s) eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].%s[%zu] is not UTF-8 text", input, field, k);
    return s;
}

/* raw_input_contents of a BYTES tensor: elements of a 4-byte little-endian length then the bytes. */
static json_t *raw_bytes_json(const ProtobufCBinaryData *raw, size_t input, eng_err *err) {
    json_t *a = json_array();
    if (!a) {
        eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    size_t o = 0, k = 0;
    while (o < raw->len) {
        if (raw->len - o < 4) goto bad;
        uint32_t l = (uint32_t)raw->data[o] | (uint32_t)raw->data[o + 1] << 8 | (uint32_t)raw->data[o + 2] << 16 |
                     (uint32_t)raw->data[o + 3] << 24;
        o += 4;
        if (l > raw->len - o) goto bad;
        json_t *s = bytes_json(raw->data + o, l, input, k++, "raw_input_contents", err);
        if (!s || json_array_append_new(a, s)) {
            json_decref(a);
            return NULL;
        }
        o += l;
    }
    return a;
bad:
    json_decref(a);
    eng_err_set(err, ENG_INVALID_ARGUMENT,
                "raw_input_contents[%zu]: a BYTES element is a 4-byte little-endian length and that many bytes; the data ends "
                "inside one",
                input);
    return NULL;
}

int proto_grpc_infer_request(const uint8_t *msg, size_t n, proto_grpc_infer_target *t, char **json, size_t *len,
                             eng_err *err) {
    *json = NULL;
    Inference__ModelInferRequest *q = inference__model_infer_request__unpack(NULL, n, msg);
    if (!q) return eng_err_set(err, ENG_MALFORMED, "the message is not a ModelInferRequest");
    int rc = 0;
    json_t *root = NULL;
    memset(t, 0, sizeof *t);
    if (!q->model_name[0]) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "model_name is empty");
        goto out;
    }
    int sl = q->model_version[0] ? snprintf(t->spec, sizeof t->spec, "%s@%s", q->model_name, q->model_version)
                                 : snprintf(t->spec, sizeof t->spec, "%s", q->model_name);
    if (sl < 0 || (size_t)sl >= sizeof t->spec) {
        rc = eng_err_set(err, ENG_NOT_FOUND, "unknown model \"%.60s...\" (the name is too long)", q->model_name);
        goto out;
    }
    t->raw = q->n_raw_input_contents > 0;
    if (t->raw && q->n_raw_input_contents != q->n_inputs) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "raw_input_contents has %zu entries for %zu inputs; send one per input or none",
                         q->n_raw_input_contents, q->n_inputs);
        goto out;
    }
    json_t *ins = json_array(), *outs = json_array(), *params = json_object();
    root = json_object();
    if (!root || !ins || !outs || !params || json_object_set_new(root, "inputs", ins) || json_object_set_new(root, "outputs", outs)) {
        json_decref(ins), json_decref(outs), json_decref(params);
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto out;
    }
    if (q->id[0] && json_object_set_new(root, "id", json_string(q->id))) goto oom_params;
    for (size_t i = 0; i < q->n_parameters; i++) {
        json_t *v = param_json(q->parameters[i]->value);
        if (!v) {
            json_decref(params);
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "parameters[\"%.60s\"] holds no value", q->parameters[i]->key);
            goto out;
        }
        if (json_object_set_new(params, q->parameters[i]->key, v)) goto oom_params;
    }
    if (json_object_set_new(root, "parameters", params)) goto oom;
    for (size_t i = 0; i < q->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *x = q->inputs[i];
        json_t *shape = json_array(), *data = NULL;
        for (size_t k = 0; shape && k < x->n_shape; k++)
            if (json_array_append_new(shape, json_integer((json_int_t)x->shape[k]))) json_decref(shape), shape = NULL;
        if (!shape) goto oom;
        if (t->raw) {
            if (x->contents) {
                json_decref(shape);
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu] has both contents and raw_input_contents", i);
                goto out;
            }
            /* a non-BYTES tensor: no data, the REST parser refuses its datatype by name */
            data = !strcmp(x->datatype, "BYTES") ? raw_bytes_json(&q->raw_input_contents[i], i, err) : json_array();
        } else {
            data = json_array();
            for (size_t k = 0; data && x->contents && k < x->contents->n_bytes_contents; k++) {
                json_t *s = bytes_json(x->contents->bytes_contents[k].data, x->contents->bytes_contents[k].len, i, k,
                                       "contents.bytes_contents", err);
                if (!s || json_array_append_new(data, s)) json_decref(data), data = NULL;
            }
        }
        json_t *tensor = data ? json_pack("{s:s,s:s,s:o,s:o}", "name", x->name, "datatype", x->datatype, "shape", shape, "data", data) : NULL;
        if (!data) json_decref(shape);
        if (!tensor || json_array_append_new(ins, tensor)) {
            rc = data ? eng_err_set(err, ENG_NO_MEMORY, "out of memory") : err ? err->code : ENG_INVALID_ARGUMENT;
            goto out;
        }
    }
    for (size_t i = 0; i < q->n_outputs; i++)
        if (json_array_append_new(outs, json_pack("{s:s}", "name", q->outputs[i]->name))) goto oom;
    if (!q->n_outputs) json_object_del(root, "outputs");
    if (!(*json = json_dumps(root, JSON_COMPACT))) goto oom;
    *len = strlen(*json);
    goto out;
oom_params:
    json_decref(params);
oom:
    rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
out:
    json_decref(root);
    inference__model_infer_request__free_unpacked(q, NULL);
    return rc;
}

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

/* A JSON number (null: NaN) as a float. */
static float json_f32(json_t *v) { return json_is_number(v) ? (float)json_number_value(v) : NAN; }

/* One output tensor's data ("data", flat) into contents, or into raw (a malloc'd buffer). */
static int output_data(json_t *data, const char *dt, Inference__InferTensorContents *c, ProtobufCBinaryData *raw, bool use_raw) {
    size_t n = json_array_size(data);
    if (!strcmp(dt, "BYTES")) {
        size_t total = 0;
        for (size_t i = 0; i < n; i++) total += json_string_length(json_array_get(data, i)) + 4;
        if (use_raw) {
            uint8_t *b = malloc(total + 1);
            if (!b) return ENG_NO_MEMORY;
            size_t o = 0;
            for (size_t i = 0; i < n; i++) {
                json_t *s = json_array_get(data, i);
                uint32_t l = (uint32_t)json_string_length(s);
                b[o] = (uint8_t)l, b[o + 1] = (uint8_t)(l >> 8), b[o + 2] = (uint8_t)(l >> 16), b[o + 3] = (uint8_t)(l >> 24);
                memcpy(b + o + 4, json_string_value(s) ? json_string_value(s) : "", l);
                o += 4 + l;
            }
            raw->data = b, raw->len = o;
            return 0;
        }
        if (!(c->bytes_contents = calloc(n + 1, sizeof *c->bytes_contents))) return ENG_NO_MEMORY;
        c->n_bytes_contents = n;
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_array_get(data, i);
            c->bytes_contents[i].data = (uint8_t *)(json_string_value(s) ? json_string_value(s) : "");
            c->bytes_contents[i].len = json_string_length(s);
        }
        return 0;
    }
    bool f32 = !strcmp(dt, "FP32");
    if (!f32 && strcmp(dt, "INT32")) return ENG_MALFORMED; /* v2.c answers BYTES, FP32 and INT32 */
    if (use_raw) {
        uint8_t *b = malloc(4 * n + 1);
        if (!b) return ENG_NO_MEMORY;
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            if (f32) {
                float f = json_f32(json_array_get(data, i));
                memcpy(&u, &f, 4);
            } else {
                u = (uint32_t)(int32_t)json_integer_value(json_array_get(data, i));
            }
            b[4 * i] = (uint8_t)u, b[4 * i + 1] = (uint8_t)(u >> 8), b[4 * i + 2] = (uint8_t)(u >> 16), b[4 * i + 3] = (uint8_t)(u >> 24);
        }
        raw->data = b, raw->len = 4 * n;
        return 0;
    }
    if (f32) {
        if (!(c->fp32_contents = calloc(n + 1, sizeof *c->fp32_contents))) return ENG_NO_MEMORY;
        c->n_fp32_contents = n;
        for (size_t i = 0; i < n; i++) c->fp32_contents[i] = json_f32(json_array_get(data, i));
    } else {
        if (!(c->int_contents = calloc(n + 1, sizeof *c->int_contents))) return ENG_NO_MEMORY;
        c->n_int_contents = n;
        for (size_t i = 0; i < n; i++) c->int_contents[i] = (int32_t)json_integer_value(json_array_get(data, i));
    }
    return 0;
}

/* A flat copy of data (a nested array, [N, K], read row by row), as a new reference. */
static json_t *flatten(json_t *data) {
    json_t *f = json_array();
    for (size_t i = 0; f && i < json_array_size(data); i++) {
        json_t *e = json_array_get(data, i);
        if (json_is_array(e)) {
            for (size_t k = 0; k < json_array_size(e); k++)
                if (json_array_append(f, json_array_get(e, k))) return json_decref(f), NULL;
        } else if (json_array_append(f, e)) {
            return json_decref(f), NULL;
        }
    }
    return f;
}

int proto_grpc_infer_response(const char *json, size_t n, bool raw, uint8_t **out, size_t *len) {
    json_t *j = load(json, n), *outs = json_object_get(j, "outputs");
    const char *name = json_string_value(json_object_get(j, "model_name"));
    if (!name || !json_is_array(outs)) {
        json_decref(j);
        return ENG_MALFORMED;
    }
    size_t no = json_array_size(outs);
    Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    Inference__ModelInferResponse__InferOutputTensor *tv = calloc(no + 1, sizeof *tv), **pv = calloc(no + 1, sizeof *pv);
    Inference__InferTensorContents *cv = calloc(no + 1, sizeof *cv);
    ProtobufCBinaryData *rv = calloc(no + 1, sizeof *rv);
    int64_t *sh = calloc((no + 1) * MAX_DIMS, sizeof *sh);
    json_t **flat = calloc(no + 1, sizeof *flat);
    int rc = !tv || !pv || !cv || !rv || !sh || !flat ? ENG_NO_MEMORY : 0;
    const char *ver = json_string_value(json_object_get(j, "model_version")), *id = json_string_value(json_object_get(j, "id"));
    r.model_name = (char *)name, r.model_version = (char *)(ver ? ver : ""), r.id = (char *)(id ? id : "");
    for (size_t i = 0; !rc && i < no; i++) {
        json_t *t = json_array_get(outs, i), *s = json_object_get(t, "shape");
        const char *tn = json_string_value(json_object_get(t, "name")), *dt = json_string_value(json_object_get(t, "datatype"));
        if (!tn || !dt || json_array_size(s) > MAX_DIMS) {
            rc = ENG_MALFORMED;
            break;
        }
        inference__model_infer_response__infer_output_tensor__init(&tv[i]);
        inference__infer_tensor_contents__init(&cv[i]);
        tv[i].name = (char *)tn, tv[i].datatype = (char *)dt;
        tv[i].shape = sh + i * MAX_DIMS, tv[i].n_shape = json_array_size(s);
        for (size_t k = 0; k < tv[i].n_shape; k++) tv[i].shape[k] = json_integer_value(json_array_get(s, k));
        if (!(flat[i] = flatten(json_object_get(t, "data")))) rc = ENG_NO_MEMORY;
        else rc = output_data(flat[i], dt, &cv[i], &rv[i], raw);
        if (!raw) tv[i].contents = &cv[i];
        pv[i] = &tv[i];
    }
    r.outputs = pv, r.n_outputs = no;
    if (raw) r.raw_output_contents = rv, r.n_raw_output_contents = no;
    if (!rc) rc = pack(&r.base, out, len);
    for (size_t i = 0; cv && i < no; i++) free(cv[i].bytes_contents), free(cv[i].fp32_contents), free(cv[i].int_contents);
    for (size_t i = 0; rv && i < no; i++) free(rv[i].data);
    for (size_t i = 0; flat && i < no; i++) json_decref(flat[i]);
    free(tv), free(pv), free(cv), free(rv), free(sh), free(flat);
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

static int grpc_infer_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    proto_grpc_infer_target t;
    char *json = NULL;
    size_t jlen = 0;
    memset(out, 0, sizeof *out);
    int rc = proto_grpc_infer_request((const uint8_t *)w->body, w->len, &t, &json, &jlen, err);
    if (!rc) rc = proto_v2_infer_parse(json, jlen, t.spec, lim, out, err);
    free(json);
    if (rc) return rc;
    /* v2 has no per-token list: its default is the pipeline's "none" */
    if (out->aggregation == PROTO_AGG_TOKENS) out->aggregation = PROTO_AGG_NONE;
    out->grpc_raw = t.raw;
    if (!(out->tasks[0] = proto_req_own_string(out, t.spec))) {
        proto_predict_free(out);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    return 0;
}

static char *grpc_infer_encode(const proto_predict_resp *r, size_t *len, size_t *head_len) {
    *head_len = 0;
    proto_predict_resp j = *r;
    j.v2_binary = 0;
    size_t jl = 0, hl = 0;
    char *json = proto_v2_infer_encode_binary(&j, &jl, &hl);
    uint8_t *out = NULL;
    int rc = json ? proto_grpc_infer_response(json, jl, r->req->grpc_raw, &out, len) : ENG_NO_MEMORY;
    free(json);
    return rc ? NULL : (char *)out;
}

const proto_codec proto_grpc_infer_codec = {.name = "kserve_v2_grpc", .dialect = PROTO_DIALECT_KSERVE, .decode = grpc_infer_decode,
                                            .encode = grpc_infer_encode};
