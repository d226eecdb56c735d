/* v2.c - KServe's open inference protocol (v2): the infer request (BYTES tensors "text" and
 * "text_pair", "parameters", "outputs"), its answer as typed tensors by head, a task's model
 * metadata and the live/ready answers. One table per head lists its output tensors, so the
 * request check, the answer and the metadata agree. Reuses parse.c for texts and parameters.
 *
 * The binary tensor data extension rides on the same path: a request's binary BYTES tensors are
 * decoded into the JSON document's "data" before the tensors are read (every size checked against
 * the bytes there are, nothing read past them), and an answer's binary outputs are the same JSON
 * data written out as little-endian bytes after the JSON, so binary and JSON answers cannot differ. */
#include <limits.h>
#include <math.h>
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

/* A boolean parameter of a v2 "parameters" object: *dst 1 or 0 when given, untouched when absent.
 * Returns 0, or ENG_INVALID_ARGUMENT naming it (where) when it is not a boolean. */
static int v2_bool_param(json_t *params, const char *key, const char *where, int *dst, eng_err *err) {
    json_t *v = json_is_object(params) ? json_object_get(params, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.%s must be true or false", where, key);
    *dst = json_is_true(v);
    return 0;
}

/* "outputs": [{"name": "label", "parameters": {"binary_data": true}}, ...]: each name once, each an
 * output tensor of some head (whether the task's head answers it is the server's check, once it
 * knows the task). *bin_on, *bin_off: the outputs whose "binary_data" is true, false. */
static int v2_requested_outputs(json_t *outs, unsigned *mask, unsigned *bin_on, unsigned *bin_off, eng_err *err) {
    static const v2_output *const heads[] = {v2_cls, v2_ml, v2_reg, v2_qa, v2_tag};
    *mask = *bin_on = *bin_off = 0;
    if (!outs || json_is_null(outs)) return 0;
    if (!json_is_array(outs)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"outputs\" must be an array of {\"name\": ...}");
    for (size_t i = 0; i < json_array_size(outs); i++) {
        json_t *o = json_array_get(outs, i);
        const char *name = json_string_value(json_object_get(o, "name"));
        if (!name) return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu] must be an object with a \"name\"", i);
        unsigned bit = 0;
        for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
            for (const v2_output *x = heads[h]; x->name; x++)
                if (!strcmp(name, x->name)) bit = x->bit;
        if (!bit)
            return eng_err_set(err, ENG_INVALID_ARGUMENT,
                                 "outputs[%zu]: unknown output \"%.60s\" (label, score, scores, labels, value, answer, start, end, "
                                 "entity, word, seq, input)",
                                 i, name);
        if (*mask & bit) return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu]: \"%s\" is asked for twice", i, name);
        *mask |= bit;
        json_t *params = json_object_get(o, "parameters");
        if (params && !json_is_null(params) && !json_is_object(params))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu].parameters must be an object", i);
        int b = -1;
        char where[64];
        snprintf(where, sizeof where, "outputs[%zu].parameters", i);
        if (v2_bool_param(params, "binary_data", where, &b, err)) return err ? err->code : ENG_INVALID_ARGUMENT;
        if (b == 1) *bin_on |= bit;
        if (b == 0) *bin_off |= bit;
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
    unsigned bin_on, bin_off;
    int all_binary = 0;
    if ((rc = v2_requested_outputs(json_object_get(root, "outputs"), &r->v2_outputs, &bin_on, &bin_off, err))) goto bad;
    if ((rc = v2_bool_param(params, "binary_data_output", "parameters", &all_binary, err))) goto bad;
    r->v2_binary = ((all_binary ? ~0u : 0u) & ~bin_off) | bin_on;
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

static json_t *v2_tensor(const char *name, const char *dt, int n, int k, json_t *data) {
    json_t *shape = k ? json_pack("[i,i]", n, k) : json_pack("[i]", n);
    return json_pack("{s:s,s:s,s:o,s:o}", "name", name, "datatype", dt, "shape", shape, "data", data);
}

/* The data of one output tensor over every input of r (results of task 0 of each input). */
static json_t *v2_data(const proto_predict_resp *r, proto_head_kind kind, unsigned bit) {
    json_t *a = json_array();
    int bad = !a;
    for (int i = 0; !bad && i < r->n_inputs; i++) {
        const proto_task_result *t = &r->results[(size_t)i * r->n_tasks];
        switch (kind) {
        case PROTO_HEAD_CLASSIFICATION:
        case PROTO_HEAD_MULTILABEL: {
            int best = t->label;
            if (kind == PROTO_HEAD_MULTILABEL)
                for (int j = best = 0; j < t->n_labels; j++)
                    if (t->scores[j] > t->scores[best]) best = j;
            if (bit == PROTO_V2_OUT_LABEL) bad |= json_array_append_new(a, proto__label_json(t->labels, best));
            if (bit == PROTO_V2_OUT_SCORE) bad |= json_array_append_new(a, proto__num(t->scores[best]));
            for (int j = 0; bit == PROTO_V2_OUT_SCORES && j < t->n_labels; j++) bad |= json_array_append_new(a, proto__num(t->scores[j]));
            if (bit == PROTO_V2_OUT_LABELS) { /* the labels over the threshold in label order, then "" to K */
                int k = 0;
                for (int j = 0; j < t->n_labels; j++)
                    if (t->scores[j] > 0.5f) bad |= json_array_append_new(a, proto__label_json(t->labels, j)), k++;
                for (; k < t->n_labels; k++) bad |= json_array_append_new(a, json_string(""));
            }
            break;
        }
        case PROTO_HEAD_REGRESSION: bad |= json_array_append_new(a, proto__num(t->value)); break;
        case PROTO_HEAD_QA: {
            int has = t->has_answer;
            if (bit == PROTO_V2_OUT_ANSWER)
                bad |= json_array_append_new(a, json_stringn(has && t->ans_text ? t->ans_text : "", has ? t->ans_text_len : 0));
            if (bit == PROTO_V2_OUT_START) bad |= json_array_append_new(a, json_integer(has ? t->ans_start : -1));
            if (bit == PROTO_V2_OUT_END) bad |= json_array_append_new(a, json_integer(has ? t->ans_end : -1));
            if (bit == PROTO_V2_OUT_SCORE) bad |= json_array_append_new(a, has ? proto__num(t->ans_score) : json_real(0));
            break;
        }
        case PROTO_HEAD_TAGGING:
            for (int e = 0; !bad && e < t->n_entities; e++) {
                const proto_entity *g = &t->entities[e];
                json_t *v = bit == PROTO_V2_OUT_ENTITY  ? json_string(g->name)
                            : bit == PROTO_V2_OUT_SCORE ? proto__num(g->score)
                            : bit == PROTO_V2_OUT_WORD  ? json_stringn(g->word ? g->word : "", g->word_len)
                            : bit == PROTO_V2_OUT_START ? json_integer(g->start)
                            : bit == PROTO_V2_OUT_END   ? json_integer(g->end)
                            : bit == PROTO_V2_OUT_SEQ   ? json_integer(g->seq)
                                                        : json_integer(i);
                bad |= json_array_append_new(a, v);
            }
            break;
        }
    }
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* The bytes of binary output tensors, growing as outputs are added. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} v2_bytes_buf;

