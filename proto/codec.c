/* codec.c - JSON of requests and responses (see proto.h), with jansson.
 *
 * Parsing keeps the jansson document alive inside the request struct and hands out borrowed
 * pointers into it, so a request's texts are never copied. Every check names the field it refused,
 * because a client fixing a request reads these messages. */
#include "proto/proto.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    free(r->ids_);
    json_decref((json_t *)r->doc_);
    memset(r, 0, sizeof *r);
}

static void req_init(proto_predict_req *r) {
    memset(r, 0, sizeof *r);
    r->skip = -1;
    r->budget = -1;
    r->latency_ms = -1;
    r->ret_scores = 1;
    r->truncate = 1;
    r->normalize = 1;
    r->add_special_tokens = 1;
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

static int set_text(proto_text *t, json_t *s, json_t *pair, const proto_limits *lim, const char *where, eng_err *err) {
    t->text = json_string_value(s);
    t->len = json_string_length(s);
    if (pair && !json_is_null(pair)) {
        if (!json_is_string(pair)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.text_pair must be a string", where);
        t->pair = json_string_value(pair);
        t->pair_len = json_string_length(pair);
    }
    if (t->len + t->pair_len > lim->max_text_bytes)
        return eng_err_set(err, ENG_LIMIT, "%s is %zu bytes, over the limit of %zu", where, t->len + t->pair_len,
                    lim->max_text_bytes);
    return 0;
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
static int parse_inputs(json_t *in, const proto_limits *lim, int allow_ids, proto_predict_req *r, eng_err *err) {
    if (!in) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"inputs\" is required");
    const char *shape = allow_ids ? "\"inputs\" must be a string, token ids, or an array of strings, of token ids, of "
                                    "{\"text\", \"text_pair\"} or of {\"ids\", \"type_ids\"}"
                                  : "\"inputs\" must be a string or an array of strings or of {\"text\", \"text_pair\"}";
    if (!json_is_string(in) && !json_is_array(in)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s", shape);
    /* a flat array of integers is one ids input */
    int flat = json_is_array(in) && json_is_integer(json_array_get(in, 0));
    size_t n = json_is_array(in) && !flat ? json_array_size(in) : 1;
    if (json_is_array(in) && json_array_size(in) == 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"inputs\" is empty");
    if (n > (size_t)lim->max_inputs)
        return eng_err_set(err, ENG_LIMIT, "\"inputs\" has %zu entries, over the limit of %d", n, lim->max_inputs);
    if (!(r->inputs = calloc(n, sizeof *r->inputs))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    r->n_inputs = (int)n;
    if (json_is_string(in)) return set_text(&r->inputs[0], in, NULL, lim, "inputs", err);
    /* first pass: check every entry, count the ids */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = flat ? in : json_array_get(in, i), *ids, *types;
        char where[48];
        snprintf(where, sizeof where, flat ? "inputs" : "inputs[%zu]", i);
        int rc = ids_input(e, where, &ids, &types, err);
        if (rc < 0) return rc;
        if (rc == 1) {
            if (!allow_ids) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: token ids are not accepted here; send text", where);
            total += json_array_size(ids) * (types ? 2 : 1);
            r->inputs[i].n_ids = (int)json_array_size(ids);
            continue;
        }
        if (json_is_string(e)) {
            rc = set_text(&r->inputs[i], e, NULL, lim, where, err);
        } else if (json_is_object(e)) {
            json_t *t = json_object_get(e, "text");
            if (!json_is_string(t)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s.text must be a string", where);
            const char *k;
            json_t *v;
            json_object_foreach(e, k, v) {
                if (strcmp(k, "text") && strcmp(k, "text_pair"))
                    return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: unknown field \"%.60s\"", where, k);
            }
            rc = set_text(&r->inputs[i], t, json_object_get(e, "text_pair"), lim, where, err);
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

static int skip_value(json_t *v, const char *where, eng_err *err) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s must be a non-negative integer", where);
    return (int)json_integer_value(v);
}

static int parse_common(json_t *root, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    json_t *v;
    if ((v = json_object_get(root, "skip")) && !json_is_null(v)) {
        if (json_is_object(v)) {
            size_t n = json_object_size(v);
            if (n > (size_t)lim->max_tasks)
                return eng_err_set(err, ENG_LIMIT, "\"skip\" names %zu tasks, over the limit of %d", n, lim->max_tasks);
            if (n && !(r->skips = calloc(n, sizeof *r->skips))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
            const char *k;
            json_t *s;
            json_object_foreach(v, k, s) {
                char where[96];
                snprintf(where, sizeof where, "skip.%.80s", k);
                int sk = skip_value(s, where, err);
                if (sk < 0) return sk;
                r->skips[r->n_skips++] = (proto_skip){k, sk};
            }
        } else {
            if ((r->skip = skip_value(v, "\"skip\"", err)) < 0) return r->skip;
        }
    }
    if ((v = json_object_get(root, "budget")) && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"budget\" must be a number from 0 to 1");
        r->budget = json_number_value(v);
    }
    if (r->budget >= 0 && (r->skip >= 0 || r->n_skips))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "give either \"skip\" or \"budget\", not both");
    if ((v = json_object_get(root, "latency_ms")) && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"latency_ms\" must be a positive number");
        r->latency_ms = json_number_value(v);
        if (r->budget >= 0 || r->skip >= 0 || r->n_skips)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "give either \"latency_ms\" or \"skip\"/\"budget\", not both");
    }
    if ((v = json_object_get(root, "truncate")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"truncate\" must be true or false");
        r->truncate = json_is_true(v);
    }
    if ((v = json_object_get(root, "aggregation")) && !json_is_null(v)) {
        const char *a = json_string_value(v);
        if (a && !strcmp(a, "none")) r->aggregation = PROTO_AGG_NONE;
        else if (a && !strcmp(a, "simple")) r->aggregation = PROTO_AGG_SIMPLE;
        else if (a && !strcmp(a, "first")) r->aggregation = PROTO_AGG_FIRST;
        else return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"aggregation\" must be \"none\", \"simple\" or \"first\"");
    }
    return 0;
}

/* A task named by object, {"name": "sentiment", "version": "2"} (version optional), is rewritten
 * in place in the array as the string "sentiment@2", which the request then borrows like any
 * other name (the document owns it). Returns 0 (also when the entry is not an object), or an error. */
static int task_spec_of_object(json_t *arr, size_t i, eng_err *err) {
    json_t *o = json_array_get(arr, i);
    if (!json_is_object(o)) return 0;
    const char *k, *name = NULL, *ver = NULL;
    json_t *x;
    json_object_foreach(o, k, x) {
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
    proto_limits dl = proto_default_limits();
    if (!lim) lim = &dl;
    req_init(r);
    json_t *root = load_object(body, len, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    r->doc_ = root;
    int rc;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "inputs") && strcmp(k, "tasks") && strcmp(k, "skip") && strcmp(k, "budget") &&
            strcmp(k, "latency_ms") && strcmp(k, "return") && strcmp(k, "truncate") && strcmp(k, "aggregation")) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown field \"%.80s\"", k);
            goto bad;
        }
    }
    if ((rc = parse_inputs(json_object_get(root, "inputs"), lim, 1, r, err))) goto bad;
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
            if (!(r->tasks = calloc(n, sizeof *r->tasks))) goto oom;
            for (size_t i = 0; i < n; i++) {
                if ((rc = task_spec_of_object(v, i, err))) goto bad;
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
    if ((rc = parse_common(root, lim, r, err))) goto bad;
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

const char *proto_pooling_name(proto_pooling p) {
    switch (p) {
    case PROTO_POOL_DEFAULT: return "default";
    case PROTO_POOL_CLS: return "cls";
    case PROTO_POOL_MEAN: return "mean";
    case PROTO_POOL_POOLER: return "pooler";
    case PROTO_POOL_NONE: return "none";
    }
    return "default";
}

static int bool_field(json_t *root, const char *key, int *dst, eng_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"%s\" must be true or false", key);
    *dst = json_is_true(v);
    return 0;
}

