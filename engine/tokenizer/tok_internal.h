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

/* ---- byte trie for SentencePiece pieces (trie.c): a double array, read-only once built ---- */

typedef struct {
    int32_t base;   /* the child on byte c is node base + c, when that node's check is this node */
    uint32_t check; /* the parent node; UINT32_MAX: a free slot */
    int32_t value;  /* the key ending at this node, -1 none */
} eng__trie_node;

typedef struct {
    eng__trie_node *nodes; /* (n) node 0 is the root; base + c < n for every node and byte */
    uint32_t n;
} eng__trie;

/* Builds t over keys[i] (lens[i] bytes, any byte values) with values vals[i] >= 0; of equal keys the
 * one of lowest i is kept. Returns 0, ENG_NO_MEMORY or ENG_TOO_LARGE (t zeroed). */
int eng__trie_build(eng__trie *t, const char *const *keys, const uint32_t *lens, const int32_t *vals, size_t n);
void eng__trie_free(eng__trie *t);
/* Moves *node to its child on byte c: returns 0, or -1 when there is none (*node unchanged). */
static inline int eng__trie_step(const eng__trie *t, uint32_t *node, uint8_t c) {
    uint32_t x = (uint32_t)t->nodes[*node].base + c;
    if (t->nodes[x].check != *node) return -1;
    *node = x;
    return 0;
}
/* The value of key s[0, n): >= 0 for a key, -1 for a proper prefix of keys only, -2 for neither. */
int32_t eng__trie_find(const eng__trie *t, const uint8_t *s, size_t n);

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

typedef enum { ENG__NORM_NONE = 0, ENG__NORM_BERT, ENG__NORM_SEQ } eng__norm_kind;
typedef enum { ENG__PRETOK_NONE = 0, ENG__PRETOK_BERT, ENG__PRETOK_BYTELEVEL, ENG__PRETOK_METASPACE } eng__pretok_kind;

/* A SentencePiece precompiled charsmap: a darts-clone double array whose leaf values are offsets of
 * NUL-terminated replacement strings in norm (the layout of normalizer_spec.precompiled_charsmap). */
typedef struct {
    uint32_t *units; /* (n_units) double-array units */
    size_t n_units;
    char *norm;      /* (norm_len) replacements, NUL-terminated each */
    size_t norm_len;
} eng__charsmap;

/* Parses a charsmap blob (copied). Returns 0, ENG_FORMAT or ENG_NO_MEMORY. */
int eng__charsmap_init(eng__charsmap *m, const uint8_t *blob, size_t n);
void eng__charsmap_free(eng__charsmap *m);
/* Longest prefix of s[0, n) the map rewrites: returns its length in bytes (0: none) and points *rep
 * at the replacement (NUL-terminated, may be empty). */
size_t eng__charsmap_match(const eng__charsmap *m, const uint8_t *s, size_t n, const char **rep);

/* One normalizer of a sequence (tokenizer.json's normalizers, or SentencePiece's own) */
typedef enum {
    ENG__NS_PRECOMPILED, /* charsmap only (tokenizer.json "Precompiled") */
    ENG__NS_SPM,         /* SentencePiece's normalizer: charsmap + whitespace rules + dummy prefix */
    ENG__NS_NFC, ENG__NS_NFD, ENG__NS_NFKC, ENG__NS_NFKD,
    ENG__NS_REPLACE, ENG__NS_STRIP, ENG__NS_LOWERCASE,
} eng__nstep_kind;

typedef struct {
    eng__nstep_kind kind;
    pcre2_code *re;      /* REPLACE: the pattern (a String pattern is compiled PCRE2_LITERAL) */
    char *content;       /* REPLACE: the replacement, UTF-8 */
    bool left, right;    /* STRIP */
} eng__nstep;

