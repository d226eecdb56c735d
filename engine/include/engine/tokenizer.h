/* tokenizer.h - Hugging Face compatible tokenizers: WordPiece (BERT), byte-level BPE (RoBERTa,
 * ModernBERT), SentencePiece Unigram (T5, DeBERTa-v3, XLM-R) and SentencePiece BPE.
 *
 * adapterd receives text and must produce exactly the ids the model was trained with. This module
 * reads the files users already have in a checkpoint directory: tokenizer.json (preferred), or the
 * older vocab.txt (BERT) / vocab.json + merges.txt (RoBERTa, GPT-2), or a SentencePiece model file
 * alone (spm.model, spiece.model, sentencepiece.bpe.model), with tokenizer_config.json.
 *
 *     eng_err err;
 *     eng_tokenizer *tok;
 *     if (eng_tokenizer_load("models/bert-base-uncased", &tok, &err)) { puts(err.msg); return 1; }
 *     eng_tok_params p = eng_tok_default_params();      // truncation to the model's max length
 *     eng_tok_encoding enc;
 *     if (eng_tok_encode(tok, "Hello world!", 12, NULL, 0, &p, &enc, &err) == 0) {
 *         for (size_t i = 0; i < enc.n; i++) printf("%d ", enc.ids[i]);   // 101 7592 2088 999 102
 *         eng_tok_encoding_free(&enc);
 *     }
 *     eng_tokenizer_free(tok);
 *
 * Reference behaviour: the ids are those of transformers.js (@huggingface/tokenizers), which agree
 * with the Python `tokenizers` library on real text; this is checked over ~15,000 sentences and a
 * list of hard cases by tests/parity/tokenizer. A SentencePiece model file gives the ids and offsets
 * of the sentencepiece library (its normalizer, Viterbi tie-breaking and byte fallback), shifted
 * through fairseq's table for sentencepiece.bpe.model (CamemBERT when the config says so, else
 * XLM-R), as Hugging Face's tokenizers for those models map them; its offsets follow
 * sentencepiece's rule (a token ends where the next begins, so skipped whitespace and removed
 * control characters belong to the token before). A tokenizer.json Precompiled normalizer applies
 * the model's charsmap as sentencepiece does; transformers.js approximates it with NFKC, so the two
 * can differ on rare characters. Where the two references disagree:
 *   - truncation: the Python library's (sequences are cut before special tokens are added, so the
 *     result ends with [SEP] / </s>); transformers.js cuts the final ids instead;
 *   - RoBERTa type ids: all 0 (Python's RobertaProcessing; RoBERTa has one token-type row);
 *     transformers.js gives 1 to the pair;
 *   - an empty pair text is a pair ([CLS] A [SEP] [SEP]), as in Python; transformers.js drops it;
 *   - CJK ideographs outside the BMP (U+20000..) are not split apart by the BERT normalizer, as in
 *     transformers.js (which tests UTF-16 units); the Python library splits them;
 *   - character classes come from utf8proc/PCRE2 (Unicode 15), transformers.js from Node's ICU:
 *     characters assigned after Unicode 15 may classify differently.
 *
 * Threads: a loaded tokenizer is immutable except for an internal, sharded, mutex-protected BPE
 * word cache, so one eng_tokenizer may be used by any number of threads at once without locking.
 *
 * Offsets: every token carries the span of original text it came from, as half-open [start, end)
 * pairs counted in Unicode code points of the text (or of the pair text, for tokens of the second
 * sequence) - the same numbers Python's `return_offsets_mapping=True` gives. Byte offsets into the
 * UTF-8 input are given as well. A JavaScript client must convert code points to UTF-16 units
 * itself for characters outside the BMP (emoji). */
#ifndef ADAPTERD_ENGINE_TOKENIZER_H
#define ADAPTERD_ENGINE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

/* Opaque, read-only after load; see "Threads" above. */
typedef struct eng_tokenizer eng_tokenizer;

typedef enum {
    ENG_TOK_WORDPIECE = 1, /* BERT, DistilBERT: BertNormalizer + BertPreTokenizer + WordPiece */
    ENG_TOK_BPE = 2,       /* RoBERTa, GPT-2, ModernBERT: ByteLevel pre-tokenizer + byte-level BPE */
    ENG_TOK_UNIGRAM = 3,   /* T5, DeBERTa-v3, XLM-R: SentencePiece Unigram (spm.model or tokenizer.json) */
    ENG_TOK_SPM_BPE = 4,   /* CamemBERT: SentencePiece BPE (sentencepiece.bpe.model) */
} eng_tok_kind;

