/* parse.c - the v1 request bodies (POST /v1/predict, /v1/embed, /v1/tokenize) into
 * proto_predict_req, with jansson.
 *
 * Parsing keeps the jansson document alive inside the request struct and hands out borrowed
 * pointers into it, so a request's texts are never copied. Every check names the field it refused,
 * because a client fixing a request reads these messages. The pieces v2's parser reuses (the
 * document, a text, the common parameters) are proto__ functions (internal.h); this file needs
 * only json.c's names.
 *
 * The request parameters (skip, budget, latency_ms, truncate, aggregation, binary_data_output)
 * are one table of setters that take a typed value (proto__value), whichever wire carried it: a
 * JSON body (v1, v2's "parameters") or gRPC's InferParameter map (grpc.c). A parameter's rules and
 * messages live in its setter alone, so the protocols cannot drift apart. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Defaults of the limits (the server's options override them). */
#define DEFAULT_MAX_INPUTS 64
#define DEFAULT_MAX_TASKS 32
#define DEFAULT_MAX_TEXT_BYTES (1 << 20)

proto_limits proto_default_limits(void) {
    return (proto_limits){.max_inputs = DEFAULT_MAX_INPUTS, .max_tasks = DEFAULT_MAX_TASKS,
                          .max_text_bytes = DEFAULT_MAX_TEXT_BYTES};
}

void proto_predict_free(proto_predict_req *r) {
    if (!r) return;
    free(r->inputs);
    free((void *)r->tasks);
    free(r->skips);
    free(r->task_long);
    free(r->ids_);
    for (int i = 0; i < r->n_own_; i++) free(r->own_[i]);
    free(r->own_);
    json_decref((json_t *)r->doc_);
    memset(r, 0, sizeof *r);
}

int proto__req_own(proto_predict_req *r, void *p) {
    void **o = realloc(r->own_, (size_t)(r->n_own_ + 1) * sizeof *o);
    if (!o) {
        free(p);
        return -1;
    }
    r->own_ = o;
    r->own_[r->n_own_++] = p;
    return 0;
}

int proto_req_prefix_text(proto_predict_req *r, int i, const char *prefix, size_t plen, const proto_limits *lim,
                          eng_err *err) {
    proto_text *t = &r->inputs[i];
    if (t->len + t->pair_len + plen > lim->max_text_bytes)
        return eng_err_set(err, ENG_LIMIT, "inputs[%d] with its prompt is %zu bytes, over the limit of %zu", i,
                           t->len + t->pair_len + plen, lim->max_text_bytes);
    char *b = malloc(plen + t->len + 1);
    if (!b || proto__req_own(r, b)) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    memcpy(b, prefix, plen);
    memcpy(b + plen, t->text, t->len);
    b[plen + t->len] = '\0';
    t->text = b;
    t->len += plen;
    return 0;
}

int proto_req_set_ids(proto_predict_req *r, int i, const int32_t *ids, const int32_t *type_ids, int n) {
    int32_t *b = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *b);
    if (!b || proto__req_own(r, b)) return ENG_NO_MEMORY;
    memcpy(b, ids, (size_t)n * sizeof *b);
    if (type_ids) memcpy(b + n, type_ids, (size_t)n * sizeof *b);
    r->inputs[i] = (proto_text){.ids = b, .type_ids = type_ids ? b + n : NULL, .n_ids = n};
    return 0;
}

const char *proto_req_own_string(proto_predict_req *r, const char *s) {
    size_t n = strlen(s) + 1;
    char *b = malloc(n);
    if (!b || proto__req_own(r, b)) return NULL;
    return memcpy(b, s, n);
}

void proto__req_init(proto_predict_req *r) {
    memset(r, 0, sizeof *r);
    r->skip = -1;
    r->budget = -1;
    r->latency_ms = -1;
    r->ret_scores = 1;
    r->truncate = 1;
    r->normalize = 1;
    r->add_special_tokens = 1;
    r->qa_doc_stride = -1;
    r->stride = -1;
}

