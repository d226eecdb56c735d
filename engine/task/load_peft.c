/* load_peft.c - a LoRA / AdaLoRA folder as PEFT's save_pretrained writes it.
 *
 * `adapter_config.json` carries "peft_type"; the weights name the backbone's Linear layers under
 * "base_model.model.". Outside the layers: a LoRA on the word embeddings (lora_embedding_A / _B,
 * model/layer.h), and the modules_to_save head, which task/load_head.c reads from the same file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_keys.h"
#include "io/tensor_file.h"
#include "task/task_impl.h"

/* The embedding LoRA's A (r, vocab) and B (H, r) into the task: A is kept transposed, each token's
 * r values together. */
static int emb_finish(eng_load_ctx *x, eng_lora_raw *e, int rslora, float alpha) {
    const eng_config *c = x->c;
    eng_task *t = x->t;
    if (!e->A || !e->B)
        return eng_err_set(x->err, ENG_FORMAT, "%s: tensor '%s': the embedding LoRA lacks %s", x->dir,
                           (e->A ? e->tA : e->tB)->name, e->A ? "lora_embedding_B" : "lora_embedding_A");
    if (t->emb.r) return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: a second LoRA on the word embeddings", x->dir);
    int r = e->rA;
    if (e->tA->shape[1] != c->vocab)
        return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has %lld columns; the vocabulary has %d", x->dir,
                           e->tA->name, (long long)e->tA->shape[1], c->vocab);
    if (e->rB != r) /* the ranks meet in the product: name both */
        return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has rank %d, '%s' has rank %d", x->dir, e->tA->name, r,
                           e->tB->name, e->rB);
    if (e->tB->shape[0] != c->hidden)
        return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has %lld rows; the hidden size is %d", x->dir, e->tB->name,
                           (long long)e->tB->shape[0], c->hidden);
    if (r < 1) return eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' has rank 0", x->dir, e->tA->name);
    float *at = eng__task_alloc(t, (size_t)c->vocab * (size_t)r * sizeof *at);
    if (!at) return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    for (int i = 0; i < r; i++)
        for (int v = 0; v < c->vocab; v++) at[(size_t)v * r + i] = e->A[(size_t)i * c->vocab + v];
    eng__task_release(t, e->A); /* its bytes stay counted: at has the same size */
    t->emb = (eng_emb_lora){r, at, e->B, rslora ? alpha / sqrtf((float)r) : alpha / (float)r};
    return 0;
}

