/* v2.c - KServe's open inference protocol (v2): the infer request (BYTES tensors "text" and
 * "text_pair", "parameters", "outputs"), its answer as typed tensors by head, a task's model
 * metadata and the live/ready answers. One table per head lists its output tensors, so the
 * request check, the answer and the metadata agree. Reuses parse.c for texts and parameters.
 *
 * The binary tensor data extension rides on the same path: a request's binary BYTES tensors are
 * decoded into the JSON document's "data" before the tensors are read (every size checked against
 * the bytes there are, nothing read past them). An answer is first a list of typed tensors
 * (proto__v2_answer_make: name, datatype, shape, values), then written out as JSON data, as
 * little-endian bytes after the JSON (binary outputs), or by grpc.c as a ModelInferResponse, so the
 * three cannot differ. The outputs a request names and its binary_data flags are read by the
 * functions grpc.c's decoder calls too (proto__v2_output_named, proto__v2_output_binary). */
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A v2 BYTES tensor: {"name","shape":[N] or [N, 1],"datatype":"BYTES","data":[...]}, its data flat
 * or nested ([["a"], ["b"]]: the protocol lets data follow the shape). Returns the data as a flat
 * array (a new reference; its strings are the document's), or NULL with err set. */
static json_t *v2_bytes(json_t *t, size_t i, eng_err *err) {
    json_t *shape = json_object_get(t, "shape"), *data = json_object_get(t, "data");
    const char *dt = json_string_value(json_object_get(t, "datatype"));
    if (!dt || strcmp(dt, "BYTES")) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].datatype must be \"BYTES\"", i);
        return NULL;
    }
    if (!json_is_array(data)) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].data must be an array of strings", i);
        return NULL;
    }
    json_t *flat = json_array();
    if (!flat) {
        eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    for (size_t k = 0; k < json_array_size(data); k++) {
        json_t *e = json_array_get(data, k);
        if (json_is_array(e) && json_array_size(e) == 1) e = json_array_get(e, 0);
        else if (json_is_array(e)) {
            json_decref(flat);
            eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].data[%zu]: a nested row must hold one string (shape [N, 1])", i, k);
            return NULL;
        }
        json_array_append(flat, e);
    }
    if (!json_is_array(shape) || json_array_size(shape) < 1 || json_array_size(shape) > 2 ||
        json_integer_value(json_array_get(shape, 0)) != (json_int_t)json_array_size(flat) ||
        (json_array_size(shape) == 2 && json_integer_value(json_array_get(shape, 1)) != 1)) {
        json_decref(flat);
        eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].shape must be [N] (or [N, 1]) with N the number of data entries", i);
        return NULL;
    }
    return flat;
}

/* The v2 output tensors of each head: one tensor per output for all of a request's inputs, with a
 * row per input ([N]), per input and label ([N, K]) or per tagging entity ([M]). */
typedef enum { V2_PER_INPUT, V2_PER_LABEL, V2_PER_ENTITY } v2_dim;
typedef struct {
    const char *name, *datatype;
    unsigned bit;
    v2_dim dim;
} v2_output;
static const v2_output v2_cls[] = {{"label", "BYTES", PROTO_V2_OUT_LABEL, V2_PER_INPUT},
                                   {"score", "FP32", PROTO_V2_OUT_SCORE, V2_PER_INPUT},
                                   {"scores", "FP32", PROTO_V2_OUT_SCORES, V2_PER_LABEL},
                                   {0}};
static const v2_output v2_ml[] = {{"label", "BYTES", PROTO_V2_OUT_LABEL, V2_PER_INPUT},
                                  {"score", "FP32", PROTO_V2_OUT_SCORE, V2_PER_INPUT},
                                  {"scores", "FP32", PROTO_V2_OUT_SCORES, V2_PER_LABEL},
                                  {"labels", "BYTES", PROTO_V2_OUT_LABELS, V2_PER_LABEL},
                                  {0}};
static const v2_output v2_reg[] = {{"value", "FP32", PROTO_V2_OUT_VALUE, V2_PER_INPUT}, {0}};
static const v2_output v2_qa[] = {{"answer", "BYTES", PROTO_V2_OUT_ANSWER, V2_PER_INPUT},
                                  {"start", "INT32", PROTO_V2_OUT_START, V2_PER_INPUT},
                                  {"end", "INT32", PROTO_V2_OUT_END, V2_PER_INPUT},
                                  {"score", "FP32", PROTO_V2_OUT_SCORE, V2_PER_INPUT},
                                  {0}};
