/* adapter.c - the inference math of every adapter form, on packed rows.
 *
 * Written from AdapterHub's and PEFT's forward code as docs/ADAPTER_FORMATS.md describes it:
 * bottleneck pre_forward / forward / post_forward, parallel adapters, Stack, Fuse, LoRA, (IA)^3.
 * Prefix tuning lives in the attention task (model/encoder.c); loading in task/load*.c.
 *
 * AdapterFusion uses an algebraically equal but cheaper order than the library: the score of child i
 * is Q . (U_i Wk^T + bk) = (Q Wk) . U_i + Q . bk, and the value path sum_i p_i (U_i Wv^T) is
 * (sum_i p_i U_i) Wv^T. So a fusion costs three HxH products per row whatever the number of
 * children N, instead of 2N + 1. */
#include <math.h>
#include <string.h>

#include "model/adapter.h"
#include "math/blas.h"
#include "math/rows.h"

int eng__task_layer_active(const eng_task_layer *a) {
    if (!a) return 0;
    for (int i = 0; i < ENG_LIN_COUNT; i++)
        if (a->lora[i] || a->ia3[i]) return 1;
    return a->prefix_len > 0 || a->mh.n_stack || a->mh.n_fuse || a->out.n_stack || a->out.n_fuse;
}

int eng__late_split_ok(const eng_task_layer *a) {
    for (int i = 0; i < ENG_LIN_COUNT; i++)
        if (a->lora[i] || a->ia3[i]) return 0;
    return a->prefix_len == 0 && a->mh.n_stack == 0 && a->mh.n_fuse == 0 && (a->out.n_stack || a->out.n_fuse);
}

float eng__gate_mean(const float *x, int ldx, int len, int dim, const float *w, float b) {
    double g = 0;
    for (int t = 0; t < len; t++) {
        const float *xt = x + (size_t)t * ldx;
        double z = b;
        for (int j = 0; j < dim; j++) z += (double)xt[j] * w[j];
        g += 1.0 / (1.0 + exp(-z));
    }
    return (float)(g / len);
}

int eng__lora_add(eng_state *st, const eng_lora *lo, const float *x, int ldx, int n, float *y, int ldy, int row0,
                  const eng_seg *segs, int n_segs, eng_err *err) {
    float *t = eng__state_scratch(st, ENG_SCRATCH_LORA, (size_t)n * lo->r);
    if (!t) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (LoRA)");
    eng_pool *pool = eng__state_pool(st);
    eng__gemm_rows(pool, n, lo->r, lo->in, x, ldx, lo->A, lo->in, t, lo->r, NULL);
    if (lo->gate_w) { /* UniPELT: the gate replaces alpha / r */
        for (int s = 0; s < n_segs; s++) {
            int r0 = segs[s].start - row0;
            if (r0 < 0 || r0 >= n) continue;
            float g = eng__gate_mean(x + (size_t)r0 * ldx, ldx, segs[s].len, lo->in, lo->gate_w, lo->gate_b);
            for (size_t i = (size_t)r0 * lo->r; i < (size_t)(r0 + segs[s].len) * lo->r; i++) t[i] *= g;
        }
    }
    if (lo->pB) /* packed at load with the factor below in it (task/load.c) */
        eng__gemm_rows_p_acc(pool, n, lo->out, lo->r, t, lo->r, lo->pB, y, ldy);
    else
        eng__gemm_rows_acc(pool, n, lo->out, lo->r, lo->gate_w ? 1.0f : lo->scaling, t, lo->r, lo->B, lo->r, y, ldy);
    return 0;
}

void eng__ia3_scale(const eng_ia3 *ia, float *y, int ldy, int n) {
    for (int i = 0; i < n; i++) {
        float *r = y + (size_t)i * ldy;
        for (int j = 0; j < ia->out; j++) r[j] *= ia->l[j];
    }
}

/* ---- bottleneck ---- */

