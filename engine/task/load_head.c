/* load_head.c - prediction heads: AdapterHub flex heads (head_config.json) and PEFT
 * modules_to_save classifiers, both reduced to a short list of Linear + activation layers. */
#include <stdio.h>
#include <string.h>

#include "io/hf_keys.h"
#include "io/tensor_file.h"
#include "task/task_impl.h"

static int set_labels_from(eng_task *t, json_t *label2id, eng_err *err) {
    eng_head *h = &t->head;
    if (!json_is_object(label2id) || (int)json_object_size(label2id) != h->num_labels) return 0;
    h->labels = eng__task_alloc(t, (size_t)h->num_labels * sizeof *h->labels);
    if (!h->labels) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(label2id, k, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= h->num_labels || h->labels[id])
            return eng_err_set(err, ENG_FORMAT, "label2id maps '%s' to an invalid or repeated id", k);
        if (!(h->labels[id] = eng__task_strdup(t, k))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    return 0;
}

/* Layer i of the head from weight w (out, in) and bias b (out) or NULL. prev is layer i - 1's weight
 * (NULL for the first), whose outputs w takes: a mismatch names both, as either may be the wrong one. */
static int head_layer(eng_load_ctx *x, int i, const eng_st_tensor *w, const eng_st_tensor *b, const eng_st_tensor *prev,
                      eng_act act) {
    eng_head *h = &x->t->head;
    if (i >= ENG_HEAD_MAX_LAYERS) return eng_err_set(x->err, ENG_UNSUPPORTED, "%s: head has too many layers", x->dir);
    if (!w || w->ndim != 2) return eng_err_set(x->err, ENG_FORMAT, "%s: head layer %d lacks a weight matrix", x->dir, i);
    int in = (int)w->shape[1], out = (int)w->shape[0];
    int want_in = i ? h->layers[i - 1].out : x->c->hidden;
    if (in != want_in && prev)
        return eng_err_set(x->err, ENG_SHAPE, "%s: head tensor '%s' takes %d inputs, '%s' gives %d", x->dir, w->name, in,
                           prev->name, want_in);
    if (in != want_in)
        return eng_err_set(x->err, ENG_SHAPE, "%s: head tensor '%s' takes %d inputs, expected hidden size %d", x->dir,
                           w->name, in, want_in);
    if (b && (b->ndim != 1 || b->shape[0] != out))
        return eng_err_set(x->err, ENG_SHAPE, "%s: head tensor '%s' must hold %d values, one per row of '%s'", x->dir,
                           b->name, out, w->name);
    h->layers[i].in = in;
    h->layers[i].out = out;
    h->layers[i].act = act;
    if (!(h->layers[i].w = eng__task_tensor_f32(x->t, w, out, in, x->dir, x->err))) return x->err->code;
    if (b && !(h->layers[i].b = eng__task_tensor_f32(x->t, b, out, 0, x->dir, x->err))) return x->err->code;
    h->n_layers = i + 1;
    h->num_labels = out;
    return 0;
}

/* AdapterHub flex head: head_config.json + heads.<name>.<idx>.{weight,bias}. */
int eng__load_adapterhub_head(eng_load_ctx *x, const char *dir) {
    eng_err *err = x->err;
    json_t *j = eng__task_config(x, dir, "head_config.json");
    if (!j) return err->code;
    json_t *hc = json_object_get(j, "config");
    const char *name = eng__jstr(j, "name");
    int rc = 0;
    static const char *files[] = {"model_head.safetensors", "pytorch_model_head.bin", NULL};
    eng_st_file *f = NULL;
    if (!json_is_object(hc) || !name) {
        rc = eng_err_set(err, ENG_FORMAT, "%s/head_config.json: needs 'config' and 'name'", dir);
        goto done;
    }
    const char *type = eng__jstr(hc, "head_type");
    eng_head *h = &x->t->head;
    int num_labels = eng__jint(hc, "num_labels", 2), layers = eng__jint(hc, "layers", 2);
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
               : eng__jbool(hc, "use_pooler", 0)                            ? ENG_HEAD_IN_POOLER
                                                                       : ENG_HEAD_IN_CLS;
    if (h->input == ENG_HEAD_IN_POOLER && (x->c->arch == ENG_ARCH_ELECTRA || x->c->arch == ENG_ARCH_DEBERTA_V2)) {
        rc = eng_err_set(err, ENG_UNSUPPORTED, "%s: the head reads the pooler output (use_pooler), which a %s model does not have",
                         dir, x->c->model_type);
        goto done;
    }
    eng_act act;
    json_t *af = json_object_get(hc, "activation_function");
    if ((rc = eng__parse_act(json_is_string(af) ? json_string_value(af) : NULL, 0, &act, dir, err))) goto done;
    if ((rc = eng__tensors_open_first(dir, files, &f, err))) goto done;
    /* sequential indices: per layer Dropout, Linear, [activation if set and not last] */
    char pre[300];
    snprintf(pre, sizeof pre, "heads.%s.", name);
    int idx = 0;
    const eng_st_tensor *prev = NULL; /* the weight of the layer before */
    for (int l = 0; l < layers && !rc; l++) {
        idx++; /* Dropout */
        char wn[400], bnm[400];
        snprintf(wn, sizeof wn, "%s%d.weight", pre, idx);
        snprintf(bnm, sizeof bnm, "%s%d.bias", pre, idx);
        const eng_st_tensor *w = eng__st_find(f, wn), *b = eng__st_find(f, bnm);
        if (!w) {
            rc = eng_err_set(err, ENG_FORMAT, "%s: missing head tensor '%s'", dir, wn);
            break;
        }
        int last = l == layers - 1;
        rc = head_layer(x, l, w, b, prev, last ? ENG_ACT_IDENTITY : act);
        prev = w;
        idx++; /* Linear */
        if (!last && act != ENG_ACT_IDENTITY) idx++;
    }
    if (!rc && h->num_labels != num_labels && h->type != ENG_HEAD_QA)
        rc = eng_err_set(err, ENG_SHAPE, "%s: head tensor '%s' outputs %d values, config says num_labels %d", dir,
                         prev ? prev->name : "(none)", h->num_labels, num_labels);
    if (!rc && h->type == ENG_HEAD_QA && h->num_labels != 2)
        rc = eng_err_set(err, ENG_SHAPE, "%s: question answering head tensor '%s' must output 2 values (start, end)", dir,
                         prev ? prev->name : "(none)");
    if (!rc) {
        json_t *l2i = json_object_get(hc, "label2id");
        if (!json_is_object(l2i)) l2i = json_object_get(j, "label2id");
        rc = set_labels_from(x->t, l2i, err);
    }
done:
    eng__st_close(f);
    json_decref(j);
    return rc;
}

/* PEFT modules_to_save heads: BERT classifier(pooler), RoBERTa classifier.dense/out_proj(CLS) (ELECTRA
 * the same with gelu), DistilBERT pre_classifier/classifier(CLS), DeBERTa pooler.dense/classifier(CLS)
 * (ContextPooler, gelu: pooler_hidden_act's default and the released models'). */
int eng__load_peft_head(eng_load_ctx *x, eng_st_file *f) {
    eng_head *h = &x->t->head;
    const eng_st_tensor *t[4] = {0};
    static const char *names[5][2] = {{"classifier.dense.", "classifier.out_proj."},
                                      {"pre_classifier.", "classifier."},
                                      {"pooler.dense.", "classifier."},
                                      {"classifier.", NULL},
                                      {NULL, NULL}};
    char buf[ENG_HF_KEY_MAX];
    for (int form = 0; form < 4; form++) {
        for (int i = 0; i < 2 && names[form][i]; i++) {
            const eng_st_tensor *w = NULL, *b = NULL;
            for (size_t k = 0; k < eng__st_count(f); k++) {
                const eng_st_tensor *ts = eng__st_at(f, k);
                const char *n = eng__hf_strip_base(ts->name);
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
            if (form == 3 && x->c->arch == ENG_ARCH_DEBERTA_V2)
                return eng_err_set(x->err, ENG_UNSUPPORTED,
                                   "%s: DeBERTa's classifier reads its ContextPooler (pooler.dense), which "
                                   "modules_to_save does not hold; train with \"pooler\" in modules_to_save",
                                   x->dir);
            h->type = ENG_HEAD_CLASSIFICATION;
            if (form == 3) h->input = x->c->arch == ENG_ARCH_DISTILBERT ? ENG_HEAD_IN_CLS : ENG_HEAD_IN_POOLER;
            else h->input = ENG_HEAD_IN_CLS;
            eng_act mid = form == 0 ? (x->c->arch == ENG_ARCH_ELECTRA ? ENG_ACT_GELU : ENG_ACT_TANH)
                          : form == 2 ? ENG_ACT_GELU
                                      : ENG_ACT_RELU;
            int rc = head_layer(x, 0, t[0], t[1], NULL, two ? mid : ENG_ACT_IDENTITY);
            if (!rc && two) rc = head_layer(x, 1, t[2], t[3], t[0], ENG_ACT_IDENTITY);
            if (!rc && h->num_labels == 1) h->type = ENG_HEAD_REGRESSION;
            return rc;
        }
        memset(t, 0, sizeof t);
    }
    return eng_err_set(x->err, ENG_FORMAT, "%s: modules_to_save holds no recognised classifier", x->dir);
}