int proto__is_qa_param(const char *k) {
    static const char *const qa[] = {"max_answer_len", "top_k", "handle_impossible_answer", "max_seq_len",
                                     "doc_stride", "max_question_len", "qa_rule", "align_to_words", "stride", "long"};
    for (size_t i = 0; i < sizeof qa / sizeof qa[0]; i++)
        if (!strcmp(k, qa[i])) return 1;
    return 0;
}

static json_t *load_object(const char *body, size_t len, eng_err *err) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        eng_err_set(err, ENG_MALFORMED, "body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        eng_err_set(err, ENG_MALFORMED, "body must be a JSON object");
        return NULL;
    }
    return root;
}

json_t *proto__req_begin(const char *body, size_t len, const proto_limits **lim, proto_limits *dl, proto_predict_req *r,
                         eng_err *err) {
    *dl = proto_default_limits();
    if (!*lim) *lim = dl;
    proto__req_init(r);
    return r->doc_ = load_object(body, len, err);
}

int proto__text_fits(size_t len, size_t pair_len, const proto_limits *lim, const char *where, eng_err *err) {
    if (len + pair_len > lim->max_text_bytes)
        return eng_err_set(err, ENG_LIMIT, "%s is %zu bytes, over the limit of %zu", where, len + pair_len, lim->max_text_bytes);
    return 0;
}

int proto__set_text(proto_text *t, json_t *s, json_t *pair, const proto_limits *lim, const char *where, eng_err *err) {
    t->text = json_string_value(s);
    t->len = json_string_length(s);
    if (pair && !json_is_null(pair)) {
        if (!json_is_string(pair)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.text_pair must be a string", where);
        t->pair = json_string_value(pair);
        t->pair_len = json_string_length(pair);
    }
    return proto__text_fits(t->len, t->pair_len, lim, where, err);
}

/* Largest token id accepted on the wire (the server checks it against the model's vocabulary). */
#define MAX_TOKEN_ID 0x7fffffff

/* An ids array: non-empty, integers 0..MAX_TOKEN_ID; returns its length or a negative status. */
static int check_ids(json_t *a, const char *where, const char *field, eng_err *err) {
    size_t n = json_array_size(a);
    if (n == 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s%s is empty", where, field);
    if (n > (size_t)MAX_TOKEN_ID) return eng_err_set(err, ENG_LIMIT, "%s%s is too long", where, field);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > MAX_TOKEN_ID)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s%s[%zu] must be a non-negative integer token id", where, field, i);
    }
    return (int)n;
}

static void copy_ids(json_t *a, int32_t *dst) {
    for (size_t i = 0; i < json_array_size(a); i++) dst[i] = (int32_t)json_integer_value(json_array_get(a, i));
}

/* An input that is ids: [1, 2, 3] or {"ids": [...], "type_ids": [...]}. Sets *ids / *types (types
 * may stay NULL); returns 1 when e is such an input, 0 when it is not, or a negative status. */
static int ids_input(json_t *e, const char *where, json_t **ids, json_t **types, eng_err *err) {
    *ids = *types = NULL;
    if (json_is_array(e)) {
        int n = check_ids(e, where, "", err);
        if (n < 0) return n;
        *ids = e;
        return 1;
    }
    if (!json_is_object(e) || !json_object_get(e, "ids")) return 0;
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
        if (strcmp(k, "ids") && strcmp(k, "type_ids"))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: unknown field \"%.60s\" (ids, type_ids)", where, k);
    }
    json_t *a = json_object_get(e, "ids"), *t = json_object_get(e, "type_ids");
    if (!json_is_array(a)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.ids must be an array of token ids", where);
    int n = check_ids(a, where, ".ids", err);
    if (n < 0) return n;
    if (t && !json_is_null(t)) {
        if (!json_is_array(t) || json_array_size(t) != (size_t)n)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.type_ids must be an array as long as ids", where);
        int m = check_ids(t, where, ".type_ids", err);
        if (m < 0) return m;
        *types = t;
    }
    *ids = a;
    return 1;
}

