/* grpc_calls.c - the gRPC edge of the front door: the methods of KServe v2's GRPCInferenceService.
 *
 * ModelInfer is a request like any other protocol's (front.c): its queue place is taken when its
 * HEADERS arrive (the begin hook, before grpc.c accepts a byte of its DATA), its message is decoded by
 * the gRPC codec (proto/grpc.c: protobuf straight into the typed request), its task acquired once,
 * loaded if need be, its inputs tokenized, and its job submitted to the one scheduler; the worker
 * encodes the answer as a ModelInferResponse (the codec's encoder) and the done hook below sends it.
 *
 * The loop owns the connections and runs the batcher, so nothing that grows with a request or with
 * the registry runs on it: decoding, preparing (tokenizing), ModelMetadata (it lists versions from the
 * registry's folders), ModelStatistics and RepositoryIndex (walks over every task) run on the edge's
 * own threads (prep threads, as many as --http-threads: HTTP's requests are prepared on as many of
 * libmicrohttpd's threads), and task loads on libuv's pool as HTTP's are. Own threads rather than
 * libuv's pool: the pool's threads are lowered to nice 19 for loads and uploads for good, and a
 * request's preparation must not wait behind the engine's workers for a CPU. Only ServerLive,
 * ServerReady and ServerMetadata, constant-time answers, are made on the loop. */
#define _GNU_SOURCE
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "front.h"
#include "grpc.h"
#include "http_status.h"
#include "offload.h"
#include "keys.h"
#include "views.h"

/* Bytes of an error message. */
#define MSG_MAX 600

int srv__grpc_status_of_http(unsigned http) {
    switch (http) {
    case 400:
    case 415:
    case 422: return PROTO_GRPC_INVALID_ARGUMENT;
    case 401: return PROTO_GRPC_UNAUTHENTICATED;
    case 403: return PROTO_GRPC_PERMISSION_DENIED;
    case 404: return PROTO_GRPC_NOT_FOUND;
    case 413:
    case 429: return PROTO_GRPC_RESOURCE_EXHAUSTED;
    case 503: return PROTO_GRPC_UNAVAILABLE;
    case 504: return PROTO_GRPC_DEADLINE_EXCEEDED;
    default: return http < 300 ? PROTO_GRPC_OK : PROTO_GRPC_INTERNAL;
    }
}

/* An error of adapterd's table, with the status REST would give it mapped to gRPC's. Loop thread. */
static void answer_error(srv_grpc_call *c, eng_status code, const char *msg) {
    srv__grpc_answer(c, srv__grpc_status_of_http(srv__http_status(code)), msg, NULL, 0);
}

/* The answer a prep thread made, sent later from the loop (pend_*). */
static void pend(srv_grpc_call *c, int status, const char *msg, uint8_t *out, size_t len) {
    c->pend_status = status;
    snprintf(c->pend_msg, sizeof c->pend_msg, "%.*s", (int)sizeof c->pend_msg - 1, msg ? msg : ""); /* cut to fit */
    free(c->pend_out);
    c->pend_out = out, c->pend_len = len;
}

static void pend_error(srv_grpc_call *c, eng_status code, const char *msg) {
    pend(c, srv__grpc_status_of_http(srv__http_status(code)), msg, NULL, 0);
}

static void pend_message(srv_grpc_call *c, int rc, uint8_t *out, size_t len) {
    if (rc) pend_error(c, rc == ENG_NO_MEMORY ? ENG_NO_MEMORY : ENG_INTERNAL, "cannot encode the answer");
    else pend(c, PROTO_GRPC_OK, NULL, out, len);
}

/* ---- the prep threads ---- */

struct srv_grpc_prep {
    srv_server *s;
    pthread_t *threads;
    int n_threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_grpc_call *head, *tail;  /* waiting calls (prep_next), guarded by mu */
    bool stop;
    srv_inbox back;              /* prepared calls back to the loop */
};

static void prep_run(srv_grpc_call *c);
static void on_prepared(srv_inbox *in, srv_inbox_node *first);

