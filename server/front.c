/* front.c - the front door: every inference request, whatever protocol carried it (adapterd's v1,
 * TEI, OpenAI, KServe v2 REST JSON or binary, KServe v2 gRPC), takes this one path to the engine:
 *
 *     admit      a --max-queue place (and readiness), before any byte of work is spent on it
 *     decode     the protocol's codec (proto_codec) fills the one typed request, proto_predict_req
 *     prepare    the request's tasks (or, for an embedding, its model) acquired ONCE, as one snapshot
 *                held until the answer; loads asked for when some are not resident; then the job:
 *                skips (predict.c), or pooling and prompts (embed.c), and tokenization
 *     load       on libuv's pool: the held tasks made resident (the only wait), then prepare again
 *     submit     the job to the scheduler, which takes over the admission place
 *
 * and is answered by the codec's encoder on the worker (respond.c) and sent by its edge. An edge is
 * where a protocol's bytes arrive and leave: HTTP (infer.c, on libmicrohttpd's threads, which suspend
 * the connection while the pool loads or the engine runs) and gRPC (grpc_calls.c: its connections live
 * on the loop, so it decodes and prepares on its own prep threads, loads on libuv's pool, and submits
 * from the loop). The edges differ
 * only in where they wait; what a request is allowed, what it holds and how it reaches the engine is
 * decided here once (as Triton's one inference request behind its HTTP and gRPC front ends, or Redis's
 * processCommand()).
 *
 * Holding the acquired references is what makes one acquisition enough: a reference keeps a version
 * and, once loaded, its weights (store.h), so the versions loaded are the versions run, and a request
 * in flight keeps the version it started with whatever activation happens meanwhile. */
#define _GNU_SOURCE
#include "front.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "embed.h"
#include "http.h"
#include "keys.h"
#include "models.h"
#include "predict.h"

/* Rounds of loads before a request gives up (503): a round more means a task's current version
 * failed to load and the store made another version current in its place. */
#define LOAD_ROUNDS_MAX 3
/* Bytes of a task name (with "@version") quoted in an error. */
#define SPEC_MAX 320
/* Longest task name quoted back in an error. */
#define QUOTED_NAME_MAX 100

void srv__front_init(srv_front *f, srv_server *s, const proto_codec *codec, const srv_edge *edge, void *ctx, const char *id,
                     double t0) {
    *f = (srv_front){.s = s, .sched = s->sched, .codec = codec, .edge = edge, .edge_ctx = ctx, .id = id, .t0 = t0,
                      .tenant = SRV_TENANT_CLASS_DEFAULT};
}

