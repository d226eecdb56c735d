/* adapter_load.c - tasks from the files AdapterHub `adapters` and PEFT save.
 *
 * A folder is recognised by its config: `adapter_config.json` with a "config" envelope (AdapterHub:
 * bottleneck, LoRA/(IA)^3, prefix tuning or a union of them) or with "peft_type" (PEFT: LORA,
 * ADALORA). Weights come from safetensors or torch.save .bin files (torch_bin.h). Module placement
 * is read from the tensor names, so leave_out and per-layer configurations need no special case;
 * every name is checked, and a tensor this loader does not understand, a layer the model does not
 * have or a shape that does not fit the backbone is an error naming the tensor.
 *
 * All weights are converted to float32 into allocations owned by the task. Prefix-tuning prefixes
 * are evaluated once here (the library recomputes them on every forward). AdaLoRA's E vector is
 * folded into A. Bottleneck matrices that are mostly zeros get a CSR copy (sparse.h). */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/adapter_impl.h"
#include "engine/blas.h"
#include "engine/torch_bin.h"

typedef struct {
    char *name;
    int n_layers;
    eng_bottleneck *mh, *out; /* per layer arrays (calloc'd), NULL entries where absent */
} loaded_bn;

struct eng_task {
    char *name;
    eng_skip_range skips;
    char kind[96];
    int n_layers, first_layer;
    eng_task_layer *layers;
    eng_head head;
    size_t bytes;
    void **allocs;             /* everything malloc'd for this task */
    size_t n_allocs, cap_allocs;
    eng_sparse **sparse;
    size_t n_sparse, cap_sparse;
    char **fuse_names;
    int n_fuse_names;
    const eng_task_params *params; /* while loading only (the pace callback) */
};

eng_task_params eng_task_default_params(void) {
    eng_task_params p = {0};
    p.sparse_threshold = 0.5f;
    return p;
}

/* ---- ownership helpers ---- */

static void *task_keep(eng_task *t, void *p) {
    if (!p) return NULL;
    if (t->n_allocs == t->cap_allocs) {
        size_t cap = t->cap_allocs ? t->cap_allocs * 2 : 64;
        void **n = realloc(t->allocs, cap * sizeof *n);
        if (!n) {
            free(p);
            return NULL;
        }
        t->allocs = n;
        t->cap_allocs = cap;
    }
    t->allocs[t->n_allocs++] = p;
    return p;
}

static void *task_alloc(eng_task *t, size_t bytes) { return task_keep(t, calloc(1, bytes ? bytes : 1)); }

/* Frees p early (it was task_alloc'd); its slot in the list is cleared. */
static void task_release(eng_task *t, void *p) {
    for (size_t i = t->n_allocs; i-- > 0;)
        if (t->allocs[i] == p) {
            free(p);
            t->allocs[i] = NULL;
            return;
        }
}

static char *task_strdup(eng_task *t, const char *s) {
    char *d = strdup(s);
    return task_keep(t, d);
}

void eng_task_free(eng_task *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_allocs; i++) free(t->allocs[i]);
    free(t->allocs);
    for (size_t i = 0; i < t->n_sparse; i++) eng_sparse_free(t->sparse[i]);
    free(t->sparse);
    free(t);
}

const char *eng_task_name(const eng_task *t) { return t->name; }
const eng_head *eng_task_head(const eng_task *t) { return &t->head; }
const eng_task_layer *eng_task_layers(const eng_task *t) { return t->layers; }
int eng_task_first_layer(const eng_task *t) { return t->first_layer; }
size_t eng_task_bytes(const eng_task *t) { return t->bytes; }
const char *eng_task_kind(const eng_task *t) { return t->kind; }
eng_skip_range eng_task_skips(const eng_task *t) { return t->skips; }

int eng_task_set_skips(eng_task *t, eng_skip_range r, eng_err *err) {
    if (r.min < 0 || r.min > r.def || r.def > r.max || r.max > t->n_layers)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "task '%s': skips must satisfy 0 <= min %d <= default %d <= max %d <= %d",
                           t->name, r.min, r.def, r.max, t->n_layers);
    t->skips = r;
    return 0;
}

static void kind_add(eng_task *t, const char *k) {
    if (strstr(t->kind, k)) return;
    size_t n = strlen(t->kind);
    snprintf(t->kind + n, sizeof t->kind - n, "%s%s", n ? "+" : "", k);
}

/* float32 copy of a tensor with the expected shape (d1 == 0: 1-D; d0 == -1: any 1-D). */
static float *tensor_f32(eng_task *t, const eng_st_tensor *x, int64_t d0, int64_t d1, const char *label, eng_err *err) {
    int ok = d1 ? (x->ndim == 2 && x->shape[0] == d0 && x->shape[1] == d1)
                : (x->ndim == 1 && (d0 < 0 || x->shape[0] == d0)) || (d0 == 1 && x->numel == 1);
    if (!ok) {
        char got[96] = "";
        size_t o = 0;
        for (int i = 0; i < x->ndim && o + 24 < sizeof got; i++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%lld", i ? ", " : "", (long long)x->shape[i]);
        if (d1)
            eng_err_set(err, ENG_SHAPE, "%s: tensor '%s' has shape (%s), expected (%lld, %lld)", label, x->name, got,
                        (long long)d0, (long long)d1);
        else
            eng_err_set(err, ENG_SHAPE, "%s: tensor '%s' has shape (%s), expected (%lld)", label, x->name, got,
                        (long long)d0);
        return NULL;
    }
    float *p = task_alloc(t, (size_t)x->numel * sizeof *p);
    if (!p) {
        eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (eng_convert_to_f32(x->dtype, x->data, (size_t)x->numel, p)) {
        eng_err_set(err, ENG_UNSUPPORTED, "%s: tensor '%s' has dtype %s", label, x->name, eng_dtype_name(x->dtype));
        return NULL;
    }
    t->bytes += (size_t)x->numel * sizeof *p;
    if (t->params && t->params->pace) t->params->pace(t->params->pace_ctx, (size_t)x->numel * sizeof *p);
    return p;
}

/* ---- files ---- */

static int exists(const char *dir, const char *name) {
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static json_t *load_json(const char *dir, const char *name, eng_err *err) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) {
        eng_err_set(err, exists(dir, name) ? ENG_FORMAT : ENG_NOT_FOUND, "%s: %s", p,
                    exists(dir, name) ? je.text : "not found");
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        eng_err_set(err, ENG_FORMAT, "%s: not a JSON object", p);
        return NULL;
    }
    return j;
}

/* Opens the first of the given weight files that exists (safetensors or torch .bin). */
static int open_weights(const char *dir, const char *const *names, eng_st_file **out, eng_err *err) {
    for (int i = 0; names[i]; i++)
        if (exists(dir, names[i])) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            return eng_tensors_open(p, out, err);
        }
    return eng_err_set(err, ENG_NOT_FOUND, "%s: no weights file (%s%s%s)", dir, names[0], names[1] ? " or " : "",
                       names[1] ? names[1] : "");
}

/* ---- key names ---- */

/* Strips the base-model prefix a key may carry ("bert.", "roberta.", "distilbert.", or PEFT's
 * "base_model.model." before them) and returns the rest. */
static const char *strip_base(const char *k) {
    static const char *pre[] = {"base_model.model.", NULL};
    for (int i = 0; pre[i]; i++)
        if (!strncmp(k, pre[i], strlen(pre[i]))) k += strlen(pre[i]);
    static const char *base[] = {"bert.", "roberta.", "distilbert.", "xlm_roberta.", "model.", NULL};
    for (int i = 0; base[i]; i++)
        if (!strncmp(k, base[i], strlen(base[i]))) return k + strlen(base[i]);
    return k;
}

/* Parses "encoder.layer.<i>." or "transformer.layer.<i>."; returns the rest or NULL. */
static const char *parse_layer(const char *k, int *layer) {
    const char *p;
    if (!strncmp(k, "encoder.layer.", 14))
        p = k + 14;
    else if (!strncmp(k, "transformer.layer.", 18))
        p = k + 18;
    else
        return NULL;
    if (!isdigit((unsigned char)*p)) return NULL;
    char *end;
    long v = strtol(p, &end, 10);
    if (*end != '.' || v < 0 || v > 100000) return NULL;
    *layer = (int)v;
    return end + 1;
}