int eng__load_peft(eng_load_ctx *x, json_t *cfgj, eng_st_file **head_file) {
    const eng_config *c = x->c;
    const char *pt = eng__jstr(cfgj, "peft_type");
    int adalora = pt && !strcmp(pt, "ADALORA");
    if (!pt || (strcmp(pt, "LORA") && !adalora))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: peft_type '%s' is not supported (LORA, ADALORA)", x->dir,
                           pt ? pt : "(none)");
    if (eng__jbool(cfgj, "use_dora", 0)) return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: DoRA is not supported", x->dir);
    const char *bias = eng__jstr(cfgj, "bias");
    if (bias && strcmp(bias, "none"))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: bias '%s' is not supported (only 'none')", x->dir, bias);
    if (eng__jbool(cfgj, "fan_in_fan_out", 0))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: fan_in_fan_out LoRA is not supported", x->dir);
    json_t *ap = json_object_get(cfgj, "alpha_pattern"), *rp = json_object_get(cfgj, "rank_pattern");
    if ((json_is_object(ap) && json_object_size(ap)) || (!adalora && json_is_object(rp) && json_object_size(rp)))
        return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: alpha_pattern / rank_pattern are not supported", x->dir);
    float alpha = eng__jfloat(cfgj, "lora_alpha", 8);
    int rslora = eng__jbool(cfgj, "use_rslora", 0);
    static const char *files[] = {"adapter_model.safetensors", "adapter_model.bin", NULL};
    eng_st_file *f;
    int rc = eng__tensors_open_first(x->dir, files, &f, x->err);
    if (rc) return rc;
    eng_lora_raw *raw = calloc((size_t)c->n_layers * ENG_LIN_COUNT, sizeof *raw);
    if (!raw) {
        eng__st_close(f);
        return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    }
    int n_head = 0;
    eng_lora_raw emb = {0}; /* lora_embedding_A (r, vocab) and lora_embedding_B (H, r) */
    for (size_t i = 0; i < eng__st_count(f) && !rc; i++) {
        const eng_st_tensor *ts = eng__st_at(f, i);
        const char *k = eng__hf_strip_base(ts->name);
        int layer;
        const char *r = eng__hf_parse_layer(k, &layer);
        if (!r) { /* the embedding LoRA, or modules_to_save: the head, handled by load_head */
            /* ModernBERT names its word embeddings tok_embeddings */
            int is_ea = !strcmp(k, "embeddings.word_embeddings.lora_embedding_A") ||
                        !strcmp(k, "embeddings.tok_embeddings.lora_embedding_A"),
                is_eb = !strcmp(k, "embeddings.word_embeddings.lora_embedding_B") ||
                        !strcmp(k, "embeddings.tok_embeddings.lora_embedding_B");
            if (is_ea || is_eb) {
                if (adalora) {
                    rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s': AdaLoRA has no embedding LoRA", x->dir,
                                     ts->name);
                    break;
                }
                if (c->emb_dim != c->hidden) { /* ELECTRA / DeBERTa with embedding_size: the LoRA acts at E, before the projection */
                    rc = eng_err_set(x->err, ENG_UNSUPPORTED,
                                     "%s: tensor '%s': a LoRA on word embeddings of width %d (projected to hidden %d) is not "
                                     "supported", x->dir, ts->name, c->emb_dim, c->hidden);
                    break;
                }
                rc = eng__lora_tensor(x, is_ea, 0, ts, &emb);
                continue;
            }
            /* ...but never another LoRA outside the layers (position or token type embeddings) or
             * embeddings saved whole (save_embedding_layers): skipping them would serve another
             * model's answers */
            if (strstr(k, "lora_")) {
                rc = eng_err_set(x->err, ENG_UNSUPPORTED,
                                 "%s: tensor '%s': LoRA outside the encoder layers is supported only on "
                                 "embeddings.word_embeddings",
                                 x->dir, ts->name);
                break;
            }
            if (strstr(k, "embeddings.")) {
                rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s': embeddings saved with the adapter are not supported", x->dir, ts->name);
                break;
            }
            n_head++;
            continue;
        }
        if (layer >= c->n_layers) {
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' is for layer %d; the model has %d layers", x->dir,
                             ts->name, layer, c->n_layers);
            break;
        }
        const char *rest = "";
        int lin = eng__hf_parse_linear(r, &rest);
        if (lin >= 0 && !eng__hf_linear_is_own(c->arch, (eng_lin)lin, r)) {
            rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' is for another model family (this %s model's module is '%s')",
                             x->dir, ts->name, c->model_type, eng__hf_linear_path(c->arch, (eng_lin)lin));
            break;
        }
        int is_a = !strcmp(rest, "lora_A.weight") || !strcmp(rest, "lora_A");
        int is_b = !strcmp(rest, "lora_B.weight") || !strcmp(rest, "lora_B");
        int is_e = !strcmp(rest, "lora_E");
        if (lin < 0 || (!is_a && !is_b && !is_e)) {
            rc = eng_err_set(x->err, ENG_UNSUPPORTED, "%s: tensor '%s' is not supported", x->dir, ts->name);
            break;
        }
        eng_lora_raw *lr = &raw[layer * ENG_LIN_COUNT + lin];
        rc = eng__lora_tensor(x, is_a, is_e, ts, lr);
        if (rc) break;
        int in = eng__lin_in(c, (eng_lin)lin), out = eng__lin_out(c, (eng_lin)lin);
        if ((is_a && ts->shape[1] != in) || (is_b && ts->shape[0] != out) || (is_e && ts->shape[1] != 1))
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: tensor '%s' does not fit a %dx%d layer", x->dir, ts->name, out, in);
    }
    /* ranks are checked against each other in eng__lora_finish */
    for (int i = 0; i < c->n_layers * ENG_LIN_COUNT && !rc; i++)
        if (adalora && raw[i].A && !raw[i].E)
            rc = eng_err_set(x->err, ENG_SHAPE, "%s: AdaLoRA tensor '%s' has no lora_E", x->dir, raw[i].tA->name);
    eng_lora_form form = adalora ? ENG_LORA_FORM_ADALORA : rslora ? ENG_LORA_FORM_RSLORA : ENG_LORA_FORM_LORA;
    int n_lora = 0;
    for (int i = 0; i < c->n_layers * ENG_LIN_COUNT; i++) n_lora += raw[i].A || raw[i].B;
    if (!rc && !n_lora && !emb.A && !emb.B)
        rc = eng_err_set(x->err, ENG_FORMAT, "%s: no LoRA weights (lora_A / lora_B or lora_embedding_A / _B)", x->dir);
    if (!rc) rc = eng__lora_finish(x, raw, form, alpha, 0);
    if (!rc && (emb.A || emb.B)) rc = emb_finish(x, &emb, rslora, alpha);
    if (!rc && n_lora) eng__task_kind_add(x->t, adalora ? "adalora" : "lora");
    if (!rc && emb.A) eng__task_kind_add(x->t, "embedding_lora");
    free(raw);
    if (!rc && n_head) {
        *head_file = f;
        return 0;
    }
    eng__st_close(f);
    return rc;
}