static int v2_put(v2_bytes_buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n) c *= 2;
        unsigned char *q = realloc(b->p, c);
        if (!q) return -1;
        b->p = q, b->cap = c;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

static int v2_put_le32(v2_bytes_buf *b, uint32_t v) {
    unsigned char q[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    return v2_put(b, q, 4);
}

/* Appends the elements of one output's JSON data (d) to b as the extension lays them out for its
 * datatype dt. Returns 0 or -1 when out of memory. */
static int v2_put_tensor(v2_bytes_buf *b, const char *dt, json_t *d) {
    int rc = 0;
    for (size_t i = 0; !rc && i < json_array_size(d); i++) {
        json_t *e = json_array_get(d, i);
        if (!strcmp(dt, "BYTES")) {
            size_t l = json_string_length(e);
            rc = v2_put_le32(b, (uint32_t)l) || v2_put(b, json_string_value(e), l);
        } else if (!strcmp(dt, "INT32")) {
            rc = v2_put_le32(b, (uint32_t)(int32_t)json_integer_value(e));
        } else { /* FP32: the JSON's null (not finite) as NaN */
            float f = json_is_number(e) ? (float)json_number_value(e) : NAN;
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            rc = v2_put_le32(b, u);
        }
    }
    return rc;
}

char *proto_v2_infer_encode(const proto_predict_resp *r, size_t *len) {
    proto_predict_resp j = *r;
    size_t header_len;
    j.v2_binary = 0;
    return proto_v2_infer_encode_binary(&j, len, &header_len);
}

char *proto_v2_infer_encode_binary(const proto_predict_resp *r, size_t *len, size_t *header_len) {
    *header_len = 0;
    if (r->n_tasks != 1 || r->n_inputs < 1) return NULL;
    const proto_task_result *t0 = &r->results[0];
    json_t *outs = json_array();
    v2_bytes_buf bin = {0};
    int bad = !outs, n = r->n_inputs, any_binary = 0;
    for (const v2_output *o = v2_outputs(t0->kind); !bad && o->name; o++) {
        if (r->v2_outputs && !(r->v2_outputs & o->bit)) continue;
        json_t *d = v2_data(r, t0->kind, o->bit);
        int rows = o->dim == V2_PER_ENTITY ? (int)json_array_size(d) : n;
        int k = o->dim == V2_PER_LABEL ? t0->n_labels : 0;
        if (d && (r->v2_binary & o->bit)) {
            size_t at = bin.n;
            any_binary = 1;
            bad |= v2_put_tensor(&bin, o->datatype, d);
            json_decref(d);
            json_t *shape = k ? json_pack("[i,i]", rows, k) : json_pack("[i]", rows);
            bad |= json_array_append_new(outs, json_pack("{s:s,s:s,s:o,s:{s:I}}", "name", o->name, "datatype", o->datatype, "shape",
                                                         shape, "parameters", "binary_data_size", (json_int_t)(bin.n - at)));
            continue;
        }
        bad |= !d || json_array_append_new(outs, v2_tensor(o->name, o->datatype, rows, k, d));
    }
    if (bad) {
        json_decref(outs);
        free(bin.p);
        return NULL;
    }
    size_t jl = 0;
    char *text = proto__dump(json_pack("{s:s,s:s,s:s,s:o}", "model_name", t0->task, "model_version", t0->version, "id",
                                       r->v2_id ? r->v2_id : r->request_id, "outputs", outs),
                             &jl);
    char *all = text && bin.n ? realloc(text, jl + bin.n + 1) : text;
    if (!all) {
        free(text), free(bin.p);
        return NULL;
    }
    if (bin.n) memcpy(all + jl, bin.p, bin.n), all[jl + bin.n] = '\0';
    free(bin.p);
    *len = jl + bin.n;
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

static char *v2_infer_encode(const proto_predict_resp *r, size_t *len, size_t *head_len) {
    return proto_v2_infer_encode_binary(r, len, head_len);
}

const proto_codec proto_v2_infer_codec = {.name = "kserve_v2", .dialect = PROTO_DIALECT_KSERVE, .decode = v2_infer_decode,
                                          .encode = v2_infer_encode};
