/* tok_internal.h - the tokenizer's data layout, shared by the files of engine/tokenizer/.
 *
 * The pipeline mirrors Hugging Face's: added-token split -> normalizer -> pre-tokenizer -> model
 * (WordPiece or byte-level BPE) -> truncation -> post-processor template. Everything in
 * struct eng_tokenizer is written once by the loader and only read afterwards; per-call scratch
 * lives in an eng__tok_ctx on the caller's stack, and the only shared mutable state is the BPE
 * word cache (eng__bpe_cache), which locks per shard. Byte offsets are uint32 throughout (inputs
 * are capped at ENG_TOK_MAX_INPUT_BYTES). Not a public header: tests may include it. */
#ifndef ADAPTERD_ENGINE_TOKENIZER_INTERNAL_H
#define ADAPTERD_ENGINE_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- string -> int32 hash map (open addressing, keys copied into one buffer) ---- */

typedef struct {
    uint32_t *slots;   /* (cap) entry index + 1, 0 = empty */
    uint32_t cap;      /* power of two, >= 2 * n */
    uint32_t n;        /* entries */
    uint32_t n_alloc;
    uint32_t *key_off; /* (n) offset of the key in keys */
    uint32_t *key_len; /* (n) */
    int32_t *val;      /* (n) */
    char *keys;        /* keys, each NUL-terminated so they can be returned as C strings */
    size_t keys_len, keys_cap;
} eng__strmap;

void eng__strmap_free(eng__strmap *m);
/* Inserts key or finds it; returns the entry index (>= 0) or -1 on out of memory. *added tells
 * whether it was new; a new entry gets val. */
int64_t eng__strmap_intern(eng__strmap *m, const char *key, size_t len, int32_t val, bool *added);
/* Returns the entry index of key, or -1. */
int64_t eng__strmap_find(const eng__strmap *m, const char *key, size_t len);
static inline const char *eng__strmap_key(const eng__strmap *m, uint32_t e) { return m->keys + m->key_off[e]; }

/* ---- (sym, sym) -> (rank, merged sym) map for BPE merges ---- */

typedef struct {
    uint64_t key; /* (a << 32) | b, UINT64_MAX = empty */
    int32_t rank;
    int32_t merged;
} eng__pair_slot;

typedef struct {
    eng__pair_slot *slots; /* (cap) */
    uint32_t cap, n;
} eng__pairmap;

/* ---- byte-level BPE word cache: sharded, direct-mapped, one mutex per shard ---- */

#define ENG__CACHE_KEY_MAX 40
#define ENG__CACHE_TOK_MAX 14
typedef struct eng__bpe_cache eng__bpe_cache;
/* A cache sized to a vocabulary of n_ids tokens (at most 4 MiB); NULL when out of memory. */
eng__bpe_cache *eng__bpe_cache_new(int32_t n_ids);
void eng__bpe_cache_free(eng__bpe_cache *c);
/* Looks up word; on a hit copies ids and token end offsets (bytes within the word) and returns the
 * token count, else returns -1. */
int eng__bpe_cache_get(eng__bpe_cache *c, const uint8_t *w, size_t n, int32_t *ids, uint8_t *ends);
void eng__bpe_cache_put(eng__bpe_cache *c, const uint8_t *w, size_t n, const int32_t *ids,
                        const uint8_t *ends, int ntok);

/* ---- the tokenizer ---- */

typedef struct {
    char *content;
    uint32_t len; /* bytes */
    int32_t id;
    bool lstrip, rstrip, normalized, special;
} eng__added_token;

typedef enum { ENG__TPL_SPECIAL, ENG__TPL_SEQ_A, ENG__TPL_SEQ_B } eng__tpl_kind;

typedef struct {
    eng__tpl_kind kind;
    int32_t type_id;
    int32_t *ids; /* (n_ids) for ENG__TPL_SPECIAL */
    int n_ids;
} eng__tpl_item;

typedef struct {
    eng__tpl_item *items; /* (n) */
    int n;
    int n_special; /* number of ids added by the special items */
} eng__template;

typedef enum { ENG__NORM_NONE = 0, ENG__NORM_BERT } eng__norm_kind;
typedef enum { ENG__PRETOK_NONE = 0, ENG__PRETOK_BERT, ENG__PRETOK_BYTELEVEL } eng__pretok_kind;

struct eng_tokenizer {
    eng_tok_kind kind;
    eng__strmap vocab;    /* token string -> id, added tokens included */
    const char **id_tok;  /* (n_ids) id -> token string in vocab.keys, NULL for holes */
    int32_t n_ids;
    int32_t unk_id;       /* model's unk token id, -1 if none (BPE without unk drops unknowns) */
    int32_t max_length;
    int32_t cls_id, sep_id, pad_id, mask_id, special_unk_id; /* accessors; -1 when absent */