/* Module paths of the Linear layers LoRA / (IA)^3 target, in BERT/RoBERTa and DistilBERT naming. */
static int parse_linear(const char *k, const char **rest) {
    static const struct {
        const char *path;
        eng_lin lin;
    } map[] = {
        {"attention.self.query.", ENG_LIN_Q}, {"attention.self.key.", ENG_LIN_K}, {"attention.self.value.", ENG_LIN_V},
        {"attention.output.dense.", ENG_LIN_O}, {"intermediate.dense.", ENG_LIN_I}, {"output.dense.", ENG_LIN_D},
        {"attention.q_lin.", ENG_LIN_Q},        {"attention.k_lin.", ENG_LIN_K},    {"attention.v_lin.", ENG_LIN_V},
        {"attention.out_lin.", ENG_LIN_O},      {"ffn.lin1.", ENG_LIN_I},           {"ffn.lin2.", ENG_LIN_D},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strncmp(k, map[i].path, strlen(map[i].path))) {
            *rest = k + strlen(map[i].path);
            return (int)map[i].lin;
        }
    return -1;
}

/* Bottleneck sites: 0 = after attention (mh_adapter), 1 = after the FFN (output_adapter). */
static int parse_site(const char *k, const char *mid, const char **rest) {
    static const struct {
        const char *path;
        int site;
    } map[] = {
        {"attention.output.", 0}, {"attention_adapters.", 0}, {"output.", 1}, {"output_adapters.", 1},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i].path);
        if (!strncmp(k, map[i].path, n) && !strncmp(k + n, mid, strlen(mid))) {
            *rest = k + n + strlen(mid);
            return map[i].site;
        }
    }
    return -1;
}

/* Applies the library's legacy key renames (ADAPTER_FORMATS.md 4.3) into buf. */
static const char *legacy_rename(const char *k, char *buf, size_t n) {
    static const char *old[] = {"attention_text_task_adapters", "attention_text_lang_adapters", "layer_text_task_adapters",
                                "layer_text_lang_adapters", NULL};
    for (int i = 0; old[i]; i++) {
        const char *p = strstr(k, old[i]);
        if (p) {
            snprintf(buf, n, "%.*sadapters%s", (int)(p - k), k, p + strlen(old[i]));
            return buf;
        }
    }
    return k;
}

/* ---- AdapterHub configs ---- */

typedef struct {
    int is_bottleneck, is_lora, is_prefix;
    /* bottleneck */
    eng_act act;
    int original_ln_before, original_ln_after, residual_before_ln, adapter_residual_before_ln, is_parallel;
    int ln_before, ln_after, use_gating;
    float scaling;
    int scaling_mode; /* 0 float, 1 learned, 2 channel */
    int phm;
    /* lora */
    float r, alpha;
    int composition_scale; /* (IA)^3 */
    int lora_gating;
    /* prefix */
    int prefix_flat, prefix_gating;
    eng_act prefix_act;
    int leave_out[256], n_leave_out;
} ah_cfg;

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static int jbool(json_t *o, const char *k, int def) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static double jnum(json_t *o, const char *k, double def) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

static int parse_act(const char *name, int legacy, eng_act *out, const char *where, eng_err *err) {
    if (!name) {
        *out = ENG_ACT_IDENTITY;
        return 0;
    }
    /* configs saved without a "version" key used "gelu" for the tanh form (ADAPTER_FORMATS.md 1.2) */
    if (legacy && !strcmp(name, "gelu")) name = "gelu_new";
    else if (legacy && !strcmp(name, "gelu_orig")) name = "gelu";
    int a = eng_act_from_name(name);
    if (a < 0) return eng_err_set(err, ENG_UNSUPPORTED, "%s: activation '%s' is not supported", where, name);
    *out = (eng_act)a;
    return 0;
}

/* Version "adapters.X.Y.Z" below 1.1.0? */
static int version_before_1_1(const char *v) {
    if (!v || strncmp(v, "adapters.", 9)) return 0;
    int a = 0, b = 0;
    if (sscanf(v + 9, "%d.%d", &a, &b) < 1) return 0;
    return a < 1 || (a == 1 && b < 1);
}

static int parse_one_config(json_t *c, int legacy, const char *version, ah_cfg *o, const char *where, eng_err *err) {
    const char *arch = jstr(c, "architecture");
    int rc;
    json_t *lo = json_object_get(c, "leave_out");
    if (json_is_array(lo))
        for (size_t i = 0; i < json_array_size(lo) && o->n_leave_out < 256; i++)
            o->leave_out[o->n_leave_out++] = (int)json_integer_value(json_array_get(lo, i));
    if (!arch || !strcmp(arch, "bottleneck")) {
        o->is_bottleneck = 1;
        if ((rc = parse_act(jstr(c, "non_linearity"), legacy, &o->act, where, err))) return rc;
        o->original_ln_before = jbool(c, "original_ln_before", 0);
        o->original_ln_after = jbool(c, "original_ln_after", 1);
        json_t *rb = json_object_get(c, "residual_before_ln");
        o->residual_before_ln = json_is_string(rb) ? (!strcmp(json_string_value(rb), "post_add") ? 2 : 1)
                                                   : (json_is_boolean(rb) ? json_is_true(rb) : 1);
        o->adapter_residual_before_ln = jbool(c, "adapter_residual_before_ln", 0);
        o->is_parallel = jbool(c, "is_parallel", 0);
        o->ln_before = jbool(c, "ln_before", 0);
        o->ln_after = jbool(c, "ln_after", 0);
        o->use_gating = jbool(c, "use_gating", 0);
        o->phm = jbool(c, "phm_layer", 0);
        json_t *sc = json_object_get(c, "scaling");
        if (json_is_string(sc)) {
            const char *s = json_string_value(sc);
            if (!strcmp(s, "learned")) o->scaling_mode = 1;
            else if (!strcmp(s, "channel")) o->scaling_mode = 2;
            else return eng_err_set(err, ENG_UNSUPPORTED, "%s: scaling '%s' is not supported", where, s);
            o->scaling = 1.0f;
        } else {
            o->scaling = (float)jnum(c, "scaling", 1.0);
        }
        if (o->phm)
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: Compacter (phm_layer) adapters are not supported", where);
        if (json_is_string(json_object_get(c, "inv_adapter")))
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: invertible adapters (inv_adapter) are not supported", where);
    } else if (!strcmp(arch, "lora")) {
        o->is_lora = 1;
        o->r = (float)jnum(c, "r", 8);
        o->alpha = (float)jnum(c, "alpha", 8);
        const char *mode = jstr(c, "composition_mode");
        o->composition_scale = mode && !strcmp(mode, "scale");
        o->lora_gating = jbool(c, "use_gating", 0);
        if (jbool(c, "use_dora", 0))
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: DoRA is not supported", where);
        if (json_object_get(c, "vera_d") && !json_is_null(json_object_get(c, "vera_d")))
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: VeRA is not supported", where);
        /* adapters < 1.1.0 ignored alpha: the library loads such configs with alpha = r (1.7) */
        if (version_before_1_1(version) && o->r != o->alpha) o->alpha = o->r;
    } else if (!strcmp(arch, "prefix_tuning")) {
        o->is_prefix = 1;
        o->prefix_flat = jbool(c, "flat", 0);
        o->prefix_gating = jbool(c, "use_gating", 0);
        if ((rc = parse_act(jstr(c, "non_linearity") ? jstr(c, "non_linearity") : "tanh", 0, &o->prefix_act, where,
                            err)))
            return rc;
    } else if (!strcmp(arch, "union")) {
        json_t *cs = json_object_get(c, "configs");
        if (!json_is_array(cs)) return eng_err_set(err, ENG_FORMAT, "%s: union without 'configs'", where);
        for (size_t i = 0; i < json_array_size(cs); i++)
            if ((rc = parse_one_config(json_array_get(cs, i), legacy, version, o, where, err))) return rc;
    } else {
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: adapter architecture '%s' is not supported", where, arch);
    }
    return 0;
}

/* ---- building the per-layer modules ---- */

static eng_bottleneck *bn_at(eng_task *t, loaded_bn *lb, int layer, int site) {
    eng_bottleneck **arr = site ? &lb->out : &lb->mh;
    if (!*arr) {
        *arr = task_alloc(t, (size_t)lb->n_layers * sizeof **arr);
        if (!*arr) return NULL;
    }
    return &(*arr)[layer];
}

static eng_lora *lora_at(eng_task *t, int layer, eng_lin lin) {
    eng_task_layer *L = &t->layers[layer];
    if (!L->lora[lin]) L->lora[lin] = task_alloc(t, sizeof *L->lora[lin]);
    return L->lora[lin];
}

