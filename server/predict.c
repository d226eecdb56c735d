/* predict.c - POST /v1/predict and KServe v2 infer, up to the scheduler: parse the body (proto),
 * make sure the named tasks are resident (else load them on the pool and come back), resolve each
 * task's skip (request, budget, latency target or default), tokenize, suspend the connection and
 * submit the job. Everything here runs on an MHD thread and never waits on inference.
 *
 * Skips have one rule each, all the engine's: a "budget" goes through eng_skip_for_budget and a
 * "latency_ms" through eng_plan_for_latency on the cost model measured at start-up, so the server
 * and the engine's tests agree on every value. */
#define _GNU_SOURCE
#include "predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "http.h"
#include "http_status.h"
#include "offload.h"
#include "respond.h"

/* Rounds of "load the missing tasks, run again" before a request gives up (503): each round means
 * a task was evicted or replaced between its load and the request's acquisition. */
#define LOAD_ROUNDS_MAX 3
/* Bytes of the task list in a refused latency target's message. */
#define LATENCY_SKIPS_MSG_MAX 256
/* Bytes of a task name from a v2 route. */
#define SRV_TASK_NAME_MAX 256
/* Bytes of an error message built while preparing a job. */
#define PREPARE_MSG_MAX 600

static enum MHD_Result load_then_retry(srv_request *r);

store_task *srv__task_acquire_spec(store_registry *reg, const char *spec, size_t len) {
    const char *at = memchr(spec, '@', len);
    if (!at) return store_task_acquire(reg, spec, len);
    char name[SRV_TASK_NAME_MAX], ver[SRV_TASK_NAME_MAX];
    size_t nl = (size_t)(at - spec), vl = len - nl - 1;
    if (nl == 0 || vl == 0 || nl >= sizeof name || vl >= sizeof ver) return NULL;
    memcpy(name, spec, nl), name[nl] = '\0';
    memcpy(ver, at + 1, vl), ver[vl] = '\0';
    return store_task_acquire_version(reg, name, ver);
}

/* The v2 outputs a task answers (proto_v2_outputs_of): 0 when every output asked for is one of
 * them, else -1 with their names in `answers`. A task whose head is not known yet (never loaded) is
 * checked after its load, when it runs again. */
int srv__check_v2_outputs(store_registry *reg, unsigned outputs, const char *task, char *answers, size_t n) {
    store_task *t = srv__task_acquire_spec(reg, task, strlen(task));
    if (!t) return 0; /* answered 404 later */
    int h = store_task_head_type(t);
    store_task_release(t);
    if (h < 0) return 0;
    proto_head_kind k = srv__wire_head_kind(h);
    if (!(outputs & ~proto_v2_outputs_of(k))) return 0;
    proto_v2_outputs_describe(k, answers, n);
    return -1;
}

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

/* ---- lazy loading ---- */

/* Acquires the current version of every task the request names (all when none) into held;
 * returns how many are not resident, or -1 when out of memory. Unknown names are left to
 * job_prepare, which answers 404. */
static int acquire_named(srv_request *r, store_task ***held, int *n_held) {
    store_registry *reg = r->srv->reg;
    int n = r->preq.n_tasks, missing = 0, k = 0;
    store_task **v = NULL;
    if (!n) { /* every task: one snapshot */
        if ((k = store_tasks_acquire(reg, &v)) < 0) return -1;
        for (int i = 0; i < k; i++) missing += !store_task_resident(v[i]);
    } else if (!(v = calloc((size_t)n + 1, sizeof *v))) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        store_task *t = srv__task_acquire_spec(reg, r->preq.tasks[i], strlen(r->preq.tasks[i]));
        if (!t) continue;
        v[k++] = t;
        missing += !store_task_resident(t);
    }
    *held = v;
    *n_held = k;
    return missing;
}

