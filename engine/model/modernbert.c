/* modernbert.c - ModernBERT (Warner et al. 2024) over packed rows.
 *
 * One layer, pre-norm, no biases in the released model (they are used when a checkpoint has them):
 *     a   = l == 0 ? x : LN_attn(x)
 *     qkv = a Wqkv^T                              one product; rows are (q | k | v), each (heads, d)
 *     q,k = rope(q), rope(k)                      NeoX halves, theta global or local by layer
 *     h   = x + softmax(q k^T / sqrt(d)) v Wo^T   local layers (l % every != 0): |i - j| <= window / 2
 *     g,u = split(LN_mlp(h) Wi^T)                 (rows, 2I)
 *     x   = h + (act(g) * u) Wo_mlp^T
 * and after the last layer x = LN_final(x). The products run in the model's precision
 * (eng__linear_run) like BERT's; LoRA and (IA)^3 act on the same Linear layers by role (Wqkv as q, k
 * and v slices, attn.Wo, mlp.Wi, mlp.Wo).
 *
 * Bottleneck adapters and fusion sit where AdapterHub puts them on ModernBERT (adapter-hub/adapters,
 * src/adapters/wrappers/interfaces.py "modernbert" and methods/bottleneck.py init_bottleneck; the
 * reference is tools/reference/modernbert_adapters.py): forward hooks on attn.Wo's and mlp.Wo's outputs
 * ("hooked" layers). A pre-norm layer has no post-LayerNorm for a BERT-style post step, so the library
 * forces original_ln_after off (and refuses configs that set it false) and ModernBERT adds its own
 * residual after the hook:
 *     h = x + site_attn(o = attn Wo^T, in = a)      a = attn_norm(x), x on layer 0
 *     x = h + site_out(f = mlp Wo^T, in = LN_mlp(h))
 * The sub-block input the adapters see (parallel adapters' input, original_ln_before's sum) is the
 * pre-normed one, what a pre-hook on attn / mlp receives. original_ln_before's LayerNorm is layer_ln_1
 * = mlp_norm at the attention site, read through a getter that binds late, so every layer uses the LAST
 * layer's mlp_norm; the output site has none (layer_ln_2 None): the sum without a norm. residual_before_ln
 * keeps its BERT meaning (adapter residual from the hooked output, or the sum / its norm). No site
 * takes prefix tuning: AdapterHub's ModernBERT interface has none (refused at load).
 *
 * Attention never holds a sequence's L x L scores: each (segment, head) task walks blocks of QB
 * query rows, and a block's scores cover only the keys it can see (all L on a global layer, the
 * block widened by the window on a local one), so a worker's scratch is QB x L floats (2 MB at 8,192
 * tokens) and a local layer's cost grows with L x window instead of L^2. Rows outside a row's window
 * inside its block's key range are zeroed after a softmax over the window. */
#include <math.h>
#include <string.h>

#include "math/state.h"
#include "math/blas.h"
#include "math/kernels.h"
#include "math/linear.h"
#include "math/rows.h"
#include "model/modernbert.h"
#include "model/weights.h"
#include "model/adapter.h"

/* Query rows per attention block. */
#define QB 64

size_t eng__modernbert_score_floats(const eng_config *c, int max_len) {
    (void)c;
    return (size_t)QB * (size_t)(max_len > 0 ? max_len : 1);
}

/* ---- attention ---- */

typedef struct {
    float *qkv;
    float *ctx;
    const eng_seg *segs;
    const float *cos, *sin; /* (max_pos, d / 2) of this layer's theta */
    int H, d, n_heads, half_window; /* half_window < 0: global */
    float scale;
    float **scores;
} mb_attn_job;

/* Rotates the d-wide head vectors of L rows (stride ld) by their positions 0..L-1. */
static void rope_rows(float *x, int L, size_t ld, int d, const float *cos, const float *sin) {
    int d2 = d / 2;
    for (int t = 0; t < L; t++) {
        float *r = x + (size_t)t * ld;
        const float *c = cos + (size_t)t * d2, *s = sin + (size_t)t * d2;
        for (int i = 0; i < d2; i++) {
            float a = r[i], b = r[i + d2];
            r[i] = a * c[i] - b * s[i];
            r[i + d2] = b * c[i] + a * s[i];
        }
    }
}

