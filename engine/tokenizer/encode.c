/* encode.c - one encode call: added-token split, per-section model, truncation, template, offsets.
 *
 * The order is transformers.js's: the raw text is first cut at added tokens (longest match at the
 * leftmost position; lstrip/rstrip tokens eat the whitespace next to them), every other section is
 * normalized and cut again at added tokens that match normalized text, then pre-tokenized and run
 * through the model. Truncation follows the Python library (transformers.js truncates the final
 * ids, dropping the closing [SEP]): the sequences are cut before the special tokens are added, so
 * the result always ends with them. All scratch memory is per call (eng__tok_ctx); nothing in the
 * tokenizer is written except the BPE cache. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static void toklist_free(eng__toklist *l) {
    free(l->ids);
    free(l->bs);
    free(l->be);
    memset(l, 0, sizeof *l);
}

void eng__ctx_free(eng__tok_ctx *ctx) {
    toklist_free(&ctx->out);
    eng__ntext_free(&ctx->t1);
    eng__ntext_free(&ctx->t2);
    if (ctx->md) pcre2_match_data_free(ctx->md);
    free(ctx->buf);
    free(ctx->sym);
    free(ctx->pos);
    free(ctx->rank);
    free(ctx->heap);
    free(ctx->lat);
    memset(ctx, 0, sizeof *ctx);
}

eng_tok_params eng_tok_default_params(void) {
    return (eng_tok_params){.max_length = 0, .truncation = ENG_TOK_TRUNCATE_LONGEST_FIRST, .add_special_tokens = 1};
}

/* ---- added-token split ---- */

typedef struct {
    uint32_t s, e; /* byte span (original text, or normalized bytes for the second split) */
    int32_t added; /* index into tok->added, -1 for text */
} section;

typedef struct {
    section *v;
    size_t n, cap;
} sections;

static int sec_push(sections *ss, uint32_t s, uint32_t e, int32_t added) {
    if (ss->n == ss->cap) {
        size_t cap = ss->cap ? ss->cap * 2 : 16;
        section *v = realloc(ss->v, cap * sizeof *v);
        if (!v) return ENG_NO_MEMORY;
        ss->v = v;
        ss->cap = cap;
    }
    ss->v[ss->n++] = (section){s, e, added};
    return 0;
}

/* Cuts s[0, n) at the added tokens of buckets, then applies lstrip/rstrip. Tokens are valid UTF-8,
 * so a match can only start at a character boundary. */