static int model_field(json_t *root, proto_predict_req *r, eng_err *err) {
    json_t *v = json_object_get(root, "model");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"model\" must be a model name (GET /v1/models)");
    r->model = json_string_value(v);
    return 0;
}

/* Refuses keys of root not in the NULL-terminated list. */
static int known_keys(json_t *root, const char *const *keys, eng_err *err) {
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        int ok = 0;
        for (const char *const *q = keys; *q && !ok; q++) ok = !strcmp(k, *q);
        if (!ok) return eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown field \"%.80s\"", k);
    }
    return 0;
}

int proto_embed_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    static const char *const keys[] = {"inputs", "normalize", "truncate", "truncation_direction", "pooling", "model", NULL};
    proto_limits dl = proto_default_limits();
    if (!lim) lim = &dl;
    req_init(r);
    r->truncate = 0; /* as text-embeddings-inference: an input over the limit is refused unless asked */
    json_t *root = load_object(body, len, err), *v;
    if (!root) return err ? err->code : ENG_MALFORMED;
    r->doc_ = root;
    int rc;
    if ((rc = known_keys(root, keys, err)) || (rc = parse_inputs(json_object_get(root, "inputs"), lim, 1, r, err)) ||
        (rc = bool_field(root, "normalize", &r->normalize, err)) || (rc = bool_field(root, "truncate", &r->truncate, err)) ||
        (rc = model_field(root, r, err)))
        goto bad;
    if ((v = json_object_get(root, "truncation_direction")) && !json_is_null(v)) {
        const char *d = json_string_value(v);
        if (!d || (strcmp(d, "right") && strcmp(d, "Right"))) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"truncation_direction\" must be \"right\" (the end of the text is cut)");
            goto bad;
        }
    }
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
    proto_limits dl = proto_default_limits();
    if (!lim) lim = &dl;
    req_init(r);
    json_t *root = load_object(body, len, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    r->doc_ = root;
    int rc;
    if ((rc = known_keys(root, keys, err)) || (rc = parse_inputs(json_object_get(root, "inputs"), lim, 0, r, err)) ||
        (rc = bool_field(root, "add_special_tokens", &r->add_special_tokens, err)) || (rc = model_field(root, r, err)))
        goto bad;
    return 0;
bad:
    proto_predict_free(r);
    return rc;
}