/* inputs: a string, one ids array, or an array of strings, ids arrays, {"text", "text_pair"} or
 * {"ids", "type_ids"}. allow_ids 0 refuses ids (tokenize). Ids are copied into one buffer (r->ids_). */
int proto__parse_inputs(json_t *in, const char *field, const proto_limits *lim, int allow_ids, proto_predict_req *r,
                        eng_err *err) {
    if (!in) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"%s\" is required", field);
    char shape[200];
    snprintf(shape, sizeof shape,
             allow_ids ? "\"%s\" must be a string, token ids, or an array of strings, of token ids, of "
                         "{\"text\", \"text_pair\"} or of {\"ids\", \"type_ids\"}"
                       : "\"%s\" must be a string or an array of strings or of {\"text\", \"text_pair\"}",
             field);
    if (!json_is_string(in) && !json_is_array(in)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s", shape);
    /* a flat array of integers is one ids input */
    int flat = json_is_array(in) && json_is_integer(json_array_get(in, 0));
    size_t n = json_is_array(in) && !flat ? json_array_size(in) : 1;
    if (json_is_array(in) && json_array_size(in) == 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"%s\" is empty", field);
    if (n > (size_t)lim->max_inputs)
        return eng_err_set(err, ENG_LIMIT, "\"%s\" has %zu entries, over the limit of %d", field, n, lim->max_inputs);
    if (!(r->inputs = calloc(n, sizeof *r->inputs))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    r->n_inputs = (int)n;
    if (json_is_string(in)) return proto__set_text(&r->inputs[0], in, NULL, lim, field, err);
    /* first pass: check every entry, count the ids */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = flat ? in : json_array_get(in, i), *ids, *types;
        char where[48];
        if (flat) snprintf(where, sizeof where, "%.20s", field);
        else snprintf(where, sizeof where, "%.20s[%zu]", field, i);
        int rc = ids_input(e, where, &ids, &types, err);
        if (rc < 0) return rc;
        if (rc == 1) {
            if (!allow_ids) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: token ids are not accepted here; send text", where);
            total += json_array_size(ids) * (types ? 2 : 1);
            r->inputs[i].n_ids = (int)json_array_size(ids);
            continue;
        }
        if (json_is_string(e)) {
            rc = proto__set_text(&r->inputs[i], e, NULL, lim, where, err);
        } else if (json_is_object(e)) {
            json_t *t = json_object_get(e, "text");
            if (!json_is_string(t)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.text must be a string", where);
            const char *k;
            json_t *v;
            json_object_foreach(e, k, v) {
                if (strcmp(k, "text") && strcmp(k, "text_pair"))
                    return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: unknown field \"%.60s\"", where, k);
            }
            rc = proto__set_text(&r->inputs[i], t, json_object_get(e, "text_pair"), lim, where, err);
        } else {
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: %s", where, shape);
        }
        if (rc) return rc;
    }
    if (!total) return 0;
    if (!(r->ids_ = malloc(total * sizeof *r->ids_))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    /* second pass: copy */
    int32_t *o = r->ids_;
    for (size_t i = 0; i < n; i++) {
        json_t *e = flat ? in : json_array_get(in, i), *ids, *types;
        if (ids_input(e, "", &ids, &types, NULL) != 1) continue;
        copy_ids(ids, o);
        r->inputs[i].ids = o;
        o += json_array_size(ids);
        if (types) {
            copy_ids(types, o);
            r->inputs[i].type_ids = o;
            o += json_array_size(types);
        }
    }
    return 0;
}

/* ---- request parameters: one setter each, for every wire (see the file's head) ---- */

proto__value proto__value_json(json_t *v) {
    proto__value x = {.kind = PROTO__NULL};
    if (!v || json_is_null(v)) return x;
    if (json_is_boolean(v)) x.kind = PROTO__BOOL, x.b = json_is_true(v);
    else if (json_is_integer(v)) x.kind = PROTO__INT, x.i = json_integer_value(v);
    else if (json_is_real(v)) x.kind = PROTO__REAL, x.x = json_real_value(v);
    else if (json_is_string(v)) x.kind = PROTO__STRING, x.s = json_string_value(v);
    else if (json_is_object(v)) x.kind = PROTO__OBJECT, x.obj = v;
    else x.kind = PROTO__OTHER;
    return x;
}

static bool is_number(const proto__value *v) { return v->kind == PROTO__INT || v->kind == PROTO__REAL; }
static double number(const proto__value *v) { return v->kind == PROTO__INT ? (double)v->i : v->x; }

/* A skip: an integer 0..1000; returns it, or a negative status naming where. */
static int skip_value(const proto__value *v, const char *where, eng_err *err) {
    if (v->kind != PROTO__INT || v->i < 0 || v->i > 1000)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s must be a non-negative integer", where);
    return (int)v->i;
}

/* "skip": N for every task, or (JSON only) {"task": N}, whose task names the document keeps. */
static int param_skip(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    if (v->kind != PROTO__OBJECT) return (r->skip = skip_value(v, "\"skip\"", err)) < 0 ? r->skip : 0;
    size_t n = json_object_size(v->obj);
    if (n > (size_t)lim->max_tasks) return eng_err_set(err, ENG_LIMIT, "\"skip\" names %zu tasks, over the limit of %d", n, lim->max_tasks);
    if (n && !(r->skips = calloc(n, sizeof *r->skips))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    const char *k;
    json_t *s;
    json_object_foreach(v->obj, k, s) {
        char where[96];
        snprintf(where, sizeof where, "skip.%.80s", k);
        proto__value e = proto__value_json(s);
        int sk = skip_value(&e, where, err);
        if (sk < 0) return sk;
        r->skips[r->n_skips++] = (proto_skip){k, sk};
    }
    return 0;
}

static int param_budget(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    if (!is_number(v) || number(v) < 0 || number(v) > 1)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"budget\" must be a number from 0 to 1");
    r->budget = number(v);
    if (r->skip >= 0 || r->n_skips) return eng_err_set(err, ENG_INVALID_ARGUMENT, "give either \"skip\" or \"budget\", not both");
    return 0;
}

static int param_latency(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    if (!is_number(v) || !(number(v) > 0)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"latency_ms\" must be a positive number");
    r->latency_ms = number(v);
    if (r->budget >= 0 || r->skip >= 0 || r->n_skips)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "give either \"latency_ms\" or \"skip\"/\"budget\", not both");
    return 0;
}

