/* proto.h - adapterd's wire format: the JSON of requests and responses, and the OpenAPI document.
 *
 * The server hands request bodies to the parsers here and gets C structs back; it fills C structs
 * with results and gets JSON text back. Nothing here knows HTTP or the engine, so the codec is unit
 * tested on its own (tests/proto/) and the API's shape lives in one module next to
 * proto/openapi.yaml, which documents it. The YAML is converted to JSON at build time and served
 * as /openapi.json.
 *
 * Errors are entries of adapterd's one error table (engine/status.h, the leaf library adapterd_status
 * that proto links without the rest of the engine), filled into an eng_err: ENG_MALFORMED means the
 * body is not JSON or not the document type asked for (HTTP 400); ENG_INVALID_ARGUMENT means valid
 * JSON with invalid values (422); ENG_LIMIT a configured limit (422); ENG_NO_MEMORY out of memory.
 * The mapping to HTTP is the server's (server/http_status.c). */
#ifndef ADAPTERD_PROTO_H
#define ADAPTERD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

typedef struct {
    int max_inputs;          /* inputs per request */
    int max_tasks;           /* tasks named per request */
    size_t max_text_bytes;   /* one text (or pair) in bytes */
} proto_limits;

proto_limits proto_default_limits(void);

/* One input: text and optional pair, or pre-tokenized ids, borrowed from the request (valid until
 * proto_predict_free). Ids are used as given: special tokens are the client's to include, and they
 * are never truncated. */
typedef struct {
    const char *text;        /* NULL for an ids input */
    size_t len;
    const char *pair;        /* NULL: no pair */
    size_t pair_len;
    const int32_t *ids;      /* (n_ids) token ids, or NULL for a text input */
    const int32_t *type_ids; /* (n_ids) or NULL (all 0) */
    int n_ids;
} proto_text;

/* How /v1/embed turns a sequence's last hidden state into vectors. */
typedef enum {
    PROTO_POOL_DEFAULT = 0,  /* not given: the model's (see the server) */
    PROTO_POOL_CLS,          /* the first token's row */
    PROTO_POOL_MEAN,         /* the mean of every token's row, special tokens included */
    PROTO_POOL_POOLER,       /* BERT's pooler output, tanh(W cls + b); models with a pooler only */
    PROTO_POOL_NONE,         /* every token's row */
} proto_pooling;

/* Wire name: "cls", "mean", "pooler", "none" ("default" for PROTO_POOL_DEFAULT). */
const char *proto_pooling_name(proto_pooling p);

typedef struct {
    const char *task;
    int skip;
} proto_skip;

/* "aggregation": how tagging tasks answer. */
typedef enum {
    PROTO_AGG_TOKENS = 0,    /* not given: v1 lists every token ("tokens"); v2 answers as PROTO_AGG_NONE */
    PROTO_AGG_NONE,          /* "entities", one per token, "O" left out */
    PROTO_AGG_SIMPLE,        /* "entities" grouped by label (B-/I- merged) */
    PROTO_AGG_FIRST,         /* tokens merged into words (the first token's label), then grouped */
} proto_aggregation;

/* "long": how a sequence-classification, multi-label or regression task reads a single text longer than
 * a window, per request and per task ({"name": ..., "long": {...}}). */
typedef struct {
    int given;               /* the field was given (a task's overrides the request's) */
    int chunks;              /* "mode": "chunks": every window, logits aggregated; "first" (0): the first window */
    int max;                 /* "aggregate": "max" (1): the largest logit per label; "mean" (0): their mean */
    int stride;              /* "stride": tokens two windows share, 0 by default */
} proto_long;

/* Answers a QA request may ask for ("top_k"); the engine's ENG_QA_MAX_TOP_K, which the server checks. */
#define PROTO_QA_MAX_TOP_K 100

