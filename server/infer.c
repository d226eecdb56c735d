/* infer.c - the HTTP edge of the front door (front.c): every inference route of every protocol that
 * comes over HTTP (adapterd's /v1/predict and /v1/embed, TEI's /, /embed, /embed_all, /predict,
 * /rerank, OpenAI's /v1/embeddings, KServe v2's infer, JSON or binary) is a line of the table below:
 * its route and its protocol's codec (proto/). Everything else is the front door's.
 *
 * On libmicrohttpd's thread, once the body is complete: the body's media type and size, admission
 * (503 while starting or draining, 429 with no --max-queue place), the codec's decoder, then the
 * front door's prepare. Tasks that must be loaded first go to libuv's pool with the connection
 * suspended (offload.c) and come back here to prepare again; a ready job is submitted with the
 * connection suspended until the scheduler hands it back (the edge's done hook resumes it, and
 * routes.c sends its body). */
#define _GNU_SOURCE
#include "infer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "http.h"
#include "offload.h"
#include "views.h"

/* The inference routes: one line a route. */
static const struct {
    srv_route route;
    const proto_codec *codec;
} routes[] = {
    {SRV_ROUTE_PREDICT, &proto_v1_predict_codec},       {SRV_ROUTE_EMBED, &proto_v1_embed_codec},
    {SRV_ROUTE_TEI_EMBED, &proto_tei_embed_codec},      {SRV_ROUTE_TEI_EMBED_ALL, &proto_tei_embed_all_codec},
    {SRV_ROUTE_TEI_PREDICT, &proto_tei_predict_codec},  {SRV_ROUTE_TEI_RERANK, &proto_tei_rerank_codec},
    {SRV_ROUTE_OPENAI_EMBEDDINGS, &proto_openai_embed_codec}, {SRV_ROUTE_V2_INFER, &proto_v2_infer_codec},
};

const proto_codec *srv__infer_codec(srv_route route) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (routes[i].route == route) return routes[i].codec;
    return NULL;
}

/* ---- the edge's hooks (loop thread) ---- */

static void http_done(srv_server *s, srv_job *j) {
    srv_request *r = j->edge_ctx;
    if (!r) { /* abandoned at the drain deadline: its request was answered already */
        srv__job_free(j);
        return;
    }
    atomic_fetch_sub(&s->n_suspended, 1);
    MHD_resume_connection(r->conn); /* routes.c sends the job's body */
}

/* The connection is suspended, so nothing else touches the request meanwhile. */
static void http_abandon(srv_server *s, srv_job *j) {
    srv_request *r = j->edge_ctx;
    srv__front_abandon(&r->front, j);
    r->abandoned = true;
    atomic_fetch_sub(&s->n_suspended, 1);
    MHD_resume_connection(r->conn);
}

static const srv_edge http_edge = {.done = http_done, .abandon = http_abandon};

/* ---- bodies ---- */

/* KServe v2 infer's body: JSON, or JSON and binary tensors (Inference-Header-Content-Length, the
 * binary tensor data extension). Triton's clients send the latter without a Content-Type, so none is
 * accepted beside application/json and application/octet-stream. Every other route takes JSON. 0 with
 * the JSON's length in *header_len, or -1 with the answer in *ans. */
static int body_ok(srv_request *r, size_t *header_len, enum MHD_Result *ans) {
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    *header_len = r->body_len;
    if (r->route != SRV_ROUTE_V2_INFER) {
        if (!srv__refuse_json_body(r, ans)) return 0;
        return -1;
    }
    if (ct && !srv__media_type_is(ct, "application/json") && !srv__media_type_is(ct, "application/octet-stream")) {
        *ans = srv__send_error(r, ENG_MEDIA_TYPE, "Content-Type must be application/json, or application/octet-stream with "
                                                  "Inference-Header-Content-Length (got %.100s)", ct);
        return -1;
    }
    if (r->too_large) {
        *ans = srv__send_error(r, ENG_TOO_LARGE, "request body over the limit of %zu bytes", r->srv->cfg.max_body_bytes);
        return -1;
    }
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
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

/* Bytes of "task@version" from a v2 path or a ?task query. */
#define TASK_SPEC_MAX 320

/* The task a route names: KServe v2's path ("task" for /v2/models/{task}/infer, "task@v" for
 * /v2/models/{task}/versions/{v}/infer; arg, arg_len from the router) or TEI's ?task=NAME. Returns 0
 * with the spec in out ("" when none is named), or -1 when it does not fit. */
static int task_spec(srv_request *r, const char *arg, size_t arg_len, char *out, size_t n) {
    *out = '\0';
    int w = 0;
    if (r->route == SRV_ROUTE_V2_INFER) {
        w = (int)srv__v2_task_spec(arg, arg_len, out, n);
        if (!w) return -1;
    } else if (r->route == SRV_ROUTE_TEI_PREDICT || r->route == SRV_ROUTE_TEI_RERANK) {
        const char *q = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "task");
        if (q && *q) w = snprintf(out, n, "%s", q);
    }
    return w >= 0 && (size_t)w < n ? 0 : -1;
}

/* Pool thread: the held tasks loaded; the request then prepares again (off.status 0). */
static void load(srv_request *r) {
    if (srv__front_load(&r->front)) srv__offload_fail(r, r->front.code, r->front.msg);
}

enum MHD_Result srv__infer(srv_request *r, const char *arg, size_t arg_len) {
    srv_server *s = r->srv;
    srv_front *f = &r->front;
    enum MHD_Result ans = MHD_YES;
    if (!f->decoded) {
        size_t header_len = 0;
        char spec[TASK_SPEC_MAX];
        srv__front_init(f, s, srv__infer_codec(r->route), &http_edge, r, r->id, r->t0);
        f->auth = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
        f->trace = &r->trace;
        if (body_ok(r, &header_len, &ans)) return ans;
        if (task_spec(r, arg, arg_len, spec, sizeof spec))
            return srv__send_error(r, ENG_NOT_FOUND, "unknown task \"%.100s...\" (the name is too long)", spec);
        /* admission before the decode: a refusal costs no parse, no tokenization and no load */
        if (srv__front_admit(f)) return srv__send_error(r, f->code, "%s", f->msg);
        proto_wire w = {.body = r->body ? r->body : "", .len = r->body_len, .header_len = header_len,
                        .task = spec[0] ? spec : NULL};
        if (srv__front_decode(f, &w)) return srv__send_error(r, f->code, "%s", f->msg);
    }
    switch (srv__front_prepare(f)) {
    case SRV_FRONT_FAILED: return srv__send_error(r, f->code, "%s", f->msg);
    case SRV_FRONT_LOAD: srv__offload(s->offl, r, load); return MHD_YES;
    case SRV_FRONT_READY: break;
    }
    atomic_fetch_add(&s->n_suspended, 1); /* the edge's done hook takes it off */
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    srv__front_submit(f);
    return MHD_YES;
}