static int param_truncate(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    if (v->kind != PROTO__BOOL) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"truncate\" must be true or false");
    r->truncate = v->b;
    return 0;
}

static int param_aggregation(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    const char *a = v->kind == PROTO__STRING ? v->s : NULL;
    if (a && !strcmp(a, "none")) r->aggregation = PROTO_AGG_NONE;
    else if (a && !strcmp(a, "simple")) r->aggregation = PROTO_AGG_SIMPLE;
    else if (a && !strcmp(a, "first")) r->aggregation = PROTO_AGG_FIRST;
    else return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"aggregation\" must be \"none\", \"simple\" or \"first\"");
    return 0;
}

/* v2's "binary_data_output": every output as binary data unless the output says otherwise (the
 * outputs' own "binary_data" are applied after, proto__v2_outputs_end). */
static int param_binary_output(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    if (v->kind != PROTO__BOOL) return eng_err_set(err, ENG_INVALID_ARGUMENT, "parameters.binary_data_output must be true or false");
    r->v2_binary = v->b ? ~0u : 0u;
    return 0;
}

/* An integer parameter in lo..hi into *dst. */
static int int_param(const proto__value *v, const char *key, int lo, int hi, int *dst, eng_err *err) {
    if (v->kind != PROTO__INT || v->i < lo || v->i > hi)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"%s\" must be an integer from %d to %d", key, lo, hi);
    *dst = (int)v->i;
    return 0;
}

