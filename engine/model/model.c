/* model.c - config.json parsing and weight loading for BERT, RoBERTa/XLM-R, DistilBERT, ELECTRA, DeBERTa-v2
 * and ModernBERT.
 *
 * Loading reads the config, opens every safetensors file of the checkpoint (one file or an index of
 * shards), finds the base-model prefix ("bert.", "roberta.", "distilbert." or none), then copies
 * each expected tensor, checked against the shape the config implies, into one 64-byte-aligned
 * arena as float32, except the four backbone Linear weights of each layer, which are packed once
 * in the model's precision (math/linear.h) from a float32 staging buffer that is then freed.
 * Query, key and value weights are laid side by side so a layer's three projections are one GEMM.
 * Tensors inside the base model's namespace that nothing consumed are an error (a checkpoint of a
 * different shape or family); tensors outside it (task heads such as classifier.*, cls.*) are
 * ignored. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "engine/files.h"
#include "io/hf_keys.h"
#include "io/safetensors.h"
#include "io/tensor_file.h"
#include "math/blas.h"
#include "math/kernels.h"
#include "math/linear.h"
#include "model/deberta.h"
#include "model/weights.h"

/* max_position_embeddings when config.json leaves it out (BERT's table). */
#define DEFAULT_MAX_POS 512
/* ModernBERT's rotary tables are computed for max_position_embeddings at load (4 x max_pos x head_dim / 2
 * floats, none in the checkpoint): a bound on what a config may ask for. */
#define ENG_MODERNBERT_MAX_POS 131072
/* A config.json is a few hundred bytes; anything past this is not one. */
#define CONFIG_MAX_BYTES ((size_t)1 << 20)


/* ---- config.json ---- */

static int json_int(json_t *o, const char *k, int def, int *out, const char *path, eng_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        if (def == INT_MIN) return eng_err_set(err, ENG_FORMAT, "%s: missing integer field '%s'", path, k);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX / 4)
        return eng_err_set(err, ENG_FORMAT, "%s: field '%s' must be a non-negative integer", path, k);
    *out = (int)json_integer_value(v);
    return 0;
}

/* A positive number field (theta, eps) or def when absent; ENG_FORMAT when present and not positive. */
static int json_pos(json_t *o, const char *k, double def, double *out, const char *path, eng_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return eng_err_set(err, ENG_FORMAT, "%s: field '%s' must be a positive number", path, k);
    *out = json_number_value(v);
    return 0;
}

/* ModernBertConfig's fields (Hugging Face's defaults where one is optional). Biases are read from the
 * weights (attention_bias, mlp_bias, norm_bias, classifier_bias only say whether they exist). */
static int parse_modernbert(json_t *root, const char *path, eng_config *c, const char **act, eng_err *err) {
    int rc;
    double eps = 1e-5, tg = 160000.0, tl = 10000.0;
    c->arch = ENG_ARCH_MODERNBERT;
    if ((rc = json_int(root, "hidden_size", INT_MIN, &c->hidden, path, err)) ||
        (rc = json_int(root, "num_hidden_layers", INT_MIN, &c->n_layers, path, err)) ||
        (rc = json_int(root, "num_attention_heads", INT_MIN, &c->n_heads, path, err)) ||
        (rc = json_int(root, "intermediate_size", INT_MIN, &c->intermediate, path, err)) ||
        (rc = json_int(root, "vocab_size", INT_MIN, &c->vocab, path, err)) ||
        (rc = json_int(root, "max_position_embeddings", 8192, &c->max_pos, path, err)) ||
        (rc = json_int(root, "pad_token_id", 50283, &c->pad_id, path, err)) ||
        (rc = json_int(root, "global_attn_every_n_layers", 3, &c->global_every, path, err)) ||
        (rc = json_int(root, "local_attention", 128, &c->local_window, path, err)) ||
        (rc = json_pos(root, "norm_eps", 1e-5, &eps, path, err)) ||
        (rc = json_pos(root, "global_rope_theta", 160000.0, &tg, path, err)) ||
        (rc = json_pos(root, "local_rope_theta", tg, &tl, path, err)))
        return rc;
    if (c->global_every < 1) return eng_err_set(err, ENG_FORMAT, "%s: global_attn_every_n_layers must be >= 1", path);
    if (!(eps < 1)) return eng_err_set(err, ENG_FORMAT, "%s: norm_eps must be a number in (0, 1)", path);
    c->ln_eps = (float)eps;
    c->rope_global = (float)tg;
    c->rope_local = (float)tl;
    c->glu = 1;
    c->type_vocab = 0;
    c->pos_offset = 0;
    c->has_pooler = 1; /* the prediction head, confirmed against the weights at load */
    const char *pool = json_string_value(json_object_get(root, "classifier_pooling"));
    if (pool && strcmp(pool, "cls") && strcmp(pool, "mean"))
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: classifier_pooling '%s' is not supported (cls, mean)", path, pool);
    c->pool_mean = pool && !strcmp(pool, "mean");
    const char *ha = json_string_value(json_object_get(root, "classifier_activation"));
    int a = eng_act_from_name(ha ? ha : "gelu");
    if (a < 0) return eng_err_set(err, ENG_UNSUPPORTED, "%s: classifier_activation '%s' is not supported", path, ha);
    c->head_act = (eng_act)a;
    *act = json_string_value(json_object_get(root, "hidden_activation"));
    if (!*act) *act = "gelu";
    if (c->max_pos > ENG_MODERNBERT_MAX_POS)
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: max_position_embeddings %d; at most %d are supported", path,
                           c->max_pos, ENG_MODERNBERT_MAX_POS);
    return 0;
}