/* A v2 BYTES tensor: {"name","shape":[N],"datatype":"BYTES","data":[...]}; returns the data array. */
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
    if (!json_is_array(shape) || json_array_size(shape) < 1 || json_array_size(shape) > 2 ||
        json_integer_value(json_array_get(shape, 0)) != (json_int_t)json_array_size(data) ||
        (json_array_size(shape) == 2 && json_integer_value(json_array_get(shape, 1)) != 1)) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu].shape must be [N] (or [N, 1]) with N the number of data entries", i);
        return NULL;
    }
    return data;
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
    proto_limits dl = proto_default_limits();
    if (!lim) lim = &dl;
    req_init(r);
    json_t *root = load_object(body, len, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    r->doc_ = root;
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
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "inputs[%zu]: a second tensor named \"%.60s\"", i, name);
            goto bad;
        }
        if (slot) *slot = d;
        else {
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
        if ((rc = set_text(&r->inputs[i], s, pair ? json_array_get(pair, i) : NULL, lim, where, err))) goto bad;
    }
    json_t *params = json_object_get(root, "parameters");
    if (params && !json_is_null(params)) {
        if (!json_is_object(params)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"parameters\" must be an object");
            goto bad;
        }
        if ((rc = parse_common(params, lim, r, err))) goto bad;
    }
    if ((rc = v2_requested_outputs(json_object_get(root, "outputs"), &r->v2_outputs, err))) goto bad;
    return 0;
bad:
    proto_predict_free(r);
    return rc;
}

/* ---- encoding ---- */

const char *proto_aggregation_name(proto_aggregation a) {
    switch (a) {
    case PROTO_AGG_TOKENS: return "tokens";
    case PROTO_AGG_NONE: return "none";
    case PROTO_AGG_SIMPLE: return "simple";
    case PROTO_AGG_FIRST: return "first";
    }
    return "tokens";
}

const char *proto_head_kind_name(proto_head_kind k) {
    switch (k) {
    case PROTO_HEAD_CLASSIFICATION: return "classification";
    case PROTO_HEAD_MULTILABEL: return "multilabel";
    case PROTO_HEAD_REGRESSION: return "regression";
    case PROTO_HEAD_TAGGING: return "tagging";
    case PROTO_HEAD_QA: return "qa";
    }
    return "unknown";
}

