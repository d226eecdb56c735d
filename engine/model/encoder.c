/* encoder.c - the transformer encoder forward pass over packed rows.
 *
 * One layer, post-LayerNorm as BERT, RoBERTa and DistilBERT all are:
 *     qkv = x Wqkv^T + bqkv                      one GEMM for the three projections
 *     ctx = softmax(Q K^T / sqrt(d)) V           per sequence (segment) and head
 *     h   = LN1(ctx Wo^T + bo + x)
 *     x   = LN2(act(h W1^T + b1) W2^T + b2 + h)
 * Bias, activation and residual are fused into each GEMM's epilogue (math/blas.h). The four
 * backbone products run in the model's precision (eng__linear_run, math/linear.h) with the
 * activations converted into the state's lin_ws; everything else is float32. Because rows are
 * packed without padding there is no attention mask: a segment's queries see only its own keys.
 * Attention runs as (segment, head) tasks on the pool, each with single-threaded BLAS calls on
 * strided views of qkv, into per-worker score buffers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/state.h"
#include "math/blas.h"
#include "math/linear.h"
#include "math/rows.h"
#include "model/deberta.h"
#include "model/encoder.h"
#include "model/modernbert.h"
#include "model/weights.h"
#include "model/adapter.h"

static int ensure_rows(eng_state *st, const eng_config *c, size_t rows, eng_err *err) {
    int width = c->intermediate * (c->glu ? 2 : 1); /* a GLU's first Linear yields both halves */
    if (c->glu && width < c->hidden) width = c->hidden; /* ModernBERT's attention-site adapters borrow it (rows, H) */
    if (rows <= st->cap_rows && st->H == c->hidden && st->I == width) return 0;
    eng__state_free_rows(st);
    size_t cap = rows < 64 ? 64 : rows + rows / 4;
    size_t H = (size_t)c->hidden, I = (size_t)width;
    st->qkv = eng__alloc_aligned(cap * 3 * H * sizeof(float));
    st->ctx = eng__alloc_aligned(cap * H * sizeof(float));
    st->h = eng__alloc_aligned(cap * H * sizeof(float));
    st->inter = eng__alloc_aligned(cap * I * sizeof(float));
    st->pos = malloc(cap * sizeof *st->pos);
    if (!st->qkv || !st->ctx || !st->h || !st->inter || !st->pos) {
        eng__state_free_rows(st);
        return eng_err_set(err, ENG_NO_MEMORY, "cannot allocate scratch for %zu rows", rows);
    }
    st->cap_rows = cap;
    st->H = c->hidden;
    st->I = width;
    return 0;
}

/* The low-precision products' activation scratch for `rows` rows (none for float32). */
static int ensure_lin_ws(eng_state *st, const eng_model *m, size_t rows, eng_err *err) {
    const eng_config *c = eng_model_config(m);
    int K = c->hidden > c->intermediate ? c->hidden : c->intermediate;
    size_t need = eng__linear_ws_bytes(m->prec, (int)rows, K);
    if (need <= st->lin_ws_cap) return 0;
    need += need / 4;
    eng__free_aligned(st->lin_ws);
    st->lin_ws = eng__alloc_aligned(need);
    st->lin_ws_cap = st->lin_ws ? need : 0;
    return st->lin_ws ? 0 : eng_err_set(err, ENG_NO_MEMORY, "cannot allocate %zu bytes of product scratch", need);
}

/* Per-worker attention score buffers of n floats (L x (P + L) for the longest segment). */
static int ensure_scores(eng_state *st, size_t n, eng_err *err) {
    if (n <= st->cap_len) return 0;
    for (int i = 0; i < st->n_threads; i++) {
        eng__free_aligned(st->scores[i]);
        st->scores[i] = eng__alloc_aligned(n * sizeof(float));
        if (!st->scores[i]) {
            st->cap_len = 0;
            return eng_err_set(err, ENG_NO_MEMORY, "cannot allocate %zu attention scores", n);
        }
    }
    st->cap_len = n;
    return 0;
}