typedef struct {
    void *doc_;              /* internal: the parsed document that owns the strings */
    proto_text *inputs;      /* (n_inputs) */
    int n_inputs;
    const char **tasks;      /* (n_tasks) names; n_tasks == 0: every task */
    int n_tasks;
    int skip;                /* "skip": N for all tasks; -1 when not given */
    proto_skip *skips;       /* "skip": {"task": N}; (n_skips) */
    int n_skips;
    double budget;           /* 0..1, or -1 when not given */
    double latency_ms;       /* > 0, or -1 when not given: target for this request's predicted engine time */
    const char *route_key;   /* "route_key": a rollout's canary choice is sticky per key (1..256 bytes); NULL: per
                              * the inputs' token ids. Owned by the request */
    int ret_scores, ret_logits, ret_explain;
    int truncate;
    proto_aggregation aggregation; /* "aggregation" */
    int32_t *ids_;           /* internal: storage of the inputs' ids and type ids */
    /* POST /v1/embed and /v1/tokenize (proto_embed_parse, proto_tokenize_parse) */
    const char *model;       /* "model", or NULL: the registry's only model */
    proto_pooling pooling;   /* embed: "pooling" */
    int normalize;           /* embed: scale each vector to unit L2 norm (default 1) */
    int add_special_tokens;  /* tokenize: default 1 */
    unsigned v2_outputs;     /* v2: the "outputs" asked for, PROTO_V2_OUT_* bits; 0: all */
    const char *v2_id;       /* v2: the request's "id" (echoed in the answer), or NULL */
    unsigned v2_binary;      /* v2: the outputs to answer as binary data (PROTO_V2_OUT_* bits; "binary_data" of an
                              * output, else the request's "binary_data_output"); 0: all as JSON */
    /* embeds (proto_embed_parse, proto_openai_embed_parse) */
    int truncate_left;       /* "truncation_direction": "left": the start of a text is cut */
    const char *prompt_name; /* "prompt_name": a prompt of the model's sentence-transformers config, or NULL */
    int dimensions;          /* "dimensions": keep the first N of each vector (Matryoshka); 0: all */
    int base64;              /* OpenAI "encoding_format": "base64" */
    int tei_batch;           /* TEI /predict: "inputs" was a batch (the answer nests a list per input) */
    int tei_raw;             /* TEI /predict, /rerank: "raw_scores" (logits, not probabilities) */
    int tei_return_text;     /* TEI /rerank: "return_text" */
    int one_task;            /* TEI /predict, /rerank: exactly one task, the one named (tasks[0]) or, with n_tasks 0, the
                              * registry's only task */
    int grpc_raw;            /* gRPC ModelInfer: answer the outputs in raw_output_contents */
    /* question answering, Hugging Face's question-answering pipeline's parameters (v1 fields, v2 and
     * gRPC parameters of the same names); 0 (doc_stride -1): not given, the pipeline's default */
    int qa_max_answer_len;   /* "max_answer_len": tokens of an answer, 1..512 */
    int qa_top_k;            /* "top_k": answers, 1..PROTO_QA_MAX_TOP_K */
    int qa_handle_impossible; /* "handle_impossible_answer": the no-answer competes */
    int qa_max_seq_len;      /* "max_seq_len": tokens of a window (capped by the model's limit) */
    int qa_doc_stride;       /* "doc_stride": tokens two windows share; -1: not given */
    int qa_max_question_len; /* "max_question_len": the question is cut to this many tokens */
    int qa_context_rule;     /* "qa_rule": "context": softmax over the context only, one window, 30 tokens */
    int qa_no_align;         /* "align_to_words": false: answers end at token offsets, not widened to words */
    int stride;              /* "stride": tagging reads a long text in windows sharing this many tokens (the
                              * token-classification pipeline's stride); -1: not given (the first window) */
    proto_long long_read;    /* "long": {"mode", "aggregate", "stride"} for every task */
    proto_long *task_long;   /* (n_tasks) a task's own "long" (given 0: the request's), or NULL */
    void **own_;             /* internal: (n_own_) buffers proto_req_own_* made, freed with the request */
    int n_own_;
} proto_predict_req;

/* Puts prefix (plen bytes) before text input i of r (a sentence-transformers prompt), in a buffer
 * r owns. Returns 0, or ENG_NO_MEMORY / ENG_LIMIT (over lim's text bytes) with err set. */
int proto_req_prefix_text(proto_predict_req *r, int i, const char *prefix, size_t plen, const proto_limits *lim,
                          eng_err *err);

/* Makes input i of r the n token ids ids (and type_ids, or NULL), copied into a buffer r owns.
 * Returns 0 or ENG_NO_MEMORY. */
int proto_req_set_ids(proto_predict_req *r, int i, const int32_t *ids, const int32_t *type_ids, int n);

/* The output tensors a v2 answer can hold; which ones a task answers depends on its head
 * (proto_v2_outputs_of): label, score, scores (classification; multi-label adds labels), value
 * (regression), answer, start, end, score (QA), entity, score, word, start, end, seq, input
 * (tagging). */
#define PROTO_V2_OUT_LABEL 1u
#define PROTO_V2_OUT_SCORE 2u
#define PROTO_V2_OUT_SCORES 4u
#define PROTO_V2_OUT_VALUE 8u
#define PROTO_V2_OUT_LABELS 16u
#define PROTO_V2_OUT_ANSWER 32u
#define PROTO_V2_OUT_START 64u
#define PROTO_V2_OUT_END 128u
#define PROTO_V2_OUT_ENTITY 256u
#define PROTO_V2_OUT_WORD 512u
#define PROTO_V2_OUT_SEQ 1024u
#define PROTO_V2_OUT_INPUT 2048u

