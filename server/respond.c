/* respond.c - a job's engine outputs become its response body: scores from the head, the label,
 * tagging tokens or entities, the QA answer (engine/answer.h: the same code as the command line's),
 * the request's share of the batch plan (explain), then proto's encoders. Runs on the worker that
 * ran the batch, so the loop only resumes connections.
 *
 * Also the one mapping of engine head types to wire kinds, used for results and task listings. */
#define _GNU_SOURCE
#include "respond.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adapters_store/store.h"
#include "clock.h"
#include "engine/answer.h"
#include "engine/task.h"
#include "http_status.h"

proto_head_kind srv__wire_head_kind(int head_type) {
    switch (head_type) {
    case ENG_HEAD_MULTILABEL: return PROTO_HEAD_MULTILABEL;
    case ENG_HEAD_REGRESSION: return PROTO_HEAD_REGRESSION;
    case ENG_HEAD_TAGGING: return PROTO_HEAD_TAGGING;
    case ENG_HEAD_QA: return PROTO_HEAD_QA;
    default: return PROTO_HEAD_CLASSIFICATION;
    }
}

void srv__job_fail(srv_job *j, eng_status code, const char *msg) {
    free(j->body);
    j->body = NULL;
    j->head_len = 0;
    j->status = srv_error_body_as(j->dialect, code, msg, &j->body, &j->body_len);
}

/* The QA answer: eng_qa_best_span over the context (the text_pair: predict.c refuses QA without
 * one), mapped to code point offsets and the bytes of the pair. */
static void qa_answer(const eng_tok_encoding *e, const proto_text *t, const float *lg, proto_task_result *r) {
    eng_qa_span sp;
    if (!t->pair || eng_qa_best_span(lg, e->seq_ids, (int)e->n, 1, ENG_QA_MAX_ANSWER_TOKENS, &sp)) return;
    r->has_answer = 1;
    r->ans_start = e->offsets[2 * sp.start];
    r->ans_end = e->offsets[2 * sp.end + 1];
    r->ans_score = sp.score;
    int32_t b0 = e->byte_offsets[2 * sp.start], b1 = e->byte_offsets[2 * sp.end + 1];
    r->ans_text = t->pair + b0;
    r->ans_text_len = b1 > b0 ? (size_t)(b1 - b0) : 0;
}

/* Tagging entities (eng_tag_entities) as wire entities with offsets and words; ents and flags are
 * scratch of n + 1 entries. Ids inputs have no text: no subwords, empty words. Returns the count. */
static int tag_entities(const srv_job *j, int i, const float *p, int n, int k, const char *const *labels, proto_aggregation agg,
                        eng_tag_entity *ents, uint8_t *sub, proto_entity *out) {
    const eng_tok_encoding *e = &j->enc[i];
    const proto_text *t = &j->texts[i];
    memset(sub, 0, (size_t)n);
    if (!t->ids && (size_t)n == e->n)
        eng_tok_subword_flags(store_model_tokenizer(j->model), e, t->text, t->len, t->pair, t->pair_len, sub);
    eng_tag_aggregation a = agg == PROTO_AGG_SIMPLE ? ENG_TAG_AGG_SIMPLE : agg == PROTO_AGG_FIRST ? ENG_TAG_AGG_FIRST : ENG_TAG_AGG_NONE;
    int m = eng_tag_entities(p, n, k, e->special_mask, sub, e->seq_ids, labels, a, ents);
    for (int x = 0; x < m; x++) {
        const eng_tag_entity *g = &ents[x];
        const char *src = g->seq == 1 ? t->pair : t->text;
        int32_t b0 = e->byte_offsets[2 * g->first], b1 = e->byte_offsets[2 * g->last + 1];
        out[x] = (proto_entity){.name = a == ENG_TAG_AGG_NONE ? labels[g->label] : eng_tag_group_name(labels[g->label]),
                                .score = g->score, .start = e->offsets[2 * g->first], .end = e->offsets[2 * g->last + 1],
                                .seq = g->seq, .word = src && b1 > b0 ? src + b0 : NULL,
                                .word_len = src && b1 > b0 ? (size_t)(b1 - b0) : 0};
    }
    return m;
}

/* This request's share of the batch plan (see proto_explain). Its rows, streams and trunks per layer
 * follow the planner's rules exactly: an input's trunk lives below the latest split layer of its
 * tasks, a task's stream from its split layer (eng_task_split_layer) on.
 * Times are the batch's, attributed by rows (layers), tokens (embedding) and outputs (heads).
 * rows, streams, trunks: (L) ints; ms: (L). Returns 0 or -1 when out of memory. */