static void attn_task(void *ctx, int task, int worker) {
    mb_attn_job *j = ctx;
    const eng_seg *sg = &j->segs[task / j->n_heads];
    int h = task % j->n_heads, L = sg->len, d = j->d, ld = 3 * j->H, w = j->half_window;
    float *q = j->qkv + (size_t)sg->start * ld + (size_t)h * d, *k = q + j->H;
    const float *v = q + 2 * j->H;
    float *out = j->ctx + (size_t)sg->start * j->H + (size_t)h * d, *s = j->scores[worker];
    rope_rows(q, L, (size_t)ld, d, j->cos, j->sin);
    rope_rows(k, L, (size_t)ld, d, j->cos, j->sin);
    for (int i0 = 0; i0 < L; i0 += QB) {
        int i1 = i0 + QB < L ? i0 + QB : L, lo = 0, hi = L;
        if (w >= 0) {
            lo = i0 - w > 0 ? i0 - w : 0;
            hi = i1 + w < L ? i1 + w : L;
        }
        int W = hi - lo;
        eng__sgemm_nt(i1 - i0, W, d, j->scale, q + (size_t)i0 * ld, ld, k + (size_t)lo * ld, ld, s, W);
        for (int i = i0; i < i1; i++) {
            float *row = s + (size_t)(i - i0) * W;
            int a = lo, b = hi; /* the keys row i sees */
            if (w >= 0) {
                a = i - w > lo ? i - w : lo;
                b = i + w + 1 < hi ? i + w + 1 : hi;
            }
            eng__softmax_row(row + (a - lo), (size_t)(b - a));
            if (a > lo) memset(row, 0, (size_t)(a - lo) * sizeof *row);
            if (b < hi) memset(row + (b - lo), 0, (size_t)(hi - b) * sizeof *row);
        }
        eng__sgemm_nn(i1 - i0, d, W, s, W, v + (size_t)lo * ld, ld, 0.0f, out + (size_t)i0 * j->H, j->H);
    }
}

/* ---- adapters ---- */

/* Does any group carry a LoRA or (IA)^3 on Linear lin? */
static int groups_have(const eng_group *g, int n, eng_lin lin) {
    for (int i = 0; i < n; i++)
        if (g[i].ad && (g[i].ad->lora[lin] || g[i].ad->ia3[lin])) return 1;
    return 0;
}

/* Does any group carry bottleneck modules (a stack or a fusion) at site pos? */
static int groups_site(const eng_group *g, int n, eng_site_pos pos) {
    for (int i = 0; i < n; i++) {
        const eng_site *s = g[i].ad ? eng__layer_site(g[i].ad, pos) : NULL;
        if (s && (s->n_stack || s->n_fuse)) return 1;
    }
    return 0;
}

/* AdapterHub's hooked bottleneck site on each group's rows (the file's top): y (rows, H) holds the
 * hooked Linear's output and receives the adapters' output; in (rows, H) is the sub-block's pre-normed
 * input; ln_g the LayerNorm original_ln_before applies, or NULL. */
static int hooked_sites(eng_state *st, const eng_config *c, const eng_group *g, int n, eng_site_pos pos, float *y,
                        const float *in, const eng_seg *segs, int n_segs, const float *ln_g, const float *ln_b,
                        eng_err *err) {
    int H = c->hidden;
    for (int i = 0; i < n; i++) {
        const eng_site *s = g[i].ad ? eng__layer_site(g[i].ad, pos) : NULL;
        if (!s || !(s->n_stack || s->n_fuse)) continue;
        size_t off = (size_t)g[i].row0 * H;
        int rc = eng__site_apply(st, s, c, y + off, in + off, g[i].row0, g[i].rows, segs, n_segs, ln_g, ln_b, 1, err);
        if (rc) return rc;
    }
    return 0;
}

/* ---- GeGLU ---- */

typedef struct {
    float *inter; /* (rows, 2I) */
    int rows, I, chunk;
    eng_act act;
} glu_job;

static void glu_task(void *ctx, int task, int worker) {
    (void)worker;
    glu_job *j = ctx;
    int r0 = task * j->chunk, r1 = r0 + j->chunk < j->rows ? r0 + j->chunk : j->rows;
    for (int r = r0; r < r1; r++) {
        float *g = j->inter + (size_t)r * 2 * j->I, *u = g + j->I;
        eng__act_apply(j->act, g, (size_t)j->I);
        for (int i = 0; i < j->I; i++) g[i] *= u[i];
    }
}

/* ---- layer ---- */