/* Parses a POST /v1/predict body (len bytes). Returns 0 and fills *out (release with
 * proto_predict_free), or a negative eng_status with err->msg naming the field; *out then owns
 * nothing. */
int proto_predict_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *out, eng_err *err);

/* Parses a KServe v2 POST /v2/models/{task}/infer body: a BYTES input tensor named "text" (any
 * name when it is the only one) with shape [N] or [N, 1] (data flat or nested, [["a"], ["b"]], as
 * the protocol allows) and an optional "text_pair" of the same shape; "id" (a string) to echo;
 * "parameters" may carry skip, budget and truncate. tasks is set to {task}; ret_scores on. Two
 * input tensors of one name, or an "outputs" entry that names no output tensor (or one twice),
 * are ENG_INVALID_ARGUMENT; the outputs asked for go to v2_outputs. */
int proto_v2_infer_parse(const char *body, size_t len, const char *task, const proto_limits *lim, proto_predict_req *out,
                         eng_err *err);

/* The same with the binary tensor data extension: the first header_len bytes of body are the JSON
 * request (the Inference-Header-Content-Length), the rest the raw data of the inputs that carry
 * "parameters": {"binary_data_size": n}, in input order (a BYTES element is a 4-byte little-endian
 * length and its bytes). header_len == len: no binary data (proto_v2_infer_parse). A header past the
 * body, sizes that do not add up to the bytes after the header, a size the datatype and shape
 * disagree with, or an element running past its tensor is ENG_MALFORMED naming the input; an element
 * that is not UTF-8 or holds a NUL is ENG_INVALID_ARGUMENT. Outputs asked for as binary data
 * ("binary_data" per output, "binary_data_output" in "parameters") go to v2_binary. */
int proto_v2_infer_parse_binary(const char *body, size_t len, size_t header_len, const char *task, const proto_limits *lim,
                                proto_predict_req *out, eng_err *err);

/* Parses a POST /v1/embed body, in the shape of text-embeddings-inference's /embed: "inputs" (a
 * string, ids, or an array of strings / ids / {"text", "text_pair"} / {"ids", "type_ids"}),
 * "normalize" (default true), "truncate" (default false), "truncation_direction" ("right" or
 * "left", either case), "prompt_name" (a string), "dimensions" (a positive integer), "pooling" and
 * "model". Same contract as proto_predict_parse. */
int proto_embed_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *out, eng_err *err);

/* Parses a POST /v1/tokenize body: "inputs" (texts or {"text", "text_pair"}, no ids),
 * "add_special_tokens" (default true), "model". Same contract as proto_predict_parse. */
int proto_tokenize_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *out, eng_err *err);

/* Releases what a parse filled; safe on a zeroed struct. */
void proto_predict_free(proto_predict_req *r);

/* ---- results ---- */

typedef enum {
    PROTO_HEAD_CLASSIFICATION,
    PROTO_HEAD_MULTILABEL,
    PROTO_HEAD_REGRESSION,
    PROTO_HEAD_TAGGING,
    PROTO_HEAD_QA,
} proto_head_kind;

/* Name used on the wire: "classification", "multilabel", "regression", "tagging", "qa". */
const char *proto_head_kind_name(proto_head_kind k);

/* Wire name of an aggregation: "none", "simple", "first" ("tokens" for PROTO_AGG_TOKENS). */
const char *proto_aggregation_name(proto_aggregation a);

/* The output tensors a v2 answer for a task with this head holds (PROTO_V2_OUT_* bits); their
 * names, comma separated, into buf (n bytes, cut to fit). */
unsigned proto_v2_outputs_of(proto_head_kind k);
void proto_v2_outputs_describe(proto_head_kind k, char *buf, size_t n);

/* A token of a tagging result; offsets are [start, end) in code points of the text it came from. */
typedef struct {
    int32_t start, end;
    int seq;                 /* 0: text, 1: text_pair */
    int label;
    float score;
} proto_tag;

/* An entity of a tagging result ("aggregation" given). */
typedef struct {
    const char *name;        /* the token's label (none) or the group's name (simple, first), e.g. "PER" */
    float score;
    int32_t start, end;      /* [start, end) in code points of the text it came from */
    int seq;                 /* 0: text, 1: text_pair */
    const char *word;        /* that span of the text, UTF-8 (word_len bytes) */
    size_t word_len;
} proto_entity;

/* One QA answer: [start, end) in code points of the context, its text (text_len bytes of it). The
 * no-answer (handle_impossible_answer) is (0, 0) with an empty text. */
