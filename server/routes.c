/* routes.c - libmicrohttpd's two callbacks and the quick routes.
 *
 * A request's life: MHD's thread calls srv__on_request for the headers (route, method, request id),
 * for each body chunk (bounded by max_body_bytes, or max_upload_bytes on admin routes), and once
 * more at the end. Quick routes (tasks, health, metrics, OpenAPI) answer there, the models' in
 * models.c; the inference routes of every protocol go to the front door's HTTP edge (infer.c),
 * /v1/tokenize and TEI's /decode and /info to embed.c, the admin routes to admin.c, the API
 * reference page to docs.c. A suspended request comes back
 * here when the loop resumes it: with its job's body, or with offloaded work's answer, or to run
 * again once its tasks are loaded. srv__on_completed logs, counts and frees. */
#define _GNU_SOURCE
#include "routes.h"
#include "tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "admin.h"
#include "docs.h"
#include "embed.h"
#include "clock.h"
#include "conn.h"
#include "http.h"
#include "keys.h"
#include "infer.h"
#include "models.h"
#include "rollout.h"
#include "offload.h"
#include "respond.h"
#include "url.h"
#include "views.h"

/* ---- quick routes ---- */

/* GET /v1/tasks: one page of the served tasks (?limit, ?after: proto_tasks_page), in the store's
 * name order; the unserved tasks on the first page. */
static enum MHD_Result route_tasks(srv_request *r) {
    proto_tasks_page pg;
    eng_err perr = {0};
    if (proto_tasks_page_parse(MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit"),
                               MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "after"), &pg, &perr))
        return srv__send_error(r, perr.code, "%s", perr.msg);
    store_task **ts = NULL;
    int n = store_tasks_acquire(r->srv->reg, &ts), more = 0;
    proto_task_info *ti = n >= 0 ? calloc((size_t)pg.limit + 1, sizeof *ti) : NULL;
    if (!ti) {
        if (n >= 0) store_tasks_release(ts, n);
        return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    }
    srv_task_versions *tv = calloc((size_t)pg.limit + 1, sizeof *tv);
    int k = 0, oom = !tv;
    for (int i = 0; !oom && i < n; i++) {
        if (!proto_tasks_page_after(&pg, store_task_name(ts[i]))) continue;
        if (!srv__front_in_scope(&r->front, store_task_name(ts[i]), strlen(store_task_name(ts[i])))) continue;
        if ((more = k == pg.limit)) break;
        srv__task_info_fill(ts[i], &ti[k]);
        srv__task_rollout_fill(r->srv, store_task_name(ts[i]), &ti[k]);
        oom |= srv__task_versions_fill(r->srv->reg, store_task_name(ts[i]), &tv[k], &ti[k]);
        k++;
    }
    /* tasks with no version that loads: their failed versions and why */
    char **un = NULL;
    int nu = oom || pg.after ? 0 : store_unserved_task_names(r->srv->reg, &un);
    proto_unserved_task *ut = nu > 0 ? calloc((size_t)nu, sizeof *ut) : NULL;
    srv_task_versions *uv = nu > 0 ? calloc((size_t)nu, sizeof *uv) : NULL;
    oom |= nu < 0 || (nu > 0 && (!ut || !uv));
    int mu = 0; /* those in the key's scope (all without --keys) */
    for (int i = 0; !oom && i < nu; i++) {
        if (!srv__front_in_scope(&r->front, un[i], strlen(un[i]))) continue;
        proto_task_info vi = {0};
        oom |= srv__task_versions_fill(r->srv->reg, un[i], &uv[mu], &vi);
        ut[mu++] = (proto_unserved_task){.name = un[i], .versions = vi.versions, .n_versions = vi.n_versions};
    }
    size_t len = 0;
    char *j = oom ? NULL : proto_tasks_encode(ti, k, ut, mu, more ? ti[k - 1].name : NULL, &len);
    for (int i = 0; i < k; i++) srv__task_versions_free(&tv[i]);
    store_tasks_release(ts, n);
    for (int i = 0; i < nu; i++) {
        free(un[i]);
        if (uv) srv__task_versions_free(&uv[i]);
    }
    free(un), free(ut), free(uv);
    free(ti), free(tv);
    return srv__send_json(r, 200, j, len);
}