typedef struct {
    const eng_model *m;
    const eng_config *c;
    eng_task *t;
    const char *dir;
    eng_err *err;
} ctx_t;

/* AdaMix: experts of one projection, `<proj>.deepspeed_experts.<m>.<param>` (the MixtureSoup layout),
 * are summed here and divided by their count in finish_bn. Returns the parameter name after the
 * expert index, or w itself for a plain tensor; *is_expert says which. */
static const char *expert_param(const char *w, int *is_expert) {
    *is_expert = 0;
    if (strncmp(w, "deepspeed_experts.", 18)) return w;
    const char *p = w + 18;
    if (!isdigit((unsigned char)*p)) return w;
    while (isdigit((unsigned char)*p)) p++;
    if (*p != '.') return w;
    *is_expert = 1;
    return p + 1;
}

/* Loads ts into *dst (allocating it), or adds it to *dst for a further AdaMix expert. */
static int load_or_add(ctx_t *x, float **dst, int *count, const eng_st_tensor *ts, int64_t d0, int64_t d1) {
    if (!*dst) {
        *dst = tensor_f32(x->t, ts, d0, d1, x->dir, x->err);
        if (!*dst) return x->err->code;
        *count = 1;
        return 0;
    }
    if (ts->numel != (d1 ? d0 * d1 : d0))
        return eng_err_set(x->err, ENG_SHAPE, "%s: AdaMix expert '%s' differs in shape from the others", x->dir, ts->name);
    float *tmp = malloc((size_t)ts->numel * sizeof *tmp);
    if (!tmp) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    if (eng_convert_to_f32(ts->dtype, ts->data, (size_t)ts->numel, tmp)) {
        free(tmp);
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' has dtype %s", x->dir, ts->name, eng_dtype_name(ts->dtype));
    }
    for (int64_t i = 0; i < ts->numel; i++) (*dst)[i] += tmp[i];
    free(tmp);
    (*count)++;
    return 0;
}

/* One tensor of a bottleneck module: rest is what follows "adapters.<name>.". */
static int bn_tensor(ctx_t *x, eng_bottleneck *bn, const ah_cfg *cfg, const char *rest, const eng_st_tensor *ts,
                     int *counts) {
    int H = x->c->hidden;
    float *p;
    int ln_before = cfg->ln_before, expert;
    const char *down_lin = ln_before ? "adapter_down.1." : "adapter_down.0.";
    if (!strncmp(rest, down_lin, strlen(down_lin))) {
        const char *w = expert_param(rest + strlen(down_lin), &expert);
        if (!strcmp(w, "weight")) {
            if (ts->ndim != 2 || ts->shape[1] != H)
                return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (d, %d)", x->dir, ts->name, H);
            if (bn->w_down && ts->shape[0] != bn->d)
                return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has another width than its siblings", x->dir, ts->name);
            bn->d = (int)ts->shape[0];
            return load_or_add(x, &bn->w_down, &counts[0], ts, bn->d, H);
        } else if (!strcmp(w, "bias")) {
            return load_or_add(x, &bn->b_down, &counts[1], ts, ts->numel, 0);
        }
        goto unknown;
    }
    if (!strncmp(rest, "adapter_up.", 11)) {
        const char *w = expert_param(rest + 11, &expert);
        if (!strcmp(w, "weight")) {
            if (ts->ndim != 2 || ts->shape[0] != H)
                return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (%d, d)", x->dir, ts->name, H);
            return load_or_add(x, &bn->w_up, &counts[2], ts, H, ts->shape[1]);
        } else if (!strcmp(w, "bias")) {
            return load_or_add(x, &bn->b_up, &counts[3], ts, H, 0);
        }
        goto unknown;
    }
    if (ln_before && (!strncmp(rest, "adapter_down.0.", 15) || !strncmp(rest, "adapter_norm_before.", 20))) {
        const char *w = strchr(rest, '.') + 1;
        w = strchr(w, '.') ? strchr(w, '.') + 1 : w;
        if (!strncmp(rest, "adapter_norm_before.", 20)) w = rest + 20;
        if (!strcmp(w, "weight")) p = bn->ln_before_g = tensor_f32(x->t, ts, H, 0, x->dir, x->err);
        else if (!strcmp(w, "bias")) p = bn->ln_before_b = tensor_f32(x->t, ts, H, 0, x->dir, x->err);
        else goto unknown;
        return p ? 0 : x->err->code;
    }
    if (!strcmp(rest, "scaling")) {
        p = tensor_f32(x->t, ts, -1, 0, x->dir, x->err);
        if (p && ts->numel == H && cfg->scaling_mode == 2) bn->scaling_vec = p;
        else if (p && ts->numel == 1) bn->scaling = p[0];
        else if (p) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has %lld values", x->dir, ts->name, (long long)ts->numel);
    } else if (!strcmp(rest, "adapter_norm_after.weight")) {
        p = bn->ln_after_g = tensor_f32(x->t, ts, H, 0, x->dir, x->err);
    } else if (!strcmp(rest, "adapter_norm_after.bias")) {
        p = bn->ln_after_b = tensor_f32(x->t, ts, H, 0, x->dir, x->err);
    } else if (!strcmp(rest, "gate.weight")) {
        if (ts->numel != H) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (1, %d)", x->dir, ts->name, H);
        p = bn->gate_w = task_alloc(x->t, (size_t)H * sizeof(float));
        if (p) eng_convert_to_f32(ts->dtype, ts->data, (size_t)H, p);
    } else if (!strcmp(rest, "gate.bias")) {
        float g = 0;
        if (ts->numel != 1 || eng_convert_to_f32(ts->dtype, ts->data, 1, &g))
            return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must hold one value", x->dir, ts->name);
        bn->gate_b = g;
        return 0;
    } else {
        goto unknown;
    }
    return p ? 0 : (x->err->code ? x->err->code : eng_err_set(x->err, ENG_NO_MEMORY, "out of memory"));
unknown:
    return eng_err_set(x->err, ENG_FORMAT, "%s: unexpected tensor '%s'", x->dir, ts->name);
}

static int finish_bn(ctx_t *x, eng_bottleneck *bn, const ah_cfg *cfg, const char *what, float sparse_threshold,
                     const int *counts) {
    int H = x->c->hidden;
    if (!bn->w_down || !bn->b_down || !bn->w_up || !bn->b_up)
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s lacks adapter_down/adapter_up weights or biases", x->dir, what);
    if (bn->d <= 0 || bn->w_up == NULL) return eng_err_set(x->err, ENG_FORMAT, "%s: %s has no width", x->dir, what);
    /* AdaMix: the merged adapter is the average of the experts (counts > 1) */
    float *params[4] = {bn->w_down, bn->b_down, bn->w_up, bn->b_up};
    size_t sizes[4] = {(size_t)bn->d * H, (size_t)bn->d, (size_t)H * bn->d, (size_t)H};
    for (int i = 0; i < 4; i++) {
        if (counts[i] > 1)
            for (size_t j = 0; j < sizes[i]; j++) params[i][j] /= (float)counts[i];
        if (counts[i] > bn->n_experts) bn->n_experts = counts[i];
    }
    if (bn->n_experts < 2) bn->n_experts = 0;
    if (bn->n_experts) kind_add(x->t, "adamix");
    bn->act = cfg->act;
    if (!bn->scaling_vec && cfg->scaling_mode == 0) bn->scaling = cfg->scaling;
    if (cfg->scaling_mode == 2 && !bn->scaling_vec)
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has scaling 'channel' but no scaling tensor", x->dir, what);
    bn->original_ln_before = (uint8_t)cfg->original_ln_before;
    bn->original_ln_after = (uint8_t)cfg->original_ln_after;
    bn->residual_before_ln = (uint8_t)cfg->residual_before_ln;
    bn->adapter_residual_before_ln = (uint8_t)cfg->adapter_residual_before_ln;
    bn->is_parallel = (uint8_t)cfg->is_parallel;
    if (cfg->ln_before && (!bn->ln_before_g || !bn->ln_before_b))
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has ln_before but no LayerNorm weights", x->dir, what);
    if (cfg->ln_after && (!bn->ln_after_g || !bn->ln_after_b))
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has ln_after but no LayerNorm weights", x->dir, what);
    if (cfg->use_gating && !bn->gate_w)
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has use_gating but no gate weights", x->dir, what);
    if (sparse_threshold <= 1.0f) {
        if (eng_sparsity(bn->w_down, bn->d, H) >= sparse_threshold) {
            bn->down_sp = eng_sparse_from_dense(bn->w_down, bn->d, H);
            if (!bn->down_sp) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
        }
        if (eng_sparsity(bn->w_up, H, bn->d) >= sparse_threshold) {
            bn->up_sp = eng_sparse_from_dense(bn->w_up, H, bn->d);
            if (!bn->up_sp) {
                eng_sparse_free(bn->down_sp);
                bn->down_sp = NULL;
                return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
            }
        }
        eng_sparse *sp[2] = {bn->down_sp, bn->up_sp};
        for (int i = 0; i < 2; i++) {
            if (!sp[i]) continue;
            if (x->t->n_sparse == x->t->cap_sparse) {
                size_t cap = x->t->cap_sparse ? 2 * x->t->cap_sparse : 16;
                eng_sparse **n = realloc(x->t->sparse, cap * sizeof *n);
                if (!n) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
                x->t->sparse = n;
                x->t->cap_sparse = cap;
            }
            x->t->sparse[x->t->n_sparse++] = sp[i];
            x->t->bytes += eng_sparse_bytes(sp[i]);
        }
        /* the CSR copy replaces the dense one */
        if (bn->down_sp) {
            task_release(x->t, bn->w_down);
            bn->w_down = NULL;
            x->t->bytes -= (size_t)bn->d * H * sizeof(float);
        }
        if (bn->up_sp) {
            task_release(x->t, bn->w_up);
            bn->w_up = NULL;
            x->t->bytes -= (size_t)bn->d * H * sizeof(float);
        }
        if (bn->down_sp || bn->up_sp) kind_add(x->t, "sparse");
    }
    return 0;
}

