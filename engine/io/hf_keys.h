/* hf_keys.h - the tensor names of Hugging Face encoder checkpoints, in one table.
 *
 * A backbone checkpoint (model/model.c) and an adapter's weights (task/load_*.c) name the same
 * modules: "encoder.layer.3.attention.self.query" in BERT and RoBERTa, "transformer.layer.3.
 * attention.q_lin" in DistilBERT, each optionally under the base model's prefix ("bert.",
 * "roberta.", "distilbert.") and, in PEFT files, under "base_model.model.". Both loaders build and
 * parse names through this file, so a new family or an alias is added in one place. */
#ifndef ADAPTERD_ENGINE_IO_HF_KEYS_H
#define ADAPTERD_ENGINE_IO_HF_KEYS_H

#include "engine/model.h"

/* Longest tensor name the loaders take apart (a buffer size; longer names are rejected or cut). */
#define ENG_HF_KEY_MAX 1024

/* The Linear layers of an encoder layer (the ones LoRA / (IA)^3 can target). */
typedef enum { ENG_LIN_Q, ENG_LIN_K, ENG_LIN_V, ENG_LIN_O, ENG_LIN_I, ENG_LIN_D, ENG_LIN_COUNT } eng_lin;

/* The two LayerNorms of an encoder layer: after attention, after the FFN. */
typedef enum { ENG_NORM_ATTN, ENG_NORM_FFN, ENG_NORM_COUNT } eng_norm;

/* Module path of a layer's Linear or LayerNorm for arch, without the layer prefix and without a
 * trailing dot: "attention.self.query", "ffn.lin1", "sa_layer_norm", ... ModernBERT's fused
 * "attn.Wqkv" is its ENG_LIN_Q; its ENG_LIN_K and ENG_LIN_V are NULL. */
const char *eng__hf_linear_path(eng_arch arch, eng_lin lin);
const char *eng__hf_norm_path(eng_arch arch, eng_norm norm);

/* "encoder.layer.", "transformer.layer." or "layers." for arch. */
const char *eng__hf_layer_prefix(eng_arch arch);

/* The base-model prefix arch's task checkpoints put before the encoder ("bert.", "roberta.",
 * "distilbert."). */
const char *eng__hf_base_prefix(eng_arch arch);

/* Does name (without base prefix) belong to the base model of arch ("embeddings.", "encoder.",
 * "pooler." / "transformer.")? */
int eng__hf_in_base_namespace(eng_arch arch, const char *name);

/* Returns k past PEFT's "base_model.model." and any base-model prefix of any family. */
const char *eng__hf_strip_base(const char *k);

/* Parses "<layer prefix><i>." of any family; returns what follows and sets *layer, or NULL. */
const char *eng__hf_parse_layer(const char *k, int *layer);

/* Parses "<linear path>." of any family at the start of k; returns the eng_lin and sets *rest to
 * what follows, or returns -1. */
int eng__hf_parse_linear(const char *k, const char **rest);

/* Does k (after the layer prefix) start with arch's own name for Linear lin? An adapter whose names
 * parse (eng__hf_parse_linear) but are another family's (BERT's "attention.self.query" on DeBERTa,
 * whose module is "attention.self.query_proj") was trained for another model. */
int eng__hf_linear_is_own(eng_arch arch, eng_lin lin, const char *k);

#endif