static const v2_output v2_tag[] = {{"entity", "BYTES", PROTO_V2_OUT_ENTITY, V2_PER_ENTITY},
                                   {"score", "FP32", PROTO_V2_OUT_SCORE, V2_PER_ENTITY},
                                   {"word", "BYTES", PROTO_V2_OUT_WORD, V2_PER_ENTITY},
                                   {"start", "INT32", PROTO_V2_OUT_START, V2_PER_ENTITY},
                                   {"end", "INT32", PROTO_V2_OUT_END, V2_PER_ENTITY},
                                   {"seq", "INT32", PROTO_V2_OUT_SEQ, V2_PER_ENTITY},
                                   {"input", "INT32", PROTO_V2_OUT_INPUT, V2_PER_ENTITY},
                                   {0}};

static const v2_output *v2_outputs(proto_head_kind k) {
    switch (k) {
    case PROTO_HEAD_CLASSIFICATION: return v2_cls;
    case PROTO_HEAD_MULTILABEL: return v2_ml;
    case PROTO_HEAD_REGRESSION: return v2_reg;
    case PROTO_HEAD_QA: return v2_qa;
    case PROTO_HEAD_TAGGING: return v2_tag;
    }
    return v2_cls;
}

unsigned proto_v2_outputs_of(proto_head_kind k) {
    unsigned m = 0;
    for (const v2_output *o = v2_outputs(k); o->name; o++) m |= o->bit;
    return m;
}

void proto_v2_outputs_describe(proto_head_kind k, char *buf, size_t n) {
    size_t o = 0;
    if (n) buf[0] = '\0';
    for (const v2_output *x = v2_outputs(k); x->name && o < n; x++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", x->name);
}

int proto__v2_output_named(size_t i, const char *name, proto__v2_outs *o, unsigned *bit, eng_err *err) {
    static const v2_output *const heads[] = {v2_cls, v2_ml, v2_reg, v2_qa, v2_tag};
    unsigned b = 0;
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
        for (const v2_output *x = heads[h]; x->name; x++)
            if (!strcmp(name, x->name)) b = x->bit;
    if (!b)
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "outputs[%zu]: unknown output \"%.60s\" (label, score, scores, labels, value, answer, start, end, "
                           "entity, word, seq, input)",
                           i, name);
    if (o->mask & b) return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu]: \"%s\" is asked for twice", i, name);
    o->mask |= b;
    *bit = b;
    return 0;
}

int proto__v2_output_binary(size_t i, const proto__value *v, unsigned bit, proto__v2_outs *o, eng_err *err) {
    if (v->kind == PROTO__NULL) return 0;
    if (v->kind != PROTO__BOOL)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu].parameters.binary_data must be true or false", i);
    if (v->b) o->bin_on |= bit;
    else o->bin_off |= bit;
    return 0;
}

void proto__v2_outputs_end(proto_predict_req *r, const proto__v2_outs *o) {
    /* r->v2_binary holds "binary_data_output" (all or none); an output's own flag overrides it */
    r->v2_outputs = o->mask;
    r->v2_binary = (r->v2_binary & ~o->bin_off) | o->bin_on;
}

/* "outputs": [{"name": "label", "parameters": {"binary_data": true}}, ...]: each name once, each an
 * output tensor of some head (whether the task's head answers it is the server's check, once it
 * knows the task). */
static int v2_requested_outputs(json_t *outs, proto__v2_outs *o, eng_err *err) {
    if (!outs || json_is_null(outs)) return 0;
    if (!json_is_array(outs)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"outputs\" must be an array of {\"name\": ...}");
    for (size_t i = 0; i < json_array_size(outs); i++) {
        json_t *e = json_array_get(outs, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name) return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu] must be an object with a \"name\"", i);
        unsigned bit;
        int rc = proto__v2_output_named(i, name, o, &bit, err);
        if (rc) return rc;
        json_t *params = json_object_get(e, "parameters");
        if (params && !json_is_null(params) && !json_is_object(params))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu].parameters must be an object", i);
        proto__value b = proto__value_json(json_is_object(params) ? json_object_get(params, "binary_data") : NULL);
        if ((rc = proto__v2_output_binary(i, &b, bit, o, err))) return rc;
    }
    return 0;
}

/* ---- the binary tensor data extension (Triton's extension_binary_data.md) ---- */

