/* decode.c - token ids back to text (eng_tok_decode), by the decoder each tokenizer kind has in
 * Hugging Face's tokenizers:
 *   WordPiece    tokens joined by spaces, a "##" continuation glued to the token before it (the first
 *                token keeps its "##"), then
 *                transformers' clean_up_tokenization (" ," -> ",", " n't" -> "n't", ...) over the text;
 *   byte-level   the tokens' characters mapped back through GPT-2's byte alphabet to bytes (a token
 *                with a character outside it, an added token such as "<mask>" written differently,
 *                keeps its own UTF-8), the bytes read as UTF-8 with each invalid sequence replaced by
 *                U+FFFD (Rust's from_utf8_lossy);
 *   SentencePiece (Unigram, SentencePiece BPE) the Metaspace decoder: U+2581 becomes a space, and
 *                the first token loses one leading space when the pre-tokenizer prepends one (as
 *                transformers.js does it; Rust's drops every U+2581 of that token, which differs only
 *                for a first piece with one inside); byte pieces <0xNN> of a byte-fallback model
 *                become their bytes (ByteFallback).
 * Special tokens (added tokens marked special, the special ids the tokenizer names, SentencePiece's
 * control and unknown pieces) are left out when asked. Pure functions of the tokenizer: no state. */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "tokenizer/tok_internal.h"

/* A growing output text. */
typedef struct {
    char *p;
    size_t n, cap;
} dbuf;

static int put(dbuf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) return -1;
        b->p = q, b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static bool is_special(const eng_tokenizer *tok, int32_t id) {
    if (id == tok->cls_id || id == tok->sep_id || id == tok->pad_id || id == tok->mask_id || id == tok->special_unk_id ||
        id == tok->unk_id)
        return true;
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].id == id) return tok->added[i].special;
    /* a SentencePiece model file's control pieces (<s>, </s>, <pad>) and its unknown piece */
    for (int32_t p = 0; tok->ptype && p < tok->n_pieces; p++)
        if (tok->out_id[p] == id) return tok->ptype[p] == ENG__SP_CONTROL || tok->ptype[p] == ENG__SP_UNKNOWN;
    return false;
}

/* Bytes of the invalid UTF-8 sequence at s (n > 0 bytes) that one U+FFFD replaces: its lead byte and
 * the continuation bytes that still fit some valid sequence (Unicode's "maximal subpart"). */
static size_t invalid_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    uint8_t lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 1;
    size_t k = 1;
    for (; k <= need && k < n; k++) {
        if (s[k] < lo || s[k] > hi) break;
        lo = 0x80, hi = 0xBF;
    }
    return k;
}

/* Appends bytes s (n) to b as UTF-8, each invalid sequence replaced by U+FFFD. */
static int put_lossy(dbuf *b, const uint8_t *s, size_t n) {
    static const char fffd[] = "\xEF\xBF\xBD";
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int l = eng__utf8_decode(s + i, n - i, &cp);
        if (l > 0) {
            if (put(b, s + i, (size_t)l)) return -1;
            i += (size_t)l;
        } else {
            if (put(b, fffd, 3)) return -1;
            i += invalid_len(s + i, n - i);
        }
    }
    return 0;
}

/* transformers' clean_up_tokenization, in place. */
static void clean_up_spaces(char *s) {
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < sizeof from / sizeof *from; k++) {
        size_t fl = strlen(from[k]), tl = strlen(to[k]);
        for (char *p = strstr(s, from[k]); p; p = strstr(p + tl, from[k]))
            memmove(p + tl, p + fl, strlen(p + fl) + 1), memcpy(p, to[k], tl);
    }
}

/* A byte-level token's bytes into raw (GPT-2's alphabet reversed); a token with a character outside
 * the alphabet goes in as its own UTF-8. */
