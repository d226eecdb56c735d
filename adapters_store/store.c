/* store.c - see store.h. Start-up scan of a registry directory, task.json parsing and inference of
 * the layout from the saved configs, and the reference counts that let issue 7 swap versions.
 *
 * Why reference counts and not a lock held by requests: a request keeps its task for the whole
 * time it waits in the scheduler queue and runs in a batch; holding a lock that long would make a
 * reload wait for traffic. A reference is one atomic increment at admission and one decrement when
 * the response is built. */
#define _GNU_SOURCE
#include "store.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct store_model {
    atomic_int refs;
    char *name;
    eng_model *model;
    eng_tokenizer *tok;
    int max_tokens;
};

struct store_task {
    atomic_int refs;
    char *name;
    char *version;
    store_model *model; /* one reference held */
    eng_task *task;
    char **labels;      /* (n_labels) owned */
    int n_labels;
    int skip_min, skip_max, skip_def;
};

struct store_registry {
    pthread_mutex_t mu;
    store_model **models; /* sorted by name */
    int n_models;
    store_task **tasks;   /* sorted by name */
    int n_tasks;
};

store_params store_default_params(void) { return (store_params){.allow_skip = 0, .verbose = 1}; }

/* ---- reference counts ---- */

void store_model_retain(store_model *m) {
    if (m) atomic_fetch_add(&m->refs, 1);
}

void store_model_release(store_model *m) {
    if (!m) return;
    int left = atomic_fetch_sub(&m->refs, 1) - 1;
    assert(left >= 0 && "store_model released below zero");
    if (left) return;
    eng_tokenizer_free(m->tok);
    eng_model_free(m->model);
    free(m->name);
    free(m);
}

void store_task_retain(store_task *t) {
    if (t) atomic_fetch_add(&t->refs, 1);
}

void store_task_release(store_task *t) {
    if (!t) return;
    int left = atomic_fetch_sub(&t->refs, 1) - 1;
    assert(left >= 0 && "store_task released below zero");
    if (left) return;
    eng_task_free(t->task);
    store_model_release(t->model);
    for (int i = 0; i < t->n_labels; i++) free(t->labels[i]);
    free(t->labels);
    free(t->name);
    free(t->version);
    free(t);
}

/* ---- helpers ---- */

/* snprintf for paths; a path that does not fit is cut (and then fails to open, naming itself). */
static int pathf(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *dst, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(dst, n, fmt, ap);
    va_end(ap);
    return r;
}

static int is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

static int file_in(const char *dir, const char *sub, const char *file) {
    char p[PATH_MAX];
    struct stat s;
    if (pathf(p, sizeof p, "%s/%s/%s", dir, sub, file) >= (int)sizeof p) return 0;
    return stat(p, &s) == 0 && S_ISREG(s.st_mode);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Lists the visible sub-directories of dir, sorted. Returns the count or a negative status. */
static int list_subdirs(const char *dir, char ***out, eng_err *err) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return eng_err_set(err, ENG_IO, "%s: cannot open (%s)", dir, strerror(errno));
    char **v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[PATH_MAX];
        if (pathf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p || !is_dir(p)) continue;
        if (n == cap) {
            int nc = cap ? cap * 2 : 8;
            char **nv = realloc(v, (size_t)nc * sizeof *nv);
            if (!nv) goto oom;
            v = nv, cap = nc;
        }
        if (!(v[n] = strdup(de->d_name))) goto oom;
        n++;
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    return n;
oom:
    closedir(d);
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
    return eng_err_set(err, ENG_NO_MEMORY, "out of memory listing %s", dir);
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* A version name is all digits; the highest number wins. */
static long version_number(const char *s) {
    if (!*s) return -1;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9') return -1;
    errno = 0;
    long v = strtol(s, NULL, 10);
    return errno ? -1 : v;
}

/* ---- models ---- */

static int load_model(const char *root, const char *name, store_model **out, eng_err *err) {
    char dir[PATH_MAX];
    pathf(dir, sizeof dir, "%s/models/%s", root, name);
    store_model *m = calloc(1, sizeof *m);
    if (!m || !(m->name = strdup(name))) {
        free(m);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory loading model %s", name);
    }
    atomic_init(&m->refs, 1);
    int rc = eng_model_load(dir, &m->model, err);
    if (!rc) rc = eng_tokenizer_load(dir, &m->tok, err);
    if (rc) {
        eng_err_prefix(err, "model %s", name);
        store_model_release(m);
        return rc;
    }
    const eng_config *c = eng_model_config(m->model);
    int pos = c->max_pos - c->pos_offset;
    int tl = eng_tokenizer_max_length(m->tok);
    m->max_tokens = tl < pos ? tl : pos;
    *out = m;
    return 0;
}

static store_model *find_model(store_registry *r, const char *name) {
    for (int i = 0; i < r->n_models; i++)
        if (!strcmp(r->models[i]->name, name)) return r->models[i];
    return NULL;
}

/* ---- tasks ---- */

/* Fills labels: task.json's list, else the head's, else LABEL_i. */
static int set_labels(store_task *t, json_t *jl, eng_err *err) {
    const eng_head *h = eng_task_head(t->task);
    int n = h->num_labels;
    if (jl && (!json_is_array(jl) || (int)json_array_size(jl) != n))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "task.json: \"labels\" must be an array of %d strings (the head's width)", n);
    t->labels = calloc((size_t)n, sizeof *t->labels);
    if (!t->labels) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    t->n_labels = n;
    for (int i = 0; i < n; i++) {
        char buf[32];
        const char *s = NULL;
        if (jl) {
            s = json_string_value(json_array_get(jl, (size_t)i));
            if (!s) return eng_err_set(err, ENG_INVALID_ARGUMENT, "task.json: labels[%d] is not a string", i);
        } else if (h->labels && h->labels[i]) {
            s = h->labels[i];
        } else {
            pathf(buf, sizeof buf, "LABEL_%d", i);
            s = buf;
        }
        if (!(t->labels[i] = strdup(s))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    return 0;
}

static int json_int_field(json_t *o, const char *k, int def, int *out, eng_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 4096)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "task.json: skips.%s must be a non-negative integer", k);
    *out = (int)json_integer_value(v);
    return 0;
}