static bool tasks_missing(srv_request *r) {
    store_task **v = NULL;
    int n = 0, missing = acquire_named(r, &v, &n);
    for (int i = 0; i < n; i++) store_task_release(v[i]);
    free(v);
    return missing > 0;
}

/* Did the request name task t by its version ("name@v")? */
static bool named_with_version(const srv_request *r, const store_task *t) {
    const char *name = store_task_name(t);
    size_t n = strlen(name);
    for (int i = 0; i < r->preq.n_tasks; i++)
        if (!strncmp(r->preq.tasks[i], name, n) && r->preq.tasks[i][n] == '@') return true;
    return false;
}

/* After t failed to load: has the store made another version current in its place (it does so
 * when the current version turns out broken on first use)? */
static bool replaced_after_failure(srv_request *r, const store_task *t) {
    if (named_with_version(r, t)) return false;
    const char *name = store_task_name(t);
    store_task *now = store_task_acquire(r->srv->reg, name, strlen(name));
    bool replaced = now && now != t;
    store_task_release(now);
    return replaced;
}

static void load_tasks(srv_request *r) {
    double t0 = srv__now();
    int loaded = 0;
    for (int i = 0; i < r->off.n_held; i++) loaded += !store_task_resident(r->off.held[i]);
    eng_err e = {0};
    int bad = -1, rc = store_tasks_ensure(r->srv->reg, r->off.held, r->off.n_held, &bad, &e);
    /* a broken current version: the request goes round again on the version standing in */
    if (rc && rc != ENG_NO_MEMORY && rc != ENG_LIMIT && bad >= 0 && replaced_after_failure(r, r->off.held[bad])) return;
    if (rc) {
        srv__offload_fail(r, (eng_status)rc, e.msg);
        return;
    }
    if (loaded) {
        srv__metrics_lazy_load(r->srv->metrics, srv__now() - t0);
        r->off.load_s += srv__now() - t0;
    }
}

static enum MHD_Result load_then_retry(srv_request *r) {
    if (++r->off.rounds > LOAD_ROUNDS_MAX)
        return srv__send_error(r, ENG_UNAVAILABLE, "tasks were evicted or replaced while loading; retry");
    /* drop what an earlier round held: the current versions may have changed */
    for (int i = 0; i < r->off.n_held; i++) store_task_release(r->off.held[i]);
    free(r->off.held);
    r->off.held = NULL;
    r->off.n_held = 0;
    if (acquire_named(r, &r->off.held, &r->off.n_held) < 0) return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    srv__offload(r->srv->offl, r, load_tasks);
    return MHD_YES;
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

int srv__job_tokenize(srv_server *s, srv_job *j, const proto_predict_req *p, eng_status *code, char *msg, size_t msz) {
    const eng_tokenizer *tok = store_model_tokenizer(j->model);
    const eng_config *cfg = eng_model_config(store_model_engine(j->model));
    int max_len = store_model_max_tokens(j->model);
    if (s->cfg.max_seq_len > 0 && s->cfg.max_seq_len < max_len) max_len = s->cfg.max_seq_len;
    eng_tok_params tp = eng_tok_default_params();
    tp.max_length = max_len;
    if (!p->truncate) tp.truncation = ENG_TOK_TRUNCATE_NONE;
    for (int i = 0; i < p->n_inputs; i++) {
        const proto_text *x = &p->inputs[i];
        eng_err e = {0};
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
            if (encode_ids(tok, x, &j->enc[i])) {
                *code = ENG_NO_MEMORY;
                snprintf(msg, msz, "out of memory");
                return -1;
            }
            j->tokens += x->n_ids;
            continue;
        }
        int rc = eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &tp, &j->enc[i], &e);
        if (rc) {
            *code = srv_status_of_tokenize(rc);
            snprintf(msg, msz, "inputs[%d]: %s", i, e.msg);
            return -1;
        }
        if ((int)j->enc[i].n > max_len) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "inputs[%d] has %zu tokens, over the limit of %d (send \"truncate\": true to cut it)", i,
                     j->enc[i].n, max_len);
            return -1;
        }
        if (p->truncate && (int)j->enc[i].n == max_len) {
            /* rare: at the limit, find out whether it was cut */
            eng_tok_params np = tp;
            np.truncation = ENG_TOK_TRUNCATE_NONE;
            eng_tok_encoding full = {0};
            if (eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &np, &full, &e) == 0)
                j->truncated[i] = full.n > j->enc[i].n;
            eng_tok_encoding_free(&full);
        }
        j->tokens += (int)j->enc[i].n;
    }
    return 0;
}