int eng__modernbert_layer(const eng_model *m, eng_state *st, int l, float *x, int rows, const eng_seg *segs,
                          int n_segs, const eng_group *groups, int n_groups, const eng_late_split *late, int n_late,
                          float *late_out, eng_err *err) {
    const eng_config *c = eng_model_config(m);
    const eng_weights *wt = eng__model_weights(m);
    const eng_layer_weights *w = &wt->layers[l];
    int H = c->hidden, I = c->intermediate, rc, last = l == c->n_layers - 1;
    for (int i = 0; i < n_groups; i++)
        if (groups[i].ad && groups[i].ad->prefix_len) /* the loaders refuse it first (task/load_adapterhub.c) */
            return eng_err_set(err, ENG_UNSUPPORTED, "ModernBERT layer %d: prefix tuning has no site on this architecture", l);
    eng_pool *pool = st->pool;
    void *ws = st->lin_ws;
    st->cur_layer = l;
    /* an attention-site adapter reads the attention input a after attention has reused ctx: a goes to h */
    int mh = n_groups && groups_site(groups, n_groups, ENG_SITE_ATTN);
    float *abuf = mh ? st->h : st->ctx;

    /* attention input: layer 0's attn_norm is the identity */
    const float *a = x;
    if (w->ln1_g) {
        memcpy(abuf, x, (size_t)rows * H * sizeof *x);
        eng__layernorm_rows(pool, abuf, rows, H, w->ln1_g, w->ln1_b, c->ln_eps);
        a = abuf;
    }
    eng_epilogue ep_qkv = {.bias = w->bqkv, .act = ENG_ACT_IDENTITY};
    eng__linear_run(pool, rows, a, H, &w->wqkv, st->qkv, 3 * H, &ep_qkv, ws);
    for (int t = ENG_LIN_Q; t <= ENG_LIN_V && n_groups; t++)
        if (groups_have(groups, n_groups, (eng_lin)t) &&
            (rc = eng__linear_adapters(st, groups, n_groups, (eng_lin)t, a, H, st->qkv + (size_t)t * H, 3 * H, segs, n_segs, err)))
            return rc;

    int global = l % c->global_every == 0;
    size_t tab = (size_t)c->max_pos * (size_t)(c->head_dim / 2);
    mb_attn_job aj = {st->qkv, st->ctx, segs, wt->rope_cos + (global ? 0 : tab), wt->rope_sin + (global ? 0 : tab),
                      H, c->head_dim, c->n_heads, global ? -1 : c->local_window / 2,
                      1.0f / sqrtf((float)c->head_dim), st->scores};
    eng__pool_run(pool, n_segs * c->n_heads, attn_task, &aj);

    /* h = x + hook(attn Wo^T (+ bo)): the residual in the epilogue unless an adapter must see the product alone */
    if (mh) { /* the product into inter's first rows (free until the MLP), the site, then h = x + it */
        float *o = st->inter;
        eng_epilogue ep_o = {.bias = w->bo, .act = ENG_ACT_IDENTITY};
        eng__linear_run(pool, rows, st->ctx, H, &w->wo, o, H, &ep_o, ws);
        if ((groups_have(groups, n_groups, ENG_LIN_O) &&
             (rc = eng__linear_adapters(st, groups, n_groups, ENG_LIN_O, st->ctx, H, o, H, segs, n_segs, err))) ||
            (rc = hooked_sites(st, c, groups, n_groups, ENG_SITE_ATTN, o, a, segs, n_segs,
                               wt->layers[c->n_layers - 1].ln2_g, wt->layers[c->n_layers - 1].ln2_b, err)))
            return rc;
        for (size_t k = 0; k < (size_t)rows * H; k++) st->h[k] = x[k] + o[k];
    } else if (n_groups && groups_have(groups, n_groups, ENG_LIN_O)) {
        eng_epilogue ep_o = {.bias = w->bo, .act = ENG_ACT_IDENTITY};
        eng__linear_run(pool, rows, st->ctx, H, &w->wo, st->h, H, &ep_o, ws);
        if ((rc = eng__linear_adapters(st, groups, n_groups, ENG_LIN_O, st->ctx, H, st->h, H, segs, n_segs, err))) return rc;
        eng__add(st->h, x, (size_t)rows * H);
    } else {
        eng_epilogue ep_o = {.bias = w->bo, .act = ENG_ACT_IDENTITY, .residual = x, .ldr = H};
        eng__linear_run(pool, rows, st->ctx, H, &w->wo, st->h, H, &ep_o, ws);
    }

    /* MLP: ctx = LN_mlp(h) (kept to the end: the output site's input), inter = ctx Wi^T, GeGLU into inter's first half */
    memcpy(st->ctx, st->h, (size_t)rows * H * sizeof *x);
    eng__layernorm_rows(pool, st->ctx, rows, H, w->ln2_g, w->ln2_b, c->ln_eps);
    eng_epilogue ep_1 = {.bias = w->b1, .act = ENG_ACT_IDENTITY};
    eng__linear_run(pool, rows, st->ctx, H, &w->w1, st->inter, 2 * I, &ep_1, ws);
    if (n_groups && groups_have(groups, n_groups, ENG_LIN_I) &&
        (rc = eng__linear_adapters(st, groups, n_groups, ENG_LIN_I, st->ctx, H, st->inter, 2 * I, segs, n_segs, err)))
        return rc;
    int tasks = eng__pool_size(pool) * 4;
    glu_job gj = {st->inter, rows, I, (rows + tasks - 1) / tasks, c->act};
    eng__pool_run(pool, tasks, glu_task, &gj);

    int out_site = n_groups && groups_site(groups, n_groups, ENG_SITE_FFN);
    if (out_site || n_late || (n_groups && groups_have(groups, n_groups, ENG_LIN_D))) {
        eng_epilogue ep_2 = {.bias = w->b2, .act = ENG_ACT_IDENTITY};
        eng__linear_run(pool, rows, st->inter, 2 * I, &w->w2, x, H, &ep_2, ws);
        if (n_groups && groups_have(groups, n_groups, ENG_LIN_D) &&
            (rc = eng__linear_adapters(st, groups, n_groups, ENG_LIN_D, st->inter, 2 * I, x, H, segs, n_segs, err)))
            return rc;
        /* late splits: a task's output-site adapters on the trunk's mlp.Wo output, before the trunk's residual */
        for (int k = 0; k < n_late; k++) {
            size_t t0 = (size_t)late[k].trunk_row0 * H, nk = (size_t)late[k].len * H;
            float *o = late_out + (size_t)late[k].out_row0 * H;
            memcpy(o, x + t0, nk * sizeof *o);
            eng_seg one = {0, late[k].len};
            if ((rc = eng__site_apply(st, &late[k].ad->out, c, o, st->ctx + t0, 0, late[k].len, &one, 1, NULL, NULL, 1,
                                      err)))
                return rc;
            eng__add(o, st->h + t0, nk);
            if (last) eng__layernorm_rows(pool, o, late[k].len, H, wt->final_ln_g, wt->final_ln_b, c->ln_eps);
        }
        if (out_site && (rc = hooked_sites(st, c, groups, n_groups, ENG_SITE_FFN, x, st->ctx, segs, n_segs, NULL, NULL, err)))
            return rc;
        eng__add(x, st->h, (size_t)rows * H);
    } else {
        eng_epilogue ep_2 = {.bias = w->b2, .act = ENG_ACT_IDENTITY, .residual = st->h, .ldr = H};
        eng__linear_run(pool, rows, st->inter, 2 * I, &w->w2, x, H, &ep_2, ws);
    }
    if (last) eng__layernorm_rows(pool, x, rows, H, wt->final_ln_g, wt->final_ln_b, c->ln_eps);
    return 0;
}

