/* test_grpc_infer.c - proto/grpc.c's ModelInfer codec against REST's v2 codec (proto/v2.c).
 *
 * Each request is written once as a small table (texts, pairs, shapes, raw or not, parameters,
 * outputs, id), then packed by protobuf-c as a ModelInferRequest and written by jansson as the
 * body of POST /v2/models/{m}/infer; proto_grpc_infer_decode and proto_v2_infer_parse must fill the
 * same request struct field by field, or refuse with the same status and message. What JSON cannot
 * carry (bytes that are not UTF-8, a NUL, a parameter with no value) must be the client's mistake,
 * INVALID_ARGUMENT naming the field, never MALFORMED or NO_MEMORY. Answers: proto_grpc_infer_encode
 * unpacked by protobuf-c must hold REST's tensors value for value (proto_v2_infer_encode), raw or
 * not, and never a tensor without its data. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "proto/grpc.h"
#include "proto/proto.h"

/* ---- requests ---- */

typedef enum { P_BOOL, P_INT, P_UINT, P_DOUBLE, P_STRING, P_NONE } pkind;

typedef struct {
    const char *key;
    pkind kind;
    long long i;
    double d;
    const char *s;
} param;

#define MAXN 4

typedef struct {
    const char *model, *version, *id;
    const char *input_name, *pair_name; /* NULL: "text", no pair input */
    const char *texts[MAXN], *pairs[MAXN];
    int n;                              /* entries of texts (and pairs) */
    int shape_n;                        /* the shape's N when it is not n (-1: n) */
    bool nested;                        /* shape [N, 1] */
    bool raw;                           /* raw_input_contents instead of contents */
    const char *datatype;               /* NULL: "BYTES" */
    param params[8];
    int n_params;
    const char *outputs[4];
    int out_binary[4];                  /* -1: no binary_data, 0 / 1 */
    int n_outputs;
} spec;

static size_t len_of(const char *s) { return strlen(s); }

/* raw_input_contents of texts: each a 4-byte little-endian length, then its bytes */
static ProtobufCBinaryData raw_of(const char *const *texts, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += 4 + len_of(texts[i]);
    uint8_t *b = malloc(total + 1), *o = b;
    cr_assert(b);
    for (int i = 0; i < n; i++) {
        uint32_t l = (uint32_t)len_of(texts[i]);
        o[0] = (uint8_t)l, o[1] = (uint8_t)(l >> 8), o[2] = (uint8_t)(l >> 16), o[3] = (uint8_t)(l >> 24);
        memcpy(o + 4, texts[i], l);
        o += 4 + l;
    }
    return (ProtobufCBinaryData){.len = total, .data = b};
}

