/* predict.c - the job of a request that runs tasks (POST /v1/predict, TEI's /predict and /rerank,
 * KServe v2 infer over REST and gRPC), once front.c has acquired its tasks and they are resident:
 * each task's skip (request, budget, latency target or default), the checks that need the tasks'
 * heads (QA needs a context, v2 outputs must exist), and tokenization. Never waits: on the edge's
 * thread (an MHD thread for HTTP, libuv's pool for gRPC).
 *
 * Skips have one rule each, all the engine's: a "budget" goes through eng_skip_for_budget and a
 * "latency_ms" through eng_plan_for_latency on the cost model measured at start-up, so the server
 * and the engine's tests agree on every value. */
#define _GNU_SOURCE
#include "predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/answer.h"
#include "http_status.h"
#include "respond.h"
#include "rollout.h"

/* Bytes of the task list in a refused latency target's message. */
#define LATENCY_SKIPS_MSG_MAX 256

/* "latency_ms": every task starts at its smallest allowed skip (best quality) and eng_plan_for_latency
 * raises skips, one layer at a time on the task with the most room, until the cost model's prediction
 * for this request's plan meets the target. A target that even the largest skips miss is refused with
 * the prediction: the request is never served slower than it asked without saying so. */
static int plan_for_latency(srv_server *s, srv_job *j, double target_ms, eng_status *code, char *msg, size_t msz) {
    const eng_cost_model *cm = srv__cost_model(s, j->model);
    if (!cm) {
        *code = ENG_UNAVAILABLE;
        snprintf(msg, msz, "\"latency_ms\" needs the cost model of model %s, which is measured at start-up; it was loaded later",
                 store_model_name(j->model));
        return -1;
    }
    eng_input *in = calloc((size_t)j->n_inputs, sizeof *in);
    eng_task_req **rq = calloc((size_t)j->n_inputs, sizeof *rq);
    if (!in || !rq) {
        free(in), free(rq);
        *code = ENG_NO_MEMORY;
        snprintf(msg, msz, "out of memory");
        return -1;
    }
    /* one skip per task for all inputs: every input points at the job's one task array */
    for (int i = 0; i < j->n_inputs; i++) {
        in[i] = (eng_input){.ids = j->enc[i].ids, .type_ids = j->enc[i].type_ids, .len = (int)j->enc[i].n,
                            .tasks = j->treqs, .n_tasks = j->n_tasks};
        rq[i] = j->treqs;
    }
    eng_err e = {0};
    double pred = 0;
    int rc = eng_plan_for_latency(cm, store_model_engine(j->model), in, j->n_inputs, rq, target_ms, &pred, &e);
    free(in), free(rq);
    j->latency_ms = target_ms;
    j->predicted_ms = pred;
    if (rc == 0) return 0;
    srv__metrics_latency_refused(s->metrics);
    char skips[LATENCY_SKIPS_MSG_MAX] = "";
    size_t o = 0;
    for (int k = 0; k < j->n_tasks && o < sizeof skips; k++)
        o += (size_t)snprintf(skips + o, sizeof skips - o, "%s%s %d", k ? ", " : "", store_task_name(j->tasks[k]), j->treqs[k].skip);
    *code = rc == ENG_LIMIT ? ENG_LIMIT : (eng_status)rc;
    snprintf(msg, msz,
             "\"latency_ms\" %.4g cannot be met: this request's plan is predicted at %.2f ms with every task at its "
             "largest allowed skip (%s); raise the target, send fewer inputs or tasks, or see GET /v1/tasks for the skips",
             target_ms, pred, skips);
    return -1;
}

/* An ids input as an encoding (eng_tok_encoding_alloc): the ids as given, no offsets (0, 0), the
 * tokenizer's [CLS], [SEP] and [PAD] ids marked special (tagging leaves them out). */
