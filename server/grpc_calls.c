/* grpc_calls.c - the methods of KServe v2's GRPCInferenceService, each answered from what the REST
 * v2 route of the same name builds (proto/grpc.c converts), so the two protocols answer alike:
 * ServerLive, ServerReady, ServerMetadata, ModelReady, ModelMetadata and ModelStatistics at once on the loop;
 * ModelInfer as a job of the one scheduler, with REST's admission (--max-queue), parser and limits
 * (proto_v2_infer_parse), output check, lazy task loads (libuv's pool), job preparation
 * (srv__job_prepare: tasks, skips, tokenization) and metrics. The job's answer is encoded on its
 * worker (srv__grpc_job_encode) and sent by the done hook on the loop, where the connection lives.
 *
 * Unlike REST's, a gRPC request is parsed and tokenized on the loop thread (the connection is the
 * loop's): microseconds for the texts of one request, taken from the batcher's thread. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "grpc.h"
#include "http.h"
#include "http_status.h"
#include "predict.h"
#include "respond.h"
#include "routes.h"

/* Rounds of "load the missing task, run again" before a call gives up, as REST's. */
#define LOAD_ROUNDS_MAX 3
/* Bytes of an error message. */
#define MSG_MAX 600

int srv__grpc_status_of_http(unsigned http) {
    switch (http) {
    case 400:
    case 415:
    case 422: return PROTO_GRPC_INVALID_ARGUMENT;
    case 401: return PROTO_GRPC_UNAUTHENTICATED;
    case 404: return PROTO_GRPC_NOT_FOUND;
    case 413:
    case 429: return PROTO_GRPC_RESOURCE_EXHAUSTED;
    case 503: return PROTO_GRPC_UNAVAILABLE;
    case 504: return PROTO_GRPC_DEADLINE_EXCEEDED;
    default: return http < 300 ? PROTO_GRPC_OK : PROTO_GRPC_INTERNAL;
    }
}

/* An error of adapterd's table, with the status REST would give it mapped to gRPC's. */
static void answer_error(srv_grpc_call *c, eng_status code, const char *msg) {
    srv__grpc_answer(c, srv__grpc_status_of_http(srv_http_status(code)), msg, NULL, 0);
}

static void answer_message(srv_grpc_call *c, int rc, uint8_t *out, size_t len) {
    if (rc) answer_error(c, rc == ENG_NO_MEMORY ? ENG_NO_MEMORY : ENG_INTERNAL, "cannot encode the answer");
    else srv__grpc_answer(c, PROTO_GRPC_OK, NULL, out, len);
}

/* ---- ModelInfer ---- */

static void infer_run(srv_grpc_call *c);

static void load_work(uv_work_t *w) {
    srv_grpc_call *c = w->data;
    eng_err e = {0};
    int bad = -1;
    double t0 = srv__now();
    c->load_rc = store_tasks_ensure(srv__grpc_server(c->g)->reg, c->held, c->n_held, &bad, &e);
    if (c->load_rc) snprintf(c->load_msg, sizeof c->load_msg, "%.250s", e.msg);
    c->load_s += srv__now() - t0;
}

static void load_done(uv_work_t *w, int status) {
    srv_grpc_call *c = w->data;
    srv_server *s = srv__grpc_server(c->g);
    c->loading = false; /* the loaded task stays held until the call ends, so it stays resident for the job */
    if (!c->conn) return srv__grpc_call_release(c);
    if (c->answered) return; /* the deadline passed meanwhile; the stream's close releases the call */
    srv__metrics_lazy_load(s->metrics, c->load_s);
    if (c->load_rc) return answer_error(c, (eng_status)c->load_rc, c->load_msg);
    infer_run(c);
}

/* Loads the call's task on libuv's pool, then runs the call again. */
static void load_then_retry(srv_grpc_call *c, store_task *t) {
    srv_server *s = srv__grpc_server(c->g);
    if (++c->rounds > LOAD_ROUNDS_MAX) {
        store_task_release(t);
        return answer_error(c, ENG_UNAVAILABLE, "tasks were evicted or replaced while loading; retry");
    }
    /* what an earlier round held: the current version may have changed */
    for (int i = 0; i < c->n_held; i++) store_task_release(c->held[i]);
    free(c->held);
    c->held = NULL, c->n_held = 0;
    if (!(c->held = malloc(sizeof *c->held))) {
        store_task_release(t);
        return answer_error(c, ENG_NO_MEMORY, "out of memory");
    }
    c->held[0] = t, c->n_held = 1;
    c->loading = true;
    c->work.data = c;
    if (uv_queue_work(&s->loop, &c->work, load_work, load_done)) {
        c->loading = false;
        answer_error(c, ENG_INTERNAL, "cannot queue the task's load");
    }
}