/* The spec as a packed ModelInferRequest (malloc'd, *n bytes). */
static uint8_t *pack_request(const spec *s, size_t *n) {
    Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
    q.model_name = (char *)(s->model ? s->model : "t");
    q.model_version = (char *)(s->version ? s->version : "");
    q.id = (char *)(s->id ? s->id : "");
    int ni = s->pair_name || s->pairs[0] ? 2 : 1;
    Inference__ModelInferRequest__InferInputTensor in[2], *pin[2];
    Inference__InferTensorContents c[2];
    ProtobufCBinaryData bc[2][MAXN], raw[2];
    int64_t shape[2][2];
    for (int k = 0; k < ni; k++) {
        const char *const *v = k ? s->pairs : s->texts;
        inference__model_infer_request__infer_input_tensor__init(&in[k]);
        inference__infer_tensor_contents__init(&c[k]);
        in[k].name = (char *)(k ? (s->pair_name ? s->pair_name : "text_pair") : (s->input_name ? s->input_name : "text"));
        in[k].datatype = (char *)(s->datatype ? s->datatype : "BYTES");
        shape[k][0] = s->shape_n >= 0 ? s->shape_n : s->n, shape[k][1] = 1;
        in[k].shape = shape[k], in[k].n_shape = s->nested ? 2 : 1;
        if (s->raw) {
            raw[k] = raw_of(v, s->n);
        } else {
            for (int i = 0; i < s->n; i++) bc[k][i] = (ProtobufCBinaryData){.len = len_of(v[i]), .data = (uint8_t *)v[i]};
            c[k].bytes_contents = bc[k], c[k].n_bytes_contents = (size_t)s->n;
            in[k].contents = &c[k];
        }
        pin[k] = &in[k];
    }
    q.inputs = pin, q.n_inputs = (size_t)ni;
    if (s->raw) q.raw_input_contents = raw, q.n_raw_input_contents = (size_t)ni;
    Inference__ModelInferRequest__ParametersEntry pe[8], *ppe[8];
    Inference__InferParameter pv[8];
    for (int i = 0; i < s->n_params; i++) {
        const param *p = &s->params[i];
        inference__model_infer_request__parameters_entry__init(&pe[i]);
        inference__infer_parameter__init(&pv[i]);
        switch (p->kind) {
        case P_BOOL: pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM, pv[i].bool_param = p->i != 0; break;
        case P_INT: pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM, pv[i].int64_param = p->i; break;
        case P_UINT:
            pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM, pv[i].uint64_param = (uint64_t)p->i;
            break;
        case P_DOUBLE: pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM, pv[i].double_param = p->d; break;
        case P_STRING:
            pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM, pv[i].string_param = (char *)p->s;
            break;
        case P_NONE: break;
        }
        pe[i].key = (char *)p->key, pe[i].value = &pv[i];
        ppe[i] = &pe[i];
    }
    q.parameters = ppe, q.n_parameters = (size_t)s->n_params;
    Inference__ModelInferRequest__InferRequestedOutputTensor ot[4], *pot[4];
    Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry oe[4], *poe[4];
    Inference__InferParameter ov[4];
    for (int i = 0; i < s->n_outputs; i++) {
        inference__model_infer_request__infer_requested_output_tensor__init(&ot[i]);
        ot[i].name = (char *)s->outputs[i];
        if (s->out_binary[i] >= 0) {
            inference__model_infer_request__infer_requested_output_tensor__parameters_entry__init(&oe[i]);
            inference__infer_parameter__init(&ov[i]);
            ov[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM, ov[i].bool_param = s->out_binary[i];
            oe[i].key = "binary_data", oe[i].value = &ov[i];
            poe[i] = &oe[i];
            ot[i].parameters = &poe[i], ot[i].n_parameters = 1;
        }
        pot[i] = &ot[i];
    }
    q.outputs = pot, q.n_outputs = (size_t)s->n_outputs;
    *n = inference__model_infer_request__get_packed_size(&q);
    uint8_t *b = malloc(*n + 1);
    cr_assert(b);
    inference__model_infer_request__pack(&q, b);
    for (int k = 0; s->raw && k < ni; k++) free(raw[k].data);
    return b;
}

/* The spec as REST's JSON body (malloc'd); NULL when JSON cannot carry it. */
static char *rest_body(const spec *s) {
    json_t *root = json_object(), *ins = json_array(), *params = json_object();
    int ni = s->pair_name || s->pairs[0] ? 2 : 1;
    for (int k = 0; k < ni; k++) {
        const char *const *v = k ? s->pairs : s->texts;
        json_t *data = json_array();
        for (int i = 0; i < s->n; i++) json_array_append_new(data, s->nested ? json_pack("[s]", v[i]) : json_string(v[i]));
        json_int_t n = s->shape_n >= 0 ? s->shape_n : s->n;
        json_array_append_new(ins, json_pack("{s:s,s:s,s:o,s:o}", "name",
                                             k ? (s->pair_name ? s->pair_name : "text_pair") : (s->input_name ? s->input_name : "text"),
                                             "datatype", s->datatype ? s->datatype : "BYTES", "shape",
                                             s->nested ? json_pack("[I,i]", n, 1) : json_pack("[I]", n), "data", data));
    }
    json_object_set_new(root, "inputs", ins);
    for (int i = 0; i < s->n_params; i++) {
        const param *p = &s->params[i];
        json_t *v = p->kind == P_BOOL     ? json_boolean(p->i)
                    : p->kind == P_INT    ? json_integer(p->i)
                    : p->kind == P_UINT   ? json_integer(p->i)
                    : p->kind == P_DOUBLE ? json_real(p->d)
                    : p->kind == P_STRING ? json_string(p->s)
                                          : NULL;
        if (!v) {
            json_decref(root), json_decref(params);
            return NULL;
        }
        json_object_set_new(params, p->key, v);
    }
    json_object_set_new(root, "parameters", params);
    if (s->n_outputs) {
        json_t *outs = json_array();
        for (int i = 0; i < s->n_outputs; i++)
            json_array_append_new(outs, s->out_binary[i] >= 0 ? json_pack("{s:s,s:{s:b}}", "name", s->outputs[i], "parameters", "binary_data",
                                                                          s->out_binary[i])
                                                              : json_pack("{s:s}", "name", s->outputs[i]));
        json_object_set_new(root, "outputs", outs);
    }
    if (s->id && s->id[0]) json_object_set_new(root, "id", json_string(s->id));
    char *b = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return b;
}

static const char *task_of(const spec *s, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s", s->model ? s->model : "t", s->version && s->version[0] ? "@" : "", s->version ? s->version : "");
    return buf;
}

static bool same_str(const char *a, size_t al, const char *b, size_t bl) {
    return (!a && !b) || (a && b && al == bl && !memcmp(a, b, al));
}

/* Every field of two parsed requests. */
static void expect_same(const proto_predict_req *g, const proto_predict_req *j, const char *what) {
    cr_expect_eq(g->n_inputs, j->n_inputs, "%s: n_inputs", what);
    for (int i = 0; i < g->n_inputs && i < j->n_inputs; i++) {
        const proto_text *a = &g->inputs[i], *b = &j->inputs[i];
        cr_expect(same_str(a->text, a->len, b->text, b->len), "%s: inputs[%d].text", what, i);
        cr_expect(same_str(a->pair, a->pair_len, b->pair, b->pair_len), "%s: inputs[%d].pair", what, i);
        cr_expect(a->text && a->text[a->len] == '\0', "%s: inputs[%d].text is NUL-terminated", what, i);
        cr_expect(!a->ids && !a->type_ids && a->n_ids == b->n_ids, "%s: inputs[%d] ids", what, i);
    }
    cr_expect_eq(g->n_tasks, j->n_tasks, "%s: n_tasks", what);
    for (int k = 0; k < g->n_tasks && k < j->n_tasks; k++) cr_expect_str_eq(g->tasks[k], j->tasks[k], "%s: tasks[%d]", what, k);
    cr_expect_eq(g->skip, j->skip, "%s: skip", what);
    cr_expect_eq(g->n_skips, j->n_skips, "%s: n_skips", what);
    cr_expect(g->budget == j->budget, "%s: budget %g / %g", what, g->budget, j->budget);
    cr_expect(g->latency_ms == j->latency_ms, "%s: latency_ms %g / %g", what, g->latency_ms, j->latency_ms);
    cr_expect(g->ret_scores == j->ret_scores && g->ret_logits == j->ret_logits && g->ret_explain == j->ret_explain, "%s: return", what);
    cr_expect_eq(g->truncate, j->truncate, "%s: truncate", what);
    cr_expect_eq(g->aggregation, j->aggregation, "%s: aggregation", what);
    cr_expect(!g->model && !j->model, "%s: model", what);
    cr_expect(g->pooling == j->pooling && g->normalize == j->normalize && g->add_special_tokens == j->add_special_tokens,
              "%s: embed fields", what);
    cr_expect_eq(g->v2_outputs, j->v2_outputs, "%s: v2_outputs", what);
    cr_expect(same_str(g->v2_id, g->v2_id ? strlen(g->v2_id) : 0, j->v2_id, j->v2_id ? strlen(j->v2_id) : 0), "%s: v2_id", what);
    cr_expect_eq(g->v2_binary, j->v2_binary, "%s: v2_binary", what);
    cr_expect(g->truncate_left == j->truncate_left && g->prompt_name == j->prompt_name && g->dimensions == j->dimensions &&
                  g->base64 == j->base64 && g->tei_batch == j->tei_batch && g->tei_raw == j->tei_raw &&
                  g->tei_return_text == j->tei_return_text,
              "%s: other protocols' fields", what);
}

/* Decodes the spec both ways; returns the gRPC decode's status (the requests are released). */
static int both(const spec *s, const proto_limits *lim, const char *what, proto_grpc_infer_target *t, eng_err *ge) {
    size_t n;
    uint8_t *msg = pack_request(s, &n);
    proto_predict_req g, j;
    eng_err je = {0};
    char task[64];
    memset(ge, 0, sizeof *ge);
    int grc = proto_grpc_infer_decode(msg, n, lim, &g, t, ge);
    char *body = rest_body(s);
    cr_assert(body, "%s: REST can carry this request", what);
    int jrc = proto_v2_infer_parse(body, strlen(body), task_of(s, task, sizeof task), lim, &j, &je);
    cr_expect_eq(grc, jrc, "%s: gRPC %d (%s), REST %d (%s)", what, grc, ge->msg, jrc, je.msg);
    if (grc && jrc) cr_expect_str_eq(ge->msg, je.msg, "%s: the same message", what);
    if (!grc && !jrc) expect_same(&g, &j, what);
    if (!grc) proto_predict_free(&g);
    if (!jrc) proto_predict_free(&j);
    free(body), free(msg);
    return grc;
}

Test(grpc_infer, requests_decode_as_rest_parses_them) {
    const spec ok[] = {
        {.texts = {"the match was great"}, .n = 1, .shape_n = -1},
        {.texts = {"a", "b\xc3\xa9", ""}, .n = 3, .shape_n = -1, .id = "req-42"},
        {.texts = {"who?", "where?"}, .pairs = {"Ada lived in London.", "in Paris"}, .n = 2, .shape_n = -1},
        {.texts = {"x", "y"}, .n = 2, .shape_n = -1, .raw = true},
        {.texts = {"q"}, .pairs = {"ctx"}, .n = 1, .shape_n = -1, .raw = true, .model = "qa", .version = "3"},
        {.texts = {"a", "b"}, .n = 2, .shape_n = -1, .nested = true},
        {.texts = {"a"}, .pairs = {"b"}, .n = 1, .shape_n = -1, .nested = true, .raw = true},
        {.texts = {"lone"}, .input_name = "sentence", .n = 1, .shape_n = -1}, /* the only input: any name */
        {.texts = {"p"}, .pairs = {"h"}, .pair_name = "text_pair", .input_name = "text", .n = 1, .shape_n = -1},
        /* parameters of each wire type, each parameter REST reads */
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_INT, 2}, {"truncate", P_BOOL, 0}}, .n_params = 2},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_UINT, 3}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"budget", P_DOUBLE, 0, 0.25}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"budget", P_INT, 1}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"latency_ms", P_DOUBLE, 0, 12.5}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"latency_ms", P_UINT, 40}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"aggregation", P_STRING, 0, 0, "simple"}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"binary_data_output", P_BOOL, 1}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1,
         .params = {{"priority", P_INT, 7}, {"sequence_id", P_STRING, 0, 0, "s-1"}, {"timeout", P_DOUBLE, 0, 1.5}}, .n_params = 3},
        /* outputs, with and without binary_data */
        {.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"label", "scores"}, .out_binary = {-1, -1}, .n_outputs = 2},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"label", "score"}, .out_binary = {1, 0}, .n_outputs = 2,
         .params = {{"binary_data_output", P_BOOL, 1}}, .n_params = 1},
        {.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"entity", "input"}, .out_binary = {-1, 1}, .n_outputs = 2,
         .params = {{"aggregation", P_STRING, 0, 0, "first"}}, .n_params = 1, .id = "tag-1"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "ok[%zu]", i);
        proto_grpc_infer_target t;
        eng_err e;
        cr_expect_eq(both(&ok[i], NULL, what, &t, &e), 0, "%s: %s", what, e.msg);
    }
}