/* Parses the text of a config.json (len bytes, need not be NUL-terminated); path names it in messages. */
static int parse_config(const char *text, size_t len, const char *path, eng_config *c, eng_err *err) {
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) return eng_err_set(err, ENG_FORMAT, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    int rc = 0;
    memset(c, 0, sizeof *c);
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (!mt) {
        rc = eng_err_set(err, ENG_FORMAT, "%s: missing 'model_type'", path);
        goto done;
    }
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    const char *act = NULL;
    if (!strcmp(mt, "bert") || !strcmp(mt, "roberta") || !strcmp(mt, "xlm-roberta") || !strcmp(mt, "camembert")) {
        c->arch = !strcmp(mt, "bert") ? ENG_ARCH_BERT : ENG_ARCH_ROBERTA;
        int is_bert = c->arch == ENG_ARCH_BERT;
        if ((rc = json_int(root, "hidden_size", INT_MIN, &c->hidden, path, err)) ||
            (rc = json_int(root, "num_hidden_layers", INT_MIN, &c->n_layers, path, err)) ||
            (rc = json_int(root, "num_attention_heads", INT_MIN, &c->n_heads, path, err)) ||
            (rc = json_int(root, "intermediate_size", INT_MIN, &c->intermediate, path, err)) ||
            (rc = json_int(root, "vocab_size", INT_MIN, &c->vocab, path, err)) ||
            (rc = json_int(root, "max_position_embeddings", DEFAULT_MAX_POS, &c->max_pos, path, err)) ||
            (rc = json_int(root, "type_vocab_size", 2, &c->type_vocab, path, err)) ||
            (rc = json_int(root, "pad_token_id", is_bert ? 0 : 1, &c->pad_id, path, err)))
            goto done;
        json_t *eps = json_object_get(root, "layer_norm_eps");
        double ev = json_is_number(eps) ? json_number_value(eps) : 1e-12;
        if (!(ev > 0 && ev < 1)) { /* 0 or less makes LayerNorm divide by zero or take a negative root */
            rc = eng_err_set(err, ENG_FORMAT, "%s: layer_norm_eps must be a number in (0, 1)", path);
            goto done;
        }
        c->ln_eps = (float)ev;
        act = json_string_value(json_object_get(root, "hidden_act"));
        if (!act) act = "gelu";
        const char *pet = json_string_value(json_object_get(root, "position_embedding_type"));
        if (pet && strcmp(pet, "absolute")) {
            rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: position_embedding_type '%s' is not supported (only 'absolute')",
                             path, pet);
            goto done;
        }
        c->pos_offset = is_bert ? 0 : c->pad_id + 1;
        c->has_pooler = 1; /* confirmed against the weights at load */
    } else if (!strcmp(mt, "distilbert")) {
        c->arch = ENG_ARCH_DISTILBERT;
        if ((rc = json_int(root, "dim", INT_MIN, &c->hidden, path, err)) ||
            (rc = json_int(root, "n_layers", INT_MIN, &c->n_layers, path, err)) ||
            (rc = json_int(root, "n_heads", INT_MIN, &c->n_heads, path, err)) ||
            (rc = json_int(root, "hidden_dim", INT_MIN, &c->intermediate, path, err)) ||
            (rc = json_int(root, "vocab_size", 0, &c->vocab, path, err)) || /* 0: from the weights */
            (rc = json_int(root, "max_position_embeddings", DEFAULT_MAX_POS, &c->max_pos, path, err)) ||
            (rc = json_int(root, "pad_token_id", 0, &c->pad_id, path, err)))
            goto done;
        c->type_vocab = 0;
        c->ln_eps = 1e-12f; /* DistilBERT's LayerNorms are built with eps=1e-12, not from the config */
        act = json_string_value(json_object_get(root, "activation"));
        if (!act) act = "gelu";
        c->has_pooler = 0;
    } else if (!strcmp(mt, "electra") || !strcmp(mt, "deberta-v2")) {
        if ((rc = eng__config_electra_deberta(root, mt, path, c, &act, err))) goto done;
    } else if (!strcmp(mt, "modernbert")) {
        if ((rc = parse_modernbert(root, path, c, &act, err))) goto done;
    } else {
        rc = eng_err_set(err, ENG_UNSUPPORTED,
                         "%s: model_type '%s' is not supported (bert, roberta, xlm-roberta, distilbert, electra, deberta-v2, "
                         "modernbert)",
                         path, mt);
        goto done;
    }
    if (!c->emb_dim) c->emb_dim = c->hidden;
    int a = eng_act_from_name(act);
    if (a < 0) {
        rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: activation '%s' is not supported", path, act);
        goto done;
    }
    c->act = (eng_act)a;
    if (c->hidden <= 0 || c->n_heads <= 0 || c->hidden % c->n_heads || c->n_layers <= 0 || c->intermediate <= 0 ||
        c->vocab < 0 || c->max_pos <= c->pos_offset || c->emb_dim <= 0) {
        rc = eng_err_set(err, ENG_FORMAT,
                         "%s: inconsistent sizes (hidden %d, heads %d, layers %d, intermediate %d, vocab %d, positions %d)",
                         path, c->hidden, c->n_heads, c->n_layers, c->intermediate, c->vocab, c->max_pos);
        goto done;
    }
    if (c->n_layers > ENG_MAX_LAYERS) {
        rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: %d layers; at most %d are supported", path, c->n_layers,
                         ENG_MAX_LAYERS);
        goto done;
    }
    c->head_dim = c->hidden / c->n_heads;
done:
    json_decref(root);
    return rc;
}

/* ---- the set of checkpoint files ---- */

typedef struct {
    eng_st_file **files;
    unsigned char **used; /* per file, per tensor index */
    int n;
} ckpt;