/* The question-answering pipeline's parameters (its names and ranges; the server checks the window
 * sizes against the model). */
#define QA_MAX_TOKENS 8192
static int param_max_answer_len(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    return int_param(v, "max_answer_len", 1, QA_MAX_TOKENS, &r->qa_max_answer_len, err);
}
static int param_top_k(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    return int_param(v, "top_k", 1, PROTO_QA_MAX_TOP_K, &r->qa_top_k, err);
}
static int param_max_seq_len(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    return int_param(v, "max_seq_len", 4, QA_MAX_TOKENS, &r->qa_max_seq_len, err);
}
static int param_doc_stride(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    return int_param(v, "doc_stride", 0, QA_MAX_TOKENS, &r->qa_doc_stride, err);
}
static int param_max_question_len(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    return int_param(v, "max_question_len", 1, QA_MAX_TOKENS, &r->qa_max_question_len, err);
}
static int param_handle_impossible(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    if (v->kind != PROTO__BOOL) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"handle_impossible_answer\" must be true or false");
    r->qa_handle_impossible = v->b;
    return 0;
}
static int param_align_to_words(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    if (v->kind != PROTO__BOOL) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"align_to_words\" must be true or false");
    r->qa_no_align = !v->b;
    return 0;
}
static int param_stride(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    return int_param(v, "stride", 0, QA_MAX_TOKENS, &r->stride, err);
}
/* "long" (where: the field's name in errors): {"mode": "chunks" | "first", "aggregate": "mean" | "max",
 * "stride": N}; as a parameter of a wire without objects (gRPC), the string "chunks" or "chunks-max". */
static int long_of(const proto__value *v, const char *where, proto_long *out, eng_err *err) {
    *out = (proto_long){.given = 1};
    if (v->kind == PROTO__STRING) {
        if (!strcmp(v->s, "first")) return 0;
        out->chunks = !strcmp(v->s, "chunks") || !strcmp(v->s, "chunks-max");
        out->max = !strcmp(v->s, "chunks-max");
        if (!out->chunks) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s must be an object, \"chunks\", \"chunks-max\" or \"first\"", where);
        return 0;
    }
    if (v->kind != PROTO__OBJECT) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s must be {\"mode\": \"chunks\", ...}", where);
    const char *k;
    json_t *x;
    json_object_foreach(v->obj, k, x) {
        const char *s = json_string_value(x);
        if (!strcmp(k, "mode")) {
            if (!s || (strcmp(s, "chunks") && strcmp(s, "first")))
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.mode must be \"chunks\" or \"first\"", where);
            out->chunks = !strcmp(s, "chunks");
        } else if (!strcmp(k, "aggregate")) {
            if (!s || (strcmp(s, "mean") && strcmp(s, "max")))
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.aggregate must be \"mean\" or \"max\"", where);
            out->max = !strcmp(s, "max");
        } else if (!strcmp(k, "stride")) {
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > QA_MAX_TOKENS)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.stride must be an integer 0..%d", where, QA_MAX_TOKENS);
            out->stride = (int)json_integer_value(x);
        } else {
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s has an unknown field \"%.80s\"", where, k);
        }
    }
    return 0;
}
static int param_long(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    return long_of(v, "\"long\"", &r->long_read, err);
}
static int param_qa_rule(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    const char *a = v->kind == PROTO__STRING ? v->s : NULL;
    if (a && !strcmp(a, "pipeline")) r->qa_context_rule = 0;
    else if (a && !strcmp(a, "context")) r->qa_context_rule = 1;
    else return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"qa_rule\" must be \"pipeline\" or \"context\"");
    return 0;
}

/* "route_key": a string (or an integer, read as its digits) of 1..256 bytes, copied into the request. */
static int param_route_key(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err) {
    (void)lim;
    char num[32];
    const char *s = v->kind == PROTO__STRING ? v->s : NULL;
    if (v->kind == PROTO__INT) snprintf(num, sizeof num, "%lld", v->i), s = num;
    size_t n = s ? strlen(s) : 0;
    if (!s || n == 0 || n > 256) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"route_key\" must be a string of 1..256 bytes");
    char *c = strdup(s);
    if (!c || proto__req_own(r, c)) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    r->route_key = c;
    return 0;
}