static int explain_share(const srv_job *j, const eng_plan_stats *st, int *rows, int *streams, int *trunks, double *ms,
                         proto_explain *ex) {
    int L = st->n_layers;
    for (int i = 0; i < j->n_inputs; i++) {
        int len = (int)j->enc[i].n, trunk_until = 0;
        for (int k = 0; k < j->n_tasks; k++) {
            /* from the layer its stream splits off (a late split shares the trunk one layer more) */
            int born = eng_task_split_layer(j->treqs[k].task, j->treqs[k].skip);
            if (born > trunk_until) trunk_until = born;
            for (int l = born; l < L; l++) rows[l] += len, streams[l]++;
        }
        for (int l = 0; l < trunk_until && l < L; l++) rows[l] += len, streams[l]++, trunks[l]++;
    }
    double layers_ms = 0, batch_gflop = 0;
    for (int l = 0; l < L; l++) {
        ms[l] = st->rows[l] > 0 ? st->ms[l] * rows[l] / st->rows[l] : 0;
        layers_ms += ms[l];
        batch_gflop += st->gflop[l];
    }
    eng_input *in = calloc((size_t)j->n_inputs, sizeof *in);
    if (!in) return -1;
    for (int i = 0; i < j->n_inputs; i++)
        in[i] = (eng_input){.ids = j->enc[i].ids, .len = (int)j->enc[i].n, .tasks = j->treqs, .n_tasks = j->n_tasks};
    double gflop = eng_plan_gflop(store_model_engine(j->model), in, j->n_inputs);
    free(in);
    int outs = j->n_inputs * j->n_tasks;
    *ex = (proto_explain){
        .n_layers = L, .rows = rows, .streams = streams, .trunks = trunks, .ms = ms,
        .batch_rows = st->rows, .batch_streams = st->streams, .batch_ms = st->ms,
        .embed_ms = st->tokens > 0 ? st->embed_ms * j->tokens / st->tokens : 0,
        .heads_ms = j->batch_outputs > 0 ? st->heads_ms * outs / j->batch_outputs : 0,
        .gflop = gflop, .share = batch_gflop > 0 ? gflop / batch_gflop : 0, .batch_gflop = batch_gflop,
        .batch_total_ms = st->total_ms, .batch_requests = j->batch_requests, .batch_inputs = j->batch_inputs,
        .batch_tokens = j->batch_tokens};
    ex->total_ms = ex->embed_ms + layers_ms + ex->heads_ms;
    return 0;
}

/* The request's tasks that run an AdapterFusion, with the children each keeps, into fv (n_tasks). */
static void explain_fusions(const srv_job *j, proto_fusion_view *fv, proto_explain *ex) {
    for (int k = 0; k < j->n_tasks; k++) {
        const char *const *names;
        int n = eng_task_fusion_children(j->treqs[k].task, &names);
        if (n > 0)
            fv[ex->n_fusions++] = (proto_fusion_view){.task = store_task_name(j->tasks[k]), .children = names,
                                                      .kept = eng_task_fusion_kept(j->treqs[k].task), .n = n};
    }
    ex->fusions = fv;
}

