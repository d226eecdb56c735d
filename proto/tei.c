/* tei.c - the answers only Hugging Face's text-embeddings-inference (TEI) has: GET /info, the
 * prompts of a model's sentence-transformers config that "prompt_name" picks, and /predict and
 * /rerank (a task's scores in TEI's shapes: labels by score, texts by relevance). TEI's embed and
 * tokenize bodies are the ones /v1/embed and /v1/tokenize already speak (parse.c, v1.c); its
 * error shape is json.c's proto_error_encode_as. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

char *proto_tei_info_encode(const proto_tei_info *i, size_t *len) {
    return proto__dump(json_pack("{s:s,s:n,s:s,s:{s:{s:s}},s:i,s:i,s:i,s:i,s:i,s:s}", "model_id", i->model_id, "model_sha",
                                 "model_dtype", i->dtype, "model_type", "embedding", "pooling", i->pooling,
                                 "max_concurrent_requests", i->max_concurrent, "max_input_length", i->max_input_length,
                                 "max_batch_tokens", i->max_batch_tokens, "max_client_batch_size", i->max_client_batch,
                                 "tokenization_workers", 1, "version", i->version),
                       len);
}

char *proto_tei_prompt(const char *json, size_t n, const char *name, size_t *plen, eng_err *err) {
    if (err) err->code = 0;
    json_t *c = json ? json_loadb(json, n, 0, NULL) : NULL;
    json_t *prompts = json_object_get(c, "prompts");
    const char *want = name ? name : json_string_value(json_object_get(c, "default_prompt_name"));
    char *out = NULL;
    if (want) {
        json_t *p = json_object_get(prompts, want);
        if (!json_is_string(p)) {
            if (name)
                eng_err_set(err, ENG_INVALID_ARGUMENT,
                            "\"prompt_name\": the model has no prompt \"%.80s\" (its config_sentence_transformers.json "
                            "lists its prompts)",
                            name);
        } else if ((out = malloc(json_string_length(p) + 1))) {
            memcpy(out, json_string_value(p), json_string_length(p) + 1);
            *plen = json_string_length(p);
        } else {
            eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        }
    }
    json_decref(c);
    return out;
}

/* inputs[i] from a TEI sequence: a string, or [text] / [text, text_pair]. */
static int tei_sequence(json_t *e, proto_text *t, const proto_limits *lim, const char *where, eng_err *err) {
    if (json_is_string(e)) return proto__set_text(t, e, NULL, lim, where, err);
    if (json_is_array(e) && (json_array_size(e) == 1 || json_array_size(e) == 2) && json_is_string(json_array_get(e, 0)))
        return proto__set_text(t, json_array_get(e, 0), json_array_get(e, 1), lim, where, err);
    return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s must be a string or [text] or [text, text_pair]", where);
}

static int tei_bools(json_t *root, proto_predict_req *r, eng_err *err) {
    json_t *v;
    if ((v = json_object_get(root, "raw_scores")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"raw_scores\" must be true or false");
        r->tei_raw = json_is_true(v);
    }
    if ((v = json_object_get(root, "return_text")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"return_text\" must be true or false");
        r->tei_return_text = json_is_true(v);
    }
    if ((v = json_object_get(root, "truncate")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"truncate\" must be true or false");
        r->truncate = json_is_true(v);
    }
    if ((v = json_object_get(root, "truncation_direction")) && !json_is_null(v)) {
        const char *d = json_string_value(v);
        if (!d || (strcmp(d, "right") && strcmp(d, "Right")))
            return eng_err_set(err, ENG_INVALID_ARGUMENT,
                               "\"truncation_direction\" must be \"right\" here (\"left\" is for the embedding routes)");
    }
    return 0;
}

