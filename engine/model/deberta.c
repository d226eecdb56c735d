/* deberta.c - ELECTRA's and DeBERTa-v2/v3's configs, and DeBERTa's disentangled attention.
 *
 * ELECTRA (Clark et al. 2020) is BERT with embeddings of width embedding_size E, LayerNorm'd at E
 * and projected to H (electra.embeddings_project); nothing here runs for it but its config.
 *
 * DeBERTa (He et al. 2021; v3 keeps v2's encoder) scores query i against key j as
 *     s(i, j) = (q_i . k_j + q_i . Kr[r(i, j)] + k_j . Qr[r(i, j)]) / sqrt(d * (1 + #terms))
 * where the c2p term uses Kr and the p2c term Qr, both the layer's key / query projections of the
 * LayerNorm'd relative table (or pos_key_proj / pos_query_proj without share_att_key), computed
 * once at load in float32 (model.c), and r(i, j) = clamp(bucket(i - j) + span, 0, 2 span - 1)
 * with log buckets beyond position_buckets / 2. r depends only on i - j and grows with it, so one
 * (segment, head) task needs rows r(-(L-1)) .. r(L-1) of each table: it multiplies its queries
 * and keys by that slice (two small GEMMs) and gathers. The index table is built at load
 * (eng__deberta_rel_index for every distance the model takes).
 *
 * A task's LoRA or (IA)^3 on the query or key projection changes Qr and Kr too (the module a PEFT
 * or AdapterHub LoRA wraps is called on the relative table as well), so such a task gets its own
 * tables for the pass: the base ones plus its delta. */
#include "model/deberta.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/blas.h"
#include "math/kernels.h"
#include "model/weights.h"
#include "model/adapter.h"
#include "model/layer.h"

/* ---- config.json ---- */

static int get_int(json_t *o, const char *k, int def, int lo, int *out, const char *path, eng_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        if (def == INT_MIN) return eng_err_set(err, ENG_FORMAT, "%s: missing integer field '%s'", path, k);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > INT_MAX / 4)
        return eng_err_set(err, ENG_FORMAT, "%s: field '%s' must be an integer >= %d", path, k, lo);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_bool(json_t *o, const char *k, int def, uint8_t *out, const char *path, eng_err *err) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = (uint8_t)def;
        return 0;
    }
    if (!json_is_boolean(v)) return eng_err_set(err, ENG_FORMAT, "%s: field '%s' must be true or false", path, k);
    *out = json_is_true(v);
    return 0;
}

/* pos_att_type: a list ["p2c", "c2p"] or the older "p2c|c2p" string. */
static int parse_att_types(json_t *v, eng_config *c, const char *path, eng_err *err) {
    char buf[64];
    const char *items[8];
    int n = 0;
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        snprintf(buf, sizeof buf, "%s", json_string_value(v));
        for (char *save = NULL, *t = strtok_r(buf, "|", &save); t && n < 8; t = strtok_r(NULL, "|", &save)) items[n++] = t;
    } else if (json_is_array(v) && json_array_size(v) <= 8) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            items[n] = json_string_value(json_array_get(v, i));
            if (!items[n++]) return eng_err_set(err, ENG_FORMAT, "%s: 'pos_att_type' must list strings", path);
        }
    } else {
        return eng_err_set(err, ENG_FORMAT, "%s: 'pos_att_type' must be a list of strings", path);
    }
    for (int i = 0; i < n; i++) {
        const char *t = items[i];
        while (*t == ' ') t++;
        if (!strncmp(t, "c2p", 3)) c->c2p = 1;
        else if (!strncmp(t, "p2c", 3)) c->p2c = 1;
        else return eng_err_set(err, ENG_UNSUPPORTED, "%s: pos_att_type '%s' is not supported (c2p, p2c)", path, t);
    }
    return 0;
}