static int ensure_segs(eng_state *st, size_t n, eng_err *err) {
    if (n <= st->cap_segs) return 0;
    size_t cap = n < 16 ? 16 : n * 2;
    eng_seg *p = realloc(st->segs, cap * sizeof *p);
    if (!p) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    st->segs = p;
    st->cap_segs = cap;
    return 0;
}

static int ensure_pooler_in(eng_state *st, size_t n, int H, eng_err *err) {
    if (n <= st->cap_pooler_in && st->pooler_in_h == H) return 0;
    eng__free_aligned(st->pooler_in);
    size_t cap = n < 16 ? 16 : n * 2;
    st->pooler_in = eng__alloc_aligned(cap * (size_t)H * sizeof(float));
    st->cap_pooler_in = st->pooler_in ? cap : 0;
    st->pooler_in_h = H;
    return st->pooler_in ? 0 : eng_err_set(err, ENG_NO_MEMORY, "out of memory");
}

/* ---- embeddings ---- */

typedef struct {
    const eng_model *m;
    const eng_batch *b;
    const int32_t *pos;
    const eng_emb_lora *const *row_lora; /* (rows) or NULL */
    float *x;                            /* (rows, E): E = emb_dim, H unless the model projects its embeddings */
    int rows, chunk;
    int ln;                              /* normalize here (not after DeBERTa's projection) */
} emb_job;

static void emb_task(void *ctx, int task, int worker) {
    (void)worker;
    emb_job *j = ctx;
    const eng_config *c = eng_model_config(j->m);
    const eng_weights *w = eng__model_weights(j->m);
    int H = c->emb_dim, r0 = task * j->chunk, r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
    for (int r = r0; r < r1; r++) {
        float *y = j->x + (size_t)r * H;
        const float *we = w->word_emb + (size_t)j->b->ids[r] * H;
        if (w->pos_emb) {
            const float *pe = w->pos_emb + (size_t)j->pos[r] * H;
            for (int i = 0; i < H; i++) y[i] = we[i] + pe[i];
        } else { /* DeBERTa-v3 (relative positions) and ModernBERT (rotary, in attention) */
            memcpy(y, we, (size_t)H * sizeof *y);
        }
        const eng_emb_lora *lo = j->row_lora && H == c->hidden ? j->row_lora[r] : NULL;
        if (lo) { /* y += scaling * B a_t */
            const float *a = lo->a_t + (size_t)j->b->ids[r] * lo->r;
            for (int i = 0; i < H; i++) {
                const float *bi = lo->b + (size_t)i * lo->r;
                float d = 0;
                for (int k = 0; k < lo->r; k++) d += bi[k] * a[k];
                y[i] += lo->scaling * d;
            }
        }
        if (w->type_emb) {
            const float *te = w->type_emb + (size_t)(j->b->type_ids ? j->b->type_ids[r] : 0) * H;
            for (int i = 0; i < H; i++) y[i] += te[i];
        }
    }
    if (r1 > r0 && j->ln) eng__layernorm(j->x + (size_t)r0 * H, (size_t)(r1 - r0), (size_t)H, w->emb_ln_g, w->emb_ln_b, c->ln_eps);
}

static int batch_tokens(const eng_batch *b, size_t *n_tokens, int *max_len, eng_err *err) {
    size_t n = 0;
    int mx = 0;
    if (b->n_seq <= 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "empty batch");
    for (int s = 0; s < b->n_seq; s++) {
        if (b->seq_len[s] <= 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "sequence %d is empty", s);
        n += (size_t)b->seq_len[s];
        if (b->seq_len[s] > mx) mx = b->seq_len[s];
    }
    *n_tokens = n;
    *max_len = mx;
    return 0;
}

int eng__embed(const eng_model *m, eng_state *st, const eng_batch *b, float *x, eng_err *err) {
    return eng__embed_lora(m, st, b, NULL, x, err);
}

