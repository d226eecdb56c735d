/* precompiled.c - SentencePiece's precompiled charsmap and the two normalizers built on it.
 *
 * A SentencePiece model ships its normalization rules (nmt_nfkc and friends) compiled: a darts-clone
 * double-array trie over UTF-8 byte strings whose leaf values are offsets of NUL-terminated
 * replacement strings stored after the trie. Normalizing walks the text and, at each position,
 * replaces the longest prefix the trie knows (common-prefix search, longest result) by its
 * replacement, else copies one character: exactly sentencepiece's Normalizer::NormalizePrefix. The
 * trie is read in place with every index bounds-checked, so a corrupt blob gives no match or a
 * format error, never a read outside it.
 *
 * Two normalizers use it. tokenizer.json's "Precompiled" is the rewrite alone. SentencePiece's own
 * normalizer (a .model file read directly) adds its whitespace rules: leading whitespace dropped,
 * runs collapsed to one, trailing whitespace dropped (remove_extra_whitespaces), a U+2581 prefix
 * (add_dummy_prefix) and spaces written as U+2581 (escape_whitespaces). Offsets follow
 * sentencepiece's norm_to_orig: every output character of a rewrite points at the start of the
 * original characters it came from, and ctx->end_orig is where the normalized text ends in the
 * original (before trailing whitespace), so a token ends where the next one starts. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define SPACE_SYMBOL 0x2581u

static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

int eng__charsmap_init(eng__charsmap *m, const uint8_t *blob, size_t n) {
    memset(m, 0, sizeof *m);
    if (n < 4) return ENG_FORMAT;
    uint32_t trie = rd32(blob);
    if (trie % 4 || trie < 4 || (size_t)trie > n - 4) return ENG_FORMAT;
    m->n_units = trie / 4;
    m->units = malloc(trie);
    m->norm_len = n - 4 - trie;
    m->norm = malloc(m->norm_len + 1);
    if (!m->units || !m->norm) {
        eng__charsmap_free(m);
        return ENG_NO_MEMORY;
    }
    for (size_t i = 0; i < m->n_units; i++) m->units[i] = rd32(blob + 4 + 4 * i);
    memcpy(m->norm, blob + 4 + trie, m->norm_len);
    m->norm[m->norm_len] = 0; /* the last string is terminated even in a truncated blob */
    return 0;
}

void eng__charsmap_free(eng__charsmap *m) {
    free(m->units);
    free(m->norm);
    memset(m, 0, sizeof *m);
}

/* darts-clone unit fields */
static inline bool u_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static inline uint32_t u_value(uint32_t u) { return u & ((1u << 31) - 1); }
static inline uint32_t u_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static inline uint32_t u_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

size_t eng__charsmap_match(const eng__charsmap *m, const uint8_t *s, size_t n, const char **rep) {
    if (!m->n_units) return 0;
    size_t best = 0;
    size_t pos = u_offset(m->units[0]);
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= m->n_units) break;
        uint32_t u = m->units[pos];
        if (u_label(u) != s[i]) break;
        pos ^= u_offset(u);
        if (u_has_leaf(u)) {
            if (pos >= m->n_units) break;
            uint32_t v = u_value(m->units[pos]);
            if (v <= m->norm_len) {
                best = i + 1;
                *rep = m->norm + v;
            }
        }
    }
    return best;
}

/* One rewrite step at byte p of in (its bytes built): the byte length consumed and the replacement
 * (a pointer into the charsmap, or the input character itself, copied to one[]). */
static size_t next_chunk(const eng__charsmap *m, const eng__ntext *in, size_t p, const char **rep, size_t *rep_len,
                         char one[5]) {
    const uint8_t *b = (const uint8_t *)in->b;
    size_t l = eng__charsmap_match(m, b + p, in->nb - p, rep);
    if (l) {
        *rep_len = strlen(*rep);
        return l;
    }
    uint32_t cp;
    l = (size_t)eng__utf8_decode(b + p, in->nb - p, &cp);
    if (!l) l = 1; /* cannot happen: the text is valid UTF-8 */
    memcpy(one, b + p, l);
    one[l] = 0;
    *rep = one;
    *rep_len = l;
    return l;
}

