/* unorm.c - tokenizer.json's normalizer sequences: NFC/NFD/NFKC/NFKD, Replace, Strip, Lowercase,
 * Precompiled, and SentencePiece's own normalizer, applied one after another.
 *
 * Each step maps one eng__ntext to the next, and every output code point keeps the byte span of the
 * original character(s) it came from, so offsets survive any chain. Unicode normal forms come from
 * utf8proc and are applied per extended grapheme cluster (no canonical composition or reordering
 * crosses a cluster boundary): a cluster the form leaves unchanged keeps its per-character offsets,
 * a changed one maps each output character to the whole cluster. Replace uses PCRE2 (String patterns
 * literally), as transformers.js's replaceAll: matches left to right, no overlap, an empty match
 * replaced by nothing. Strip removes JavaScript whitespace (String.prototype.trim, as transformers.js).
 *
 * Byte-level BPE after a normalizer (ModernBERT: NFC) runs on the normalized bytes and maps the
 * token spans back through the same table. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

int eng__precompiled_step(const eng_tokenizer *tok, eng__ntext *in, eng__ntext *o);
int eng__spm_step(const eng_tokenizer *tok, eng__tok_ctx *ctx, eng__ntext *in, eng__ntext *o, uint32_t s1);

void eng__nsteps_free(eng_tokenizer *tok) {
    for (int i = 0; i < tok->n_nsteps; i++) {
        if (tok->nsteps[i].re) pcre2_code_free(tok->nsteps[i].re);
        free(tok->nsteps[i].content);
    }
    free(tok->nsteps);
    tok->nsteps = NULL;
    tok->n_nsteps = 0;
    eng__charsmap_free(&tok->charsmap);
}

/* ---- Unicode normal forms ---- */

#define CLUSTER_STACK 64

static int nf_cluster(eng__ntext *in, size_t a, size_t b, utf8proc_option_t opt, eng__ntext *o) {
    /* all ASCII except CR LF (a cluster of its own) is invariant under every form */
    if (b - a == 1 && in->cps[a] < 0x80) return eng__ntext_push(o, in->cps[a], in->os[a], in->oe[a]);
    uint8_t sbuf[CLUSTER_STACK * 4];
    utf8proc_int32_t dstack[CLUSTER_STACK * 18];
    size_t nb = 0, cap = (b - a) * 18;
    uint8_t *u8 = (b - a) <= CLUSTER_STACK ? sbuf : malloc((b - a) * 4);
    utf8proc_int32_t *d = (b - a) <= CLUSTER_STACK ? dstack : malloc(cap * sizeof *d);
    int rc = 0;
    if (!u8 || !d) {
        rc = ENG_NO_MEMORY;
        goto out;
    }
    for (size_t i = a; i < b; i++) nb += (size_t)eng__utf8_encode(in->cps[i], (char *)u8 + nb);
    utf8proc_ssize_t k = utf8proc_decompose(u8, (utf8proc_ssize_t)nb, d, (utf8proc_ssize_t)cap, opt);
    if (k < 0 || (size_t)k > cap) { /* cannot happen for valid input: keep the cluster as it is */
        for (size_t i = a; i < b && !rc; i++) rc = eng__ntext_push(o, in->cps[i], in->os[i], in->oe[i]);
        goto out;
    }
    if (opt & UTF8PROC_COMPOSE) k = utf8proc_normalize_utf32(d, k, opt);
    bool same = (size_t)k == b - a;
    for (size_t i = 0; same && i < b - a; i++) same = (uint32_t)d[i] == in->cps[a + i];
    if (same) {
        for (size_t i = a; i < b && !rc; i++) rc = eng__ntext_push(o, in->cps[i], in->os[i], in->oe[i]);
    } else {
        for (utf8proc_ssize_t i = 0; i < k && !rc; i++) rc = eng__ntext_push(o, (uint32_t)d[i], in->os[a], in->oe[b - 1]);
    }
out:
    if (u8 && u8 != sbuf) free(u8);
    if (d && d != dstack) free(d);
    return rc;
}