static int split_added(const eng_tokenizer *tok, int32_t *const *buckets, const uint8_t *s, size_t n,
                       sections *ss) {
    ss->n = 0;
    uint32_t start = 0;
    for (size_t i = 0; i < n;) {
        const int32_t *b = buckets[s[i]];
        int32_t hit = -1;
        if (b) {
            for (; *b >= 0; b++) {
                const eng__added_token *a = &tok->added[*b];
                if (a->len <= n - i && !memcmp(s + i, a->content, a->len)) {
                    hit = *b;
                    break;
                }
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        if (i > start && sec_push(ss, start, (uint32_t)i, -1)) return ENG_NO_MEMORY;
        if (sec_push(ss, (uint32_t)i, (uint32_t)(i + tok->added[hit].len), hit)) return ENG_NO_MEMORY;
        i += tok->added[hit].len;
        start = (uint32_t)i;
    }
    if (start < n && sec_push(ss, start, (uint32_t)n, -1)) return ENG_NO_MEMORY;
    /* lstrip / rstrip: trim JavaScript whitespace off the neighbouring text sections */
    for (size_t k = 0; k < ss->n; k++) {
        if (ss->v[k].added < 0) continue;
        const eng__added_token *a = &tok->added[ss->v[k].added];
        if (a->lstrip && k > 0 && ss->v[k - 1].added < 0) {
            section *p = &ss->v[k - 1];
            while (p->e > p->s) {
                uint32_t q = p->e - 1;
                while (q > p->s && (s[q] & 0xC0) == 0x80) q--;
                uint32_t cp;
                if (!eng__utf8_decode(s + q, p->e - q, &cp) || !eng__is_js_space(cp)) break;
                p->e = q;
            }
        }
        if (a->rstrip && k + 1 < ss->n && ss->v[k + 1].added < 0) {
            section *x = &ss->v[k + 1];
            while (x->s < x->e) {
                uint32_t cp;
                int l = eng__utf8_decode(s + x->s, x->e - x->s, &cp);
                if (!l || !eng__is_js_space(cp)) break;
                x->s += (uint32_t)l;
            }
        }
    }
    return 0;
}

/* Finds the code point index of byte offset b in a normalized text (b is a boundary). */
static size_t cp_at(const eng__ntext *t, uint32_t b) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->boff[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The model of tok over cps [a, b) of a normalized text. */
static int run_model(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a, size_t b) {
    int rc;
    switch (tok->kind) {
    case ENG_TOK_WORDPIECE: rc = eng__wordpiece_text(tok, ctx, t, a, b); break;
    case ENG_TOK_BPE: rc = eng__bytelevel_ntext(tok, ctx, t, a, b); break;
    default: rc = eng__unigram_text(tok, ctx, t, a, b); break;
    }
    ctx->section++;
    return rc;
}

static int encode_normalized(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *text, uint32_t s0,
                             uint32_t s1) {
    int rc = tok->norm == ENG__NORM_BERT ? eng__bert_normalize(tok, ctx, text, s0, s1)
                                         : eng__seq_normalize(tok, ctx, text, s0, s1);
    if (rc) return rc;
    const eng__ntext *t = &ctx->t2;
    if (!tok->has_norm_added) return run_model(tok, ctx, t, 0, t->n);
    sections ss = {0};
    rc = split_added(tok, tok->norm_bucket, (const uint8_t *)t->b, t->nb, &ss);
    for (size_t k = 0; !rc && k < ss.n; k++) {
        section *x = &ss.v[k];
        if (x->e <= x->s) continue;
        size_t a = cp_at(t, x->s), b = cp_at(t, x->e);
        if (x->added >= 0) {
            rc = eng__toklist_push(&ctx->out, tok->added[x->added].id, t->os[a], t->oe[b - 1]);
            ctx->section++;
        } else {
            rc = run_model(tok, ctx, t, a, b);
        }
    }
    free(ss.v);
    return rc;
}

/* Tokenizes one sequence into ctx->out (byte offsets into text). */
static int encode_sequence(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *text, size_t len) {
    ctx->out.n = 0;
    ctx->section = 0;
    sections ss = {0};
    int rc = split_added(tok, tok->raw_bucket, text, len, &ss);
    for (size_t k = 0; !rc && k < ss.n; k++) {
        section *x = &ss.v[k];
        if (x->e <= x->s) continue;
        if (x->added >= 0) {
            rc = eng__toklist_push(&ctx->out, tok->added[x->added].id, x->s, x->e);
            ctx->section++;
        } else if (tok->pretok == ENG__PRETOK_BYTELEVEL && tok->norm == ENG__NORM_NONE) {
            rc = eng__bytelevel_text(tok, ctx, text, x->s, x->e);
        } else {
            rc = encode_normalized(tok, ctx, text, x->s, x->e);
        }
    }
    free(ss.v);
    return rc;
}

/* ---- truncation (the Python library's truncate_encodings) ---- */

static int truncate_pair(eng_tok_truncation strategy, size_t max, size_t *n1p, size_t *n2p, bool has_pair,
                         eng_err *err) {
    size_t n1 = *n1p, n2 = has_pair ? *n2p : 0;
    if (n1 + n2 <= max) return 0;
    size_t to_remove = n1 + n2 - max;
    switch (strategy) {
    case ENG_TOK_TRUNCATE_NONE:
        return 0;
    case ENG_TOK_TRUNCATE_LONGEST_FIRST:
        if (!has_pair) {
            *n1p = max;
            return 0;
        } else {
            size_t a = n1, b = n2;
            bool swap = a > b;
            if (swap) a = n2, b = n1; /* a: the shorter */
            b = a > max ? a : (a > max - a ? a : max - a);
            if (a + b > max) {
                a = max / 2;
                b = a + max % 2;
            }
            if (swap) {
                size_t t = a;
                a = b;
                b = t;
            }
            if (a < *n1p) *n1p = a;
            if (b < *n2p) *n2p = b;
            return 0;
        }
    case ENG_TOK_TRUNCATE_ONLY_FIRST:
    case ENG_TOK_TRUNCATE_ONLY_SECOND: {
        bool first = strategy == ENG_TOK_TRUNCATE_ONLY_FIRST;
        if (!first && !has_pair)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "truncation only_second needs a text pair");
        size_t *np = first ? n1p : n2p;
        if (*np <= to_remove)
            return eng_err_set(err, ENG_INVALID_ARGUMENT,
                               "cannot truncate the %s sequence (%zu tokens) by %zu tokens to fit max_length",
                               first ? "first" : "second", *np, to_remove);
        *np -= to_remove;
        return 0;
    }
    }
    return eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown truncation strategy %d", (int)strategy);
}

/* ---- offsets ---- */

/* Byte -> code point offsets with a cursor that walks both ways, so nearly sorted offsets cost
 * O(text) in total. */
typedef struct {
    const uint8_t *s;
    size_t n;
    size_t b;  /* byte position (a character boundary) */
    size_t cp; /* code points before b */
} cp_cursor;

static size_t cp_of(cp_cursor *c, size_t b) {
    while (c->b < b) {
        c->b++;
        while (c->b < c->n && (c->s[c->b] & 0xC0) == 0x80) c->b++;
        c->cp++;
    }
    while (c->b > b) {
        c->b--;
        while (c->b > 0 && (c->s[c->b] & 0xC0) == 0x80) c->b--;
        c->cp--;
    }
    return c->cp;
}

/* ---- the entry point ---- */

static int validate(const char *s, size_t n, const char *what, eng_err *err) {
    if (!s && n) return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s is NULL with length %zu", what, n);
    if (n > ENG_TOK_MAX_INPUT_BYTES)
        return eng_err_set(err, ENG_TOO_LARGE, "%s is %zu bytes; the limit is %zu", what, n,
                           (size_t)ENG_TOK_MAX_INPUT_BYTES);
    size_t bad;
    if (n && eng__utf8_invalid((const uint8_t *)s, n, &bad))
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s is not valid UTF-8 (byte offset %zu)", what, bad);
    return 0;
}

static int take_list(eng__toklist *dst, eng__toklist *src) {
    *dst = *src;
    memset(src, 0, sizeof *src);
    return 0;
}

int eng_tok_encode(const eng_tokenizer *tok, const char *text, size_t len, const char *pair, size_t pair_len,
                   const eng_tok_params *p, eng_tok_encoding *out, eng_err *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!tok || !out) return eng_err_set(err, ENG_INVALID_ARGUMENT, "eng_tok_encode: NULL tokenizer or output");
    eng_tok_params prm = p ? *p : eng_tok_default_params();
    int rc = validate(text, len, "text", err);
    if (!rc && pair) rc = validate(pair, pair_len, "text pair", err);
    if (rc) return rc;
    if (!text) text = "";
    bool has_pair = pair != NULL;
    const eng__template *tpl = has_pair ? &tok->pair : &tok->single;

    eng__tok_ctx ctx = {0};
    eng__toklist la = {0}, lb = {0};
    rc = encode_sequence(tok, &ctx, (const uint8_t *)text, len);
    if (!rc) take_list(&la, &ctx.out);
    if (!rc && has_pair) {
        rc = encode_sequence(tok, &ctx, (const uint8_t *)pair, pair_len);
        if (!rc) take_list(&lb, &ctx.out);
    }
    if (rc) {
        if (rc == ENG_NO_MEMORY) eng_err_set(err, rc, "out of memory while tokenizing %zu bytes", len + pair_len);
        else eng_err_set(err, rc, "tokenization failed (%s)", eng_status_name(rc));
        goto done;
    }

    size_t n_special = prm.add_special_tokens ? (size_t)tpl->n_special : 0;
    size_t na = la.n, nb = lb.n;
    if (prm.truncation != ENG_TOK_TRUNCATE_NONE) {
        if (prm.max_length < 0) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "max_length %d is negative", prm.max_length);
            goto done;
        }
        size_t max = prm.max_length ? (size_t)prm.max_length : (size_t)tok->max_length;
        if (max < n_special) {
            rc = eng_err_set(err, ENG_INVALID_ARGUMENT, "max_length %zu cannot hold the %zu special tokens", max,
                             n_special);
            goto done;
        }
        rc = truncate_pair(prm.truncation, max - n_special, &na, &nb, has_pair, err);
        if (rc) goto done;
    }

    size_t n = n_special + na + nb;
    if (eng_tok_encoding_alloc(out, n)) {
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory for %zu tokens", n);
        goto done;
    }

    size_t k = 0;
    for (int it = 0; it < tpl->n; it++) {
        const eng__tpl_item *item = &tpl->items[it];
        if (item->kind == ENG__TPL_SPECIAL) {
            if (!prm.add_special_tokens) continue;
            for (int j = 0; j < item->n_ids; j++, k++) {
                out->ids[k] = item->ids[j];
                out->type_ids[k] = item->type_id;
                out->offsets[2 * k] = out->offsets[2 * k + 1] = 0;
                out->byte_offsets[2 * k] = out->byte_offsets[2 * k + 1] = 0;
                out->seq_ids[k] = -1;
                out->special_mask[k] = 1;
            }
            continue;
        }
        bool is_b = item->kind == ENG__TPL_SEQ_B;
        if (is_b && !has_pair) continue;
        const eng__toklist *l = is_b ? &lb : &la;
        size_t cnt = is_b ? nb : na;
        const uint8_t *s = (const uint8_t *)(is_b ? pair : text);
        size_t slen = is_b ? pair_len : len;
        cp_cursor cur = {s, slen, 0, 0};
        for (size_t i = 0; i < cnt; i++, k++) {
            /* widen spans that cut a multi-byte character (byte-level BPE) to the whole character */
            size_t b = l->bs[i], e = l->be[i];
            while (b > 0 && b < slen && (s[b] & 0xC0) == 0x80) b--;
            while (e < slen && e > 0 && (s[e] & 0xC0) == 0x80) e++;
            if (e < b) e = b;
            out->ids[k] = l->ids[i];
            out->type_ids[k] = item->type_id;
            out->byte_offsets[2 * k] = (int32_t)b;
            out->byte_offsets[2 * k + 1] = (int32_t)e;
            out->offsets[2 * k] = (int32_t)cp_of(&cur, b);
            out->offsets[2 * k + 1] = (int32_t)cp_of(&cur, e);
            out->seq_ids[k] = is_b ? 1 : 0;
            out->special_mask[k] = 0;
        }
    }
    out->n = k; /* templates without a B item drop the pair, as the Python library errors instead */
    rc = 0;
done:
    toklist_free(&la);
    toklist_free(&lb);
    eng__ctx_free(&ctx);
    if (rc) eng_tok_encoding_free(out);
    return rc;
}

int eng_tok_encoding_alloc(eng_tok_encoding *enc, size_t n) {
    memset(enc, 0, sizeof *enc);
    /* ids, type_ids (4 + 4), offsets, byte_offsets (8 + 8), seq_ids, special_mask (1 + 1) per token;
     * the int32 arrays first, so every array is aligned for its type */
    char *blk = calloc(1, n ? n * (4 + 4 + 8 + 8 + 1 + 1) : 1);
    if (!blk) return ENG_NO_MEMORY;
    enc->ids = (int32_t *)blk;
    enc->type_ids = enc->ids + n;
    enc->offsets = enc->type_ids + n;
    enc->byte_offsets = enc->offsets + 2 * n;
    enc->seq_ids = (int8_t *)(enc->byte_offsets + 2 * n);
    enc->special_mask = (uint8_t *)(enc->seq_ids + n);
    enc->n = n;
    return 0;
}

void eng_tok_encoding_free(eng_tok_encoding *enc) {
    if (!enc) return;
    free(enc->ids);
    memset(enc, 0, sizeof *enc);
}