/* Byte offset -> code point index in a text whose boff is built (b is a boundary). */
static size_t cp_index(const eng__ntext *t, size_t b) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->boff[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Appends the code points of rep[0, n) with the given offsets; spaces become U+2581 when esc. */
static int push_utf8(eng__ntext *o, const char *rep, size_t n, uint32_t os, uint32_t oe, bool esc) {
    for (size_t k = 0; k < n;) {
        uint32_t cp;
        int l = eng__utf8_decode((const uint8_t *)rep + k, n - k, &cp);
        if (!l) { /* a charsmap with invalid UTF-8: U+FFFD, one byte */
            cp = 0xFFFD;
            l = 1;
        }
        if (esc && cp == ' ') cp = SPACE_SYMBOL;
        if (eng__ntext_push(o, cp, os, oe)) return ENG_NO_MEMORY;
        k += (size_t)l;
    }
    return 0;
}

int eng__precompiled_step(const eng_tokenizer *tok, eng__ntext *in, eng__ntext *o);
int eng__precompiled_step(const eng_tokenizer *tok, eng__ntext *in, eng__ntext *o) {
    if (eng__ntext_bytes(in)) return ENG_NO_MEMORY;
    o->n = 0;
    char one[5];
    size_t i = 0; /* the code point at byte p */
    for (size_t p = 0; p < in->nb;) {
        const char *rep;
        size_t rl, l = next_chunk(&tok->charsmap, in, p, &rep, &rl, one);
        size_t j = i;
        while (j < in->n && in->boff[j] < p + l) j++;
        if (push_utf8(o, rep, rl, in->os[i], in->oe[j - 1], false)) return ENG_NO_MEMORY;
        p += l;
        i = j;
    }
    return 0;
}

int eng__spm_step(const eng_tokenizer *tok, eng__tok_ctx *ctx, eng__ntext *in, eng__ntext *o, uint32_t s1);
int eng__spm_step(const eng_tokenizer *tok, eng__tok_ctx *ctx, eng__ntext *in, eng__ntext *o, uint32_t s1) {
    if (eng__ntext_bytes(in)) return ENG_NO_MEMORY;
    o->n = 0;
    const bool esc = tok->spm_escape_ws, rm = tok->spm_remove_ws;
    const uint32_t space = esc ? SPACE_SYMBOL : ' ';
    char one[5];
    const char *rep;
    size_t rl, p = 0;
#define ORIG_AT(byte) ((byte) < in->nb ? in->os[cp_index(in, (byte))] : s1)
    if (rm) /* leading whitespace */
        while (p < in->nb) {
            size_t l = next_chunk(&tok->charsmap, in, p, &rep, &rl, one);
            if (rl != 1 || rep[0] != ' ') break;
            p += l;
        }
    ctx->end_orig = ORIG_AT(p);
    if (p >= in->nb) return 0; /* nothing but whitespace: empty, no dummy prefix */
    if (tok->spm_dummy_prefix && eng__ntext_push(o, space, ORIG_AT(p), ORIG_AT(p))) return ENG_NO_MEMORY;
    bool prev_space = rm;
    size_t i = cp_index(in, p); /* the code point at byte p */
    while (p < in->nb) {
        size_t l = next_chunk(&tok->charsmap, in, p, &rep, &rl, one);
        uint32_t consumed = in->os[i];
        size_t j = i;
        while (j < in->n && in->boff[j] < p + l) j++;
        if (prev_space)
            while (rl && rep[0] == ' ') rep++, rl--;
        if (rl) {
            if (push_utf8(o, rep, rl, consumed, in->oe[j - 1], esc)) return ENG_NO_MEMORY;
            prev_space = rep[rl - 1] == ' ';
        }
        p += l;
        i = j;
        if (!rm) prev_space = false;
    }
    uint32_t end = s1;
    if (rm)
        while (o->n && o->cps[o->n - 1] == space) end = o->os[--o->n];
    ctx->end_orig = end;
#undef ORIG_AT
    return 0;
}