static int load_task(store_registry *r, const char *root, const char *name, const store_params *p, store_task **out,
                     eng_err *err) {
    char tdir[PATH_MAX], vdir[PATH_MAX], path[PATH_MAX];
    pathf(tdir, sizeof tdir, "%s/tasks/%s", root, name);
    char **vers = NULL, **subs = NULL;
    int nv = list_subdirs(tdir, &vers, err), ns = 0, rc = 0;
    if (nv < 0) return nv;
    int best = -1;
    long bestv = -1;
    for (int i = 0; i < nv; i++) {
        long v = version_number(vers[i]);
        if (v > bestv) bestv = v, best = i;
    }
    if (best < 0) {
        free_list(vers, nv);
        return eng_err_set(err, ENG_NOT_FOUND, "%s: no version directory (tasks/<name>/<number>/)", tdir);
    }
    pathf(vdir, sizeof vdir, "%s/%s", tdir, vers[best]);
    json_t *cfg = NULL;
    store_task *t = calloc(1, sizeof *t);
    if (!t) {
        free_list(vers, nv);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    atomic_init(&t->refs, 1);
    if (!(t->name = strdup(name)) || !(t->version = strdup(vers[best]))) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    pathf(path, sizeof path, "%s/task.json", vdir);
    if (access(path, F_OK) == 0) {
        json_error_t je;
        if (!(cfg = json_load_file(path, 0, &je)) || !json_is_object(cfg)) {
            rc = eng_err_set(err, ENG_FORMAT, "%s:%d: %s", path, je.line, cfg ? "not a JSON object" : je.text);
            goto fail;
        }
    }
    /* Model: task.json's, else the only one. */
    const char *mname = cfg ? json_string_value(json_object_get(cfg, "model")) : NULL;
    store_model *m = mname ? find_model(r, mname) : (r->n_models == 1 ? r->models[0] : NULL);
    if (!m) {
        rc = mname ? eng_err_set(err, ENG_NOT_FOUND, "%s: model \"%s\" is not in models/", vdir, mname)
                   : eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: task.json must name the model (the registry has %d)",
                                 vdir, r->n_models);
        goto fail;
    }
    store_model_retain(m);
    t->model = m;
    /* Folders: task.json's, else inferred from the saved configs. */
    const char *dirs[ENG_MAX_FUSE + ENG_MAX_STACK];
    char dbuf[ENG_MAX_FUSE + ENG_MAX_STACK][PATH_MAX], fbuf[PATH_MAX], hbuf[PATH_MAX];
    int nd = 0;
    eng_task_params tp = eng_task_default_params();
    tp.name = name;
    json_t *ja = cfg ? json_object_get(cfg, "adapters") : NULL;
    if (ja) {
        if (!json_is_array(ja) || json_array_size(ja) < 1 || json_array_size(ja) > ENG_MAX_FUSE) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: \"adapters\" must list 1..%d folders", vdir,
                             ENG_MAX_FUSE);
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(ja); i++) {
            const char *s = json_string_value(json_array_get(ja, i));
            if (!s || strstr(s, "..") || s[0] == '/') {
                rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: adapters[%zu] must be a sub-folder name", vdir, i);
                goto fail;
            }
            pathf(dbuf[nd], sizeof dbuf[nd], "%s/%s", vdir, s);
            dirs[nd] = dbuf[nd];
            nd++;
        }
        const char *fu = json_string_value(json_object_get(cfg, "fusion"));
        const char *hd = json_string_value(json_object_get(cfg, "head"));
        if ((fu && (strstr(fu, "..") || fu[0] == '/')) || (hd && (strstr(hd, "..") || hd[0] == '/'))) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: fusion and head must be sub-folder names", vdir);
            goto fail;
        }
        if (fu) pathf(fbuf, sizeof fbuf, "%s/%s", vdir, fu), tp.fusion_dir = fbuf;
        if (hd) pathf(hbuf, sizeof hbuf, "%s/%s", vdir, hd), tp.head_dir = hbuf;
    } else {
        ns = list_subdirs(vdir, &subs, err);
        if (ns < 0) {
            rc = ns;
            goto fail;
        }
        for (int i = 0; i < ns; i++) {
            if (file_in(vdir, subs[i], "adapter_fusion_config.json")) {
                pathf(fbuf, sizeof fbuf, "%s/%s", vdir, subs[i]);
                tp.fusion_dir = fbuf;
            } else if (file_in(vdir, subs[i], "adapter_config.json")) {
                if (nd == ENG_MAX_FUSE) {
                    rc = eng_err_set(err, ENG_LIMIT, "%s: more than %d adapter folders", vdir, ENG_MAX_FUSE);
                    goto fail;
                }
                pathf(dbuf[nd], sizeof dbuf[nd], "%s/%s", vdir, subs[i]);
                dirs[nd] = dbuf[nd];
                nd++;
            } else if (file_in(vdir, subs[i], "head_config.json")) {
                pathf(hbuf, sizeof hbuf, "%s/%s", vdir, subs[i]);
                tp.head_dir = hbuf;
            }
        }
        if (nd == 0) {
            rc = eng_err_set(err, ENG_NOT_FOUND, "%s: no adapter folder (one with adapter_config.json)", vdir);
            goto fail;
        }
    }
    if ((rc = eng_task_load(m->model, dirs, nd, &tp, &t->task, err))) {
        eng_err_prefix(err, "task %s version %s", name, t->version);
        goto fail;
    }
    if ((rc = set_labels(t, cfg ? json_object_get(cfg, "labels") : NULL, err))) goto fail;
    /* Skips: task.json's range (default only 0), widened by the operator, capped at L. */
    int L = eng_model_config(m->model)->n_layers;
    json_t *js = cfg ? json_object_get(cfg, "skips") : NULL;
    if (js && !json_is_object(js)) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: \"skips\" must be {\"min\":..,\"max\":..,\"default\":..}", vdir);
        goto fail;
    }
    if ((rc = json_int_field(js, "min", 0, &t->skip_min, err)) || (rc = json_int_field(js, "max", t->skip_min, &t->skip_max, err)) ||
        (rc = json_int_field(js, "default", t->skip_min, &t->skip_def, err)))
        goto fail;
    if (p->allow_skip > t->skip_max) t->skip_max = p->allow_skip;
    if (t->skip_min > 0 && p->allow_skip > 0) t->skip_min = 0;
    if (t->skip_max > L) t->skip_max = L;
    if (t->skip_min > t->skip_max || t->skip_def < t->skip_min || t->skip_def > t->skip_max) {
        rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/task.json: skips need min <= default <= max <= %d layers", vdir, L);
        goto fail;
    }
    /* the engine's budget and latency planning read the range from the task itself */
    if ((rc = eng_task_set_skips(t->task, (eng_skip_range){t->skip_min, t->skip_max, t->skip_def}, err))) goto fail;
    json_decref(cfg);
    free_list(vers, nv);
    free_list(subs, ns);
    *out = t;
    return 0;