int eng__config_electra_deberta(json_t *root, const char *mt, const char *path, eng_config *c, const char **act,
                                eng_err *err) {
    int deb = !strcmp(mt, "deberta-v2"), rc;
    c->arch = deb ? ENG_ARCH_DEBERTA_V2 : ENG_ARCH_ELECTRA;
    if ((rc = get_int(root, "hidden_size", INT_MIN, 0, &c->hidden, path, err)) ||
        (rc = get_int(root, "num_hidden_layers", INT_MIN, 0, &c->n_layers, path, err)) ||
        (rc = get_int(root, "num_attention_heads", INT_MIN, 0, &c->n_heads, path, err)) ||
        (rc = get_int(root, "intermediate_size", INT_MIN, 0, &c->intermediate, path, err)) ||
        (rc = get_int(root, "vocab_size", INT_MIN, 0, &c->vocab, path, err)) ||
        (rc = get_int(root, "max_position_embeddings", 512, 0, &c->max_pos, path, err)) ||
        (rc = get_int(root, "type_vocab_size", deb ? 0 : 2, 0, &c->type_vocab, path, err)) ||
        (rc = get_int(root, "pad_token_id", 0, 0, &c->pad_id, path, err)) ||
        /* ElectraConfig's default embedding_size is 128; DeBERTa's is hidden_size */
        (rc = get_int(root, "embedding_size", deb ? c->hidden : 128, 1, &c->emb_dim, path, err)))
        return rc;
    json_t *eps = json_object_get(root, "layer_norm_eps");
    double ev = json_is_number(eps) ? json_number_value(eps) : deb ? 1e-7 : 1e-12;
    if (!(ev > 0 && ev < 1)) return eng_err_set(err, ENG_FORMAT, "%s: layer_norm_eps must be a number in (0, 1)", path);
    c->ln_eps = (float)ev;
    *act = json_string_value(json_object_get(root, "hidden_act"));
    if (!*act) *act = "gelu";
    c->has_pooler = 0; /* ELECTRA has none; DeBERTa's ContextPooler belongs to its task heads */
    c->pos_offset = 0;
    if (!deb) {
        const char *pet = json_string_value(json_object_get(root, "position_embedding_type"));
        if (pet && strcmp(pet, "absolute"))
            return eng_err_set(err, ENG_UNSUPPORTED, "%s: position_embedding_type '%s' is not supported (only 'absolute')",
                               path, pet);
        c->pos_biased = 1;
        return 0;
    }
    uint8_t rel = 0;
    int conv = 0, head_size = 0;
    if ((rc = get_bool(root, "relative_attention", 0, &rel, path, err)) ||
        (rc = get_bool(root, "position_biased_input", 1, &c->pos_biased, path, err)) ||
        (rc = get_bool(root, "share_att_key", 0, &c->share_att_key, path, err)) ||
        (rc = get_int(root, "conv_kernel_size", 0, 0, &conv, path, err)) ||
        (rc = get_int(root, "attention_head_size", 0, 0, &head_size, path, err)) ||
        (rc = parse_att_types(json_object_get(root, "pos_att_type"), c, path, err)))
        return rc;
    json_t *mr = json_object_get(root, "max_relative_positions"), *pb = json_object_get(root, "position_buckets");
    long long max_rel = json_is_integer(mr) ? json_integer_value(mr) : -1, buckets = json_is_integer(pb) ? json_integer_value(pb) : -1;
    if (!rel)
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: DeBERTa without relative_attention is not supported", path);
    if (conv > 0)
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: DeBERTa's convolution layer (conv_kernel_size %d) is not supported",
                           path, conv);
    if (head_size && c->n_heads > 0 && head_size * c->n_heads != c->hidden)
        return eng_err_set(err, ENG_UNSUPPORTED, "%s: attention_head_size %d times %d heads is not hidden_size %d", path,
                           head_size, c->n_heads, c->hidden);
    const char *norm = json_string_value(json_object_get(root, "norm_rel_ebd"));
    c->norm_rel = norm && strstr(norm, "layer_norm") != NULL;
    c->rel_max = max_rel >= 1 && max_rel <= 1 << 20 ? (int)max_rel : c->max_pos;
    c->rel_buckets = buckets > 0 && buckets <= 1 << 20 ? (int)buckets : 0;
    c->rel_span = c->rel_buckets ? c->rel_buckets : c->rel_max;
    if (c->rel_buckets && (c->rel_buckets < 2 || c->rel_max - 1 <= c->rel_buckets / 2))
        return eng_err_set(err, ENG_FORMAT, "%s: position_buckets %d does not fit max_relative_positions %d", path,
                           c->rel_buckets, c->rel_max);
    if (c->rel_span <= 0) return eng_err_set(err, ENG_FORMAT, "%s: no relative positions", path);
    return 0;
}