static int encode_ids(const eng_tokenizer *tok, const proto_text *x, eng_tok_encoding *e) {
    size_t n = (size_t)x->n_ids;
    if (eng_tok_encoding_alloc(e, n)) return ENG_NO_MEMORY;
    int32_t cls = eng_tokenizer_cls_id(tok), sep = eng_tokenizer_sep_id(tok), pad = eng_tokenizer_pad_id(tok);
    for (size_t i = 0; i < n; i++) {
        int32_t id = x->ids[i];
        e->ids[i] = id;
        e->type_ids[i] = x->type_ids ? x->type_ids[i] : 0;
        e->special_mask[i] = id == cls || id == sep || id == pad;
        e->seq_ids[i] = e->special_mask[i] ? -1 : 0;
    }
    return 0;
}

/* Appends e to the job's sequences (moved: e is zeroed). Returns 0 or -1 when out of memory. */
static int push_seq(srv_job *j, int *cap, eng_tok_encoding *e) {
    if (j->n_inputs == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        eng_tok_encoding *x = realloc(j->enc, (size_t)nc * sizeof *x);
        if (!x) return -1;
        j->enc = x;
        *cap = nc;
    }
    j->enc[j->n_inputs++] = *e;
    memset(e, 0, sizeof *e);
    j->tokens += (int)j->enc[j->n_inputs - 1].n;
    return 0;
}

/* Input i's windows by plan p over its untruncated encoding full, each window one more sequence of
 * the job; the request's windows together are held to --max-windows. */