/* Refusals REST's JSON can express: the same status and message from both. */
Test(grpc_infer, refusals_are_rest_refusals) {
    const struct {
        spec s;
        int rc;
        const char *names;
    } bad[] = {
        {{.texts = {"a"}, .n = 1, .shape_n = 2}, ENG_INVALID_ARGUMENT, "inputs[0].shape"},
        {{.texts = {"a", "b"}, .n = 2, .shape_n = 1, .nested = true}, ENG_INVALID_ARGUMENT, "inputs[0].shape"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .datatype = "FP32"}, ENG_INVALID_ARGUMENT, "inputs[0].datatype"},
        {{.texts = {"a"}, .n = 0, .shape_n = -1}, ENG_INVALID_ARGUMENT, "\"text\" tensor is empty"},
        {{.texts = {"a"}, .pairs = {"b"}, .input_name = "question", .n = 1, .shape_n = -1}, ENG_INVALID_ARGUMENT, "unknown tensor"},
        {{.texts = {"a"}, .pairs = {"b"}, .pair_name = "text", .n = 1, .shape_n = -1}, ENG_INVALID_ARGUMENT, "a second tensor"},
        {{.texts = {"a"}, .pairs = {"b"}, .input_name = "text_pair", .pair_name = "text_pair", .n = 1, .shape_n = -1}, ENG_INVALID_ARGUMENT,
         "a second tensor"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"logits"}, .out_binary = {-1}, .n_outputs = 1}, ENG_INVALID_ARGUMENT,
         "outputs[0]: unknown output"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"label", "label"}, .out_binary = {-1, -1}, .n_outputs = 2},
         ENG_INVALID_ARGUMENT, "outputs[1]: \"label\" is asked for twice"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_STRING, 0, 0, "1"}}, .n_params = 1}, ENG_INVALID_ARGUMENT, "\"skip\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_DOUBLE, 0, 1.0}}, .n_params = 1}, ENG_INVALID_ARGUMENT, "\"skip\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_INT, 1001}}, .n_params = 1}, ENG_INVALID_ARGUMENT, "\"skip\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"budget", P_DOUBLE, 0, 1.5}}, .n_params = 1}, ENG_INVALID_ARGUMENT, "\"budget\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_INT, 1}, {"budget", P_DOUBLE, 0, 0.5}}, .n_params = 2},
         ENG_INVALID_ARGUMENT, "either \"skip\" or \"budget\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"latency_ms", P_INT, 0}}, .n_params = 1}, ENG_INVALID_ARGUMENT, "\"latency_ms\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"truncate", P_INT, 1}}, .n_params = 1}, ENG_INVALID_ARGUMENT, "\"truncate\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"aggregation", P_STRING, 0, 0, "max"}}, .n_params = 1}, ENG_INVALID_ARGUMENT,
         "\"aggregation\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"binary_data_output", P_STRING, 0, 0, "yes"}}, .n_params = 1},
         ENG_INVALID_ARGUMENT, "parameters.binary_data_output"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "bad[%zu]", i);
        proto_grpc_infer_target t;
        eng_err e;
        cr_expect_eq(both(&bad[i].s, NULL, what, &t, &e), bad[i].rc, "%s: %s", what, e.msg);
        cr_expect(strstr(e.msg, bad[i].names), "%s: \"%s\" names %s", what, e.msg, bad[i].names);
    }
    /* the limits: entries and bytes */
    proto_limits lim = proto_default_limits();
    lim.max_inputs = 2, lim.max_text_bytes = 8;
    proto_grpc_infer_target t;
    eng_err e;
    const spec many = {.texts = {"a", "b", "c"}, .n = 3, .shape_n = -1}, long_pair = {.texts = {"abcd"}, .pairs = {"efghi"}, .n = 1, .shape_n = -1};
    cr_expect_eq(both(&many, &lim, "max_inputs", &t, &e), ENG_LIMIT);
    cr_expect_eq(both(&long_pair, &lim, "max_text_bytes", &t, &e), ENG_LIMIT);
    cr_expect(strstr(e.msg, "text[0] is 9 bytes"), "%s", e.msg);
}