static const struct {
    const char *key;
    int (*set)(proto_predict_req *r, const proto__value *v, const proto_limits *lim, eng_err *err);
} params[] = {{"skip", param_skip},
              {"budget", param_budget},
              {"latency_ms", param_latency},
              {"truncate", param_truncate},
              {"aggregation", param_aggregation},
              {"max_answer_len", param_max_answer_len},
              {"top_k", param_top_k},
              {"handle_impossible_answer", param_handle_impossible},
              {"max_seq_len", param_max_seq_len},
              {"doc_stride", param_doc_stride},
              {"max_question_len", param_max_question_len},
              {"qa_rule", param_qa_rule},
              {"align_to_words", param_align_to_words},
              {"stride", param_stride},
              {"long", param_long},
              {"route_key", param_route_key},
              {"binary_data_output", param_binary_output}};

/* In the order proto__parse_common reads them: a request's first refusal is the same on every wire. */
const char *const proto__common_params[] = {"skip", "budget", "latency_ms", "truncate", "aggregation",
                                            "max_answer_len", "top_k", "handle_impossible_answer", "max_seq_len",
                                            "doc_stride", "max_question_len", "qa_rule", "align_to_words", "stride", "long",
                                            "route_key", NULL};

int proto__param_set(proto_predict_req *r, const char *key, const proto__value *v, const proto_limits *lim, eng_err *err) {
    if (v->kind == PROTO__NULL) return 0;
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        if (!strcmp(key, params[i].key)) return params[i].set(r, v, lim, err);
    return 0;
}

int proto__parse_common(json_t *root, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    for (const char *const *k = proto__common_params; *k; k++) {
        proto__value v = proto__value_json(json_object_get(root, *k));
        int rc = proto__param_set(r, *k, &v, lim, err);
        if (rc) return rc;
    }
    return 0;
}

/* A task named by object, {"name": "sentiment", "version": "2", "long": {...}} (version and long
 * optional), is rewritten in place in the array as the string "sentiment@2", which the request then
 * borrows like any other name (the document owns it); its "long" goes to lg. Returns 0 (also when the
 * entry is not an object), or an error. */
static int task_spec_of_object(json_t *arr, size_t i, proto_long *lg, eng_err *err) {
    json_t *o = json_array_get(arr, i);
    if (!json_is_object(o)) return 0;
    const char *k, *name = NULL, *ver = NULL;
    json_t *x;
    json_object_foreach(o, k, x) {
        if (!strcmp(k, "long")) {
            char where[48];
            snprintf(where, sizeof where, "tasks[%zu].long", i);
            proto__value lv = proto__value_json(x);
            int rc = lv.kind == PROTO__NULL ? 0 : long_of(&lv, where, lg, err);
            if (rc) return rc;
            continue;
        }
        const char **dst = !strcmp(k, "name") ? &name : !strcmp(k, "version") ? &ver : NULL;
        if (!dst) return eng_err_set(err, ENG_INVALID_ARGUMENT, "tasks[%zu] has an unknown field \"%.80s\"", i, k);
        if (!json_is_null(x) && !(*dst = json_string_value(x)))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "tasks[%zu].%s must be a string", i, k);
    }
    if (!name || !*name) return eng_err_set(err, ENG_INVALID_ARGUMENT, "tasks[%zu] needs a \"name\"", i);
    if (strchr(name, '@')) return eng_err_set(err, ENG_INVALID_ARGUMENT, "tasks[%zu].name holds '@'", i);
    if (ver && !*ver) return eng_err_set(err, ENG_INVALID_ARGUMENT, "tasks[%zu].version is empty", i);
    json_t *spec = ver ? json_sprintf("%s@%s", name, ver) : json_string(name);
    if (!spec || json_array_set_new(arr, i, spec)) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    return 0;
}

