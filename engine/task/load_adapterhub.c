/* load_adapterhub.c - one adapter folder as AdapterHub `adapters` saves it.
 *
 * `adapter_config.json` holds a "config" envelope: a bottleneck, LoRA/(IA)^3, prefix tuning, or a
 * union of them. Module placement is read from the tensor names, so leave_out and per-layer
 * configurations need no special case; every name is checked, and a tensor this loader does not
 * understand, a layer the model does not have, or a shape that does not fit the backbone or a
 * tensor it meets in a product (docs/ADAPTER_FORMATS.md §10.5) is an error naming the tensor.
 * Prefix-tuning prefixes are evaluated once here (the library recomputes them on every forward).
 * Bottleneck matrices that are mostly zeros get a CSR copy (math/sparse.h).
 * The format facts used here are in docs/ADAPTER_FORMATS.md. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_keys.h"
#include "math/blas.h"
#include "io/tensor_file.h"
#include "task/task_impl.h"

/* Applies the library's legacy key renames (docs/ADAPTER_FORMATS.md §10.2) into buf. */
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

/* ---- the config ---- */

/* The parts of adapter_config.json this loader uses; every form of a union fills its own. */
typedef enum {
    SCALING_FIXED,   /* a number */
    SCALING_LEARNED, /* "learned": one scalar tensor */
    SCALING_CHANNEL, /* "channel": one value per hidden unit */
} scaling_mode;

typedef struct {
    int is_bottleneck, is_lora, is_prefix;
    /* bottleneck */
    eng_act act;
    int original_ln_before, original_ln_after, adapter_residual_before_ln, is_parallel;
    eng_residual_mode residual_before_ln;
    int ln_before, ln_after, use_gating;
    float scaling;
    scaling_mode scaling_mode;
    int phm;
    /* lora */
    float r, alpha;
    int composition_scale; /* (IA)^3 */
    int lora_gating;
    int qkv[3];            /* selfattn_lora and "q" / "k" / "v" in attn_matrices (a merged Wqkv's slices) */
    /* prefix */
    int prefix_flat, prefix_gating;
    int prefix_length; /* the config's prefix_length; 0 when it gives none */
    eng_act prefix_act;
    int leave_out[ENG_MAX_LAYERS], n_leave_out;
} ah_cfg;

/* Version "adapters.X.Y.Z" below 1.1.0? */
static int version_before_1_1(const char *v) {
    if (!v || strncmp(v, "adapters.", 9)) return 0;
    int a = 0, b = 0;
    if (sscanf(v + 9, "%d.%d", &a, &b) < 1) return 0;
    return a < 1 || (a == 1 && b < 1);
}