/* Bytes of one element of a v2 datatype: 0 for BYTES (variable), -1 for a name the protocol does not
 * have. */
static int v2_datatype_size(const char *dt) {
    static const struct {
        const char *name;
        int size;
    } t[] = {{"BOOL", 1},  {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8}, {"INT8", 1}, {"INT16", 2}, {"INT32", 4},
             {"INT64", 8}, {"FP16", 2},  {"FP32", 4},   {"FP64", 8},   {"BF16", 2},   {"BYTES", 0}};
    for (size_t i = 0; dt && i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(dt, t[i].name)) return t[i].size;
    return -1;
}

/* The element count of a tensor's "shape" (non-negative integers), or -1 with err set. */
static long long v2_shape_count(json_t *shape, size_t i, eng_err *err) {
    if (!json_is_array(shape)) return eng_err_set(err, ENG_MALFORMED, "inputs[%zu].shape must be an array of sizes", i), -1;
    unsigned long long n = 1;
    for (size_t k = 0; k < json_array_size(shape); k++) {
        json_t *d = json_array_get(shape, k);
        json_int_t v = json_is_integer(d) ? json_integer_value(d) : -1;
        if (v < 0) return eng_err_set(err, ENG_MALFORMED, "inputs[%zu].shape[%zu] must be a non-negative integer", i, k), -1;
        if (v && n > (unsigned long long)LLONG_MAX / (unsigned long long)v)
            return eng_err_set(err, ENG_MALFORMED, "inputs[%zu].shape holds more elements than any body", i), -1;
        n *= (unsigned long long)v;
    }
    return (long long)n;
}

static uint32_t v2_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The BYTES elements of one binary tensor (n bytes at p) as JSON strings; count: the shape's. Returns
 * a new array, or NULL with err set. */
static json_t *v2_binary_strings(const unsigned char *p, size_t n, long long count, size_t i, eng_err *err) {
    json_t *a = json_array();
    if (!a) return eng_err_set(err, ENG_NO_MEMORY, "out of memory"), NULL;
    size_t o = 0;
    long long k = 0;
    for (; o < n; k++) {
        if (k == count) {
            eng_err_set(err, ENG_MALFORMED, "inputs[%zu]: the binary data holds more than the %lld BYTES elements its shape says", i,
                        count);
            goto bad;
        }
        if (n - o < 4) {
            eng_err_set(err, ENG_MALFORMED, "inputs[%zu]: BYTES element %lld's 4-byte length runs past the tensor's %zu bytes", i, k, n);
            goto bad;
        }
        uint32_t l = v2_le32(p + o);
        o += 4;
        if (l > n - o) {
            eng_err_set(err, ENG_MALFORMED, "inputs[%zu]: BYTES element %lld of %u bytes runs past the tensor's %zu bytes", i, k, l, n);
            goto bad;
        }
        if (memchr(p + o, 0, l)) {
            eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu]: BYTES element %lld holds a NUL byte", i, k);
            goto bad;
        }
        json_t *s = json_stringn((const char *)p + o, l); /* NULL: not UTF-8 (jansson checks) */
        if (!s) {
            eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu]: BYTES element %lld is not valid UTF-8", i, k);
            goto bad;
        }
        if (json_array_append_new(a, s)) {
            eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            goto bad;
        }
        o += l;
    }
    if (k != count) {
        eng_err_set(err, ENG_MALFORMED, "inputs[%zu]: the binary data holds %lld BYTES elements, its shape says %lld", i, k, count);
        goto bad;
    }
    return a;
bad:
    json_decref(a);
    return NULL;
}

/* Every input with "parameters": {"binary_data_size": n} takes the next n bytes of bin (bin_len
 * bytes, what follows the JSON header); a BYTES tensor's elements become its "data", so the rest of
 * the parse reads binary and JSON tensors alike (the strings then belong to the document). Another
 * datatype's bytes are only checked against its shape: the datatype check refuses it after. */
