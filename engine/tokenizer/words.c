/* words.c - which tokens continue a word (eng_tok_subword_flags), for grouping tagged tokens.
 *
 * An encoding has no word ids, and the pipeline whose entities users compare with (Hugging Face's
 * token classification) does not use them either: it decides from the token string and the text
 * around the token's offsets. The same two rules are applied here, so "first" aggregation groups
 * the same tokens into words as it does. */
#include <string.h>

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
