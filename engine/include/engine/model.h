/* model.h - an encoder's configuration and read-only weights, and its forward pass.
 *
 * An eng_model is loaded once from a Hugging Face model directory (config.json + model.safetensors,
 * or the sharded model.safetensors.index.json form) and then only read: any number of threads run
 * forward passes over it at once, each with its own eng_state (scratch memory + thread pool), in
 * the spirit of whisper.cpp's context/state split. No lock is taken during inference.
 *
 * Supported families: BERT (BertModel keys, with or without "bert."), RoBERTa / XLM-R (position
 * ids start at padding_idx + 1), DistilBERT (its own key names, no token types), ELECTRA ("electra.";
 * embedding_size projected to hidden), DeBERTa-v2/v3 ("deberta."; relative attention) and ModernBERT
 * ("model." keys; rotary positions up to max_position_embeddings). All weights are
 * converted at load (to float32, or the backbone's Linear layers to the model's precision) and owned
 * by the model; files are not kept mapped.
 *
 * Usage:
 *     eng_model *m; eng_err e;
 *     if (eng_model_load("models/bert", &m, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
 *     eng_state *st = eng_state_new(2);
 *     int32_t ids[] = {101, 7592, 102}, lens[] = {3};
 *     eng_batch b = {.n_seq = 1, .ids = ids, .seq_len = lens};
 *     float *h = malloc(3 * eng_model_config(m)->hidden * sizeof *h);
 *     eng_encode(m, st, &b, h, NULL, &e);
 *     eng_state_free(st); eng_model_free(m); */
#ifndef ADAPTERD_ENGINE_MODEL_H
#define ADAPTERD_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/act.h"
#include "engine/status.h"

typedef enum {
    ENG_ARCH_BERT,
    ENG_ARCH_ROBERTA,
    ENG_ARCH_DISTILBERT,
    ENG_ARCH_ELECTRA,    /* BERT's layers; narrower embeddings projected to H (model/deberta.c) */
    ENG_ARCH_DEBERTA_V2, /* DeBERTa-v2/v3: disentangled relative attention (model/deberta.c) */
    ENG_ARCH_MODERNBERT, /* pre-norm, rotary, GeGLU, local/global attention (model/modernbert.c) */
} eng_arch;

/* Most layers a model may have (a config asking for more is refused); sizes per-layer tables. */
#define ENG_MAX_LAYERS 512

typedef struct {
    eng_arch arch;
    char model_type[32];  /* config.json model_type: "bert", "roberta", "xlm-roberta", "distilbert", "electra", "deberta-v2" */
    int hidden;           /* H */
    int n_layers;         /* L */
    int n_heads;
    int head_dim;         /* H / n_heads */
    int intermediate;     /* FFN width */
    int vocab;
    int max_pos;          /* position embedding rows */
    int type_vocab;       /* 0 when the model has no token type embeddings */
    int pad_id;
    int pos_offset;       /* RoBERTa: padding_idx + 1; else 0 */
    float ln_eps;
    eng_act act;
    int has_pooler;
    /* ELECTRA and DeBERTa-v2 (model/deberta.c); emb_dim == hidden and the rest 0 for the others. */
    int emb_dim;          /* embedding_size E: the embedding tables' width */
    int rel_span;         /* DeBERTa: relative table rows are 2 * rel_span (position_buckets or max_relative_positions) */
    int rel_buckets;      /* DeBERTa: position_buckets (0: no log buckets) */
    int rel_max;          /* DeBERTa: max_relative_positions as used (max_pos when the config says < 1) */
    uint8_t c2p, p2c;     /* DeBERTa: pos_att_type */
    uint8_t share_att_key, norm_rel, pos_biased; /* DeBERTa: pos_biased = position_biased_input */
    /* ModernBERT only (zero for the others): the FFN's first Linear (mlp.Wi) yields 2 x intermediate
     * (GeGLU: act(first half) * second half); the rest as config.json names it. has_pooler means
     * the prediction head (head.dense, act, head.norm over the pooled rows) is present. */
    int glu;
    int global_every;      /* global_attn_every_n_layers: layer l is global when l % global_every == 0 */
    int local_window;      /* local_attention: a local layer's token sees positions within +- window / 2 */
    float rope_global;     /* global_rope_theta */
    float rope_local;      /* local_rope_theta */
    int pool_mean;         /* classifier_pooling: 1 "mean" over the sequence, 0 "cls" (first token) */
    eng_act head_act;      /* classifier_activation */
} eng_config;