int proto_predict_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    proto_limits dl;
    json_t *root = proto__req_begin(body, len, &lim, &dl, r, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    int rc;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "inputs") && strcmp(k, "tasks") && strcmp(k, "skip") && strcmp(k, "budget") &&
            strcmp(k, "latency_ms") && strcmp(k, "return") && strcmp(k, "truncate") && strcmp(k, "aggregation") &&
            strcmp(k, "route_key") && !proto__is_qa_param(k)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown field \"%.80s\"", k);
            goto bad;
        }
    }
    if ((rc = proto__parse_inputs(json_object_get(root, "inputs"), "inputs", lim, 1, r, err))) goto bad;
    if ((v = json_object_get(root, "tasks")) && !json_is_null(v)) {
        if (json_is_string(v)) {
            if (!(r->tasks = malloc(sizeof *r->tasks))) goto oom;
            r->tasks[r->n_tasks++] = json_string_value(v);
        } else if (json_is_array(v)) {
            size_t n = json_array_size(v);
            if (n == 0) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"tasks\" is empty (leave it out for every task)");
                goto bad;
            }
            if (n > (size_t)lim->max_tasks) {
                rc = eng_err_set(err, ENG_LIMIT, "\"tasks\" has %zu entries, over the limit of %d", n, lim->max_tasks);
                goto bad;
            }
            if (!(r->tasks = calloc(n, sizeof *r->tasks)) || !(r->task_long = calloc(n, sizeof *r->task_long))) goto oom;
            for (size_t i = 0; i < n; i++) {
                if ((rc = task_spec_of_object(v, i, &r->task_long[i], err))) goto bad;
                const char *s = json_string_value(json_array_get(v, i));
                if (!s) {
                    rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "tasks[%zu] must be a task name, \"name@version\" or "
                                                           "{\"name\": ..., \"version\": ...}", i);
                    goto bad;
                }
                /* one version per task: the answer is keyed by task name */
                size_t sn = strcspn(s, "@");
                for (int j = 0; j < r->n_tasks; j++)
                    if (strcspn(r->tasks[j], "@") == sn && !strncmp(r->tasks[j], s, sn)) {
                        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "task \"%.*s\" is named twice", (int)(sn > 80 ? 80 : sn), s);
                        goto bad;
                    }
                r->tasks[r->n_tasks++] = s;
            }
        } else {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"tasks\" must be an array of task names");
            goto bad;
        }
    }
    if ((rc = proto__parse_common(root, lim, r, err))) goto bad;
    if ((v = json_object_get(root, "return")) && !json_is_null(v)) {
        if (!json_is_object(v)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"return\" must be an object {\"scores\", \"logits\", \"explain\"}");
            goto bad;
        }
        json_t *b;
        json_object_foreach(v, k, b) {
            int *dst = !strcmp(k, "scores") ? &r->ret_scores
                       : !strcmp(k, "logits") ? &r->ret_logits
                       : !strcmp(k, "explain") ? &r->ret_explain
                                               : NULL;
            if (!dst) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "return: unknown field \"%.80s\"", k);
                goto bad;
            }
            if (!json_is_boolean(b)) {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "return.%s must be true or false", k);
                goto bad;
            }
            *dst = json_is_true(b);
        }
    }
    return 0;
oom:
    rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
bad:
    proto_predict_free(r);
    return rc;
}

static int bool_field(json_t *root, const char *key, int *dst, eng_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"%s\" must be true or false", key);
    *dst = json_is_true(v);
    return 0;
}

int proto__model_field(json_t *root, proto_predict_req *r, eng_err *err) {
    json_t *v = json_object_get(root, "model");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"model\" must be a model name (GET /v1/models)");
    r->model = json_string_value(v);
    return 0;
}

/* Refuses keys of root not in the NULL-terminated list. */
int proto__known_keys(json_t *root, const char *const *keys, eng_err *err) {
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        int ok = 0;
        for (const char *const *q = keys; *q && !ok; q++) ok = !strcmp(k, *q);
        if (!ok) return eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown field \"%.80s\"", k);
    }
    return 0;
}