/* Mean over each sequence's tokens of sigmoid(a_t . w + b), applied as a factor to u's rows. */
static void apply_gate(const eng_bottleneck *bn, const float *a, float *u, int H, int row0, int n, const eng_seg *segs,
                       int n_segs) {
    for (int s = 0; s < n_segs; s++) {
        int r0 = segs[s].start - row0;
        if (r0 < 0 || r0 >= n) continue;
        float gf = eng__gate_mean(a + (size_t)r0 * H, H, segs[s].len, H, bn->gate_w, bn->gate_b);
        for (int t = 0; t < segs[s].len; t++) {
            float *ut = u + (size_t)(r0 + t) * H;
            for (int j = 0; j < H; j++) ut[j] *= gf;
        }
    }
}

/* u (n, H) = scaling * (W_up act(W_down [LN_before](a) + b_down) + b_up) [* gate]. */
static int bn_core(eng_state *st, const eng_bottleneck *bn, const float *a, float *u, int H, int row0, int n,
                   const eng_seg *segs, int n_segs, eng_err *err) {
    eng_pool *pool = eng__state_pool(st);
    const float *in = a;
    if (bn->ln_before_g) {
        float *t = eng__state_scratch(st, ENG_SCRATCH_U, (size_t)n * H);
        if (!t) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (adapter)");
        if (t == u) return eng_err_set(err, ENG_INTERNAL, "adapter scratch aliasing");
        memcpy(t, a, (size_t)n * H * sizeof *t);
        eng__layernorm_rows(st->pool, t, n, H, bn->ln_before_g, bn->ln_before_b, 1e-5f);
        in = t;
    }
    float *d = eng__state_scratch(st, ENG_SCRATCH_D, (size_t)n * bn->d);
    if (!d) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (adapter)");
    /* Sparse-stored matrices run on the CSR kernel when it is the faster one, else they are
     * expanded into scratch (a few microseconds) for the dense GEMM. */
    const float *w_down = bn->w_down, *w_up = bn->w_up;
    if (bn->down_sp && !eng__sparse_prefer_kernel(bn->down_sp)) {
        float *w = eng__state_scratch(st, ENG_SCRATCH_W, (size_t)bn->d * H * 2);
        if (!w) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (adapter)");
        eng__sparse_to_dense(bn->down_sp, w);
        w_down = w;
    }
    if (bn->up_sp && !eng__sparse_prefer_kernel(bn->up_sp)) {
        float *w = eng__state_scratch(st, ENG_SCRATCH_W, (size_t)bn->d * H * 2);
        if (!w) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (adapter)");
        eng__sparse_to_dense(bn->up_sp, w + (size_t)bn->d * H);
        w_up = w + (size_t)bn->d * H;
    }
    if (bn->down_sp && !w_down) {
        eng__sparse_gemm(bn->down_sp, n, in, H, d, bn->d);
        for (int i = 0; i < n; i++) {
            float *r = d + (size_t)i * bn->d;
            for (int j = 0; j < bn->d; j++) r[j] += bn->b_down[j];
            eng__act_apply(bn->act, r, (size_t)bn->d);
        }
    } else {
        eng_epilogue ep = {.bias = bn->b_down, .act = bn->act};
        if (bn->p_down)
            eng__gemm_rows_p(pool, n, bn->d, H, in, H, bn->p_down, d, bn->d, &ep);
        else
            eng__gemm_rows(pool, n, bn->d, H, in, H, w_down, H, d, bn->d, &ep);
    }
    if (bn->up_sp && !w_up) {
        eng__sparse_gemm(bn->up_sp, n, d, bn->d, u, H);
        for (int i = 0; i < n; i++) eng__add(u + (size_t)i * H, bn->b_up, (size_t)H);
    } else {
        eng_epilogue ep = {.bias = bn->b_up, .act = ENG_ACT_IDENTITY};
        if (bn->p_up)
            eng__gemm_rows_p(pool, n, H, bn->d, d, bn->d, bn->p_up, u, H, &ep);
        else
            eng__gemm_rows(pool, n, H, bn->d, d, bn->d, w_up, bn->d, u, H, &ep);
    }
    for (int i = 0; i < n; i++) {
        float *r = u + (size_t)i * H;
        if (bn->scaling_vec)
            for (int j = 0; j < H; j++) r[j] *= bn->scaling_vec[j];
        else if (bn->scaling != 1.0f)
            for (int j = 0; j < H; j++) r[j] *= bn->scaling;
    }
    if (bn->gate_w) apply_gate(bn, a, u, H, row0, n, segs, n_segs);
    return 0;
}