typedef enum {
    ENG_TOK_TRUNCATE_NONE = 0,          /* never truncate; inputs may exceed max_length */
    ENG_TOK_TRUNCATE_LONGEST_FIRST = 1, /* shorten the longer sequence first (HF default) */
    ENG_TOK_TRUNCATE_ONLY_FIRST = 2,    /* shorten only the first sequence; error if impossible */
    ENG_TOK_TRUNCATE_ONLY_SECOND = 3,   /* shorten only the pair sequence; error if impossible */
} eng_tok_truncation;

/* Hard limit on one input text; longer texts fail with ENG_TOO_LARGE (offsets are 32-bit). */
#define ENG_TOK_MAX_INPUT_BYTES ((size_t)1 << 28)

typedef struct {
    /* Maximum number of tokens of the result, special tokens included. 0 means the model's own
     * maximum (eng_tokenizer_max_length). Ignored when truncation is ENG_TOK_TRUNCATE_NONE. */
    int32_t max_length;
    eng_tok_truncation truncation;
    /* Add the post-processor's special tokens ([CLS] A [SEP] B [SEP], <s> A </s></s> B </s>). */
    int add_special_tokens;
} eng_tok_params;

/* One encoded text or text pair. All arrays have n elements (offsets: n pairs) and live in one
 * allocation owned by the encoding; eng_tok_encoding_free releases them. */
typedef struct {
    int32_t *ids;          /* (n) token ids */
    int32_t *type_ids;     /* (n) 0 for the first sequence, 1 for the pair (BERT); all 0 for RoBERTa */
    int32_t *offsets;      /* (n, 2) [start, end) in code points of the text the token came from;
                              (0, 0) for special tokens added by post-processing */
    int32_t *byte_offsets; /* (n, 2) the same spans in bytes of the UTF-8 input */
    int8_t *seq_ids;       /* (n) 0 first text, 1 pair text, -1 for added special tokens */
    uint8_t *special_mask; /* (n) 1 for special tokens added by post-processing, else 0 (a "[MASK]"
                              typed in the text gets its id but 0 here, as in Hugging Face) */
    size_t n;
} eng_tok_encoding;

/* Loads the tokenizer of a checkpoint directory: tokenizer.json if present, otherwise vocab.txt,
 * vocab.json + merges.txt, or a SentencePiece model (spm.model, spiece.model, sentencepiece.bpe.model), with tokenizer_config.json for flags, special tokens and the maximum
 * length. Returns 0 and sets *out (free with eng_tokenizer_free), or a negative eng_status
 * (ENG_NOT_FOUND: no tokenizer files, ENG_FORMAT: malformed file, ENG_UNSUPPORTED: a normalizer,
 * pre-tokenizer, model or post-processor type this module does not implement) with *out = NULL. */
int eng_tokenizer_load(const char *model_dir, eng_tokenizer **out, eng_err *err);

/* One tokenizer file's bytes (len, no NUL needed); text NULL: the file is absent. */
typedef struct {
    const char *text;
    size_t len;
} eng_tok_text;

/* The files a tokenizer is built from, given from memory; they are used with the precedence of
 * eng_tokenizer_load (tokenizer.json, else vocab.txt, else vocab.json + merges.txt). */
typedef struct {
    eng_tok_text tokenizer_json, vocab_txt, vocab_json, merges_txt, tokenizer_config_json;
    /* a SentencePiece model (spm.model, spiece.model, sentencepiece.bpe.model), used when none of
     * the above is given; spm_name is its file name (sentencepiece.bpe.model selects fairseq's ids) */
    eng_tok_text spm_model;
    const char *spm_name;
    eng_tok_text config_json; /* the model's config.json (model_type camembert / xlm-roberta), optional */
    const char *dir; /* names the files in messages ("dir/tokenizer.json"); NULL: bare names */
} eng_tok_files;

/* eng_tokenizer_load from files given in memory, borrowed for the call only. eng_tokenizer_load
 * reads the folder's files and calls this, so both run the same parse code. Same returns. */
int eng_tokenizer_load_files(const eng_tok_files *f, eng_tokenizer **out, eng_err *err);

/* Releases a tokenizer; no encode may be running on it. eng_tokenizer_free(NULL) does nothing. */
void eng_tokenizer_free(eng_tokenizer *tok);

