/* hf_keys.c - the one table of Hugging Face encoder key names (hf_keys.h). */
#include "io/hf_keys.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Column 0: BERT / RoBERTa / XLM-R naming; column 1: DistilBERT; column 2: ModernBERT, whose query,
 * key and value are one fused Linear (attn.Wqkv, named as ENG_LIN_Q; K and V have no module). */
#define FAMILIES 3
static const char *const linear_paths[ENG_LIN_COUNT][FAMILIES] = {
    [ENG_LIN_Q] = {"attention.self.query", "attention.q_lin", "attn.Wqkv"},
    [ENG_LIN_K] = {"attention.self.key", "attention.k_lin", NULL},
    [ENG_LIN_V] = {"attention.self.value", "attention.v_lin", NULL},
    [ENG_LIN_O] = {"attention.output.dense", "attention.out_lin", "attn.Wo"},
    [ENG_LIN_I] = {"intermediate.dense", "ffn.lin1", "mlp.Wi"},
    [ENG_LIN_D] = {"output.dense", "ffn.lin2", "mlp.Wo"},
};
static const char *const norm_paths[ENG_NORM_COUNT][FAMILIES] = {
    [ENG_NORM_ATTN] = {"attention.output.LayerNorm", "sa_layer_norm", "attn_norm"},
    [ENG_NORM_FFN] = {"output.LayerNorm", "output_layer_norm", "mlp_norm"},
};
static const char *const layer_prefixes[FAMILIES] = {"encoder.layer.", "transformer.layer.", "layers."};

static int family(eng_arch arch) { return arch == ENG_ARCH_MODERNBERT ? 2 : arch == ENG_ARCH_DISTILBERT; }

const char *eng__hf_linear_path(eng_arch arch, eng_lin lin) { return linear_paths[lin][family(arch)]; }
const char *eng__hf_norm_path(eng_arch arch, eng_norm norm) { return norm_paths[norm][family(arch)]; }
const char *eng__hf_layer_prefix(eng_arch arch) { return layer_prefixes[family(arch)]; }

const char *eng__hf_base_prefix(eng_arch arch) {
    switch (arch) {
    case ENG_ARCH_ROBERTA: return "roberta.";
    case ENG_ARCH_DISTILBERT: return "distilbert.";
    case ENG_ARCH_MODERNBERT: return "model.";
    case ENG_ARCH_BERT: break;
    }
    return "bert.";
}

int eng__hf_in_base_namespace(eng_arch arch, const char *name) {
    static const char *const bert_ns[] = {"embeddings.", "encoder.", "pooler.", NULL};
    static const char *const distil_ns[] = {"embeddings.", "transformer.", NULL};
    static const char *const modern_ns[] = {"embeddings.", "layers.", "final_norm.", NULL};
    const char *const *ns = family(arch) == 2 ? modern_ns : family(arch) ? distil_ns : bert_ns;
    for (int i = 0; ns[i]; i++)
        if (!strncmp(name, ns[i], strlen(ns[i]))) return 1;
    return 0;
}

const char *eng__hf_strip_base(const char *k) {
    static const char *const peft = "base_model.model.";
    if (!strncmp(k, peft, strlen(peft))) k += strlen(peft);
    static const char *const base[] = {"bert.", "roberta.", "distilbert.", "xlm_roberta.", "model.", NULL};
    for (int i = 0; base[i]; i++)
        if (!strncmp(k, base[i], strlen(base[i]))) return k + strlen(base[i]);
    return k;
}

const char *eng__hf_parse_layer(const char *k, int *layer) {
    for (int f = 0; f < FAMILIES; f++) {
        size_t n = strlen(layer_prefixes[f]);
        if (strncmp(k, layer_prefixes[f], n)) continue;
        const char *p = k + n;
        if (!isdigit((unsigned char)*p)) return NULL;
        char *end;
        long v = strtol(p, &end, 10);
        if (*end != '.' || v < 0 || v > 100000) return NULL;
        *layer = (int)v;
        return end + 1;
    }
    return NULL;
}

int eng__hf_parse_linear(const char *k, const char **rest) {
    for (int f = 0; f < FAMILIES; f++)
        for (int l = 0; l < ENG_LIN_COUNT; l++) {
            if (!linear_paths[l][f]) continue;
            size_t n = strlen(linear_paths[l][f]);
            if (!strncmp(k, linear_paths[l][f], n) && k[n] == '.') {
                *rest = k + n + 1;
                return l;
            }
        }
    return -1;
}