typedef struct {
    int32_t start, end;
    float score;
    const char *text;
    size_t text_len;
} proto_qa_answer;

typedef struct {
    const char *task, *version;
    proto_head_kind kind;
    int skip;
    const char *skip_source;     /* why this skip: "default", "request", "budget", "latency", "adaptive"; or NULL */
    int n_labels;
    const char *const *labels;   /* (n_labels) */
    const float *scores;     /* (n_labels) sequence heads: probabilities (multilabel: sigmoid); may be NULL */
    const float *logits;     /* (n_rows, n_labels) or NULL when not asked */
    int n_rows;
    int label;               /* classification: argmax */
    float score;             /* its probability */
    float value;             /* regression */
    const proto_tag *tags;   /* tagging: (n_tags), special tokens left out */
    int n_tags;
    proto_aggregation aggregation; /* tagging: PROTO_AGG_TOKENS answers tags, others entities */
    const proto_entity *entities;  /* tagging: (n_entities) */
    int n_entities;
    int has_answer;          /* QA: best span in text_pair (the context) */
    int32_t ans_start, ans_end;
    float ans_score;
    const char *ans_text;
    size_t ans_text_len;
    const proto_qa_answer *answers; /* QA with "top_k" > 1: (n_answers) best first, else NULL */
    int n_answers;
} proto_task_result;

/* A request's share of the batch plan it ran in. The request's own rows, streams and trunks per layer
 * are exact (the plan's structure for its inputs and skips); its times are the batch's measured
 * times attributed in proportion to its rows per layer, its tokens (embedding) and its outputs
 * (heads). The batch's own figures come alongside. */
/* A task's AdapterFusion children as served: names in fusion order, kept[i] 1 when the child runs,
 * 0 when a saved pruning dropped it. */
typedef struct {
    const char *task;                                /* the task's name (explain), or NULL */
    const char *const *children;
    const uint8_t *kept;
    int n;
} proto_fusion_view;

typedef struct {
    int n_layers;
    const int *rows, *streams, *trunks;              /* (n_layers) this request's */
    const double *ms;                                /* (n_layers) attributed to this request */
    const int *batch_rows, *batch_streams;           /* (n_layers) the whole batch's */
    const double *batch_ms;                          /* (n_layers) measured */
    double embed_ms, heads_ms, total_ms;             /* attributed to this request */
    double gflop, share;                             /* this request's work, its share of the batch's */
    double batch_gflop, batch_total_ms;
    int batch_requests, batch_inputs, batch_tokens;
    const proto_fusion_view *fusions;                /* (n_fusions) the request's tasks that have a fusion */
    int n_fusions;
} proto_explain;

typedef struct {
    const char *request_id;
    const char *model;
    int n_inputs, n_tasks;
    const proto_task_result *results; /* (n_inputs, n_tasks), input-major */
    const int *tokens;                /* (n_inputs) tokens per input */
    const int *truncated;             /* (n_inputs) 1 when the input was cut */
    const int *windows;               /* (n_inputs) windows the input was read in (said when > 1), or NULL */
    int ret_scores;
    unsigned v2_outputs;              /* v2: the output tensors asked for (PROTO_V2_OUT_*); 0: all */
    const char *v2_id;                /* v2: the client's "id", answered instead of request_id; NULL: none */
    unsigned v2_binary;               /* v2: the outputs answered as binary data (PROTO_V2_OUT_* bits) */
    const proto_predict_req *req;     /* the request answered (its protocol's flags, e.g. TEI's) */
    double queue_ms, inference_ms, total_ms;
    double latency_target_ms, predicted_ms;           /* "latency_ms" asked and the cost model's prediction; -1: none */
    double load_ms;                   /* time spent loading the request's tasks first (lazy loading); 0: none */
    int batch_requests, batch_inputs, batch_tokens;
    const proto_explain *explain;     /* NULL unless asked */
} proto_predict_resp;

/* Each encoder returns a malloc'd NUL-terminated JSON text and its length in *len, or NULL when
 * out of memory. The caller frees it. */
char *proto_predict_encode(const proto_predict_resp *r, size_t *len);
/* KServe v2 response for one task: typed output tensors by head (proto_v2_outputs_of; the ones asked
 * for when v2_outputs is set), every input's answer in one tensor per output: [N] per input, [N, K]
 * per label (scores; multi-label's labels), [M] per entity for tagging (input says whose). */
char *proto_v2_infer_encode(const proto_predict_resp *r, size_t *len);
/* The same with the binary tensor data extension: the outputs in r->v2_binary carry "parameters":
 * {"binary_data_size": n} and no "data", and their bytes follow the JSON in output order (FP32 as
 * little-endian float32, null as NaN; INT32 as little-endian int32; BYTES as a 4-byte little-endian
 * length and the bytes). *header_len: the JSON's length (the answer's Inference-Header-Content-Length)
 * when some output is binary, else 0 (the text is JSON alone, as proto_v2_infer_encode's). */