fail:
    json_decref(cfg);
    free_list(vers, nv);
    free_list(subs, ns);
    store_task_release(t);
    return rc;
}

int store_open(const char *dir, const store_params *p, store_registry **out, eng_err *err) {
    store_params defp = store_default_params();
    if (!p) p = &defp;
    *out = NULL;
    store_registry *r = calloc(1, sizeof *r);
    if (!r) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    char path[PATH_MAX];
    char **names = NULL;
    int n, rc;
    pathf(path, sizeof path, "%s/models", dir);
    if ((n = list_subdirs(path, &names, err)) < 0) {
        rc = n;
        goto fail;
    }
    if (!(r->models = calloc((size_t)n + 1, sizeof *r->models))) {
        free_list(names, n);
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if ((rc = load_model(dir, names[i], &r->models[r->n_models], err))) {
            free_list(names, n);
            goto fail;
        }
        r->n_models++;
    }
    free_list(names, n);
    if (r->n_models == 0) {
        rc = eng_err_set(err, ENG_NOT_FOUND, "%s/models: no model directory", dir);
        goto fail;
    }
    pathf(path, sizeof path, "%s/tasks", dir);
    if ((n = list_subdirs(path, &names, err)) < 0) {
        rc = n;
        goto fail;
    }
    if (!(r->tasks = calloc((size_t)n + 1, sizeof *r->tasks))) {
        free_list(names, n);
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        store_task *t;
        if ((rc = load_task(r, dir, names[i], p, &t, err))) {
            free_list(names, n);
            goto fail;
        }
        r->tasks[r->n_tasks++] = t;
        if (p->verbose)
            fprintf(stderr, "adapterd: task %s v%s (%s, %d labels, skips %d..%d) on model %s\n", t->name, t->version,
                    eng_task_kind(t->task), t->n_labels, t->skip_min, t->skip_max, t->model->name);
    }
    free_list(names, n);
    if (r->n_tasks == 0) {
        rc = eng_err_set(err, ENG_NOT_FOUND, "%s/tasks: no task directory", dir);
        goto fail;
    }
    *out = r;
    return 0;
fail:
    store_free(r);
    return rc;
}