int proto_tei_predict_parse(const char *body, size_t len, const char *task, int rerank, const proto_limits *lim,
                            proto_predict_req *r, eng_err *err) {
    static const char *const pkeys[] = {"inputs", "raw_scores", "truncate", "truncation_direction", NULL};
    static const char *const rkeys[] = {"query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction", NULL};
    proto_limits dl;
    json_t *root = proto__req_begin(body, len, &lim, &dl, r, err);
    if (!root) return err ? err->code : ENG_MALFORMED;
    r->truncate = 0; /* TEI's default */
    int rc;
    if ((rc = proto__known_keys(root, rerank ? rkeys : pkeys, err)) || (rc = tei_bools(root, r, err))) goto bad;
    json_t *in = json_object_get(root, rerank ? "texts" : "inputs"), *q = json_object_get(root, "query");
    if (rerank && !json_is_string(q)) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"query\" must be a string");
        goto bad;
    }
    /* a batch: an array of sequences, where a sequence is a string or an array ([a] or [a, b]);
     * TEI reads ["a", "b"] as one pair */
    int batch = rerank || (json_is_array(in) && json_array_size(in) > 0 && json_is_array(json_array_get(in, 0)));
    size_t n = batch ? json_array_size(in) : 1;
    if (!in || (batch && !json_is_array(in)) || n == 0) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT,
                         rerank ? "\"texts\" must be a non-empty array of strings"
                                : "\"inputs\" must be a string, a pair [text, text_pair] or a non-empty array of [text] / [text, text_pair]");
        goto bad;
    }
    if (n > (size_t)lim->max_inputs) {
        rc = eng_err_set(err, ENG_LIMIT, "%zu inputs, over the limit of %d", n, lim->max_inputs);
        goto bad;
    }
    if (!(r->inputs = calloc(n, sizeof *r->inputs)) || !(r->tasks = malloc(sizeof *r->tasks))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto bad;
    }
    r->n_inputs = (int)n;
    r->tasks[r->n_tasks++] = task;
    r->tei_batch = batch && !rerank;
    r->ret_logits = r->tei_raw;
    for (size_t i = 0; i < n; i++) {
        char where[48];
        snprintf(where, sizeof where, rerank ? "texts[%zu]" : batch ? "inputs[%zu]" : "inputs", i);
        json_t *e = batch ? json_array_get(in, i) : in;
        if (rerank) {
            if (!json_is_string(e)) rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s must be a string", where);
            else rc = proto__set_text(&r->inputs[i], q, e, lim, where, err);
        } else {
            rc = tei_sequence(e, &r->inputs[i], lim, where, err);
        }
        if (rc) goto bad;
    }
    return 0;
bad:
    proto_predict_free(r);
    return rc;
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* [{"label", "score"}, ...] of one result, by score, highest first. */
static json_t *tei_labels(const proto_task_result *t, int raw) {
    json_t *a = json_array();
    if (!a) return NULL;
    if (t->kind == PROTO_HEAD_REGRESSION) {
        if (json_array_append_new(a, json_pack("{s:o,s:o}", "label", proto__label_json(t->labels, 0), "score", proto__num(t->value)))) {
            json_decref(a);
            return NULL;
        }
        return a;
    }
    int k = t->n_labels;
    const float *v = raw && t->logits ? t->logits : t->scores;
    char *used = calloc((size_t)k + 1, 1);
    for (int m = 0; used && v && m < k; m++) {
        int best = -1;
        for (int i = 0; i < k; i++)
            if (!used[i] && (best < 0 || v[i] > v[best])) best = i;
        used[best] = 1;
        if (json_array_append_new(a, json_pack("{s:o,s:o}", "label", proto__label_json(t->labels, best), "score", proto__num(v[best]))))
            break;
    }
    int ok = used && v && (int)json_array_size(a) == k;
    free(used);
    if (!ok) {
        json_decref(a);
        return NULL;
    }
    return a;
}

char *proto_tei_predict_encode(const proto_predict_resp *r, int batch, int raw, size_t *len) {
    if (r->n_tasks != 1 || r->n_inputs < 1) return NULL;
    if (!batch) return proto__dump(tei_labels(&r->results[0], raw), len);
    json_t *a = json_array();
    for (int i = 0; a && i < r->n_inputs; i++) {
        json_t *l = tei_labels(&r->results[i], raw);
        if (!l || json_array_append_new(a, l)) {
            json_decref(a);
            a = NULL;
        }
    }
    return proto__dump(a, len);
}

/* A rerank score and the order of the answer. */
typedef struct {
    int index;
    float score;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    return x->score < y->score ? 1 : x->score > y->score ? -1 : x->index - y->index;
}

char *proto_tei_rerank_encode(const proto_predict_resp *r, int raw, const proto_text *texts, int return_text, size_t *len) {
    if (r->n_tasks != 1 || r->n_inputs < 1) return NULL;
    ranked *rk = calloc((size_t)r->n_inputs, sizeof *rk);
    if (!rk) return NULL;
    for (int i = 0; i < r->n_inputs; i++) {
        const proto_task_result *t = &r->results[i];
        int last = t->n_labels - 1;
        float s = t->kind == PROTO_HEAD_REGRESSION ? (raw ? t->value : sigmoid(t->value))
                  : raw && t->logits                ? t->logits[last]
                  : t->scores                       ? t->scores[last]
                                                    : 0.0f;
        rk[i] = (ranked){i, s};
    }
    qsort(rk, (size_t)r->n_inputs, sizeof *rk, by_score);
    json_t *a = json_array();
    for (int m = 0; a && m < r->n_inputs; m++) {
        json_t *o = json_pack("{s:i,s:o}", "index", rk[m].index, "score", proto__num(rk[m].score));
        if (o && return_text && texts) json_object_set_new(o, "text", json_stringn(texts[rk[m].index].pair, texts[rk[m].index].pair_len));
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            a = NULL;
        }
    }
    free(rk);
    return proto__dump(a, len);
}