/* Evaluates prefix-tuning keys/values for every layer that holds the prefix (ADAPTER_FORMATS.md 1.8):
 * kv (P, n_pl * 2 * H), layer slot j takes key channel 2j and value channel 2j + 1. */
static int build_prefix(ctx_t *x, const ah_cfg *cfg, const eng_st_tensor *wte, const eng_st_tensor *w0,
                        const eng_st_tensor *b0, const eng_st_tensor *w2, const eng_st_tensor *b2,
                        const eng_st_tensor *flat) {
    int H = x->c->hidden, L = x->c->n_layers;
    int held[512], n_pl = 0;
    for (int l = 0; l < L && l < 512; l++) {
        int out = 0;
        for (int i = 0; i < cfg->n_leave_out; i++) out |= cfg->leave_out[i] == l;
        if (!out) held[n_pl++] = l;
    }
    int64_t width = (int64_t)n_pl * 2 * H, P;
    float *kv = NULL;
    if (flat) {
        if (flat->numel % width)
            return eng_err_set(x->err, ENG_SHAPE, "%s: '%s' has %lld values, not a multiple of %lld (layers x 2 x hidden)",
                               x->dir, flat->name, (long long)flat->numel, (long long)width);
        P = flat->numel / width;
        if (!(kv = tensor_f32(x->t, flat, flat->numel, 0, x->dir, x->err))) return x->err->code;
    } else {
        if (!wte || !w0 || !b0 || !w2 || !b2)
            return eng_err_set(x->err, ENG_FORMAT, "%s: prefix tuning lacks wte / control_trans weights", x->dir);
        if (wte->ndim != 2 || wte->shape[1] != H || w0->ndim != 2 || w0->shape[1] != H || w2->ndim != 2 ||
            w2->shape[0] != width || w2->shape[1] != w0->shape[0])
            return eng_err_set(x->err, ENG_SHAPE, "%s: prefix tuning weights do not fit hidden %d and %d layers", x->dir, H,
                               n_pl);
        P = wte->shape[0];
        int bn = (int)w0->shape[0];
        float *e = tensor_f32(x->t, wte, P, H, x->dir, x->err), *a = tensor_f32(x->t, w0, bn, H, x->dir, x->err),
              *ab = tensor_f32(x->t, b0, bn, 0, x->dir, x->err), *c = tensor_f32(x->t, w2, width, bn, x->dir, x->err),
              *cb = tensor_f32(x->t, b2, width, 0, x->dir, x->err);
        float *mid = task_alloc(x->t, (size_t)P * bn * sizeof(float));
        kv = task_alloc(x->t, (size_t)P * width * sizeof(float));
        if (!e || !a || !ab || !c || !cb) return x->err->code;
        if (!mid || !kv) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
        eng_ref_gemm((int)P, bn, H, e, H, a, H, ab, mid, bn);
        eng_ref_act_apply(cfg->prefix_act, mid, (size_t)P * bn);
        eng_ref_gemm((int)P, (int)width, bn, mid, bn, c, bn, cb, kv, (int)width);
    }
    for (int j = 0; j < n_pl; j++) {
        eng_task_layer *Ly = &x->t->layers[held[j]];
        float *k = task_alloc(x->t, (size_t)P * H * sizeof(float)), *v = task_alloc(x->t, (size_t)P * H * sizeof(float));
        if (!k || !v) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
        for (int64_t p = 0; p < P; p++) {
            memcpy(k + p * H, kv + p * width + (int64_t)(2 * j) * H, (size_t)H * sizeof(float));
            memcpy(v + p * H, kv + p * width + (int64_t)(2 * j + 1) * H, (size_t)H * sizeof(float));
        }
        if (Ly->prefix_len)
            return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: two prefix-tuning adapters in one task are not supported",
                               x->dir);
        Ly->prefix_len = (int)P;
        Ly->prefix_k = k;
        Ly->prefix_v = v;
        x->t->bytes += 2 * (size_t)P * H * sizeof(float);
    }
    return 0;
}

static int lora_tensor(ctx_t *x, int is_a, int is_e, const eng_st_tensor *ts, float **A,
                       float **B, float **E) {
    if (ts->ndim != 2) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' is not a matrix", x->dir, ts->name);
    float *p = tensor_f32(x->t, ts, ts->shape[0], ts->shape[1], x->dir, x->err);
    if (!p) return x->err->code;
    if (is_e) *E = p;
    else if (is_a) *A = p;
    else *B = p;
    return 0;
}

static int lin_in(const eng_config *c, eng_lin l) {
    return l == ENG_LIN_D ? c->intermediate : c->hidden;
}
static int lin_out(const eng_config *c, eng_lin l) {
    return l == ENG_LIN_I ? c->intermediate : c->hidden;
}

/* Completes the LoRA/(IA)^3 modules gathered as raw (A, B, E) per (layer, linear). */
typedef struct {
    float *A, *B, *E;
    float *gate_w, gate_b;
    int rA, rB;
} lora_raw;

static int finish_lora(ctx_t *x, lora_raw *raw, int is_ia3, float alpha, int peft_rslora,
                       int adalora, float peft_alpha, int lora_gating) {
    const eng_config *c = x->c;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < ENG_LIN_COUNT; k++) {
            lora_raw *w = &raw[l * ENG_LIN_COUNT + k];
            if (!w->A && !w->B) continue;
            int in = lin_in(c, (eng_lin)k), out = lin_out(c, (eng_lin)k);
            if (is_ia3) {
                if (!w->B || w->A)
                    return eng_err_set(x->err, ENG_FORMAT, "%s: (IA)^3 layer %d needs only lora_B", x->dir, l);
                if (w->rB != 1 && w->rB != out)
                    return eng_err_set(x->err, ENG_SHAPE, "%s: (IA)^3 vector of layer %d has the wrong size", x->dir, l);
                eng_ia3 *ia = task_alloc(x->t, sizeof *ia);
                if (!ia) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
                ia->out = out;
                ia->l = w->B;
                for (int i = 0; i < out; i++) ia->l[i] *= alpha;
                x->t->layers[l].ia3[k] = ia;
                continue;
            }
            if (!w->A || !w->B)
                return eng_err_set(x->err, ENG_FORMAT, "%s: LoRA of layer %d lacks %s", x->dir, l, w->A ? "lora_B" : "lora_A");
            /* shapes: A (r, in), B (out, r) */
            eng_lora *lo = lora_at(x->t, l, (eng_lin)k);
            if (!lo) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
            int r = w->rA;
            lo->r = r;
            lo->in = in;
            lo->out = out;
            lo->A = w->A;
            lo->B = w->B;
            lo->gate_w = w->gate_w;
            lo->gate_b = w->gate_b;
            if (lora_gating && !w->gate_w)
                return eng_err_set(x->err, ENG_FORMAT, "%s: gated LoRA of layer %d lacks gate weights", x->dir, l);
            if (adalora) {
                /* PEFT AdaLoRA: x (A * E)^T B^T * scaling / (ranknum + 1e-5), ranknum = r at init */
                if (w->E)
                    for (int i = 0; i < r; i++)
                        for (int j = 0; j < in; j++) lo->A[(size_t)i * in + j] *= w->E[i];
                lo->scaling = (peft_alpha > 0 ? peft_alpha : (float)r) / ((float)r + 1e-5f);
            } else if (peft_alpha >= 0) {
                lo->scaling = peft_rslora ? peft_alpha / sqrtf((float)r) : peft_alpha / (float)r;
            } else {
                lo->scaling = alpha / (float)r;
            }
        }
    return 0;
}