void srv__job_respond(srv_job *j, const eng_task_out *outs, const eng_plan_stats *stats) {
    size_t nr = (size_t)j->n_inputs * j->n_tasks;
    proto_task_result *res = calloc(nr, sizeof *res);
    float **bufs = calloc(nr, sizeof *bufs);
    proto_tag **tags = calloc(nr, sizeof *tags);
    proto_entity **ents = calloc(nr, sizeof *ents);
    int *tokens = calloc((size_t)j->n_inputs, sizeof *tokens);
    int max_n = 0;
    for (int i = 0; i < j->n_inputs; i++) max_n = (int)j->enc[i].n > max_n ? (int)j->enc[i].n : max_n;
    eng_tag_entity *scratch = malloc(((size_t)max_n + 1) * sizeof *scratch);
    uint8_t *sub = malloc((size_t)max_n + 1);
    int bad = !res || !bufs || !tags || !ents || !tokens || !scratch || !sub;
    /* v2 has no per-token list: its default is the pipeline's "none" */
    proto_aggregation agg = j->aggregation == PROTO_AGG_TOKENS && j->form == SRV_ANSWER_V2 ? PROTO_AGG_NONE : j->aggregation;
    for (int i = 0; !bad && i < j->n_inputs; i++) {
        const eng_tok_encoding *e = &j->enc[i];
        tokens[i] = (int)e->n;
        for (int k = 0; !bad && k < j->n_tasks; k++) {
            size_t idx = (size_t)i * j->n_tasks + k;
            const eng_task_out *o = &outs[idx];
            const store_task *t = j->tasks[k];
            const eng_head *h = store_task_head(t);
            proto_task_result *r = &res[idx];
            r->task = store_task_name(t);
            r->version = store_task_version(t);
            r->kind = srv__wire_head_kind(h->type);
            r->skip = j->treqs[k].skip;
            r->skip_source = srv__skip_source_name(j->skip_src[k]);
            r->n_labels = store_task_num_labels(t);
            r->labels = store_task_labels(t);
            r->n_rows = o->n_rows;
            r->logits = j->ret_logits ? o->logits : NULL;
            size_t nv = (size_t)o->n_rows * o->num_labels;
            if (!(bufs[idx] = malloc(nv * sizeof(float)))) {
                bad = 1;
                break;
            }
            eng_head_probs(h, o->logits, o->n_rows, bufs[idx]);
            const float *p = bufs[idx];
            switch (r->kind) {
            case PROTO_HEAD_CLASSIFICATION:
                r->scores = p;
                r->label = eng_argmax(p, o->num_labels);
                r->score = p[r->label];
                break;
            case PROTO_HEAD_MULTILABEL:
                r->scores = p;
                break;
            case PROTO_HEAD_REGRESSION:
                r->value = o->logits[0];
                break;
            case PROTO_HEAD_TAGGING: {
                int n = (int)e->n < o->n_rows ? (int)e->n : o->n_rows;
                r->aggregation = agg;
                if (agg != PROTO_AGG_TOKENS) {
                    if (!(ents[idx] = calloc((size_t)n + 1, sizeof *ents[idx]))) {
                        bad = 1;
                        break;
                    }
                    r->n_entities = tag_entities(j, i, p, n, o->num_labels, r->labels, agg, scratch, sub, ents[idx]);
                    r->entities = ents[idx];
                    break;
                }
                if (!(tags[idx] = calloc((size_t)n + 1, sizeof *tags[idx]))) {
                    bad = 1;
                    break;
                }
                for (int row = 0; row < n; row++) {
                    if (e->special_mask[row]) continue;
                    const float *pr = p + (size_t)row * o->num_labels;
                    int lb = eng_argmax(pr, o->num_labels);
                    tags[idx][r->n_tags++] = (proto_tag){e->offsets[2 * row], e->offsets[2 * row + 1],
                                                         e->seq_ids[row] > 0 ? e->seq_ids[row] : 0, lb, pr[lb]};
                }
                r->tags = tags[idx];
                break;
            }
            case PROTO_HEAD_QA:
                if (o->num_labels == 2 && o->n_rows == (int)e->n && !j->texts[i].ids) qa_answer(e, &j->texts[i], o->logits, r);
                break;
            }
        }
    }
    proto_explain ex = {0};
    int *xrows = NULL;
    double *xms = NULL;
    proto_fusion_view *xfv = NULL;
    if (stats && j->ret_explain && !bad) {
        int L = stats->n_layers;
        xrows = calloc((size_t)3 * L + 1, sizeof *xrows);
        xms = calloc((size_t)L + 1, sizeof *xms);
        xfv = calloc((size_t)j->n_tasks + 1, sizeof *xfv);
        if (!xrows || !xms || !xfv || explain_share(j, stats, xrows, xrows + L, xrows + 2 * L, xms, &ex)) bad = 1;
        else explain_fusions(j, xfv, &ex);
    }
    if (!bad) {
        j->t_end = srv__now();
        proto_predict_resp pr = {.request_id = j->request_id,
                                 .model = store_model_name(j->model),
                                 .n_inputs = j->n_inputs,
                                 .n_tasks = j->n_tasks,
                                 .results = res,
                                 .tokens = tokens,
                                 .truncated = j->truncated,
                                 .ret_scores = j->ret_scores,
                                 .v2_outputs = j->v2_outputs, .v2_id = j->v2_id, .v2_binary = j->v2_binary,
                                 .queue_ms = (j->t_start - j->t_submit) * 1e3,
                                 .inference_ms = (j->t_end - j->t_start) * 1e3,
                                 .total_ms = (j->t_end - j->t_request) * 1e3,
                                 .batch_requests = j->batch_requests,
                                 .batch_inputs = j->batch_inputs,
                                 .batch_tokens = j->batch_tokens,
                                 .latency_target_ms = j->latency_ms,
                                 .predicted_ms = j->predicted_ms,
                                 .load_ms = j->load_ms,
                                 .explain = stats && j->ret_explain ? &ex : NULL};
        j->body = j->form == SRV_ANSWER_V2            ? proto_v2_infer_encode_binary(&pr, &j->body_len, &j->head_len)
                  : j->form == SRV_ANSWER_TEI_PREDICT ? proto_tei_predict_encode(&pr, j->tei_batch, j->tei_raw, &j->body_len)
                  : j->form == SRV_ANSWER_TEI_RERANK
                      ? proto_tei_rerank_encode(&pr, j->tei_raw, j->texts, j->tei_return_text, &j->body_len)
                      : proto_predict_encode(&pr, &j->body_len);
        j->status = 200;
        bad = !j->body;
    }
    if (bad) srv__job_fail(j, ENG_NO_MEMORY, "out of memory building the response");
    for (size_t i = 0; i < nr && bufs; i++) free(bufs[i]);
    for (size_t i = 0; i < nr && tags; i++) free(tags[i]);
    for (size_t i = 0; i < nr && ents; i++) free(ents[i]);
    free(bufs), free(tags), free(ents), free(res), free(tokens), free(xrows), free(xms), free(xfv), free(scratch);
    free(sub);
}