srv_prepare_result srv__job_prepare(srv_server *s, srv_job *j, const proto_predict_req *p, const char *id, double t0, double load_s,
                                    eng_status *code, char *msg, size_t msz) {
    /* a request without "tasks" runs every task of one snapshot, owned by the job from here */
    store_task **all = NULL;
    int n_tasks = p->n_tasks ? p->n_tasks : store_tasks_acquire(s->reg, &all);
    if (all) j->tasks = all, j->n_tasks = n_tasks;
    snprintf(j->id, sizeof j->id, "%s", id);
    j->request_id = j->id;
    j->t_request = t0;
    j->texts = p->inputs;
    j->n_inputs = p->n_inputs;
    j->ret_scores = p->ret_scores, j->ret_logits = p->ret_logits, j->ret_explain = p->ret_explain;
    j->aggregation = p->aggregation;
    j->v2_outputs = p->v2_outputs;
    j->v2_id = p->v2_id;
    j->v2_binary = p->v2_binary;
    j->latency_ms = j->predicted_ms = -1;
    j->load_ms = load_s * 1e3;
    if (n_tasks < 0 || (!all && !(j->tasks = calloc((size_t)n_tasks, sizeof *j->tasks))) || !(j->treqs = calloc((size_t)n_tasks, sizeof *j->treqs)) ||
        !(j->skip_src = calloc((size_t)n_tasks, sizeof *j->skip_src)) ||
        !(j->enc = calloc((size_t)p->n_inputs, sizeof *j->enc)) || !(j->truncated = calloc((size_t)p->n_inputs, sizeof(int)))) {
        *code = ENG_NO_MEMORY;
        snprintf(msg, msz, "out of memory");
        return PREPARE_FAILED;
    }
    for (int k = 0; k < n_tasks; k++) {
        store_task *t = all ? all[k] : srv__task_acquire_spec(s->reg, p->tasks[k], strlen(p->tasks[k]));
        if (!t) {
            *code = ENG_NOT_FOUND;
            snprintf(msg, msz, "unknown task \"%.100s\" (GET /v1/tasks lists them and their versions)", p->tasks[k]);
            return PREPARE_FAILED;
        }
        if (!all) j->tasks[j->n_tasks++] = t;
        if (!j->model) j->model = store_task_model(t);
        if (store_task_model(t) != j->model) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "tasks \"%s\" and \"%s\" run on different models (%s, %s); send them in separate requests",
                     store_task_name(j->tasks[0]), store_task_name(t), store_model_name(j->model),
                     store_model_name(store_task_model(t)));
            return PREPARE_FAILED;
        }
        int lo = store_task_skip_min(t), hi = store_task_skip_max(t), skip = store_task_skip_default(t);
        const char *src = "default";
        srv_skip_source ss = SRV_SKIP_DEFAULT;
        if (p->skip >= 0) skip = p->skip, src = "\"skip\"", ss = SRV_SKIP_REQUEST;
        for (int i = 0; i < p->n_skips; i++)
            if (!strcmp(p->skips[i].task, store_task_name(t)))
                skip = p->skips[i].skip, src = "\"skip\"", ss = SRV_SKIP_REQUEST;
        /* the engine's rule (eng_skip_for_budget), the one the planner's tests check; a task that is
         * not resident has no engine object yet and is loaded and run again below, so its skip here
         * stays a placeholder */
        const eng_task *et = store_task_engine(t);
        if (p->budget >= 0 && et) skip = eng_skip_for_budget(et, p->budget), src = "\"budget\"", ss = SRV_SKIP_BUDGET;
        if (p->latency_ms > 0) skip = lo, ss = SRV_SKIP_LATENCY; /* raised by plan_for_latency below */
        if (skip < lo || skip > hi) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "%s asks task \"%s\" to skip %d layers; it allows %d..%d (see GET /v1/tasks/%s)", src,
                     store_task_name(t), skip, lo, hi, store_task_name(t));
            return PREPARE_FAILED;
        }
        j->treqs[k] = (eng_task_req){store_task_engine(t), skip};
        j->skip_src[k] = ss;
    }
    for (int i = 0; i < p->n_skips; i++) {
        int found = 0;
        for (int k = 0; k < j->n_tasks; k++) found |= !strcmp(p->skips[i].task, store_task_name(j->tasks[k]));
        if (!found) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "\"skip\" names task \"%.100s\", which the request does not run", p->skips[i].task);
            return PREPARE_FAILED;
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
                return PREPARE_FAILED;
            }
    }
    if (srv__job_tokenize(s, j, p, code, msg, msz)) return PREPARE_FAILED;
    /* a task evicted between the residency check and its acquisition here (the acquisition now
     * keeps it): the caller loads it and runs the request again; the cost model needs every task */
    for (int k = 0; k < j->n_tasks; k++)
        if (!j->treqs[k].task) return PREPARE_RELOAD;
    j->cost = srv__cost_model(s, j->model);
    if (p->latency_ms > 0 && plan_for_latency(s, j, p->latency_ms, code, msg, msz)) return PREPARE_FAILED;
    return PREPARE_READY;
}