void store_free(store_registry *r) {
    if (!r) return;
    for (int i = 0; i < r->n_tasks; i++) store_task_release(r->tasks[i]);
    for (int i = 0; i < r->n_models; i++) store_model_release(r->models[i]);
    free(r->tasks);
    free(r->models);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int store_n_tasks(const store_registry *r) { return r->n_tasks; }
int store_n_models(const store_registry *r) { return r->n_models; }

store_task *store_task_acquire(store_registry *r, const char *name, size_t len) {
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    int lo = 0, hi = r->n_tasks - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const char *s = r->tasks[mid]->name;
        int c = strncmp(s, name, len);
        if (c == 0 && s[len] != '\0') c = 1;
        if (c == 0) {
            t = r->tasks[mid];
            store_task_retain(t);
            break;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    pthread_mutex_unlock(&r->mu);
    return t;
}

store_task *store_task_acquire_at(store_registry *r, int i) {
    store_task *t = NULL;
    pthread_mutex_lock(&r->mu);
    if (i >= 0 && i < r->n_tasks) store_task_retain(t = r->tasks[i]);
    pthread_mutex_unlock(&r->mu);
    return t;
}

store_model *store_model_acquire_at(store_registry *r, int i) {
    store_model *m = NULL;
    pthread_mutex_lock(&r->mu);
    if (i >= 0 && i < r->n_models) store_model_retain(m = r->models[i]);
    pthread_mutex_unlock(&r->mu);
    return m;
}

const char *store_task_name(const store_task *t) { return t->name; }
const char *store_task_version(const store_task *t) { return t->version; }
const eng_task *store_task_engine(const store_task *t) { return t->task; }
store_model *store_task_model(const store_task *t) { return t->model; }
const eng_head *store_task_head(const store_task *t) { return eng_task_head(t->task); }
const char *const *store_task_labels(const store_task *t) { return (const char *const *)t->labels; }
int store_task_num_labels(const store_task *t) { return t->n_labels; }
int store_task_skip_min(const store_task *t) { return t->skip_min; }
int store_task_skip_max(const store_task *t) { return t->skip_max; }
int store_task_skip_default(const store_task *t) { return t->skip_def; }

const char *store_model_name(const store_model *m) { return m->name; }
const eng_model *store_model_engine(const store_model *m) { return m->model; }
const eng_tokenizer *store_model_tokenizer(const store_model *m) { return m->tok; }
int store_model_max_tokens(const store_model *m) { return m->max_tokens; }