static enum MHD_Result route_task(srv_request *r, const char *name, size_t nlen, srv_task_view view) {
    char *j = NULL, msg[SRV_NAME_MAX + 256];
    size_t len = 0;
    int rc = srv__front_in_scope(&r->front, name, nlen) /* out of the key's scope: as if it did not exist */
                 ? srv__task_view(r->srv, name, nlen, view, &j, &len, msg, sizeof msg)
                 : (int)srv__unknown_task_plain(name, nlen, msg, sizeof msg);
    if (rc) return srv__send_error(r, (eng_status)rc, "%s", msg);
    return srv__send_json(r, 200, j, len);
}

static bool is_health(srv_route rt) {
    return rt == SRV_ROUTE_HEALTHZ || rt == SRV_ROUTE_READYZ || rt == SRV_ROUTE_V2_LIVE || rt == SRV_ROUTE_V2_READY;
}

/* Bytes of a body read and dropped on a route that takes none (a GET with a body). */
#define UNUSED_BODY_MAX 65536

/* Bytes beyond its limit of a body with a Content-Length that are read and dropped before the 413
 * (an inference route): closing a connection with the client's bytes unread resets it, and Node's
 * fetch or Python's urllib, still sending, never read the answer (nginx's lingering close). Beyond
 * this, and for a chunked body, the answer comes at once. The body rate (conn.c) bounds the time. */
#define DRAIN_MAX (8u << 20)

/* The routes that are POSTed a JSON body; every other non-admin route is GET or HEAD. */
static bool is_post_route(srv_route route) {
    return route == SRV_ROUTE_PREDICT || route == SRV_ROUTE_V2_INFER || route == SRV_ROUTE_EMBED ||
           route == SRV_ROUTE_TOKENIZE || route == SRV_ROUTE_TEI_EMBED || route == SRV_ROUTE_TEI_EMBED_ALL ||
           route == SRV_ROUTE_TEI_TOKENIZE || route == SRV_ROUTE_OPENAI_EMBEDDINGS || route == SRV_ROUTE_TEI_PREDICT ||
           route == SRV_ROUTE_TEI_RERANK || route == SRV_ROUTE_TEI_DECODE;
}

static bool takes_body(const srv_request *r) { return r->method_ok && is_post_route(r->route); }

/* The most body bytes a non-admin request may send. */
static size_t body_limit(const srv_request *r) {
    return takes_body(r) ? r->srv->cfg.max_body_bytes : UNUSED_BODY_MAX;
}

/* A body passed its route's limit while streaming (a chunked body: with a Content-Length the 413
 * came on the headers). The rest is never read: the 413 is queued when libmicrohttpd accepts an
 * answer mid-body, and otherwise (0.9.x does not) the connection is closed at once. */
static enum MHD_Result over_limit(srv_request *r) {
    size_t limit = r->admin ? (r->upload_path ? r->srv->cfg.max_upload_bytes : (size_t)SRV_ADMIN_BODY_MAX) : body_limit(r);
    free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    srv__admin_end(r);
    return srv__send_error(r, ENG_TOO_LARGE, "the body passed this route's limit of %zu bytes", limit);
}

/* Matches url to a route; for /v1/tasks/{name}, /v1/models/{id} and /v2/models/{task}/... the name
 * goes to arg, arg_len. */
