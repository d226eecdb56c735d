/* server.c - HTTP: routes, request bodies, validation, tokenization, suspend/resume, access log,
 * and srv_run, which owns the libuv loop (scheduler, signals) and libmicrohttpd's daemon.
 *
 * A request's life: MHD's epoll thread calls on_request for the headers (route, method, request
 * id), for each body chunk (bounded by max_body_bytes), and once more at the end. Quick routes
 * answer there. /v1/predict and v2 infer parse, check, tokenize, suspend the connection and submit
 * a job; the loop resumes the connection when the job is done and MHD calls on_request again, which
 * queues the prepared body. on_completed logs, counts and frees. Suspending before submitting means
 * a resume can never overtake its suspend. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "http_status.h"
#include "internal.h"

/* ---- responses ---- */

static enum MHD_Result send_body(srv_request *r, unsigned status, const char *ctype, char *body, size_t len,
                                 enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    if (status == 429) MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 503) MHD_add_response_header(resp, "Retry-After", "5");
    if (status == 405) MHD_add_response_header(resp, "Allow", r->route == SRV_ROUTE_PREDICT || r->route == SRV_ROUTE_V2_INFER ? "POST" : "GET");
    r->status = status;
    r->bytes_out = len;
    /* counted when the answer is queued, not when it is sent: a client that reads /metrics right
     * after its answer must see that answer counted (the completion callback may run later, on
     * another HTTP thread) */
    if (!r->counted) {
        srv__metrics_request(r->srv->metrics, r->route, status, srv__now() - r->t0);
        r->counted = 1;
    }
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(srv_request *r, unsigned status, char *json, size_t len) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"code\":\"out_of_memory\",\"message\":\"out of memory\"}}";
        return send_body(r, 500, "application/json", (char *)oom, sizeof oom - 1, MHD_RESPMEM_PERSISTENT);
    }
    return send_body(r, status, "application/json", json, len, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result send_error(srv_request *r, eng_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result send_error(srv_request *r, eng_status code, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len = 0;
    char *j = proto_error_encode(eng_status_name(code), msg, &len);
    return send_json(r, srv_http_status(code), j, len);
}

enum MHD_Result srv__send_json(srv_request *r, unsigned status, char *json, size_t len) {
    return send_json(r, status, json, len);
}

enum MHD_Result srv__send_error(srv_request *r, eng_status code, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_error(r, code, "%s", msg);
}

void srv__job_fail(srv_job *j, eng_status code, const char *msg) {
    free(j->body);
    j->status = srv_http_status(code);
    j->body = proto_error_encode(eng_status_name(code), msg && *msg ? msg : eng_status_desc(code), &j->body_len);
}

/* ---- jobs ---- */

static void job_free(srv_job *j) {
    if (!j) return;
    for (int i = 0; j->enc && i < j->n_inputs; i++) eng_tok_encoding_free(&j->enc[i]);
    for (int k = 0; j->tasks && k < j->n_tasks; k++) store_task_release(j->tasks[k]);
    free(j->enc), free(j->truncated), free(j->tasks), free(j->treqs), free(j->skip_src), free(j->body);
    free(j);
}

const char *srv__skip_source_name(srv_skip_source s) {
    switch (s) {
    case SRV_SKIP_DEFAULT: return "default";
    case SRV_SKIP_REQUEST: return "request";
    case SRV_SKIP_BUDGET: return "budget";
    case SRV_SKIP_LATENCY: return "latency";
    case SRV_SKIP_ADAPTIVE: return "adaptive";
    }
    return "default";
}

const eng_cost_model *srv__cost_model(const srv_server *s, const store_model *m) {
    for (int i = 0; i < s->n_costs; i++)
        if (s->cost_models[i] == m) return &s->costs[i];
    return NULL;
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
    char skips[256] = "";
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

void srv__job_done(srv_server *s, srv_job *j) {
    srv__metrics_job(s->metrics, j);
    MHD_resume_connection(j->req->conn);
}

/* Resolves tasks and skips, tokenizes; on success j is ready to submit. Returns 0, 1 when a task
 * is no longer resident (load and retry), or -1 with *code and msg set. */
static int job_prepare(srv_request *r, srv_job *j, const proto_predict_req *p, eng_status *code, char *msg, size_t msz) {
    srv_server *s = r->srv;
    int n_tasks = p->n_tasks ? p->n_tasks : store_n_tasks(s->reg);
    j->req = r;
    j->texts = p->inputs;
    j->n_inputs = p->n_inputs;
    j->ret_scores = p->ret_scores, j->ret_logits = p->ret_logits, j->ret_explain = p->ret_explain;
    j->latency_ms = j->predicted_ms = -1;
    if (!(j->tasks = calloc((size_t)n_tasks, sizeof *j->tasks)) || !(j->treqs = calloc((size_t)n_tasks, sizeof *j->treqs)) ||
        !(j->skip_src = calloc((size_t)n_tasks, sizeof *j->skip_src)) ||
        !(j->enc = calloc((size_t)p->n_inputs, sizeof *j->enc)) || !(j->truncated = calloc((size_t)p->n_inputs, sizeof(int)))) {
        *code = ENG_NO_MEMORY;
        snprintf(msg, msz, "out of memory");
        return -1;
    }
    for (int k = 0; k < n_tasks; k++) {
        store_task *t = p->n_tasks ? store_task_acquire(s->reg, p->tasks[k], strlen(p->tasks[k]))
                                   : store_task_acquire_at(s->reg, k);
        if (!t) {
            *code = ENG_NOT_FOUND;
            snprintf(msg, msz, "unknown task \"%.100s\" (GET /v1/tasks lists them)", p->n_tasks ? p->tasks[k] : "?");
            return -1;
        }
        j->tasks[j->n_tasks++] = t;
        if (!j->model) j->model = store_task_model(t);
        if (store_task_model(t) != j->model) {
            *code = ENG_INVALID_ARGUMENT;
            snprintf(msg, msz, "tasks \"%s\" and \"%s\" run on different models (%s, %s); send them in separate requests",
                     store_task_name(j->tasks[0]), store_task_name(t), store_model_name(j->model),
                     store_model_name(store_task_model(t)));
            return -1;
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
            return -1;
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
            return -1;
        }
    }
    /* tokenize */
    const eng_tokenizer *tok = store_model_tokenizer(j->model);
    int max_len = store_model_max_tokens(j->model);
    if (s->cfg.max_seq_len > 0 && s->cfg.max_seq_len < max_len) max_len = s->cfg.max_seq_len;
    eng_tok_params tp = eng_tok_default_params();
    tp.max_length = max_len;
    if (!p->truncate) tp.truncation = ENG_TOK_TRUNCATE_NONE;
    for (int i = 0; i < p->n_inputs; i++) {
        const proto_text *x = &p->inputs[i];
        eng_err e = {0};
        int rc = eng_tok_encode(tok, x->text, x->len, x->pair, x->pair_len, &tp, &j->enc[i], &e);
        if (rc) {
            *code = rc == ENG_NO_MEMORY ? ENG_NO_MEMORY : ENG_INVALID_ARGUMENT;
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
    /* a task evicted between the residency check and its acquisition here (the acquisition now
     * keeps it): the caller loads it and runs the request again; the cost model needs every task */
    for (int k = 0; k < j->n_tasks; k++)
        if (!j->treqs[k].task) return 1;
    if (p->latency_ms > 0) return plan_for_latency(s, j, p->latency_ms, code, msg, msz);
    return 0;
}

static enum MHD_Result start_inference(srv_request *r, const char *task, size_t task_len) {
    srv_server *s = r->srv;
    if (atomic_load(&s->draining) || !atomic_load(&s->ready))
        return send_error(r, ENG_UNAVAILABLE, "the server is %s; retry on another replica",
                          atomic_load(&s->draining) ? "draining" : "starting");
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    if (!ct || strncasecmp(ct, "application/json", 16) != 0)
        return send_error(r, ENG_MEDIA_TYPE, "Content-Type must be application/json (got %s)", ct ? ct : "none");
    if (r->too_large)
        return send_error(r, ENG_TOO_LARGE, "request body over the limit of %zu bytes", s->cfg.max_body_bytes);
    proto_limits lim = {.max_inputs = s->cfg.max_inputs, .max_tasks = s->cfg.max_tasks, .max_text_bytes = s->cfg.max_body_bytes};
    proto_err pe = {0};
    int rc;
    char tname[256];
    if (r->route == SRV_ROUTE_V2_INFER) {
        if (task_len >= sizeof tname) return send_error(r, ENG_NOT_FOUND, "unknown task");
        memcpy(tname, task, task_len);
        tname[task_len] = '\0';
        rc = proto_v2_infer_parse(r->body ? r->body : "", r->body_len, tname, &lim, &r->preq, &pe);
    } else {
        rc = proto_predict_parse(r->body ? r->body : "", r->body_len, &lim, &r->preq, &pe);
    }
    if (rc) {
        eng_status code = rc == PROTO_MALFORMED ? ENG_MALFORMED
                          : rc == PROTO_LIMIT   ? ENG_LIMIT
                          : rc == PROTO_NO_MEMORY ? ENG_NO_MEMORY
                                                  : ENG_INVALID_ARGUMENT;
        return send_error(r, code, "%s", pe.msg);
    }
    /* tasks not resident (a memory budget): load them on the pool, then run this again */
    if (srv__tasks_missing(r)) return srv__load_then_retry(r);
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return send_error(r, ENG_NO_MEMORY, "out of memory");
    r->job = j;
    j->v2 = r->route == SRV_ROUTE_V2_INFER;
    eng_status code = ENG_OK;
    char msg[600];
    int prep = job_prepare(r, j, &r->preq, &code, msg, sizeof msg);
    if (prep < 0) return send_error(r, code, "%s", msg);
    if (prep > 0) { /* evicted or replaced since the check: rare, go round again */
        job_free(j);
        r->job = NULL;
        return srv__load_then_retry(r);
    }
    MHD_suspend_connection(r->conn);
    r->suspended = 1;
    if (srv__sched_submit(s->sched, j)) {
        srv__job_fail(j, ENG_BUSY, "the queue is full; retry after a second");
        MHD_resume_connection(r->conn);
    }
    return MHD_YES;
}

/* ---- quick routes ---- */

/* A task that never loaded (memory budget) has no head or adapter kind yet. */
static void fill_task_info(store_task *t, proto_task_info *ti) {
    int h = store_task_head_type(t);
    proto_head_kind k = h == ENG_HEAD_MULTILABEL   ? PROTO_HEAD_MULTILABEL
                        : h == ENG_HEAD_REGRESSION ? PROTO_HEAD_REGRESSION
                        : h == ENG_HEAD_TAGGING    ? PROTO_HEAD_TAGGING
                        : h == ENG_HEAD_QA         ? PROTO_HEAD_QA
                                                   : PROTO_HEAD_CLASSIFICATION;
    *ti = (proto_task_info){.name = store_task_name(t), .version = store_task_version(t),
                            .model = store_model_name(store_task_model(t)), .kind = store_task_kind(t),
                            .head = k, .head_known = h >= 0, .n_labels = store_task_num_labels(t),
                            .labels = store_task_labels(t), .skip_min = store_task_skip_min(t),
                            .skip_max = store_task_skip_max(t), .skip_default = store_task_skip_default(t),
                            .bytes = store_task_bytes(t), .resident = store_task_resident(t)};
}

static enum MHD_Result route_tasks(srv_request *r) {
    int n = store_n_tasks(r->srv->reg);
    proto_task_info *ti = calloc((size_t)n + 1, sizeof *ti);
    store_task **ts = calloc((size_t)n + 1, sizeof *ts);
    if (!ti || !ts) {
        free(ti), free(ts);
        return send_error(r, ENG_NO_MEMORY, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if ((ts[k] = store_task_acquire_at(r->srv->reg, i))) fill_task_info(ts[k], &ti[k]), k++;
    size_t len = 0;
    char *j = proto_tasks_encode(ti, k, &len);
    for (int i = 0; i < k; i++) store_task_release(ts[i]);
    free(ti), free(ts);
    return send_json(r, 200, j, len);
}

static enum MHD_Result route_task(srv_request *r, const char *name, size_t nlen, int v2, int ready_only) {
    store_task *t = store_task_acquire(r->srv->reg, name, nlen);
    if (!t) return send_error(r, ENG_NOT_FOUND, "unknown task \"%.*s\" (GET /v1/tasks lists them)", (int)(nlen > 100 ? 100 : nlen), name);
    proto_task_info ti;
    fill_task_info(t, &ti);
    size_t len = 0;
    char *j = ready_only ? proto_v2_bool_encode("ready", 1, &len) : v2 ? proto_v2_model_encode(&ti, &len) : proto_task_encode(&ti, &len);
    store_task_release(t);
    return send_json(r, 200, j, len);
}

static enum MHD_Result route_models(srv_request *r) {
    int n = store_n_models(r->srv->reg);
    proto_model_info *mi = calloc((size_t)n + 1, sizeof *mi);
    store_model **ms = calloc((size_t)n + 1, sizeof *ms);
    if (!mi || !ms) {
        free(mi), free(ms);
        return send_error(r, ENG_NO_MEMORY, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!(ms[k] = store_model_acquire_at(r->srv->reg, i))) continue;
        const eng_config *c = eng_model_config(store_model_engine(ms[k]));
        mi[k] = (proto_model_info){.name = store_model_name(ms[k]), .model_type = c->model_type, .hidden = c->hidden,
                                   .layers = c->n_layers, .max_tokens = store_model_max_tokens(ms[k]), .vocab = c->vocab,
                                   .bytes = eng_model_bytes(store_model_engine(ms[k]))};
        k++;
    }
    size_t len = 0;
    char *j = proto_models_encode(mi, k, &len);
    for (int i = 0; i < k; i++) store_model_release(ms[i]);
    free(mi), free(ms);
    return send_json(r, 200, j, len);
}

/* Matches url to a route; for /v1/tasks/{name} and /v2/models/{task}/... the name goes to arg, arg_len. */
static srv_route match(const char *url, const char **arg, size_t *arg_len) {
    static const struct {
        const char *path;
        srv_route r;
    } fixed[] = {{"/v1/predict", SRV_ROUTE_PREDICT}, {"/v1/tasks", SRV_ROUTE_TASKS}, {"/v1/models", SRV_ROUTE_MODELS},
                 {"/healthz", SRV_ROUTE_HEALTHZ}, {"/readyz", SRV_ROUTE_READYZ}, {"/metrics", SRV_ROUTE_METRICS},
                 {"/openapi.json", SRV_ROUTE_OPENAPI}, {"/v2/health/live", SRV_ROUTE_V2_LIVE},
                 {"/v2/health/ready", SRV_ROUTE_V2_READY}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!strcmp(url, fixed[i].path)) return fixed[i].r;
    if (!strncmp(url, "/v1/tasks/", 10) && url[10] && !strchr(url + 10, '/')) {
        *arg = url + 10, *arg_len = strlen(url + 10);
        return SRV_ROUTE_TASK;
    }
    if (!strncmp(url, "/v2/models/", 11) && url[11] && url[11] != '/') {
        const char *name = url + 11, *slash = strchr(name, '/');
        *arg = name;
        if (!slash) {
            *arg_len = strlen(name);
            return SRV_ROUTE_V2_MODEL;
        }
        *arg_len = (size_t)(slash - name);
        if (!strcmp(slash, "/ready")) return SRV_ROUTE_V2_MODEL_READY;
        if (!strcmp(slash, "/infer")) return SRV_ROUTE_V2_INFER;
    }
    return SRV_ROUTE_UNKNOWN;
}

static void set_request_id(srv_request *r) {
    const char *given = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = 0;
    if (given) {
        /* echo printable ASCII only, at most 64 bytes: the id goes into logs and headers */
        for (; given[n] && n < 64; n++)
            if (given[n] < 0x21 || given[n] > 0x7e) break;
        if (given[n] == '\0' && n > 0) {
            memcpy(r->id, given, n + 1);
            return;
        }
    }
    unsigned long long k = (unsigned long long)atomic_fetch_add(&r->srv->next_id, 1);
    snprintf(r->id, sizeof r->id, "%s-%llu", r->srv->id_prefix, k);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
    srv_server *s = cls;
    srv_request *r = *con_cls;
    const char *arg = NULL;
    size_t arg_len = 0;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->srv = s;
        r->conn = conn;
        r->t0 = srv__now();
        r->route = match(url, &arg, &arg_len);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        set_request_id(r);
        atomic_fetch_add(&s->active, 1);
        *con_cls = r;
        if (srv__admin_claims(r, url, method)) {
            r->method_ok = 1;
            const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
            if (cl && strtoull(cl, NULL, 10) > s->cfg.max_upload_bytes)
                return send_error(r, ENG_TOO_LARGE, "upload of %s bytes is over the limit of %zu", cl, s->cfg.max_upload_bytes);
            return MHD_YES;
        }
        int is_post = r->route == SRV_ROUTE_PREDICT || r->route == SRV_ROUTE_V2_INFER;
        r->method_ok = is_post ? !strcmp(method, "POST") : (!strcmp(method, "GET") || !strcmp(method, "HEAD"));
        if (is_post && r->method_ok) {
            const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
            if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes)
                return send_error(r, ENG_TOO_LARGE, "request body of %s bytes is over the limit of %zu", cl, s->cfg.max_body_bytes);
        }
        return MHD_YES;
    }
    if (r->suspended && r->off.state == 2) {
        /* resumed after offloaded work: its answer, or run the request again (tasks now loaded) */
        r->suspended = 0;
        r->off.state = 0;
        if (r->off.status) {
            char *b = r->off.body;
            r->off.body = NULL;
            return send_json(r, r->off.status, b, r->off.len);
        }
        r->route = match(url, &arg, &arg_len);
        proto_predict_free(&r->preq);
        memset(&r->preq, 0, sizeof r->preq);
        return start_inference(r, arg, arg_len);
    }
    if (r->suspended) {
        /* resumed: the job is done */
        r->suspended = 0;
        srv_job *j = r->job;
        char *b = j->body;
        j->body = NULL;
        if (!b) return send_error(r, ENG_INTERNAL, "no response was produced");
        return send_json(r, j->status, b, j->body_len);
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_large || r->status) return MHD_YES;
        if (r->body_len + n > (r->admin ? r->srv->cfg.max_upload_bytes : r->srv->cfg.max_body_bytes)) {
            r->too_large = 1;
            free(r->body);
            r->body = NULL;
            r->body_len = r->body_cap = 0;
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t nc = r->body_cap ? r->body_cap : 4096;
            while (nc < r->body_len + n + 1) nc *= 2;
            char *nb = realloc(r->body, nc);
            if (!nb) return MHD_NO;
            r->body = nb, r->body_cap = nc;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }
    if (r->status) return MHD_YES; /* already answered (413 by Content-Length) */
    if (r->admin) return srv__admin_dispatch(r, url, method);
    r->route = match(url, &arg, &arg_len);
    if (r->route == SRV_ROUTE_UNKNOWN) return send_error(r, ENG_NOT_FOUND, "no route %s %.200s", method, url);
    if (!r->method_ok) return send_error(r, ENG_METHOD_NOT_ALLOWED, "%s is not allowed on %.200s", method, url);
    size_t len = 0;
    char *j = NULL;
    int ready = atomic_load(&s->ready) && !atomic_load(&s->draining);
    switch (r->route) {
    case SRV_ROUTE_PREDICT: return start_inference(r, NULL, 0);
    case SRV_ROUTE_V2_INFER: {
        store_task *t = store_task_acquire(s->reg, arg, arg_len);
        if (!t) return send_error(r, ENG_NOT_FOUND, "unknown task \"%.*s\"", (int)(arg_len > 100 ? 100 : arg_len), arg);
        store_task_release(t);
        return start_inference(r, arg, arg_len);
    }
    case SRV_ROUTE_TASKS: return route_tasks(r);
    case SRV_ROUTE_TASK: return route_task(r, arg, arg_len, 0, 0);
    case SRV_ROUTE_V2_MODEL: return route_task(r, arg, arg_len, 1, 0);
    case SRV_ROUTE_V2_MODEL_READY: return route_task(r, arg, arg_len, 1, 1);
    case SRV_ROUTE_MODELS: return route_models(r);
    case SRV_ROUTE_HEALTHZ: j = proto_status_encode("ok", ready, &len); return send_json(r, 200, j, len);
    case SRV_ROUTE_READYZ: {
        const char *st = atomic_load(&s->draining) ? "draining" : ready ? "ok" : "starting";
        j = proto_status_encode(st, ready, &len);
        return send_json(r, ready ? 200 : 503, j, len);
    }
    case SRV_ROUTE_V2_LIVE: j = proto_v2_bool_encode("live", 1, &len); return send_json(r, 200, j, len);
    case SRV_ROUTE_V2_READY:
        if (!ready) return send_error(r, ENG_UNAVAILABLE, "not ready");
        j = proto_v2_bool_encode("ready", 1, &len);
        return send_json(r, 200, j, len);
    case SRV_ROUTE_METRICS: {
        char *m = srv__metrics_render(s->metrics, s, &len);
        if (!m) return send_error(r, ENG_NO_MEMORY, "out of memory");
        return send_body(r, 200, "text/plain; version=0.0.4", m, len, MHD_RESPMEM_MUST_FREE);
    }
    case SRV_ROUTE_OPENAPI: {
        const char *doc = proto_openapi_json(&len);
        return send_body(r, 200, "application/json", (char *)doc, len, MHD_RESPMEM_PERSISTENT);
    }
    default: return send_error(r, ENG_NOT_FOUND, "no route %.200s", url);
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    srv_request *r = *con_cls;
    if (!r) return;
    double dt = srv__now() - r->t0;
    unsigned status = r->status ? r->status : 499; /* 499: the client went away before an answer */
    if (!r->counted) srv__metrics_request(s->metrics, r->route, status, dt);
    if (s->cfg.access_log) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(stderr, "%s.%03ldZ %s %s %s %u %zu %.3fms%s\n", when, ts.tv_nsec / 1000000, r->id, r->method, r->path,
                status, r->bytes_out, dt * 1e3, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (aborted)");
    }
    job_free(r->job);
    srv__offload_clear(r);
    proto_predict_free(&r->preq);
    free(r->body);
    free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&s->active, 1);
}

/* ---- the loop ---- */

typedef struct {
    srv_server *s;
    uv_signal_t sigterm, sigint;
    uv_timer_t drain_timer;
    double drain_start;
} srv_loop_ctx;

static void drain_check(uv_timer_t *t) {
    srv_loop_ctx *c = t->data;
    srv_server *s = c->s;
    /* queued jobs keep their batching schedule (at most max_wait_us): draining does not change
     * answers, it only stops new work */
    int busy = srv__sched_depth(s->sched) + atomic_load(&s->active);
    if (busy == 0 || (srv__now() - c->drain_start) * 1e3 > s->cfg.drain_timeout_ms) {
        if (busy) srv__sched_flush(s->sched);
        if (busy) fprintf(stderr, "adapterd: drain timeout with %d requests in flight\n", busy);
        uv_stop(t->loop);
    }
}

static void on_signal(uv_signal_t *h, int signum) {
    srv_loop_ctx *c = h->data;
    if (atomic_exchange(&c->s->draining, 1)) return;
    fprintf(stderr, "adapterd: %s: draining (%d requests in flight)\n", signum == SIGTERM ? "SIGTERM" : "SIGINT",
            srv__sched_depth(c->s->sched));
    c->drain_start = srv__now();
    uv_timer_start(&c->drain_timer, drain_check, 0, 5);
}

/* Times one forward pass of each model on this machine (eng_cost_calibrate) for "latency_ms". Runs
 * before the workers start, so the measurement has the cores to itself. */
static int calibrate_costs(srv_server *s, eng_err *err) {
    int n = store_n_models(s->reg), rc = 0;
    s->cost_models = calloc((size_t)n + 1, sizeof *s->cost_models);
    s->costs = calloc((size_t)n + 1, sizeof *s->costs);
    eng_state *st = eng_state_new(s->cfg.threads);
    if (!s->cost_models || !s->costs || !st) {
        eng_state_free(st);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n && !rc; i++) {
        store_model *m = store_model_acquire_at(s->reg, i);
        if (!m) continue;
        double t0 = srv__now();
        if ((rc = eng_cost_calibrate(store_model_engine(m), st, 128, &s->costs[s->n_costs], err))) {
            eng_err_prefix(err, "cost model of %s", store_model_name(m));
            store_model_release(m);
            break;
        }
        fprintf(stderr, "adapterd: cost model %s: %.3f ms/GFLOP (measured in %.0f ms)\n", store_model_name(m),
                s->costs[s->n_costs].ms_per_gflop, (srv__now() - t0) * 1e3);
        s->cost_models[s->n_costs++] = m;
    }
    eng_state_free(st);
    return rc;
}

static void close_cb(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

int srv_run(const srv_config *cfg, store_registry *reg, eng_err *err) {
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    s->cfg = *cfg;
    s->reg = reg;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd) rnd = (uint32_t)time(NULL);
    snprintf(s->id_prefix, sizeof s->id_prefix, "%08x", rnd);
    int rc = 0;
    srv_loop_ctx ctx = {.s = s};
    if (uv_loop_init(&s->loop)) {
        free(s);
        return eng_err_set(err, ENG_INTERNAL, "cannot create the event loop");
    }
    if (!(s->metrics = srv__metrics_new(reg))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    if ((rc = calibrate_costs(s, err))) goto done;
    if (!(s->offl = srv__offload_new(&s->loop))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    if (cfg->watch) s->watch = srv__watch_start(s);
    if (!(s->sched = srv__sched_new(s, &s->loop, err))) {
        rc = err ? err->code : ENG_INTERNAL;
        goto done;
    }
    uv_signal_init(&s->loop, &ctx.sigterm);
    uv_signal_init(&s->loop, &ctx.sigint);
    uv_timer_init(&s->loop, &ctx.drain_timer);
    ctx.sigterm.data = ctx.sigint.data = ctx.drain_timer.data = &ctx;
    uv_signal_start(&ctx.sigterm, on_signal, SIGTERM);
    uv_signal_start(&ctx.sigint, on_signal, SIGINT);

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    if (uv_inet_pton(AF_INET, cfg->host, &addr.sin_addr)) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "host: '%s' is not an IPv4 address", cfg->host);
        goto done;
    }
    /* http_threads > 1: MHD's own pool, each thread with its own epoll set, so parsing and tokenizing
     * run in parallel; every handler path is thread-safe (atomics, the store's and scheduler's mutexes) */
    s->mhd = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO, (uint16_t)cfg->port,
                              NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096, MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
                              MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(cfg->http_threads > 1 ? cfg->http_threads : 0),
                              MHD_OPTION_END);
    if (!s->mhd) {
        rc = eng_err_set(err, ENG_UNAVAILABLE, "cannot listen on %s:%d (%s)", cfg->host, cfg->port, strerror(errno));
        goto done;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : cfg->port;
    if (cfg->port_file[0]) {
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp", cfg->port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, cfg->port_file)) {
            rc = eng_err_set(err, ENG_IO, "cannot write the port file %s", cfg->port_file);
            goto done;
        }
    }
    fprintf(stderr, "adapterd: listening on http://%s:%d (%d tasks, %d http thread(s), %d worker(s) x %d threads, batch %d tokens / %d us, queue %d%s)\n",
            cfg->host, port, store_n_tasks(reg), cfg->http_threads, cfg->workers, cfg->threads, cfg->max_batch_tokens,
            cfg->max_wait_us, cfg->max_queue, cfg->adaptive_skips ? ", adaptive skips" : "");
    atomic_store(&s->ready, 1);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    atomic_store(&s->ready, 0);
    srv__watch_stop(s->watch);
    fprintf(stderr, "adapterd: drained, stopping\n");
done:
    if (s->mhd) MHD_stop_daemon(s->mhd);
    /* workers may still report batches after a drain timeout: join them before closing handles */
    srv__sched_free(s->sched);
    uv_walk(&s->loop, close_cb, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    srv__offload_free(s->offl);
    srv__metrics_free(s->metrics);
    for (int i = 0; i < s->n_costs; i++) store_model_release(s->cost_models[i]);
    free(s->cost_models), free(s->costs);
    free(s);
    return rc;
}