static int v2_binary_inputs(json_t *ins, const unsigned char *bin, size_t bin_len, size_t header_len, eng_err *err) {
    size_t off = 0;
    for (size_t i = 0; json_is_array(ins) && i < json_array_size(ins); i++) {
        json_t *t = json_array_get(ins, i), *params = json_object_get(t, "parameters");
        json_t *bs = json_is_object(params) ? json_object_get(params, "binary_data_size") : NULL;
        if (!bs || json_is_null(bs)) continue;
        if (!json_is_integer(bs) || json_integer_value(bs) < 0)
            return eng_err_set(err, ENG_MALFORMED, "inputs[%zu].parameters.binary_data_size must be a non-negative integer", i);
        unsigned long long size = (unsigned long long)json_integer_value(bs);
        if (json_object_get(t, "data"))
            return eng_err_set(err, ENG_MALFORMED, "inputs[%zu] has both \"data\" and a binary_data_size: send one of them", i);
        if (size > bin_len - off)
            return eng_err_set(err, ENG_MALFORMED,
                               "inputs[%zu].parameters.binary_data_size %llu runs past the body's end: %zu bytes follow the "
                               "%zu-byte JSON header, %zu of them left for this input",
                               i, size, bin_len, header_len, bin_len - off);
        const char *dt = json_string_value(json_object_get(t, "datatype"));
        int es = v2_datatype_size(dt);
        long long count = v2_shape_count(json_object_get(t, "shape"), i, err);
        if (count < 0) return err ? err->code : ENG_MALFORMED;
        if (es > 0 && ((unsigned long long)count > size / (unsigned)es || (unsigned long long)count * (unsigned)es != size))
            return eng_err_set(err, ENG_MALFORMED,
                               "inputs[%zu].parameters.binary_data_size %llu disagrees with its datatype and shape: %lld "
                               "%s elements of %d bytes each",
                               i, size, count, dt, es);
        if (es == 0) {
            json_t *data = v2_binary_strings(bin + off, (size_t)size, count, i, err);
            if (!data) return err ? err->code : ENG_MALFORMED;
            if (json_object_set_new(t, "data", data)) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        }
        off += (size_t)size;
    }
    if (off != bin_len)
        return eng_err_set(err, ENG_MALFORMED,
                           "%zu bytes follow the %zu-byte JSON header (Inference-Header-Content-Length), but the inputs' "
                           "binary_data_size add up to %zu",
                           bin_len, header_len, off);
    return 0;
}

int proto_v2_infer_parse(const char *body, size_t len, const char *task, const proto_limits *lim, proto_predict_req *r,
                         eng_err *err) {
    return proto_v2_infer_parse_binary(body, len, len, task, lim, r, err);
}

int proto_v2_infer_parse_binary(const char *body, size_t len, size_t header_len, const char *task, const proto_limits *lim,
                                proto_predict_req *r, eng_err *err) {
    if (header_len > len) {
        memset(r, 0, sizeof *r);
        return eng_err_set(err, ENG_MALFORMED, "Inference-Header-Content-Length %zu is past the body's end (%zu bytes)", header_len,
                           len);
    }
    proto_limits dl;
    json_t *root = proto__req_begin(body, header_len, &lim, &dl, r, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    int rc;
    json_t *ins = json_object_get(root, "inputs"), *text = NULL, *pair = NULL;
    if ((rc = v2_binary_inputs(ins, (const unsigned char *)body + header_len, len - header_len, header_len, err))) goto bad;
    if (!json_is_array(ins) || json_array_size(ins) < 1 || json_array_size(ins) > 2) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"inputs\" must hold a BYTES tensor \"text\" and optionally \"text_pair\"");
        goto bad;
    }
    for (size_t i = 0; i < json_array_size(ins); i++) {
        json_t *t = json_array_get(ins, i), *d;
        const char *name = json_string_value(json_object_get(t, "name"));
        if (!json_is_object(t) || !name) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu] must be a tensor with a name", i);
            goto bad;
        }
        if (!(d = v2_bytes(t, i, err))) {
            rc = err ? err->code : ENG_INVALID_ARGUMENT;
            goto bad;
        }
        json_t **slot = !strcmp(name, "text_pair") ? &pair : (!strcmp(name, "text") || json_array_size(ins) == 1) ? &text : NULL;
        if (slot && *slot) {
            json_decref(d);
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu]: a second tensor named \"%.60s\"", i, name);
            goto bad;
        }
        if (slot) *slot = d;
        else {
            json_decref(d);
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu]: unknown tensor \"%.60s\" (text, text_pair)", i, name);
            goto bad;
        }
    }
    if (!text) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "no \"text\" input tensor");
        goto bad;
    }
    size_t n = json_array_size(text);
    if (pair && json_array_size(pair) != n) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"text_pair\" must have as many entries as \"text\"");
        goto bad;
    }
    if (n == 0) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "the \"text\" tensor is empty");
        goto bad;
    }
    if (n > (size_t)lim->max_inputs) {
        rc = eng_err_set(err, ENG_LIMIT, "the \"text\" tensor has %zu entries, over the limit of %d", n, lim->max_inputs);
        goto bad;
    }
    if (!(r->inputs = calloc(n, sizeof *r->inputs)) || !(r->tasks = malloc(sizeof *r->tasks))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto bad;
    }
    r->n_inputs = (int)n;
    r->tasks[r->n_tasks++] = task;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(text, i);
        char where[48];
        snprintf(where, sizeof where, "text[%zu]", i);
        if (!json_is_string(s)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s must be a string", where);
            goto bad;
        }
        if ((rc = proto__set_text(&r->inputs[i], s, pair ? json_array_get(pair, i) : NULL, lim, where, err))) goto bad;
    }
    json_t *params = json_object_get(root, "parameters");
    if (params && !json_is_null(params)) {
        if (!json_is_object(params)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"parameters\" must be an object");
            goto bad;
        }
        if ((rc = proto__parse_common(params, lim, r, err))) goto bad;
    }
    proto__v2_outs outs = {0};
    if ((rc = v2_requested_outputs(json_object_get(root, "outputs"), &outs, err))) goto bad;
    proto__value all_binary = proto__value_json(json_is_object(params) ? json_object_get(params, "binary_data_output") : NULL);
    if ((rc = proto__param_set(r, "binary_data_output", &all_binary, lim, err))) goto bad;
    proto__v2_outputs_end(r, &outs);
    json_t *id = json_object_get(root, "id");
    if (id && !json_is_null(id) && !json_is_string(id)) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"id\" must be a string");
        goto bad;
    }
    r->v2_id = json_string_value(id);
    json_decref(text), json_decref(pair); /* the strings stay the document's */
    return 0;