/* Returns the defaults: max_length 0 (the model's), LONGEST_FIRST truncation, special tokens on.
 * Unlike Hugging Face's `tokenizer(text)`, the default truncates, because the encoder cannot take
 * more positions than it has. */
eng_tok_params eng_tok_default_params(void);

/* Tokenizes text (len bytes of UTF-8, need not be NUL-terminated; NUL bytes are characters) and,
 * when pair is not NULL, the second sequence pair (pair_len bytes), applies truncation and the
 * post-processor, and fills *out. p may be NULL for the defaults. Empty texts are valid and give
 * only the special tokens. Returns 0 on success (free *out with eng_tok_encoding_free), or:
 * ENG_INVALID_ARGUMENT for invalid UTF-8 (the message names the byte offset) or a max_length that
 * cannot hold the special tokens or satisfy ONLY_FIRST/ONLY_SECOND, ENG_TOO_LARGE for inputs over
 * ENG_TOK_MAX_INPUT_BYTES, ENG_NO_MEMORY; on failure *out is zeroed and owns nothing.
 * Safe to call concurrently on the same tokenizer. */
int eng_tok_encode(const eng_tokenizer *tok, const char *text, size_t len, const char *pair,
                   size_t pair_len, const eng_tok_params *p, eng_tok_encoding *out, eng_err *err);

/* Marks in out (enc->n) the tokens that continue the word of the token before them, as Hugging
 * Face's token-classification pipeline decides it from a fast tokenizer's output (its is_subword):
 * WordPiece: the token's vocabulary string and the text it covers differ in length in code points
 * ("##kel" covering "kel"); byte-level BPE (no continuing-subword prefix): the token does not start
 * the text and neither the character before it nor its first character is a space. text/pair are
 * the inputs given to eng_tok_encode; special tokens get 0. Does not fail. */
void eng_tok_subword_flags(const eng_tokenizer *tok, const eng_tok_encoding *enc, const char *text, size_t len,
                           const char *pair, size_t pair_len, uint8_t *out);

/* Windows over a long input (windows.c), as the tokenizers library's overflowing tokens with a
 * stride: a sequence of n tokens cut into windows of `window` tokens, consecutive windows sharing
 * `stride` tokens (window k starts at k * (window - stride); the last one ends at n). Returns the
 * number of windows (1 when n <= window), or ENG_INVALID_ARGUMENT when window < 1, or when n > window
 * and not 0 <= stride < window. */
int eng_tok_window_count(int n, int window, int stride);

/* Tokens of sequence seq (0 the text, 1 the pair) in e. */
int eng_tok_seq_len(const eng_tok_encoding *e, int seq);

/* One window of full (an untruncated encoding): the tokens start..start+len-1 of sequence seq, the
 * first keep_other tokens of the other sequence (negative: all of them), and every special token
 * where the template put it; ids, types, offsets into the original texts and flags copied. Returns
 * 0 (free *out with eng_tok_encoding_free), or ENG_NO_MEMORY with *out zeroed. */
int eng_tok_window(const eng_tok_encoding *full, int seq, int start, int len, int keep_other, eng_tok_encoding *out);

/* How a long input is read in windows: the pipelines' arithmetic (windows.c), one definition for the
 * server and `adapterd predict`. Window w holds tokens [w * (room - stride), + room) of sequence seq
 * (the last one fewer), the first keep_other tokens of the other sequence and every special token. */
typedef struct {
    int seq;        /* the sequence cut: 0 the text, 1 the pair (QA's context) */
    int n;          /* its tokens */
    int room;       /* its tokens per window */
    int stride;     /* tokens consecutive windows share */
    int keep_other; /* tokens kept of the other sequence: all of them (-1), or the question cut */
    int specials;   /* special tokens per window */
    int n_windows;  /* >= 1 */
    int whole;      /* 1: the input fits as it is (one window, nothing cut) */
} eng_tok_windows;

/* The question-answering pipeline's windows over full (the untruncated encoding of question, context):
 * the question cut to max_question_len tokens (<= 0: ENG_QA_MAX_QUESTION_LEN's 64) and repeated in
 * every window of max_seq_len tokens (>= 1; the caller caps it by the model's limit), the context
 * strided by doc_stride shared tokens (< 0: half the window, at most 128). Returns 0, or
 * ENG_INVALID_ARGUMENT when the context must be cut and the question and special tokens leave no
 * more than doc_stride tokens for it (out's room and keep_other still say how many: the message's). */