int eng__embed_lora(const eng_model *m, eng_state *st, const eng_batch *b, const eng_emb_lora *const *seq_lora, float *x,
                   eng_err *err) {
    const eng_config *c = eng_model_config(m);
    size_t n = 0;
    int max_len = 0, rc;
    if ((rc = batch_tokens(b, &n, &max_len, err))) return rc;
    if ((rc = ensure_rows(st, c, n, err))) return rc;
    /* Position ids and input checks, sequentially: cheap and it keeps error messages exact. */
    size_t r = 0;
    for (int s = 0; s < b->n_seq; s++) {
        int nonpad = 0;
        for (int t = 0; t < b->seq_len[s]; t++, r++) {
            int32_t id = b->ids[r];
            if (id < 0 || id >= c->vocab)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "sequence %d, token %d: id %d outside the vocabulary (0..%d)",
                                   s, t, id, c->vocab - 1);
            int32_t ty = b->type_ids ? b->type_ids[r] : 0;
            if (ty < 0 || ty >= (c->type_vocab > 0 ? c->type_vocab : 1))
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "sequence %d, token %d: token type %d out of range", s, t, ty);
            int32_t p;
            if (c->arch == ENG_ARCH_ROBERTA) {
                /* Hugging Face: cumsum(ids != pad) * (ids != pad) + pad */
                if (id != c->pad_id) nonpad++;
                p = id != c->pad_id ? nonpad + c->pad_id : c->pad_id;
            } else {
                p = t;
            }
            if (p >= c->max_pos)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "sequence %d has %d tokens; the model takes at most %d", s,
                                   b->seq_len[s], c->max_pos - c->pos_offset);
            st->pos[r] = p;
        }
    }
    const eng_emb_lora **row_lora = NULL;
    for (int s = 0; seq_lora && s < b->n_seq && !row_lora; s++)
        if (seq_lora[s] && !(row_lora = malloc(n * sizeof *row_lora)))
            return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (int s = 0, r0 = 0; row_lora && s < b->n_seq; r0 += b->seq_len[s++])
        for (int t = 0; t < b->seq_len[s]; t++) row_lora[r0 + t] = seq_lora[s];
    /* ELECTRA: LN at E, then the projection to H; DeBERTa: the projection, then LN at H. */
    const eng_weights *w = eng__model_weights(m);
    float *e = w->emb_proj_w ? malloc(n * (size_t)c->emb_dim * sizeof *e) : x;
    if (!e) {
        free(row_lora);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    int tasks = eng__pool_size(st->pool) * 4, deb_proj = w->emb_proj_w && c->arch == ENG_ARCH_DEBERTA_V2;
    emb_job j = {m, b, st->pos, row_lora, e, (int)n, (int)((n + (size_t)tasks - 1) / (size_t)tasks), !deb_proj};
    eng__pool_run(st->pool, tasks, emb_task, &j);
    free(row_lora);
    if (w->emb_proj_w) {
        eng_epilogue ep = {.bias = w->emb_proj_b, .act = ENG_ACT_IDENTITY};
        if (w->emb_proj_p) /* packed at load (model.c) */
            eng__gemm_rows_p(st->pool, (int)n, c->hidden, c->emb_dim, e, c->emb_dim, w->emb_proj_p, x, c->hidden, &ep);
        else
            eng__gemm_rows(st->pool, (int)n, c->hidden, c->emb_dim, e, c->emb_dim, w->emb_proj_w, c->emb_dim, x,
                          c->hidden, &ep);
        if (deb_proj) eng__layernorm_rows(st->pool, x, (int)n, c->hidden, w->emb_ln_g, w->emb_ln_b, c->ln_eps);
        free(e);
    }
    return 0;
}

/* ---- attention ---- */

