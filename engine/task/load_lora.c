/* load_lora.c - LoRA, AdaLoRA and (IA)^3 modules from their A / B / E matrices (AdapterHub and PEFT).
 *
 * Both loaders gather the raw tensors of every (layer, Linear) first; eng__lora_finish checks them
 * against the backbone and folds the scaling each form defines (docs/ADAPTER_FORMATS.md §3, §4). */
#include <math.h>

#include "task/task_impl.h"

static eng_lora *lora_at(eng_task *t, int layer, eng_lin lin) {
    eng_task_layer *L = &t->layers[layer];
    if (!L->lora[lin]) L->lora[lin] = eng__task_alloc(t, sizeof *L->lora[lin]);
    return L->lora[lin];
}

int eng__lora_tensor(eng_load_ctx *x, int is_a, int is_e, const eng_st_tensor *ts, eng_lora_raw *lr) {
    if (ts->ndim != 2) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' is not a matrix", x->dir, ts->name);
    float *p = eng__task_tensor_f32(x->t, ts, ts->shape[0], ts->shape[1], x->dir, x->err);
    if (!p) return x->err->code;
    if (is_e) lr->E = p, lr->tE = ts;
    else if (is_a) lr->A = p, lr->tA = ts, lr->rA = (int)ts->shape[0];
    else lr->B = p, lr->tB = ts, lr->rB = (int)ts->shape[1];
    return 0;
}

int eng__lin_in(const eng_config *c, eng_lin l) {
    return l == ENG_LIN_D ? c->intermediate : c->hidden;
}
int eng__lin_out(const eng_config *c, eng_lin l) {
    if (c->arch == ENG_ARCH_MODERNBERT && l == ENG_LIN_Q) return 3 * c->hidden; /* the fused attn.Wqkv */
    return l == ENG_LIN_I ? c->intermediate * (c->glu ? 2 : 1) : c->hidden;
}

/* ModernBERT's attn.Wqkv is one Linear (rows: query, key, value): its LoRA (or (IA)^3 vector), read as
 * the ENG_LIN_Q module with 3H outputs, becomes three modules acting on the q, k and v slices of the
 * layer's qkv product, as they do on BERT's three Linear layers. The slices share A (and any gate);
 * B's and l's rows are split, so the sum is the fused module's exactly. Each B slice is copied into an
 * allocation of its own and the fused one freed: load.c packs each B and frees it, which would free
 * the k and v slices' memory with the q one's if they pointed into one allocation (as AdapterHub's
 * merged Wqkv did: load_adapterhub.c's split_merged_qkv). */
static int split_fused_qkv(eng_task *t, eng_task_layer *L, int H) {
    if (L->lora[ENG_LIN_Q] && L->lora[ENG_LIN_Q]->out == 3 * H) {
        eng_lora *q = L->lora[ENG_LIN_Q];
        float *fused = q->B;
        size_t n = (size_t)H * q->r;
        for (int k = 0; k < 3; k++) {
            eng_lora *o = k ? eng__task_alloc(t, sizeof *o) : q;
            float *b = eng__task_copy_f32(t, fused + (size_t)k * n, n);
            if (!o || !b) return -1;
            if (k) *o = *q;
            o->out = H;
            o->B = b;
            L->lora[ENG_LIN_Q + k] = o;
        }
        eng__task_release(t, fused); /* t->bytes unchanged: the three copies hold what it held */
    }
    if (L->ia3[ENG_LIN_Q] && L->ia3[ENG_LIN_Q]->out == 3 * H) {
        eng_ia3 *q = L->ia3[ENG_LIN_Q];
        for (int k = 1; k < 3; k++) {
            eng_ia3 *o = eng__task_alloc(t, sizeof *o);
            if (!o) return -1;
            o->out = H;
            o->l = q->l + (size_t)k * H;
            L->ia3[ENG_LIN_Q + k] = o;
        }
        q->out = H;
    }
    return 0;
}

int eng__lora_finish(eng_load_ctx *x, eng_lora_raw *raw, eng_lora_form form, float alpha, int gated) {
    const eng_config *c = x->c;
    for (int l = 0; l < c->n_layers; l++)
        for (int k = 0; k < ENG_LIN_COUNT; k++) {
            eng_lora_raw *w = &raw[l * ENG_LIN_COUNT + k];
            if (!w->A && !w->B) continue;
            int in = eng__lin_in(c, (eng_lin)k), out = w->out ? w->out : eng__lin_out(c, (eng_lin)k);
            if (form == ENG_LORA_FORM_IA3) {
                if (!w->B || w->A)
                    return eng_err_set(x->err, ENG_FORMAT, "%s: (IA)^3 layer %d needs only lora_B", x->dir, l);
                /* the vector l is saved as (out, 1) */
                if (w->rB != 1)
                    return eng_err_set(x->err, ENG_SHAPE, "%s: (IA)^3 tensor '%s' must be (%d, 1)", x->dir, w->tB->name, out);
                if (x->t->layers[l].ia3[k])
                    return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s': layer %d's Linear already has an "
                                       "(IA)^3 vector from an earlier folder", x->dir, w->tB->name, l);
                eng_ia3 *ia = eng__task_alloc(x->t, sizeof *ia);
                if (!ia) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
                ia->out = out;
                ia->l = w->B;
                for (int i = 0; i < out; i++) ia->l[i] *= alpha;
                x->t->layers[l].ia3[k] = ia;
                continue;
            }
            if (!w->A || !w->B)
                return eng_err_set(x->err, ENG_FORMAT, "%s: LoRA of layer %d lacks %s", x->dir, l, w->A ? "lora_B" : "lora_A");
            /* shapes: A (r, in), B (out, r), AdaLoRA's E (r, 1): the ranks meet in the product */
            if (w->rA != w->rB)
                return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has rank %d, '%s' has rank %d", x->dir, w->tA->name,
                                   w->rA, w->tB->name, w->rB);
            if (w->E && (w->tE->shape[0] != w->rA || w->tE->shape[1] != 1))
                return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' must be (%d, 1) for the rank of '%s'", x->dir,
                                   w->tE->name, w->rA, w->tA->name);
            if (x->t->layers[l].lora[k])
                return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s': layer %d's Linear already has a LoRA from "
                                   "an earlier folder (two LoRAs on one Linear are not supported)", x->dir, w->tA->name, l);
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
            if (gated && !w->gate_w)
                return eng_err_set(x->err, ENG_FORMAT, "%s: gated LoRA of layer %d lacks gate weights", x->dir, l);
            switch (form) {
            case ENG_LORA_FORM_ADALORA:
                /* PEFT AdaLoRA: x (A * E)^T B^T * scaling / (ranknum + 1e-5), ranknum = r at init */
                if (w->E)
                    for (int i = 0; i < r; i++)
                        for (int j = 0; j < in; j++) lo->A[(size_t)i * in + j] *= w->E[i];
                lo->scaling = (alpha > 0 ? alpha : (float)r) / ((float)r + 1e-5f);
                break;
            case ENG_LORA_FORM_RSLORA:
                lo->scaling = alpha / sqrtf((float)r);
                break;
            case ENG_LORA_FORM_LORA:
            case ENG_LORA_FORM_IA3:
                lo->scaling = alpha / (float)r;
                break;
            }
        }
    if (c->arch == ENG_ARCH_MODERNBERT)
        for (int l = 0; l < c->n_layers; l++)
            if (split_fused_qkv(x->t, &x->t->layers[l], c->hidden))
                return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    return 0;
}
