/* respond.c - a job's engine outputs become its response body: each input's and task's result
 * (server/answer.c, the converter the command line uses too), the request's share of the batch plan
 * (explain), then its protocol's encoder (the job's codec: JSON, TEI's, OpenAI's, KServe v2's JSON or
 * binary, gRPC's protobuf). Runs on the worker that ran the batch, so the loop only resumes
 * connections. */
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
#include "proto/grpc.h"
#include "rollout.h"

void srv__job_fail(srv_job *j, eng_status code, const char *msg) {
    free(j->body);
    j->body = NULL;
    j->head_len = 0;
    j->fail_code = code;
    snprintf(j->fail_msg, sizeof j->fail_msg, "%s", msg && *msg ? msg : eng_status_desc(code));
    j->status = srv__error_body_as(j->codec->dialect, code, msg, &j->body, &j->body_len);
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

/* 1 when every task of j reads all windows of input i: QA over a pair; tagging with a stride, and the
 * tasks with "long" chunks, over a single text. Other heads answer from the first window, and the
 * input says it was cut. */
static int all_read_windows(const srv_job *j, int i) {
    for (int k = 0; k < j->n_tasks; k++) {
        int h = store_task_head_type(j->tasks[k]), single = !j->texts[i].pair;
        int chunks = j->tlong && j->tlong[k].chunks;
        if (!(h == ENG_HEAD_QA && !single) && !(h == ENG_HEAD_TAGGING && single) && !(chunks && single)) return 0;
    }
    return 1;
}

/* Rows of sequences [s0, s1) in the stream of task req (from its split layer on), for a version's
 * share of the pass. */
static double stream_rows(const srv_job *j, const eng_task_req *req, int s0, int s1) {
    int L = eng_model_config(store_model_engine(j->model))->n_layers, born = eng_task_split_layer(req->task, req->skip);
    double n = 0;
    for (int s = s0; s < s1; s++) n += (double)j->enc[s].n;
    return n * (L > born ? L - born : 0);
}

/* The shadows of text i (sequences w0 .. w0 + nw - 1, whose outputs start at outs[off] with stride
 * `stride`): each candidate's answer built as the current version's was, then compared with it
 * (res: the text's results, one per task). Worker thread, after the answer is encoded. */
static void compare_shadows(const srv_job *j, const eng_task_out *outs, size_t off, int stride, int i, int w0, int nw,
                            srv_answer_input *in, const proto_task_result *res) {
    const proto_predict_req *q = j->preq;
    const proto_text *tx = &j->texts[i];
    for (int m = 0; m < stride - j->n_tasks; m++) {
        const srv_shadow *sh = &j->shadows[m];
        const proto_task_result *cur = &res[sh->of];
        proto_task_result cr = {.task = cur->task, .version = store_task_version(sh->cand),
                                .n_labels = store_task_num_labels(sh->cand), .labels = store_task_labels(sh->cand)};
        srv_answer_bufs cb = {0};
        in->chunks = j->tlong && j->tlong[sh->of].chunks && !tx->pair ? 1 + j->tlong[sh->of].max : 0;
        int rc = srv_answer_task(store_task_head(sh->cand), &outs[off + (size_t)j->n_tasks + m], in, q->aggregation, &cb, &cr);
        if (rc) srv__rollout_served(j->rollouts, cur->task, &sh->ro, true, true, -1);
        else
            srv__rollout_compare(j->rollouts, cur->task, &sh->ro, cur, &cr, j->request_id, i, tx->ids ? NULL : tx->text,
                                 tx->ids ? 0 : tx->len, stream_rows(j, &j->treqs[sh->of], w0, w0 + nw),
                                 stream_rows(j, &j->treqs[j->n_tasks + m], w0, w0 + nw));
        srv_answer_free(&cb);
    }
}

void srv__job_respond(srv_job *j, const eng_task_out *outs, const eng_plan_stats *stats) {
    /* an input read in windows answers once, from all of them (win_first); else one sequence each */
    int nt = j->win_first ? j->n_texts : j->n_inputs;
    size_t nr = (size_t)nt * j->n_tasks;
    proto_task_result *res = calloc(nr + 1, sizeof *res);
    srv_answer_bufs *bufs = calloc(nr + 1, sizeof *bufs);
    int *tokens = calloc((size_t)nt + 1, sizeof *tokens), *windows = calloc((size_t)nt + 1, sizeof *windows);
    /* where each sequence's outputs start: its tasks, then the shadows it ran */
    size_t *soff = calloc((size_t)j->n_inputs + 1, sizeof *soff);
    int bad = !res || !bufs || !tokens || !windows || !soff;
    for (int s = 0; soff && s < j->n_inputs; s++) soff[s + 1] = soff[s] + (size_t)srv__job_seq_tasks(j, s);
    const proto_predict_req *q = j->preq;
    proto_aggregation agg = q->aggregation;
    eng_qa_params qa = eng_qa_default_params();
    if (q->qa_max_answer_len > 0) qa.max_answer_len = q->qa_max_answer_len;
    if (q->qa_top_k > 0) qa.top_k = q->qa_top_k;
    qa.handle_impossible = q->qa_handle_impossible;
    for (int i = 0; !bad && i < nt; i++) {
        const proto_text *tx = &j->texts[i];
        int w0 = j->win_first ? j->win_first[i] : i, nw = j->win_first ? j->win_first[i + 1] - w0 : 1;
        srv_answer_input in = {.enc = &j->enc[w0], .tok = store_model_tokenizer(j->model), .n_windows = nw,
                               .out_stride = srv__job_seq_tasks(j, w0), .qa = qa, .qa_context_rule = q->qa_context_rule,
                               .qa_no_align = q->qa_no_align};
        if (!tx->ids) in.text = tx->text, in.text_len = tx->len, in.pair = tx->pair, in.pair_len = tx->pair_len;
        tokens[i] = j->text_tokens ? j->text_tokens[i] : (int)j->enc[i].n;
        windows[i] = nw;
        /* the heads that read one window answer from the first, and say the input was cut */
        if (nw > 1) j->truncated[i] |= j->n_tasks > 0 && !all_read_windows(j, i);
        for (int k = 0; !bad && k < j->n_tasks; k++) {
            size_t idx = (size_t)i * j->n_tasks + k;
            const eng_task_out *o = &outs[soff[w0] + k];
            const store_task *t = j->tasks[k];
            proto_task_result *r = &res[idx];
            r->task = store_task_name(t);
            r->version = store_task_version(t);
            r->skip = j->treqs[k].skip;
            r->skip_source = srv__skip_source_name(j->skip_src[k]);
            r->n_labels = store_task_num_labels(t);
            r->labels = store_task_labels(t);
            r->logits = q->ret_logits ? o->logits : NULL;
            in.chunks = j->tlong && j->tlong[k].chunks && !tx->pair ? 1 + j->tlong[k].max : 0;
            bad = srv_answer_task(store_task_head(t), o, &in, agg, &bufs[idx], r) != 0;
        }
    }
    proto_explain ex = {0};
    int *xrows = NULL;
    double *xms = NULL;
    proto_fusion_view *xfv = NULL;
    if (stats && q->ret_explain && !bad) {
        int L = stats->n_layers;
        xrows = calloc((size_t)3 * L + 1, sizeof *xrows);
        xms = calloc((size_t)L + 1, sizeof *xms);
        xfv = calloc((size_t)j->n_tasks + 1, sizeof *xfv);
        if (!xrows || !xms || !xfv || explain_share(j, stats, xrows, xrows + L, xrows + 2 * L, xms, &ex)) bad = 1;
        else explain_fusions(j, xfv, &ex);
    }
    int enc_rc = 0;
    if (!bad) {
        j->t_end = srv__now();
        proto_predict_resp pr = {.request_id = j->request_id,
                                 .model = store_model_name(j->model),
                                 .n_inputs = nt,
                                 .n_tasks = j->n_tasks,
                                 .results = res,
                                 .tokens = tokens,
                                 .truncated = j->truncated,
                                 .windows = windows,
                                 .ret_scores = q->ret_scores,
                                 .v2_outputs = q->v2_outputs, .v2_id = q->v2_id, .v2_binary = q->v2_binary,
                                 .req = q,
                                 .queue_ms = (j->t_start - j->t_submit) * 1e3,
                                 .inference_ms = (j->t_end - j->t_start) * 1e3,
                                 .total_ms = (j->t_end - j->t_request) * 1e3,
                                 .batch_requests = j->batch_requests,
                                 .batch_inputs = j->batch_inputs,
                                 .batch_tokens = j->batch_tokens,
                                 .latency_target_ms = j->latency_ms,
                                 .predicted_ms = j->predicted_ms,
                                 .load_ms = j->load_ms,
                                 .explain = stats && q->ret_explain ? &ex : NULL};
        enc_rc = j->codec->encode(&pr, &j->body, &j->body_len, &j->head_len);
        j->status = 200;
        bad = !j->body;
    }
    if (enc_rc && enc_rc != ENG_NO_MEMORY) srv__job_fail(j, (eng_status)enc_rc, "cannot put the answer in the protocol's shape");
    else if (bad) srv__job_fail(j, ENG_NO_MEMORY, "out of memory building the response");
    /* the shadows, once the caller's answer is built: compared, never returned */
    for (int i = 0; !bad && j->n_shadow && i < nt; i++) {
        const proto_text *tx = &j->texts[i];
        int w0 = j->win_first ? j->win_first[i] : i, nw = j->win_first ? j->win_first[i + 1] - w0 : 1;
        int on = (j->seq_tasks[w0] - j->n_tasks);
        if (j->shadow_dropped) {
            for (int m = 0; m < on; m++) srv__rollout_dropped(j->rollouts, store_task_name(j->tasks[j->shadows[m].of]), &j->shadows[m].ro, 1);
            continue;
        }
        srv_answer_input in = {.enc = &j->enc[w0], .tok = store_model_tokenizer(j->model), .n_windows = nw,
                               .out_stride = j->seq_tasks[w0], .qa = qa, .qa_context_rule = q->qa_context_rule,
                               .qa_no_align = q->qa_no_align};
        if (!tx->ids) in.text = tx->text, in.text_len = tx->len, in.pair = tx->pair, in.pair_len = tx->pair_len;
        compare_shadows(j, outs, soff[w0], j->seq_tasks[w0], i, w0, nw, &in, &res[(size_t)i * j->n_tasks]);
    }
    for (size_t i = 0; i < nr && bufs; i++) srv_answer_free(&bufs[i]);
    free(bufs), free(res), free(tokens), free(windows), free(soff), free(xrows), free(xms), free(xfv);
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
    if (j->win_first && j->n_texts < n) {
        /* "long" chunks: a text's vector is its windows' vectors weighted by their tokens (as vLLM's
         * chunked mean pooling), in place: text t's windows start at or after row t */
        for (int t = 0; t < j->n_texts; t++) {
            int w0 = j->win_first[t], w1 = j->win_first[t + 1];
            double tot = 0;
            for (int w = w0; w < w1; w++) tot += (double)j->enc[w].n;
            for (int k = 0; k < H; k++) {
                double acc = 0;
                for (int w = w0; w < w1; w++) acc += (double)j->enc[w].n * v[(size_t)w * H + k];
                v[(size_t)t * H + k] = (float)(acc / tot);
            }
        }
        n = j->n_texts;
        n_vec = (size_t)n;
    }
    const proto_predict_req *q = j->preq;
    int D = q->dimensions > 0 && q->dimensions < H ? q->dimensions : H;
    for (size_t r = 1; D < H && r < n_vec; r++) memmove(v + r * D, v + r * H, (size_t)D * sizeof *v); /* Matryoshka: the first D */
    if (q->normalize)
        for (size_t r = 0; r < n_vec; r++) l2_normalize(v + r * D, D);
    j->t_end = srv__now();
    free(j->body);
    proto_embed_resp er = {.vectors = v, .n_inputs = n, .dim = D, .rows = rows,
                           .model = j->model_id ? j->model_id : store_model_name(j->model), .tokens = j->tokens, .req = q};
    j->body = j->codec->encode_embed(&er, &j->body_len);
    j->status = 200;
    free(v), free(rows);
    if (!j->body) srv__job_fail(j, ENG_NO_MEMORY, "out of memory building the response");
}