/* ---- prediction head ---- */

void eng__modernbert_head(const eng_model *m, eng_state *st, const float *x, const eng_seg *segs, int n_segs,
                          float *tmp, float *out) {
    const eng_config *c = eng_model_config(m);
    const eng_weights *w = eng__model_weights(m);
    int H = c->hidden;
    for (int s = 0; s < n_segs; s++) {
        float *p = tmp + (size_t)s * H;
        const float *r = x + (size_t)segs[s].start * H;
        if (!c->pool_mean) {
            memcpy(p, r, (size_t)H * sizeof *p);
            continue;
        }
        /* masked mean over the sequence's rows, summed in double */
        for (int i = 0; i < H; i++) {
            double acc = 0;
            for (int t = 0; t < segs[s].len; t++) acc += r[(size_t)t * H + i];
            p[i] = (float)(acc / segs[s].len);
        }
    }
    eng_epilogue ep = {.bias = w->pooler_b, .act = c->head_act};
    if (w->pooler_p) /* packed at load (model.c) */
        eng__gemm_rows_p(st->pool, n_segs, H, H, tmp, H, w->pooler_p, out, H, &ep);
    else
        eng__gemm_rows(st->pool, n_segs, H, H, tmp, H, w->pooler_w, H, out, H, &ep);
    eng__layernorm_rows(st->pool, out, n_segs, H, w->head_ln_g, w->head_ln_b, c->ln_eps);
}
