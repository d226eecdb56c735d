/* v2.c - KServe's open inference protocol (v2): the infer request (BYTES tensors "text" and
 * "text_pair", "parameters", "outputs"), its answer as typed tensors by head, a task's model
 * metadata and the live/ready answers. One table per head lists its output tensors, so the
 * request check, the answer and the metadata agree. Reuses parse.c for texts and parameters. */
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

/* "outputs": [{"name": "label"}, ...]: each name once, each an output tensor of some head (whether
 * the task's head answers it is the server's check, once it knows the task). */
static int v2_requested_outputs(json_t *outs, unsigned *mask, eng_err *err) {
    static const v2_output *const heads[] = {v2_cls, v2_ml, v2_reg, v2_qa, v2_tag};
    *mask = 0;
    if (!outs || json_is_null(outs)) return 0;
    if (!json_is_array(outs)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"outputs\" must be an array of {\"name\": ...}");
    for (size_t i = 0; i < json_array_size(outs); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(outs, i), "name"));
        if (!name) return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu] must be an object with a \"name\"", i);
        unsigned bit = 0;
        for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
            for (const v2_output *o = heads[h]; o->name; o++)
                if (!strcmp(name, o->name)) bit = o->bit;
        if (!bit)
            return eng_err_set(err, ENG_INVALID_ARGUMENT,
                                 "outputs[%zu]: unknown output \"%.60s\" (label, score, scores, labels, value, answer, start, end, "
                                 "entity, word, seq, input)",
                                 i, name);
        if (*mask & bit) return eng_err_set(err, ENG_INVALID_ARGUMENT, "outputs[%zu]: \"%s\" is asked for twice", i, name);
        *mask |= bit;
    }
    return 0;
}

int proto_v2_infer_parse(const char *body, size_t len, const char *task, const proto_limits *lim, proto_predict_req *r,
                         eng_err *err) {
    proto_limits dl;
    json_t *root = proto__req_begin(body, len, &lim, &dl, r, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    int rc;
    json_t *ins = json_object_get(root, "inputs"), *text = NULL, *pair = NULL;
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
    if ((rc = v2_requested_outputs(json_object_get(root, "outputs"), &r->v2_outputs, err))) goto bad;
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

char *proto_v2_infer_encode(const proto_predict_resp *r, size_t *len) {
    if (r->n_tasks != 1 || r->n_inputs < 1) return NULL;
    const proto_task_result *t0 = &r->results[0];
    json_t *outs = json_array();
    int bad = !outs, n = r->n_inputs;
    for (const v2_output *o = v2_outputs(t0->kind); !bad && o->name; o++) {
        if (r->v2_outputs && !(r->v2_outputs & o->bit)) continue;
        json_t *d = v2_data(r, t0->kind, o->bit);
        int rows = o->dim == V2_PER_ENTITY ? (int)json_array_size(d) : n;
        bad |= !d || json_array_append_new(outs, v2_tensor(o->name, o->datatype, rows, o->dim == V2_PER_LABEL ? t0->n_labels : 0, d));
    }
    if (bad) {
        json_decref(outs);
        return NULL;
    }
    return proto__dump(json_pack("{s:s,s:s,s:s,s:o}", "model_name", t0->task, "model_version", t0->version, "id",
                          r->v2_id ? r->v2_id : r->request_id, "outputs", outs),
                len);
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