char *proto_v2_infer_encode_binary(const proto_predict_resp *r, size_t *len, size_t *header_len);
/* POST /v1/embed's answer, a bare JSON array as text-embeddings-inference gives it: vectors
 * (n_vec, dim) row-major. rows NULL: one vector per input, [[f, ...], ...]; else input i owns the
 * next rows[i] vectors and the answer nests them, [[[f, ...], ...], ...]. */
char *proto_embed_encode(const float *vectors, int n_inputs, const int *rows, int dim, size_t *len);

/* One tokenized input for POST /v1/tokenize. Offsets are in code points (offsets) and bytes
 * (byte_offsets) of the text the token came from: text for seq 0, pair for seq 1. */
typedef struct {
    int n;
    const int32_t *ids;            /* (n) */
    const char *const *tokens;     /* (n) vocabulary strings */
    const int32_t *offsets;        /* (n, 2) */
    const int32_t *byte_offsets;   /* (n, 2) */
    const int8_t *seq_ids;         /* (n) 0, 1, or -1 for added special tokens */
    const uint8_t *special;        /* (n) 1 for added special tokens */
    const char *text, *pair;
} proto_tokens;

/* [[{"id","text","special","start","stop","token","seq"}, ...], ...]: per token as in
 * text-embeddings-inference's /tokenize ("text" is the span of the input, or the vocabulary
 * string for special tokens; start/stop in code points, null for special tokens). */
char *proto_tokenize_encode(const proto_tokens *in, int n_inputs, size_t *len);

/* `adapterd predict`'s answer for one input run on this machine: {"tasks": {NAME: ...}, "plan": ...}.
 * Each task object is the one POST /v1/predict answers for that task (results[0].tasks.NAME; scores
 * always, "version" and "skip_source" left out when NULL) plus "kind" (the adapter forms) and
 * "start_layer" (the first layer with adapters). plan, when not NULL: {"tokens", "blas_core",
 * "threads", "gflop", "embed_ms", "heads_ms", "total_ms", "layers": [{"layer", "streams", "trunks",
 * "rows", "gflop", "ms"}, ...], "fusion": {TASK: {"kept", "pruned"}}} (fusion only when a task has
 * one, as in the server's explain). */
typedef struct {
    int tokens, threads;
    const char *blas_core;
    double gflop, embed_ms, heads_ms, total_ms;
    int n_layers;
    const int *streams, *trunks, *rows;              /* (n_layers) */
    const double *gflops, *ms;                       /* (n_layers) */
    const proto_fusion_view *fusions;                /* (n_fusions) tasks with a fusion */
    int n_fusions;
} proto_local_plan;

typedef struct {
    int n_tasks;
    const proto_task_result *results;                /* (n_tasks) the input's answer per task */
    const char *const *kinds;                        /* (n_tasks) e.g. "seq_bn", "lora" */
    const int *start_layers;                         /* (n_tasks) */
    const proto_local_plan *plan;                    /* NULL: not asked */
} proto_local_predict;

char *proto_local_predict_encode(const proto_local_predict *p, size_t *len);

/* The wire name of label i of a head: labels[i], or Hugging Face's default "LABEL_i" when labels
 * or labels[i] is NULL (written into buf, n bytes; PROTO_LABEL_BUF is enough). Returns labels[i]
 * or buf. Every encoder names labels through it. */
#define PROTO_LABEL_BUF 24
const char *proto_label_name(const char *const *labels, int i, char *buf, size_t n);

/* {"error":{"code":code,"message":msg}} */
char *proto_error_encode(const char *code, const char *msg, size_t *len);

/* Whose error shape a route answers in. */
typedef enum {
    PROTO_DIALECT_ADAPTERD = 0, /* {"error":{"code","message"}} */
    PROTO_DIALECT_TEI,          /* text-embeddings-inference: {"error": msg, "error_type": "Validation"|...} */
    PROTO_DIALECT_OPENAI,       /* OpenAI: {"error":{"message","type","param":null,"code"}} */
    PROTO_DIALECT_KSERVE,       /* KServe v2: {"error": msg} */
} proto_dialect;

/* The error body of dialect d for code (the error table's API code) with HTTP status http_status
 * (TEI's error_type and OpenAI's type follow from it). Same return as the encoders. */
char *proto_error_encode_as(proto_dialect d, const char *code, unsigned http_status, const char *msg, size_t *len);