int eng_tok_plan_qa(const eng_tok_encoding *full, int max_seq_len, int doc_stride, int max_question_len,
                    eng_tok_windows *out);

/* The token-classification pipeline's windows over full (a single text's untruncated encoding):
 * windows of max_len tokens special tokens included, consecutive windows sharing stride tokens.
 * Returns 0, or ENG_INVALID_ARGUMENT when the text must be cut and not 0 <= stride < room. */
int eng_tok_plan_text(const eng_tok_encoding *full, int max_len, int stride, eng_tok_windows *out);

/* Window w (0 <= w < p->n_windows) of plan p over full, as eng_tok_window. */
int eng_tok_plan_window(const eng_tok_encoding *full, const eng_tok_windows *p, int w, eng_tok_encoding *out);

/* Marks in out (enc->n) the tokens that start a word of the pre-tokenizer, as the word ids of
 * Hugging Face's fast tokenizers split the text (the question-answering pipeline widens an answer
 * to whole words with them): WordPiece: a piece without the "##" prefix; byte-level BPE: a token
 * after a space, or whose first character and the one before it differ in class (letter, number,
 * other), as the ByteLevel pattern cuts; SentencePiece: a piece starting with U+2581. Special tokens
 * and the first token of each sequence get 1. Does not fail. */
void eng_tok_word_starts(const eng_tokenizer *tok, const eng_tok_encoding *enc, const char *text, size_t len,
                         const char *pair, size_t pair_len, uint8_t *out);

/* Gives enc arrays for n tokens, all zero, in the one allocation eng_tok_encode makes (for callers
 * that fill an encoding themselves, such as token ids sent instead of text). Returns 0 (free with
 * eng_tok_encoding_free), or ENG_NO_MEMORY with *enc zeroed. */
int eng_tok_encoding_alloc(eng_tok_encoding *enc, size_t n);

/* Frees the arrays of enc and zeroes it; safe on a zeroed encoding and on NULL. */
void eng_tok_encoding_free(eng_tok_encoding *enc);

/* Returns the vocabulary string of id (byte-level BPE tokens are in their "Ġword" form), owned by
 * the tokenizer and valid until eng_tokenizer_free; NULL when id is not a token id. */
const char *eng_tok_id_to_token(const eng_tokenizer *tok, int32_t id);

/* Token ids back to text, as Hugging Face's decode does for the tokenizer's kind: WordPiece (joined
 * by spaces, "##" glued, transformers' clean_up_tokenization), byte-level BPE (GPT-2's byte alphabet
 * reversed, invalid UTF-8 replaced by U+FFFD), SentencePiece Unigram and BPE (the Metaspace decoder:
 * U+2581 as a space, none at the start; byte-fallback pieces <0xNN> as bytes). skip_special leaves
 * out special tokens. Returns 0 with *out a malloc'd NUL-terminated text of *len bytes (the caller
 * frees it; byte-level text may hold a NUL), ENG_INVALID_ARGUMENT with *bad the index of an id that
 * is no token, or ENG_NO_MEMORY. Safe to call concurrently on the same tokenizer. */
int eng_tok_decode(const eng_tokenizer *tok, const int32_t *ids, int n, bool skip_special, char **out, size_t *len, int *bad);

/* Returns the id of a vocabulary or added token string (len bytes), or -1 when it has none. */
int32_t eng_tok_token_to_id(const eng_tokenizer *tok, const char *token, size_t len);

/* Number of ids (largest id + 1); ids below it may still have no token (holes). */
int32_t eng_tokenizer_vocab_size(const eng_tokenizer *tok);

eng_tok_kind eng_tokenizer_kind(const eng_tokenizer *tok);

/* The model's maximum sequence length in tokens, special tokens included: tokenizer.json's
 * truncation.max_length, else tokenizer_config.json's model_max_length when below 100,000, else 512. */
int32_t eng_tokenizer_max_length(const eng_tokenizer *tok);

/* Special token ids from tokenizer_config.json (or the model kind's usual names); -1 when the
 * tokenizer has no such token. For RoBERTa, cls is <s> and sep is </s>. */
int32_t eng_tokenizer_cls_id(const eng_tokenizer *tok);
int32_t eng_tokenizer_sep_id(const eng_tokenizer *tok);
int32_t eng_tokenizer_pad_id(const eng_tokenizer *tok);
int32_t eng_tokenizer_unk_id(const eng_tokenizer *tok);
int32_t eng_tokenizer_mask_id(const eng_tokenizer *tok);

#endif