/* ---- one AdapterHub folder ---- */

static int load_adapterhub(ctx_t *x, json_t *cfgj, loaded_bn *lb, float sparse_threshold) {
    const eng_config *c = x->c;
    json_t *config = json_object_get(cfgj, "config");
    const char *version = jstr(cfgj, "version");
    const char *name = jstr(cfgj, "name");
    if (!json_is_object(config) || !name)
        return eng_err_set(x->err, ENG_FORMAT, "%s/adapter_config.json: needs 'config' and 'name'", x->dir);
    json_t *hs = json_object_get(cfgj, "hidden_size");
    if (json_is_integer(hs) && json_integer_value(hs) != c->hidden)
        return eng_err_set(x->err, ENG_SHAPE, "%s: adapter for hidden size %lld, the model has %d", x->dir,
                           (long long)json_integer_value(hs), c->hidden);
    const char *mt = jstr(cfgj, "model_type");
    if (mt && (!strcmp(mt, "distilbert") != (c->arch == ENG_ARCH_DISTILBERT)))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: adapter for model type '%s', the model is '%s'", x->dir, mt,
                           c->model_type);
    ah_cfg cfg = {0};
    int rc = parse_one_config(config, version == NULL, version, &cfg, x->dir, x->err);
    if (rc) return rc;
    lb->name = task_strdup(x->t, name);
    lb->n_layers = c->n_layers;
    static const char *files[] = {"adapter.safetensors", "pytorch_adapter.bin", NULL};
    eng_st_file *f;
    if ((rc = open_weights(x->dir, files, &f, x->err))) return rc;
    lora_raw *raw = calloc((size_t)c->n_layers * ENG_LIN_COUNT, sizeof *raw);
    int *counts = calloc((size_t)c->n_layers * 2 * 4, sizeof *counts); /* per layer, site, parameter */
    if (!raw || !counts) {
        free(raw);
        free(counts);
        eng_st_close(f);
        return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    }
    char mid[300], lmid[300], pmid[300];
    snprintf(mid, sizeof mid, "adapters.%s.", name);
    snprintf(lmid, sizeof lmid, "loras.%s.", name);
    snprintf(pmid, sizeof pmid, "prefix_tuning.prefix_tunings.%s.self_prefix.", name);
    const eng_st_tensor *pw[6] = {0}; /* wte, w0, b0, w2, b2, flat */
    for (size_t i = 0; i < eng_st_count(f) && !rc; i++) {
        const eng_st_tensor *ts = eng_st_at(f, i);
        char buf[1024];
        const char *k = strip_base(legacy_rename(ts->name, buf, sizeof buf));
        if (strstr(k, ".pool.prefix_tunings.")) continue; /* per-layer aliases of the prefix pool (1.8) */
        if (!strncmp(k, pmid, strlen(pmid))) {
            const char *r = k + strlen(pmid);
            static const char *pn[6] = {"wte.weight", "control_trans.0.weight", "control_trans.0.bias",
                                        "control_trans.2.weight", "control_trans.2.bias", "control_trans"};
            int hit = 0;
            for (int j = 0; j < 6; j++)
                if (!strcmp(r, pn[j])) pw[j] = ts, hit = 1;
            if (!hit) rc = eng_err_set(x->err, ENG_FORMAT, "%s: unexpected tensor '%s'", x->dir, ts->name);
            continue;
        }
        int layer;
        const char *r = parse_layer(k, &layer);
        if (!r) {
            rc = eng_err_set(x->err, ENG_FORMAT, "%s: unexpected tensor '%s'", x->dir, ts->name);
            break;
        }
        if (layer >= c->n_layers) {
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' is for layer %d; the model has %d layers", x->dir,
                             ts->name, layer, c->n_layers);
            break;
        }
        const char *rest = "";
        const char *pg = strstr(r, "prefix_tuning.prefix_gates.");
        if (pg && !strncmp(pg + 27, name, strlen(name)) && pg[27 + strlen(name)] == '.') {
            const char *w = pg + 27 + strlen(name) + 1;
            eng_task_layer *Ly = &x->t->layers[layer];
            int H = c->hidden;
            if (!strcmp(w, "weight")) {
                if (ts->ndim != 2 || ts->shape[1] != H || ts->shape[0] < 1 || ts->shape[0] > 2) {
                    rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (1 or 2, %d)", x->dir, ts->name, H);
                    break;
                }
                Ly->prefix_gates = (int)ts->shape[0];
                if (!(Ly->prefix_gate_w = tensor_f32(x->t, ts, ts->shape[0], H, x->dir, x->err))) rc = x->err->code;
            } else if (!strcmp(w, "bias")) {
                if (ts->numel < 1 || ts->numel > 2 || eng_convert_to_f32(ts->dtype, ts->data, (size_t)ts->numel, Ly->prefix_gate_b))
                    rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must hold 1 or 2 values", x->dir, ts->name);
            } else {
                rc = eng_err_set(x->err, ENG_FORMAT, "%s: unexpected tensor '%s'", x->dir, ts->name);
            }
            continue;
        }
        int lin = parse_linear(r, &rest);
        if (lin >= 0 && !strncmp(rest, lmid, strlen(lmid))) {
            const char *w = rest + strlen(lmid);
            lora_raw *lr = &raw[layer * ENG_LIN_COUNT + lin];
            int is_a = !strcmp(w, "lora_A"), is_b = !strcmp(w, "lora_B");
            if (!strcmp(w, "gate.weight") || !strcmp(w, "gate.bias")) {
                int in = lin_in(c, (eng_lin)lin);
                if (w[5] == 'w') {
                    if (ts->numel != in) {
                        rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (1, %d)", x->dir, ts->name, in);
                        break;
                    }
                    lr->gate_w = task_alloc(x->t, (size_t)in * sizeof(float));
                    if (!lr->gate_w) rc = eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
                    else eng_convert_to_f32(ts->dtype, ts->data, (size_t)in, lr->gate_w);
                } else if (ts->numel != 1 || eng_convert_to_f32(ts->dtype, ts->data, 1, &lr->gate_b)) {
                    rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must hold one value", x->dir, ts->name);
                }
                continue;
            }
            if (!is_a && !is_b) {
                rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' is not supported (only lora_A/lora_B)", x->dir,
                                 ts->name);
                break;
            }
            rc = lora_tensor(x, is_a, 0, ts, &lr->A, &lr->B, &lr->E);
            if (!rc && is_a) lr->rA = (int)ts->shape[0];
            if (!rc && is_b) lr->rB = (int)ts->shape[1];
            if (!rc) {
                int in = lin_in(c, (eng_lin)lin), out = lin_out(c, (eng_lin)lin);
                if ((is_a && ts->shape[1] != in) || (is_b && ts->shape[0] != out))
                    rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' does not fit a %dx%d layer", x->dir, ts->name,
                                     out, in);
            }
            continue;
        }
        int site = parse_site(r, mid, &rest);
        if (site >= 0) {
            eng_bottleneck *bn = bn_at(x->t, lb, layer, site);
            rc = bn ? bn_tensor(x, bn, &cfg, rest, ts, &counts[(layer * 2 + site) * 4])
                    : eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
            continue;
        }
        rc = eng_err_set(x->err, ENG_FORMAT, "%s: unexpected tensor '%s' (adapter name '%s')", x->dir, ts->name, name);
    }
    if (!rc && (pw[0] || pw[5])) {
        if (!cfg.is_prefix) rc = eng_err_set(x->err, ENG_FORMAT, "%s: prefix weights but no prefix_tuning config", x->dir);
        else rc = build_prefix(x, &cfg, pw[0], pw[1], pw[2], pw[3], pw[4], pw[5]);
        if (!rc) kind_add(x->t, pw[5] ? "prefix_flat" : "prefix");
    } else if (!rc && cfg.is_prefix) {
        rc = eng_err_set(x->err, ENG_FORMAT, "%s: prefix_tuning config but no prefix weights", x->dir);
    }
    int any_lora = 0;
    for (int i = 0; i < c->n_layers * ENG_LIN_COUNT; i++) any_lora |= raw[i].A || raw[i].B;
    if (!rc && any_lora) {
        if (!cfg.is_lora) rc = eng_err_set(x->err, ENG_FORMAT, "%s: LoRA weights but no LoRA config", x->dir);
        else {
            rc = finish_lora(x, raw, cfg.composition_scale, cfg.alpha, 0, 0, -1.0f, cfg.lora_gating);
            if (!rc) kind_add(x->t, cfg.composition_scale ? "ia3" : "lora");
        }
    }
    free(raw);
    /* finish bottlenecks */
    for (int l = 0; l < c->n_layers && !rc; l++)
        for (int s = 0; s < 2 && !rc; s++) {
            eng_bottleneck *arr = s ? lb->out : lb->mh;
            if (!arr || !arr[l].w_down) {
                if (arr && (arr[l].w_up || arr[l].b_down))
                    rc = eng_err_set(x->err, ENG_FORMAT, "%s: layer %d adapter lacks adapter_down weight", x->dir, l);
                continue;
            }
            if (!cfg.is_bottleneck) {
                rc = eng_err_set(x->err, ENG_FORMAT, "%s: bottleneck weights but no bottleneck config", x->dir);
                break;
            }
            char what[64];
            snprintf(what, sizeof what, "layer %d %s adapter", l, s ? "output" : "attention");
            rc = finish_bn(x, &arr[l], &cfg, what, sparse_threshold, &counts[(l * 2 + s) * 4]);
            if (!rc) kind_add(x->t, cfg.is_parallel ? "par_bn" : "bottleneck");
        }
    free(counts);
    eng_st_close(f);
    return rc;
}