static srv_route match(const char *url, const char **arg, size_t *arg_len) {
    static const struct {
        const char *path;
        srv_route r;
    } fixed[] = {{"/v1/predict", SRV_ROUTE_PREDICT}, {"/v1/embed", SRV_ROUTE_EMBED}, {"/v1/tokenize", SRV_ROUTE_TOKENIZE},
                 {"/docs", SRV_ROUTE_DOCS}, {"/v1/tasks", SRV_ROUTE_TASKS}, {"/v1/models", SRV_ROUTE_MODELS},
                 {"/healthz", SRV_ROUTE_HEALTHZ}, {"/readyz", SRV_ROUTE_READYZ}, {"/metrics", SRV_ROUTE_METRICS},
                 {"/openapi.json", SRV_ROUTE_OPENAPI}, {"/v2/health/live", SRV_ROUTE_V2_LIVE},
                 {"/v2/health/ready", SRV_ROUTE_V2_READY}, {"/", SRV_ROUTE_TEI_EMBED}, {"/embed", SRV_ROUTE_TEI_EMBED},
                 {"/embed_all", SRV_ROUTE_TEI_EMBED_ALL}, {"/tokenize", SRV_ROUTE_TEI_TOKENIZE}, {"/info", SRV_ROUTE_TEI_INFO},
                 {"/health", SRV_ROUTE_TEI_HEALTH},
                 {"/predict", SRV_ROUTE_TEI_PREDICT}, {"/decode", SRV_ROUTE_TEI_DECODE}, {"/rerank", SRV_ROUTE_TEI_RERANK}, {"/v1/embeddings", SRV_ROUTE_OPENAI_EMBEDDINGS},
                 {"/embeddings", SRV_ROUTE_OPENAI_EMBEDDINGS}, {"/v2", SRV_ROUTE_V2_SERVER}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!strcmp(url, fixed[i].path)) return fixed[i].r;
    if (!strcmp(url, "/docs/redoc.standalone.js") || !strcmp(url, "/docs/redoc.standalone.js.LICENSE.txt"))
        return SRV_ROUTE_DOCS;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        /* the rest of the path, '/' included: served names such as "org/model" are common */
        *arg = url + 11, *arg_len = strlen(url + 11);
        return SRV_ROUTE_OPENAI_MODEL;
    }
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
        if (!strcmp(slash, "/stats")) return SRV_ROUTE_V2_STATS;
        if (!strcmp(slash, "/infer")) return SRV_ROUTE_V2_INFER;
        /* /versions/{v}[/ready|/infer]: the version goes with the name (v2_infer_spec) */
        const char *v = !strncmp(slash, "/versions/", 10) ? slash + 10 : NULL, *vs = v ? strchr(v, '/') : NULL;
        if (v && *v && !vs) return SRV_ROUTE_V2_MODEL;
        if (vs && vs > v && !strcmp(vs, "/infer")) return SRV_ROUTE_V2_INFER;
        if (vs && vs > v && !strcmp(vs, "/ready")) return SRV_ROUTE_V2_MODEL_READY;
    }
    return SRV_ROUTE_UNKNOWN;
}



/* The request's headers: its route, id and limits, decided before a byte of its body is read. */
static enum MHD_Result begin(srv_server *s, struct MHD_Connection *conn, const char *url, const char *method, void **con_cls) {
    const char *arg = NULL;
    size_t arg_len = 0;
    srv_request *r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    r->srv = s;
    r->conn = conn;
    r->t0 = srv__now();
    r->route = match(url, &arg, &arg_len);
    r->dialect = srv__route_dialect(r->route);
    /* under /v2 (the repository routes are claimed by admin.c later), refusals made before the
     * route is known come in KServe's shape too */
    if (!strncmp(url, "/v2/", 4)) r->dialect = PROTO_DIALECT_KSERVE;
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    for (char *c = r->path; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?'; /* the access log stays one line */
    srv__set_request_id(r);
    srv__trace_begin(s->tracer, &r->trace, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent"),
                     MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "tracestate"));
    atomic_fetch_add(&s->active, 1);
    *con_cls = r;
    srv__conns_phase(s->conns, conn, SRV_CONN_BODY);
    if (!srv__url_ok(url)) {
        r->route = SRV_ROUTE_UNKNOWN;
        return srv__send_error(r, ENG_MALFORMED, "the path holds an encoded NUL, control character or '/' inside a segment");
    }
    if (srv__conns_reserve(s->conns, conn) && !is_health(r->route))
        return srv__send_error(r, ENG_UNAVAILABLE, "the server is at its connection limit; connections beyond it serve "
                                                   "/healthz, /readyz and /v2/health/* only");
    if (srv__admin_claims(r, url, method)) {
        /* the admin switch, the token and the limits are decided on the headers alone: no
         * byte of the body is read for a request that is refused */
        r->method_ok = true;
        return srv__admin_begin(r, method);
    }
    r->method_ok = is_post_route(r->route) ? !strcmp(method, "POST") : (!strcmp(method, "GET") || !strcmp(method, "HEAD"));
    size_t limit = body_limit(r);
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    unsigned long long cl_n = cl ? strtoull(cl, NULL, 10) : 0;
    if (cl && cl_n > limit && takes_body(r) && cl_n - limit <= DRAIN_MAX) {
        r->too_large = true; /* its chunks are dropped; the 413 comes at the body's end */
        return MHD_YES;
    }
    if (cl && cl_n > limit)
        return srv__send_error(r, ENG_TOO_LARGE, "a body of %.40s bytes is over this route's limit of %zu", cl, limit);
    return MHD_YES;
}