/* SentencePiece piece types (ModelProto.SentencePiece.Type) */
enum { ENG__SP_NORMAL = 1, ENG__SP_UNKNOWN = 2, ENG__SP_CONTROL = 3, ENG__SP_USER = 4, ENG__SP_UNUSED = 5,
       ENG__SP_BYTE = 6 };

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

    /* normalizer sequence (norm == ENG__NORM_SEQ; zero steps: identity) */
    eng__nstep *nsteps; /* (n_nsteps) */
    int n_nsteps;
    eng__charsmap charsmap; /* for ENG__NS_PRECOMPILED / ENG__NS_SPM */
    bool spm_dummy_prefix, spm_remove_ws, spm_escape_ws; /* ENG__NS_SPM's normalizer_spec flags */

    /* Metaspace pre-tokenizer */
    uint32_t meta_rep;   /* replacement code point (U+2581) */
    int meta_prepend;    /* 0 never, 1 first section, 2 always */
    bool meta_split;
    bool ws_split;       /* WhitespaceSplit before Metaspace (pre-tokenizer Sequence, DeBERTa-v3) */

    /* Unigram (kind ENG_TOK_UNIGRAM) and SentencePiece BPE (ENG_TOK_SPM_BPE) over model pieces */
    eng__trie pieces;    /* piece string -> piece index (the lattice's pieces only), walked byte by byte */
    double *score;       /* (n_pieces) */
    uint8_t *ptype;      /* (n_pieces) ENG__SP_* */
    int32_t *out_id;     /* (n_pieces) piece index -> token id (fairseq's table shifts them) */
    int32_t n_pieces;
    int32_t sp_unk;      /* piece index of the unknown piece, -1 none */
    int32_t byte_piece[256]; /* piece index of <0xNN>, -1 absent */
    bool byte_fallback;
    bool spm_exact;      /* SentencePiece's own rules (float scores, per-byte fallback offsets, only
                            NORMAL/USER_DEFINED/UNUSED pieces in the lattice); else Hugging Face's */
    double min_score, max_score;
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
    void *lat;                   /* Unigram lattice / SentencePiece BPE scratch */
    size_t lat_cap;
    uint32_t end_orig;           /* ENG__NS_SPM: original offset where the normalized section ends */
    int section;                 /* index of the current section in the sequence (Metaspace "first") */
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

/* The normalizer sequence of tok over orig[s0, s1) into ctx->t2 (offsets absolute). */
int eng__seq_normalize(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *orig, uint32_t s0, uint32_t s1);
/* Builds t->b and t->boff from t->cps; returns 0 or ENG_NO_MEMORY. */
int eng__ntext_bytes(eng__ntext *t);
int eng__ntext_push(eng__ntext *t, uint32_t cp, uint32_t os, uint32_t oe);
void eng__ntext_free(eng__ntext *t);
/* ByteLevel pre-tokenizer + BPE over cps [a, b) of a normalized text; appends to ctx->out with
 * offsets mapped back to the original text. */
int eng__bytelevel_ntext(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a, size_t b);
/* Metaspace (when set) + Unigram or SentencePiece BPE over cps [a, b) of t; appends to ctx->out. */
int eng__unigram_text(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a, size_t b);
/* Reads a SentencePiece ModelProto (spm.model, spiece.model, sentencepiece.bpe.model) into tok:
 * pieces, normalizer and model kind; fairseq: shift ids as fairseq's dictionary (CamemBERT: 4,
 * XLM-R: 1; 0 keeps SentencePiece's ids). Returns 0 or an eng_status with err set. */
int eng__spm_load(eng_tokenizer *tok, const uint8_t *buf, size_t n, int fairseq, eng_err *err);
/* Builds tok->pieces and the byte pieces from tok's piece arrays; the strings come
 * from names[i] (len lens[i]). Returns 0 or an eng_status. */
int eng__pieces_index(eng_tokenizer *tok, const char *const *names, const uint32_t *lens, eng_err *err);
/* Bytes the piece index of tok holds (reported by the benchmarks as its memory at load). */
size_t eng__pieces_bytes(const eng_tokenizer *tok);
void eng__nsteps_free(eng_tokenizer *tok);

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