    /* normalizer (BertNormalizer flags) */
    eng__norm_kind norm;
    bool clean_text, handle_chinese_chars, lowercase, strip_accents;

    /* pre-tokenizer */
    eng__pretok_kind pretok;
    bool add_prefix_space, trim_offsets, use_regex;
    pcre2_code *re; /* GPT-2 split pattern, JIT-compiled when possible */

    /* WordPiece */
    eng__strmap wp_cont;     /* continuing-subword tokens without the "##" prefix -> id */
    uint32_t wp_max_bytes;   /* longest word-initial token, bytes */
    uint32_t wp_cont_max_bytes;
    int32_t max_input_chars_per_word;

    /* byte-level BPE: symbols are vocab strings, merge parts and results */
    eng__strmap syms;     /* symbol string -> vocab id (or -1); entry index = symbol id */
    int32_t byte_sym[256];
    eng__pairmap merges;
    eng__bpe_cache *cache; /* mutable, thread-safe; pointer so encode can take a const tokenizer */

    /* added tokens, bucketed by first byte, longest first, for the split before normalization
     * (raw) and after it (normalized: added tokens with normalized=true when a normalizer exists) */
    eng__added_token *added; /* (n_added) */
    int n_added;
    int32_t *raw_bucket[256];  /* indexes into added, -1 terminated, NULL when empty */
    int32_t *norm_bucket[256];
    bool has_norm_added;

    eng__template single, pair;
};

/* ---- per-call scratch ---- */

/* The tokens of one sequence before post-processing: id and byte span in the original text. */
typedef struct {
    int32_t *ids;
    uint32_t *bs, *be;
    size_t n, cap;
} eng__toklist;

/* A normalized section: code points, their UTF-8 bytes, and for each code point the byte span of
 * the original character it came from. */
typedef struct {
    uint32_t *cps;   /* (n) */
    uint32_t *os;    /* (n) original start byte */
    uint32_t *oe;    /* (n) original end byte */
    uint32_t *boff;  /* (n + 1) byte offset of cp i in b */
    char *b;         /* UTF-8 of cps */
    size_t n, cap, nb, capb;
} eng__ntext;

typedef struct {
    eng__toklist out;
    eng__ntext t1, t2;           /* normalizer stages */
    pcre2_match_data *md;
    uint8_t *buf;                /* byte-level: prefix-space copy of a section */
    size_t buf_cap;
    int32_t *sym;                /* BPE scratch */
    uint32_t *pos;
    int32_t *rank;
    size_t bpe_cap;
    void *heap;                  /* long-word BPE scratch */
    size_t heap_cap;
} eng__tok_ctx;

int eng__toklist_push(eng__toklist *l, int32_t id, uint32_t bs, uint32_t be);

/* UTF-8: returns the sequence length (1..4) and sets *cp, or 0 for an invalid sequence. */
int eng__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Returns 1 and sets *bad to the offset of the first invalid byte, or 0 when s is valid UTF-8. */
int eng__utf8_invalid(const uint8_t *s, size_t n, size_t *bad);
int eng__utf8_encode(uint32_t cp, char *out);
bool eng__is_js_space(uint32_t cp);

/* Normalizes orig[s0, s1) with the BertNormalizer flags of tok into ctx->t2 (offsets absolute). */
int eng__bert_normalize(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *orig, uint32_t s0,
                        uint32_t s1);
/* BertPreTokenizer + WordPiece over cps [a, b) of a normalized text; appends to ctx->out. */
int eng__wordpiece_text(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a,
                        size_t b);
/* ByteLevel pre-tokenizer + BPE over orig[s0, s1); appends to ctx->out. */
int eng__bytelevel_text(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *orig, uint32_t s0,
                        uint32_t s1);

/* BPE merge of one word given as symbols; two implementations tested against each other: the
 * quadratic one is fast for short words, the heap one is O(n log n) for long ones. On return
 * sym[0..k) are the merged symbols and pos[0..k) their start positions; returns k, or -1 on OOM. */
int eng__bpe_merge_simple(const eng_tokenizer *tok, eng__tok_ctx *ctx, int32_t *sym, uint32_t *pos, int n);
int eng__bpe_merge_heap(const eng_tokenizer *tok, eng__tok_ctx *ctx, int32_t *sym, uint32_t *pos, int n);
int eng__bpe_pair(const eng__pairmap *m, int32_t a, int32_t b, int32_t *merged);
int eng__pairmap_put(eng__pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
void eng__pairmap_free(eng__pairmap *m);

/* GPT-2's byte -> printable code point table. */
uint32_t eng__byte_to_unicode(uint8_t b);

void eng__ctx_free(eng__tok_ctx *ctx);

/* JavaScript's \s as a PCRE2 class body (see eng__is_js_space). */
#define ENG__JS_WS "\\t\\n\\x0B\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"

#endif