/* The loop resumed the request: offloaded work is done (its answer, or tasks loaded: the front door
 * goes on), or its job is. */
static enum MHD_Result resumed(srv_request *r, const char *url) {
    r->suspended = false;
    if (r->off.state == SRV_OFFLOAD_DONE) {
        r->off.state = SRV_OFFLOAD_IDLE;
        if (r->off.status) {
            char *b = r->off.body;
            r->off.body = NULL;
            return srv__send_json(r, r->off.status, b, r->off.len);
        }
        const char *arg = NULL;
        size_t arg_len = 0;
        r->route = match(url, &arg, &arg_len);
        return srv__infer(r, arg, arg_len);
    }
    srv_job *j = r->front.job;
    if (r->abandoned || !j)
        return srv__send_error(r, ENG_UNAVAILABLE, "the server stopped at its drain deadline before this request finished; retry on another replica");
    char *b = j->body;
    j->body = NULL;
    if (!b) return srv__send_error(r, ENG_INTERNAL, "no response was produced");
    if (j->head_len) return srv__send_v2_binary(r, b, j->body_len, j->head_len);
    return srv__send_json(r, j->status, b, j->body_len);
}

/* A chunk of the body: kept (bounded by the route's limit), streamed to a file (uploads) or dropped. */
static enum MHD_Result body_chunk(srv_request *r, const char *data, size_t n) {
    srv__conns_body(r->srv->conns, r->conn, n);
    if (r->too_large || r->status) return MHD_YES;
    int rc;
    if (r->admin) rc = srv__admin_body(r, data, n);
    else if (takes_body(r)) rc = srv__append_body(r, data, n, r->srv->cfg.max_body_bytes);
    else rc = (r->dropped += n) > UNUSED_BODY_MAX ? (r->too_large = true, 0) : 0;
    if (rc) return MHD_NO;
    if (r->too_large) return over_limit(r);
    return MHD_YES;
}

/* Routes open without a key under --keys: probes, metrics, the documentation, the server's metadata. */
static bool open_route(srv_route rt) {
    return is_health(rt) || rt == SRV_ROUTE_TEI_HEALTH || rt == SRV_ROUTE_METRICS || rt == SRV_ROUTE_DOCS ||
           rt == SRV_ROUTE_OPENAPI || rt == SRV_ROUTE_V2_SERVER;
}

/* --keys: the caller of a listing or lookup route must hold a known key (or the operator's token);
 * its tenant, held in r->front, scopes what the route shows (srv__front_in_scope). Returns 0, or -1
 * with the 401 in *ans. */
static int listing_key(srv_request *r, enum MHD_Result *ans) {
    srv_server *s = r->srv;
    if (!s->keys || open_route(r->route)) return 0;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    const char *key = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : NULL;
    r->front.s = s;
    r->front.keys = srv__keys_acquire(s->keys);
    if (key && s->cfg.admin_token[0] && srv__token_equal(key, s->cfg.admin_token)) return 0; /* the operator sees everything */
    r->front.who = key ? srv__keyset_find(r->front.keys, key, strlen(key)) : NULL;
    if (r->front.who) return 0;
    srv__keys_count_unauthenticated(s->keys);
    *ans = srv__send_error(r, ENG_UNAUTHENTICATED, "%s", key ? "unknown key" : "this server needs \"Authorization: Bearer <key>\"");
    return -1;
}