static void *prep_main(void *arg) {
    srv_grpc_prep *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        srv_grpc_call *c = p->head;
        if (!(p->head = c->prep_next)) p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        prep_run(c);
        srv__inbox_push(&p->back, &c->inbox);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Loop thread: c's work goes to a prep thread; on_prepared gets it back. The call stays alive meanwhile
 * (c->loading). The queue holds at most the calls of the open streams. */
static void prep_push(srv_grpc_call *c) {
    srv_grpc_prep *p = srv__grpc_server(c->g)->grpc_prep;
    c->loading = true;
    c->prep_next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->tail) p->tail->prep_next = c;
    else p->head = c;
    p->tail = c;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static int prep_start(srv_server *s, eng_err *err) {
    srv_grpc_prep *p = calloc(1, sizeof *p);
    if (!p) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    s->grpc_prep = p;
    p->s = s;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (srv__inbox_init(&p->back, &s->loop, on_prepared, p)) return eng_err_set(err, ENG_INTERNAL, "cannot create the gRPC inbox");
    int n = s->cfg.http_threads > 0 ? s->cfg.http_threads : 1;
    if (!(p->threads = calloc((size_t)n, sizeof *p->threads))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (; p->n_threads < n; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, prep_main, p))
            return eng_err_set(err, ENG_INTERNAL, "cannot start the gRPC prep threads");
    return 0;
}

void srv__grpc_calls_stop(srv_server *s) {
    srv_grpc_prep *p = s->grpc_prep;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    p->n_threads = 0;
}

void srv__grpc_calls_free(srv_server *s) {
    srv_grpc_prep *p = s->grpc_prep;
    if (!p) return;
    srv__grpc_calls_stop(s);
    srv__inbox_destroy(&p->back);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
    s->grpc_prep = NULL;
}

/* ---- ModelInfer: the edge's hooks ---- */

/* Loop thread: the job is answered. The answer is the codec's ModelInferResponse, or the error's status
 * and message. */
static void grpc_done(srv_server *s, srv_job *j) {
    (void)s;
    srv_grpc_call *c = j->edge_ctx;
    if (!c) { /* abandoned at the drain deadline: the call was answered and may be gone */
        srv__job_free(j);
        return;
    }
    c->traced_job = j; /* done: its spans may read it (srv__grpc_answer) */
    if (j->status == 200 && j->body) {
        srv__grpc_answer(c, PROTO_GRPC_OK, NULL, (uint8_t *)j->body, j->body_len);
        j->body = NULL;
    } else {
        srv__grpc_answer(c, srv__grpc_status_of_http(j->status), j->fail_msg, NULL, 0);
    }
    c->job = NULL;
    c->front.job = NULL;
    c->traced_job = NULL;
    srv__job_free(j);
    if (!c->conn) srv__grpc_call_release(c);
}

static void grpc_abandon(srv_server *s, srv_job *j) {
    (void)s;
    srv_grpc_call *c = j->edge_ctx;
    answer_error(c, ENG_UNAVAILABLE, "the server stopped at its drain deadline before this request ran; retry on another replica");
    srv__front_abandon(&c->front, j);
    c->job = NULL;
    if (!c->conn) srv__grpc_call_release(c);
}

static const srv_edge grpc_edge = {.done = grpc_done, .abandon = grpc_abandon};

/* Loop thread, the request's HEADERS: a ModelInfer takes its queue place before any of its DATA is
 * accepted (refused: RESOURCE_EXHAUSTED now, and grpc.c drops its body). Returns 0, or -1 when it
 * answered. */
static int begin(srv_grpc_call *c) {
    if (c->method != PROTO_GRPC_MODEL_INFER || c->front.codec) return 0;
    srv__front_init(&c->front, srv__grpc_server(c->g), &proto_grpc_infer_codec, &grpc_edge, c, c->id, c->t0);
    c->front.auth = c->auth; /* --keys: the key is checked here, at HEADERS, before any DATA */
    c->front.trace = &c->trace;
    if (!srv__front_admit(&c->front)) return 0;
    answer_error(c, c->front.code, c->front.msg);
    return -1;
}

/* libuv's pool: the call's tasks loaded (as HTTP's, below the engine's threads). */
static void load_work(uv_work_t *w) {
    srv_grpc_call *c = w->data;
    srv__pool_thread_nice();
    c->step = srv__front_load(&c->front) ? SRV_FRONT_FAILED : SRV_FRONT_LOAD;
}

static void load_done(uv_work_t *w, int status) {
    srv_grpc_call *c = w->data;
    c->loading = false; /* the loaded tasks stay held by the call, so they stay resident for its job */
    if (!c->conn) return srv__grpc_call_release(c);
    if (c->answered) return; /* the deadline passed meanwhile; the stream's close releases the call */
    if (status == UV_ECANCELED) return answer_error(c, ENG_UNAVAILABLE, "the server is stopping");
    if (c->step == SRV_FRONT_FAILED) return answer_error(c, c->front.code, c->front.msg);
    prep_push(c); /* prepare again, now that its tasks are in memory */
}

/* Prep thread: decode once, then prepare (the front door's one acquisition, tokenization). */
static void infer_prep(srv_grpc_call *c) {
    srv_front *f = &c->front;
    if (!f->decoded) {
        size_t n = c->len - PROTO_GRPC_PREFIX;
        proto_wire w = {.body = (const char *)c->msg + PROTO_GRPC_PREFIX, .len = n, .header_len = n};
        if (srv__front_decode(f, &w)) {
            c->step = SRV_FRONT_FAILED;
            return;
        }
    }
    c->step = srv__front_prepare(f);
}

/* Loop thread: what the prep thread made of the call. */
static void infer_continue(srv_grpc_call *c) {
    srv_server *s = srv__grpc_server(c->g);
    switch (c->step) {
    case SRV_FRONT_FAILED: return answer_error(c, c->front.code, c->front.msg);
    case SRV_FRONT_LOAD:
        c->loading = true;
        c->work.data = c;
        if (uv_queue_work(&s->loop, &c->work, load_work, load_done)) {
            c->loading = false;
            answer_error(c, ENG_INTERNAL, "cannot queue the task's load");
        }
        return;
    case SRV_FRONT_READY:
        c->job = c->front.job;
        srv__front_submit(&c->front);
        return;
    }
}

/* ---- the other calls (prep threads) ---- */

/* The admin token in the call's "authorization: Bearer <token>" metadata, compared in constant time. */
static bool admin_token_ok(const srv_grpc_call *c, const char *want) {
    return !strncasecmp(c->auth, "Bearer ", 7) && srv__token_equal(c->auth + 7, want);
}

/* --keys: the call's caller. Returns 0 with *ks held (the caller releases it) and *who its tenant
 * (NULL: the operator's --admin-token, every right), or -1 with UNAUTHENTICATED pending. Without
 * --keys: 0, *ks and *who NULL. */
static int call_tenant(srv_grpc_call *c, srv_keyset **ks, const srv_tenant **who) {
    srv_server *s = srv__grpc_server(c->g);
    *ks = NULL, *who = NULL;
    if (!s->keys) return 0;
    if (s->cfg.admin_token[0] && admin_token_ok(c, s->cfg.admin_token)) return 0;
    const char *key = !strncasecmp(c->auth, "Bearer ", 7) ? c->auth + 7 : NULL;
    *ks = srv__keys_acquire(s->keys);
    if (key && (*who = srv__keyset_find(*ks, key, strlen(key)))) return 0;
    srv__keyset_release(*ks);
    *ks = NULL;
    srv__keys_count_unauthenticated(s->keys);
    pend_error(c, ENG_UNAUTHENTICATED, "this server needs \"authorization: Bearer <key>\" metadata");
    return -1;
}

static bool in_scope(const srv_tenant *who, const char *name, size_t len) {
    return !who || srv__keys_match(who->predict, who->n_predict, name, len);
}

/* RepositoryIndex: an admin call, as REST's POST /v2/repository/index: needs --admin-token and the
 * token as "authorization: Bearer <token>" metadata; every task, its current version and whether it
 * is in memory (with "ready": only those that are). */
static void repository_index(srv_grpc_call *c) {
    srv_server *s = srv__grpc_server(c->g);
    eng_err e = {0};
    bool ready_only = false;
    srv_keyset *ks = NULL;
    const srv_tenant *who = NULL;
    if (s->keys) { /* --keys: a tenant with some admin right sees the tasks it may predict with or administer */
        if (call_tenant(c, &ks, &who)) return;
        if (who && !who->n_admin) {
            srv__keys_count_refusal(s->keys, who->cls.slot, SRV_REFUSE_FORBIDDEN);
            srv__keyset_release(ks);
            return pend_error(c, ENG_FORBIDDEN, "this key may not administer tasks");
        }
    } else {
        if (!s->cfg.admin_token[0]) return pend(c, PROTO_GRPC_UNIMPLEMENTED, "the admin API is off (start with --admin-token)", NULL, 0);
        if (!admin_token_ok(c, s->cfg.admin_token))
            return pend_error(c, ENG_UNAUTHENTICATED, "admin calls need \"authorization: Bearer <admin token>\" metadata");
    }
    if (proto_grpc_index_request(c->msg + PROTO_GRPC_PREFIX, c->len - PROTO_GRPC_PREFIX, &ready_only, &e)) {
        srv__keyset_release(ks);
        return pend_error(c, ENG_INVALID_ARGUMENT, e.msg);
    }
    store_task **all = NULL;
    int n = store_tasks_acquire(s->reg, &all), k = 0;
    proto_grpc_index_entry *v = n >= 0 ? calloc((size_t)n + 1, sizeof *v) : NULL;
    for (int i = 0; v && i < n; i++) {
        bool res = store_task_resident(all[i]);
        if (ready_only && !res) continue;
        const char *nm = store_task_name(all[i]);
        if (who && !in_scope(who, nm, strlen(nm)) && !srv__keys_match(who->admin, who->n_admin, nm, strlen(nm))) continue;
        v[k++] = (proto_grpc_index_entry){store_task_name(all[i]), store_task_version(all[i]), res ? "READY" : "UNAVAILABLE",
                                          res ? "" : "not loaded (loads on first request or /load)"};
    }
    uint8_t *out = NULL;
    size_t len = 0;
    int rc = v ? proto_grpc_index_response(v, k, &out, &len) : ENG_NO_MEMORY;
    free(v);
    if (n > 0) store_tasks_release(all, n);
    srv__keyset_release(ks);
    pend_message(c, rc, out, len);
}

/* The statistics of every task, as GET /v2/models/{m}/stats gives each, in one {"model_stats": [...]};
 * NULL with the error pending. */
static char *all_stats(srv_grpc_call *c, const srv_tenant *who, size_t *len) {
    srv_server *s = srv__grpc_server(c->g);
    store_task **all = NULL;
    int n = store_tasks_acquire(s->reg, &all);
    json_t *ms = json_array();
    bool bad = n < 0 || !ms;
    for (int i = 0; !bad && i < n; i++) {
        char *j = NULL, msg[MSG_MAX];
        size_t l = 0;
        const char *name = store_task_name(all[i]);
        if (!in_scope(who, name, strlen(name))) continue; /* --keys: only the key's tasks */
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
    if (!out) pend_error(c, ENG_NO_MEMORY, "out of memory");
    else *len = strlen(out);
    return out;
}

/* The JSON of a v2 task view for a ModelReady / ModelMetadata / ModelStatistics request; NULL with the
 * error pending. */
static char *task_json(srv_grpc_call *c, const srv_tenant *who, srv_task_view view, size_t *len) {
    srv_server *s = srv__grpc_server(c->g);
    char name[PROTO_GRPC_SPEC_MAX], ver[PROTO_GRPC_SPEC_MAX], path[2 * PROTO_GRPC_SPEC_MAX + 16], msg[MSG_MAX];
    eng_err e = {0};
    int rc = proto_grpc_model_request(c->msg + PROTO_GRPC_PREFIX, c->len - PROTO_GRPC_PREFIX, view == TASK_VIEW_V2_STATS, name, ver,
                                      sizeof name, &e);
    if (rc) {
        pend_error(c, rc == ENG_MALFORMED ? ENG_INVALID_ARGUMENT : (eng_status)rc, e.msg);
        return NULL;
    }
    char *j = NULL;
    if (!name[0]) return all_stats(c, who, len); /* ModelStatistics with no name: every model */
    if (!in_scope(who, name, strlen(name))) { /* out of the key's scope: as a task that does not exist */
        if (ver[0]) snprintf(msg, sizeof msg, "unknown task or version \"%.100s@%.30s\"", name, ver); /* as views.c's */
        else srv__unknown_task_plain(name, strlen(name), msg, sizeof msg);
        pend_error(c, ENG_NOT_FOUND, msg);
        return NULL;
    }
    /* as the REST path /v2/models/{name}[/versions/{v}] */
    snprintf(path, sizeof path, "%s%s%s", name, ver[0] ? "/versions/" : "", ver);
    if ((rc = srv__task_view(s, path, strlen(name), view, &j, len, msg, sizeof msg))) {
        pend_error(c, (eng_status)rc, msg);
        return NULL;
    }
    return j;
}

static void model_call(srv_grpc_call *c) {
    bool ready = c->method == PROTO_GRPC_MODEL_READY, stats = c->method == PROTO_GRPC_MODEL_STATISTICS;
    size_t len = 0;
    uint8_t *out = NULL;
    srv_keyset *ks;
    const srv_tenant *who;
    if (call_tenant(c, &ks, &who)) return;
    char *j = task_json(c, who, ready ? TASK_VIEW_V2_READY : stats ? TASK_VIEW_V2_STATS : TASK_VIEW_V2, &len);
    srv__keyset_release(ks);
    if (!j) return;
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
    pend_message(c, rc, out, len);
}

/* Prep thread. */
static void prep_run(srv_grpc_call *c) {
    switch (c->method) {
    case PROTO_GRPC_MODEL_INFER: return infer_prep(c);
    case PROTO_GRPC_REPOSITORY_INDEX: return repository_index(c);
    default: return model_call(c);
    }
}

/* Loop thread: prepared calls come back. */
static void on_prepared(srv_inbox *in, srv_inbox_node *first) {
    (void)in;
    for (srv_inbox_node *n = first, *nx; n; n = nx) {
        nx = n->next;
        srv_grpc_call *c = SRV_CONTAINER_OF(n, srv_grpc_call, inbox);
        c->loading = false;
        if (!c->conn) { /* the client left meanwhile */
            srv__grpc_call_release(c);
            continue;
        }
        if (c->answered) continue; /* its deadline passed; the stream's close releases the call */
        if (c->method == PROTO_GRPC_MODEL_INFER) {
            if (c->front.decoded) srv__grpc_call_drop_msg(c); /* its bytes back in the connection's budget */
            infer_continue(c);
        } else {
            uint8_t *out = c->pend_out; /* the answer takes it; the call may be released inside */
            c->pend_out = NULL;
            srv__grpc_answer(c, c->pend_status, c->pend_msg, out, c->pend_len);
        }
    }
}

/* ---- dispatch (loop thread) ---- */

static void on_deadline(srv_grpc_call *c) {
    /* a job under way still runs (its batch may hold others); its answer is dropped */
    srv__grpc_answer(c, PROTO_GRPC_DEADLINE_EXCEEDED, "the deadline (grpc-timeout) passed", NULL, 0);
}

static void dispatch(srv_grpc_call *c) {
    srv_server *s = srv__grpc_server(c->g);
    const uint8_t *m = c->msg + PROTO_GRPC_PREFIX;
    size_t n = c->len - PROTO_GRPC_PREFIX, len = 0;
    eng_err e = {0};
    uint8_t *out = NULL;
    switch (c->method) {
    case PROTO_GRPC_SERVER_LIVE:
    case PROTO_GRPC_SERVER_READY:
    case PROTO_GRPC_SERVER_METADATA: {
        if (proto_grpc_empty_request(c->method, m, n, &e)) return answer_error(c, ENG_INVALID_ARGUMENT, e.msg);
        int rc;
        if (c->method != PROTO_GRPC_SERVER_METADATA) { /* ready: false while starting or draining, as GET /v2/health/ready's 503 */
            bool v = c->method == PROTO_GRPC_SERVER_LIVE || (atomic_load(&s->ready) && !atomic_load(&s->draining));
            rc = proto_grpc_bool_response(c->method, v, &out, &len);
        } else {
            /* GET /v2's answer, with the extensions this protocol serves (binary tensor data is REST's alone) */
            static const char *const ext[] = {"model_repository", "statistics"};
            char *j = proto_v2_server_encode("adapterd", ADAPTERD_VERSION_STRING, ext, 2, &len);
            rc = j ? proto_grpc_server_metadata_response(j, len, &out, &len) : ENG_NO_MEMORY;
            free(j);
        }
        if (rc) return answer_error(c, rc == ENG_NO_MEMORY ? ENG_NO_MEMORY : ENG_INTERNAL, "cannot encode the answer");
        return srv__grpc_answer(c, PROTO_GRPC_OK, NULL, out, len);
    }
    case PROTO_GRPC_MODEL_INFER:
        if (begin(c)) return; /* not admitted at its headers (a transport without the begin hook): now */
        return prep_push(c);
    case PROTO_GRPC_MODEL_READY:
    case PROTO_GRPC_MODEL_METADATA:
    case PROTO_GRPC_MODEL_STATISTICS:
    case PROTO_GRPC_REPOSITORY_INDEX: return prep_push(c);
    default: return srv__grpc_answer(c, PROTO_GRPC_UNIMPLEMENTED, "unknown method", NULL, 0);
    }
}

int srv__grpc_serve(srv_server *s, srv_grpc **out, eng_err *err) {
    int rc = prep_start(s, err);
    if (rc) return rc;
    return srv__grpc_start(s, (srv_grpc_hooks){.begin = begin, .dispatch = dispatch, .deadline = on_deadline}, out, err);
}