/* At the call's headers, before grpc.c takes a byte of its message: a ModelInfer takes its
 * --max-queue place here, as REST's does before its body, so a call beyond the queue is refused
 * before its message is read (grpc.c drops it). Other methods need no place. */
static int begin(srv_grpc_call *c) {
    srv_server *s = srv__grpc_server(c->g);
    if (c->method != PROTO_GRPC_MODEL_INFER) return 0;
    if (!atomic_load(&s->ready) || atomic_load(&s->draining)) {
        answer_error(c, ENG_UNAVAILABLE, "the server is starting or draining");
        return 1;
    }
    if (srv__sched_admit(s->sched)) {
        char msg[MSG_MAX];
        snprintf(msg, sizeof msg, "the queue is full (--max-queue %d); retry after a second", s->cfg.max_queue);
        answer_error(c, ENG_BUSY, msg);
        return 1;
    }
    c->admitted = true;
    return 0;
}

static void infer_run(srv_grpc_call *c) {
    srv_server *s = srv__grpc_server(c->g);
    char msg[MSG_MAX];
    if (!atomic_load(&s->ready) || atomic_load(&s->draining))
        return answer_error(c, ENG_UNAVAILABLE, "the server is starting or draining");
    /* the call holds its --max-queue place since its headers (begin) */
    if (!c->preq.n_inputs) {
        eng_err e = {0};
        char *json = NULL;
        size_t jlen = 0;
        int rc = proto_grpc_infer_request(c->msg + PROTO_GRPC_PREFIX, c->len - PROTO_GRPC_PREFIX, &c->target, &json, &jlen, &e);
        proto_limits lim = srv__proto_limits(s);
        if (!rc) rc = proto_v2_infer_parse(json, jlen, c->target.spec, &lim, &c->preq, &e);
        free(json);
        if (rc) return answer_error(c, rc == ENG_MALFORMED ? ENG_INVALID_ARGUMENT : (eng_status)rc, e.msg);
        char answers[160];
        if (c->preq.v2_outputs && srv__check_v2_outputs(s->reg, c->preq.v2_outputs, c->target.spec, answers, sizeof answers)) {
            snprintf(msg, sizeof msg, "\"outputs\" asks for a tensor task \"%.100s\" does not answer (it answers %s)", c->target.spec,
                     answers);
            return answer_error(c, ENG_INVALID_ARGUMENT, msg);
        }
    }
    store_task *t = srv__task_acquire_spec(s->reg, c->target.spec, strlen(c->target.spec));
    if (t && !store_task_resident(t)) return load_then_retry(c, t); /* the load holds the reference */
    store_task_release(t);
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return answer_error(c, ENG_NO_MEMORY, "out of memory");
    j->form = SRV_ANSWER_V2;
    j->dialect = PROTO_DIALECT_KSERVE;
    j->grpc = c;
    eng_status code = ENG_OK;
    srv_prepare_result prep = srv__job_prepare(s, j, &c->preq, c->id, c->t0, c->load_s, &code, msg, sizeof msg);
    if (prep != PREPARE_READY) {
        srv__job_free(j);
        if (prep == PREPARE_FAILED) return answer_error(c, code, msg);
        t = srv__task_acquire_spec(s->reg, c->target.spec, strlen(c->target.spec));
        if (!t) return answer_error(c, ENG_UNAVAILABLE, "the task went away while loading; retry");
        return load_then_retry(c, t);
    }
    c->job = j;
    c->admitted = false; /* the job holds the place from here on */
    srv__sched_submit(s->sched, j);
}

void srv__grpc_job_encode(srv_job *j) {
    if (j->status != 200 || !j->body) return;
    uint8_t *out = NULL;
    size_t len = 0;
    int rc = proto_grpc_infer_response(j->body, j->body_len, j->grpc->target.raw, &out, &len);
    if (rc) {
        srv__job_fail(j, rc == ENG_NO_MEMORY ? ENG_NO_MEMORY : ENG_INTERNAL, "cannot encode the answer as a ModelInferResponse");
        return;
    }
    free(j->body);
    j->body = (char *)out, j->body_len = len;
}