static int push_windows(srv_job *j, int *cap, int i, const eng_tok_encoding *full, const eng_tok_windows *p,
                        int max_windows, eng_status *code, char *msg, size_t msz) {
    int nw = p->n_windows;
    if (max_windows > 0 && j->n_inputs + nw > max_windows) {
        *code = ENG_TOO_LARGE;
        snprintf(msg, msz, "inputs[%d] takes %d windows of %d tokens, %d with the inputs before it, over the limit of %d a "
                 "request (--max-windows)", i, nw, p->room, j->n_inputs + nw, max_windows);
        return -1;
    }
    for (int w = 0; w < nw; w++) {
        eng_tok_encoding e;
        if (eng_tok_plan_window(full, p, w, &e) || push_seq(j, cap, &e)) {
            eng_tok_encoding_free(&e);
            *code = ENG_NO_MEMORY;
            snprintf(msg, msz, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* The question-answering pipeline's windows over input i (question, context), from its untruncated
 * encoding full (eng_tok_plan_qa: the question cut to max_question_len tokens and repeated in every
 * window, the context in windows of what is left of max_seq_len, consecutive windows sharing
 * doc_stride tokens). A question that leaves no more than doc_stride tokens of context is refused,
 * as the pipeline's tokenizer refuses it. */
static int qa_windows(srv_job *j, int *cap, int i, eng_tok_encoding *full, int max_len, int max_windows,
                      const proto_predict_req *p, eng_status *code, char *msg, size_t msz) {
    int seq_len = p->qa_max_seq_len > 0 ? p->qa_max_seq_len : ENG_QA_MAX_SEQ_LEN;
    if (seq_len > max_len) seq_len = max_len;
    eng_tok_windows plan;
    int bad = eng_tok_plan_qa(full, seq_len, p->qa_doc_stride, p->qa_max_question_len, &plan);
    j->truncated[i] = plan.keep_other >= 0;
    if (plan.whole) return push_seq(j, cap, full) ? (*code = ENG_NO_MEMORY, snprintf(msg, msz, "out of memory"), -1) : 0;
    if (bad) {
        *code = ENG_INVALID_ARGUMENT;
        snprintf(msg, msz,
                 "inputs[%d]: the question (%d tokens) and the special tokens leave %d of a window's %d tokens for the "
                 "context, not more than \"doc_stride\" %d; send a shorter question or a smaller \"max_question_len\" or "
                 "\"doc_stride\"",
                 i, plan.keep_other >= 0 ? plan.keep_other : eng_tok_seq_len(full, 0), plan.room, seq_len, plan.stride);
        return -1;
    }
    return push_windows(j, cap, i, full, &plan, max_windows, code, msg, msz);
}

/* The token-classification pipeline's windows over a single text (input i, its untruncated encoding
 * full; eng_tok_plan_text): windows of the model's max_len tokens, special tokens included,
 * consecutive windows sharing stride tokens. */
static int text_windows(srv_job *j, int *cap, int i, eng_tok_encoding *full, int max_len, int stride, int max_windows,
                        eng_status *code, char *msg, size_t msz) {
    eng_tok_windows plan;
    int bad = eng_tok_plan_text(full, max_len, stride, &plan);
    if (plan.whole) return push_seq(j, cap, full) ? (*code = ENG_NO_MEMORY, snprintf(msg, msz, "out of memory"), -1) : 0;
    if (bad) {
        *code = ENG_INVALID_ARGUMENT;
        snprintf(msg, msz, "\"stride\" %d must be below the %d text tokens of a window (the model's %d less the special tokens)",
                 stride, plan.room, max_len);
        return -1;
    }
    return push_windows(j, cap, i, full, &plan, max_windows, code, msg, msz);
}

/* 1 when one of the job's tasks has this head. */
static int has_head(const srv_job *j, int head_type) {
    for (int k = 0; k < j->n_tasks; k++)
        if (store_task_head_type(j->tasks[k]) == head_type) return 1;
    return 0;
}

/* 1 when the job answers questions by the pipeline's rule: its pair inputs are read in windows. */
static int reads_qa_windows(const srv_job *j, const proto_predict_req *p) {
    return !p->qa_context_rule && has_head(j, ENG_HEAD_QA);
}

/* 1 when the head answers one row for the whole sequence from logits ("long": chunks aggregates them). */
static int reads_chunks(int head_type) {
    proto_head_kind k = srv__wire_head_kind(head_type);
    return k == PROTO_HEAD_CLASSIFICATION || k == PROTO_HEAD_MULTILABEL || k == PROTO_HEAD_REGRESSION;
}

/* Each task's "long" (its own, else the request's) into j->tlong, and the stride the job's single
 * texts are read with: tagging's "stride" or the chunked tasks' (one set of windows serves every task,
 * so they must agree); -1: single texts are read in one window. Returns 0, or -1 with code and msg. */
static int text_windows_stride(srv_job *j, const proto_predict_req *p, int *stride, eng_status *code, char *msg, size_t msz) {
    *stride = p->stride >= 0 && has_head(j, ENG_HEAD_TAGGING) ? p->stride : -1;
    if (j->embed && p->long_read.chunks) *stride = p->long_read.stride; /* an embedding's "long" chunks */
    const char *by = "\"stride\"";
    if (!(j->tlong = calloc((size_t)j->n_tasks + 1, sizeof *j->tlong))) {
        *code = ENG_NO_MEMORY;
        snprintf(msg, msz, "out of memory");
        return -1;
    }
    for (int k = 0; k < j->n_tasks; k++) {
        const char *name = store_task_name(j->tasks[k]);
        proto_long lg = p->long_read;
        for (int i = 0; p->task_long && i < p->n_tasks; i++) {
            size_t n = strcspn(p->tasks[i], "@");
            if (p->task_long[i].given && strlen(name) == n && !strncmp(p->tasks[i], name, n)) lg = p->task_long[i];
        }
        if (!lg.chunks || !reads_chunks(store_task_head_type(j->tasks[k]))) continue;
        j->tlong[k] = lg;
        if (*stride >= 0 && *stride != lg.stride) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "task \"%s\" reads windows sharing %d tokens (\"long\".stride) and %s %d: a text is read in one "
                     "set of windows for every task; give them one stride", name, lg.stride, by, *stride);
            return -1;
        }
        *stride = lg.stride;
        by = "another task's";
    }
    return 0;
}

/* Task k's skip (the request's "skip", its per-task skips, "budget", "latency_ms", else the task's
 * default) into j->treqs[k] and j->skip_src[k]. Returns 0, or -1 with code and msg (out of range). */
static int task_skip(const proto_predict_req *p, srv_job *j, int k, eng_status *code, char *msg, size_t msz) {
    store_task *t = j->tasks[k];
    int lo = store_task_skip_min(t), hi = store_task_skip_max(t), skip = store_task_skip_default(t);
    const char *src = "default";
    srv_skip_source ss = SRV_SKIP_DEFAULT;
    if (p->skip >= 0) skip = p->skip, src = "\"skip\"", ss = SRV_SKIP_REQUEST;
    for (int i = 0; i < p->n_skips; i++)
        if (!strcmp(p->skips[i].task, store_task_name(t)))
            skip = p->skips[i].skip, src = "\"skip\"", ss = SRV_SKIP_REQUEST;
    /* the engine's rule (eng_skip_for_budget), the one the planner's tests check */
    const eng_task *et = store_task_engine(t);
    if (p->budget >= 0) skip = eng_skip_for_budget(et, p->budget), src = "\"budget\"", ss = SRV_SKIP_BUDGET;
    if (p->latency_ms > 0) skip = lo, ss = SRV_SKIP_LATENCY; /* raised by plan_for_latency below */
    if (skip < lo || skip > hi) {
        *code = ENG_INVALID_ARGUMENT;
        snprintf(msg, msz, "%s asks task \"%s\" to skip %d layers; it allows %d..%d (see GET /v1/tasks/%s)", src,
                 store_task_name(t), skip, lo, hi, store_task_name(t));
        return -1;
    }
    j->treqs[k] = (eng_task_req){et, skip};
    j->skip_src[k] = ss;
    return 0;
}

/* The routing bucket (rollout.c) of sequences [s0, s1) of the job, or of its route key when by_key is
 * set (a canary's choice; a shadow samples inputs, so by their token ids alone). */
static uint32_t bucket_of(const srv_job *j, const proto_predict_req *p, int s0, int s1, bool by_key) {
    enum { SEQS = 64 };
    const int32_t *ids[SEQS];
    size_t lens[SEQS];
    int n = 0;
    for (int s = s0; s < s1 && n < SEQS; s++) ids[n] = j->enc[s].ids, lens[n++] = j->enc[s].n;
    const char *key = by_key ? p->route_key : NULL;
    return srv__rollout_bucket(key, key ? strlen(key) : 0, ids, lens, n);
}

static int by_percent_desc(const void *a, const void *b) {
    double x = ((const srv_shadow *)a)->ro.percent, y = ((const srv_shadow *)b)->ro.percent;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The rollouts' routing, once the token ids are known (front.c acquired both versions): a canary's
 * bucket (the request's route key, else its token ids) picks the version, the other reference is
 * dropped; a shadow becomes one more task stream, sampled per input by that input's bucket. */
static int route_rollouts(const proto_predict_req *p, srv_job *j, eng_status *code, char *msg, size_t msz) {
    if (!j->ro) return 0;
    uint32_t req_bucket = bucket_of(j, p, 0, j->n_inputs, true);
    int n_sh = 0;
    for (int k = 0; k < j->n_tasks; k++) n_sh += j->ro[k].ro.mode == STORE_ROLLOUT_SHADOW && j->ro[k].alt;
    if (n_sh && !(j->shadows = calloc((size_t)n_sh, sizeof *j->shadows))) goto oom;
    for (int k = 0; k < j->n_tasks; k++) {
        srv_job_rollout *r = &j->ro[k];
        if (!r->alt) continue;
        if (r->ro.mode == STORE_ROLLOUT_CANARY && srv__rollout_takes(&r->ro, req_bucket)) {
            store_task *cur = j->tasks[k];
            j->tasks[k] = r->alt, r->alt = cur, r->candidate = true;
            if (task_skip(p, j, k, code, msg, msz)) return -1;
        } else if (r->ro.mode == STORE_ROLLOUT_SHADOW) {
            j->shadows[j->n_shadow++] = (srv_shadow){.of = k, .cand = r->alt, .ro = r->ro};
            r->alt = NULL;
        }
        store_task_release(r->alt);
        r->alt = NULL;
    }
    if (!j->n_shadow) return 0;
    qsort(j->shadows, (size_t)j->n_shadow, sizeof *j->shadows, by_percent_desc);
    eng_task_req *tr = realloc(j->treqs, (size_t)(j->n_tasks + j->n_shadow) * sizeof *tr);
    if (!tr || !(j->seq_tasks = calloc((size_t)j->n_inputs + 1, sizeof *j->seq_tasks))) {
        if (tr) j->treqs = tr;
        goto oom;
    }
    j->treqs = tr;
    for (int m = 0; m < j->n_shadow; m++) {
        /* at the current version's skip, within the candidate's range: the same trunk */
        const srv_shadow *sh = &j->shadows[m];
        int skip = j->treqs[sh->of].skip, lo = store_task_skip_min(sh->cand), hi = store_task_skip_max(sh->cand);
        j->treqs[j->n_tasks + m] = (eng_task_req){store_task_engine(sh->cand), skip < lo ? lo : skip > hi ? hi : skip};
    }
    int any = 0, nt = j->win_first ? j->n_texts : j->n_inputs;
    for (int i = 0; i < nt; i++) {
        int s0 = j->win_first ? j->win_first[i] : i, s1 = j->win_first ? j->win_first[i + 1] : i + 1, on = 0;
        uint32_t b = bucket_of(j, p, s0, s1, false);
        while (on < j->n_shadow && srv__rollout_takes(&j->shadows[on].ro, b)) on++; /* largest percent first: a prefix */
        for (int s = s0; s < s1; s++) j->seq_tasks[s] = j->n_tasks + on;
        any |= on > 0;
    }
    if (!any) { /* no input sampled: a job like any other */
        for (int m = 0; m < j->n_shadow; m++) store_task_release(j->shadows[m].cand);
        free(j->seq_tasks);
        j->seq_tasks = NULL, j->n_shadow = 0;
    }
    return 0;
oom:
    *code = ENG_NO_MEMORY;
    snprintf(msg, msz, "out of memory");
    return -1;
}

int srv__job_tokenize(srv_server *s, srv_job *j, const proto_predict_req *p, eng_status *code, char *msg, size_t msz) {
    const eng_tokenizer *tok = store_model_tokenizer(j->model);
    const eng_config *cfg = eng_model_config(store_model_engine(j->model));
    int max_len = store_model_max_tokens(j->model);
    if (s->cfg.max_seq_len > 0 && s->cfg.max_seq_len < max_len) max_len = s->cfg.max_seq_len;
    eng_tok_params tp = eng_tok_default_params();
    tp.max_length = max_len;
    if (!p->truncate) tp.truncation = ENG_TOK_TRUNCATE_NONE;
    int qa = reads_qa_windows(j, p), stride = -1, cap = 0;
    if (text_windows_stride(j, p, &stride, code, msg, msz)) return -1;
    int texts = stride >= 0;
    if (p->stride >= 0 && has_head(j, ENG_HEAD_TAGGING) && p->aggregation != PROTO_AGG_SIMPLE && p->aggregation != PROTO_AGG_FIRST) {
        /* as the token-classification pipeline: the windows' tokens are merged as entities */
        *code = ENG_INVALID_ARGUMENT;
        snprintf(msg, msz, "\"stride\" reads a long text in windows whose entities are merged: it needs \"aggregation\" "
                           "\"simple\" or \"first\"");
        return -1;
    }
    j->n_texts = p->n_inputs;
    j->n_inputs = 0;
    if (!(j->win_first = calloc((size_t)p->n_inputs + 1, sizeof *j->win_first)) ||
        !(j->text_tokens = calloc((size_t)p->n_inputs + 1, sizeof *j->text_tokens))) {
        *code = ENG_NO_MEMORY;
        snprintf(msg, msz, "out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_inputs; i++) {
        const proto_text *x = &p->inputs[i];
        eng_err e = {0};
        eng_tok_encoding one = {0};
        j->win_first[i] = j->n_inputs;
        if (((qa && x->pair) || (texts && !x->pair)) && !x->ids) {
            eng_tok_params np = tp;
            np.truncation = ENG_TOK_TRUNCATE_NONE;
            int rc = eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &np, &one, &e);
            if (rc) {
                *code = srv__status_of_tokenize(rc);
                snprintf(msg, msz, "inputs[%d]: %s", i, e.msg);
                return -1;
            }
            j->text_tokens[i] = (int)one.n;
            if (s->cfg.max_input_tokens > 0 && (int)one.n > s->cfg.max_input_tokens) {
                *code = ENG_TOO_LARGE;
                snprintf(msg, msz, "inputs[%d] has %zu tokens, over the limit of %d for a whole input (--max-input-tokens)", i,
                         one.n, s->cfg.max_input_tokens);
                eng_tok_encoding_free(&one);
                return -1;
            }
            rc = x->pair ? qa_windows(j, &cap, i, &one, max_len, s->cfg.max_windows, p, code, msg, msz)
                         : text_windows(j, &cap, i, &one, max_len, stride, s->cfg.max_windows, code, msg, msz);
            eng_tok_encoding_free(&one);
            if (rc) return -1;
            continue;
        }
        if (x->ids) {
            if (x->n_ids > max_len) {
                *code = ENG_INVALID_ARGUMENT;
                snprintf(msg, msz, "inputs[%d] has %d token ids, over the limit of %d (ids are never truncated)", i, x->n_ids,
                         max_len);
                return -1;
            }
            for (int k = 0; k < x->n_ids; k++) {
                int types = cfg->type_vocab > 0 ? cfg->type_vocab : 1;
                if (x->ids[k] >= cfg->vocab || (x->type_ids && x->type_ids[k] >= types)) {
                    *code = ENG_INVALID_ARGUMENT;
                    snprintf(msg, msz, "inputs[%d]: %s[%d] = %d is out of the model's range (below %d)", i,
                             x->ids[k] >= cfg->vocab ? "ids" : "type_ids", k,
                             x->ids[k] >= cfg->vocab ? x->ids[k] : x->type_ids[k], x->ids[k] >= cfg->vocab ? cfg->vocab : types);
                    return -1;
                }
            }
            if (encode_ids(tok, x, &one) || push_seq(j, &cap, &one)) {
                eng_tok_encoding_free(&one);
                *code = ENG_NO_MEMORY;
                snprintf(msg, msz, "out of memory");
                return -1;
            }
            j->text_tokens[i] = x->n_ids;
            continue;
        }
        int rc = eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &tp, &one, &e);
        if (rc) {
            *code = srv__status_of_tokenize(rc);
            snprintf(msg, msz, "inputs[%d]: %s", i, e.msg);
            return -1;
        }
        if ((int)one.n > max_len) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "inputs[%d] has %zu tokens, over the limit of %d (send \"truncate\": true to cut it)", i,
                     one.n, max_len);
            eng_tok_encoding_free(&one);
            return -1;
        }
        if (p->truncate && (int)one.n == max_len) {
            /* rare: at the limit, find out whether it was cut */
            eng_tok_params np = tp;
            np.truncation = ENG_TOK_TRUNCATE_NONE;
            eng_tok_encoding full = {0};
            if (eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &np, &full, &e) == 0)
                j->truncated[i] = full.n > one.n;
            eng_tok_encoding_free(&full);
        }
        j->text_tokens[i] = (int)one.n;
        if (push_seq(j, &cap, &one)) {
            eng_tok_encoding_free(&one);
            *code = ENG_NO_MEMORY;
            snprintf(msg, msz, "out of memory");
            return -1;
        }
    }
    j->win_first[p->n_inputs] = j->n_inputs;
    return 0;
}