bad:
    json_decref(text), json_decref(pair);
    proto_predict_free(r);
    return rc;
}

/* ---- the answer: typed tensors, then JSON, binary data or (grpc.c) protobuf ---- */

/* Filling one tensor's values in order; bad once a value does not fit the shape or a string is
 * not UTF-8 (JSON could not carry it, so no wire does). */
typedef struct {
    proto__v2_tensor *t;
    size_t k;
    int bad;
} v2_fill;

static void put_str(v2_fill *f, const char *s, size_t n) {
    if (!s || f->k >= f->t->n || !proto__utf8_valid(s, n)) {
        f->bad = 1;
        return;
    }
    f->t->str[f->k] = s, f->t->str_len[f->k++] = n;
}

static void put_f32(v2_fill *f, float v) {
    if (f->k >= f->t->n) f->bad = 1;
    else f->t->f32[f->k++] = isfinite(v) ? v : NAN; /* JSON's null: one NaN on every wire */
}

static void put_i32(v2_fill *f, int32_t v) {
    if (f->k >= f->t->n) f->bad = 1;
    else f->t->i32[f->k++] = v;
}

/* Label i's wire name (proto_label_name), a LABEL_i fallback kept in the tensor's names_. */
static void put_label(v2_fill *f, const char *const *labels, int i) {
    if (f->k >= f->t->n || !f->t->names_) {
        f->bad = 1;
        return;
    }
    char *b = f->t->names_ + f->k * PROTO_LABEL_BUF;
    const char *s = proto_label_name(labels, i, b, PROTO_LABEL_BUF);
    put_str(f, s, strlen(s));
}