/* ---- PEFT ---- */

static int load_peft(ctx_t *x, json_t *cfgj, eng_st_file **head_file) {
    const eng_config *c = x->c;
    const char *pt = jstr(cfgj, "peft_type");
    int adalora = pt && !strcmp(pt, "ADALORA");
    if (!pt || (strcmp(pt, "LORA") && !adalora))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: peft_type '%s' is not supported (LORA, ADALORA)", x->dir,
                           pt ? pt : "(none)");
    if (jbool(cfgj, "use_dora", 0)) return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: DoRA is not supported", x->dir);
    const char *bias = jstr(cfgj, "bias");
    if (bias && strcmp(bias, "none"))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: bias '%s' is not supported (only 'none')", x->dir, bias);
    if (jbool(cfgj, "fan_in_fan_out", 0))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: fan_in_fan_out LoRA is not supported", x->dir);
    json_t *ap = json_object_get(cfgj, "alpha_pattern"), *rp = json_object_get(cfgj, "rank_pattern");
    if ((json_is_object(ap) && json_object_size(ap)) || (!adalora && json_is_object(rp) && json_object_size(rp)))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: alpha_pattern / rank_pattern are not supported", x->dir);
    float alpha = (float)jnum(cfgj, "lora_alpha", 8);
    int rslora = jbool(cfgj, "use_rslora", 0);
    static const char *files[] = {"adapter_model.safetensors", "adapter_model.bin", NULL};
    eng_st_file *f;
    int rc = open_weights(x->dir, files, &f, x->err);
    if (rc) return rc;
    lora_raw *raw = calloc((size_t)c->n_layers * ENG_LIN_COUNT, sizeof *raw);
    if (!raw) {
        eng_st_close(f);
        return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    }
    int n_head = 0;
    for (size_t i = 0; i < eng_st_count(f) && !rc; i++) {
        const eng_st_tensor *ts = eng_st_at(f, i);
        const char *k = strip_base(ts->name);
        int layer;
        const char *r = parse_layer(k, &layer);
        if (!r) { /* modules_to_save: the head, handled by load_head */
            n_head++;
            continue;
        }
        if (layer >= c->n_layers) {
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' is for layer %d; the model has %d layers", x->dir,
                             ts->name, layer, c->n_layers);
            break;
        }
        const char *rest = "";
        int lin = parse_linear(r, &rest);
        int is_a = !strcmp(rest, "lora_A.weight") || !strcmp(rest, "lora_A");
        int is_b = !strcmp(rest, "lora_B.weight") || !strcmp(rest, "lora_B");
        int is_e = !strcmp(rest, "lora_E");
        if (lin < 0 || (!is_a && !is_b && !is_e)) {
            rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' is not supported", x->dir, ts->name);
            break;
        }
        lora_raw *lr = &raw[layer * ENG_LIN_COUNT + lin];
        rc = lora_tensor(x, is_a, is_e, ts, &lr->A, &lr->B, &lr->E);
        if (rc) break;
        int in = lin_in(c, (eng_lin)lin), out = lin_out(c, (eng_lin)lin);
        if (is_a) lr->rA = (int)ts->shape[0];
        if (is_b) lr->rB = (int)ts->shape[1];
        if ((is_a && ts->shape[1] != in) || (is_b && ts->shape[0] != out) || (is_e && ts->shape[1] != 1))
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' does not fit a %dx%d layer", x->dir, ts->name, out, in);
    }
    for (int i = 0; i < c->n_layers * ENG_LIN_COUNT && !rc; i++)
        if ((raw[i].A && raw[i].B && raw[i].rA != raw[i].rB) || (adalora && raw[i].A && !raw[i].E))
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: LoRA of layer %d has mismatched ranks or lacks lora_E", x->dir,
                             i / ENG_LIN_COUNT);
    if (!rc) rc = finish_lora(x, raw, 0, 0, rslora, adalora, alpha, 0);
    if (!rc) kind_add(x->t, adalora ? "adalora" : "lora");
    free(raw);
    if (!rc && n_head) {
        *head_file = f;
        return 0;
    }
    eng_st_close(f);
    return rc;
}

/* ---- heads ---- */