/* ---- codecs: a protocol is a decoder and an encoder ----
 *
 * Every inference route of every protocol decodes into the one typed request above (proto_predict_req)
 * and is answered from the one result type (proto_predict_resp, or proto_embed_resp for embeddings); the
 * server's one path runs between the two (server/front.c). A protocol's codec is its file's pair of
 * functions and the error shape it answers in; adding a protocol is a codec here and a route table
 * entry in the server. */

/* What a decoder gets: the body as it arrived and what the route's path or query named. */
typedef struct {
    const char *body;        /* len bytes (not NUL-terminated for binary bodies) */
    size_t len;
    size_t header_len;       /* KServe v2's binary extension: bytes of JSON before the tensors; len: JSON only */
    const char *task;        /* the task the path or query names ("name" or "name@version"), or NULL */
} proto_wire;

/* An embedding answer: vectors (n_vec, dim) row-major; rows NULL: one vector per input, else input i
 * owns the next rows[i] vectors (every token's). */
typedef struct {
    const float *vectors;
    int n_inputs, dim;
    const int *rows;
    const char *model;
    int tokens;              /* tokens of every input, for usage counts */
    const proto_predict_req *req;
} proto_embed_resp;

typedef struct proto_codec {
    const char *name;        /* "adapterd", "tei", "openai", "kserve_v2", "kserve_v2_grpc": metrics and logs */
    proto_dialect dialect;   /* the shape of its errors */
    int embed;               /* 1: the encoder alone, no task (answered by encode_embed) */
    /* Fills *out from w; same contract as proto_predict_parse (the task w names is copied into *out). */
    int (*decode)(const proto_wire *w, const proto_limits *lim, proto_predict_req *out, eng_err *err);
    /* Task answers: 0 with *body malloc'd (*len bytes; *head_len the bytes of a JSON header before binary
     * data, KServe v2's binary extension, else 0), or ENG_NO_MEMORY, or ENG_INTERNAL / ENG_LIMIT when the
     * answer cannot be put in the protocol's shape. */
    int (*encode)(const proto_predict_resp *r, char **body, size_t *len, size_t *head_len);
    char *(*encode_embed)(const proto_embed_resp *e, size_t *len);
} proto_codec;

/* The codecs, one per inference route (each defined in its protocol's file). */
extern const proto_codec proto_v1_predict_codec;      /* POST /v1/predict (parse.c, v1.c) */
extern const proto_codec proto_v1_embed_codec;        /* POST /v1/embed */
extern const proto_codec proto_tei_embed_codec;       /* TEI's POST / and /embed (tei.c) */
extern const proto_codec proto_tei_embed_all_codec;   /* TEI's POST /embed_all: every token's vector, not normalized */
extern const proto_codec proto_tei_predict_codec;     /* TEI's POST /predict */
extern const proto_codec proto_tei_rerank_codec;      /* TEI's POST /rerank */
extern const proto_codec proto_openai_embed_codec;    /* OpenAI's POST /v1/embeddings (openai.c) */
extern const proto_codec proto_v2_infer_codec;        /* KServe v2 POST /v2/models/{task}/infer, JSON or binary (v2.c) */
extern const proto_codec proto_grpc_infer_codec;      /* KServe v2 gRPC ModelInfer: body is the message, no prefix (grpc.c) */

/* Copies s into memory r owns (freed with it); NULL when out of memory. */
const char *proto_req_own_string(proto_predict_req *r, const char *s);

/* ---- text-embeddings-inference (tei.c) ---- */

/* GET /info, TEI's shape: {"model_id", "model_sha": null, "model_dtype", "model_type": {"embedding":
 * {"pooling"}}, "max_concurrent_requests", "max_input_length", "max_batch_tokens",
 * "max_client_batch_size", "tokenization_workers", "version"}. */
typedef struct {
    const char *model_id, *dtype, *pooling, *version;
    int max_concurrent, max_input_length, max_batch_tokens, max_client_batch;
} proto_tei_info;
char *proto_tei_info_encode(const proto_tei_info *i, size_t *len);

/* The prompt named name in a sentence-transformers config_sentence_transformers.json text (json,
 * n bytes): {"prompts": {name: prompt}}; name NULL asks for its "default_prompt_name". Returns a
 * malloc'd copy (length in *plen), or NULL with err set: ENG_INVALID_ARGUMENT when the config has
 * no such prompt (a NULL name without a default is no error: NULL and err->code 0). */
char *proto_tei_prompt(const char *json, size_t n, const char *name, size_t *plen, eng_err *err);