/* The values of one output tensor over every input of r (results of task 0 of each input). */
static void v2_values(const proto_predict_resp *r, proto_head_kind kind, unsigned bit, v2_fill *f) {
    for (int i = 0; !f->bad && i < r->n_inputs; i++) {
        const proto_task_result *t = &r->results[(size_t)i * r->n_tasks];
        switch (kind) {
        case PROTO_HEAD_CLASSIFICATION:
        case PROTO_HEAD_MULTILABEL: {
            int best = t->label;
            if (kind == PROTO_HEAD_MULTILABEL)
                for (int j = best = 0; j < t->n_labels; j++)
                    if (t->scores[j] > t->scores[best]) best = j;
            if (bit == PROTO_V2_OUT_LABEL) put_label(f, t->labels, best);
            if (bit == PROTO_V2_OUT_SCORE) put_f32(f, t->scores[best]);
            for (int j = 0; bit == PROTO_V2_OUT_SCORES && j < t->n_labels; j++) put_f32(f, t->scores[j]);
            if (bit == PROTO_V2_OUT_LABELS) { /* the labels over the threshold in label order, then "" to K */
                int k = 0;
                for (int j = 0; j < t->n_labels; j++)
                    if (t->scores[j] > 0.5f) put_label(f, t->labels, j), k++;
                for (; k < t->n_labels; k++) put_str(f, "", 0);
            }
            break;
        }
        case PROTO_HEAD_REGRESSION: put_f32(f, t->value); break;
        case PROTO_HEAD_QA: {
            int has = t->has_answer;
            if (bit == PROTO_V2_OUT_ANSWER) put_str(f, has && t->ans_text ? t->ans_text : "", has && t->ans_text ? t->ans_text_len : 0);
            if (bit == PROTO_V2_OUT_START) put_i32(f, has ? t->ans_start : -1);
            if (bit == PROTO_V2_OUT_END) put_i32(f, has ? t->ans_end : -1);
            if (bit == PROTO_V2_OUT_SCORE) put_f32(f, has ? t->ans_score : 0.0f);
            break;
        }
        case PROTO_HEAD_TAGGING:
            for (int e = 0; !f->bad && e < t->n_entities; e++) {
                const proto_entity *g = &t->entities[e];
                if (bit == PROTO_V2_OUT_ENTITY) put_str(f, g->name, g->name ? strlen(g->name) : 0);
                if (bit == PROTO_V2_OUT_SCORE) put_f32(f, g->score);
                if (bit == PROTO_V2_OUT_WORD) put_str(f, g->word ? g->word : "", g->word ? g->word_len : 0);
                if (bit == PROTO_V2_OUT_START) put_i32(f, g->start);
                if (bit == PROTO_V2_OUT_END) put_i32(f, g->end);
                if (bit == PROTO_V2_OUT_SEQ) put_i32(f, g->seq);
                if (bit == PROTO_V2_OUT_INPUT) put_i32(f, i);
            }
            break;
        }
    }
}

/* Tensor o of r's answer into t: its shape from the head's table, then its values. */
static int v2_tensor_make(const proto_predict_resp *r, const v2_output *o, proto__v2_tensor *t) {
    const proto_task_result *t0 = &r->results[0];
    int64_t rows = r->n_inputs;
    if (o->dim == V2_PER_ENTITY)
        for (int i = rows = 0; i < r->n_inputs; i++) rows += r->results[(size_t)i * r->n_tasks].n_entities;
    t->name = o->name, t->datatype = o->datatype, t->bit = o->bit;
    t->type = !strcmp(o->datatype, "BYTES") ? PROTO__V2_BYTES : !strcmp(o->datatype, "FP32") ? PROTO__V2_FP32 : PROTO__V2_INT32;
    t->shape[0] = rows, t->n_shape = 1;
    if (o->dim == V2_PER_LABEL) t->shape[1] = t0->n_labels, t->n_shape = 2;
    t->n = (size_t)rows * (o->dim == V2_PER_LABEL ? (size_t)(t0->n_labels > 0 ? t0->n_labels : 0) : 1);
    if (t->type == PROTO__V2_BYTES) {
        t->str = calloc(t->n + 1, sizeof *t->str);
        t->str_len = calloc(t->n + 1, sizeof *t->str_len);
        if (o->bit == PROTO_V2_OUT_LABEL || o->bit == PROTO_V2_OUT_LABELS) t->names_ = malloc((t->n + 1) * PROTO_LABEL_BUF);
        if (!t->str || !t->str_len || ((o->bit == PROTO_V2_OUT_LABEL || o->bit == PROTO_V2_OUT_LABELS) && !t->names_))
            return ENG_NO_MEMORY;
    } else if (t->type == PROTO__V2_FP32) {
        if (!(t->f32 = calloc(t->n + 1, sizeof *t->f32))) return ENG_NO_MEMORY;
    } else if (!(t->i32 = calloc(t->n + 1, sizeof *t->i32))) {
        return ENG_NO_MEMORY;
    }
    v2_fill f = {.t = t};
    v2_values(r, t0->kind, o->bit, &f);
    /* every tensor holds exactly what its shape says: never a tensor without its data */
    return f.bad || f.k != t->n ? ENG_INTERNAL : 0;
}

static bool text_ok(const char *s) { return s && proto__utf8_valid(s, strlen(s)); }

