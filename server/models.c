/* models.c - model names: which model a request's "model" means, on every route that takes one
 * (/v1/embed, /v1/tokenize, OpenAI's /v1/embeddings, GET /v1/models/{id}, TEI's /info), and GET
 * /v1/models, which lists them in OpenAI's shape and adapterd's at once.
 *
 * The naming rule. A model answers to its registry name (models/NAME/) and to the names
 * --served-model-name gives it (vLLM's option, so that an OpenAI client keeps the model name it
 * already sends: `--served-model-name text-embedding-ada-002`). With one model, every NAME is an
 * alias of it; with several, each entry is NAME=MODEL (NAME=MODEL is also accepted with one). A
 * model's first served name is its id where one name is listed (OpenAI's data[].id, TEI's
 * model_id), as vLLM lists it; the registry name stays accepted, since adapterd's own answers
 * (/v1/tasks, logs) say it, and is listed as "root" and under "models". A name given twice, a name
 * that is another model's registry name (it would mean two models) and a bare name beside several
 * models are refused at start. A name that matches nothing is 404 with every accepted name in the
 * message, even when one model is served: a client sending the wrong name is told so rather than
 * answered by whatever model happens to be there.
 *
 * Models are fixed when the registry opens (store.h), so the names are checked once, at start, and
 * kept as model indices; a request only compares strings. */
#include "models.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

/* One served name and the index of its model in the store's order. */
typedef struct {
    char *name;
    int model;
} served_name;

struct srv_model_names {
    int n;
    served_name *v; /* (n) in the order given */
};

/* Longest name quoted back in an error. */
#define QUOTED_NAME_MAX 100
/* Bytes of a name taken from a path. */
#define PATH_NAME_MAX 512

void srv__model_names_free(srv_model_names *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->v[i].name);
    free(t->v);
    free(t);
}

/* The index of the registry model named name (len bytes), or -1. */
static int model_index(store_registry *reg, const char *name, size_t len) {
    int n = store_n_models(reg), at = -1;
    for (int i = 0; at < 0 && i < n; i++) {
        store_model *m = store_model_acquire_at(reg, i);
        const char *mn = m ? store_model_name(m) : "";
        if (strlen(mn) == len && !memcmp(mn, name, len)) at = i;
        store_model_release(m);
    }
    return at;
}

/* s[0..*len) without its leading and trailing spaces. */
static const char *trim(const char *s, size_t *len) {
    while (*len && *s == ' ') s++, (*len)--;
    while (*len && s[*len - 1] == ' ') (*len)--;
    return s;
}

/* Whether a name may be served: not empty, no control bytes, valid UTF-8 (it is written into JSON). */
static bool name_ok(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return false;
    json_t *j = len ? json_stringn(s, len) : NULL;
    json_decref(j);
    return j != NULL;
}

/* Reads one entry e[0..len) of spec into t->v[t->n]. Returns 0 or an error status. */
static int add_entry(srv_model_names *t, store_registry *reg, const char *e, size_t len, eng_err *err) {
    const char *eq = memchr(e, '=', len);
    size_t nl = eq ? (size_t)(eq - e) : len, ml = eq ? len - nl - 1 : 0;
    const char *name = trim(e, &nl), *model = eq ? trim(eq + 1, &ml) : NULL;
    int q = (int)(len > QUOTED_NAME_MAX ? QUOTED_NAME_MAX : len), n_models = store_n_models(reg), at = 0;
    if (!name_ok(name, nl) || (eq && !ml))
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "served-model-name: \"%.*s\" is not NAME or NAME=MODEL (a name is not empty, holds no control "
                           "character and is UTF-8)", q, e);
    if (model && (at = model_index(reg, model, ml)) < 0)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "served-model-name: \"%.*s\": the registry has no model \"%.*s\"", q, e,
                           (int)ml, model);
    if (!model && n_models != 1)
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "served-model-name: \"%.*s\" names no model and the registry has %d; write NAME=MODEL", q, e,
                           n_models);
    for (int i = 0; i < t->n; i++)
        if (strlen(t->v[i].name) == nl && !memcmp(t->v[i].name, name, nl))
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "served-model-name: \"%.*s\" is given twice", (int)nl, name);
    int other = model_index(reg, name, nl);
    if (other >= 0 && other != at)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "served-model-name: \"%.*s\" is the name of another model of the registry",
                           (int)nl, name);
    if (!(t->v[t->n].name = strndup(name, nl))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    t->v[t->n++].model = at;
    return 0;
}

