/* registry.c - the registry's answers: GET /v1/tasks (a page of served tasks, the unserved ones,
 * a cursor to the next page), GET /v1/tasks/{name} (versions, layout, fallback), GET /v1/models
 * and GET /v1/models/{id}. GET /v1/tasks' page (limit, after) is read here too, so its rules sit
 * beside the answer that carries its cursor. /v1/models answers OpenAI's list shape ("object",
 * "data": what the openai clients' models.list() reads) and adapterd's own ("models") in one
 * object, so neither kind of client has to be pointed elsewhere. The server copies what it shows
 * out of the store into proto_task_info and proto_model_info structs; this file only writes them.
 * Built on json.c only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* [{"version","state","resident","bytes","added"[,"reason"]}, ...]; the current version alone
 * when the caller listed none. */
static json_t *versions_of(const proto_task_info *t) {
    proto_version_info cur = {.version = t->version, .state = "current", .resident = t->resident, .bytes = t->bytes};
    const proto_version_info *v = t->versions ? t->versions : &cur;
    int n = t->versions ? t->n_versions : 1;
    json_t *a = json_array();
    int bad = !a;
    for (int i = 0; !bad && i < n; i++) {
        json_t *o = json_pack("{s:s,s:s,s:b,s:I,s:o}", "version", v[i].version, "state", v[i].state, "resident",
                              v[i].resident, "bytes", (json_int_t)v[i].bytes, "added",
                              v[i].added ? json_integer(v[i].added) : json_null());
        if (o && v[i].reason) bad |= json_object_set_new(o, "reason", json_string(v[i].reason));
        bad |= json_array_append_new(a, o);
    }
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

static json_t *task_info(const proto_task_info *t) {
    json_t *labels = proto__strings(t->labels, t->n_labels);
    if (!labels) return NULL;
    json_t *vs = versions_of(t);
    if (!vs) {
        json_decref(labels);
        return NULL;
    }
    json_t *o = json_pack("{s:s,s:s,s:o,s:s,s:o,s:o,s:o,s:{s:i,s:i,s:i},s:I,s:b}", "name", t->name, "version", t->version,
                          "versions", vs, "model", t->model, "adapters",
                          t->head_known ? json_string(t->kind) : json_null(), "head",
                          t->head_known ? json_string(proto_head_kind_name(t->head)) : json_null(), "labels", labels,
                          "skips", "min", t->skip_min, "max", t->skip_max, "default", t->skip_default, "bytes",
                          (json_int_t)t->bytes, "resident", t->resident);
    if (o && t->fusion.n > 0 && json_object_set_new(o, "fusion", proto__fusion_obj(&t->fusion))) {
        json_decref(o);
        return NULL;
    }
    json_t *ro = !t->rollout.mode ? json_null()
                 : json_pack("{s:s,s:s,s:f,s:I,s:o}", "version", t->rollout.version, "mode", t->rollout.mode, "percent",
                             t->rollout.percent, "compared", (json_int_t)t->rollout.compared, "agreement",
                             t->rollout.agreement >= 0 ? json_real(t->rollout.agreement) : json_null());
    if (o && json_object_set_new(o, "rollout", ro)) {
        json_decref(o);
        return NULL;
    }
    if (o && t->fallback_reason &&
        json_object_set_new(o, "fallback", json_pack("{s:s,s:s}", "version", t->fallback_from ? t->fallback_from : "",
                                                     "reason", t->fallback_reason))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* {"from","adapters":[..],"fusion","head"}: the current version's folders. */
static json_t *layout_of(const proto_task_info *t) {
    json_t *a = proto__strings(t->layout_adapters, t->layout_n_adapters);
    if (!a) return NULL;
    return json_pack("{s:s,s:o,s:o,s:o}", "from", t->layout_from, "adapters", a, "fusion",
                     t->layout_fusion ? json_string(t->layout_fusion) : json_null(), "head",
                     t->layout_head ? json_string(t->layout_head) : json_null());
}

char *proto_task_encode(const proto_task_info *t, size_t *len) {
    json_t *o = task_info(t);
    if (o && t->layout_from && json_object_set_new(o, "layout", layout_of(t))) {
        json_decref(o);
        o = NULL;
    }
    return proto__dump(o, len);
}

char *proto_tasks_encode(const proto_task_info *t, int n, const proto_unserved_task *u, int nu, const char *next,
                         size_t *len) {
    json_t *a = json_array(), *ua = json_array();
    int bad = !a || !ua;
    for (int i = 0; !bad && i < n; i++) bad |= json_array_append_new(a, task_info(&t[i]));
    for (int i = 0; !bad && i < nu; i++) {
        /* versions_of lists what it is given (never the "current" stand-in: n_versions >= 1 here) */
        proto_task_info vi = {.versions = u[i].versions, .n_versions = u[i].n_versions};
        json_t *vs = u[i].versions && u[i].n_versions > 0 ? versions_of(&vi) : json_array();
        bad |= !vs || json_array_append_new(ua, json_pack("{s:s,s:o}", "name", u[i].name, "versions", vs));
    }
    if (bad) {
        json_decref(a), json_decref(ua);
        return NULL;
    }
    return proto__dump(json_pack("{s:o,s:o,s:o}", "tasks", a, "unserved", ua, "next", next ? json_string(next) : json_null()),
                       len);
}

const char *proto_model_id(const proto_model_info *m) { return m->n_served > 0 ? m->served[0] : m->name; }

/* OpenAI's model object; the fields after owned_by are vLLM's. NULL when out of memory. */
static json_t *model_object(const proto_model_info *m, const char *id) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:i}", "id", id ? id : proto_model_id(m), "object", "model", "created",
                     (json_int_t)m->created, "owned_by", "adapterd", "root", m->name, "max_model_len", m->max_tokens);
}

