/* load_peft.c - a LoRA / AdaLoRA folder as PEFT's save_pretrained writes it.
 *
 * `adapter_config.json` carries "peft_type"; the weights name the backbone's Linear layers under
 * "base_model.model.". Tensors outside the layers are the modules_to_save head, which
 * task/load_head.c reads from the same file. */
#include <stdlib.h>
#include <string.h>

#include "io/hf_keys.h"
#include "io/tensor_file.h"
#include "task/task_impl.h"

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
        eng_st_close(f);
        return eng_err_set(x->err, ENG_NO_MEMORY, "out of memory");
    }
    int n_head = 0;
    for (size_t i = 0; i < eng_st_count(f) && !rc; i++) {
        const eng_st_tensor *ts = eng_st_at(f, i);
        const char *k = eng__hf_strip_base(ts->name);
        int layer;
        const char *r = eng__hf_parse_layer(k, &layer);
        if (!r) { /* modules_to_save: the head, handled by load_head */
            /* ...but never a LoRA of the embeddings (lora_embedding_A/B) or embeddings saved whole
             * (save_embedding_layers): skipping them would serve another model's answers */
            if (strstr(k, "lora_")) {
                rc = eng_err_set(x->err, ENG_UNSUPPORTED,
                                 "%s: tensor '%s': LoRA outside the encoder layers (e.g. on the embeddings) is not supported",
                                 x->dir, ts->name);
                break;
            }
            if (strstr(k, "embeddings.")) {
                rc = eng_err_set(x->err, ENG_UNSUPPORTED,
                                 "%s: tensor '%s': embeddings saved with the adapter are not supported", x->dir, ts->name);
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
    if (!rc) rc = eng__lora_finish(x, raw, form, alpha, 0);
    if (!rc) eng__task_kind_add(x->t, adalora ? "adalora" : "lora");
    free(raw);
    if (!rc && n_head) {
        *head_file = f;
        return 0;
    }
    eng_st_close(f);
    return rc;
}