/* What REST's JSON cannot carry, or a malformed gRPC message: a client's mistake naming the field. */
Test(grpc_infer, bytes_json_cannot_carry_are_invalid_arguments) {
    const struct {
        spec s;
        const char *names;
    } bad[] = {
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .id = "r\xff"}, "id is not UTF-8"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"sk\xc3", P_INT, 1}}, .n_params = 1}, "a key of \"parameters\""},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"aggregation", P_STRING, 0, 0, "simple\xe2\x82"}}, .n_params = 1},
         "parameters[\"aggregation\"] is not UTF-8"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"note", P_STRING, 0, 0, "\xed\xa0\x80"}}, .n_params = 1},
         "parameters[\"note\"] is not UTF-8"}, /* a surrogate, even in a parameter nobody reads */
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_NONE}}, .n_params = 1}, "parameters[\"skip\"] holds no value"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"budget", P_DOUBLE, 0, NAN}}, .n_params = 1}, "not a finite number"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .input_name = "t\xc0\xaf"}, "inputs[0].name is not UTF-8"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"lab\xff"}, .out_binary = {-1}, .n_outputs = 1}, "outputs[0].name is not UTF-8"},
        {{.texts = {"ok", "\xc3("}, .n = 2, .shape_n = -1}, "inputs[0].contents.bytes_contents[1] is not UTF-8"},
        {{.texts = {"ok"}, .pairs = {"\xf4\x90\x80\x80"}, .n = 1, .shape_n = -1, .raw = true}, "inputs[1].raw_input_contents[0] is not UTF-8"},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"label"}, .out_binary = {-1}, .n_outputs = 1, .model = ""}, "model_name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n;
        uint8_t *msg = pack_request(&bad[i].s, &n);
        proto_predict_req r;
        proto_grpc_infer_target t;
        eng_err e = {0};
        cr_expect_eq(proto_grpc_infer_decode(msg, n, NULL, &r, &t, &e), ENG_INVALID_ARGUMENT, "bad[%zu]: %s", i, e.msg);
        cr_expect(strstr(e.msg, bad[i].names), "bad[%zu]: \"%s\" names %s", i, e.msg, bad[i].names);
        free(msg);
    }
    /* a NUL in a text, in contents and raw; raw data that does not frame its input; raw and contents both */
    Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
    Inference__ModelInferRequest__InferInputTensor in = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT, *pin = &in;
    Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    int64_t shape[] = {1};
    ProtobufCBinaryData nul = {.len = 3, .data = (uint8_t *)"a\0b"};
    q.model_name = "t", q.inputs = &pin, q.n_inputs = 1;
    in.name = "text", in.datatype = "BYTES", in.shape = shape, in.n_shape = 1;
    c.bytes_contents = &nul, c.n_bytes_contents = 1, in.contents = &c;
    const struct {
        const char *names;
        bool contents;
        size_t n_raw;
        const char *raw;
        size_t raw_len;
    } cases[] = {{"inputs[0].contents.bytes_contents[0] holds a NUL byte", true, 0, NULL, 0},
                 {"inputs[0].raw_input_contents[0] holds a NUL byte", false, 1, "\3\0\0\0a\0b", 7},
                 {"raw_input_contents[0]: a BYTES element is a 4-byte little-endian length", false, 1, "\5\0\0\0abc", 7},
                 {"raw_input_contents[0]: a BYTES element is a 4-byte little-endian length", false, 1, "\1\0", 2},
                 {"inputs[0] has both contents and raw_input_contents", true, 1, "\1\0\0\0a", 5},
                 {"raw_input_contents has 2 entries for 1 inputs", false, 2, "\1\0\0\0a", 5}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ProtobufCBinaryData rv[2] = {{.len = cases[i].raw_len, .data = (uint8_t *)cases[i].raw}, {0}};
        in.contents = cases[i].contents ? &c : NULL;
        q.raw_input_contents = rv, q.n_raw_input_contents = cases[i].n_raw;
        size_t n = inference__model_infer_request__get_packed_size(&q);
        uint8_t *msg = malloc(n + 1);
        cr_assert(msg);
        inference__model_infer_request__pack(&q, msg);
        proto_predict_req r;
        proto_grpc_infer_target t;
        eng_err e = {0};
        cr_expect_eq(proto_grpc_infer_decode(msg, n, NULL, &r, &t, &e), ENG_INVALID_ARGUMENT, "cases[%zu]: %s", i, e.msg);
        cr_expect(strstr(e.msg, cases[i].names), "cases[%zu]: \"%s\" names %s", i, e.msg, cases[i].names);
        free(msg);
    }
    /* the one MALFORMED: bytes that are not a ModelInferRequest */
    proto_predict_req r;
    proto_grpc_infer_target t;
    eng_err e = {0};
    const uint8_t garbage[] = {0x2a, 0x7f, 0x01};
    cr_expect_eq(proto_grpc_infer_decode(garbage, sizeof garbage, NULL, &r, &t, &e), ENG_MALFORMED);
}