static int refuse(srv_front *f, eng_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(srv_front *f, eng_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
    f->code = code;
    return -1;
}

/* --keys: the caller's tenant from its bearer key, its quotas and its class. The operator's
 * --admin-token passes as slot 0 with no quota. */
static int admit_key(srv_front *f) {
    srv_server *s = f->s;
    const char *h = f->auth;
    const char *key = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : NULL;
    if (!f->keys) f->keys = srv__keys_acquire(s->keys);
    if (key && s->cfg.admin_token[0] && srv__token_equal(key, s->cfg.admin_token)) return 0;
    f->who = key ? srv__keyset_find(f->keys, key, strlen(key)) : NULL;
    if (!f->who) {
        srv__keys_count_unauthenticated(s->keys);
        return refuse(f, ENG_UNAUTHENTICATED, "%s", key ? "unknown key" : "this server needs \"Authorization: Bearer <key>\"");
    }
    const struct srv_tenant *t = f->who;
    f->tenant = t->cls;
    int wait = srv__keys_take_request(s->keys, t);
    if (wait) {
        srv__keys_count_refusal(s->keys, t->cls.slot, SRV_REFUSE_RATE_REQUESTS);
        f->retry_after = wait;
        return refuse(f, ENG_BUSY, "tenant \"%s\" is over its %g requests per second; retry after %d s", t->name,
                      t->requests_per_s, wait);
    }
    if ((wait = srv__keys_tokens_owed(s->keys, t))) {
        srv__keys_count_refusal(s->keys, t->cls.slot, SRV_REFUSE_RATE_TOKENS);
        f->retry_after = wait;
        return refuse(f, ENG_BUSY, "tenant \"%s\" is over its %g tokens per second; retry after %d s", t->name,
                      t->tokens_per_s, wait);
    }
    return 0;
}

bool srv__front_in_scope(const srv_front *f, const char *spec, size_t len) {
    if (!f->who) return true; /* no --keys, the operator, or a route that never set f->s */
    return srv__keys_match(f->who->predict, f->who->n_predict, spec, len);
}

int srv__front_admit(srv_front *f) {
    srv_server *s = f->s;
    if (f->admitted) return 0; /* run again after a load: it kept its place */
    if (s->keys && !f->keys && admit_key(f)) return -1;
    bool draining = atomic_load(&s->draining);
    if (draining || !atomic_load(&s->ready))
        return refuse(f, ENG_UNAVAILABLE, "the server is %s; retry on another replica", draining ? "draining" : "starting");
    if (srv__sched_admit(s->sched, f->tenant.priority)) {
        if (f->who) srv__keys_count_refusal(s->keys, f->tenant.slot, SRV_REFUSE_QUEUE_FULL);
        return refuse(f, ENG_BUSY, "the queue is full (--max-queue %d); retry after a second", s->cfg.max_queue);
    }
    if (f->who) srv__keys_count_request(s->keys, f->tenant.slot);
    f->admitted = true;
    srv__trace_mark(f->trace, SRV_TRACE_ADMITTED);
    return 0;
}

int srv__front_decode(srv_front *f, const proto_wire *w) {
    proto_limits lim = srv__proto_limits(f->s);
    eng_err e = {0};
    srv__trace_mark(f->trace, SRV_TRACE_DECODE0);
    int rc = f->codec->decode(w, &lim, &f->req, &e);
    srv__trace_mark(f->trace, SRV_TRACE_DECODED);
    if (rc) return refuse(f, (eng_status)rc, "%s", e.msg);
    f->decoded = true;
    srv__metrics_protocol(f->s->metrics, f->codec->name);
    return 0;
}

/* ---- the one acquisition ---- */

store_task *srv__task_acquire_spec(store_registry *reg, const char *spec, size_t len) {
    const char *at = memchr(spec, '@', len);
    if (!at) return store_task_acquire(reg, spec, len);
    char name[SPEC_MAX], ver[SPEC_MAX];
    size_t nl = (size_t)(at - spec), vl = len - nl - 1;
    if (nl == 0 || vl == 0 || nl >= sizeof name || vl >= sizeof ver) return NULL;
    memcpy(name, spec, nl), name[nl] = '\0';
    memcpy(ver, at + 1, vl), ver[vl] = '\0';
    return store_task_acquire_version(reg, name, ver);
}

eng_status srv__unknown_task_plain(const char *name, size_t nlen, char *msg, size_t msz) {
    int q = (int)(nlen > QUOTED_NAME_MAX ? QUOTED_NAME_MAX : nlen);
    if (memchr(name, '@', nlen))
        snprintf(msg, msz, "unknown task or version \"%.*s\" (GET /v1/tasks lists them and their versions)", q, name);
    else
        snprintf(msg, msz, "unknown task \"%.*s\" (GET /v1/tasks lists them)", q, name);
    return ENG_NOT_FOUND;
}

eng_status srv__unknown_task(srv_server *s, const char *name, size_t nlen, char *msg, size_t msz) {
    int q = (int)(nlen > QUOTED_NAME_MAX ? QUOTED_NAME_MAX : nlen);
    if (memchr(name, '@', nlen)) return srv__unknown_task_plain(name, nlen, msg, msz);
    char nm[SRV_NAME_MAX];
    store_version_info v[8];
    int n = nlen < sizeof nm ? (memcpy(nm, name, nlen), nm[nlen] = '\0', store_versions(s->reg, nm, v, 8)) : -1;
    if (n <= 0 || strcmp(v[n - 1].state, "failed"))
        srv__unknown_task_plain(name, nlen, msg, msz);
    else
        snprintf(msg, msz, "task \"%.*s\" is not served: no version of it loads (version %s: %s)", q, name, v[n - 1].version,
                 v[n - 1].reason);
    return ENG_NOT_FOUND;
}

/* The request's tasks: the ones it names (each "name" or "name@version"), or every task of one
 * snapshot; for TEI's one-task routes, the registry's only task when none is named. */
static int acquire_tasks(srv_front *f) {
    srv_server *s = f->s;
    const proto_predict_req *p = &f->req;
    if (!p->n_tasks) {
        int n = store_tasks_acquire(s->reg, &f->tasks);
        if (n < 0) return refuse(f, ENG_NO_MEMORY, "out of memory");
        if (f->who) { /* every task of the key's scope: the others released, as if they did not exist */
            int m = 0;
            for (int k = 0; k < n; k++) {
                const char *nm = store_task_name(f->tasks[k]);
                if (srv__front_in_scope(f, nm, strlen(nm))) f->tasks[m++] = f->tasks[k];
                else store_task_release(f->tasks[k]);
            }
            n = m;
        }
        f->n_tasks = n;
        if (p->one_task && n != 1)
            return refuse(f, ENG_INVALID_ARGUMENT, "the registry serves %d tasks; name one with ?task=NAME (GET /v1/tasks)", n);
        return 0;
    }
    /* twice the references: store_tasks_release (srv__front_clear) uses the second half as scratch, as
     * it does on store_tasks_acquire's arrays */
    if (!(f->tasks = calloc((size_t)p->n_tasks * 2, sizeof *f->tasks))) return refuse(f, ENG_NO_MEMORY, "out of memory");
    for (int k = 0; k < p->n_tasks; k++) {
        size_t len = strlen(p->tasks[k]);
        if (!srv__front_in_scope(f, p->tasks[k], len)) {
            /* out of the key's scope: answered as a task that does not exist, byte for byte */
            srv__keys_count_refusal(s->keys, f->tenant.slot, SRV_REFUSE_NOT_FOUND_SCOPE);
            f->code = srv__unknown_task_plain(p->tasks[k], len, f->msg, sizeof f->msg);
            return -1;
        }
        store_task *t = srv__task_acquire_spec(s->reg, p->tasks[k], len);
        if (!t) {
            f->code = srv__unknown_task(s, p->tasks[k], len, f->msg, sizeof f->msg);
            return -1;
        }
        f->tasks[f->n_tasks++] = t;
    }
    return 0;
}

/* The rollouts of the request's tasks, in the same acquisition: a task the request names without a
 * version and that has a rollout gets its candidate held beside the current version (rollout.c: the
 * canary's choice waits for the token ids, a shadow runs both). A version named wins: no rollout. */
static int acquire_rollouts(srv_front *f) {
    for (int k = 0; k < f->n_tasks; k++) {
        const char *name = store_task_name(f->tasks[k]);
        bool named = false;
        for (int i = 0; i < f->req.n_tasks && !named; i++) {
            size_t n = strlen(name);
            named = !strncmp(f->req.tasks[i], name, n) && f->req.tasks[i][n] == '@';
        }
        store_rollout ro;
        store_task *c = named ? NULL : store_rollout_acquire(f->s->reg, name, &ro);
        if (c && (c == f->tasks[k] || ro.percent <= 0)) { /* promoted meanwhile, or at 0%: nothing to route */
            store_task_release(c);
            c = NULL;
        }
        if (!c) continue;
        if (!f->ro && !(f->ro = calloc((size_t)f->n_tasks, sizeof *f->ro))) {
            store_task_release(c);
            return refuse(f, ENG_NO_MEMORY, "out of memory");
        }
        f->ro[k] = (srv_job_rollout){.ro = ro, .alt = c};
    }
    return 0;
}

static int acquire(srv_front *f) {
    f->acquired = true;
    if (f->codec->embed) {
        f->model = srv__model_resolve(f->s, f->req.model, SRV_MODEL_ONLY, &f->model_id, &f->code, f->msg, sizeof f->msg);
        return f->model ? 0 : -1;
    }
    return acquire_tasks(f) || acquire_rollouts(f) ? -1 : 0;
}

/* 1 when every candidate held is resident (they load with the tasks). */
static int rollouts_resident(const srv_front *f) {
    for (int k = 0; f->ro && k < f->n_tasks; k++)
        if (f->ro[k].alt && !store_task_resident(f->ro[k].alt)) return 0;
    return 1;
}

/* ---- prepare and load ---- */

srv_front_step srv__front_prepare(srv_front *f) {
    srv__trace_mark(f->trace, SRV_TRACE_PREP0);
    if (!f->acquired && acquire(f)) return SRV_FRONT_FAILED;
    if (f->code) return SRV_FRONT_FAILED; /* the acquisition failed on an earlier call */
    for (int k = 0; k < f->n_tasks; k++)
        if (!store_task_resident(f->tasks[k])) return SRV_FRONT_LOAD;
    if (!rollouts_resident(f)) return SRV_FRONT_LOAD;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return refuse(f, ENG_NO_MEMORY, "out of memory"), SRV_FRONT_FAILED;
    srv__job_free(f->job);
    f->job = j;
    snprintf(j->id, sizeof j->id, "%s", f->id);
    j->request_id = j->id;
    j->t_request = f->t0;
    j->tenant = f->tenant;
    j->edge = f->edge, j->edge_ctx = f->edge_ctx;
    j->codec = f->codec;
    j->embed = f->codec->embed;
    j->texts = f->req.inputs;
    j->n_inputs = f->req.n_inputs;
    j->latency_ms = j->predicted_ms = -1;
    j->load_ms = f->load_s * 1e3;
    /* the held references go to the job, which runs exactly the versions acquired */
    j->tasks = f->tasks, j->n_tasks = f->n_tasks;
    j->ro = f->ro, j->rollouts = f->ro ? f->s->rollouts : NULL;
    f->tasks = NULL, f->n_tasks = 0, f->ro = NULL;
    j->model_ref = f->codec->embed ? f->model : NULL;
    j->model_id = f->model_id;
    if (f->codec->embed) f->model = NULL;
    int rc = j->embed ? srv__embed_job(f, j) : srv__predict_job(f, j);
    if (rc) return SRV_FRONT_FAILED;
    if (f->who) { /* the real count, right after tokenizing: the bucket may go into debt */
        srv__keys_charge_tokens(f->s->keys, f->who, j->tokens);
        srv__keys_count_tokens(f->s->keys, f->tenant.slot, j->tokens);
    }
    /* what the worker reads of the request, fixed before the job is submitted: its copy of the struct (a
     * prompt or a left cut may have replaced inputs meanwhile), sharing the front's buffers */
    j->req = f->req;
    j->preq = &j->req;
    if (f->trace && f->trace->sampled) { /* what the worker's batch span links to */
        j->trace.sampled = true;
        memcpy(j->trace.trace_id, f->trace->trace_id, sizeof j->trace.trace_id);
        memcpy(j->trace.span_id, f->trace->span_id, sizeof j->trace.span_id);
    }
    srv__trace_mark(f->trace, SRV_TRACE_PREPARED);
    return SRV_FRONT_READY;
}

/* After t failed to load: the store made another version current in its place (it does so when the
 * current version turns out broken on first use), unless the request named t's version. */
static store_task *replacement(srv_front *f, const store_task *t) {
    const char *name = store_task_name(t);
    size_t n = strlen(name);
    for (int i = 0; i < f->req.n_tasks; i++)
        if (!strncmp(f->req.tasks[i], name, n) && f->req.tasks[i][n] == '@') return NULL;
    store_task *now = store_task_acquire(f->s->reg, name, n);
    if (now == t) {
        store_task_release(now);
        return NULL;
    }
    return now;
}

int srv__front_load(srv_front *f) {
    if (++f->rounds > LOAD_ROUNDS_MAX) return refuse(f, ENG_UNAVAILABLE, "tasks were replaced while loading; retry");
    double t0 = srv__now();
    srv__trace_mark_first(f->trace, SRV_TRACE_LOAD0);
    int missing = 0;
    for (int k = 0; k < f->n_tasks; k++) missing += !store_task_resident(f->tasks[k]);
    eng_err e = {0};
    int bad = -1, rc = store_tasks_ensure(f->s->reg, f->tasks, f->n_tasks, &bad, &e);
    /* the candidates of the tasks' rollouts: one that does not load leaves the request on the
     * current version (the store lists it as failed, which ends its rollout) */
    for (int k = 0; !rc && f->ro && k < f->n_tasks; k++) {
        store_task *c = f->ro[k].alt;
        eng_err ce = {0};
        if (!c || store_task_resident(c)) continue;
        missing++;
        if (store_task_ensure(f->s->reg, c, &ce)) {
            store_task_release(c);
            f->ro[k] = (srv_job_rollout){0};
        }
    }
    srv__trace_mark(f->trace, SRV_TRACE_LOADED);
    if (!rc && missing) { /* a failed load is not timed */
        srv__metrics_lazy_load(f->s->metrics, srv__now() - t0);
        f->load_s += srv__now() - t0;
    }
    if (!rc) return 0;
    store_task *now = rc != ENG_NO_MEMORY && rc != ENG_LIMIT && bad >= 0 ? replacement(f, f->tasks[bad]) : NULL;
    if (!now) return refuse(f, (eng_status)rc, "%s", e.msg);
    /* the version standing in for the broken one: the request goes round on it */
    store_task_release(f->tasks[bad]);
    f->tasks[bad] = now;
    return 0;
}

/* ---- submit, abandon, clear ---- */

void srv__front_submit(srv_front *f) {
    srv_job *j = f->job;
    f->admitted = false; /* the job holds the place from here on */
    srv__sched_submit(f->s->sched, j);
}

void srv__front_abandon(srv_front *f, srv_job *j) {
    /* the worker reads j->req, the job's copy: only ownership moves, nothing it reads changes */
    memset(&f->req, 0, sizeof f->req);
    j->owns_req = true;
    j->edge_ctx = NULL;
    f->job = NULL;
}

void srv__front_clear(srv_front *f) {
    srv__front_release(f);
    for (int k = 0; f->ro && k < f->n_tasks; k++) store_task_release(f->ro[k].alt);
    free(f->ro);
    f->ro = NULL;
    if (f->tasks) store_tasks_release(f->tasks, f->n_tasks);
    f->tasks = NULL, f->n_tasks = 0;
    store_model_release(f->model);
    f->model = NULL;
    srv__job_free(f->job);
    f->job = NULL;
    proto_predict_free(&f->req);
    srv__keyset_release(f->keys);
    f->keys = NULL, f->who = NULL;
}