/* ---- embeddings ---- */

static void l2_normalize(float *v, int dim) {
    double ss = 0;
    for (int k = 0; k < dim; k++) ss += (double)v[k] * v[k];
    if (ss <= 0) return;
    float inv = (float)(1.0 / sqrt(ss));
    for (int k = 0; k < dim; k++) v[k] *= inv;
}

void srv__job_respond_embed(srv_job *j, const float *hidden, const float *pooled) {
    int H = eng_model_config(store_model_engine(j->model))->hidden, n = j->n_inputs;
    bool per_token = j->pooling == PROTO_POOL_NONE;
    size_t n_vec = per_token ? (size_t)j->tokens : (size_t)n;
    float *v = malloc(n_vec * H * sizeof *v);
    int *rows = per_token ? calloc((size_t)n, sizeof *rows) : NULL;
    if (!v || (per_token && !rows)) {
        free(v), free(rows);
        srv__job_fail(j, ENG_NO_MEMORY, "out of memory building the response");
        return;
    }
    size_t row0 = 0; /* the input's first row in hidden */
    for (int i = 0; i < n; i++) {
        int len = (int)j->enc[i].n;
        const float *h = hidden + row0 * H;
        switch (j->pooling) {
        case PROTO_POOL_NONE:
            memcpy(v + row0 * H, h, (size_t)len * H * sizeof *v);
            rows[i] = len;
            break;
        case PROTO_POOL_POOLER: memcpy(v + (size_t)i * H, pooled + (size_t)i * H, (size_t)H * sizeof *v); break;
        case PROTO_POOL_MEAN:
            for (int k = 0; k < H; k++) {
                double acc = 0;
                for (int t = 0; t < len; t++) acc += h[(size_t)t * H + k];
                v[(size_t)i * H + k] = (float)(acc / len);
            }
            break;
        default: memcpy(v + (size_t)i * H, h, (size_t)H * sizeof *v); break; /* cls: the first row */
        }
        row0 += (size_t)len;
    }
    int D = j->dimensions > 0 && j->dimensions < H ? j->dimensions : H;
    for (size_t r = 1; D < H && r < n_vec; r++) memmove(v + r * D, v + r * H, (size_t)D * sizeof *v); /* Matryoshka: the first D */
    if (j->normalize)
        for (size_t r = 0; r < n_vec; r++) l2_normalize(v + r * D, D);
    j->t_end = srv__now();
    free(j->body);
    j->body = j->openai ? proto_openai_embed_encode(v, n, D, j->base64, store_model_name(j->model), j->tokens, &j->body_len)
                        : proto_embed_encode(v, n, rows, D, &j->body_len);
    j->status = 200;
    free(v), free(rows);
    if (!j->body) srv__job_fail(j, ENG_NO_MEMORY, "out of memory building the response");
}