int srv__predict_job(srv_front *f, srv_job *j) {
    srv_server *s = f->s;
    const proto_predict_req *p = &f->req;
    eng_status *code = &f->code;
    char *msg = f->msg;
    size_t msz = sizeof f->msg;
    if (!(j->treqs = calloc((size_t)j->n_tasks + 1, sizeof *j->treqs)) ||
        !(j->skip_src = calloc((size_t)j->n_tasks + 1, sizeof *j->skip_src)) ||
        !(j->truncated = calloc((size_t)p->n_inputs, sizeof(int)))) {
        *code = ENG_NO_MEMORY;
        snprintf(msg, msz, "out of memory");
        return -1;
    }
    if (!j->n_tasks) {
        *code = ENG_NOT_FOUND;
        snprintf(msg, msz, "the registry serves no task (GET /v1/tasks)");
        return -1;
    }
    for (int k = 0; k < j->n_tasks; k++) {
        store_task *t = j->tasks[k];
        if (!j->model) j->model = store_task_model(t);
        if (store_task_model(t) != j->model) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "tasks \"%s\" and \"%s\" run on different models (%s, %s); send them in separate requests",
                     store_task_name(j->tasks[0]), store_task_name(t), store_model_name(j->model),
                     store_model_name(store_task_model(t)));
            return -1;
        }
        if (task_skip(p, j, k, code, msg, msz)) return -1;
    }
    for (int i = 0; i < p->n_skips; i++) {
        int found = 0;
        for (int k = 0; k < j->n_tasks; k++) found |= !strcmp(p->skips[i].task, store_task_name(j->tasks[k]));
        if (!found) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "\"skip\" names task \"%.100s\", which the request does not run", p->skips[i].task);
            return -1;
        }
    }
    /* KServe v2: every output asked for must be one the task's head answers */
    if (p->v2_outputs) {
        proto_head_kind hk = srv__wire_head_kind(store_task_head_type(j->tasks[0]));
        if (p->v2_outputs & ~proto_v2_outputs_of(hk)) {
            char answers[160];
            proto_v2_outputs_describe(hk, answers, sizeof answers);
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "\"outputs\" asks for a tensor task \"%.100s\" does not answer (it answers %s)",
                     store_task_name(j->tasks[0]), answers);
            return -1;
        }
    }
    /* extractive QA answers from a context: the text_pair (the question is the text). A QA task the
     * request names is refused an input without one; left out ("every task"), it answers null there,
     * so a registry holding a QA task still serves unpaired texts to its other tasks */
    for (int k = 0; k < j->n_tasks && p->n_tasks > 0; k++) {
        if (store_task_head_type(j->tasks[k]) != ENG_HEAD_QA) continue;
        for (int i = 0; i < p->n_inputs; i++)
            if (!p->inputs[i].pair) {
                *code = ENG_TEXT_PAIR_REQUIRED;
                snprintf(msg, msz,
                         "task \"%s\" answers questions: inputs[%d] needs {\"text\": question, \"text_pair\": context}%s",
                         store_task_name(j->tasks[k]), i, p->inputs[i].ids ? " (token ids carry no context)" : "");
                return -1;
            }
    }
    if (srv__job_tokenize(s, j, p, code, msg, msz)) return -1;
    if (route_rollouts(p, j, code, msg, msz)) return -1;
    j->cost = srv__cost_model(s, j->model);
    if (p->latency_ms > 0 && plan_for_latency(s, j, p->latency_ms, code, msg, msz)) return -1;
    return 0;
}