/* Repeated map keys keep the last value, as protobuf reads a map (REST's JSON would refuse the duplicate). */
Test(grpc_infer, a_parameter_sent_twice_keeps_its_last_value) {
    const spec s = {.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"skip", P_STRING, 0, 0, "x"}, {"skip", P_INT, 4}}, .n_params = 2};
    size_t n;
    uint8_t *msg = pack_request(&s, &n);
    proto_predict_req r;
    proto_grpc_infer_target t;
    eng_err e = {0};
    cr_assert_eq(proto_grpc_infer_decode(msg, n, NULL, &r, &t, &e), 0, "%s", e.msg);
    cr_expect_eq(r.skip, 4);
    proto_predict_free(&r);
    free(msg);
}

/* Which answers go raw: raw inputs, or an output the request answers asked as binary data. */
Test(grpc_infer, raw_answers) {
    const struct {
        spec s;
        bool raw;
    } cases[] = {
        {{.texts = {"a"}, .n = 1, .shape_n = -1}, false},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .raw = true}, true},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"binary_data_output", P_BOOL, 1}}, .n_params = 1}, true},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .params = {{"binary_data_output", P_BOOL, 0}}, .n_params = 1}, false},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"label", "score"}, .out_binary = {-1, 1}, .n_outputs = 2}, true},
        {{.texts = {"a"}, .n = 1, .shape_n = -1, .outputs = {"label"}, .out_binary = {0}, .n_outputs = 1,
          .params = {{"binary_data_output", P_BOOL, 1}}, .n_params = 1},
         false}, /* the one output answered says no */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        uint8_t *msg = pack_request(&cases[i].s, &n);
        proto_predict_req r;
        proto_grpc_infer_target t;
        eng_err e = {0};
        cr_assert_eq(proto_grpc_infer_decode(msg, n, NULL, &r, &t, &e), 0, "cases[%zu]: %s", i, e.msg);
        cr_expect_eq(t.raw, cases[i].raw, "cases[%zu]", i);
        proto_predict_free(&r);
        free(msg);
    }
}