/* adapterd's description of a model. NULL when out of memory. */
static json_t *model_info(const proto_model_info *m) {
    json_t *served = proto__strings(m->served, m->n_served);
    if (!served) return NULL;
    return json_pack("{s:s,s:o,s:s,s:i,s:i,s:i,s:i,s:I,s:s,s:s,s:I}", "name", m->name, "served_names", served,
                     "model_type", m->model_type, "hidden", m->hidden, "layers", m->layers, "max_tokens", m->max_tokens,
                     "vocab", m->vocab, "bytes", (json_int_t)m->bytes, "precision", m->precision ? m->precision : "fp32",
                     "kernel", m->kernel ? m->kernel : "c", "packed_bytes", (json_int_t)m->packed_bytes);
}

char *proto_models_encode(const proto_model_info *m, int n, size_t *len) {
    json_t *data = json_array(), *a = json_array();
    int bad = !data || !a;
    for (int i = 0; !bad && i < n; i++)
        bad |= json_array_append_new(data, model_object(&m[i], NULL)) || json_array_append_new(a, model_info(&m[i]));
    if (bad) {
        json_decref(data), json_decref(a);
        return NULL;
    }
    return proto__dump(json_pack("{s:s,s:o,s:o}", "object", "list", "data", data, "models", a), len);
}

char *proto_model_object_encode(const proto_model_info *m, const char *id, size_t *len) {
    return proto__dump(model_object(m, id), len);
}

int proto_tasks_page_parse(const char *limit, const char *after, proto_tasks_page *p, eng_err *err) {
    *p = (proto_tasks_page){.limit = PROTO_TASKS_LIMIT_DEFAULT, .after = after};
    if (after && !*after) return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"after\" is empty (leave it out for the first page)");
    if (!limit) return 0;
    char *end;
    errno = 0;
    long v = strtol(limit, &end, 10);
    if (errno || end == limit || *end || limit[0] == ' ' || v < 1 || v > PROTO_TASKS_LIMIT_MAX)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "\"limit\" must be an integer from 1 to %d, got \"%.40s\"",
                           PROTO_TASKS_LIMIT_MAX, limit);
    p->limit = (int)v;
    return 0;
}

int proto_tasks_page_after(const proto_tasks_page *p, const char *name) { return !p->after || strcmp(name, p->after) > 0; }