int proto_tei_decode_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *r, eng_err *err) {
    static const char *const keys[] = {"ids", "skip_special_tokens", NULL};
    proto_limits dl;
    json_t *root = proto__req_begin(body, len, &lim, &dl, r, err), *v;
    if (!root) return err ? err->code : ENG_MALFORMED;
    int rc;
    if ((rc = proto__known_keys(root, keys, err)) || (rc = proto__parse_inputs(json_object_get(root, "ids"), "ids", lim, 1, r, err)))
        goto bad;
    for (int i = 0; i < r->n_inputs; i++)
        if (!r->inputs[i].ids || r->inputs[i].type_ids) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"ids\" must be token ids or an array of them");
            goto bad;
        }
    if ((v = json_object_get(root, "skip_special_tokens")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "\"skip_special_tokens\" must be true or false");
            goto bad;
        }
        r->add_special_tokens = !json_is_true(v);
    } else {
        r->add_special_tokens = 0;
    }
    return 0;
bad:
    proto_predict_free(r);
    return rc;
}

char *proto_tei_decode_encode(const char *const *texts, const size_t *lens, int n, size_t *len) {
    json_t *a = json_array();
    int bad = !a;
    /* a text that is not UTF-8 cannot be a JSON string: the decoders replace invalid bytes first */
    for (int i = 0; !bad && i < n; i++)
        bad |= json_array_append_new(a, json_stringn(texts[i], lens ? lens[i] : strlen(texts[i])));
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return proto__dump(a, len);
}

/* ---- codecs ---- */

static int tei_embed_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    return proto_embed_parse(w->body, w->len, lim, out, err);
}

/* /embed_all answers every token's vector as the model gives it: no pooling, no normalization. */
static int tei_embed_all_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    int rc = proto_embed_parse(w->body, w->len, lim, out, err);
    if (rc) return rc;
    if (out->pooling != PROTO_POOL_DEFAULT || out->dimensions) {
        proto_predict_free(out);
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "/embed_all answers every token's vector: no \"pooling\" or \"dimensions\"");
    }
    out->pooling = PROTO_POOL_NONE, out->normalize = 0;
    return 0;
}

static char *tei_embed_encode(const proto_embed_resp *e, size_t *len) {
    return proto_embed_encode(e->vectors, e->n_inputs, e->rows, e->dim, len);
}

/* The task is ?task=NAME, else the registry's only task (one_task: the server checks there is one). */
static int tei_task_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, int rerank, eng_err *err) {
    int rc = proto_tei_predict_parse(w->body, w->len, w->task ? w->task : "", rerank, lim, out, err);
    if (rc) return rc;
    out->one_task = 1;
    if (!w->task) out->n_tasks = 0;
    else if (!(out->tasks[0] = proto_req_own_string(out, w->task))) {
        proto_predict_free(out);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    return 0;
}

static int tei_predict_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    return tei_task_decode(w, lim, out, 0, err);
}

static int tei_rerank_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    return tei_task_decode(w, lim, out, 1, err);
}

static int tei_predict_encode_resp(const proto_predict_resp *r, char **body, size_t *len, size_t *head_len) {
    *head_len = 0;
    return (*body = proto_tei_predict_encode(r, r->req->tei_batch, r->req->tei_raw, len)) ? 0 : ENG_NO_MEMORY;
}

static int tei_rerank_encode_resp(const proto_predict_resp *r, char **body, size_t *len, size_t *head_len) {
    *head_len = 0;
    return (*body = proto_tei_rerank_encode(r, r->req->tei_raw, r->req->inputs, r->req->tei_return_text, len)) ? 0 : ENG_NO_MEMORY;
}

const proto_codec proto_tei_embed_codec = {.name = "tei", .dialect = PROTO_DIALECT_TEI, .embed = 1, .decode = tei_embed_decode,
                                           .encode_embed = tei_embed_encode};
const proto_codec proto_tei_embed_all_codec = {.name = "tei", .dialect = PROTO_DIALECT_TEI, .embed = 1,
                                               .decode = tei_embed_all_decode, .encode_embed = tei_embed_encode};
const proto_codec proto_tei_predict_codec = {.name = "tei", .dialect = PROTO_DIALECT_TEI, .decode = tei_predict_decode,
                                             .encode = tei_predict_encode_resp};
const proto_codec proto_tei_rerank_codec = {.name = "tei", .dialect = PROTO_DIALECT_TEI, .decode = tei_rerank_decode,
                                            .encode = tei_rerank_encode_resp};
