/* views.c - what the server says about a task, for both edges: HTTP's GET /v1/tasks[/{name}] and
 * /v2/models/{task}[/ready|/stats] (routes.c) and gRPC's ModelReady, ModelMetadata and ModelStatistics
 * (grpc_calls.c) build the same JSON here, so the protocols describe a task alike. Listing a task's
 * versions reads the registry's folders (store_versions), so callers run these off the event loop. */
#define _GNU_SOURCE
#include "views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "respond.h"
#include "rollout.h"

/* Bytes of "task@version" from a v2 path. */
#define V2_SPEC_MAX 320
/* Longest task name quoted back in an error. */
#define QUOTED_NAME_MAX 100

/* A task that never loaded (memory budget) has no head or adapter kind yet. */
void srv__task_info_fill(store_task *t, proto_task_info *ti) {
    int h = store_task_head_type(t);
    proto_head_kind k = srv__wire_head_kind(h);
    *ti = (proto_task_info){.name = store_task_name(t), .version = store_task_version(t),
                            .model = store_model_name(store_task_model(t)), .kind = store_task_kind(t),
                            .head = k, .head_known = h >= 0, .n_labels = store_task_num_labels(t),
                            .labels = store_task_labels(t), .skip_min = store_task_skip_min(t),
                            .skip_max = store_task_skip_max(t), .skip_default = store_task_skip_default(t),
                            .bytes = store_task_bytes(t), .resident = store_task_resident(t)};
    ti->fallback_reason = store_task_fallback(t, &ti->fallback_from);
    ti->fusion.n = store_task_fusion(t, &ti->fusion.children, &ti->fusion.kept);
}

void srv__task_rollout_fill(srv_server *s, const char *name, proto_task_info *ti) {
    store_rollout ro;
    ti->rollout = (proto_rollout_view){.agreement = -1};
    if (store_rollout_get(s->reg, name, &ro) != 1) return;
    ti->rollout.mode = store_rollout_mode_name(ro.mode);
    snprintf(ti->rollout.version, sizeof ti->rollout.version, "%s", ro.version);
    ti->rollout.percent = ro.percent;
    srv__rollout_summary(s->rollouts, name, &ro, &ti->rollout.compared, &ti->rollout.agreement);
}

void srv__task_versions_free(srv_task_versions *v) {
    free(v->sv), free(v->pv);
    *v = (srv_task_versions){0};
}

/* Fills v with the versions of task name and points ti at them. Returns 0, or -1 when out of
 * memory (ti then lists the current version only). */
int srv__task_versions_fill(store_registry *reg, const char *name, srv_task_versions *v, proto_task_info *ti) {
    *v = (srv_task_versions){0};
    if (!(v->sv = calloc(TASK_VERSIONS_MAX, sizeof *v->sv))) return -1;
    int n = store_versions(reg, name, v->sv, TASK_VERSIONS_MAX);
    if (n <= 0 || !(v->pv = calloc((size_t)n, sizeof *v->pv))) {
        srv__task_versions_free(v);
        return n < 0 ? 0 : -1;
    }
    for (int i = 0; i < n; i++) {
        const store_version_info *s = &v->sv[i];
        bool failed = !strcmp(s->state, "failed");
        v->pv[i] = (proto_version_info){.version = s->version, .resident = s->resident, .bytes = s->bytes, .added = s->added,
                                        .reason = failed ? s->reason : NULL,
                                        .state = failed ? "failed" : s->current ? "current" : s->resident ? "loaded" : "available"};
    }
    v->n = n;
    ti->versions = v->pv;
    ti->n_versions = n;
    return 0;
}

size_t srv__v2_task_spec(const char *name, size_t name_len, char *out, size_t n) {
    const char *rest = name + name_len;
    int w = !strncmp(rest, "/versions/", 10)
                ? snprintf(out, n, "%.*s@%.*s", (int)name_len, name, (int)strcspn(rest + 10, "/"), rest + 10)
                : snprintf(out, n, "%.*s", (int)name_len, name);
    return w > 0 && (size_t)w < n ? (size_t)w : 0;
}

int srv__task_view(srv_server *s, const char *name, size_t nlen, srv_task_view view, char **json, size_t *jlen, char *msg,
                   size_t msz) {
    /* /v2/models/{task}/versions/{v}: that version ("task@v", as infer reads it) */
    char spec[V2_SPEC_MAX];
    size_t sl = view != TASK_VIEW_V1 && !strncmp(name + nlen, "/versions/", 10) ? srv__v2_task_spec(name, nlen, spec, sizeof spec) : 0;
    store_task *t = sl ? srv__task_acquire_spec(s->reg, spec, sl) : store_task_acquire(s->reg, name, nlen);
    *json = NULL;
    if (!t && sl) {
        snprintf(msg, msz, "unknown task or version \"%.*s\"", (int)(sl > QUOTED_NAME_MAX ? QUOTED_NAME_MAX : sl), spec);
        return ENG_NOT_FOUND;
    }
    if (!t) return srv__unknown_task(s, name, nlen, msg, msz);
    proto_task_info ti;
    srv__task_info_fill(t, &ti);
    srv__task_rollout_fill(s, store_task_name(t), &ti);
    srv_task_versions tv = {0};
    size_t len = 0;
    char *j = NULL;
    /* ready: in memory (KServe's unload makes it false; with no memory budget a request reloads it) */
    if (view == TASK_VIEW_V2_READY) j = proto_v2_bool_encode("ready", store_task_resident(t), &len);
    else if (view == TASK_VIEW_V2_STATS) {
        uint64_t count;
        double sec;
        srv__metrics_task_totals(s->metrics, store_task_name(t), &count, &sec);
        j = proto_v2_stats_encode(store_task_name(t), store_task_version(t), count, sec, &len);
    }
    else if (!srv__task_versions_fill(s->reg, store_task_name(t), &tv, &ti)) {
        store_task_layout lay = store_task_layout_of(t);
        ti.layout_from = lay.from_task_json ? "task.json" : "inferred";
        ti.layout_adapters = lay.adapters, ti.layout_n_adapters = lay.n_adapters;
        ti.layout_fusion = lay.fusion, ti.layout_head = lay.head;
        j = view == TASK_VIEW_V2 ? proto_v2_model_encode(&ti, &len) : proto_task_encode(&ti, &len);
    }
    srv__task_versions_free(&tv);
    store_task_release(t);
    if (!j) {
        snprintf(msg, msz, "out of memory");
        return ENG_NO_MEMORY;
    }
    *json = j, *jlen = len;
    return 0;
}