int srv__model_names_new(const char *spec, store_registry *reg, srv_model_names **out, eng_err *err) {
    *out = NULL;
    if (!spec || !*spec) return 0;
    size_t cap = 1;
    for (const char *p = spec; *p; p++) cap += *p == ',';
    srv_model_names *t = calloc(1, sizeof *t);
    if (!t || !(t->v = calloc(cap, sizeof *t->v))) {
        free(t);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    int rc = 0;
    for (const char *p = spec;; p++) {
        size_t len = strcspn(p, ",");
        if ((rc = add_entry(t, reg, p, len, err)) || !p[len]) break;
        p += len; /* then past the comma */
    }
    if (rc) {
        srv__model_names_free(t);
        return rc;
    }
    for (int e = 0; e < t->n; e++) {
        bool first = true;
        for (int k = 0; k < e; k++) first &= t->v[k].model != t->v[e].model;
        store_model *m = store_model_acquire_at(reg, t->v[e].model);
        fprintf(stderr, "adapterd: model %s answers to \"%s\"%s\n", m ? store_model_name(m) : "?", t->v[e].name,
                first ? " (its id in /v1/models)" : "");
        store_model_release(m);
    }
    *out = t;
    return 0;
}

/* The served names of model index i, in the order given, into v (at most max); returns how many. */
static int names_of(const srv_model_names *t, int i, const char **v, int max) {
    int k = 0;
    for (int e = 0; t && e < t->n; e++)
        if (t->v[e].model == i && k < max) v[k++] = t->v[e].name;
    return k;
}

/* Served names listed per model. */
#define NAMES_PER_MODEL_MAX 64

/* Appends to msg (at: its length so far, kept at most msz - 1 so that a cut message stays one). */
__attribute__((format(printf, 4, 5))) static void append(char *msg, size_t msz, size_t *at, const char *fmt, ...) {
    if (*at + 1 >= msz) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(msg + *at, msz - *at, fmt, ap);
    va_end(ap);
    if (w > 0) *at = *at + (size_t)w < msz ? *at + (size_t)w : msz - 1;
}

/* Appends every name the server accepts to msg: each model's served names, then its registry name. */
static void list_names(srv_server *s, char *msg, size_t msz) {
    size_t at = strlen(msg);
    int n = store_n_models(s->reg), k = 0;
    for (int i = 0; i < n; i++) {
        store_model *m = store_model_acquire_at(s->reg, i);
        if (!m) continue;
        const char *v[NAMES_PER_MODEL_MAX];
        int nv = names_of(s->names, i, v, NAMES_PER_MODEL_MAX), own = 0;
        for (int e = 0; e < nv; e++) {
            append(msg, msz, &at, "%s\"%.*s\"", k++ ? ", " : "", QUOTED_NAME_MAX, v[e]);
            own |= !strcmp(v[e], store_model_name(m));
        }
        if (!own) append(msg, msz, &at, "%s\"%.*s\"", k++ ? ", " : "", QUOTED_NAME_MAX, store_model_name(m));
        store_model_release(m);
    }
    append(msg, msz, &at, " (GET /v1/models lists them)");
}

/* srv__model_resolve, also giving the model's index in the store's order in *at. */
static store_model *resolve(srv_server *s, const char *name, srv_model_default dflt, int *at, const char **id,
                            eng_status *code, char *msg, size_t msz) {
    int n = store_n_models(s->reg);
    const char *served = NULL;
    *at = -1;
    if (name) {
        for (int e = 0; s->names && *at < 0 && e < s->names->n; e++)
            if (!strcmp(s->names->v[e].name, name)) *at = s->names->v[e].model, served = s->names->v[e].name;
        if (*at < 0) *at = model_index(s->reg, name, strlen(name));
    } else if (n == 1 || (n > 1 && dflt == SRV_MODEL_FIRST)) {
        *at = 0;
    }
    store_model *m = *at >= 0 ? store_model_acquire_at(s->reg, *at) : NULL;
    if (m) {
        if (id) *id = served ? served : store_model_name(m);
        if (id && !name) names_of(s->names, *at, id, 1); /* no name given: the model's id, its first served name */
        return m;
    }
    if (name) {
        *code = ENG_NOT_FOUND;
        snprintf(msg, msz, "unknown model \"%.*s\"; the models served here answer to ", QUOTED_NAME_MAX, name);
        list_names(s, msg, msz);
    } else if (n > 1) {
        *code = ENG_INVALID_ARGUMENT;
        snprintf(msg, msz, "the registry serves %d models; name one in \"model\" (GET /v1/models)", n);
    } else {
        *code = ENG_UNAVAILABLE;
        snprintf(msg, msz, "no model is loaded");
    }
    return NULL;
}

store_model *srv__model_resolve(srv_server *s, const char *name, srv_model_default dflt, const char **id, eng_status *code,
                                char *msg, size_t msz) {
    int at;
    return resolve(s, name, dflt, &at, id, code, msg, msz);
}

/* What GET /v1/models shows of model index i (a reference held in m); served points into names,
 * which holds NAMES_PER_MODEL_MAX entries. */
static proto_model_info model_info(srv_server *s, store_model *m, int i, const char **names) {
    const eng_config *c = eng_model_config(store_model_engine(m));
    eng_model_precision_info pi = eng_model_precision(store_model_engine(m));
    return (proto_model_info){.name = store_model_name(m), .model_type = c->model_type, .hidden = c->hidden,
                              .layers = c->n_layers, .max_tokens = store_model_max_tokens(m), .vocab = c->vocab,
                              .bytes = eng_model_bytes(store_model_engine(m)), .precision = pi.name, .kernel = pi.kernel,
                              .packed_bytes = pi.packed_bytes, .served = names,
                              .n_served = names_of(s->names, i, names, NAMES_PER_MODEL_MAX), .created = s->started};
}

enum MHD_Result srv__models(srv_request *r) {
    srv_server *s = r->srv;
    int n = store_n_models(s->reg);
    proto_model_info *mi = calloc((size_t)n + 1, sizeof *mi);
    store_model **ms = calloc((size_t)n + 1, sizeof *ms);
    const char **names = calloc((size_t)(n + 1) * NAMES_PER_MODEL_MAX, sizeof *names);
    if (!mi || !ms || !names) {
        free(mi), free(ms), free(names);
        return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!(ms[k] = store_model_acquire_at(s->reg, i))) continue;
        mi[k] = model_info(s, ms[k], i, names + (size_t)k * NAMES_PER_MODEL_MAX);
        k++;
    }
    size_t len = 0;
    char *j = proto_models_encode(mi, k, &len);
    for (int i = 0; i < k; i++) store_model_release(ms[i]);
    free(mi), free(ms), free(names);
    return srv__send_json(r, 200, j, len);
}

enum MHD_Result srv__model(srv_request *r, const char *id, size_t len) {
    char name[PATH_NAME_MAX], msg[SRV_MODEL_MSG_MAX];
    if (len >= sizeof name) return srv__send_error(r, ENG_NOT_FOUND, "unknown model: a name of %zu bytes", len);
    memcpy(name, id, len);
    name[len] = '\0';
    eng_status code = ENG_OK;
    const char *shown = NULL;
    int at;
    store_model *m = resolve(r->srv, name, SRV_MODEL_ONLY, &at, &shown, &code, msg, sizeof msg);
    if (!m) return srv__send_error(r, code, "%s", msg);
    const char *names[NAMES_PER_MODEL_MAX];
    proto_model_info mi = model_info(r->srv, m, at, names);
    size_t jl = 0;
    char *j = proto_model_object_encode(&mi, shown, &jl);
    store_model_release(m);
    return srv__send_json(r, 200, j, jl);
}