static int set_labels_from(eng_task *t, json_t *label2id, eng_err *err) {
    eng_head *h = &t->head;
    if (!json_is_object(label2id) || (int)json_object_size(label2id) != h->num_labels) return 0;
    h->labels = task_alloc(t, (size_t)h->num_labels * sizeof *h->labels);
    if (!h->labels) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(label2id, k, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= h->num_labels || h->labels[id])
            return eng_err_set(err, ENG_FORMAT, "label2id maps '%s' to an invalid or repeated id", k);
        if (!(h->labels[id] = task_strdup(t, k))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    return 0;
}

static int head_layer(ctx_t *x, int i, const eng_st_tensor *w, const eng_st_tensor *b, eng_act act) {
    eng_head *h = &x->t->head;
    if (i >= ENG_HEAD_MAX_LAYERS) return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: head has too many layers", x->dir);
    if (!w || w->ndim != 2) return eng_err_set(x->err, ENG_FORMAT, "%s: head layer %d lacks a weight matrix", x->dir, i);
    int in = (int)w->shape[1], out = (int)w->shape[0];
    int want_in = i ? h->layers[i - 1].out : x->c->hidden;
    if (in != want_in)
        return eng_err_set(x->err, ENG_SHAPE, "%s: head tensor '%s' takes %d inputs, expected %d", x->dir, w->name, in,
                           want_in);
    h->layers[i].in = in;
    h->layers[i].out = out;
    h->layers[i].act = act;
    if (!(h->layers[i].w = tensor_f32(x->t, w, out, in, x->dir, x->err))) return x->err->code;
    if (b && !(h->layers[i].b = tensor_f32(x->t, b, out, 0, x->dir, x->err))) return x->err->code;
    h->n_layers = i + 1;
    h->num_labels = out;
    return 0;
}

/* AdapterHub flex head: head_config.json + heads.<name>.<idx>.{weight,bias}. */
static int load_adapterhub_head(ctx_t *x, const char *dir) {
    eng_err *err = x->err;
    json_t *j = load_json(dir, "head_config.json", err);
    if (!j) return err->code;
    json_t *hc = json_object_get(j, "config");
    const char *name = jstr(j, "name");
    int rc = 0;
    static const char *files[] = {"model_head.safetensors", "pytorch_model_head.bin", NULL};
    eng_st_file *f = NULL;
    if (!json_is_object(hc) || !name) {
        rc = eng_err_set(err, ENG_FORMAT, "%s/head_config.json: needs 'config' and 'name'", dir);
        goto done;
    }
    const char *type = jstr(hc, "head_type");
    eng_head *h = &x->t->head;
    int num_labels = (int)jnum(hc, "num_labels", 2), layers = (int)jnum(hc, "layers", 2);
    if (!type) type = "classification";
    if (!strcmp(type, "classification")) h->type = num_labels == 1 ? ENG_HEAD_REGRESSION : ENG_HEAD_CLASSIFICATION;
    else if (!strcmp(type, "multilabel_classification")) h->type = ENG_HEAD_MULTILABEL;
    else if (!strcmp(type, "tagging")) h->type = ENG_HEAD_TAGGING;
    else if (!strcmp(type, "question_answering")) h->type = ENG_HEAD_QA;
    else {
        rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: head type '%s' is not supported", dir, type);
        goto done;
    }
    h->input = (h->type == ENG_HEAD_TAGGING || h->type == ENG_HEAD_QA) ? ENG_HEAD_IN_TOKENS
               : jbool(hc, "use_pooler", 0)                            ? ENG_HEAD_IN_POOLER
                                                                       : ENG_HEAD_IN_CLS;
    eng_act act;
    json_t *af = json_object_get(hc, "activation_function");
    if ((rc = parse_act(json_is_string(af) ? json_string_value(af) : NULL, 0, &act, dir, err))) goto done;
    if ((rc = open_weights(dir, files, &f, err))) goto done;
    /* sequential indices: per layer Dropout, Linear, [activation if set and not last] */
    char pre[300];
    snprintf(pre, sizeof pre, "heads.%s.", name);
    int idx = 0;
    for (int l = 0; l < layers && !rc; l++) {
        idx++; /* Dropout */
        char wn[400], bnm[400];
        snprintf(wn, sizeof wn, "%s%d.weight", pre, idx);
        snprintf(bnm, sizeof bnm, "%s%d.bias", pre, idx);
        const eng_st_tensor *w = eng_st_find(f, wn), *b = eng_st_find(f, bnm);
        if (!w) {
            rc = eng_err_set(err, ENG_FORMAT, "%s: missing head tensor '%s'", dir, wn);
            break;
        }
        int last = l == layers - 1;
        rc = head_layer(x, l, w, b, last ? ENG_ACT_IDENTITY : act);
        idx++; /* Linear */
        if (!last && act != ENG_ACT_IDENTITY) idx++;
    }
    if (!rc && h->num_labels != num_labels && h->type != ENG_HEAD_QA)
        rc = eng_err_set(err, ENG_SHAPE, "%s: head outputs %d values, config says num_labels %d", dir, h->num_labels,
                         num_labels);
    if (!rc && h->type == ENG_HEAD_QA && h->num_labels != 2)
        rc = eng_err_set(err, ENG_SHAPE, "%s: question answering head must output 2 values", dir);
    if (!rc) {
        json_t *l2i = json_object_get(hc, "label2id");
        if (!json_is_object(l2i)) l2i = json_object_get(j, "label2id");
        rc = set_labels_from(x->t, l2i, err);
    }
done:
    eng_st_close(f);
    json_decref(j);
    return rc;
}

/* PEFT modules_to_save heads: BERT classifier(pooler), RoBERTa classifier.dense/out_proj(CLS),
 * DistilBERT pre_classifier/classifier(CLS). */
static int load_peft_head(ctx_t *x, eng_st_file *f) {
    eng_head *h = &x->t->head;
    const eng_st_tensor *t[4] = {0};
    static const char *names[4][2] = {{"classifier.dense.", "classifier.out_proj."},
                                      {"pre_classifier.", "classifier."},
                                      {"classifier.", NULL},
                                      {NULL, NULL}};
    char buf[512];
    for (int form = 0; form < 3; form++) {
        for (int i = 0; i < 2 && names[form][i]; i++) {
            const eng_st_tensor *w = NULL, *b = NULL;
            for (size_t k = 0; k < eng_st_count(f); k++) {
                const eng_st_tensor *ts = eng_st_at(f, k);
                const char *n = strip_base(ts->name);
                /* tolerate the unstripped "<module>.modules_to_save.default." form */
                const char *ms = strstr(n, "modules_to_save.default.");
                if (ms) {
                    snprintf(buf, sizeof buf, "%.*s%s", (int)(ms - n), n, ms + 24);
                    n = buf;
                }
                size_t pl = strlen(names[form][i]);
                if (strncmp(n, names[form][i], pl)) continue;
                if (!strcmp(n + pl, "weight")) w = ts;
                else if (!strcmp(n + pl, "bias")) b = ts;
            }
            t[2 * i] = w;
            t[2 * i + 1] = b;
        }
        int two = names[form][1] != NULL;
        if (t[0] && (!two || t[2])) {
            h->type = ENG_HEAD_CLASSIFICATION;
            if (form == 2) h->input = x->c->arch == ENG_ARCH_DISTILBERT ? ENG_HEAD_IN_CLS : ENG_HEAD_IN_POOLER;
            else h->input = ENG_HEAD_IN_CLS;
            eng_act mid = form == 0 ? ENG_ACT_TANH : ENG_ACT_RELU;
            int rc = head_layer(x, 0, t[0], t[1], two ? mid : ENG_ACT_IDENTITY);
            if (!rc && two) rc = head_layer(x, 1, t[2], t[3], ENG_ACT_IDENTITY);
            if (!rc && h->num_labels == 1) h->type = ENG_HEAD_REGRESSION;
            return rc;
        }
        memset(t, 0, sizeof t);
    }
    return eng_err_set(x->err, ENG_FORMAT, "%s: modules_to_save holds no recognised classifier", x->dir);
}

/* ---- fusion ---- */

static int load_fusion(ctx_t *x, const char *dir, loaded_bn *lbs, int n) {
    eng_err *err = x->err;
    json_t *j = load_json(dir, "adapter_fusion_config.json", err);
    if (!j) return err->code;
    json_t *fc = json_object_get(j, "config");
    const char *fname = jstr(j, "name");
    json_t *names = json_object_get(j, "adapter_names");
    int rc = 0;
    eng_st_file *f = NULL;
    char fbuf[1024] = "";
    if (!json_is_object(fc)) {
        rc = eng_err_set(err, ENG_FORMAT, "%s/adapter_fusion_config.json: needs 'config'", dir);
        goto done;
    }
    if (!fname) { /* older files: the name is the adapters joined by commas */
        size_t o = 0;
        for (size_t i = 0; json_is_array(names) && i < json_array_size(names); i++)
            o += (size_t)snprintf(fbuf + o, sizeof fbuf - o, "%s%s", i ? "," : "", json_string_value(json_array_get(names, i)));
        fname = fbuf;
    }
    if (!json_is_array(names)) { /* derive the children from the name */
        names = NULL;
    }
    /* children in fusion order */
    int order[ENG_MAX_FUSE], n_children = 0;
    char namebuf[1024];
    snprintf(namebuf, sizeof namebuf, "%s", fname);
    for (char *save = NULL, *tok = strtok_r(namebuf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(lbs[i].name, tok)) found = i;
        if (found < 0) {
            rc = eng_err_set(err, ENG_NOT_FOUND, "%s: fusion child '%s' is not among the loaded adapters", dir, tok);
            goto done;
        }
        if (n_children == ENG_MAX_FUSE) {
            rc = eng_err_set(err, ENG_LIMIT, "%s: more than %d fused adapters", dir, ENG_MAX_FUSE);
            goto done;
        }
        order[n_children++] = found;
    }
    if (n_children < 1) {
        rc = eng_err_set(err, ENG_FORMAT, "%s: fusion names no adapters", dir);
        goto done;
    }
    if (jbool(fc, "temperature", 0))
        fprintf(stderr, "adapterd: %s: fusion temperature schedule is not saved; using T = 1\n", dir);
    int has_value = jbool(fc, "value", 1), vbs = jbool(fc, "value_before_softmax", 1);
    static const char *files[] = {"model_adapter_fusion.safetensors", "pytorch_model_adapter_fusion.bin", NULL};
    if ((rc = open_weights(dir, files, &f, err))) goto done;
    x->t->fuse_names = task_alloc(x->t, (size_t)n_children * sizeof(char *));
    if (!x->t->fuse_names) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_children; i++) x->t->fuse_names[i] = lbs[order[i]].name;
    x->t->n_fuse_names = n_children;
    char mid[1100];
    snprintf(mid, sizeof mid, "adapter_fusion_layer.%s.", fname);
    int H = x->c->hidden;
    eng_fusion *per[2][512] = {{0}};
    for (size_t i = 0; i < eng_st_count(f) && !rc; i++) {
        const eng_st_tensor *ts = eng_st_at(f, i);
        const char *k = strip_base(ts->name);
        int layer;
        const char *r = parse_layer(k, &layer), *rest = NULL;
        int site = r ? parse_site(r, mid, &rest) : -1;
        if (site < 0 || layer >= x->c->n_layers || layer >= 512) {
            rc = eng_err_set(err, ENG_FORMAT, "%s: unexpected tensor '%s'", dir, ts->name);
            break;
        }
        eng_fusion *fu = per[site][layer];
        if (!fu) {
            fu = per[site][layer] = task_alloc(x->t, sizeof *fu);
            if (!fu) {
                rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
                break;
            }
            fu->query_before_ln = (uint8_t)jbool(fc, "query_before_ln", 0);
            fu->residual_before = (uint8_t)jbool(fc, "residual_before", 0);
            fu->value_before_softmax = (uint8_t)vbs;
            fu->temperature = 1.0f;
        }
        float **dst = NULL;
        int two = 1;
        if (!strcmp(rest, "query.weight")) dst = &fu->wq;
        else if (!strcmp(rest, "query.bias")) dst = &fu->bq, two = 0;
        else if (!strcmp(rest, "key.weight")) dst = &fu->wk;
        else if (!strcmp(rest, "key.bias")) dst = &fu->bk, two = 0;
        else if (!strcmp(rest, "value.weight") && has_value) dst = &fu->wv;
        else {
            rc = eng_err_set(err, ENG_FORMAT, "%s: unexpected tensor '%s'", dir, ts->name);
            break;
        }
        if (!(*dst = tensor_f32(x->t, ts, H, two ? H : 0, dir, err))) rc = err->code;
    }
    for (int l = 0; l < x->c->n_layers && l < 512 && !rc; l++)
        for (int s = 0; s < 2 && !rc; s++) {
            eng_fusion *fu = per[s][l];
            if (!fu) continue;
            if (!fu->wq || !fu->bq || !fu->wk || !fu->bk || (has_value && !fu->wv)) {
                rc = eng_err_set(err, ENG_FORMAT, "%s: layer %d fusion lacks query/key%s weights", dir, l,
                                 has_value ? "/value" : "");
                break;
            }
            fu->wk_t = task_alloc(x->t, (size_t)H * H * sizeof(float));
            if (!fu->wk_t) {
                rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
                break;
            }
            for (int a = 0; a < H; a++)
                for (int b = 0; b < H; b++) fu->wk_t[(size_t)b * H + a] = fu->wk[(size_t)a * H + b];
            eng_site *site = s ? &x->t->layers[l].out : &x->t->layers[l].mh;
            for (int i = 0; i < n_children; i++) {
                eng_bottleneck *arr = s ? lbs[order[i]].out : lbs[order[i]].mh;
                if (!arr || arr[l].d <= 0) continue; /* children without a module here are skipped */
                site->fuse[site->n_fuse] = &arr[l];
                site->fuse_keep[site->n_fuse] = 1;
                site->fuse_child[site->n_fuse] = (uint8_t)i;
                site->n_fuse++;
            }
            site->fusion = fu;
        }
    if (!rc) kind_add(x->t, "fusion");
done:
    eng_st_close(f);
    json_decref(j);
    return rc;
}