static void ckpt_close(ckpt *k) {
    for (int i = 0; i < k->n; i++) {
        eng__st_close(k->files[i]);
        free(k->used[i]);
    }
    free(k->files);
    free(k->used);
}

static int ckpt_add(ckpt *k, const char *path, eng_err *err) {
    eng_st_file **nf = realloc(k->files, (size_t)(k->n + 1) * sizeof *nf);
    if (!nf) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    k->files = nf;
    unsigned char **nu = realloc(k->used, (size_t)(k->n + 1) * sizeof *nu);
    if (!nu) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    k->used = nu;
    int rc = eng__st_open(path, &k->files[k->n], err);
    if (rc) return rc;
    k->used[k->n] = calloc(eng__st_count(k->files[k->n]) + 1, 1);
    if (!k->used[k->n]) {
        eng__st_close(k->files[k->n]);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    k->n++;
    return 0;
}

static int ckpt_open(const char *dir, ckpt *k, eng_err *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (eng_file_exists(path)) return ckpt_add(k, path, err);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (!eng_file_exists(path)) {
        char bin[PATH_MAX];
        snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
        if (eng_file_exists(bin))
            return eng_err_set(err, ENG_UNSUPPORTED,
                               "%s: only pytorch_model.bin found; convert the model to model.safetensors", dir);
        return eng_err_set(err, ENG_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return eng_err_set(err, ENG_FORMAT, "%s: invalid JSON: %s", path, je.text);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return eng_err_set(err, ENG_FORMAT, "%s: missing 'weight_map'", path);
    }
    /* Open each distinct shard once, in order of first appearance. */
    json_t *seen = json_object();
    int rc = seen ? 0 : eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (rc) break;
        const char *shard = json_string_value(v);
        if (!shard || strchr(shard, '/') || !strcmp(shard, "..")) {
            rc = eng_err_set(err, ENG_FORMAT, "%s: invalid shard name for '%s'", path, key);
            break;
        }
        if (json_object_get(seen, shard)) continue;
        json_object_set_new(seen, shard, json_true());
        char sp[PATH_MAX];
        snprintf(sp, sizeof sp, "%s/%s", dir, shard);
        rc = ckpt_add(k, sp, err);
    }
    json_decref(seen);
    json_decref(root);
    return rc;
}

static const eng_st_tensor *ckpt_find(ckpt *k, const char *name, int mark) {
    for (int i = 0; i < k->n; i++) {
        const eng_st_tensor *t = eng__st_find(k->files[i], name);
        if (t) {
            if (mark) k->used[i][t - eng__st_at(k->files[i], 0)] = 1;
            return t;
        }
    }
    return NULL;
}

/* ---- weight copying ---- */

typedef struct {
    ckpt *k;
    const char *prefix;
    float *arena;
    size_t off, cap;
    float *tmp; /* a backbone Linear in its checkpoint layout, before packing */
    eng_prec prec;
    size_t packed_bytes;
} loader;

static float *take(loader *ld, size_t n) {
    size_t aligned = (n + 15) & ~(size_t)15; /* keep every tensor 64-byte aligned */
    if (ld->off + aligned > ld->cap) return NULL;
    float *p = ld->arena + ld->off;
    ld->off += aligned;
    return p;
}

/* Finds prefix+name (LayerNorm weight/bias also as the old gamma/beta), checks its shape is
 * (d0[, d1]) and converts it into dst. */
static int load_tensor(loader *ld, const char *name, int64_t d0, int64_t d1, float *dst, eng_err *err) {
    char full[ENG_HF_KEY_MAX];
    snprintf(full, sizeof full, "%s%s", ld->prefix, name);
    const eng_st_tensor *t = ckpt_find(ld->k, full, 1);
    if (!t && strstr(name, "LayerNorm.")) {
        char alt[ENG_HF_KEY_MAX];
        size_t n = strlen(full);
        if (n > 7 && !strcmp(full + n - 7, ".weight")) {
            snprintf(alt, sizeof alt, "%.*s.gamma", (int)(n - 7), full);
            t = ckpt_find(ld->k, alt, 1);
        } else if (n > 5 && !strcmp(full + n - 5, ".bias")) {
            snprintf(alt, sizeof alt, "%.*s.beta", (int)(n - 5), full);
            t = ckpt_find(ld->k, alt, 1);
        }
    }
    if (!t) return eng_err_set(err, ENG_FORMAT, "missing tensor '%s'", full);
    return eng__tensor_load_f32(t, d0, d1, NULL, dst, err);
}

static int load_linear(loader *ld, const char *name, int out, int in, float **w, float **b, eng_err *err) {
    char n[ENG_HF_KEY_MAX];
    *w = take(ld, (size_t)out * in);
    *b = take(ld, (size_t)out);
    if (!*w || !*b) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
    snprintf(n, sizeof n, "%s.weight", name);
    int rc = load_tensor(ld, n, out, in, *w, err);
    if (rc) return rc;
    snprintf(n, sizeof n, "%s.bias", name);
    return load_tensor(ld, n, out, 0, *b, err);
}

static int load_norm(loader *ld, const char *name, int dim, float **g, float **b, eng_err *err) {
    char n[ENG_HF_KEY_MAX];
    *g = take(ld, (size_t)dim);
    *b = take(ld, (size_t)dim);
    if (!*g || !*b) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
    snprintf(n, sizeof n, "%s.weight", name);
    int rc = load_tensor(ld, n, dim, 0, *g, err);
    if (rc) return rc;
    snprintf(n, sizeof n, "%s.bias", name);
    return load_tensor(ld, n, dim, 0, *b, err);
}

/* Backbone Linear layers of `out` rows each (q, k and v: three, stacked into one (3H, H) matrix),
 * packed in the model's precision (math/linear.h); their biases stacked the same way. */
static int load_packed(loader *ld, const char *const *names, int n, int out, int in, eng_linear *w, float **b,
                       eng_err *err) {
    *b = take(ld, (size_t)n * out);
    if (!*b) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
    for (int i = 0; i < n; i++) {
        char t[ENG_HF_KEY_MAX];
        snprintf(t, sizeof t, "%s.weight", names[i]);
        int rc = load_tensor(ld, t, out, in, ld->tmp + (size_t)i * out * in, err);
        if (rc) return rc;
        snprintf(t, sizeof t, "%s.bias", names[i]);
        if ((rc = load_tensor(ld, t, out, 0, *b + (size_t)i * out, err))) return rc;
    }
    int rc = eng__linear_pack(w, ld->prec, ld->tmp, n * out, in, in, err);
    if (!rc) ld->packed_bytes += eng__linear_bytes(w);
    return rc;
}

/* Floats of alignment padding the arena adds to its tensors. */
static size_t arena_pad(const eng_config *c) { return (size_t)16 * 40 * ((size_t)c->n_layers + 1); }

/* Floats of the relative tables projected at load (DeBERTa), which the checkpoint does not hold. */
static size_t derived_size(const eng_config *c) {
    return (size_t)2 * c->rel_span * c->hidden * (size_t)(c->c2p + c->p2c) * (size_t)c->n_layers;
}

/* ModernBERT: floats the arena holds beyond the checkpoint's (rotary tables, biases and norm biases
 * a model without them gets as zeros), so the size check below counts only what a checkpoint must hold. */
static size_t arena_extra(const eng_config *c) {
    if (c->arch != ENG_ARCH_MODERNBERT) return 0;
    size_t H = (size_t)c->hidden, I = (size_t)c->intermediate;
    return 4 * (size_t)c->max_pos * (size_t)(c->head_dim / 2) + (8 * H + 2 * I) * (size_t)c->n_layers + 4 * H;
}

static size_t arena_size(const eng_config *c) {
    size_t H = (size_t)c->hidden, I = (size_t)c->intermediate, E = (size_t)c->emb_dim;
    if (c->arch == ENG_ARCH_MODERNBERT) /* embeddings, per layer 2 norms, final norm, head; no positions */
        return (size_t)c->vocab * H + 2 * H + 4 * H * (size_t)c->n_layers + 2 * H + H * H + H + 2 * H +
               arena_extra(c) + arena_pad(c);
    size_t per_layer = 3 * H + H + 2 * H + I + H + 2 * H; /* biases and LayerNorms: the weights are eng_linear */
    size_t n = (size_t)c->vocab * E + (size_t)c->max_pos * E + (size_t)c->type_vocab * E + 2 * (E > H ? E : H) + H * H + H;
    if (E != H) n += H * E + H;                                     /* embedding projection */
    n += (size_t)2 * c->rel_span * H + 2 * H;                       /* DeBERTa's relative table and its LayerNorm */
    if (!c->share_att_key) per_layer += (size_t)(c->c2p + c->p2c) * (H * H + H); /* pos_key_proj, pos_query_proj */
    return n + per_layer * (size_t)c->n_layers + derived_size(c) + arena_pad(c);
}

/* Base-model namespaces: tensors starting with one of these (after the prefix) must be consumed. */
static int in_base_namespace(const eng_config *c, const char *name, const char *prefix) {
    size_t pl = strlen(prefix);
    if (pl) return !strncmp(name, prefix, pl);
    return eng__hf_in_base_namespace(c->arch, name);
}

static int ignorable_buffer(const char *name) {
    size_t n = strlen(name);
    return (n >= 12 && !strcmp(name + n - 12, "position_ids")) || (n >= 14 && !strcmp(name + n - 14, "token_type_ids"));
}

/* out (rows, H) = R (rows, H) W^T + b for W (H, H) staged in float32: a DeBERTa relative table. */
static float *project_rel(loader *ld, const float *R, int rows, int H, const float *W, const float *b, eng_err *err) {
    float *out = take(ld, (size_t)rows * H);
    if (!out) {
        eng_err_set(err, ENG_INTERNAL, "weight arena too small");
        return NULL;
    }
    eng_epilogue ep = {.bias = b, .act = ENG_ACT_IDENTITY};
    eng__gemm(NULL, rows, H, H, R, H, W, H, out, H, &ep);
    return out;
}

/* DeBERTa's per-layer relative tables (rel_q for p2c, rel_k for c2p): through the layer's own
 * query / key weights, still staged in float32 in ld->tmp (share_att_key), or through
 * pos_query_proj / pos_key_proj. */
static int load_rel_layer(loader *ld, const eng_config *c, const eng_weights *w, int l, eng_layer_weights *lw,
                          eng_err *err) {
    int H = c->hidden, rows = 2 * c->rel_span, rc;
    size_t HH = (size_t)H * H;
    if (c->share_att_key) {
        if (c->p2c && !(lw->rel_q = project_rel(ld, w->rel_emb, rows, H, ld->tmp, lw->bqkv, err))) return ENG_INTERNAL;
        if (c->c2p && !(lw->rel_k = project_rel(ld, w->rel_emb, rows, H, ld->tmp + HH, lw->bqkv + H, err))) return ENG_INTERNAL;
        return 0;
    }
    for (int t = 0; t < 2; t++) {
        if (!(t ? c->c2p : c->p2c)) continue;
        char n[ENG_HF_KEY_MAX];
        float *wb, *bb;
        snprintf(n, sizeof n, "%s%d.attention.self.%s", eng__hf_layer_prefix(c->arch), l, t ? "pos_key_proj" : "pos_query_proj");
        if ((rc = load_linear(ld, n, H, H, &wb, &bb, err))) return rc;
        float *r = project_rel(ld, w->rel_emb, rows, H, wb, bb, err);
        if (!r) return ENG_INTERNAL;
        *(t ? &lw->rel_k : &lw->rel_q) = r;
    }
    return 0;
}

/* ELECTRA's and DeBERTa's embedding projection, DeBERTa's relative table and the index of every
 * distance into it. */
static int load_v2_extras(loader *ld, const eng_config *c, eng_weights *w, eng_err *err) {
    int H = c->hidden, E = c->emb_dim, rc;
    if (E != H && c->arch == ENG_ARCH_ELECTRA) {
        if ((rc = load_linear(ld, "embeddings_project", H, E, &w->emb_proj_w, &w->emb_proj_b, err))) return rc;
    } else if (E != H) {
        if (!(w->emb_proj_w = take(ld, (size_t)H * E))) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
        if ((rc = load_tensor(ld, "embeddings.embed_proj.weight", H, E, w->emb_proj_w, err))) return rc;
    }
    if (c->arch != ENG_ARCH_DEBERTA_V2) return 0;
    int rows = 2 * c->rel_span;
    if (!(w->rel_emb = take(ld, (size_t)rows * H))) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
    if ((rc = load_tensor(ld, "encoder.rel_embeddings.weight", rows, H, w->rel_emb, err))) return rc;
    if (c->norm_rel) {
        float *g, *b;
        if ((rc = load_norm(ld, "encoder.LayerNorm", H, &g, &b, err))) return rc;
        eng__layernorm(w->rel_emb, (size_t)rows, (size_t)H, g, b, c->ln_eps);
    }
    if (!c->pos_biased) { /* HF ignores a position table it does not use; so do we */
        char n[ENG_HF_KEY_MAX];
        snprintf(n, sizeof n, "%sembeddings.position_embeddings.weight", ld->prefix);
        ckpt_find(ld->k, n, 1);
    }
    w->rel_idx = malloc((2 * (size_t)c->max_pos - 1) * sizeof *w->rel_idx);
    if (!w->rel_idx) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (int dl = -(c->max_pos - 1); dl <= c->max_pos - 1; dl++)
        w->rel_idx[dl + c->max_pos - 1] = eng__deberta_rel_index(c, dl);
    return 0;
}

/* A LayerNorm whose bias may be absent (ModernBERT's norm_bias false): zeros then. */
static int load_norm_opt(loader *ld, const char *name, int dim, float **g, float **b, eng_err *err) {
    char n[ENG_HF_KEY_MAX], full[ENG_HF_KEY_MAX];
    *g = take(ld, (size_t)dim);
    *b = take(ld, (size_t)dim);
    if (!*g || !*b) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
    snprintf(n, sizeof n, "%s.weight", name);
    int rc = load_tensor(ld, n, dim, 0, *g, err);
    if (rc) return rc;
    snprintf(full, sizeof full, "%s%s.bias", ld->prefix, name);
    if (!ckpt_find(ld->k, full, 0)) {
        memset(*b, 0, (size_t)dim * sizeof **b);
        return 0;
    }
    snprintf(n, sizeof n, "%s.bias", name);
    return load_tensor(ld, n, dim, 0, *b, err);
}

/* One backbone Linear packed in the model's precision; its bias (*b) NULL when the checkpoint has none. */
static int load_packed_opt(loader *ld, const char *name, int out, int in, eng_linear *w, float **b, eng_err *err) {
    char t[ENG_HF_KEY_MAX], full[ENG_HF_KEY_MAX];
    snprintf(t, sizeof t, "%s.weight", name);
    int rc = load_tensor(ld, t, out, in, ld->tmp, err);
    if (rc) return rc;
    *b = NULL;
    snprintf(full, sizeof full, "%s%s.bias", ld->prefix, name);
    if (ckpt_find(ld->k, full, 0)) {
        if (!(*b = take(ld, (size_t)out))) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
        snprintf(t, sizeof t, "%s.bias", name);
        if ((rc = load_tensor(ld, t, out, 0, *b, err))) return rc;
    }
    rc = eng__linear_pack(w, ld->prec, ld->tmp, out, in, in, err);
    if (!rc) ld->packed_bytes += eng__linear_bytes(w);
    return rc;
}

/* ModernBERT: tok_embeddings + norm, layers.{i}.{attn_norm (not on layer 0), attn.Wqkv, attn.Wo, mlp_norm,
 * mlp.Wi, mlp.Wo}, final_norm, and the prediction head (head.dense, head.norm; outside the "model."
 * prefix) when present; the rotary cos / sin tables computed in double for both thetas. */
static int load_tensors_modernbert(loader *ld, eng_config *c, eng_weights *w, eng_err *err) {
    int H = c->hidden, I = c->intermediate, d2 = c->head_dim / 2, rc;
    if (c->head_dim % 2) /* rotary pairs dimension i with i + head_dim / 2 */
        return eng_err_set(err, ENG_FORMAT, "head size %d (hidden %d / %d heads) must be even for rotary embeddings",
                           c->head_dim, H, c->n_heads);
    w->word_emb = take(ld, (size_t)c->vocab * H);
    if (!w->word_emb) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
    if ((rc = load_tensor(ld, "embeddings.tok_embeddings.weight", c->vocab, H, w->word_emb, err)) ||
        (rc = load_norm_opt(ld, "embeddings.norm", H, &w->emb_ln_g, &w->emb_ln_b, err)))
        return rc;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (int l = 0; l < c->n_layers; l++) {
        eng_layer_weights *lw = &w->layers[l];
        char n[6][ENG_HF_KEY_MAX];
        static const char *const part[6] = {"attn_norm", "attn.Wqkv", "attn.Wo", "mlp_norm", "mlp.Wi", "mlp.Wo"};
        for (int i = 0; i < 6; i++) snprintf(n[i], sizeof n[i], "layers.%d.%s", l, part[i]);
        if ((l > 0 && (rc = load_norm_opt(ld, n[0], H, &lw->ln1_g, &lw->ln1_b, err))) ||
            (rc = load_packed_opt(ld, n[1], 3 * H, H, &lw->wqkv, &lw->bqkv, err)) ||
            (rc = load_packed_opt(ld, n[2], H, H, &lw->wo, &lw->bo, err)) ||
            (rc = load_norm_opt(ld, n[3], H, &lw->ln2_g, &lw->ln2_b, err)) ||
            (rc = load_packed_opt(ld, n[4], 2 * I, H, &lw->w1, &lw->b1, err)) ||
            (rc = load_packed_opt(ld, n[5], H, I, &lw->w2, &lw->b2, err)))
            return rc;
    }
    if ((rc = load_norm_opt(ld, "final_norm", H, &w->final_ln_g, &w->final_ln_b, err))) return rc;
    /* the prediction head sits outside the encoder's prefix: read it with none */
    const char *prefix = ld->prefix;
    ld->prefix = "";
    c->has_pooler = ckpt_find(ld->k, "head.dense.weight", 0) != NULL;
    if (c->has_pooler) {
        w->pooler_w = take(ld, (size_t)H * H);
        if (!w->pooler_w) rc = eng_err_set(err, ENG_INTERNAL, "weight arena too small");
        if (!rc) rc = load_tensor(ld, "head.dense.weight", H, H, w->pooler_w, err);
        if (!rc && ckpt_find(ld->k, "head.dense.bias", 0)) {
            if (!(w->pooler_b = take(ld, (size_t)H))) rc = eng_err_set(err, ENG_INTERNAL, "weight arena too small");
            if (!rc) rc = load_tensor(ld, "head.dense.bias", H, 0, w->pooler_b, err);
        }
        if (!rc) rc = load_norm_opt(ld, "head.norm", H, &w->head_ln_g, &w->head_ln_b, err);
    }
    ld->prefix = prefix;
    if (rc) return rc;
    size_t tab = (size_t)c->max_pos * (size_t)d2;
    w->rope_cos = take(ld, 2 * tab);
    w->rope_sin = take(ld, 2 * tab);
    if (!w->rope_cos || !w->rope_sin) return eng_err_set(err, ENG_INTERNAL, "weight arena too small");
    for (int k = 0; k < 2; k++) {
        double theta = k ? c->rope_local : c->rope_global;
        for (int i = 0; i < d2; i++) {
            double inv = pow(theta, -2.0 * i / (double)c->head_dim);
            for (int p = 0; p < c->max_pos; p++) {
                w->rope_cos[k * tab + (size_t)p * d2 + i] = (float)cos(p * inv);
                w->rope_sin[k * tab + (size_t)p * d2 + i] = (float)sin(p * inv);
            }
        }
    }
    ckpt *k = ld->k;
    for (int i = 0; i < k->n; i++)
        for (size_t j = 0; j < eng__st_count(k->files[i]); j++) {
            const char *name = eng__st_at(k->files[i], j)->name;
            if (k->used[i][j] || !in_base_namespace(c, name, ld->prefix)) continue;
            return eng_err_set(err, ENG_FORMAT, "unexpected tensor '%s' (checkpoint does not match config: %d layers, hidden %d)",
                               name, c->n_layers, H);
        }
    return 0;
}

/* Takes every tensor of the checkpoint into the arena; checks none of the base model is left over. */
static int load_tensors(loader *ld, eng_config *c, eng_weights *w, eng_err *err) {
    ckpt *k = ld->k;
    const char *prefix = ld->prefix;
    int H = c->hidden, I = c->intermediate, E = c->emb_dim, rc;
    if (c->arch == ENG_ARCH_MODERNBERT) return load_tensors_modernbert(ld, c, w, err);
    w->word_emb = take(ld, (size_t)c->vocab * E);
    if ((rc = load_tensor(ld, "embeddings.word_embeddings.weight", c->vocab, E, w->word_emb, err))) return rc;
    if (c->arch != ENG_ARCH_DEBERTA_V2 || c->pos_biased) {
        w->pos_emb = take(ld, (size_t)c->max_pos * E);
        if ((rc = load_tensor(ld, "embeddings.position_embeddings.weight", c->max_pos, E, w->pos_emb, err))) return rc;
    }
    if (c->type_vocab > 0) {
        w->type_emb = take(ld, (size_t)c->type_vocab * E);
        if ((rc = load_tensor(ld, "embeddings.token_type_embeddings.weight", c->type_vocab, E, w->type_emb, err)))
            return rc;
    }
    if ((rc = load_norm(ld, "embeddings.LayerNorm", c->arch == ENG_ARCH_ELECTRA ? E : H, &w->emb_ln_g, &w->emb_ln_b, err)) ||
        (rc = load_v2_extras(ld, c, w, err)))
        return rc;
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (int l = 0; l < c->n_layers; l++) {
        eng_layer_weights *lw = &w->layers[l];
        char lin[ENG_LIN_COUNT][ENG_HF_KEY_MAX], norm[ENG_NORM_COUNT][ENG_HF_KEY_MAX];
        for (int i = 0; i < ENG_LIN_COUNT; i++)
            snprintf(lin[i], sizeof lin[i], "%s%d.%s", eng__hf_layer_prefix(c->arch), l,
                     eng__hf_linear_path(c->arch, (eng_lin)i));
        for (int i = 0; i < ENG_NORM_COUNT; i++)
            snprintf(norm[i], sizeof norm[i], "%s%d.%s", eng__hf_layer_prefix(c->arch), l,
                     eng__hf_norm_path(c->arch, (eng_norm)i));
        const char *qkv[3] = {lin[ENG_LIN_Q], lin[ENG_LIN_K], lin[ENG_LIN_V]};
        const char *o[1] = {lin[ENG_LIN_O]}, *fc1[1] = {lin[ENG_LIN_I]}, *fc2[1] = {lin[ENG_LIN_D]};
        if ((rc = load_packed(ld, qkv, 3, H, H, &lw->wqkv, &lw->bqkv, err)) ||
            (c->arch == ENG_ARCH_DEBERTA_V2 && (rc = load_rel_layer(ld, c, w, l, lw, err))) ||
            (rc = load_packed(ld, o, 1, H, H, &lw->wo, &lw->bo, err)) ||
            (rc = load_norm(ld, norm[ENG_NORM_ATTN], H, &lw->ln1_g, &lw->ln1_b, err)) ||
            (rc = load_packed(ld, fc1, 1, I, H, &lw->w1, &lw->b1, err)) ||
            (rc = load_packed(ld, fc2, 1, H, I, &lw->w2, &lw->b2, err)) ||
            (rc = load_norm(ld, norm[ENG_NORM_FFN], H, &lw->ln2_g, &lw->ln2_b, err)))
            return rc;
    }
    if (c->has_pooler) {
        char n[ENG_HF_KEY_MAX];
        snprintf(n, sizeof n, "%spooler.dense.weight", prefix);
        if (ckpt_find(k, n, 0)) {
            if ((rc = load_linear(ld, "pooler.dense", H, H, &w->pooler_w, &w->pooler_b, err))) return rc;
        } else {
            c->has_pooler = 0; /* e.g. RobertaModel(add_pooling_layer=False) */
        }
    }
    for (int i = 0; i < k->n; i++)
        for (size_t j = 0; j < eng__st_count(k->files[i]); j++) {
            const char *name = eng__st_at(k->files[i], j)->name;
            if (k->used[i][j] || ignorable_buffer(name) || !in_base_namespace(c, name, prefix)) continue;
            return eng_err_set(err, ENG_FORMAT, "unexpected tensor '%s' (checkpoint does not match config: %d layers, hidden %d)",
                               name, c->n_layers, H);
        }
    return 0;
}

static int load_weights(eng_model *m, ckpt *k, eng_prec prec, eng_err *err) {
    eng_config *c = &m->cfg;
    const char *prefix = "";
    const char *cands[] = {"", eng__hf_base_prefix(c->arch)};
    const char *emb = c->arch == ENG_ARCH_MODERNBERT ? "embeddings.tok_embeddings.weight" : "embeddings.word_embeddings.weight";
    int found = 0;
    for (int i = 0; i < 2 && !found; i++) {
        char n[ENG_HF_KEY_MAX];
        snprintf(n, sizeof n, "%s%s", cands[i], emb);
        if (ckpt_find(k, n, 0)) {
            prefix = cands[i];
            found = 1;
        }
    }
    if (!found) return eng_err_set(err, ENG_FORMAT, "missing tensor '%s' (also tried prefix '%s')", emb, cands[1]);
    if (c->vocab == 0) { /* config without vocab_size: take it from the embedding table */
        char n[ENG_HF_KEY_MAX];
        snprintf(n, sizeof n, "%sembeddings.word_embeddings.weight", prefix);
        const eng_st_tensor *t = ckpt_find(k, n, 0);
        if (t->ndim != 2 || t->shape[0] <= 0 || t->shape[0] > INT_MAX / 4)
            return eng_err_set(err, ENG_SHAPE, "tensor '%s' is not a (vocab, hidden) matrix", n);
        c->vocab = (int)t->shape[0];
    }
    m->arena_floats = arena_size(c);
    size_t H3 = (size_t)3 * c->hidden, I1 = (size_t)c->intermediate * (c->glu ? 2 : 1),
           staging = (H3 > I1 ? H3 : I1) * (size_t)c->hidden;
    /* Everything allocated below is sized from config.json, and the float32 arena and the staging
     * buffer each hold a subset of the checkpoint's values. A config that implies more floats than
     * the checkpoint holds is refused before any of it is allocated: a hostile
     * max_position_embeddings of 10^8 asked for gigabytes that a shape check would refuse later. */
    size_t total = 0;
    for (int i = 0; i < k->n; i++)
        for (size_t j = 0; j < eng__st_count(k->files[i]); j++) {
            int64_t n = eng__st_at(k->files[i], j)->numel;
            total = n > 0 && (uint64_t)n < SIZE_MAX - total ? total + (size_t)n : (n > 0 ? SIZE_MAX : total);
        }
    if (m->arena_floats - arena_pad(c) - derived_size(c) - arena_extra(c) > total || staging > total)
        return eng_err_set(err, ENG_SHAPE,
                           "config.json implies %zu weights (hidden %d, intermediate %d, vocab %d, positions %d, token "
                           "types %d) but the checkpoint holds %zu values",
                           m->arena_floats - arena_pad(c) > staging ? m->arena_floats - arena_pad(c) : staging, c->hidden,
                           c->intermediate, c->vocab, c->max_pos, c->type_vocab, total);
    m->arena = eng__alloc_aligned(m->arena_floats * sizeof(float));
    if (!m->arena) return eng_err_set(err, ENG_NO_MEMORY, "cannot allocate %zu MB of weights", m->arena_floats / 262144);
    loader ld = {k, prefix, m->arena, 0, m->arena_floats, malloc(sizeof(float) * staging), prec, 0};
    if (!ld.tmp) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    int rc = load_tensors(&ld, c, &m->w, err);
    free(ld.tmp);
    m->packed_bytes = ld.packed_bytes;
    return rc;
}


/* ---- precision ---- */

_Static_assert((int)ENG_PRECISION_FP32 == (int)ENG_PREC_F32 && (int)ENG_PRECISION_BF16 == (int)ENG_PREC_BF16 &&
                   (int)ENG_PRECISION_INT8 == (int)ENG_PREC_INT8,
               "the public precision names the kernels' values");

int eng_precision_parse(const char *name) { return eng__prec_parse(name); }
const char *eng_precision_name(eng_precision p) { return eng__prec_name((eng_prec)p); }

eng_model_params eng_model_default_params(void) {
    return (eng_model_params){.precision = ENG_PRECISION_FP32, .allow_emulated = 0};
}

int eng_model_json_precision(const char *dir, eng_precision *out, eng_err *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.json", dir);
    if (!eng_file_exists(path)) return 0;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return eng_err_set(err, ENG_FORMAT, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    int rc = 0;
    json_t *v = json_object_get(root, "precision");
    if (!json_is_object(root)) {
        rc = eng_err_set(err, ENG_FORMAT, "%s: not a JSON object", path);
    } else if (v && !json_is_null(v)) {
        int p = json_is_string(v) ? eng__prec_parse(json_string_value(v)) : -1;
        if (p < 0)
            rc = eng_err_set(err, ENG_FORMAT, "%s: 'precision' must be \"fp32\", \"bf16\" or \"int8\"", path);
        else
            *out = (eng_precision)p;
    }
    json_decref(root);
    return rc;
}

eng_model_precision_info eng_model_precision(const eng_model *m) {
    return (eng_model_precision_info){.precision = (eng_precision)m->prec,
                                      .name = eng__prec_name(m->prec),
                                      .kernel = eng__lp_kernel(m->prec),
                                      .packed_bytes = m->packed_bytes};
}

/* The pooler's and the embeddings' projection's weights packed once for the row products over a
 * batch (eng__gemm_rows_p): packing them per call cost a one-row pooler ~170 us of a 768 x 768 operand,
 * on every sequence. The arena's plain copies stay (the arena is one block). */
static int pack_rows_weights(eng_model *m, eng_err *err) {
    const eng_config *c = &m->cfg;
    struct {
        const float *w;
        int N, K;
        float **out;
    } v[2] = {{m->w.pooler_w, c->hidden, c->hidden, &m->w.pooler_p},
              {m->w.emb_proj_w, c->hidden, c->emb_dim, &m->w.emb_proj_p}};
    for (int i = 0; i < 2; i++) {
        if (!v[i].w || !eng__gemm_rows_packs(v[i].N)) continue;
        size_t bytes = eng__packed_floats(v[i].N, v[i].K) * sizeof(float);
        float *p = eng__alloc_aligned(bytes);
        if (!p) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (packing the pooler)");
        eng__pack_strided(v[i].w, v[i].N, v[i].K, (size_t)v[i].K, 1, 1.0f, p);
        *v[i].out = p;
        m->rows_bytes += bytes;
    }
    return 0;
}

int eng_model_load(const char *dir, eng_model **out, eng_err *err) {
    eng_model_params p = eng_model_default_params();
    return eng_model_load_params(dir, &p, out, err);
}

int eng_model_load_params(const char *dir, const eng_model_params *p, eng_model **out, eng_err *err) {
    *out = NULL;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    int rc = eng_file_read(path, CONFIG_MAX_BYTES, &text, &len, err);
    if (!rc) rc = eng_model_load_config(dir, text, len, p, out, err);
    free(text);
    return rc;
}

int eng_model_load_config(const char *dir, const char *config_json, size_t len, const eng_model_params *p,
                          eng_model **out, eng_err *err) {
    *out = NULL;
    eng_prec prec = (eng_prec)p->precision;
    if (prec != ENG_PREC_F32 && prec != ENG_PREC_BF16 && prec != ENG_PREC_INT8)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: unknown precision %d", dir, (int)p->precision);
    if (!p->allow_emulated) {
        int rc = eng__prec_check(prec, err);
        if (rc) {
            eng_err_prefix(err, "%s", dir);
            return rc;
        }
    }
    eng_model *m = calloc(1, sizeof *m);
    if (!m) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    m->prec = prec;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = parse_config(config_json, len, path, &m->cfg, err);
    if (rc) {
        eng_model_free(m);
        return rc;
    }
    ckpt k = {0};
    rc = ckpt_open(dir, &k, err);
    if (!rc) {
        rc = load_weights(m, &k, prec, err);
        if (rc) eng_err_prefix(err, "%s", dir);
    }
    ckpt_close(&k);
    if (rc) {
        eng_model_free(m);
        return rc;
    }
    rc = pack_rows_weights(m, err);
    if (rc) {
        eng_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void eng_model_free(eng_model *m) {
    if (!m) return;
    if (m->w.layers)
        for (int l = 0; l < m->cfg.n_layers; l++) {
            eng_layer_weights *lw = &m->w.layers[l];
            eng__linear_release(&lw->wqkv);
            eng__linear_release(&lw->wo);
            eng__linear_release(&lw->w1);
            eng__linear_release(&lw->w2);
        }
    free(m->w.layers);
    free(m->w.rel_idx);
    eng__free_aligned(m->w.pooler_p);
    eng__free_aligned(m->w.emb_proj_p);
    eng__free_aligned(m->arena);
    free(m);
}

const eng_config *eng_model_config(const eng_model *m) { return &m->cfg; }
const eng_weights *eng__model_weights(const eng_model *m) { return &m->w; }
size_t eng_model_bytes(const eng_model *m) {
    return m->arena_floats * sizeof(float) + m->packed_bytes + m->rows_bytes;
}
