/* words.c - which tokens continue a word (eng_tok_subword_flags), for grouping tagged tokens; and
 * where the pre-tokenizer's words start (eng_tok_word_starts), for QA answers widened to words.
 *
 * An encoding has no word ids, and the pipeline whose entities users compare with (Hugging Face's
 * token classification) does not use them either: it decides from the token string and the text
 * around the token's offsets. The same two rules are applied here, so "first" aggregation groups
 * the same tokens into words as it does. */
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

static size_t code_points(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

void eng_tok_subword_flags(const eng_tokenizer *tok, const eng_tok_encoding *enc, const char *text, size_t len,
                           const char *pair, size_t pair_len, uint8_t *out) {
    for (size_t i = 0; i < enc->n; i++) {
        out[i] = 0;
        if (enc->special_mask[i] || enc->seq_ids[i] < 0) continue;
        const char *src = enc->seq_ids[i] == 1 ? pair : text;
        size_t slen = enc->seq_ids[i] == 1 ? pair_len : len;
        int32_t b0 = enc->byte_offsets[2 * i];
        if (!src || b0 < 0 || (size_t)b0 > slen) continue;
        if (tok->kind == ENG_TOK_WORDPIECE) {
            /* the token string against the text it covers, both in code points */
            const char *t = eng_tok_id_to_token(tok, enc->ids[i]);
            if (t) out[i] = code_points(t) != (size_t)(enc->offsets[2 * i + 1] - enc->offsets[2 * i]);
        } else {
            /* no prefix marks a continuation: a token glued to the character before it continues */
            out[i] = b0 > 0 && src[b0 - 1] != ' ' && ((size_t)b0 == slen || src[b0] != ' ');
        }
    }
}

/* Letter, number, space or other: where the byte-level pre-tokenizer's pattern (' ?\p{L}+| ?\p{N}+|
 * ?[^\s\p{L}\p{N}]+|\s+') cuts between two characters that touch. */
static int char_class(const char *s, size_t at, size_t n) {
    uint32_t cp;
    if (!eng__utf8_decode((const uint8_t *)s + at, n - at, &cp)) return 3;
    if (eng__is_js_space(cp)) return 2;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return 0;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return 1;
    default: return 3;
    }
}

void eng_tok_word_starts(const eng_tokenizer *tok, const eng_tok_encoding *enc, const char *text, size_t len,
                         const char *pair, size_t pair_len, uint8_t *out) {
    for (size_t i = 0; i < enc->n; i++) {
        out[i] = 1;
        if (enc->special_mask[i] || enc->seq_ids[i] < 0 || i == 0 || enc->seq_ids[i - 1] != enc->seq_ids[i] ||
            enc->special_mask[i - 1])
            continue;
        const char *t = eng_tok_id_to_token(tok, enc->ids[i]);
        const char *src = enc->seq_ids[i] == 1 ? pair : text;
        size_t slen = enc->seq_ids[i] == 1 ? pair_len : len;
        int32_t b0 = enc->byte_offsets[2 * i], pe = enc->byte_offsets[2 * i - 1];
        switch (tok->kind) {
        case ENG_TOK_WORDPIECE: out[i] = !t || strncmp(t, "##", 2); break; /* a word's later pieces carry "##" */
        case ENG_TOK_BPE:
            /* a gap (a space the offsets leave out) or a change of character class */
            if (!src || b0 <= 0 || (size_t)b0 >= slen || pe < b0) break;
            {
                size_t q = (size_t)b0 - 1;
                while (q > 0 && ((unsigned char)src[q] & 0xC0) == 0x80) q--;
                int a = char_class(src, q, slen), b = char_class(src, (size_t)b0, slen);
                out[i] = a == 2 || a != b;
            }
            break;
        default: /* SentencePiece: words start at U+2581 (a space in the text) */
            out[i] = !t || !strncmp(t, "\xe2\x96\x81", 3);
            break;
        }
    }
}