int proto__v2_answer_make(const proto_predict_resp *r, proto__v2_answer *a) {
    memset(a, 0, sizeof *a);
    if (r->n_tasks != 1 || r->n_inputs < 1) return ENG_INTERNAL;
    const proto_task_result *t0 = &r->results[0];
    a->model_name = t0->task, a->model_version = t0->version, a->id = r->v2_id ? r->v2_id : r->request_id;
    if (!text_ok(a->model_name) || !text_ok(a->model_version) || !text_ok(a->id)) return ENG_INTERNAL;
    int n = 0;
    for (const v2_output *o = v2_outputs(t0->kind); o->name; o++) n++;
    if (!(a->t = calloc((size_t)n + 1, sizeof *a->t))) return ENG_NO_MEMORY;
    for (const v2_output *o = v2_outputs(t0->kind); o->name; o++) {
        if (r->v2_outputs && !(r->v2_outputs & o->bit)) continue;
        int rc = v2_tensor_make(r, o, &a->t[a->n++]);
        if (rc) return rc;
    }
    return 0;
}

void proto__v2_answer_free(proto__v2_answer *a) {
    for (int i = 0; a->t && i < a->n; i++)
        free(a->t[i].str), free(a->t[i].str_len), free(a->t[i].f32), free(a->t[i].i32), free(a->t[i].names_);
    free(a->t);
    memset(a, 0, sizeof *a);
}

size_t proto__v2_raw_size(const proto__v2_tensor *t) {
    size_t n = 4 * t->n;
    for (size_t k = 0; t->type == PROTO__V2_BYTES && k < t->n; k++) n += t->str_len[k];
    return n;
}

static void v2_put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

void proto__v2_raw_write(const proto__v2_tensor *t, uint8_t *p) {
    for (size_t k = 0; k < t->n; k++) {
        uint32_t u;
        if (t->type == PROTO__V2_BYTES) {
            v2_put_le32(p, (uint32_t)t->str_len[k]);
            if (t->str_len[k]) memcpy(p + 4, t->str[k], t->str_len[k]);
            p += 4 + t->str_len[k];
            continue;
        }
        if (t->type == PROTO__V2_INT32) u = (uint32_t)t->i32[k];
        else memcpy(&u, &t->f32[k], sizeof u);
        v2_put_le32(p, u);
        p += 4;
    }
}

static json_t *v2_shape_json(const proto__v2_tensor *t) {
    return t->n_shape == 2 ? json_pack("[I,I]", (json_int_t)t->shape[0], (json_int_t)t->shape[1]) : json_pack("[I]", (json_int_t)t->shape[0]);
}