/* The quick routes, answered here on the HTTP thread. */
static enum MHD_Result quick(srv_request *r, const char *url, const char *arg, size_t arg_len) {
    srv_server *s = r->srv;
    size_t len = 0;
    char *j = NULL;
    bool ready = atomic_load(&s->ready) && !atomic_load(&s->draining);
    enum MHD_Result ans;
    if (listing_key(r, &ans)) return ans;
    switch (r->route) {
    case SRV_ROUTE_TOKENIZE:
    case SRV_ROUTE_TEI_TOKENIZE: return srv__tokenize(r);
    case SRV_ROUTE_TEI_INFO: return srv__tei_info(r);
    case SRV_ROUTE_TEI_DECODE: return srv__tei_decode(r);
    case SRV_ROUTE_TEI_HEALTH:
        if (!ready) return srv__send_error(r, ENG_UNAVAILABLE, "not ready");
        return srv__send_body(r, 200, "text/plain", (char *)"", 0, MHD_RESPMEM_PERSISTENT);
    case SRV_ROUTE_DOCS: return srv__docs(r);
    case SRV_ROUTE_TASKS: return route_tasks(r);
    case SRV_ROUTE_TASK: return route_task(r, arg, arg_len, TASK_VIEW_V1);
    case SRV_ROUTE_V2_MODEL: return route_task(r, arg, arg_len, TASK_VIEW_V2);
    case SRV_ROUTE_V2_MODEL_READY: return route_task(r, arg, arg_len, TASK_VIEW_V2_READY);
    case SRV_ROUTE_V2_STATS: return route_task(r, arg, arg_len, TASK_VIEW_V2_STATS);
    case SRV_ROUTE_MODELS: return srv__models(r);
    case SRV_ROUTE_OPENAI_MODEL: return srv__model(r, arg, arg_len);
    case SRV_ROUTE_HEALTHZ: j = proto_status_encode("ok", ready, &len); return srv__send_json(r, 200, j, len);
    case SRV_ROUTE_READYZ: {
        const char *st = atomic_load(&s->draining) ? "draining" : ready ? "ok" : "starting";
        j = proto_status_encode(st, ready, &len);
        return srv__send_json(r, ready ? 200 : 503, j, len);
    }
    case SRV_ROUTE_V2_LIVE: j = proto_v2_bool_encode("live", 1, &len); return srv__send_json(r, 200, j, len);
    case SRV_ROUTE_V2_SERVER: {
        static const char *const ext[] = {"model_repository", "statistics", "binary_tensor_data"};
        j = proto_v2_server_encode("adapterd", ADAPTERD_VERSION_STRING, ext, (int)(sizeof ext / sizeof ext[0]), &len);
        return srv__send_json(r, 200, j, len);
    }
    case SRV_ROUTE_V2_READY:
        if (!ready) return srv__send_error(r, ENG_UNAVAILABLE, "not ready");
        j = proto_v2_bool_encode("ready", 1, &len);
        return srv__send_json(r, 200, j, len);
    case SRV_ROUTE_METRICS: {
        /* OpenMetrics when the scraper asks for it (Prometheus does, for exemplars): the same families, plus exemplars */
        const char *acc = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Accept");
        bool om = acc && strstr(acc, "application/openmetrics-text");
        srv_trace_counts tc;
        srv__trace_counts(s->tracer, &tc);
        srv_metrics_live live = {.queue_depth = srv__sched_depth(s->sched), .admitted = srv__sched_admitted(s->sched),
                                 .adaptive_level = srv__sched_adaptive_level(s->sched), .ready = ready, .openmetrics = om,
                                 .tracing = s->tracer != NULL, .trace_exported = tc.exported,
                                 .trace_dropped_queue = tc.dropped_queue, .trace_dropped_export = tc.dropped_export,
                                 .trace_export_errors = tc.export_errors, .trace_queued = tc.queued, .tls = s->tls != NULL};
        if (s->tls) srv__tls_stats(s->tls, &live.tls_reloads, &live.tls_reload_errors, &live.tls_not_after, live.tls_handshakes);
        char *m = srv__metrics_render(s->metrics, &live, &len);
        if (m && s->keys) m = srv__keys_render(s->keys, m, &len); /* the keys file and the tenants */
        if (m && srv__rollouts_metrics(s->rollouts, &m, &len)) free(m), m = NULL; /* the rollouts compared */
        if (m && om) m = srv__metrics_openmetrics(m, &len);
        if (!m) return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
        return srv__send_body(r, 200, om ? "application/openmetrics-text; version=1.0.0; charset=utf-8" : "text/plain; version=0.0.4",
                              m, len, MHD_RESPMEM_MUST_FREE);
    }
    case SRV_ROUTE_OPENAPI: {
        const char *doc = proto_openapi_json(&len);
        return srv__send_body(r, 200, "application/json", (char *)doc, len, MHD_RESPMEM_PERSISTENT);
    }
    default: return srv__send_error(r, ENG_NOT_FOUND, "no route %.200s", url);
    }
}

