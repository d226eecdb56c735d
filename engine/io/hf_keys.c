/* hf_keys.c - the one table of Hugging Face encoder key names (hf_keys.h). */
#include "io/hf_keys.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Column 0: BERT / RoBERTa / XLM-R / ELECTRA naming; column 1: DistilBERT; column 2: DeBERTa-v2
 * (BERT's but for the projections' names); column 3: ModernBERT, whose query, key and value are one
 * fused Linear (attn.Wqkv, named as ENG_LIN_Q; K and V have no module). */
#define N_FAMILIES 4
static const char *const linear_paths[ENG_LIN_COUNT][N_FAMILIES] = {
    [ENG_LIN_Q] = {"attention.self.query", "attention.q_lin", "attention.self.query_proj", "attn.Wqkv"},
    [ENG_LIN_K] = {"attention.self.key", "attention.k_lin", "attention.self.key_proj", NULL},
    [ENG_LIN_V] = {"attention.self.value", "attention.v_lin", "attention.self.value_proj", NULL},
    [ENG_LIN_O] = {"attention.output.dense", "attention.out_lin", "attention.output.dense", "attn.Wo"},
    [ENG_LIN_I] = {"intermediate.dense", "ffn.lin1", "intermediate.dense", "mlp.Wi"},
    [ENG_LIN_D] = {"output.dense", "ffn.lin2", "output.dense", "mlp.Wo"},
};
static const char *const norm_paths[ENG_NORM_COUNT][N_FAMILIES] = {
    [ENG_NORM_ATTN] = {"attention.output.LayerNorm", "sa_layer_norm", "attention.output.LayerNorm", "attn_norm"},
    [ENG_NORM_FFN] = {"output.LayerNorm", "output_layer_norm", "output.LayerNorm", "mlp_norm"},
};
static const char *const layer_prefixes[N_FAMILIES] = {"encoder.layer.", "transformer.layer.", "encoder.layer.", "layers."};

static int family(eng_arch arch) {
    return arch == ENG_ARCH_DISTILBERT ? 1 : arch == ENG_ARCH_DEBERTA_V2 ? 2 : arch == ENG_ARCH_MODERNBERT ? 3 : 0;
}

const char *eng__hf_linear_path(eng_arch arch, eng_lin lin) { return linear_paths[lin][family(arch)]; }
const char *eng__hf_norm_path(eng_arch arch, eng_norm norm) { return norm_paths[norm][family(arch)]; }
const char *eng__hf_layer_prefix(eng_arch arch) { return layer_prefixes[family(arch)]; }

const char *eng__hf_base_prefix(eng_arch arch) {
    switch (arch) {
    case ENG_ARCH_ROBERTA: return "roberta.";
    case ENG_ARCH_DISTILBERT: return "distilbert.";
    case ENG_ARCH_ELECTRA: return "electra.";
    case ENG_ARCH_DEBERTA_V2: return "deberta.";
    case ENG_ARCH_MODERNBERT: return "model.";
    case ENG_ARCH_BERT: break;
    }
    return "bert.";
}

int eng__hf_in_base_namespace(eng_arch arch, const char *name) {
    static const char *const bert_ns[] = {"embeddings.", "encoder.", "pooler.", NULL};
    static const char *const distil_ns[] = {"embeddings.", "transformer.", NULL};
    static const char *const electra_ns[] = {"embeddings.", "embeddings_project.", "encoder.", NULL};
    static const char *const deberta_ns[] = {"embeddings.", "encoder.", NULL};
    static const char *const modern_ns[] = {"embeddings.", "layers.", "final_norm.", NULL};
    const char *const *ns = arch == ENG_ARCH_ELECTRA      ? electra_ns
                            : arch == ENG_ARCH_DEBERTA_V2 ? deberta_ns
                            : arch == ENG_ARCH_MODERNBERT ? modern_ns
                            : family(arch)                ? distil_ns
                                                          : bert_ns;
    for (int i = 0; ns[i]; i++)
        if (!strncmp(name, ns[i], strlen(ns[i]))) return 1;
    return 0;
}

const char *eng__hf_strip_base(const char *k) {
    static const char *const peft = "base_model.model.";
    if (!strncmp(k, peft, strlen(peft))) k += strlen(peft);
    static const char *const base[] = {"bert.", "roberta.", "distilbert.", "xlm_roberta.", "electra.", "deberta.", "model.",
                                       NULL};
    for (int i = 0; base[i]; i++)
        if (!strncmp(k, base[i], strlen(base[i]))) return k + strlen(base[i]);
    return k;
}

const char *eng__hf_parse_layer(const char *k, int *layer) {
    for (int f = 0; f < N_FAMILIES; f++) {
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
    for (int f = 0; f < N_FAMILIES; f++)
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

int eng__hf_linear_is_own(eng_arch arch, eng_lin lin, const char *k) {
    const char *own = linear_paths[lin][family(arch)];
    if (!own) return 0;
    size_t n = strlen(own);
    return !strncmp(k, own, n) && k[n] == '.';
}