void srv__grpc_job_done(srv_server *s, srv_job *j) {
    srv_grpc_call *c = j->grpc;
    srv__metrics_queue_wait(s->metrics, j->t_start > 0 ? j->t_start - j->t_submit : -1);
    for (int k = 0; k < j->n_tasks; k++)
        srv__metrics_task(s->metrics, store_task_name(j->tasks[k]), j->treqs[k].skip, j->n_inputs,
                          j->t_end > 0 ? j->t_end - j->t_request : -1);
    if (j->status == 200 && j->body) {
        srv__grpc_answer(c, PROTO_GRPC_OK, NULL, (uint8_t *)j->body, j->body_len);
        j->body = NULL;
    } else {
        char m[MSG_MAX];
        proto_grpc_error_message(j->body ? j->body : "", j->body ? j->body_len : 0, m, sizeof m);
        srv__grpc_answer(c, srv__grpc_status_of_http(j->status), m, NULL, 0);
    }
    c->job = NULL;
    srv__job_free(j);
    if (!c->conn) srv__grpc_call_release(c);
}

void srv__grpc_job_abandon(srv_server *s, srv_job *j) {
    (void)s;
    /* the pass goes on reading the call's request; the call stays until the done hook */
    answer_error(j->grpc, ENG_UNAVAILABLE, "the server stopped at its drain deadline before this request ran; retry on another replica");
}

static void on_deadline(srv_grpc_call *c) {
    /* a job under way still runs (its batch may hold others); its answer is dropped */
    srv__grpc_answer(c, PROTO_GRPC_DEADLINE_EXCEEDED, "the deadline (grpc-timeout) passed", NULL, 0);
}

/* ---- the other calls ---- */

/* The admin token in the call's "authorization: Bearer <token>" metadata, compared in constant time. */
static bool admin_token_ok(const srv_grpc_call *c, const char *want) {
    const char *h = c->auth;
    if (strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(want);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(h[i < a ? i : 0] ^ want[i]);
    return diff == 0;
}

/* RepositoryIndex: an admin call, as REST's POST /v2/repository/index: needs --admin-token and the
 * token as "authorization: Bearer <token>" metadata; every task, its current version and whether it
 * is in memory (with "ready": only those that are). */
static void repository_index(srv_grpc_call *c) {
    srv_server *s = srv__grpc_server(c->g);
    eng_err e = {0};
    bool ready_only = false;
    if (!s->cfg.admin_token[0])
        return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED, "the admin API is off (start with --admin-token)", NULL, 0);
    if (!admin_token_ok(c, s->cfg.admin_token))
        return answer_error(c, ENG_UNAUTHENTICATED, "admin calls need \"authorization: Bearer <admin token>\" metadata");
    if (proto_grpc_index_request(c->msg + PROTO_GRPC_PREFIX, c->len - PROTO_GRPC_PREFIX, &ready_only, &e))
        return answer_error(c, ENG_INVALID_ARGUMENT, e.msg);
    store_task **all = NULL;
    int n = store_tasks_acquire(s->reg, &all), k = 0;
    proto_grpc_index_entry *v = n >= 0 ? calloc((size_t)n + 1, sizeof *v) : NULL;
    for (int i = 0; v && i < n; i++) {
        bool res = store_task_resident(all[i]);
        if (ready_only && !res) continue;
        v[k++] = (proto_grpc_index_entry){store_task_name(all[i]), store_task_version(all[i]), res ? "READY" : "UNAVAILABLE",
                                          res ? "" : "not loaded (loads on first request or /load)"};
    }
    uint8_t *out = NULL;
    size_t len = 0;
    int rc = v ? proto_grpc_index_response(v, k, &out, &len) : ENG_NO_MEMORY;
    free(v);
    if (n > 0) store_tasks_release(all, n);
    answer_message(c, rc, out, len);
}

/* The statistics of every task, as GET /v2/models/{m}/stats gives each, in one {"model_stats": [...]}.
 * Answers the error itself and returns NULL. */
static char *all_stats(srv_grpc_call *c, size_t *len) {
    srv_server *s = srv__grpc_server(c->g);
    store_task **all = NULL;
    int n = store_tasks_acquire(s->reg, &all);
    json_t *ms = json_array();
    bool bad = n < 0 || !ms;
    for (int i = 0; !bad && i < n; i++) {
        char *j = NULL, msg[MSG_MAX];
        size_t l = 0;
        const char *name = store_task_name(all[i]);
        if (srv__task_view(s, name, strlen(name), TASK_VIEW_V2_STATS, &j, &l, msg, sizeof msg)) continue; /* gone meanwhile */
        json_t *doc = json_loadb(j, l, 0, NULL);
        free(j);
        bad = !doc || json_array_extend(ms, json_object_get(doc, "model_stats"));
        json_decref(doc);
    }
    if (n > 0) store_tasks_release(all, n);
    json_t *root = bad ? NULL : json_pack("{s:O}", "model_stats", ms);
    char *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root), json_decref(ms);
    if (!out) answer_error(c, ENG_NO_MEMORY, "out of memory");
    else *len = strlen(out);
    return out;
}