typedef struct {
    const float *qkv;
    float *ctx;
    const eng_seg *segs;
    const eng_task_layer *const *seg_ad; /* (n_segs) adapters of each segment's group, or NULL */
    const float *gates;                  /* (n_segs, 2) prefix key / value gates, or NULL */
    int H, d, n_heads;
    float scale;
    float **scores;
    int bf16; /* QK^T and PV in bf16 (gemm_lowp.h, eng__bf16_gemm_dyn) */
    int int8; /* QK^T in int8 (eng__int8_gemm_dyn), PV float32 */
} attn_job;

/* Where, in a worker's score buffer, the packed keys or values of one head start (64-byte aligned
 * after the L x W scores), and how much room they take. */
static size_t attn_pack_offset(int L, int W) { return ((size_t)L * (size_t)W + 15) & ~(size_t)15; }
static size_t attn_pack_floats(int L, int d, eng_prec prec, int bf16) {
    size_t a = eng__packed_floats(L, d), b = eng__packed_floats(d, L), c = 0;
    if (bf16) { /* or the low-precision products' workspace, whichever is larger */
        size_t qk = eng__bf16_dyn_bytes(L, L, d), pv = eng__bf16_dyn_bytes(L, d, L);
        c = qk > pv ? qk : pv;
    } else if (prec == ENG_PREC_INT8) {
        c = eng__int8_dyn_bytes(L, L, d);
    }
    b = b > c / sizeof(float) ? b : c / sizeof(float); /* whole 64-byte pieces (gemm_lowp.c) */
    return a > b ? a : b;
}

static void attn_task(void *ctx, int task, int worker) {
    attn_job *j = ctx;
    int si = task / j->n_heads;
    const eng_seg *sg = &j->segs[si];
    const eng_task_layer *ad = j->seg_ad ? j->seg_ad[si] : NULL;
    int h = task % j->n_heads, L = sg->len, ld = 3 * j->H, P = ad ? ad->prefix_len : 0, W = P + L;
    const float *q = j->qkv + (size_t)sg->start * ld + (size_t)h * j->d;
    const float *k = q + j->H, *v = q + 2 * j->H;
    float *s = j->scores[worker], *out = j->ctx + (size_t)sg->start * j->H + (size_t)h * j->d;
    /* Prefix tuning: keys and values [prefix; sequence], the prefix unmasked (docs/ADAPTER_FORMATS.md §5). */
    float gk = 1.0f, gv = 1.0f;
    if (P && ad->prefix_gates) { /* UniPELT: keys scaled by g[0], values by g[last] */
        gk = j->gates[2 * si];
        gv = j->gates[2 * si + 1];
    }
    if (!P) { /* keys, then values, packed for the engine's own product (math/blas.h, eng__pgemm), or in
               * bf16 (the scale then goes on the queries: the same products, rounded once to bf16), or
               * QK^T in int8 (the scale on the queries' row scales) */
        float *pk = s + attn_pack_offset(L, W);
        if (j->int8) {
            eng__int8_gemm_dyn(L, L, j->d, j->scale, q, ld, k, ld, s, W, pk);
        } else if (!j->bf16 || eng__bf16_gemm_dyn(L, L, j->d, j->scale, q, ld, k, (size_t)ld, 1, s, W, pk)) {
            eng__pack_strided(k, L, j->d, (size_t)ld, 1, j->scale, pk);
            eng__pgemm(NULL, L, L, j->d, q, ld, pk, s, W, NULL);
        }
        eng__softmax_rows(s, (size_t)L, (size_t)W, (size_t)W);
        if (!j->bf16 || eng__bf16_gemm_dyn(L, j->d, L, 1.0f, s, W, v, 1, (size_t)ld, out, j->H, pk)) {
            eng__pack_strided(v, j->d, L, 1, (size_t)ld, 1.0f, pk);
            eng__pgemm(NULL, L, j->d, L, s, W, pk, out, j->H, NULL);
        }
        return;
    }
    eng__sgemm_nt(L, P, j->d, j->scale * gk, q, ld, ad->prefix_k + (size_t)h * j->d, j->H, s, W);
    eng__sgemm_nt(L, L, j->d, j->scale, q, ld, k, ld, s + P, W);
    eng__softmax_rows(s, (size_t)L, (size_t)W, (size_t)W);
    if (P && gv != 1.0f)
        for (int i = 0; i < L; i++)
            for (int p = 0; p < P; p++) s[(size_t)i * W + p] *= gv;
    if (P) eng__sgemm_nn(L, j->d, P, s, W, ad->prefix_v + (size_t)h * j->d, j->H, 0.0f, out, j->H);
    eng__sgemm_nn(L, j->d, L, s + P, W, v, ld, P ? 1.0f : 0.0f, out, j->H);
}