/* ---- answers ---- */

static ProtobufCBinaryData *raw_entry(Inference__ModelInferResponse *m, size_t i) {
    return m->n_raw_output_contents ? &m->raw_output_contents[i] : NULL;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* A ModelInferResponse against REST's JSON answer for the same response: every tensor's name,
 * datatype, shape and values, each holding its shape's elements (contents or raw, never neither). */
static void expect_answer(const proto_predict_resp *pr, bool raw, const char *what) {
    uint8_t *out = NULL;
    size_t len = 0, jl = 0;
    cr_assert_eq(proto_grpc_infer_encode(pr, raw, &out, &len), 0, "%s", what);
    cr_assert_geq(len, 5);
    cr_expect_eq(le32((const uint8_t[]){out[4], out[3], out[2], out[1]}), len - 5, "%s: the prefix says the length", what);
    Inference__ModelInferResponse *m = inference__model_infer_response__unpack(NULL, len - 5, out + 5);
    cr_assert(m, "%s: a ModelInferResponse", what);
    char *js = proto_v2_infer_encode(pr, &jl);
    json_t *j = json_loads(js, 0, NULL), *outs = json_object_get(j, "outputs");
    cr_assert(j, "%s", js);
    cr_expect_str_eq(m->model_name, json_string_value(json_object_get(j, "model_name")), "%s", what);
    cr_expect_str_eq(m->model_version, json_string_value(json_object_get(j, "model_version")), "%s", what);
    cr_expect_str_eq(m->id, json_string_value(json_object_get(j, "id")), "%s", what);
    cr_assert_eq(m->n_outputs, json_array_size(outs), "%s", what);
    cr_expect_eq(m->n_raw_output_contents, raw ? m->n_outputs : 0, "%s: raw_output_contents for every output or none", what);
    for (size_t i = 0; i < m->n_outputs; i++) {
        const Inference__ModelInferResponse__InferOutputTensor *t = m->outputs[i];
        json_t *o = json_array_get(outs, i), *shape = json_object_get(o, "shape"), *data = json_object_get(o, "data");
        const char *dt = json_string_value(json_object_get(o, "datatype"));
        cr_expect_str_eq(t->name, json_string_value(json_object_get(o, "name")), "%s", what);
        cr_expect_str_eq(t->datatype, dt, "%s: %s", what, t->name);
        cr_assert_eq(t->n_shape, json_array_size(shape), "%s: %s", what, t->name);
        size_t elems = 1;
        for (size_t k = 0; k < t->n_shape; k++) {
            cr_expect_eq(t->shape[k], json_integer_value(json_array_get(shape, k)), "%s: %s.shape[%zu]", what, t->name, k);
            elems *= (size_t)t->shape[k];
        }
        cr_assert_eq(json_array_size(data), elems, "%s: REST's %s holds its shape", what, t->name);
        ProtobufCBinaryData *rw = raw_entry(m, i);
        cr_assert(rw || t->contents, "%s: %s has contents or raw data", what, t->name);
        cr_assert(!(rw && t->contents), "%s: %s has one of them", what, t->name);
        size_t o8 = 0;
        for (size_t k = 0; k < elems; k++) {
            json_t *v = json_array_get(data, k);
            if (!strcmp(dt, "BYTES")) {
                const uint8_t *s;
                size_t n;
                if (rw) {
                    cr_assert_leq(o8 + 4, rw->len, "%s: %s", what, t->name);
                    n = le32(rw->data + o8), s = rw->data + o8 + 4, o8 += 4 + n;
                    cr_assert_leq(o8, rw->len);
                } else {
                    cr_assert_eq(t->contents->n_bytes_contents, elems, "%s: %s", what, t->name);
                    s = t->contents->bytes_contents[k].data, n = t->contents->bytes_contents[k].len;
                }
                cr_expect(n == json_string_length(v) && (!n || !memcmp(s, json_string_value(v), n)), "%s: %s[%zu]", what, t->name, k);
            } else if (!strcmp(dt, "FP32")) {
                float f;
                if (rw) {
                    uint32_t u = le32(rw->data + o8);
                    memcpy(&f, &u, 4), o8 += 4;
                } else {
                    cr_assert_eq(t->contents->n_fp32_contents, elems, "%s: %s", what, t->name);
                    f = t->contents->fp32_contents[k];
                }
                if (json_is_null(v)) cr_expect(isnan(f), "%s: %s[%zu] null is NaN", what, t->name, k);
                else cr_expect_eq(f, (float)json_number_value(v), "%s: %s[%zu]", what, t->name, k);
            } else {
                int32_t x;
                if (rw) {
                    x = (int32_t)le32(rw->data + o8), o8 += 4;
                } else {
                    cr_assert_eq(t->contents->n_int_contents, elems, "%s: %s", what, t->name);
                    x = t->contents->int_contents[k];
                }
                cr_expect_eq(x, json_integer_value(v), "%s: %s[%zu]", what, t->name, k);
            }
        }
        if (rw) cr_expect_eq(o8, rw->len, "%s: %s's raw data is its elements, no more", what, t->name);
    }
    json_decref(j), free(js);
    inference__model_infer_response__free_unpacked(m, NULL);
    free(out);
}

Test(grpc_infer, answers_hold_rests_tensors) {
    const char *labels[] = {"neg", "pos", NULL}; /* the third unnamed: LABEL_2 */
    float sc[] = {0.25f, 0.75f, 0.125f, NAN, 0.5f, INFINITY};
    proto_task_result cls[2] = {{.task = "sst2", .version = "1", .kind = PROTO_HEAD_CLASSIFICATION, .n_labels = 3, .labels = labels,
                                 .scores = sc, .label = 1},
                                {.task = "sst2", .version = "1", .kind = PROTO_HEAD_CLASSIFICATION, .n_labels = 3, .labels = labels,
                                 .scores = sc + 3, .label = 2}};
    proto_task_result ml[2] = {{.task = "ml", .version = "2", .kind = PROTO_HEAD_MULTILABEL, .n_labels = 3, .labels = labels, .scores = sc},
                               {.task = "ml", .version = "2", .kind = PROTO_HEAD_MULTILABEL, .n_labels = 3, .labels = NULL, .scores = sc + 3}};
    proto_task_result reg[2] = {{.task = "r", .version = "1", .kind = PROTO_HEAD_REGRESSION, .value = -2.5f},
                                {.task = "r", .version = "1", .kind = PROTO_HEAD_REGRESSION, .value = NAN}};
    const char *ctx = "Ada Lovelace lived in caf\xc3\xa9 London";
    proto_task_result qa[2] = {{.task = "qa", .version = "1", .kind = PROTO_HEAD_QA, .has_answer = 1, .ans_start = 22, .ans_end = 26,
                                .ans_score = 0.5f, .ans_text = ctx + 22, .ans_text_len = 5},
                               {.task = "qa", .version = "1", .kind = PROTO_HEAD_QA}};
    proto_entity e0[] = {{.name = "PER", .score = 0.9f, .start = 0, .end = 12, .word = ctx, .word_len = 12},
                         {.name = "LOC", .score = 0.8f, .start = 28, .end = 34, .seq = 1, .word = ctx + 28, .word_len = 6}};
    proto_task_result tag[2] = {{.task = "ner", .version = "1", .kind = PROTO_HEAD_TAGGING, .aggregation = PROTO_AGG_SIMPLE, .entities = e0,
                                 .n_entities = 2},
                                {.task = "ner", .version = "1", .kind = PROTO_HEAD_TAGGING, .aggregation = PROTO_AGG_SIMPLE}};
    const proto_task_result *all[] = {cls, ml, reg, qa, tag};
    for (size_t h = 0; h < sizeof all / sizeof all[0]; h++) {
        for (unsigned outs = 0; outs < 2; outs++) {
            proto_predict_resp pr = {.request_id = "req-1", .model = "bert", .n_inputs = 2, .n_tasks = 1, .results = all[h],
                                     .v2_id = outs ? "client-id" : NULL, .v2_binary = outs ? ~0u : 0u,
                                     .v2_outputs = outs ? proto_v2_outputs_of(all[h][0].kind) & ~PROTO_V2_OUT_SCORE : 0};
            char what[64];
            snprintf(what, sizeof what, "%s outputs=%u", all[h][0].task, pr.v2_outputs);
            expect_answer(&pr, false, what);
            expect_answer(&pr, true, what);
        }
    }
    /* tagging with no entity at all: [0] tensors, contents present and empty */
    proto_task_result none = {.task = "ner", .version = "1", .kind = PROTO_HEAD_TAGGING, .aggregation = PROTO_AGG_NONE};
    proto_predict_resp pr = {.request_id = "r", .model = "bert", .n_inputs = 1, .n_tasks = 1, .results = &none};
    expect_answer(&pr, false, "no entity");
    expect_answer(&pr, true, "no entity (raw)");
    /* an engine string that is not UTF-8 cannot be answered, as REST's JSON could not */
    proto_task_result badqa = qa[0];
    badqa.ans_text = "\xff\xfe", badqa.ans_text_len = 2;
    pr.results = &badqa;
    uint8_t *out = NULL;
    size_t len = 0;
    cr_expect_eq(proto_grpc_infer_encode(&pr, false, &out, &len), ENG_INTERNAL);
    cr_expect_null(proto_v2_infer_encode(&pr, &len));
}

/* A decoded request's binary_data_output reaches the answer as raw data with the values (the fault:
 * an OK status and [1]-shaped tensors without data). */
Test(grpc_infer, binary_data_output_answers_raw_with_the_data) {
    const spec s = {.texts = {"good", "bad"}, .n = 2, .shape_n = -1, .params = {{"binary_data_output", P_BOOL, 1}}, .n_params = 1};
    size_t n;
    uint8_t *msg = pack_request(&s, &n);
    proto_predict_req r;
    proto_grpc_infer_target t;
    eng_err e = {0};
    cr_assert_eq(proto_grpc_infer_decode(msg, n, NULL, &r, &t, &e), 0, "%s", e.msg);
    cr_assert(t.raw);
    const char *labels[] = {"neg", "pos"};
    float sc[] = {0.1f, 0.9f, 0.8f, 0.2f};
    proto_task_result res[2] = {{.task = "t", .version = "1", .kind = PROTO_HEAD_CLASSIFICATION, .n_labels = 2, .labels = labels, .scores = sc,
                                 .label = 1},
                                {.task = "t", .version = "1", .kind = PROTO_HEAD_CLASSIFICATION, .n_labels = 2, .labels = labels,
                                 .scores = sc + 2, .label = 0}};
    proto_predict_resp pr = {.request_id = "x", .model = "bert", .n_inputs = r.n_inputs, .n_tasks = 1, .results = res,
                             .v2_outputs = r.v2_outputs, .v2_id = r.v2_id, .v2_binary = r.v2_binary};
    expect_answer(&pr, t.raw, "binary_data_output");
    uint8_t *out = NULL;
    size_t len = 0;
    cr_assert_eq(proto_grpc_infer_encode(&pr, t.raw, &out, &len), 0);
    Inference__ModelInferResponse *m = inference__model_infer_response__unpack(NULL, len - 5, out + 5);
    cr_assert(m);
    cr_assert_eq(m->n_outputs, 3);
    cr_expect_eq(m->outputs[0]->shape[0], 2, "label: one per input, not [1]");
    static const uint8_t label[] = {3, 0, 0, 0, 'p', 'o', 's', 3, 0, 0, 0, 'n', 'e', 'g'};
    cr_assert_eq(m->raw_output_contents[0].len, sizeof label);
    cr_expect_eq(memcmp(m->raw_output_contents[0].data, label, sizeof label), 0);
    inference__model_infer_response__free_unpacked(m, NULL);
    free(out), free(msg);
    proto_predict_free(&r);
}