enum MHD_Result srv__on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
    (void)version;
    srv_request *r = *con_cls;
    if (!r) return begin(cls, conn, url, method, con_cls);
    if (r->suspended) return resumed(r, url);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return body_chunk(r, upload_data, n);
    }
    /* the body is complete */
    srv__conns_phase(r->srv->conns, conn, SRV_CONN_BUSY);
    if (r->status) return MHD_YES; /* already answered (413 by Content-Length) */
    if (r->too_large) return over_limit(r); /* a body over the limit, read to its end and dropped */
    if (r->admin) return srv__admin_dispatch(r, url, method);
    const char *arg = NULL;
    size_t arg_len = 0;
    r->route = match(url, &arg, &arg_len);
    if (r->route == SRV_ROUTE_UNKNOWN) return srv__send_error(r, ENG_NOT_FOUND, "no route %s %.200s", method, url);
    if (!r->method_ok) return srv__send_error(r, ENG_METHOD_NOT_ALLOWED, "%s is not allowed on %.200s", method, url);
    if (srv__infer_codec(r->route)) return srv__infer(r, arg, arg_len); /* every protocol's inference: the front door */
    return quick(r, url, arg, arg_len);
}

/* The routes' templates (http.route), from the one table; NULL for no route. */
static const char *const route_paths[] = {
#define SRV__ROUTE_PATH(name, path) path,
    SRV_ROUTE_LIST(SRV__ROUTE_PATH)
#undef SRV__ROUTE_PATH
};

/* The request's spans (trace.c): every route's but the probes' and the scrapes', which would drown the
 * traces (the OpenTelemetry instrumentations leave them out as well). */
static void trace_end(srv_server *s, srv_request *r, unsigned status) {
    if (!r->trace.sampled || is_health(r->route) || r->route == SRV_ROUTE_TEI_HEALTH || r->route == SRV_ROUTE_METRICS) return;
    const char *route = r->route < SRV_ROUTE_UNKNOWN ? route_paths[r->route] : NULL;
    if (route && strchr(route, ' ')) route = strchr(route, ' ') + 1; /* "DELETE /v1/tasks/{name}" */
    const srv_front *f = &r->front;
    const srv_job *j = f->job && f->job->t_end > 0 ? f->job : NULL; /* answered by its worker */
    srv_trace_end e = {.method = r->method, .path = r->path, .route = route, .http_status = status, .request_id = r->id,
                       .protocol = f->decoded ? f->codec->name : NULL, .message = f->code ? f->msg : NULL,
                       .tasks = (const char *const *)f->req.tasks, .n_tasks = f->decoded ? f->req.n_tasks : 0, .t0 = r->t0};
    if (j && j->fail_code) e.message = j->fail_msg;
    srv__trace_end(s->tracer, &r->trace, &e, j);
}

void srv__on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *s = cls;
    srv_request *r = *con_cls;
    if (!r) return;
    double dt = srv__now() - r->t0;
    unsigned status = r->status ? r->status : 499; /* 499: the client went away before an answer */
    if (!r->counted) srv__metrics_request_traced(s->metrics, r->route, status, dt, r->trace.sampled ? r->trace.trace_id : NULL);
    if (s->cfg.access_log) srv__access_log(r, status, dt, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (r->admin && r->caller[0]) srv__admin_audit(r, status);
    trace_end(s, r, status);
    srv__front_clear(&r->front); /* admission (the client went away before an answer), tasks, job, request */
    srv__offload_clear(r);
    srv__admin_end(r);
    free(r->body);
    free(r);
    *con_cls = NULL;
    srv__conns_phase(s->conns, conn, SRV_CONN_WAITING); /* kept alive: the next request's headers are due */
    atomic_fetch_sub(&s->active, 1);
}


/* The router's matcher without a connection, for the fuzz harness (tests/fuzz/fuzz_url.c). */
srv_route srv__route_match(const char *url, const char **arg, size_t *arg_len) { return match(url, arg, arg_len); }