/* Parses TEI's POST /predict body for task: "inputs" a string, a pair [text, text_pair], or a batch
 * of them ([[a], [b, b_pair], ...]); "raw_scores", "truncate", "truncation_direction" ("right").
 * Or, rerank set, TEI's POST /rerank body: "query" and "texts" (each input is the pair (query,
 * text)), "raw_scores", "return_text", "truncate", "truncation_direction" ("right"). Same contract
 * as proto_predict_parse; tasks is {task}. */
int proto_tei_predict_parse(const char *body, size_t len, const char *task, int rerank, const proto_limits *lim,
                            proto_predict_req *out, eng_err *err);

/* TEI's /predict answer from a one-task response: per input, [{"label", "score"}, ...] by score,
 * highest first (probabilities, or logits when raw); batch nests a list per input, else the one
 * input's list. A regression head answers its one value. */
char *proto_tei_predict_encode(const proto_predict_resp *r, int batch, int raw, size_t *len);

/* TEI's /rerank answer: [{"index", "score", "text"?}, ...] by score, highest first. A text's score
 * is the sigmoid of a regression head's value (raw: the value), or the probability (raw: the logit)
 * of a classification head's last label. texts: the inputs (for return_text, the pair is the text). */
char *proto_tei_rerank_encode(const proto_predict_resp *r, int raw, const proto_text *texts, int return_text, size_t *len);

/* Parses TEI's POST /decode body: "ids" (token ids, or an array of them: one input each) and
 * "skip_special_tokens" (default true, into add_special_tokens as its opposite: 0 skips them).
 * Same contract as proto_predict_parse. */
int proto_tei_decode_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *out, eng_err *err);

/* TEI's /decode answer: ["text", ...], one per input; lens (n) their lengths in bytes (a text may
 * hold a NUL), or NULL for NUL-terminated texts. NULL when out of memory or a text is not UTF-8. */
char *proto_tei_decode_encode(const char *const *texts, const size_t *lens, int n, size_t *len);

/* ---- OpenAI embeddings (openai.c) ---- */

/* Parses a POST /v1/embeddings body: "input" (a string, an array of strings, token ids or an array
 * of token-id arrays), "model", "encoding_format" ("float" or "base64"), "dimensions", "user"
 * (ignored). Same contract as proto_predict_parse; normalize stays on (OpenAI's vectors are unit
 * length) and truncation off. */
int proto_openai_embed_parse(const char *body, size_t len, const proto_limits *lim, proto_predict_req *out, eng_err *err);

/* {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [f, ...] or
 * base64 of the little-endian float32s}], "model", "usage": {"prompt_tokens", "total_tokens"}}
 * for vectors (n, dim) row-major. */
char *proto_openai_embed_encode(const float *vectors, int n, int dim, int base64, const char *model, int tokens,
                                size_t *len);

/* ---- KServe v2 server metadata and statistics (v2.c) ---- */

/* GET /v2/models/{m}/stats (the statistics extension, Triton's shape): {"model_stats": [{"name",
 * "version", "inference_count", "execution_count", "inference_stats": {"success": {"count", "ns"}}}]}
 * with the requests that ran the task and their cumulative time, first byte to answer, in ns. */
char *proto_v2_stats_encode(const char *name, const char *version, uint64_t count, double seconds, size_t *len);

/* GET /v2: {"name", "version", "extensions": [...]}. */
char *proto_v2_server_encode(const char *name, const char *version, const char *const *extensions, int n, size_t *len);

/* One version of a task as GET /v1/tasks lists it. state: "current" (requests get it), "loaded"
 * (in memory, not current), "available" (on disk, loads when activated or asked for by version) or
 * "failed" (not served; reason says why). */
typedef struct {
    const char *version, *state, *reason;        /* reason: NULL unless failed */
    int resident;
    size_t bytes;
    int64_t added;                               /* Unix seconds; 0: unknown (null in JSON) */
} proto_version_info;

/* A task's rollout as the listings show it (GET /v1/tasks): its candidate, mode, share, and the live
 * comparison's count and agreement. */
typedef struct {
    const char *mode;        /* "canary", "shadow"; NULL: no rollout (null) */
    char version[32];
    double percent;
    long long compared;
    double agreement;        /* 0..1; < 0: nothing compared yet (null) */
} proto_rollout_view;