/* Sets *out to which adapter layer acts on each segment (its group's), or to NULL when no group
 * has adapters. Returns 0 or ENG_NO_MEMORY. */
static int segment_adapters(eng_state *st, const eng_seg *segs, int n_segs, const eng_group *g, int n_groups,
                            int *max_prefix, const eng_task_layer ***out, eng_err *err) {
    *max_prefix = 0;
    *out = NULL;
    int any = 0;
    for (int i = 0; i < n_groups; i++)
        if (g[i].ad) any = 1;
    if (!any) return 0;
    const eng_task_layer **map = (const eng_task_layer **)eng__state_scratch(st, ENG_SCRATCH_SEGMAP,
                                                                              (size_t)n_segs * sizeof(void *) / sizeof(float) + 1);
    if (!map) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    for (int s = 0; s < n_segs; s++) {
        int lo = 0, hi = n_groups - 1; /* last group with row0 <= start */
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (g[mid].row0 <= segs[s].start) lo = mid;
            else hi = mid - 1;
        }
        map[s] = g[lo].ad;
        if (map[s] && map[s]->prefix_len > *max_prefix) *max_prefix = map[s]->prefix_len;
    }
    *out = map;
    return 0;
}

/* The parts of a layer where adapter modules can act. */
typedef enum { STAGE_QKV, STAGE_ATTN_OUT, STAGE_INTERMEDIATE, STAGE_OUTPUT } layer_stage;

/* Does any group's task have a module acting at this stage? */
static int groups_touch(const eng_group *g, int n, layer_stage what) {
    for (int i = 0; i < n; i++) {
        const eng_task_layer *a = g[i].ad;
        if (!a) continue;
        switch (what) {
        case STAGE_QKV:
            if (a->lora[ENG_LIN_Q] || a->lora[ENG_LIN_K] || a->lora[ENG_LIN_V] || a->ia3[ENG_LIN_Q] ||
                a->ia3[ENG_LIN_K] || a->ia3[ENG_LIN_V])
                return 1;
            break;
        case STAGE_ATTN_OUT:
            if (a->lora[ENG_LIN_O] || a->ia3[ENG_LIN_O] || a->mh.n_stack || a->mh.n_fuse) return 1;
            break;
        case STAGE_INTERMEDIATE:
            if (a->lora[ENG_LIN_I] || a->ia3[ENG_LIN_I]) return 1;
            break;
        case STAGE_OUTPUT:
            if (a->lora[ENG_LIN_D] || a->ia3[ENG_LIN_D] || a->out.n_stack || a->out.n_fuse) return 1;
            break;
        }
    }
    return 0;
}

/* Bottleneck sites, or the plain LN(h + x), group by group; h is replaced by the site's output. */
static int apply_sites(eng_state *st, const eng_config *c, const eng_group *g, int n, eng_site_pos which, float *h,
                       const float *x, const eng_seg *segs, int n_segs, const float *ln_g, const float *ln_b,
                       eng_err *err) {
    int H = c->hidden;
    for (int i = 0; i < n; i++) {
        const eng_site *site = g[i].ad ? eng__layer_site(g[i].ad, which) : NULL;
        float *hi = h + (size_t)g[i].row0 * H;
        const float *xi = x + (size_t)g[i].row0 * H;
        if (site && (site->n_stack || site->n_fuse)) {
            int rc = eng__site_apply(st, site, c, hi, xi, g[i].row0, g[i].rows, segs, n_segs, ln_g, ln_b, 0, err);
            if (rc) return rc;
        } else {
            eng__add(hi, xi, (size_t)g[i].rows * H);
            eng__layernorm_rows(st->pool, hi, g[i].rows, H, ln_g, ln_b, c->ln_eps);
        }
    }
    return 0;
}