static int put_bytelevel(dbuf *raw, const char *t, const int16_t *inv) {
    size_t n = strlen(t), i = 0, start = raw->n;
    while (i < n) {
        uint32_t cp;
        int l = eng__utf8_decode((const uint8_t *)t + i, n - i, &cp);
        if (l <= 0 || cp >= 324 || inv[cp] < 0) {
            raw->n = start; /* not all in the alphabet: the token as written */
            return put(raw, t, n);
        }
        uint8_t byte = (uint8_t)inv[cp];
        if (put(raw, &byte, 1)) return -1;
        i += (size_t)l;
    }
    return 0;
}

/* "<0xNN>" of a byte-fallback model: its byte, or -1. */
static int byte_piece(const char *t) {
    static const char hexd[] = "0123456789ABCDEF";
    if (strlen(t) != 6 || strncmp(t, "<0x", 3) || t[5] != '>') return -1;
    const char *h = strchr(hexd, t[3]), *l = strchr(hexd, t[4]);
    if (!t[3] || !t[4] || !h || !l) return -1;
    return (int)((h - hexd) * 16 + (l - hexd));
}

int eng_tok_decode(const eng_tokenizer *tok, const int32_t *ids, int n, bool skip_special, char **out, size_t *len, int *bad) {
    *out = NULL;
    *len = 0;
    *bad = -1;
    for (int k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= tok->n_ids || !tok->id_tok[ids[k]]) {
            *bad = k;
            return ENG_INVALID_ARGUMENT;
        }
    dbuf b = {0}, raw = {0};
    int16_t inv[324];
    memset(inv, 0xff, sizeof inv);
    for (int c = 0; c < 256; c++) inv[eng__byte_to_unicode((uint8_t)c)] = (int16_t)c;
    bool spm = tok->kind == ENG_TOK_UNIGRAM || tok->kind == ENG_TOK_SPM_BPE;
    bool strip_first = tok->meta_prepend != 0 || tok->spm_dummy_prefix;
    uint32_t rep = tok->meta_rep ? tok->meta_rep : 0x2581;
    char rep_s[4];
    int rep_n = eng__utf8_encode(rep, rep_s);
    int rc = put(&b, "", 0), emitted = 0;
    for (int k = 0; !rc && k < n; k++) {
        if (skip_special && is_special(tok, ids[k])) continue;
        const char *t = tok->id_tok[ids[k]];
        if (tok->kind == ENG_TOK_BPE) {
            rc = put_bytelevel(&raw, t, inv);
        } else if (spm) {
            int byte = tok->byte_fallback ? byte_piece(t) : -1;
            if (byte >= 0) {
                uint8_t c = (uint8_t)byte;
                rc = put(&raw, &c, 1);
            } else {
                /* flush the byte pieces before this token, then the token with U+2581 as spaces */
                rc = put_lossy(&b, (const uint8_t *)raw.p, raw.n);
                raw.n = 0;
                size_t start = b.n;
                for (const char *p = t; !rc && *p;) {
                    bool is_rep = rep_n > 0 && !strncmp(p, rep_s, (size_t)rep_n);
                    rc = put(&b, is_rep ? " " : p, 1);
                    p += is_rep ? rep_n : 1;
                }
                /* the space the pre-tokenizer put before the text: one, from the first token */
                if (!rc && emitted == 0 && strip_first && b.n > start && b.p[start] == ' ')
                    memmove(b.p + start, b.p + start + 1, b.n - start), b.n--;
            }
        } else { /* WordPiece */
            bool glue = emitted && !strncmp(t, "##", 2); /* the first token keeps its "##" */
            if (glue) t += 2;
            if (emitted && !glue) rc = put(&b, " ", 1);
            if (!rc) rc = put(&b, t, strlen(t));
        }
        emitted++;
    }
    if (!rc && raw.n) rc = put_lossy(&b, (const uint8_t *)raw.p, raw.n);
    free(raw.p);
    if (rc) {
        free(b.p);
        return ENG_NO_MEMORY;
    }
    if (tok->kind == ENG_TOK_WORDPIECE) clean_up_spaces(b.p), b.n = strlen(b.p);
    *out = b.p;
    *len = b.n; /* byte-level text may hold a NUL (the byte 0x00 is a token too) */
    return 0;
}