/* The JSON of a v2 task view for a ModelReady / ModelMetadata / ModelStatistics request; answers the
 * error itself and returns NULL. */
static char *task_json(srv_grpc_call *c, srv_task_view view, size_t *len) {
    srv_server *s = srv__grpc_server(c->g);
    char name[PROTO_GRPC_SPEC_MAX], ver[PROTO_GRPC_SPEC_MAX], path[2 * PROTO_GRPC_SPEC_MAX + 16], msg[MSG_MAX];
    eng_err e = {0};
    int rc = proto_grpc_model_request(c->msg + PROTO_GRPC_PREFIX, c->len - PROTO_GRPC_PREFIX, view == TASK_VIEW_V2_STATS, name, ver,
                                      sizeof name, &e);
    if (rc) {
        answer_error(c, rc == ENG_MALFORMED ? ENG_INVALID_ARGUMENT : (eng_status)rc, e.msg);
        return NULL;
    }
    char *j = NULL;
    if (!name[0]) return all_stats(c, len); /* ModelStatistics with no name: every model */
    /* as the REST path /v2/models/{name}[/versions/{v}] */
    snprintf(path, sizeof path, "%s%s%s", name, ver[0] ? "/versions/" : "", ver);
    if ((rc = srv__task_view(s, path, strlen(name), view, &j, len, msg, sizeof msg))) {
        answer_error(c, (eng_status)rc, msg);
        return NULL;
    }
    return j;
}

static void dispatch(srv_grpc_call *c) {
    srv_server *s = srv__grpc_server(c->g);
    const uint8_t *m = c->msg + PROTO_GRPC_PREFIX;
    size_t n = c->len - PROTO_GRPC_PREFIX, len = 0;
    eng_err e = {0};
    uint8_t *out = NULL;
    char *j = NULL;
    switch (c->method) {
    case PROTO_GRPC_SERVER_LIVE:
    case PROTO_GRPC_SERVER_READY:
    case PROTO_GRPC_SERVER_METADATA:
        if (proto_grpc_empty_request(c->method, m, n, &e)) return answer_error(c, ENG_INVALID_ARGUMENT, e.msg);
        if (c->method != PROTO_GRPC_SERVER_METADATA) { /* ready: false while starting or draining, as GET /v2/health/ready's 503 */
            bool v = c->method == PROTO_GRPC_SERVER_LIVE || (atomic_load(&s->ready) && !atomic_load(&s->draining));
            int rc = proto_grpc_bool_response(c->method, v, &out, &len);
            return answer_message(c, rc, out, len);
        }
        {
            /* GET /v2's answer, with the extensions this protocol serves (binary tensor data is REST's alone) */
            static const char *const ext[] = {"model_repository", "statistics"};
            if (!(j = proto_v2_server_encode("adapterd", ADAPTERD_VERSION_STRING, ext, 2, &len)))
                return answer_error(c, ENG_NO_MEMORY, "out of memory");
            int rc = proto_grpc_server_metadata_response(j, len, &out, &len);
            free(j);
            return answer_message(c, rc, out, len);
        }
    case PROTO_GRPC_MODEL_READY:
    case PROTO_GRPC_MODEL_METADATA:
    case PROTO_GRPC_MODEL_STATISTICS: {
        bool ready = c->method == PROTO_GRPC_MODEL_READY, stats = c->method == PROTO_GRPC_MODEL_STATISTICS;
        if (!(j = task_json(c, ready ? TASK_VIEW_V2_READY : stats ? TASK_VIEW_V2_STATS : TASK_VIEW_V2, &len))) return;
        int rc;
        if (stats) {
            rc = proto_grpc_stats_response(j, len, &out, &len);
        } else if (ready) {
            json_t *doc = json_loadb(j, len, 0, NULL);
            rc = proto_grpc_bool_response(c->method, json_is_true(json_object_get(doc, "ready")), &out, &len);
            json_decref(doc);
        } else {
            rc = proto_grpc_model_metadata_response(j, len, &out, &len);
        }
        free(j);
        return answer_message(c, rc, out, len);
    }
    case PROTO_GRPC_MODEL_INFER: return infer_run(c);
    case PROTO_GRPC_REPOSITORY_INDEX: return repository_index(c);
    default: return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED, "unknown method", NULL, 0);
    }
}

int srv__grpc_serve(srv_server *s, srv_grpc **out, eng_err *err) {
    return srv__grpc_start(s, (srv_grpc_hooks){.begin = begin, .dispatch = dispatch, .deadline = on_deadline}, out, err);
}