/* jansson's json_real refuses NaN/inf; a non-finite score becomes null rather than a failure. */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* Builders: each json_object_set_new consumes its value even on failure, so an allocation that
 * fails leaves a NULL somewhere; `ok` is checked once at the end by dumping. */
static char *dump(json_t *j, size_t *len) {
    if (!j) return NULL;
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (s && len) *len = strlen(s);
    return s;
}

static json_t *floats(const float *v, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, num(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *task_result(const proto_task_result *t, int ret_scores) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "version", json_string(t->version));
    bad |= json_object_set_new(o, "head", json_string(proto_head_kind_name(t->kind)));
    bad |= json_object_set_new(o, "skip", json_integer(t->skip));
    if (t->skip_source) bad |= json_object_set_new(o, "skip_source", json_string(t->skip_source));
    switch (t->kind) {
    case PROTO_HEAD_CLASSIFICATION:
        bad |= json_object_set_new(o, "label", json_string(t->labels[t->label]));
        bad |= json_object_set_new(o, "score", num(t->score));
        break;
    case PROTO_HEAD_MULTILABEL: {
        json_t *ls = json_array();
        for (int i = 0; ls && i < t->n_labels; i++)
            if (t->scores[i] > 0.5f) bad |= json_array_append_new(ls, json_string(t->labels[i]));
        bad |= json_object_set_new(o, "labels", ls);
        break;
    }
    case PROTO_HEAD_REGRESSION:
        bad |= json_object_set_new(o, "value", num(t->value));
        break;
    case PROTO_HEAD_TAGGING: {
        if (t->aggregation != PROTO_AGG_TOKENS) {
            /* the token-classification pipeline's entity shape: "entity" per token, "entity_group" grouped */
            const char *key = t->aggregation == PROTO_AGG_NONE ? "entity" : "entity_group";
            json_t *es = json_array();
            for (int i = 0; es && i < t->n_entities; i++) {
                const proto_entity *g = &t->entities[i];
                bad |= json_array_append_new(es, json_pack("{s:s,s:o,s:s%,s:i,s:i,s:i}", key, g->name, "score", num(g->score),
                                                           "word", g->word ? g->word : "", g->word_len, "start",
                                                           (int)g->start, "end", (int)g->end, "seq", g->seq));
            }
            bad |= json_object_set_new(o, "aggregation", json_string(proto_aggregation_name(t->aggregation)));
            bad |= json_object_set_new(o, "entities", es);
            break;
        }
        json_t *ts = json_array();
        for (int i = 0; ts && i < t->n_tags; i++) {
            const proto_tag *g = &t->tags[i];
            json_t *e = json_pack("{s:i,s:i,s:i,s:s,s:o}", "start", (int)g->start, "end", (int)g->end, "seq", g->seq,
                                  "label", t->labels[g->label], "score", num(g->score));
            bad |= json_array_append_new(ts, e);
        }
        bad |= json_object_set_new(o, "tokens", ts);
        break;
    }
    case PROTO_HEAD_QA:
        if (t->has_answer)
            bad |= json_object_set_new(o, "answer",
                                       json_pack("{s:s%,s:i,s:i,s:o}", "text", t->ans_text ? t->ans_text : "",
                                                 t->ans_text_len, "start", (int)t->ans_start, "end", (int)t->ans_end,
                                                 "score", num(t->ans_score)));
        else
            bad |= json_object_set_new(o, "answer", json_null());
        break;
    }
    if (ret_scores && t->scores &&
        (t->kind == PROTO_HEAD_CLASSIFICATION || t->kind == PROTO_HEAD_MULTILABEL)) {
        json_t *s = json_object();
        for (int i = 0; s && i < t->n_labels; i++) bad |= json_object_set_new(s, t->labels[i], num(t->scores[i]));
        bad |= json_object_set_new(o, "scores", s);
    }
    if (t->logits) {
        json_t *l;
        if (t->kind == PROTO_HEAD_TAGGING || t->kind == PROTO_HEAD_QA) {
            l = json_array();
            for (int r = 0; l && r < t->n_rows; r++)
                bad |= json_array_append_new(l, floats(t->logits + (size_t)r * t->n_labels, t->n_labels));
        } else {
            l = floats(t->logits, t->n_labels);
        }
        bad |= json_object_set_new(o, "logits", l);
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* {"kept": [...], "pruned": [...]}: a fusion's children as served. */
static json_t *fusion_obj(const proto_fusion_view *f) {
    json_t *o = json_pack("{s:[],s:[]}", "kept", "pruned");
    for (int i = 0; o && i < f->n; i++)
        if (json_array_append_new(json_object_get(o, f->kept[i] ? "kept" : "pruned"), json_string(f->children[i]))) {
            json_decref(o);
            o = NULL;
        }
    return o;
}

static json_t *explain_obj(const proto_explain *x) {
    json_t *layers = json_array();
    int bad = !layers;
    for (int l = 0; !bad && l < x->n_layers; l++)
        bad |= json_array_append_new(
            layers, json_pack("{s:i,s:i,s:i,s:i,s:o,s:{s:i,s:i,s:o}}", "layer", l, "rows", x->rows[l], "streams",
                              x->streams[l], "trunks", x->trunks[l], "ms", num(x->ms[l]), "batch", "rows",
                              x->batch_rows[l], "streams", x->batch_streams[l], "ms", num(x->batch_ms[l])));
    if (bad) {
        json_decref(layers);
        return NULL;
    }
    json_t *o = json_pack("{s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:{s:i,s:i,s:i,s:o,s:o}}", "scope", "request", "layers", layers,
                          "embed_ms", num(x->embed_ms), "heads_ms", num(x->heads_ms), "total_ms", num(x->total_ms),
                          "gflop", num(x->gflop), "share", num(x->share), "batch", "requests", x->batch_requests, "inputs",
                          x->batch_inputs, "tokens", x->batch_tokens, "gflop", num(x->batch_gflop), "total_ms",
                          num(x->batch_total_ms));
    json_t *fu = o && x->n_fusions ? json_object() : NULL;
    for (int i = 0; fu && i < x->n_fusions; i++)
        if (json_object_set_new(fu, x->fusions[i].task, fusion_obj(&x->fusions[i]))) json_decref(fu), fu = NULL;
    if (o && x->n_fusions && (!fu || json_object_set_new(o, "fusion", fu))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *proto_predict_encode(const proto_predict_resp *r, size_t *len) {
    json_t *results = json_array();
    int bad = !results;
    for (int i = 0; !bad && i < r->n_inputs; i++) {
        json_t *tasks = json_object();
        bad |= !tasks;
        for (int k = 0; !bad && k < r->n_tasks; k++) {
            const proto_task_result *t = &r->results[(size_t)i * r->n_tasks + k];
            bad |= json_object_set_new(tasks, t->task, task_result(t, r->ret_scores));
        }
        bad |= json_array_append_new(results, json_pack("{s:i,s:i,s:b,s:o}", "input", i, "tokens", r->tokens[i],
                                                        "truncated", r->truncated ? r->truncated[i] : 0, "tasks", tasks));
    }
    if (bad) {
        json_decref(results);
        return NULL;
    }
    json_t *o = json_pack("{s:s,s:s,s:o,s:{s:o,s:o,s:o},s:{s:i,s:i,s:i}}", "id", r->request_id, "model", r->model,
                          "results", results, "timing", "queue_ms", num(r->queue_ms), "inference_ms",
                          num(r->inference_ms), "total_ms", num(r->total_ms), "batch", "requests", r->batch_requests,
                          "inputs", r->batch_inputs, "tokens", r->batch_tokens);
    if (o && r->explain && json_object_set_new(o, "explain", explain_obj(r->explain))) {
        json_decref(o);
        return NULL;
    }
    json_t *tm = o ? json_object_get(o, "timing") : NULL;
    if (tm && r->load_ms > 0 && json_object_set_new(tm, "load_ms", num(r->load_ms))) {
        json_decref(o);
        return NULL;
    }
    if (tm && r->latency_target_ms > 0) {
        /* the target is on the engine's time, so it is judged on inference_ms (queue and load apart) */
        if (json_object_set_new(tm, "latency_target_ms", num(r->latency_target_ms)) ||
            json_object_set_new(tm, "predicted_ms", num(r->predicted_ms)) ||
            json_object_set_new(tm, "latency_exceeded", json_boolean(r->inference_ms > r->latency_target_ms))) {
            json_decref(o);
            return NULL;
        }
    }
    return dump(o, len);
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
            if (bit == PROTO_V2_OUT_LABEL) bad |= json_array_append_new(a, json_string(t->labels[best]));
            if (bit == PROTO_V2_OUT_SCORE) bad |= json_array_append_new(a, num(t->scores[best]));
            for (int j = 0; bit == PROTO_V2_OUT_SCORES && j < t->n_labels; j++) bad |= json_array_append_new(a, num(t->scores[j]));
            if (bit == PROTO_V2_OUT_LABELS) { /* the labels over the threshold in label order, then "" to K */
                int k = 0;
                for (int j = 0; j < t->n_labels; j++)
                    if (t->scores[j] > 0.5f) bad |= json_array_append_new(a, json_string(t->labels[j])), k++;
                for (; k < t->n_labels; k++) bad |= json_array_append_new(a, json_string(""));
            }
            break;
        }
        case PROTO_HEAD_REGRESSION: bad |= json_array_append_new(a, num(t->value)); break;
        case PROTO_HEAD_QA: {
            int has = t->has_answer;
            if (bit == PROTO_V2_OUT_ANSWER)
                bad |= json_array_append_new(a, json_stringn(has && t->ans_text ? t->ans_text : "", has ? t->ans_text_len : 0));
            if (bit == PROTO_V2_OUT_START) bad |= json_array_append_new(a, json_integer(has ? t->ans_start : -1));
            if (bit == PROTO_V2_OUT_END) bad |= json_array_append_new(a, json_integer(has ? t->ans_end : -1));
            if (bit == PROTO_V2_OUT_SCORE) bad |= json_array_append_new(a, has ? num(t->ans_score) : json_real(0));
            break;
        }
        case PROTO_HEAD_TAGGING:
            for (int e = 0; !bad && e < t->n_entities; e++) {
                const proto_entity *g = &t->entities[e];
                json_t *v = bit == PROTO_V2_OUT_ENTITY  ? json_string(g->name)
                            : bit == PROTO_V2_OUT_SCORE ? num(g->score)
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
    return dump(json_pack("{s:s,s:s,s:s,s:o}", "model_name", t0->task, "model_version", t0->version, "id",
                          r->request_id, "outputs", outs),
                len);
}

/* Embeddings can be large (every token's vector with pooling "none"): written straight as text,
 * each float with 9 significant digits (round-trips a float), without building a jansson tree. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} text_buf;

static void tb_reserve(text_buf *b, size_t more) {
    if (b->oom || b->len + more < b->cap) return;
    size_t nc = (b->cap + more) * 2;
    char *ns = realloc(b->s, nc);
    if (!ns) {
        b->oom = 1;
        return;
    }
    b->s = ns, b->cap = nc;
}

static void tb_putc(text_buf *b, char c) {
    tb_reserve(b, 2);
    if (!b->oom) b->s[b->len++] = c;
}

/* Bytes of the longest "%.9g" float ("-1.23456789e-38") plus slack. */
#define FLOAT_TEXT_MAX 24

static void tb_vector(text_buf *b, const float *v, int dim) {
    tb_putc(b, '[');
    for (int k = 0; k < dim; k++) {
        tb_reserve(b, FLOAT_TEXT_MAX + 2);
        if (b->oom) return;
        if (k) b->s[b->len++] = ',';
        if (isfinite(v[k])) b->len += (size_t)snprintf(b->s + b->len, b->cap - b->len, "%.9g", (double)v[k]);
        else memcpy(b->s + b->len, "null", 4), b->len += 4;
    }
    tb_putc(b, ']');
}

char *proto_embed_encode(const float *vectors, int n_inputs, const int *rows, int dim, size_t *len) {
    text_buf b = {0};
    tb_putc(&b, '[');
    size_t row = 0;
    for (int i = 0; i < n_inputs && !b.oom; i++) {
        if (i) tb_putc(&b, ',');
        if (!rows) {
            tb_vector(&b, vectors + row++ * (size_t)dim, dim);
            continue;
        }
        tb_putc(&b, '[');
        for (int t = 0; t < rows[i]; t++) {
            if (t) tb_putc(&b, ',');
            tb_vector(&b, vectors + row++ * (size_t)dim, dim);
        }
        tb_putc(&b, ']');
    }
    tb_putc(&b, ']');
    tb_putc(&b, '\0');
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    if (len) *len = b.len - 1;
    return b.s;
}

char *proto_tokenize_encode(const proto_tokens *in, int n_inputs, size_t *len) {
    json_t *all = json_array();
    int bad = !all;
    for (int i = 0; !bad && i < n_inputs; i++) {
        const proto_tokens *t = &in[i];
        json_t *a = json_array();
        bad |= json_array_append_new(all, a);
        for (int k = 0; !bad && k < t->n; k++) {
            json_t *o;
            if (t->special[k]) {
                o = json_pack("{s:i,s:s,s:b,s:n,s:n,s:s,s:n}", "id", (int)t->ids[k], "text", t->tokens[k], "special", 1,
                              "start", "stop", "token", t->tokens[k], "seq");
            } else {
                const char *src = t->seq_ids[k] == 1 && t->pair ? t->pair : t->text;
                int32_t b0 = t->byte_offsets[2 * k], b1 = t->byte_offsets[2 * k + 1];
                o = json_pack("{s:i,s:s%,s:b,s:i,s:i,s:s,s:i}", "id", (int)t->ids[k], "text", src + b0,
                              (size_t)(b1 > b0 ? b1 - b0 : 0), "special", 0, "start", (int)t->offsets[2 * k], "stop",
                              (int)t->offsets[2 * k + 1], "token", t->tokens[k], "seq", t->seq_ids[k] > 0 ? 1 : 0);
            }
            bad |= !o || json_array_append_new(a, o);
        }
    }
    if (bad) {
        json_decref(all);
        return NULL;
    }
    return dump(all, len);
}

char *proto_error_encode(const char *code, const char *msg, size_t *len) {
    return dump(json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg), len);
}

/* [{"version","state","resident","bytes","added"[,"reason"]}, ...]; the current version alone
 * when the caller listed none. */
static json_t *versions_of(const proto_task_info *t) {
    proto_version_info cur = {.version = t->version, .state = "current", .resident = t->resident, .bytes = t->bytes};
    const proto_version_info *v = t->versions ? t->versions : &cur;
    int n = t->versions ? t->n_versions : 1;
    json_t *a = json_array();
    int bad = !a;
    for (int i = 0; !bad && i < n; i++) {
        json_t *o = json_pack("{s:s,s:s,s:b,s:I,s:o}", "version", v[i].version, "state", v[i].state, "resident",
                              v[i].resident, "bytes", (json_int_t)v[i].bytes, "added",
                              v[i].added ? json_integer(v[i].added) : json_null());
        if (o && v[i].reason) bad |= json_object_set_new(o, "reason", json_string(v[i].reason));
        bad |= json_array_append_new(a, o);
    }
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* A JSON array of n strings, or NULL when out of memory. */
static json_t *string_array(const char *const *s, int n) {
    json_t *a = json_array();
    int bad = !a;
    for (int i = 0; !bad && i < n; i++) bad |= json_array_append_new(a, json_string(s[i]));
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

static json_t *task_info(const proto_task_info *t) {
    json_t *labels = string_array(t->labels, t->n_labels);
    if (!labels) return NULL;
    json_t *vs = versions_of(t);
    if (!vs) {
        json_decref(labels);
        return NULL;
    }
    json_t *o = json_pack("{s:s,s:s,s:o,s:s,s:o,s:o,s:o,s:{s:i,s:i,s:i},s:I,s:b}", "name", t->name, "version", t->version,
                          "versions", vs, "model", t->model, "adapters",
                          t->head_known ? json_string(t->kind) : json_null(), "head",
                          t->head_known ? json_string(proto_head_kind_name(t->head)) : json_null(), "labels", labels,
                          "skips", "min", t->skip_min, "max", t->skip_max, "default", t->skip_default, "bytes",
                          (json_int_t)t->bytes, "resident", t->resident);
    if (o && t->fusion.n > 0 && json_object_set_new(o, "fusion", fusion_obj(&t->fusion))) {
        json_decref(o);
        return NULL;
    }
    if (o && t->fallback_reason &&
        json_object_set_new(o, "fallback", json_pack("{s:s,s:s}", "version", t->fallback_from ? t->fallback_from : "",
                                                     "reason", t->fallback_reason))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* {"from","adapters":[..],"fusion","head"}: the current version's folders. */
static json_t *layout_of(const proto_task_info *t) {
    json_t *a = string_array(t->layout_adapters, t->layout_n_adapters);
    if (!a) return NULL;
    return json_pack("{s:s,s:o,s:o,s:o}", "from", t->layout_from, "adapters", a, "fusion",
                     t->layout_fusion ? json_string(t->layout_fusion) : json_null(), "head",
                     t->layout_head ? json_string(t->layout_head) : json_null());
}

char *proto_task_encode(const proto_task_info *t, size_t *len) {
    json_t *o = task_info(t);
    if (o && t->layout_from && json_object_set_new(o, "layout", layout_of(t))) {
        json_decref(o);
        o = NULL;
    }
    return dump(o, len);
}

char *proto_tasks_encode(const proto_task_info *t, int n, const proto_unserved_task *u, int nu, size_t *len) {
    json_t *a = json_array(), *ua = json_array();
    int bad = !a || !ua;
    for (int i = 0; !bad && i < n; i++) bad |= json_array_append_new(a, task_info(&t[i]));
    for (int i = 0; !bad && i < nu; i++) {
        /* versions_of lists what it is given (never the "current" stand-in: n_versions >= 1 here) */
        proto_task_info vi = {.versions = u[i].versions, .n_versions = u[i].n_versions};
        json_t *vs = u[i].versions && u[i].n_versions > 0 ? versions_of(&vi) : json_array();
        bad |= !vs || json_array_append_new(ua, json_pack("{s:s,s:o}", "name", u[i].name, "versions", vs));
    }
    if (bad) {
        json_decref(a), json_decref(ua);
        return NULL;
    }
    return dump(json_pack("{s:o,s:o}", "tasks", a, "unserved", ua), len);
}

char *proto_models_encode(const proto_model_info *m, int n, size_t *len) {
    json_t *a = json_array();
    int bad = !a;
    for (int i = 0; !bad && i < n; i++)
        bad |= json_array_append_new(
            a, json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:I,s:s,s:s,s:I}", "name", m[i].name, "model_type", m[i].model_type,
                         "hidden", m[i].hidden, "layers", m[i].layers, "max_tokens", m[i].max_tokens, "vocab", m[i].vocab,
                         "bytes", (json_int_t)m[i].bytes, "precision", m[i].precision ? m[i].precision : "fp32",
                         "kernel", m[i].kernel ? m[i].kernel : "c", "packed_bytes",
                         (json_int_t)m[i].packed_bytes));
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return dump(json_pack("{s:o}", "models", a), len);
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
    return dump(json_pack("{s:s,s:o,s:s,s:[{s:s,s:s,s:[i]},{s:s,s:s,s:[i]}],s:o}", "name", t->name, "versions", vs,
                          "platform", "adapterd", "inputs", "name", "text", "datatype", "BYTES", "shape", -1, "name",
                          "text_pair", "datatype", "BYTES", "shape", -1, "outputs", outs),
                len);
}

char *proto_status_encode(const char *status, int ready, size_t *len) {
    return dump(json_pack("{s:s,s:b}", "status", status, "ready", ready), len);
}

char *proto_v2_bool_encode(const char *key, int value, size_t *len) { return dump(json_pack("{s:b}", key, value), len); }

/* ---- the API reference page ---- */

static const char docs_html[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>adapterd API reference</title>\n"
    "<style>body { margin: 0; padding: 0; }</style>\n</head>\n<body>\n"
    "<redoc spec-url=\"openapi.json\" hide-download-button=\"false\" expand-responses=\"200\"></redoc>\n"
    "<script src=\"docs/redoc.standalone.js\"></script>\n</body>\n</html>\n";

const char *proto_docs_html(size_t *len) {
    *len = sizeof docs_html - 1;
    return docs_html;
}