/* ---- relative positions ---- */

/* make_log_bucket_position for one distance, in float32 as Hugging Face computes it, so that the
 * ceil lands on the same integer as the PyTorch model. */
static int log_bucket(int rel, int bucket_size, int max_position) {
    int mid = bucket_size / 2;
    int sign = (rel > 0) - (rel < 0);
    int a = rel < mid && rel > -mid ? mid - 1 : abs(rel);
    if (a <= mid) return rel;
    float ratio = (float)a / (float)mid;
    float denom = logf((float)((double)(max_position - 1) / (double)mid));
    float lp = ceilf(logf(ratio) / denom * (float)(mid - 1)) + (float)mid;
    return (int)lp * sign;
}

int eng__deberta_rel_index(const eng_config *c, int delta) {
    int b = c->rel_buckets > 0 && c->rel_max > 0 ? log_bucket(delta, c->rel_buckets, c->rel_max) : delta;
    b += c->rel_span;
    return b < 0 ? 0 : b > 2 * c->rel_span - 1 ? 2 * c->rel_span - 1 : b;
}

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

static int slice_rows(const eng_config *c, int L) {
    int r = 2 * L - 1;
    return r < 2 * c->rel_span ? r : 2 * c->rel_span;
}

size_t eng__deberta_scores_floats(const eng_config *c, int max_len) {
    size_t L = (size_t)max_len, R = (size_t)slice_rows(c, max_len), d = (size_t)c->head_dim;
    size_t pa = eng__packed_floats(max_len, (int)d), pb = eng__packed_floats((int)d, max_len);
    return al16(L * L) + 2 * al16(L * R) + (pa > pb ? pa : pb);
}

/* ---- attention ---- */

typedef struct {
    const eng_model *m;
    const float *qkv;
    float *ctx;
    const eng_seg *segs;
    const float *const *rq; /* (n_segs): each segment's (2 span, H) query-projected table, or NULL (no p2c) */
    const float *const *rk; /* (n_segs): key-projected table, or NULL (no c2p) */
    float scale;
    float **scores;
} deb_job;

static void deb_task(void *arg, int task, int worker) {
    deb_job *j = arg;
    const eng_config *c = &j->m->cfg;
    const int32_t *idx = j->m->w.rel_idx + (c->max_pos - 1); /* idx[delta] */
    int H = c->hidden, d = c->head_dim, ld = 3 * H, si = task / c->n_heads, h = task % c->n_heads;
    const eng_seg *sg = &j->segs[si];
    int L = sg->len, lo = idx[-(L - 1)], R = idx[L - 1] - lo + 1;
    const float *q = j->qkv + (size_t)sg->start * ld + (size_t)h * d, *k = q + H, *v = q + 2 * H;
    const float *rq = j->rq[si], *rk = j->rk[si];
    float *s = j->scores[worker], *cb = s + al16((size_t)L * L), *pb = cb + al16((size_t)L * R), *pk = pb + al16((size_t)L * R);
    float *out = j->ctx + (size_t)sg->start * H + (size_t)h * d;
    eng__pack_strided(k, L, d, (size_t)ld, 1, j->scale, pk);
    eng__pgemm(NULL, L, L, d, q, ld, pk, s, L, NULL);
    if (rk) eng__sgemm_nt(L, R, d, j->scale, q, ld, rk + (size_t)lo * H + (size_t)h * d, H, cb, R); /* c2p */
    if (rq) eng__sgemm_nt(L, R, d, j->scale, k, ld, rq + (size_t)lo * H + (size_t)h * d, H, pb, R); /* p2c */
    for (int i = 0; i < L; i++) {
        float *si_row = s + (size_t)i * L;
        for (int jj = 0; jj < L; jj++) {
            int t = idx[i - jj] - lo;
            float add = 0;
            if (rk) add += cb[(size_t)i * R + t];
            if (rq) add += pb[(size_t)jj * R + t];
            si_row[jj] += add;
        }
        eng__softmax_row(si_row, (size_t)L);
    }
    eng__pack_strided(v, d, L, 1, (size_t)ld, 1.0f, pk);
    eng__pgemm(NULL, L, d, L, s, L, pk, out, H, NULL);
}

