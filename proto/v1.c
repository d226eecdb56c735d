/* v1.c - the v1 answers of a prediction: POST /v1/predict (every head, timing, explain),
 * /v1/embed (TEI's bare array of vectors, written as text) and /v1/tokenize (TEI's token list).
 * Built on json.c only; `adapterd predict` prints its task objects through the same code
 * (proto_task_results_encode), so the command line and the server cannot drift apart. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static json_t *task_result(const proto_task_result *t, int ret_scores) {
    json_t *o = json_object();
    if (!o) return NULL;
    char lb[PROTO_LABEL_BUF]; /* each name is copied by the call that uses it */
    int bad = 0;
    if (t->version) bad |= json_object_set_new(o, "version", json_string(t->version));
    bad |= json_object_set_new(o, "head", json_string(proto_head_kind_name(t->kind)));
    bad |= json_object_set_new(o, "skip", json_integer(t->skip));
    if (t->skip_source) bad |= json_object_set_new(o, "skip_source", json_string(t->skip_source));
    switch (t->kind) {
    case PROTO_HEAD_CLASSIFICATION:
        bad |= json_object_set_new(o, "label", proto__label_json(t->labels, t->label));
        bad |= json_object_set_new(o, "score", proto__num(t->score));
        break;
    case PROTO_HEAD_MULTILABEL: {
        json_t *ls = json_array();
        for (int i = 0; ls && i < t->n_labels; i++)
            if (t->scores[i] > 0.5f) bad |= json_array_append_new(ls, proto__label_json(t->labels, i));
        bad |= json_object_set_new(o, "labels", ls);
        break;
    }
    case PROTO_HEAD_REGRESSION:
        bad |= json_object_set_new(o, "value", proto__num(t->value));
        break;
    case PROTO_HEAD_TAGGING: {
        if (t->aggregation != PROTO_AGG_TOKENS) {
            /* the token-classification pipeline's entity shape: "entity" per token, "entity_group" grouped */
            const char *key = t->aggregation == PROTO_AGG_NONE ? "entity" : "entity_group";
            json_t *es = json_array();
            for (int i = 0; es && i < t->n_entities; i++) {
                const proto_entity *g = &t->entities[i];
                bad |= json_array_append_new(es, json_pack("{s:s,s:o,s:s%,s:i,s:i,s:i}", key, g->name, "score", proto__num(g->score),
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
            json_t *e = json_pack("{s:i,s:i,s:i,s:o,s:o}", "start", (int)g->start, "end", (int)g->end, "seq", g->seq,
                                  "label", proto__label_json(t->labels, g->label), "score", proto__num(g->score));
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
                                                 "score", proto__num(t->ans_score)));
        else
            bad |= json_object_set_new(o, "answer", json_null());
        if (t->answers) { /* "top_k" > 1: the pipeline's list, best first */
            json_t *as = json_array();
            for (int i = 0; as && i < t->n_answers; i++) {
                const proto_qa_answer *a = &t->answers[i];
                bad |= json_array_append_new(as, json_pack("{s:s%,s:i,s:i,s:o}", "text", a->text ? a->text : "", a->text_len,
                                                           "start", (int)a->start, "end", (int)a->end, "score",
                                                           proto__num(a->score)));
            }
            bad |= json_object_set_new(o, "answers", as);
        }
        break;
    }
    if (ret_scores && t->scores &&
        (t->kind == PROTO_HEAD_CLASSIFICATION || t->kind == PROTO_HEAD_MULTILABEL)) {
        json_t *s = json_object();
        for (int i = 0; s && i < t->n_labels; i++)
            bad |= json_object_set_new(s, proto_label_name(t->labels, i, lb, sizeof lb), proto__num(t->scores[i]));
        bad |= json_object_set_new(o, "scores", s);
    }
    if (t->logits) {
        json_t *l;
        if (t->kind == PROTO_HEAD_TAGGING || t->kind == PROTO_HEAD_QA) {
            l = json_array();
            for (int r = 0; l && r < t->n_rows; r++)
                bad |= json_array_append_new(l, proto__floats(t->logits + (size_t)r * t->n_labels, t->n_labels));
        } else {
            l = proto__floats(t->logits, t->n_labels);
        }
        bad |= json_object_set_new(o, "logits", l);
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* o["fusion"] = {TASK: {"kept", "pruned"}, ...} for the n tasks with a fusion; nothing when n is 0.
 * Returns 0, or -1 when out of memory. */
static int set_fusions(json_t *o, const proto_fusion_view *f, int n) {
    if (!n) return 0;
    json_t *fu = json_object();
    for (int i = 0; fu && i < n; i++)
        if (json_object_set_new(fu, f[i].task, proto__fusion_obj(&f[i]))) json_decref(fu), fu = NULL;
    return !fu || json_object_set_new(o, "fusion", fu) ? -1 : 0;
}

static json_t *explain_obj(const proto_explain *x) {
    json_t *layers = json_array();
    int bad = !layers;
    for (int l = 0; !bad && l < x->n_layers; l++)
        bad |= json_array_append_new(
            layers, json_pack("{s:i,s:i,s:i,s:i,s:o,s:{s:i,s:i,s:o}}", "layer", l, "rows", x->rows[l], "streams",
                              x->streams[l], "trunks", x->trunks[l], "ms", proto__num(x->ms[l]), "batch", "rows",
                              x->batch_rows[l], "streams", x->batch_streams[l], "ms", proto__num(x->batch_ms[l])));
    if (bad) {
        json_decref(layers);
        return NULL;
    }
    json_t *o = json_pack("{s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:{s:i,s:i,s:i,s:o,s:o}}", "scope", "request", "layers", layers,
                          "embed_ms", proto__num(x->embed_ms), "heads_ms", proto__num(x->heads_ms), "total_ms", proto__num(x->total_ms),
                          "gflop", proto__num(x->gflop), "share", proto__num(x->share), "batch", "requests", x->batch_requests, "inputs",
                          x->batch_inputs, "tokens", x->batch_tokens, "gflop", proto__num(x->batch_gflop), "total_ms",
                          proto__num(x->batch_total_ms));
    if (o && set_fusions(o, x->fusions, x->n_fusions)) {
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
        json_t *ri = json_pack("{s:i,s:i,s:b,s:o}", "input", i, "tokens", r->tokens[i], "truncated",
                               r->truncated ? r->truncated[i] : 0, "tasks", tasks);
        if (ri && r->windows && r->windows[i] > 1) bad |= json_object_set_new(ri, "windows", json_integer(r->windows[i]));
        bad |= json_array_append_new(results, ri);
    }
    if (bad) {
        json_decref(results);
        return NULL;
    }
    json_t *o = json_pack("{s:s,s:s,s:o,s:{s:o,s:o,s:o},s:{s:i,s:i,s:i}}", "id", r->request_id, "model", r->model,
                          "results", results, "timing", "queue_ms", proto__num(r->queue_ms), "inference_ms",
                          proto__num(r->inference_ms), "total_ms", proto__num(r->total_ms), "batch", "requests", r->batch_requests,
                          "inputs", r->batch_inputs, "tokens", r->batch_tokens);
    if (o && r->explain && json_object_set_new(o, "explain", explain_obj(r->explain))) {
        json_decref(o);
        return NULL;
    }
    json_t *tm = o ? json_object_get(o, "timing") : NULL;
    if (tm && r->load_ms > 0 && json_object_set_new(tm, "load_ms", proto__num(r->load_ms))) {
        json_decref(o);
        return NULL;
    }
    if (tm && r->latency_target_ms > 0) {
        /* the target is on the engine's time, so it is judged on inference_ms (queue and load apart) */
        if (json_object_set_new(tm, "latency_target_ms", proto__num(r->latency_target_ms)) ||
            json_object_set_new(tm, "predicted_ms", proto__num(r->predicted_ms)) ||
            json_object_set_new(tm, "latency_exceeded", json_boolean(r->inference_ms > r->latency_target_ms))) {
            json_decref(o);
            return NULL;
        }
    }
    return proto__dump(o, len);
}

static json_t *local_plan(const proto_local_plan *p) {
    json_t *layers = json_array();
    int bad = !layers;
    for (int l = 0; !bad && l < p->n_layers; l++)
        bad |= json_array_append_new(layers, json_pack("{s:i,s:i,s:i,s:i,s:o,s:o}", "layer", l, "streams", p->streams[l],
                                                       "trunks", p->trunks[l], "rows", p->rows[l], "gflop",
                                                       proto__num(p->gflops[l]), "ms", proto__num(p->ms[l])));
    if (bad) {
        json_decref(layers);
        return NULL;
    }
    json_t *o = json_pack("{s:i,s:s,s:i,s:o,s:o,s:o,s:o,s:o}", "tokens", p->tokens, "blas_core", p->blas_core, "threads",
                          p->threads, "gflop", proto__num(p->gflop), "embed_ms", proto__num(p->embed_ms), "heads_ms",
                          proto__num(p->heads_ms), "total_ms", proto__num(p->total_ms), "layers", layers);
    if (o && set_fusions(o, p->fusions, p->n_fusions)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *proto_local_predict_encode(const proto_local_predict *p, size_t *len) {
    json_t *tasks = json_object();
    int bad = !tasks;
    for (int k = 0; !bad && k < p->n_tasks; k++) {
        const proto_task_result *t = &p->results[k];
        json_t *o = task_result(t, 1);
        bad |= !o || json_object_set_new(o, "kind", json_string(p->kinds[k])) ||
               json_object_set_new(o, "start_layer", json_integer(p->start_layers[k]));
        bad |= json_object_set_new(tasks, t->task, o);
    }
    json_t *root = bad ? NULL : json_pack("{s:o}", "tasks", tasks);
    if (bad) json_decref(tasks);
    if (root && p->plan && json_object_set_new(root, "plan", local_plan(p->plan))) {
        json_decref(root);
        return NULL;
    }
    return proto__dump(root, len);
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
    return proto__dump(all, len);
}

/* ---- codecs ---- */

static int v1_predict_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    return proto_predict_parse(w->body, w->len, lim, out, err);
}

static int v1_predict_encode(const proto_predict_resp *r, char **body, size_t *len, size_t *head_len) {
    *head_len = 0;
    return (*body = proto_predict_encode(r, len)) ? 0 : ENG_NO_MEMORY;
}

static int v1_embed_decode(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err) {
    return proto_embed_parse(w->body, w->len, lim, out, err);
}

static char *v1_embed_encode(const proto_embed_resp *e, size_t *len) {
    return proto_embed_encode(e->vectors, e->n_inputs, e->rows, e->dim, len);
}

const proto_codec proto_v1_predict_codec = {.name = "adapterd", .dialect = PROTO_DIALECT_ADAPTERD, .decode = v1_predict_decode,
                                            .encode = v1_predict_encode};
const proto_codec proto_v1_embed_codec = {.name = "adapterd", .dialect = PROTO_DIALECT_ADAPTERD, .embed = 1,
                                          .decode = v1_embed_decode, .encode_embed = v1_embed_encode};