int eng__layer_forward(const eng_model *m, eng_state *st, int l, float *x, int rows, const eng_seg *segs, int n_segs,
                      const eng_group *groups, int n_groups, const eng_late_split *late, int n_late, float *late_out,
                      eng_err *err) {
    const eng_config *c = eng_model_config(m);
    const eng_layer_weights *w = &eng__model_weights(m)->layers[l];
    int H = c->hidden, I = c->intermediate, rc, max_len = 0, max_prefix = 0;
    for (int s = 0; s < n_segs; s++) max_len = segs[s].len > max_len ? segs[s].len : max_len;
    const eng_task_layer **seg_ad;
    if ((rc = segment_adapters(st, segs, n_segs, groups, n_groups, &max_prefix, &seg_ad, err))) return rc;
    if (!seg_ad) n_groups = 0; /* no adapters in this layer: the fused plain path */
    /* A bf16 model's attention products in bf16 where the level multiplies bf16 natively (math/gemm_lowp.h),
     * as bf16 inference does elsewhere; read once per layer (a product whose level changed since declines
     * and runs in float32). An int8 model runs QK^T in int8 at every level (exact integer sums: its outputs
     * stay the same bits on every level, which bf16 on some levels only would end) and PV in float32:
     * both products in int8 lost 0.8 points on an example task, QK^T alone stayed within the 0.5 bound
     * (bench/README, bench/quality). */
    int attn_bf16 = m->prec == ENG_PREC_BF16 && eng__bf16_dyn_native();
    if (c->arch == ENG_ARCH_MODERNBERT) {
        if ((rc = ensure_rows(st, c, (size_t)rows, err)) || (rc = ensure_lin_ws(st, m, (size_t)rows, err)) ||
            (rc = ensure_scores(st, eng__modernbert_score_floats(c, max_len), err)))
            return rc;
        return eng__modernbert_layer(m, st, l, x, rows, segs, n_segs, groups, n_groups, late, n_late, late_out, err);
    }
    if ((rc = ensure_rows(st, c, (size_t)rows, err)) || (rc = ensure_lin_ws(st, m, (size_t)rows, err)) ||
        (rc = ensure_scores(st, attn_pack_offset(max_len, max_len + max_prefix) +
                                    attn_pack_floats(max_len, c->head_dim, m->prec, attn_bf16), err)))
        return rc;
    eng_pool *pool = st->pool;
    void *ws = st->lin_ws;
    st->cur_layer = l;

    eng_epilogue ep_qkv = {.bias = w->bqkv, .act = ENG_ACT_IDENTITY};
    eng__linear_run(pool, rows, x, H, &w->wqkv, st->qkv, 3 * H, &ep_qkv, ws);
    if (n_groups && groups_touch(groups, n_groups, STAGE_QKV))
        for (int t = ENG_LIN_Q; t <= ENG_LIN_V; t++)
            if ((rc = eng__linear_adapters(st, groups, n_groups, (eng_lin)t, x, H, st->qkv + (size_t)t * H, 3 * H, segs, n_segs, err)))
                return rc;

    float *gates = NULL;
    if (c->arch == ENG_ARCH_DEBERTA_V2) { /* disentangled attention (model/deberta.c) */
        if ((rc = ensure_scores(st, eng__deberta_scores_floats(c, max_len), err)) ||
            (rc = eng__deberta_attention(m, st, l, st->qkv, st->ctx, segs, n_segs, seg_ad, err)))
            return rc;
        goto attention_done;
    }
    for (int s = 0; seg_ad && s < n_segs && !gates; s++)
        if (seg_ad[s] && seg_ad[s]->prefix_gates) gates = eng__state_scratch(st, ENG_SCRATCH_GATES, 2 * (size_t)n_segs);
    if (gates) /* prefix gates read the layer input of each sequence */
        for (int s = 0; s < n_segs; s++) {
            const eng_task_layer *a = seg_ad[s];
            if (!a || !a->prefix_gates) continue;
            const float *xs = x + (size_t)segs[s].start * H;
            gates[2 * s] = eng__gate_mean(xs, H, segs[s].len, H, a->prefix_gate_w, a->prefix_gate_b[0]);
            gates[2 * s + 1] = a->prefix_gates == 2 ? eng__gate_mean(xs, H, segs[s].len, H, a->prefix_gate_w + H,
                                                                     a->prefix_gate_b[1])
                                                    : gates[2 * s];
        }
    attn_job aj = {st->qkv, st->ctx, segs, seg_ad, gates, H, c->head_dim, c->n_heads,
                   1.0f / sqrtf((float)c->head_dim), st->scores, attn_bf16, m->prec == ENG_PREC_INT8};
    eng__pool_run(pool, n_segs * c->n_heads, attn_task, &aj);
attention_done:

    if (n_groups && groups_touch(groups, n_groups, STAGE_ATTN_OUT)) {
        eng_epilogue ep_o = {.bias = w->bo, .act = ENG_ACT_IDENTITY};
        eng__linear_run(pool, rows, st->ctx, H, &w->wo, st->h, H, &ep_o, ws);
        if ((rc = eng__linear_adapters(st, groups, n_groups, ENG_LIN_O, st->ctx, H, st->h, H, segs, n_segs, err)) ||
            (rc = apply_sites(st, c, groups, n_groups, ENG_SITE_ATTN, st->h, x, segs, n_segs, w->ln1_g, w->ln1_b, err)))
            return rc;
    } else {
        eng_epilogue ep_o = {.bias = w->bo, .act = ENG_ACT_IDENTITY, .residual = x, .ldr = H};
        eng__linear_run(pool, rows, st->ctx, H, &w->wo, st->h, H, &ep_o, ws);
        eng__layernorm_rows(pool, st->h, rows, H, w->ln1_g, w->ln1_b, c->ln_eps);
    }

    if (n_groups && groups_touch(groups, n_groups, STAGE_INTERMEDIATE)) {
        eng_epilogue ep_1 = {.bias = w->b1, .act = ENG_ACT_IDENTITY};
        eng__linear_run(pool, rows, st->h, H, &w->w1, st->inter, I, &ep_1, ws);
        if ((rc = eng__linear_adapters(st, groups, n_groups, ENG_LIN_I, st->h, H, st->inter, I, segs, n_segs, err))) return rc;
        eng__act_rows(pool, c->act, st->inter, rows, I);
    } else {
        eng_epilogue ep_1 = {.bias = w->b1, .act = c->act};
        eng__linear_run(pool, rows, st->h, H, &w->w1, st->inter, I, &ep_1, ws);
    }

    if ((n_groups && groups_touch(groups, n_groups, STAGE_OUTPUT)) || n_late) {
        /* x is free now (h is the residual): y = inter W2^T + b2 goes straight into x */
        eng_epilogue ep_2 = {.bias = w->b2, .act = ENG_ACT_IDENTITY};
        eng__linear_run(pool, rows, st->inter, I, &w->w2, x, H, &ep_2, ws);
        if (n_groups && (rc = eng__linear_adapters(st, groups, n_groups, ENG_LIN_D, st->inter, I, x, H, segs, n_segs, err)))
            return rc;
        /* late splits read the trunk's y and h before the trunk's own LayerNorm */
        for (int k = 0; k < n_late; k++) {
            float *o = late_out + (size_t)late[k].out_row0 * H;
            memcpy(o, x + (size_t)late[k].trunk_row0 * H, (size_t)late[k].len * H * sizeof *o);
            eng_seg one = {0, late[k].len};
            if ((rc = eng__site_apply(st, &late[k].ad->out, c, o, st->h + (size_t)late[k].trunk_row0 * H, 0,
                                      late[k].len, &one, 1, w->ln2_g, w->ln2_b, 0, err)))
                return rc;
        }
        if (n_groups) {
            if ((rc = apply_sites(st, c, groups, n_groups, ENG_SITE_FFN, x, st->h, segs, n_segs, w->ln2_g, w->ln2_b, err))) return rc;
        } else {
            eng__add(x, st->h, (size_t)rows * H);
            eng__layernorm_rows(pool, x, rows, H, w->ln2_g, w->ln2_b, c->ln_eps);
        }
    } else {
        eng_epilogue ep_2 = {.bias = w->b2, .act = ENG_ACT_IDENTITY, .residual = st->h, .ldr = H};
        eng__linear_run(pool, rows, st->inter, I, &w->w2, x, H, &ep_2, ws);
        eng__layernorm_rows(pool, x, rows, H, w->ln2_g, w->ln2_b, c->ln_eps);
    }
    return 0;
}