typedef struct eng_model eng_model;

/* What the four backbone Linear layers of each layer (query/key/value, attention output, FFN in,
 * FFN out) multiply in. Everything else (embeddings, attention products, LayerNorm, softmax,
 * adapters, heads, fusion, pooler) stays float32 whatever the precision. The weights are converted
 * once at load (bf16: rounded to nearest even; int8: symmetric per output feature), and the
 * float32 copies are not kept. */
typedef enum {
    ENG_PRECISION_FP32 = 0,
    ENG_PRECISION_BF16,
    ENG_PRECISION_INT8,
} eng_precision;

/* "fp32" (or "float32"), "bf16" (or "bfloat16"), "int8", any case -> the precision; -1 otherwise. */
int eng_precision_parse(const char *name);
/* "fp32", "bf16" or "int8". Static string. */
const char *eng_precision_name(eng_precision p);

typedef struct {
    eng_precision precision; /* ENG_PRECISION_FP32 */
    int allow_emulated;      /* 0: a low precision this CPU has no fast kernel for is refused at load
                              * (ENG_UNSUPPORTED, naming the missing feature); 1: it runs on the
                              * portable C kernels (same numbers, 10-50x slower) */
} eng_model_params;

eng_model_params eng_model_default_params(void);

/* Loads a model directory. Returns 0 and sets *out (owned by the caller, release with
 * eng_model_free), or a negative eng_status with err naming the file, key or tensor at fault.
 * eng_model_load is eng_model_load_params with the default params (float32). */
int eng_model_load(const char *dir, eng_model **out, eng_err *err);
int eng_model_load_params(const char *dir, const eng_model_params *p, eng_model **out, eng_err *err);
/* eng_model_load_params with the text of config.json given (len bytes, no NUL needed) instead of
 * read from dir/config.json; the weights are still read from dir, and messages still name
 * dir/config.json. eng_model_load_params reads the file and calls this. */
int eng_model_load_config(const char *dir, const char *config_json, size_t len, const eng_model_params *p,
                          eng_model **out, eng_err *err);
void eng_model_free(eng_model *m);

/* The precision asked for in dir/model.json ({"precision": "bf16"}): 0 with *out set, 0 with *out
 * left alone when there is no model.json or it names no precision, or ENG_FORMAT with err set when
 * the file is not JSON or names an unknown precision. */
int eng_model_json_precision(const char *dir, eng_precision *out, eng_err *err);

/* Borrowed pointer, valid while the model lives. */
const eng_config *eng_model_config(const eng_model *m);
/* Bytes of weights the model holds (packed backbone Linear layers in their precision, and the
 * float32 rest). */
size_t eng_model_bytes(const eng_model *m);

/* How a model's backbone products run: its precision, the kernel family that runs them on this CPU
 * now (engine/platform.h, eng_kernel_family: "avx512", "avx512_bf16", "avx512_vnni", "avx_vnni",
 * "avx2", or "c" for the portable one) and the bytes of its packed backbone weights. Strings are
 * static. */
typedef struct {
    eng_precision precision;
    const char *name;   /* eng_precision_name(precision) */
    const char *kernel;
    size_t packed_bytes;
} eng_model_precision_info;

eng_model_precision_info eng_model_precision(const eng_model *m);

/* ---- forward pass ---- */

/* A batch of sequences, packed: all token ids concatenated, no padding. */
typedef struct {
    int n_seq;
    const int32_t *ids;      /* (n_tokens) */
    const int32_t *type_ids; /* (n_tokens) or NULL for all zeros */
    const int32_t *seq_len;  /* (n_seq), each >= 1 */
} eng_batch;

/* Per-worker mutable state: a thread pool and scratch buffers that grow to the largest batch seen.
 * Not shared between concurrent calls. Returns NULL on failure. */
typedef struct eng_state eng_state;
eng_state *eng_state_new(int n_threads);
void eng_state_free(eng_state *st);

/* Runs the encoder on a packed batch. hidden_out (n_tokens, H), row-major float32, receives the
 * last hidden state; pooler_out (n_seq, H), when not NULL, the pooler output (tanh(W cls + b)) for
 * models with a pooler, or the CLS rows for models without one. Returns 0, or ENG_INVALID_ARGUMENT for ids out of
 * the vocabulary, type ids out of range or sequences longer than the position table, or
 * ENG_NO_MEMORY. */
int eng_encode(const eng_model *m, eng_state *st, const eng_batch *b, float *hidden_out, float *pooler_out,
               eng_err *err);

#endif