/* Code points below lim are left unchanged by the form and, being below U+0300, never combine with
 * what follows (every second character of a canonical composition is U+0300 or above): NFC changes
 * nothing below U+0300, NFD nothing below U+00C0, the compatibility forms nothing below U+00A0. */
static int nf_step(eng__ntext *in, utf8proc_option_t opt, uint32_t lim, eng__ntext *o) {
    o->n = 0;
    for (size_t a = 0; a < in->n;) {
        if (in->cps[a] < lim && (a + 1 == in->n || in->cps[a + 1] < 0x300)) {
            if (eng__ntext_push(o, in->cps[a], in->os[a], in->oe[a])) return ENG_NO_MEMORY;
            a++;
            continue;
        }
        utf8proc_int32_t state = 0;
        size_t b = a + 1;
        while (b < in->n &&
               !utf8proc_grapheme_break_stateful((utf8proc_int32_t)in->cps[b - 1], (utf8proc_int32_t)in->cps[b], &state))
            b++;
        int rc = nf_cluster(in, a, b, opt, o);
        if (rc) return rc;
        a = b;
    }
    return 0;
}

/* ---- Replace, Strip, Lowercase ---- */

static int replace_step(const eng__nstep *st, eng__tok_ctx *ctx, eng__ntext *in, eng__ntext *o) {
    if (eng__ntext_bytes(in)) return ENG_NO_MEMORY;
    o->n = 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(st->re, NULL);
    if (!md) return ENG_NO_MEMORY;
    (void)ctx;
    size_t i = 0, at = 0; /* i: next input cp to copy; at: byte where the search resumes */
    int rc = 0;
    size_t clen = strlen(st->content);
    while (at <= in->nb) {
        int m = pcre2_match(st->re, (PCRE2_SPTR)in->b, in->nb, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m < 0) {
            if (m != PCRE2_ERROR_NOMATCH) rc = m == PCRE2_ERROR_NOMEMORY ? ENG_NO_MEMORY : ENG_INTERNAL;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        /* copy up to the match */
        for (; i < in->n && in->boff[i] < ms && !rc; i++) rc = eng__ntext_push(o, in->cps[i], in->os[i], in->oe[i]);
        if (rc) break;
        if (me == ms) { /* an empty match: replaced by the content, then step over one character */
            uint32_t pos = i < in->n ? in->os[i] : (in->n ? in->oe[in->n - 1] : 0);
            for (size_t k = 0; k < clen && !rc;) {
                uint32_t cp;
                int l = eng__utf8_decode((const uint8_t *)st->content + k, clen - k, &cp);
                rc = eng__ntext_push(o, cp, pos, pos);
                k += (size_t)(l ? l : 1);
            }
            if (i >= in->n) break;
            rc = rc ? rc : eng__ntext_push(o, in->cps[i], in->os[i], in->oe[i]);
            i++;
            at = in->boff[i];
            continue;
        }
        size_t j = i;
        while (j < in->n && in->boff[j] < me) j++;
        uint32_t os = in->os[i], oe = in->oe[j - 1];
        for (size_t k = 0; k < clen && !rc;) {
            uint32_t cp;
            int l = eng__utf8_decode((const uint8_t *)st->content + k, clen - k, &cp);
            rc = eng__ntext_push(o, cp, os, oe);
            k += (size_t)(l ? l : 1);
        }
        i = j;
        at = me;
    }
    for (; i < in->n && !rc; i++) rc = eng__ntext_push(o, in->cps[i], in->os[i], in->oe[i]);
    pcre2_match_data_free(md);
    return rc;
}

static int strip_step(const eng__nstep *st, eng__ntext *in, eng__ntext *o) {
    size_t a = 0, b = in->n;
    if (st->left)
        while (a < b && eng__is_js_space(in->cps[a])) a++;
    if (st->right)
        while (b > a && eng__is_js_space(in->cps[b - 1])) b--;
    o->n = 0;
    for (size_t i = a; i < b; i++)
        if (eng__ntext_push(o, in->cps[i], in->os[i], in->oe[i])) return ENG_NO_MEMORY;
    return 0;
}

static int lower_step(eng__ntext *in, eng__ntext *o) {
    o->n = 0;
    for (size_t i = 0; i < in->n; i++)
        if (eng__ntext_push(o, (uint32_t)utf8proc_tolower((utf8proc_int32_t)in->cps[i]), in->os[i], in->oe[i]))
            return ENG_NO_MEMORY;
    return 0;
}

/* ---- the sequence ---- */

int eng__seq_normalize(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *orig, uint32_t s0, uint32_t s1) {
    eng__ntext *cur = &ctx->t1, *nxt = &ctx->t2;
    cur->n = 0;
    for (uint32_t i = s0; i < s1;) {
        uint32_t cp;
        int k = eng__utf8_decode(orig + i, s1 - i, &cp);
        if (!k) return ENG_INTERNAL; /* validated by the caller */
        if (eng__ntext_push(cur, cp, i, i + (uint32_t)k)) return ENG_NO_MEMORY;
        i += (uint32_t)k;
    }
    ctx->end_orig = s1;
    for (int s = 0; s < tok->n_nsteps; s++) {
        const eng__nstep *st = &tok->nsteps[s];
        int rc;
        switch (st->kind) {
        case ENG__NS_PRECOMPILED: rc = eng__precompiled_step(tok, cur, nxt); break;
        case ENG__NS_SPM: rc = eng__spm_step(tok, ctx, cur, nxt, s1); break;
        case ENG__NS_NFC: rc = nf_step(cur, UTF8PROC_STABLE | UTF8PROC_COMPOSE, 0x300, nxt); break;
        case ENG__NS_NFD: rc = nf_step(cur, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, 0xC0, nxt); break;
        case ENG__NS_NFKC: rc = nf_step(cur, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, 0xA0, nxt); break;
        case ENG__NS_NFKD: rc = nf_step(cur, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, 0xA0, nxt); break;
        case ENG__NS_REPLACE: rc = replace_step(st, ctx, cur, nxt); break;
        case ENG__NS_STRIP: rc = strip_step(st, cur, nxt); break;
        case ENG__NS_LOWERCASE: rc = lower_step(cur, nxt); break;
        default: rc = ENG_INTERNAL;
        }
        if (rc) return rc;
        eng__ntext *t = cur;
        cur = nxt;
        nxt = t;
    }
    if (cur != &ctx->t2) { /* the result lives in t2 */
        eng__ntext t = ctx->t1;
        ctx->t1 = ctx->t2;
        ctx->t2 = t;
    }
    return eng__ntext_bytes(&ctx->t2);
}

/* ---- byte-level BPE on normalized text ---- */

/* code point containing byte x of t (the largest i with boff[i] <= x) */
static size_t cp_containing(const eng__ntext *t, size_t x) {
    size_t lo = 0, hi = t->n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (t->boff[mid] <= x) lo = mid;
        else hi = mid;
    }
    return lo;
}

int eng__bytelevel_ntext(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a, size_t b) {
    size_t first = ctx->out.n;
    int rc = eng__bytelevel_text(tok, ctx, (const uint8_t *)t->b, t->boff[a], t->boff[b]);
    if (rc) return rc;
    for (size_t i = first; i < ctx->out.n; i++) {
        uint32_t bs = ctx->out.bs[i], be = ctx->out.be[i];
        if (!t->n) continue;
        if (be > bs) {
            ctx->out.bs[i] = t->os[cp_containing(t, bs)];
            ctx->out.be[i] = t->oe[cp_containing(t, be - 1)];
        } else {
            size_t c = cp_containing(t, bs);
            uint32_t p = bs >= t->nb ? t->oe[t->n - 1] : t->os[c];
            ctx->out.bs[i] = ctx->out.be[i] = p;
        }
    }
    return 0;
}