int eng__pooler_forward(const eng_model *m, eng_state *st, const float *x, const eng_seg *segs, int n_segs, float *out,
                   eng_err *err) {
    const eng_config *c = eng_model_config(m);
    const eng_weights *w = eng__model_weights(m);
    int H = c->hidden;
    if (!w->pooler_w) {
        for (int s = 0; s < n_segs; s++) memcpy(out + (size_t)s * H, x + (size_t)segs[s].start * H, (size_t)H * sizeof *out);
        return 0;
    }
    int rc = ensure_pooler_in(st, (size_t)n_segs, H, err);
    if (rc) return rc;
    float *tmp = st->pooler_in;
    if (c->arch == ENG_ARCH_MODERNBERT) { /* its prediction head: pooled rows, dense, act, LayerNorm */
        eng__modernbert_head(m, st, x, segs, n_segs, tmp, out);
        return 0;
    }
    /* Gather the first rows into out, then out = tanh(out Wp^T + bp) through the pooler's scratch. */
    for (int s = 0; s < n_segs; s++) memcpy(tmp + (size_t)s * H, x + (size_t)segs[s].start * H, (size_t)H * sizeof *tmp);
    eng_epilogue ep = {.bias = w->pooler_b, .act = ENG_ACT_TANH};
    if (w->pooler_p) /* packed at load (model.c) */
        eng__gemm_rows_p(st->pool, n_segs, H, H, tmp, H, w->pooler_p, out, H, &ep);
    else
        eng__gemm_rows(st->pool, n_segs, H, H, tmp, H, w->pooler_w, H, out, H, &ep);
    return 0;
}

int eng_encode(const eng_model *m, eng_state *st, const eng_batch *b, float *hidden_out, float *pooler_out,
               eng_err *err) {
    const eng_config *c = eng_model_config(m);
    size_t n = 0;
    int max_len = 0, rc;
    if ((rc = batch_tokens(b, &n, &max_len, err))) return rc;
    if ((rc = ensure_segs(st, (size_t)b->n_seq, err))) return rc;
    if ((rc = eng__embed(m, st, b, hidden_out, err))) return rc;
    int32_t start = 0;
    for (int s = 0; s < b->n_seq; s++) {
        st->segs[s].start = start;
        st->segs[s].len = b->seq_len[s];
        start += b->seq_len[s];
    }
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = eng__layer_forward(m, st, l, hidden_out, (int)n, st->segs, b->n_seq, NULL, 0, NULL, 0, NULL, err)))
            return rc;
    if (pooler_out) return eng__pooler_forward(m, st, hidden_out, st->segs, b->n_seq, pooler_out, err);
    return 0;
}