static int touches_rel(const eng_task_layer *a) {
    return a && (a->lora[ENG_LIN_Q] || a->lora[ENG_LIN_K] || a->ia3[ENG_LIN_Q] || a->ia3[ENG_LIN_K]);
}

/* base (2 span, H) plus a task's LoRA and (IA)^3 of Linear lin, computed on R; NULL on no memory. */
static float *task_table(eng_state *st, const eng_model *m, const float *base, const eng_task_layer *a, eng_lin lin,
                         eng_err *err) {
    const eng_config *c = &m->cfg;
    int rows = 2 * c->rel_span, H = c->hidden;
    float *t = malloc((size_t)rows * H * sizeof *t);
    if (!t) {
        eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    memcpy(t, base, (size_t)rows * H * sizeof *t);
    eng_seg all = {0, rows}; /* the module sees the table as one sequence (a gated LoRA's mean) */
    if (a->lora[lin] && eng__lora_add(st, a->lora[lin], m->w.rel_emb, H, rows, t, H, 0, &all, 1, err)) {
        free(t);
        return NULL;
    }
    if (a->ia3[lin]) eng__ia3_scale(a->ia3[lin], t, H, rows);
    return t;
}

int eng__deberta_attention(const eng_model *m, eng_state *st, int l, const float *qkv, float *ctx, const eng_seg *segs,
                           int n_segs, const eng_task_layer *const *seg_ad, eng_err *err) {
    const eng_config *c = &m->cfg;
    const eng_layer_weights *w = &m->w.layers[l];
    const float **tab = malloc(2 * (size_t)n_segs * sizeof *tab);
    float **own = calloc(2 * (size_t)n_segs, sizeof *own); /* tables this pass made, to free */
    int rc = tab && own ? 0 : eng_err_set(err, ENG_NO_MEMORY, "out of memory"), n_own = 0;
    for (int s = 0; !rc && s < n_segs; s++) {
        const eng_task_layer *a = seg_ad ? seg_ad[s] : NULL;
        tab[s] = w->rel_q;
        tab[n_segs + s] = w->rel_k;
        if (a && a->prefix_len) {
            rc = eng_err_set(err, ENG_UNSUPPORTED, "prefix tuning is not supported on DeBERTa (relative attention)");
            break;
        }
        if (!touches_rel(a) || !c->share_att_key) continue;
        int prev = s - 1; /* segments of one task are adjacent: reuse its tables */
        if (prev >= 0 && seg_ad[prev] == a) {
            tab[s] = tab[prev];
            tab[n_segs + s] = tab[n_segs + prev];
            continue;
        }
        if (w->rel_q && (a->lora[ENG_LIN_Q] || a->ia3[ENG_LIN_Q])) {
            if (!(own[n_own] = task_table(st, m, w->rel_q, a, ENG_LIN_Q, err))) rc = err->code ? err->code : ENG_NO_MEMORY;
            else tab[s] = own[n_own++];
        }
        if (!rc && w->rel_k && (a->lora[ENG_LIN_K] || a->ia3[ENG_LIN_K])) {
            if (!(own[n_own] = task_table(st, m, w->rel_k, a, ENG_LIN_K, err))) rc = err->code ? err->code : ENG_NO_MEMORY;
            else tab[n_segs + s] = own[n_own++];
        }
    }
    if (!rc) {
        deb_job j = {m, qkv, ctx, segs, tab, tab + n_segs,
                     1.0f / sqrtf((float)c->head_dim * (float)(1 + c->c2p + c->p2c)), st->scores};
        eng__pool_run(st->pool, n_segs * c->n_heads, deb_task, &j);
    }
    for (int i = 0; i < n_own; i++) free(own[i]);
    free(own);
    free((void *)tab);
    return rc;
}