/* The task TEI's /predict and /rerank run: ?task=NAME, else the registry's only task. Returns 0 with
 * the name in out, or -1 with the reason in out. */
static int tei_task(srv_request *r, char *out, size_t n) {
    const char *q = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "task");
    if (q && *q) {
        if (strlen(q) >= n) return snprintf(out, n, "?task is too long"), -1;
        snprintf(out, n, "%s", q);
        return 0;
    }
    store_task **all = NULL;
    int nt = store_tasks_acquire(r->srv->reg, &all);
    if (nt < 0) return snprintf(out, n, "out of memory"), -1;
    if (nt == 1) snprintf(out, n, "%s", store_task_name(all[0]));
    store_tasks_release(all, nt);
    if (nt != 1) return snprintf(out, n, "the registry serves %d tasks; name one with ?task=NAME (GET /v1/tasks)", nt), -1;
    return 0;
}

/* KServe v2 infer's body: JSON, or JSON and binary tensors (Inference-Header-Content-Length, the
 * binary tensor data extension). Triton's clients send the latter without a Content-Type, so none is
 * accepted beside application/json and application/octet-stream. 0 with the JSON's length in
 * *header_len, or -1 with the answer in *ans. */
static int v2_body(srv_request *r, size_t *header_len, enum MHD_Result *ans) {
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    *header_len = r->body_len;
    if (ct && !srv__media_type_is(ct, "application/json") && !srv__media_type_is(ct, "application/octet-stream")) {
        *ans = srv__send_error(r, ENG_MEDIA_TYPE, "Content-Type must be application/json, or application/octet-stream with "
                                                  "Inference-Header-Content-Length (got %.100s)", ct);
        return -1;
    }
    if (r->too_large) {
        *ans = srv__send_error(r, ENG_TOO_LARGE, "request body over the limit of %zu bytes", r->srv->cfg.max_body_bytes);
        return -1;
    }
    if (!h) return 0;
    char *end = NULL;
    unsigned long long v = *h >= '0' && *h <= '9' ? strtoull(h, &end, 10) : 0;
    if (!end || *end || v > r->body_len) {
        *ans = srv__send_error(r, ENG_MALFORMED,
                               "Inference-Header-Content-Length %.40s is not a byte count within the body (%zu bytes)", h, r->body_len);
        return -1;
    }
    *header_len = (size_t)v;
    return 0;
}