/* pre_forward: from the current sub-layer output h and the sub-block input x, the adapter input
 * (into a) and the adapter residual (into r). */
static void pre_forward(eng_state *st, const eng_bottleneck *bn, const eng_config *c, const float *h, const float *x,
                        int n, const float *ln_g, const float *ln_b, float *a, float *r) {
    size_t sz = (size_t)n * c->hidden;
    int have_r = 0;
    if (bn->residual_before_ln == ENG_RESIDUAL_BEFORE_LN) {
        memcpy(r, h, sz * sizeof *r);
        have_r = 1;
    }
    if (bn->original_ln_before) {
        for (size_t i = 0; i < sz; i++) a[i] = h[i] + x[i];
        if (bn->residual_before_ln == ENG_RESIDUAL_POST_ADD) {
            memcpy(r, a, sz * sizeof *r);
            have_r = 1;
        }
        if (ln_g) eng__layernorm_rows(st->pool, a, n, c->hidden, ln_g, ln_b, c->ln_eps);
    } else {
        memcpy(a, h, sz * sizeof *a);
    }
    if (bn->residual_before_ln == ENG_RESIDUAL_AFTER_LN || !have_r) memcpy(r, a, sz * sizeof *r);
}

int eng__site_apply(eng_state *st, const eng_site *site, const eng_config *c, float *h, const float *x, int row0,
                    int n, const eng_seg *segs, int n_segs, const float *ln_g, const float *ln_b, int hooked,
                    eng_err *err) {
    int H = c->hidden;
    size_t sz = (size_t)n * H;
    float *a = eng__state_scratch(st, ENG_SCRATCH_A, sz), *r = eng__state_scratch(st, ENG_SCRATCH_R, sz);
    if (!a || !r) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (adapter)");
    const eng_bottleneck *last = NULL;
    int rc;
    /* Stack: each adapter's pre_forward on the running output, then its forward. */
    for (int k = 0; k < site->n_stack; k++) {
        const eng_bottleneck *bn = site->stack[k];
        last = bn;
        if (bn->is_parallel) { /* adapter reads the sub-block input; its output adds to h */
            float *u = eng__state_scratch(st, ENG_SCRATCH_FUSE, sz);
            if (!u) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (adapter)");
            if ((rc = bn_core(st, bn, x, u, H, row0, n, segs, n_segs, err))) return rc;
            if (bn->ln_after_g) eng__layernorm_rows(st->pool, u, n, H, bn->ln_after_g, bn->ln_after_b, 1e-5f);
            eng__add(h, u, sz);
            continue;
        }
        pre_forward(st, bn, c, h, x, n, ln_g, ln_b, a, r);
        if ((rc = bn_core(st, bn, a, h, H, row0, n, segs, n_segs, err))) return rc; /* h = u */
        if (bn->adapter_residual_before_ln) eng__add(h, r, sz);
        if (bn->ln_after_g) eng__layernorm_rows(st->pool, h, n, H, bn->ln_after_g, bn->ln_after_b, 1e-5f);
        if (!bn->adapter_residual_before_ln) eng__add(h, r, sz);
    }
    if (site->n_fuse) {
        const eng_fusion *fu = site->fusion;
        last = site->fuse[site->n_fuse - 1];
        /* query: the last child's adapter input, or its pre-LN input */
        float *q = eng__state_scratch(st, ENG_SCRATCH_Q, 2 * sz);
        /* a calibration probe runs every child, whatever the pruning (math/state.h) */
        const eng_probe *probe = &st->probe;
        uint8_t use[ENG_MAX_FUSE];
        int kept = 0;
        for (int i = 0; i < site->n_fuse; i++) kept += (use[i] = probe->sums || site->fuse_keep[i]) != 0;
        float *U = eng__state_scratch(st, ENG_SCRATCH_FUSE, (size_t)kept * sz);
        if (!q || !U) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (fusion)");
        float *qk = q + sz;
        if (fu->query_before_ln) memcpy(q, h, sz * sizeof *q);
        pre_forward(st, last, c, h, x, n, ln_g, ln_b, a, r);
        if (!fu->query_before_ln) memcpy(q, a, sz * sizeof *q);
        int j = 0;
        for (int i = 0; i < site->n_fuse; i++) {
            if (!use[i]) continue;
            float *ui = U + (size_t)j++ * sz;
            if ((rc = bn_core(st, site->fuse[i], a, ui, H, row0, n, segs, n_segs, err))) return rc;
            if (fu->residual_before) eng__add(ui, r, sz);
        }
        eng_pool *pool = eng__state_pool(st);
        eng_epilogue epq = {.bias = fu->bq, .act = ENG_ACT_IDENTITY};
        /* packed at load (task/load.c) unless H is under one panel */
        if (fu->pq) {
            eng__gemm_rows_p(pool, n, H, H, q, H, fu->pq, h, H, &epq);      /* h = Q */
            eng__gemm_rows_p(pool, n, H, H, h, H, fu->pk_t, qk, H, NULL);   /* qk = Q Wk */
        } else {
            eng__gemm_rows(pool, n, H, H, q, H, fu->wq, H, h, H, &epq);
            eng__gemm_rows(pool, n, H, H, h, H, fu->wk_t, H, qk, H, NULL);
        }
        /* per row: scores, softmax, mixture into a (the mixed U) */
        float sc[ENG_MAX_FUSE];
        int kid[ENG_MAX_FUSE];
        for (int i = 0, q2 = 0; i < site->n_fuse; i++)
            if (use[i]) kid[q2++] = site->fuse_child[i];
        size_t layer = (size_t)st->cur_layer;
        for (int t = 0; t < n; t++) {
            const float *Qt = h + (size_t)t * H, *QKt = qk + (size_t)t * H;
            double qb = 0;
            for (int e = 0; e < H; e++) qb += (double)Qt[e] * fu->bk[e];
            for (int i = 0; i < kept; i++) {
                const float *ut = U + (size_t)i * sz + (size_t)t * H;
                double s = qb;
                for (int e = 0; e < H; e++) s += (double)QKt[e] * ut[e];
                sc[i] = (float)(s / fu->temperature);
            }
            eng__softmax_row(sc, (size_t)kept);
            if (probe->sums)
                for (int i = 0; i < kept; i++) probe->sums[layer * (size_t)probe->n_children + kid[i]] += sc[i];
            float *mix = a + (size_t)t * H;
            memset(mix, 0, (size_t)H * sizeof *mix);
            for (int i = 0; i < kept; i++) {
                const float *ut = U + (size_t)i * sz + (size_t)t * H;
                for (int e = 0; e < H; e++) mix[e] += sc[i] * ut[e];
            }
        }
        if (probe->sums) probe->rows[layer] += n;
        if (fu->pv)
            eng__gemm_rows_p(pool, n, H, H, a, H, fu->pv, h, H, NULL);
        else if (fu->wv)
            eng__gemm_rows(pool, n, H, H, a, H, fu->wv, H, h, H, NULL);
        else
            memcpy(h, a, sz * sizeof *h);
        if (!fu->residual_before) eng__add(h, r, sz);
    }
    /* post_forward of the last adapter (a hooked site leaves the residual to the model) */
    if (!hooked && (!last || last->original_ln_after)) {
        eng__add(h, x, sz);
        eng__layernorm_rows(st->pool, h, n, H, ln_g, ln_b, c->ln_eps);
    }
    return 0;
}

/* LoRA and (IA)^3 of Linear `lin` on every group of rows (the encoder's and ModernBERT's layers): y (rows,
 * ldy) holds x W^T + b. */
int eng__linear_adapters(eng_state *st, const eng_group *g, int n, eng_lin lin, const float *x, int ldx,
                         float *y, int ldy, const eng_seg *segs, int n_segs, eng_err *err) {
    for (int i = 0; i < n; i++) {
        const eng_task_layer *a = g[i].ad;
        if (!a) continue;
        const float *xi = x + (size_t)g[i].row0 * ldx;
        float *yi = y + (size_t)g[i].row0 * ldy;
        if (a->lora[lin]) {
            int rc = eng__lora_add(st, a->lora[lin], xi, ldx, g[i].rows, yi, ldy, g[i].row0, segs, n_segs, err);
            if (rc) return rc;
        }
        if (a->ia3[lin]) eng__ia3_scale(a->ia3[lin], yi, ldy, g[i].rows);
    }
    return 0;
}