/* ---- the task ---- */

int eng_task_load(const eng_model *m, const char *const *dirs, int n_dirs, const eng_task_params *p, eng_task **out,
                  eng_err *err) {
    *out = NULL;
    eng_task_params defp = eng_task_default_params();
    if (!p) p = &defp;
    if (n_dirs < 1 || n_dirs > ENG_MAX_FUSE)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "a task needs 1 to %d adapter folders", ENG_MAX_FUSE);
    const eng_config *c = eng_model_config(m);
    eng_task *t = calloc(1, sizeof *t);
    if (!t) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    t->params = p;
    t->n_layers = c->n_layers;
    t->layers = task_alloc(t, (size_t)c->n_layers * sizeof *t->layers);
    loaded_bn *lbs = calloc((size_t)n_dirs, sizeof *lbs);
    int rc = t->layers && lbs ? 0 : eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    eng_st_file *peft_head = NULL;
    int peft = 0;
    for (int i = 0; i < n_dirs && !rc; i++) {
        ctx_t x = {m, c, t, dirs[i], err};
        json_t *cj = load_json(dirs[i], "adapter_config.json", err);
        if (!cj) {
            rc = err->code;
            break;
        }
        if (json_object_get(cj, "peft_type")) {
            if (n_dirs > 1 || p->fusion_dir)
                rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: a PEFT adapter must be a task of its own", dirs[i]);
            else {
                rc = load_peft(&x, cj, &peft_head);
                peft = 1;
                const char *slash = strrchr(dirs[i], '/');
                lbs[i].name = task_strdup(t, slash && slash[1] ? slash + 1 : dirs[i]);
            }
        } else {
            rc = load_adapterhub(&x, cj, &lbs[i], p->sparse_threshold);
        }
        json_decref(cj);
    }
    /* assemble bottleneck sites: a Stack of all, or the fusion's children */
    if (!rc && p->fusion_dir) {
        ctx_t x = {m, c, t, p->fusion_dir, err};
        rc = load_fusion(&x, p->fusion_dir, lbs, n_dirs);
    } else if (!rc) {
        for (int l = 0; l < c->n_layers && !rc; l++)
            for (int s = 0; s < 2; s++) {
                eng_site *site = s ? &t->layers[l].out : &t->layers[l].mh;
                for (int i = 0; i < n_dirs; i++) {
                    eng_bottleneck *arr = s ? lbs[i].out : lbs[i].mh;
                    if (!arr || arr[l].d <= 0) continue;
                    if (site->n_stack == ENG_MAX_STACK) {
                        rc = eng_err_set(err, ENG_LIMIT, "more than %d stacked adapters", ENG_MAX_STACK);
                        break;
                    }
                    site->stack[site->n_stack++] = &arr[l];
                }
            }
    }
    if (!rc && p->fusion_dir) rc = eng__fusion_apply_saved(t, p->fusion_dir, err);
    /* head */
    if (!rc) {
        const char *last = dirs[n_dirs - 1];
        ctx_t x = {m, c, t, p->head_dir ? p->head_dir : last, err};
        if (p->head_dir) rc = load_adapterhub_head(&x, p->head_dir);
        else if (peft && peft_head) rc = load_peft_head(&x, peft_head);
        else if (exists(last, "head_config.json")) rc = load_adapterhub_head(&x, last);
        else rc = eng_err_set(err, ENG_NOT_FOUND, "%s: no prediction head (head_config.json or PEFT modules_to_save)", last);
    }
    eng_st_close(peft_head);
    if (!rc) {
        const char *nm = p->name ? p->name : (p->fusion_dir ? NULL : lbs[n_dirs - 1].name);
        if (!nm) {
            const char *slash = strrchr(p->fusion_dir, '/');
            nm = slash && slash[1] ? slash + 1 : p->fusion_dir;
        }
        t->name = task_strdup(t, nm);
        if (!t->name) rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    if (!rc) {
        t->first_layer = c->n_layers;
        for (int l = c->n_layers - 1; l >= 0; l--)
            if (eng_task_layer_active(&t->layers[l])) t->first_layer = l;
        if (!t->kind[0]) kind_add(t, "head_only");
    }
    free(lbs);
    t->params = NULL; /* the caller's, valid only during the call */
    if (rc) {
        eng_task_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int eng_task_fusion_children(const eng_task *t, const char *const **names) {
    *names = (const char *const *)t->fuse_names;
    return t->n_fuse_names;
}

int eng_task_prune_fusion(eng_task *t, const uint8_t *keep, int n, eng_err *err) {
    if (n != t->n_fuse_names)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "the fusion has %d adapters, got %d flags", t->n_fuse_names, n);
    int kept = 0;
    for (int i = 0; i < n; i++) kept += keep[i] != 0;
    if (kept < 1) return eng_err_set(err, ENG_INVALID_ARGUMENT, "pruning must keep at least one adapter");
    for (int l = 0; l < t->n_layers; l++)
        for (int s = 0; s < 2; s++) {
            eng_site *site = s ? &t->layers[l].out : &t->layers[l].mh;
            int any = 0;
            for (int i = 0; i < site->n_fuse; i++) any += keep[site->fuse_child[i]] != 0;
            for (int i = 0; i < site->n_fuse; i++) /* a site keeps at least one child */
                site->fuse_keep[i] = any ? keep[site->fuse_child[i]] != 0 : 1;
        }
    return 0;
}