typedef struct {
    const char *name, *version, *model, *kind;   /* kind: adapter forms, e.g. "seq_bn" */
    proto_head_kind head;
    int n_labels;
    const char *const *labels;
    int skip_min, skip_max, skip_default;
    size_t bytes;            /* weights when resident, else of the last load, else 0 */
    int head_known;          /* 0 before the first load (memory budget): head and adapters are null */
    int resident;            /* weights in memory */
    const char *fallback_from, *fallback_reason; /* the failed version this one stands in for, and why; NULL: none */
    const proto_version_info *versions;          /* every version, in version order; NULL: the current one only */
    int n_versions;
    /* the current version's folders (GET /v1/tasks/{name}); layout_from NULL: not shown */
    const char *layout_from;                     /* "task.json" or "inferred" */
    const char *const *layout_adapters;
    int layout_n_adapters;
    const char *layout_fusion, *layout_head;     /* NULL: none */
    proto_fusion_view fusion;                    /* n 0: no fusion (or not loaded yet) */
    proto_rollout_view rollout;                  /* mode NULL: none */
} proto_task_info;

typedef struct {
    const char *name, *model_type;
    int hidden, layers, max_tokens, vocab;
    size_t bytes;
    const char *precision, *kernel; /* "fp32" / "bf16" / "int8"; the product kernel's name */
    size_t packed_bytes;            /* of the backbone Linear weights */
    const char *const *served;      /* (n_served) the names clients may use besides name (--served-model-name) */
    int n_served;
    long long created;              /* Unix seconds the server has served it since (OpenAI's "created") */
} proto_model_info;

/* A model's id in OpenAI's answers: its first served name, or its registry name when it has none. */
const char *proto_model_id(const proto_model_info *m);

char *proto_task_encode(const proto_task_info *t, size_t *len);               /* GET /v1/tasks/{name} */
/* A task that is not served: every version on disk failed (GET /v1/tasks lists it under "unserved"). */
typedef struct {
    const char *name;
    const proto_version_info *versions;          /* all "failed", with their reasons */
    int n_versions;
} proto_unserved_task;

/* GET /v1/tasks is paginated over the served tasks in name order: ?limit=N tasks a page (default
 * PROTO_TASKS_LIMIT_DEFAULT, at most PROTO_TASKS_LIMIT_MAX) and ?after=NAME, the page's cursor: the
 * tasks whose names sort after NAME (byte order). A registry of 10,000 tasks is read page by page
 * instead of as one answer of megabytes. */
#define PROTO_TASKS_LIMIT_DEFAULT 100
#define PROTO_TASKS_LIMIT_MAX 1000
typedef struct {
    int limit;                   /* tasks on the page */
    const char *after;           /* borrowed; NULL: the first page */
} proto_tasks_page;

/* The page of GET /v1/tasks from its query values (each NULL when not given). Returns 0, or
 * ENG_INVALID_ARGUMENT with err naming the parameter (a limit that is not an integer in
 * 1..PROTO_TASKS_LIMIT_MAX, an empty after). */
int proto_tasks_page_parse(const char *limit, const char *after, proto_tasks_page *p, eng_err *err);

/* 1 when a task of this name belongs after the page's cursor. */
int proto_tasks_page_after(const proto_tasks_page *p, const char *name);

/* GET /v1/tasks: {"tasks": [n served tasks], "unserved": [nu tasks with no version that loads],
 * "next": next}. next is the cursor of the following page (the last name of this one) when more
 * tasks follow, NULL (null) on the last page; the unserved tasks are listed on the first page. */
char *proto_tasks_encode(const proto_task_info *t, int n, const proto_unserved_task *u, int nu, const char *next,
                         size_t *len);
/* GET /v1/models in OpenAI's list shape and adapterd's at once: {"object": "list", "data": [one
 * model object per model, proto_model_object_encode's], "models": [adapterd's model descriptions]}. */
char *proto_models_encode(const proto_model_info *m, int n, size_t *len);
/* GET /v1/models/{id}: OpenAI's model object {"id", "object": "model", "created", "owned_by":
 * "adapterd", "root": the registry name, "max_model_len"}, id being the name the client gave (NULL:
 * proto_model_id). */
char *proto_model_object_encode(const proto_model_info *m, const char *id, size_t *len);
char *proto_v2_model_encode(const proto_task_info *t, size_t *len);           /* GET /v2/models/{task} */
/* {"status": status, "ready": ready} for health routes, and {"live":..}/{"ready":..} for v2. */
char *proto_status_encode(const char *status, int ready, size_t *len);
char *proto_v2_bool_encode(const char *key, int value, size_t *len);

/* The OpenAPI 3.1 document (proto/openapi.yaml) as JSON; static, len bytes. */
const char *proto_openapi_json(size_t *len);

/* The Redoc standalone bundle compiled in at build time (static, len bytes), or NULL when the build
 * did not find it (npm's `redoc` not installed in docs/redoc). */
const char *proto_redoc_js(size_t *len);
/* The licence texts that go with it: Redoc's MIT licence, then the notices of the libraries its
 * bundle holds, both from the installed package (static, len bytes); NULL when the bundle is. */
const char *proto_redoc_license(size_t *len);

#endif