static int parse_one_config(json_t *c, int legacy, const char *version, ah_cfg *o, const char *where, eng_err *err) {
    const char *arch = eng__jstr(c, "architecture");
    int rc;
    json_t *lo = json_object_get(c, "leave_out");
    if (json_is_array(lo))
        for (size_t i = 0; i < json_array_size(lo) && o->n_leave_out < ENG_MAX_LAYERS; i++)
            o->leave_out[o->n_leave_out++] = (int)json_integer_value(json_array_get(lo, i));
    if (!arch || !strcmp(arch, "bottleneck")) {
        o->is_bottleneck = 1;
        if ((rc = eng__parse_act(eng__jstr(c, "non_linearity"), legacy, &o->act, where, err))) return rc;
        o->original_ln_before = eng__jbool(c, "original_ln_before", 0);
        o->original_ln_after = eng__jbool(c, "original_ln_after", 1);
        json_t *rb = json_object_get(c, "residual_before_ln");
        if (json_is_string(rb))
            o->residual_before_ln = !strcmp(json_string_value(rb), "post_add") ? ENG_RESIDUAL_POST_ADD
                                                                             : ENG_RESIDUAL_BEFORE_LN;
        else
            o->residual_before_ln = json_is_boolean(rb) && !json_is_true(rb) ? ENG_RESIDUAL_AFTER_LN
                                                                             : ENG_RESIDUAL_BEFORE_LN;
        o->adapter_residual_before_ln = eng__jbool(c, "adapter_residual_before_ln", 0);
        o->is_parallel = eng__jbool(c, "is_parallel", 0);
        o->ln_before = eng__jbool(c, "ln_before", 0);
        o->ln_after = eng__jbool(c, "ln_after", 0);
        o->use_gating = eng__jbool(c, "use_gating", 0);
        o->phm = eng__jbool(c, "phm_layer", 0);
        json_t *sc = json_object_get(c, "scaling");
        if (json_is_string(sc)) {
            const char *s = json_string_value(sc);
            if (!strcmp(s, "learned")) o->scaling_mode = SCALING_LEARNED;
            else if (!strcmp(s, "channel")) o->scaling_mode = SCALING_CHANNEL;
            else return eng_err_set(err, ENG_UNSUPPORTED, "%s: scaling '%s' is not supported", where, s);
            o->scaling = 1.0f;
        } else {
            o->scaling = eng__jfloat(c, "scaling", 1.0f);
        }
        if (o->phm)
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: Compacter (phm_layer) adapters are not supported", where);
        if (json_is_string(json_object_get(c, "inv_adapter")))
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: invertible adapters (inv_adapter) are not supported", where);
    } else if (!strcmp(arch, "lora")) {
        o->is_lora = 1;
        o->r = eng__jfloat(c, "r", 8);
        o->alpha = eng__jfloat(c, "alpha", 8);
        const char *mode = eng__jstr(c, "composition_mode");
        o->composition_scale = mode && !strcmp(mode, "scale");
        o->lora_gating = eng__jbool(c, "use_gating", 0);
        json_t *am = json_object_get(c, "attn_matrices");
        static const char *const qkv_names[3] = {"q", "k", "v"};
        for (size_t i = 0; eng__jbool(c, "selfattn_lora", 1) && json_is_array(am) && i < json_array_size(am); i++)
            for (int m = 0; m < 3; m++)
                if (json_is_string(json_array_get(am, i)) && !strcmp(json_string_value(json_array_get(am, i)), qkv_names[m]))
                    o->qkv[m] = 1;
        if (eng__jbool(c, "use_dora", 0))
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: DoRA is not supported", where);
        if (json_object_get(c, "vera_d") && !json_is_null(json_object_get(c, "vera_d")))
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: VeRA is not supported", where);
        /* adapters < 1.1.0 ignored alpha: the library loads such configs with alpha = r (docs/ADAPTER_FORMATS.md §3) */
        if (version_before_1_1(version) && o->r != o->alpha) o->alpha = o->r;
    } else if (!strcmp(arch, "prefix_tuning")) {
        o->is_prefix = 1;
        o->prefix_flat = eng__jbool(c, "flat", 0);
        o->prefix_gating = eng__jbool(c, "use_gating", 0);
        o->prefix_length = eng__jint(c, "prefix_length", 0);
        if ((rc = eng__parse_act(eng__jstr(c, "non_linearity") ? eng__jstr(c, "non_linearity") : "tanh", 0, &o->prefix_act, where,
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

/* ---- bottleneck modules ---- */

static eng_bottleneck *bn_at(eng_task *t, eng_loaded_bn *lb, int layer, eng_site_pos site) {
    eng_bottleneck **arr = &lb->at[site];
    if (!*arr) {
        *arr = eng__task_alloc(t, (size_t)lb->n_layers * sizeof **arr);
        if (!*arr) return NULL;
    }
    return &(*arr)[layer];
}

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

/* What one bottleneck module has read so far, per parameter (down weight, down bias, up weight, up
 * bias): how many tensors (AdaMix experts) and the first of them, whose shape the others must have
 * and whose name the messages give. The tensors live as long as the open file. */
typedef struct {
    int count[4];
    const eng_st_tensor *first[4];
} bn_seen;

static int same_shape(const eng_st_tensor *a, const eng_st_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* Loads ts into *dst (allocating it), or adds it to *dst for a further AdaMix expert, which must have
 * the shape of the first (seen->first[i]). */
static int load_or_add(eng_load_ctx *x, float **dst, bn_seen *seen, int i, const eng_st_tensor *ts, int64_t d0,
                       int64_t d1) {
    if (!*dst) {
        *dst = eng__task_tensor_f32(x->t, ts, d0, d1, x->dir, x->err);
        if (!*dst) return x->err->code;
        seen->count[i] = 1;
        seen->first[i] = ts;
        return 0;
    }
    if (!same_shape(ts, seen->first[i]))
        return eng_err_set(x->err, ENG_SHAPE, "%s: AdaMix expert '%s' differs in shape from '%s'", x->dir, ts->name,
                           seen->first[i]->name);
    float *tmp = malloc((size_t)ts->numel * sizeof *tmp);
    if (!tmp) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    if (eng__convert_to_f32(ts->dtype, ts->data, (size_t)ts->numel, tmp)) {
        free(tmp);
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' has dtype %s", x->dir, ts->name, eng__dtype_name(ts->dtype));
    }
    for (int64_t k = 0; k < ts->numel; k++) (*dst)[k] += tmp[k];
    free(tmp);
    seen->count[i]++;
    return 0;
}

/* One tensor of a bottleneck module: rest is what follows "adapters.<name>.". */
static int bn_tensor(eng_load_ctx *x, eng_bottleneck *bn, const ah_cfg *cfg, const char *rest, const eng_st_tensor *ts,
                     bn_seen *seen) {
    int H = x->c->hidden;
    float *p;
    int ln_before = cfg->ln_before, expert;
    const char *down_lin = ln_before ? "adapter_down.1." : "adapter_down.0.";
    if (!strncmp(rest, down_lin, strlen(down_lin))) {
        const char *w = expert_param(rest + strlen(down_lin), &expert);
        if (!strcmp(w, "weight")) {
            if (ts->ndim != 2 || ts->shape[1] != H)
                return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (d, %d)", x->dir, ts->name, H);
            if (!bn->w_down) bn->d = (int)ts->shape[0];
            return load_or_add(x, &bn->w_down, seen, 0, ts, ts->shape[0], H);
        } else if (!strcmp(w, "bias")) {
            if (ts->ndim != 1) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be a vector", x->dir, ts->name);
            return load_or_add(x, &bn->b_down, seen, 1, ts, ts->shape[0], 0);
        }
        goto unknown;
    }
    if (!strncmp(rest, "adapter_up.", 11)) {
        const char *w = expert_param(rest + 11, &expert);
        if (!strcmp(w, "weight")) {
            if (ts->ndim != 2 || ts->shape[0] != H)
                return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (%d, d)", x->dir, ts->name, H);
            return load_or_add(x, &bn->w_up, seen, 2, ts, H, ts->shape[1]);
        } else if (!strcmp(w, "bias")) {
            return load_or_add(x, &bn->b_up, seen, 3, ts, H, 0);
        }
        goto unknown;
    }
    if (ln_before && (!strncmp(rest, "adapter_down.0.", 15) || !strncmp(rest, "adapter_norm_before.", 20))) {
        const char *w = strchr(rest, '.') + 1;
        w = strchr(w, '.') ? strchr(w, '.') + 1 : w;
        if (!strncmp(rest, "adapter_norm_before.", 20)) w = rest + 20;
        if (!strcmp(w, "weight")) p = bn->ln_before_g = eng__task_tensor_f32(x->t, ts, H, 0, x->dir, x->err);
        else if (!strcmp(w, "bias")) p = bn->ln_before_b = eng__task_tensor_f32(x->t, ts, H, 0, x->dir, x->err);
        else goto unknown;
        return p ? 0 : x->err->code;
    }
    if (!strcmp(rest, "scaling")) {
        p = eng__task_tensor_f32(x->t, ts, -1, 0, x->dir, x->err);
        if (p && ts->numel == H && cfg->scaling_mode == SCALING_CHANNEL) bn->scaling_vec = p;
        else if (p && ts->numel == 1) bn->scaling = p[0];
        else if (p) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has %lld values", x->dir, ts->name, (long long)ts->numel);
    } else if (!strcmp(rest, "adapter_norm_after.weight")) {
        p = bn->ln_after_g = eng__task_tensor_f32(x->t, ts, H, 0, x->dir, x->err);
    } else if (!strcmp(rest, "adapter_norm_after.bias")) {
        p = bn->ln_after_b = eng__task_tensor_f32(x->t, ts, H, 0, x->dir, x->err);
    } else if (!strcmp(rest, "gate.weight")) {
        if (ts->numel != H) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (1, %d)", x->dir, ts->name, H);
        p = bn->gate_w = eng__task_alloc(x->t, (size_t)H * sizeof(float));
        if (p) eng__convert_to_f32(ts->dtype, ts->data, (size_t)H, p);
    } else if (!strcmp(rest, "gate.bias")) {
        float g = 0;
        if (ts->numel != 1 || eng__convert_to_f32(ts->dtype, ts->data, 1, &g))
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

static int finish_bn(eng_load_ctx *x, eng_bottleneck *bn, const ah_cfg *cfg, const char *what, float sparse_threshold,
                     const bn_seen *seen) {
    int H = x->c->hidden;
    const int *counts = seen->count;
    if (!bn->w_down || !bn->b_down || !bn->w_up || !bn->b_up)
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s lacks adapter_down/adapter_up weights or biases", x->dir, what);
    if (bn->d <= 0 || bn->w_up == NULL) return eng_err_set(x->err, ENG_FORMAT, "%s: %s has no width", x->dir, what);
    /* the width d is read from adapter_down's weight; its bias and adapter_up meet it in a product */
    const eng_st_tensor *down = seen->first[0], *b_down = seen->first[1], *up = seen->first[2];
    if (b_down->shape[0] != bn->d)
        return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has %lld values, '%s' has %d rows", x->dir, b_down->name,
                           (long long)b_down->shape[0], down->name, bn->d);
    if (up->shape[1] != bn->d)
        return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has %lld columns, '%s' has %d rows", x->dir, up->name,
                           (long long)up->shape[1], down->name, bn->d);
    /* AdaMix: the merged adapter is the average of the experts (counts > 1) */
    float *params[4] = {bn->w_down, bn->b_down, bn->w_up, bn->b_up};
    size_t sizes[4] = {(size_t)bn->d * H, (size_t)bn->d, (size_t)H * bn->d, (size_t)H};
    for (int i = 0; i < 4; i++) {
        if (counts[i] > 1)
            for (size_t j = 0; j < sizes[i]; j++) params[i][j] /= (float)counts[i];
        if (counts[i] > bn->n_experts) bn->n_experts = counts[i];
    }
    if (bn->n_experts < 2) bn->n_experts = 0;
    if (bn->n_experts) eng__task_kind_add(x->t, "adamix");
    bn->act = cfg->act;
    if (!bn->scaling_vec && cfg->scaling_mode == SCALING_FIXED) bn->scaling = cfg->scaling;
    if (cfg->scaling_mode == SCALING_CHANNEL && !bn->scaling_vec)
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has scaling 'channel' but no scaling tensor", x->dir, what);
    bn->original_ln_before = (uint8_t)cfg->original_ln_before;
    bn->original_ln_after = (uint8_t)cfg->original_ln_after;
    bn->residual_before_ln = cfg->residual_before_ln;
    bn->adapter_residual_before_ln = (uint8_t)cfg->adapter_residual_before_ln;
    bn->is_parallel = (uint8_t)cfg->is_parallel;
    if (cfg->ln_before && (!bn->ln_before_g || !bn->ln_before_b))
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has ln_before but no LayerNorm weights", x->dir, what);
    if (cfg->ln_after && (!bn->ln_after_g || !bn->ln_after_b))
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has ln_after but no LayerNorm weights", x->dir, what);
    if (cfg->use_gating && !bn->gate_w)
        return eng_err_set(x->err, ENG_FORMAT, "%s: %s has use_gating but no gate weights", x->dir, what);
    if (sparse_threshold <= 1.0f) {
        if (eng__sparsity(bn->w_down, bn->d, H) >= sparse_threshold) {
            bn->down_sp = eng__sparse_from_dense(bn->w_down, bn->d, H);
            if (!bn->down_sp) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
        }
        if (eng__sparsity(bn->w_up, H, bn->d) >= sparse_threshold) {
            bn->up_sp = eng__sparse_from_dense(bn->w_up, H, bn->d);
            if (!bn->up_sp) {
                eng__sparse_free(bn->down_sp);
                bn->down_sp = NULL;
                return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
            }
        }
        eng_sparse *sp[2] = {bn->down_sp, bn->up_sp};
        for (int i = 0; i < 2; i++) {
            int rc = sp[i] ? eng__task_add_sparse(x->t, sp[i], x->err) : 0;
            if (rc) return rc;
        }
        /* the CSR copy replaces the dense one */
        if (bn->down_sp) {
            eng__task_release(x->t, bn->w_down);
            bn->w_down = NULL;
            x->t->bytes -= (size_t)bn->d * H * sizeof(float);
        }
        if (bn->up_sp) {
            eng__task_release(x->t, bn->w_up);
            bn->w_up = NULL;
            x->t->bytes -= (size_t)bn->d * H * sizeof(float);
        }
        if (bn->down_sp || bn->up_sp) eng__task_kind_add(x->t, "sparse");
    }
    return 0;
}

/* ---- prefix tuning ---- */

/* Evaluates prefix-tuning keys/values for every layer that holds the prefix (docs/ADAPTER_FORMATS.md §5):
 * kv (P, n_pl * 2 * H), layer slot j takes key channel 2j and value channel 2j + 1. */
static int build_prefix(eng_load_ctx *x, const ah_cfg *cfg, const eng_st_tensor *wte, const eng_st_tensor *w0,
                        const eng_st_tensor *b0, const eng_st_tensor *w2, const eng_st_tensor *b2,
                        const eng_st_tensor *flat) {
    int H = x->c->hidden, L = x->c->n_layers;
    int held[ENG_MAX_LAYERS], n_pl = 0;
    for (int l = 0; l < L && l < ENG_MAX_LAYERS; l++) {
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
        if (cfg->prefix_length > 0 && P != cfg->prefix_length)
            return eng_err_set(x->err, ENG_SHAPE, "%s: '%s' holds a prefix of %lld, the config's prefix_length is %d", x->dir,
                               flat->name, (long long)P, cfg->prefix_length);
        if (!(kv = eng__task_tensor_f32(x->t, flat, flat->numel, 0, x->dir, x->err))) return x->err->code;
    } else {
        if (!wte || !w0 || !b0 || !w2 || !b2)
            return eng_err_set(x->err, ENG_FORMAT, "%s: prefix tuning lacks wte / control_trans weights", x->dir);
        /* kv = W2 act(W1 wte + b1) + b2: wte (P, H), W1 (b, H), b1 (b), W2 (n_pl * 2 * H, b), b2 (n_pl * 2 * H) */
        if (wte->ndim != 2 || wte->shape[1] != H || (cfg->prefix_length > 0 && wte->shape[0] != cfg->prefix_length))
            return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (prefix_length %d, hidden %d)", x->dir, wte->name,
                               cfg->prefix_length, H);
        if (w0->ndim != 2 || w0->shape[1] != H)
            return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (b, hidden %d)", x->dir, w0->name, H);
        if (w2->ndim != 2 || w2->shape[0] != width)
            return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (%lld, b): %d layers x 2 x hidden %d", x->dir,
                               w2->name, (long long)width, n_pl, H);
        if (w2->shape[1] != w0->shape[0])
            return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has %lld columns, '%s' has %lld rows", x->dir, w2->name,
                               (long long)w2->shape[1], w0->name, (long long)w0->shape[0]);
        P = wte->shape[0];
        int bn = (int)w0->shape[0];
        float *e = eng__task_tensor_f32(x->t, wte, P, H, x->dir, x->err), *a = eng__task_tensor_f32(x->t, w0, bn, H, x->dir, x->err),
              *ab = eng__task_tensor_f32(x->t, b0, bn, 0, x->dir, x->err), *c = eng__task_tensor_f32(x->t, w2, width, bn, x->dir, x->err),
              *cb = eng__task_tensor_f32(x->t, b2, width, 0, x->dir, x->err);
        float *mid = eng__task_alloc(x->t, (size_t)P * bn * sizeof(float));
        kv = eng__task_alloc(x->t, (size_t)P * width * sizeof(float));
        if (!e || !a || !ab || !c || !cb) return x->err->code;
        if (!mid || !kv) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
        eng__ref_gemm((int)P, bn, H, e, H, a, H, ab, mid, bn);
        eng__ref_act_apply(cfg->prefix_act, mid, (size_t)P * bn);
        eng__ref_gemm((int)P, (int)width, bn, mid, bn, c, bn, cb, kv, (int)width);
    }
    for (int j = 0; j < n_pl; j++) {
        eng_task_layer *Ly = &x->t->layers[held[j]];
        float *k = eng__task_alloc(x->t, (size_t)P * H * sizeof(float)), *v = eng__task_alloc(x->t, (size_t)P * H * sizeof(float));
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

/* ---- ModernBERT's merged attn.Wqkv ---- */

/* AdapterHub wraps ModernBERT's fused attn.Wqkv in LoRAMergedLinear (adapter-hub/adapters,
 * src/adapters/methods/lora.py): with n of q, k, v enabled, lora_A is (n r, H) and lora_B (n H, r), and
 * the grouped product gives enabled matrix g (q, k, v order) the update x A_g^T B_g^T on its H-wide slice
 * (A_g: rows g r.., B_g: rows g H..). (IA)^3's lora_B (n H, 1) is padded with ones and the whole output
 * multiplied by it times alpha, so a slice not enabled is multiplied by alpha. Here each slice becomes its
 * own module of role q, k or v, as the engine's by-role hooks take them; raw[Q] of each layer holds the
 * merged tensors as read. Each slice of B gets an allocation of its own and the merged one is freed:
 * load.c packs each B and frees it, and freeing the q slice's B freed the k and v slices' with it when
 * they pointed into one allocation (logits off by up to 4). A's slices stay views. */
static int split_merged_qkv(eng_load_ctx *x, eng_lora_raw *raw, const ah_cfg *cfg) {
    const eng_config *c = x->c;
    int H = c->hidden, n = cfg->qkv[0] + cfg->qkv[1] + cfg->qkv[2];
    for (int l = 0; l < c->n_layers; l++) {
        eng_lora_raw m = raw[l * ENG_LIN_COUNT + ENG_LIN_Q];
        if (!m.A && !m.B) continue;
        const char *nm = m.tB ? m.tB->name : m.tA->name;
        if (!n)
            return eng_err_set(x->err, ENG_FORMAT, "%s: tensor '%s' on attn.Wqkv, but attn_matrices names none of q, k, v",
                               x->dir, nm);
        /* gated: gate Linear(H, n), row g for slice g (mean sigmoid over the tokens, in place of alpha / r) */
        if ((m.tgate_w || m.tgate_b) && cfg->composition_scale)
            return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: gated (IA)^3 is not supported", x->dir);
        if ((m.tgate_w || m.tgate_b) &&
            (!m.tgate_w || !m.tgate_b || m.tgate_w->numel != (int64_t)n * H || m.tgate_b->numel != n))
            return eng_err_set(x->err, ENG_SHAPE, "%s: attn.Wqkv gate of layer %d must be weight (%d, %d) and bias (%d)",
                               x->dir, l, n, H, n);
        float *gw = NULL, gb[3] = {0};
        if (m.tgate_w) {
            gw = eng__task_alloc(x->t, (size_t)n * H * sizeof *gw);
            if (!gw) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
            if (eng__convert_to_f32(m.tgate_w->dtype, m.tgate_w->data, (size_t)n * H, gw) ||
                eng__convert_to_f32(m.tgate_b->dtype, m.tgate_b->data, (size_t)n, gb))
                return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' has an unsupported dtype", x->dir, m.tgate_w->name);
        }
        if (!m.B || m.tB->shape[0] != (int64_t)n * H)
            return eng_err_set(x->err, ENG_SHAPE, "%s: attn.Wqkv of layer %d needs lora_B of (%d, r): %d enabled of q, k, v x "
                               "hidden %d", x->dir, l, n * H, n, H);
        int r = m.rB;
        if (!cfg->composition_scale && (!m.A || m.rA != n * r))
            return eng_err_set(x->err, ENG_SHAPE, "%s: attn.Wqkv of layer %d needs lora_A of (%d, %d): %d enabled x rank %d",
                               x->dir, l, n * r, H, n, r);
        for (int k = 0, g = 0; k < 3; k++) {
            eng_lora_raw *o = &raw[l * ENG_LIN_COUNT + ENG_LIN_Q + k];
            *o = m;
            o->out = H;
            if (!cfg->qkv[k]) {
                memset(o, 0, sizeof *o);
                if (!cfg->composition_scale || cfg->alpha == 1.0f) continue;
                /* (IA)^3: the padding's ones, times alpha in eng__lora_finish */
                float *ones = eng__task_alloc(x->t, (size_t)H * sizeof *ones);
                if (!ones) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
                for (int i = 0; i < H; i++) ones[i] = 1.0f;
                *o = (eng_lora_raw){.B = ones, .rB = 1, .tB = m.tB, .out = H};
                continue;
            }
            if (!(o->B = eng__task_copy_f32(x->t, m.B + (size_t)g * H * r, (size_t)H * r)))
                return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
            if (gw) {
                o->gate_w = gw + (size_t)g * H;
                o->gate_b = gb[g];
            }
            if (m.A) {
                o->A = m.A + (size_t)g * r * H;
                o->rA = r;
            }
            g++;
        }
        eng__task_release(x->t, m.B); /* t->bytes unchanged: its slices' copies hold what it held */
    }
    return 0;
}

/* ---- the folder ---- */

int eng__load_adapterhub(eng_load_ctx *x, json_t *cfgj, eng_loaded_bn *lb, float sparse_threshold) {
    const eng_config *c = x->c;
    json_t *config = json_object_get(cfgj, "config");
    const char *version = eng__jstr(cfgj, "version");
    const char *name = eng__jstr(cfgj, "name");
    if (!json_is_object(config) || !name)
        return eng_err_set(x->err, ENG_FORMAT, "%s/adapter_config.json: needs 'config' and 'name'", x->dir);
    json_t *hs = json_object_get(cfgj, "hidden_size");
    if (json_is_integer(hs) && json_integer_value(hs) != c->hidden)
        return eng_err_set(x->err, ENG_SHAPE, "%s: adapter for hidden size %lld, the model has %d", x->dir,
                           (long long)json_integer_value(hs), c->hidden);
    const char *mt = eng__jstr(cfgj, "model_type");
    /* the module names differ by family: BERT's (RoBERTa, XLM-R, ELECTRA too), DistilBERT's, DeBERTa's */
    int mt_fam = !mt ? -1 : !strcmp(mt, "distilbert") ? 1 : !strcmp(mt, "deberta-v2") ? 2 : !strcmp(mt, "modernbert") ? 3 : 0;
    int m_fam = c->arch == ENG_ARCH_DISTILBERT ? 1 : c->arch == ENG_ARCH_DEBERTA_V2 ? 2 : c->arch == ENG_ARCH_MODERNBERT ? 3 : 0;
    if (mt && mt_fam != m_fam)
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: adapter for model type '%s', the model is '%s'", x->dir, mt,
                           c->model_type);
    ah_cfg cfg = {0};
    int rc = parse_one_config(config, version == NULL, version, &cfg, x->dir, x->err);
    if (rc) return rc;
    if (cfg.is_prefix && c->arch == ENG_ARCH_DEBERTA_V2)
        return eng_err_set(x->err, ENG_UNSUPPORTED,
                           "%s: prefix tuning needs attention over plain keys; DeBERTa's relative attention has no "
                           "position for prefix keys, so the model lacks the site this adapter needs", x->dir);
    /* ModernBERT: AdapterHub's plugin interface (model/modernbert.c's top) has no prefix tuning, and its hooked
     * bottleneck layers refuse original_ln_after false (the model adds its own residual) */
    if (c->arch == ENG_ARCH_MODERNBERT && cfg.is_prefix)
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: prefix tuning is not supported on ModernBERT: AdapterHub's "
                           "ModernBERT interface has no prefix-tuning site (its rotary attention takes no prefix keys)", x->dir);
    if (c->arch == ENG_ARCH_MODERNBERT && cfg.is_bottleneck && !cfg.original_ln_after)
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: original_ln_after false is not supported on ModernBERT: its "
                           "pre-norm layers add the residual themselves (AdapterHub refuses it there too)", x->dir);
    lb->name = eng__task_strdup(x->t, name);
    lb->n_layers = c->n_layers;
    static const char *files[] = {"adapter.safetensors", "pytorch_adapter.bin", NULL};
    eng_st_file *f;
    if ((rc = eng__tensors_open_first(x->dir, files, &f, x->err))) return rc;
    eng_lora_raw *raw = calloc((size_t)c->n_layers * ENG_LIN_COUNT, sizeof *raw);
    bn_seen *seen = calloc((size_t)c->n_layers * ENG_SITE_COUNT, sizeof *seen); /* per layer and site */
    if (!raw || !seen) {
        free(raw);
        free(seen);
        eng__st_close(f);
        return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    }
    char mid[300], lmid[300], pmid[300];
    snprintf(mid, sizeof mid, "adapters.%s.", name);
    snprintf(lmid, sizeof lmid, "loras.%s.", name);
    snprintf(pmid, sizeof pmid, "prefix_tuning.prefix_tunings.%s.self_prefix.", name);
    const eng_st_tensor *pw[6] = {0}; /* wte, w0, b0, w2, b2, flat */
    const eng_st_tensor *gate_w[ENG_MAX_LAYERS] = {0}, *gate_b[ENG_MAX_LAYERS] = {0}; /* prefix gates per layer */
    for (size_t i = 0; i < eng__st_count(f) && !rc; i++) {
        const eng_st_tensor *ts = eng__st_at(f, i);
        char buf[ENG_HF_KEY_MAX];
        const char *k = eng__hf_strip_base(legacy_rename(ts->name, buf, sizeof buf));
        if (strstr(k, ".pool.prefix_tunings.")) continue; /* per-layer aliases of the prefix pool (docs/ADAPTER_FORMATS.md §5) */
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
        const char *r = eng__hf_parse_layer(k, &layer);
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
                if (!(Ly->prefix_gate_w = eng__task_tensor_f32(x->t, ts, ts->shape[0], H, x->dir, x->err))) rc = x->err->code;
                gate_w[layer] = ts;
            } else if (!strcmp(w, "bias")) {
                if (ts->numel < 1 || ts->numel > 2 || eng__convert_to_f32(ts->dtype, ts->data, (size_t)ts->numel, Ly->prefix_gate_b))
                    rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must hold 1 or 2 values", x->dir, ts->name);
                gate_b[layer] = ts;
            } else {
                rc = eng_err_set(x->err, ENG_FORMAT, "%s: unexpected tensor '%s'", x->dir, ts->name);
            }
            continue;
        }
        int lin = eng__hf_parse_linear(r, &rest);
        if (lin >= 0 && !eng__hf_linear_is_own(c->arch, (eng_lin)lin, r)) {
            rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' is for another model family (this %s model's module is '%s')",
                             x->dir, ts->name, c->model_type, eng__hf_linear_path(c->arch, (eng_lin)lin));
            break;
        }
        if (lin >= 0 && !strncmp(rest, lmid, strlen(lmid))) {
            const char *w = rest + strlen(lmid);
            eng_lora_raw *lr = &raw[layer * ENG_LIN_COUNT + lin];
            int is_a = !strcmp(w, "lora_A"), is_b = !strcmp(w, "lora_B");
            if (!strcmp(w, "gate.weight") || !strcmp(w, "gate.bias")) {
                int in = eng__lin_in(c, (eng_lin)lin);
                if (c->arch == ENG_ARCH_MODERNBERT && lin == ENG_LIN_Q) { /* one gate per enabled slice: split_merged_qkv */
                    if (w[5] == 'w') lr->tgate_w = ts;
                    else lr->tgate_b = ts;
                    continue;
                }
                if (w[5] == 'w') {
                    if (ts->numel != in) {
                        rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (1, %d)", x->dir, ts->name, in);
                        break;
                    }
                    lr->gate_w = eng__task_alloc(x->t, (size_t)in * sizeof(float));
                    if (!lr->gate_w) rc = eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
                    else eng__convert_to_f32(ts->dtype, ts->data, (size_t)in, lr->gate_w);
                } else if (ts->numel != 1 || eng__convert_to_f32(ts->dtype, ts->data, 1, &lr->gate_b)) {
                    rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must hold one value", x->dir, ts->name);
                }
                continue;
            }
            if (!is_a && !is_b) {
                rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' is not supported (only lora_A/lora_B)", x->dir,
                                 ts->name);
                break;
            }
            rc = eng__lora_tensor(x, is_a, 0, ts, lr);
            if (!rc) {
                int in = eng__lin_in(c, (eng_lin)lin), out = eng__lin_out(c, (eng_lin)lin);
                int merged = c->arch == ENG_ARCH_MODERNBERT && lin == ENG_LIN_Q; /* split_merged_qkv checks B */
                if ((is_a && ts->shape[1] != in) || (is_b && !merged && ts->shape[0] != out))
                    rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' does not fit a %dx%d layer", x->dir, ts->name,
                                     out, in);
            }
            continue;
        }
        int site = eng__parse_site(r, mid, &rest);
        if (site >= 0) {
            eng_bottleneck *bn = bn_at(x->t, lb, layer, (eng_site_pos)site);
            rc = bn ? bn_tensor(x, bn, &cfg, rest, ts, &seen[layer * ENG_SITE_COUNT + site])
                    : eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
            continue;
        }
        rc = eng_err_set(x->err, ENG_FORMAT, "%s: unexpected tensor '%s' (adapter name '%s')", x->dir, ts->name, name);
    }
    /* a prefix gate's bias holds one value per output of its weight */
    for (int l = 0; l < c->n_layers && l < ENG_MAX_LAYERS && !rc; l++)
        if ((gate_w[l] || gate_b[l]) && (!gate_w[l] || !gate_b[l] || gate_b[l]->numel != gate_w[l]->shape[0]))
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: prefix gate tensors '%s' and '%s' do not match (%lld rows, %lld values)",
                             x->dir, gate_w[l] ? gate_w[l]->name : "(weight missing)",
                             gate_b[l] ? gate_b[l]->name : "(bias missing)", gate_w[l] ? (long long)gate_w[l]->shape[0] : 0LL,
                             gate_b[l] ? (long long)gate_b[l]->numel : 0LL);
    if (!rc && (pw[0] || pw[5])) {
        if (!cfg.is_prefix) rc = eng_err_set(x->err, ENG_FORMAT, "%s: prefix weights but no prefix_tuning config", x->dir);
        else rc = build_prefix(x, &cfg, pw[0], pw[1], pw[2], pw[3], pw[4], pw[5]);
        if (!rc) eng__task_kind_add(x->t, "prefix_tuning"); /* AdapterHub's config name, flat or not */
    } else if (!rc && cfg.is_prefix) {
        rc = eng_err_set(x->err, ENG_FORMAT, "%s: prefix_tuning config but no prefix weights", x->dir);
    }
    int any_lora = 0;
    for (int i = 0; i < c->n_layers * ENG_LIN_COUNT; i++) any_lora |= raw[i].A || raw[i].B;
    if (!rc && any_lora) {
        if (!cfg.is_lora) rc = eng_err_set(x->err, ENG_FORMAT, "%s: LoRA weights but no LoRA config", x->dir);
        else {
            if (c->arch == ENG_ARCH_MODERNBERT) rc = split_merged_qkv(x, raw, &cfg);
            if (!rc) rc = eng__lora_finish(x, raw, cfg.composition_scale ? ENG_LORA_FORM_IA3 : ENG_LORA_FORM_LORA, cfg.alpha,
                                   cfg.lora_gating);
            if (!rc) eng__task_kind_add(x->t, cfg.composition_scale ? "ia3" : "lora");
        }
    }
    free(raw);
    /* finish bottlenecks */
    int sites_used = 0; /* bit per eng_site_pos holding an adapter */
    for (int l = 0; l < c->n_layers && !rc; l++)
        for (eng_site_pos s = 0; s < ENG_SITE_COUNT && !rc; s++) {
            eng_bottleneck *arr = lb->at[s];
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
            snprintf(what, sizeof what, "layer %d %s adapter", l, s == ENG_SITE_FFN ? "output" : "attention");
            rc = finish_bn(x, &arr[l], &cfg, what, sparse_threshold, &seen[l * ENG_SITE_COUNT + s]);
            sites_used |= 1 << s;
        }
    /* AdapterHub's config names: seq_bn (Pfeiffer, one site), double_seq_bn (Houlsby, both), par_bn */
    if (!rc && sites_used)
        eng__task_kind_add(x->t, cfg.is_parallel ? "par_bn" : sites_used == (1 << ENG_SITE_COUNT) - 1 ? "double_seq_bn" : "seq_bn");
    free(seen);
    eng__st_close(f);
    return rc;
}