enum MHD_Result srv__predict(srv_request *r, const char *task, size_t task_len) {
    srv_server *s = r->srv;
    enum MHD_Result ans = MHD_YES;
    size_t header_len = 0;
    /* admission first: a refusal costs no parse, no tokenization and no load */
    if (srv__refuse_unready(r, &ans)) return ans;
    if (r->route == SRV_ROUTE_V2_INFER ? v2_body(r, &header_len, &ans) != 0 : srv__refuse_json_body(r, &ans)) return ans;
    if (srv__refuse_busy(r, &ans)) return ans;
    proto_limits lim = srv__proto_limits(s);
    eng_err pe = {0};
    int rc;
    char tname[SRV_TASK_NAME_MAX];
    if (r->route == SRV_ROUTE_V2_INFER) {
        if (task_len >= sizeof tname) return srv__send_error(r, ENG_NOT_FOUND, "unknown task");
        memcpy(tname, task, task_len);
        tname[task_len] = '\0';
        rc = proto_v2_infer_parse_binary(r->body ? r->body : "", r->body_len, header_len, tname, &lim, &r->preq, &pe);
    } else if (r->route == SRV_ROUTE_TEI_PREDICT || r->route == SRV_ROUTE_TEI_RERANK) {
        if (tei_task(r, tname, sizeof tname)) return srv__send_error(r, ENG_INVALID_ARGUMENT, "%s", tname);
        rc = proto_tei_predict_parse(r->body ? r->body : "", r->body_len, tname, r->route == SRV_ROUTE_TEI_RERANK, &lim, &r->preq, &pe);
    } else {
        rc = proto_predict_parse(r->body ? r->body : "", r->body_len, &lim, &r->preq, &pe);
    }
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", pe.msg);
    char answers[160];
    if (r->route == SRV_ROUTE_V2_INFER && r->preq.v2_outputs && srv__check_v2_outputs(s->reg, r->preq.v2_outputs, tname, answers, sizeof answers))
        return srv__send_error(r, ENG_INVALID_ARGUMENT, "\"outputs\" asks for a tensor task \"%.100s\" does not answer (it answers %s)",
                               tname, answers);
    /* tasks not resident (a memory budget): load them on the pool, then run this again */
    if (tasks_missing(r)) return load_then_retry(r);
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    r->job = j;
    j->form = r->route == SRV_ROUTE_V2_INFER      ? SRV_ANSWER_V2
              : r->route == SRV_ROUTE_TEI_PREDICT ? SRV_ANSWER_TEI_PREDICT
              : r->route == SRV_ROUTE_TEI_RERANK  ? SRV_ANSWER_TEI_RERANK
                                                  : SRV_ANSWER_V1;
    j->dialect = srv__route_dialect(r->route);
    j->tei_batch = r->preq.tei_batch, j->tei_raw = r->preq.tei_raw, j->tei_return_text = r->preq.tei_return_text;
    eng_status code = ENG_OK;
    char msg[PREPARE_MSG_MAX];
    j->req = r;
    srv_prepare_result prep = srv__job_prepare(s, j, &r->preq, r->id, r->t0, r->off.load_s, &code, msg, sizeof msg);
    if (prep == PREPARE_FAILED) return srv__send_error(r, code, "%s", msg);
    if (prep == PREPARE_RELOAD) { /* evicted or replaced since the check: rare, go round again */
        srv__job_free(j);
        r->job = NULL;
        return load_then_retry(r);
    }
    atomic_fetch_add(&s->n_suspended, 1);
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    r->admitted = false; /* the job holds the place from here on */
    srv__sched_submit(s->sched, j);
    return MHD_YES;
}