static json_t *v2_data_json(const proto__v2_tensor *t) {
    json_t *a = json_array();
    int bad = !a;
    for (size_t k = 0; !bad && k < t->n; k++)
        bad = json_array_append_new(a, t->type == PROTO__V2_BYTES  ? json_stringn(t->str[k], t->str_len[k])
                                       : t->type == PROTO__V2_FP32 ? proto__num(t->f32[k])
                                                                   : json_integer(t->i32[k]));
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

char *proto_v2_infer_encode(const proto_predict_resp *r, size_t *len) {
    proto_predict_resp j = *r;
    size_t header_len;
    j.v2_binary = 0;
    return proto_v2_infer_encode_binary(&j, len, &header_len);
}

char *proto_v2_infer_encode_binary(const proto_predict_resp *r, size_t *len, size_t *header_len) {
    *header_len = 0;
    proto__v2_answer a;
    if (proto__v2_answer_make(r, &a)) {
        proto__v2_answer_free(&a);
        return NULL;
    }
    json_t *outs = json_array();
    int bad = !outs, any_binary = 0;
    size_t bin = 0;
    for (int i = 0; !bad && i < a.n; i++) {
        const proto__v2_tensor *t = &a.t[i];
        if (r->v2_binary & t->bit) { /* its bytes follow the JSON, in output order */
            size_t sz = proto__v2_raw_size(t);
            bin += sz;
            any_binary = 1;
            bad |= json_array_append_new(outs, json_pack("{s:s,s:s,s:o,s:{s:I}}", "name", t->name, "datatype", t->datatype, "shape",
                                                         v2_shape_json(t), "parameters", "binary_data_size", (json_int_t)sz));
            continue;
        }
        json_t *d = v2_data_json(t);
        bad |= !d || json_array_append_new(outs, json_pack("{s:s,s:s,s:o,s:o}", "name", t->name, "datatype", t->datatype, "shape",
                                                           v2_shape_json(t), "data", d));
    }
    size_t jl = 0;
    char *text = bad ? (json_decref(outs), NULL)
                     : proto__dump(json_pack("{s:s,s:s,s:s,s:o}", "model_name", a.model_name, "model_version", a.model_version, "id",
                                             a.id, "outputs", outs),
                                   &jl);
    char *all = text && bin ? realloc(text, jl + bin + 1) : text;
    if (!all) {
        free(text);
        proto__v2_answer_free(&a);
        return NULL;
    }
    size_t o = jl;
    for (int i = 0; bin && i < a.n; i++)
        if (r->v2_binary & a.t[i].bit) {
            proto__v2_raw_write(&a.t[i], (uint8_t *)all + o);
            o += proto__v2_raw_size(&a.t[i]);
        }
    all[jl + bin] = '\0';
    proto__v2_answer_free(&a);
    *len = jl + bin;
    *header_len = any_binary ? jl : 0;
    return all;
}

char *proto_v2_model_encode(const proto_task_info *t, size_t *len) {
    json_t *vs = json_array(), *outs = json_array();
    int bad = !vs || !outs;
    if (!t->versions) bad |= json_array_append_new(vs, json_string(t->version));
    for (int i = 0; !bad && t->versions && i < t->n_versions; i++)
        if (strcmp(t->versions[i].state, "failed")) bad |= json_array_append_new(vs, json_string(t->versions[i].version));
    /* a task never loaded (memory budget) has no known head yet: no outputs listed */
    for (const v2_output *o = v2_outputs(t->head); !bad && t->head_known && o->name; o++)
        bad |= json_array_append_new(outs, json_pack("{s:s,s:s,s:o}", "name", o->name, "datatype", o->datatype, "shape",
                                                     o->dim == V2_PER_LABEL ? json_pack("[i,i]", -1, t->n_labels)
                                                                            : json_pack("[i]", -1)));
    if (bad) {
        json_decref(vs);
        json_decref(outs);
        return NULL;
    }
    return proto__dump(json_pack("{s:s,s:o,s:s,s:[{s:s,s:s,s:[i]},{s:s,s:s,s:[i]}],s:o}", "name", t->name, "versions", vs,
                          "platform", "adapterd", "inputs", "name", "text", "datatype", "BYTES", "shape", -1, "name",
                          "text_pair", "datatype", "BYTES", "shape", -1, "outputs", outs),
                len);
}

char *proto_v2_bool_encode(const char *key, int value, size_t *len) { return proto__dump(json_pack("{s:b}", key, value), len); }

char *proto_v2_server_encode(const char *name, const char *version, const char *const *extensions, int n, size_t *len) {
    json_t *ext = proto__strings(extensions, n);
    if (!ext) return NULL;
    return proto__dump(json_pack("{s:s,s:s,s:o}", "name", name, "version", version, "extensions", ext), len);
}

char *proto_v2_stats_encode(const char *name, const char *version, uint64_t count, double seconds, size_t *len) {
    json_int_t n = (json_int_t)count, ns = (json_int_t)(seconds * 1e9);
    return proto__dump(json_pack("{s:[{s:s,s:s,s:I,s:I,s:{s:{s:I,s:I}}}]}", "model_stats", "name", name, "version", version,
                                 "inference_count", n, "execution_count", n, "inference_stats", "success", "count", n, "ns", ns),
                       len);
}

/* ---- codec ---- */

/* The task comes from the path ("name" or "name@version"); the body is JSON, or JSON and binary tensors. */
static int v2_infer_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    int rc = proto_v2_infer_parse_binary(w->body, w->len, w->header_len, w->task ? w->task : "", lim, out, err);
    if (rc) return rc;
    /* v2 has no per-token list: its default is the pipeline's "none" */
    if (out->aggregation == PROTO_AGG_TOKENS) out->aggregation = PROTO_AGG_NONE;
    if (!(out->tasks[0] = proto_req_own_string(out, w->task ? w->task : ""))) {
        proto_predict_free(out);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    return 0;
}

static int v2_infer_encode(const proto_predict_resp *r, char **body, size_t *len, size_t *head_len) {
    return (*body = proto_v2_infer_encode_binary(r, len, head_len)) ? 0 : ENG_NO_MEMORY;
}

const proto_codec proto_v2_infer_codec = {.name = "kserve_v2", .dialect = PROTO_DIALECT_KSERVE, .decode = v2_infer_decode,
                                          .encode = v2_infer_encode};
