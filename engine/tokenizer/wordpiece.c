/* wordpiece.c - BertPreTokenizer and the WordPiece model.
 *
 * The pre-tokenizer splits normalized text into runs of characters that are neither whitespace
 * (JavaScript's \s, as transformers.js) nor punctuation, and single punctuation characters, where
 * punctuation is the ASCII symbol ranges plus Unicode's P* categories. WordPiece then takes each word
 * greedily from the left, longest vocabulary match first, continuing pieces looked up without their
 * "##" prefix in a second map so no string is built per candidate; a word with a piece that cannot
 * be matched, or longer than max_input_chars_per_word code points, becomes one [UNK] spanning it. */
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

static bool is_bert_punct(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
               (cp >= 0x7B && cp <= 0x7E);
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

/* One word: cps [a, b) of t. */
static int wordpiece_word(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a,
                          size_t b) {
    eng__toklist *out = &ctx->out;
    if (b - a > (size_t)tok->max_input_chars_per_word)
        return eng__toklist_push(out, tok->unk_id, t->os[a], t->oe[b - 1]);
    size_t mark = out->n;
    size_t start = a;
    while (start < b) {
        const eng__strmap *m = start == a ? &tok->vocab : &tok->wp_cont;
        uint32_t maxb = start == a ? tok->wp_max_bytes : tok->wp_cont_max_bytes;
        size_t end = b;
        int32_t id = -1;
        for (; end > start; end--) {
            uint32_t nb = t->boff[end] - t->boff[start];
            if (nb > maxb) continue;
            int64_t e = eng__strmap_find(m, t->b + t->boff[start], nb);
            if (e >= 0) {
                id = m->val[e];
                break;
            }
        }
        if (id < 0) {
            out->n = mark;
            return eng__toklist_push(out, tok->unk_id, t->os[a], t->oe[b - 1]);
        }
        if (eng__toklist_push(out, id, t->os[start], t->oe[end - 1])) return ENG_NO_MEMORY;
        start = end;
    }
    return 0;
}

int eng__wordpiece_text(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a,
                        size_t b) {
    size_t i = a;
    while (i < b) {
        uint32_t cp = t->cps[i];
        if (eng__is_js_space(cp)) {
            i++;
            continue;
        }
        if (is_bert_punct(cp)) {
            if (wordpiece_word(tok, ctx, t, i, i + 1)) return ENG_NO_MEMORY;
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < b && !eng__is_js_space(t->cps[j]) && !is_bert_punct(t->cps[j])) j++;
        if (wordpiece_word(tok, ctx, t, i, j)) return ENG_NO_MEMORY;
        i = j;
    }
    return 0;
}