int proto__dimensions(json_t *root, proto_predict_req *r, eng_err *err) {
    json_t *v = json_object_get(root, "dimensions");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"dimensions\" must be a positive integer");
    r->dimensions = (int)json_integer_value(v);
    return 0;
}

int proto__embed_long(json_t *root, proto_predict_req *r, eng_err *err) {
    proto__value v = proto__value_json(json_object_get(root, "long"));
    if (v.kind == PROTO__NULL) return 0;
    int rc = long_of(&v, "\"long\"", &r->long_read, err);
    if (!rc && r->long_read.max)
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"long\".aggregate of an embedding is \"mean\" (the windows' vectors "
                                                    "weighted by their tokens)");
    return rc;
}

int proto_embed_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    static const char *const keys[] = {"inputs", "normalize", "truncate", "truncation_direction", "pooling", "model",
                                       "prompt_name", "dimensions", "long", NULL};
    proto_limits dl;
    json_t *root = proto__req_begin(body, len, &lim, &dl, r, err), *v;
    if (!root) return err ? err->code : ENG_MALFORMED;
    r->truncate = 0; /* as text-embeddings-inference: an input over the limit is refused unless asked */
    int rc;
    if ((rc = proto__known_keys(root, keys, err)) ||
        (rc = proto__parse_inputs(json_object_get(root, "inputs"), "inputs", lim, 1, r, err)) ||
        (rc = bool_field(root, "normalize", &r->normalize, err)) || (rc = bool_field(root, "truncate", &r->truncate, err)) ||
        (rc = proto__model_field(root, r, err)))
        goto bad;
    if ((v = json_object_get(root, "truncation_direction")) && !json_is_null(v)) {
        const char *d = json_string_value(v);
        if (d && (!strcmp(d, "left") || !strcmp(d, "Left"))) r->truncate_left = 1;
        else if (!d || (strcmp(d, "right") && strcmp(d, "Right"))) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT,
                             "\"truncation_direction\" must be \"right\" (the end of a text is cut) or \"left\" (its start)");
            goto bad;
        }
    }
    if ((v = json_object_get(root, "prompt_name")) && !json_is_null(v)) {
        if (!json_is_string(v) || !json_string_length(v)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"prompt_name\" must be a non-empty string");
            goto bad;
        }
        r->prompt_name = json_string_value(v);
    }
    if ((rc = proto__dimensions(root, r, err)) || (rc = proto__embed_long(root, r, err))) goto bad;
    if ((v = json_object_get(root, "pooling")) && !json_is_null(v)) {
        const char *p = json_string_value(v);
        static const proto_pooling all[] = {PROTO_POOL_CLS, PROTO_POOL_MEAN, PROTO_POOL_POOLER, PROTO_POOL_NONE};
        for (size_t i = 0; p && i < sizeof all / sizeof all[0]; i++)
            if (!strcmp(p, proto_pooling_name(all[i]))) r->pooling = all[i];
        if (r->pooling == PROTO_POOL_DEFAULT) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"pooling\" must be \"cls\", \"mean\", \"pooler\" or \"none\"");
            goto bad;
        }
    }
    return 0;
bad:
    proto_predict_free(r);
    return rc;
}

int proto_tokenize_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    static const char *const keys[] = {"inputs", "add_special_tokens", "model", NULL};
    proto_limits dl;
    json_t *root = proto__req_begin(body, len, &lim, &dl, r, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    int rc;
    if ((rc = proto__known_keys(root, keys, err)) || (rc = proto__parse_inputs(json_object_get(root, "inputs"), "inputs", lim, 0, r, err)) ||
        (rc = bool_field(root, "add_special_tokens", &r->add_special_tokens, err)) || (rc = proto__model_field(root, r, err)))
        goto bad;
    return 0;
bad:
    proto_predict_free(r);
    return rc;
}
