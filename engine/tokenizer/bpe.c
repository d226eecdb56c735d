/* bpe.c - the ByteLevel pre-tokenizer and byte-level BPE (RoBERTa, GPT-2).
 *
 * A section of text is split with GPT-2's pattern (PCRE2, UTF + UCP, JIT), where \s is spelled out
 * as JavaScript's whitespace so the split is the one transformers.js makes. Each piece is BPE-merged
 * over its bytes: every byte starts as the symbol of its GPT-2 printable character, and the pair of
 * adjacent symbols with the lowest merge rank is merged, the leftmost first on ties, until no pair
 * has a rank. Symbols are interned strings (vocabulary tokens, merge parts and results), so a merge
 * is one table lookup. Short pieces use a quadratic loop over cached pair ranks, which beats a heap
 * below a few dozen bytes; longer ones (a 1 MB run of letters is one piece) use a heap with lazy
 * deletion. Results for pieces up to ENG__CACHE_KEY_MAX bytes go to the shared word cache.
 *
 * Offsets: a token spans the bytes it merged; with trim_offsets its leading and trailing spaces
 * are dropped from the span, as the Python library does; spans that cut a multi-byte character
 * are widened to the whole character by the caller. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

uint32_t eng__byte_to_unicode(uint8_t b) {
    /* printable Latin-1 bytes map to themselves, the other 68 to U+0100.. in byte order */
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) n++;
    return 256 + n;
}

static int bpe_reserve(eng__tok_ctx *ctx, size_t n) {
    if (n <= ctx->bpe_cap) return 0;
    size_t cap = ctx->bpe_cap ? ctx->bpe_cap : 64;
    while (cap < n) cap *= 2;
    int32_t *s = realloc(ctx->sym, cap * sizeof *s);
    if (!s) return -1;
    ctx->sym = s;
    uint32_t *p = realloc(ctx->pos, (cap + 1) * sizeof *p);
    if (!p) return -1;
    ctx->pos = p;
    int32_t *r = realloc(ctx->rank, cap * sizeof *r);
    if (!r) return -1;
    ctx->rank = r;
    ctx->bpe_cap = cap;
    return 0;
}

int eng__bpe_merge_simple(const eng_tokenizer *tok, eng__tok_ctx *ctx, int32_t *sym, uint32_t *pos, int n) {
    if (n < 2) return n;
    if (bpe_reserve(ctx, (size_t)n)) return -1;
    int32_t *rank = ctx->rank; /* rank[i]: rank of pair (i, i+1), INT32_MAX when none */
    int32_t merged_tmp;
    for (int i = 0; i + 1 < n; i++) {
        int r = eng__bpe_pair(&tok->merges, sym[i], sym[i + 1], &merged_tmp);
        rank[i] = r < 0 ? INT32_MAX : r;
    }
    for (;;) {
        int best = -1;
        int32_t br = INT32_MAX;
        for (int i = 0; i + 1 < n; i++)
            if (rank[i] < br) br = rank[i], best = i;
        if (best < 0) break;
        int32_t merged;
        eng__bpe_pair(&tok->merges, sym[best], sym[best + 1], &merged);
        sym[best] = merged;
        memmove(sym + best + 1, sym + best + 2, (size_t)(n - best - 2) * sizeof *sym);
        memmove(pos + best + 1, pos + best + 2, (size_t)(n - best - 2) * sizeof *pos);
        memmove(rank + best + 1, rank + best + 2, (size_t)(n > best + 2 ? n - best - 2 : 0) * sizeof *rank);
        n--;
        if (best > 0) {
            int r = eng__bpe_pair(&tok->merges, sym[best - 1], sym[best], &merged_tmp);
            rank[best - 1] = r < 0 ? INT32_MAX : r;
        }
        if (best + 1 < n) {
            int r = eng__bpe_pair(&tok->merges, sym[best], sym[best + 1], &merged_tmp);
            rank[best] = r < 0 ? INT32_MAX : r;
        }
    }
    return n;
}

/* ---- heap version ---- */

typedef struct {
    int32_t rank;
    uint32_t left;  /* node index = original position of the left symbol */
    uint32_t right;
    int32_t lsym, rsym; /* symbols when pushed; a changed symbol marks the entry stale */
} heap_ent;

static inline bool he_less(const heap_ent *a, const heap_ent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!he_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && he_less(&h[c + 1], &h[c])) c++;
        if (!he_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

int eng__bpe_merge_heap(const eng_tokenizer *tok, eng__tok_ctx *ctx, int32_t *sym, uint32_t *pos, int n) {
    if (n < 2) return n;
    /* node arrays: sym in place, next/prev links; every merge pushes at most 2 entries, so the
     * heap never holds more than 3n entries */
    size_t need = (size_t)n * 2 * sizeof(int32_t) + (size_t)n * 3 * sizeof(heap_ent);
    if (need > ctx->heap_cap) {
        void *h = realloc(ctx->heap, need);
        if (!h) return -1;
        ctx->heap = h;
        ctx->heap_cap = need;
    }
    heap_ent *heap = ctx->heap;
    int32_t *next = (int32_t *)(heap + (size_t)n * 3);
    int32_t *prev = next + n;
    size_t hn = 0;
    for (int i = 0; i < n; i++) {
        next[i] = i + 1 < n ? i + 1 : -1;
        prev[i] = i - 1;
    }
    int32_t merged;
    for (int i = 0; i + 1 < n; i++) {
        int r = eng__bpe_pair(&tok->merges, sym[i], sym[i + 1], &merged);
        if (r >= 0) heap_push(heap, &hn, (heap_ent){r, (uint32_t)i, (uint32_t)i + 1, sym[i], sym[i + 1]});
    }
    while (hn) {
        heap_ent e = heap_pop(heap, &hn);
        /* stale: a side was merged away (sym -1) or grew, or they are no longer neighbours */
        if (sym[e.left] != e.lsym || sym[e.right] != e.rsym || next[e.left] != (int32_t)e.right) continue;
        eng__bpe_pair(&tok->merges, e.lsym, e.rsym, &merged);
        sym[e.left] = merged;
        sym[e.right] = -1;
        int32_t nx = next[e.right];
        next[e.left] = nx;
        if (nx >= 0) prev[nx] = (int32_t)e.left;
        int32_t pv = prev[e.left];
        if (pv >= 0) {
            int32_t m2;
            int r = eng__bpe_pair(&tok->merges, sym[pv], merged, &m2);
            if (r >= 0) heap_push(heap, &hn, (heap_ent){r, (uint32_t)pv, e.left, sym[pv], sym[e.left]});
        }
        if (nx >= 0) {
            int32_t m2;
            int r = eng__bpe_pair(&tok->merges, sym[e.left], sym[nx], &m2);
            if (r >= 0) heap_push(heap, &hn, (heap_ent){r, e.left, (uint32_t)nx, sym[e.left], sym[nx]});
        }
    }
    int k = 0;
    for (int i = 0; i >= 0; i = next[i]) {
        sym[k] = sym[i];
        pos[k] = pos[i];
        k++;
    }
    return k;
}

/* BPE of one piece w[0, n) whose bytes sit at original offsets map(i); appends tokens. When
 * prefix_space is set, w[0] is a synthetic ' ' at zero width before orig_base. */
static int bpe_piece(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *w, size_t n, uint32_t orig_base,
                     bool prefix_space) {
    eng__toklist *out = &ctx->out;
    int32_t ids[ENG__CACHE_TOK_MAX];
    uint8_t ends[ENG__CACHE_TOK_MAX];
    /* original offset of the boundary before byte i of the piece (the synthetic space is 0 wide) */
#define ORIG(i) (prefix_space ? ((i) == 0 ? orig_base : orig_base + (uint32_t)(i) - 1) : orig_base + (uint32_t)(i))
    int k = tok->cache ? eng__bpe_cache_get(tok->cache, w, n, ids, ends) : -1;
    if (k >= 0) {
        uint32_t start = 0;
        for (int i = 0; i < k; i++) {
            if (ids[i] >= 0 && eng__toklist_push(out, ids[i], ORIG(start), ORIG(ends[i])))
                return ENG_NO_MEMORY;
            start = ends[i];
        }
        return 0;
    }
    if (n > INT32_MAX / 2) return ENG_TOO_LARGE;
    if (bpe_reserve(ctx, n)) return ENG_NO_MEMORY;
    int32_t *sym = ctx->sym;
    uint32_t *pos = ctx->pos;
    for (size_t i = 0; i < n; i++) {
        sym[i] = tok->byte_sym[w[i]];
        pos[i] = (uint32_t)i;
    }
    k = n <= 48 ? eng__bpe_merge_simple(tok, ctx, sym, pos, (int)n)
                : eng__bpe_merge_heap(tok, ctx, sym, pos, (int)n);
    if (k < 0) return ENG_NO_MEMORY;
    pos[k] = (uint32_t)n;
    bool cacheable = n <= ENG__CACHE_KEY_MAX && k <= ENG__CACHE_TOK_MAX;
    for (int i = 0; i < k; i++) {
        int32_t id = tok->syms.val[sym[i]];
        if (id < 0) id = tok->unk_id; /* -1 without an unk token: dropped, as transformers.js does */
        if (cacheable) ids[i] = id, ends[i] = (uint8_t)pos[i + 1];
        if (id >= 0 && eng__toklist_push(out, id, ORIG(pos[i]), ORIG(pos[i + 1]))) return ENG_NO_MEMORY;
    }
    if (cacheable && tok->cache) eng__bpe_cache_put(tok->cache, w, n, ids, ends, k);
#undef ORIG
    return 0;
}

int eng__bytelevel_text(const eng_tokenizer *tok, eng__tok_ctx *ctx, const uint8_t *orig, uint32_t s0,
                        uint32_t s1) {
    const uint8_t *s = orig + s0;
    size_t n = s1 - s0;
    bool prefix = tok->add_prefix_space && (n == 0 || s[0] != ' ');
    if (n == 0 && !prefix) return 0;
    if (prefix) {
        if (n + 1 > ctx->buf_cap) {
            uint8_t *b = realloc(ctx->buf, n + 1);
            if (!b) return ENG_NO_MEMORY;
            ctx->buf = b;
            ctx->buf_cap = n + 1;
        }
        ctx->buf[0] = ' ';
        memcpy(ctx->buf + 1, s, n);
        s = ctx->buf;
        n++;
    }
    size_t first_tok = ctx->out.n;
    if (!tok->use_regex) {
        int rc = bpe_piece(tok, ctx, s, n, s0, prefix);
        if (rc) return rc;
    } else {
        if (!ctx->md) {
            ctx->md = pcre2_match_data_create_from_pattern(tok->re, NULL);
            if (!ctx->md) return ENG_NO_MEMORY;
        }
        PCRE2_SIZE at = 0;
        while (at < n) {
            int rc = pcre2_match(tok->re, s, n, at, PCRE2_NO_UTF_CHECK, ctx->md, NULL);
            if (rc < 0) {
                if (rc == PCRE2_ERROR_NOMATCH) break;
                return rc == PCRE2_ERROR_NOMEMORY ? ENG_NO_MEMORY : ENG_INTERNAL;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(ctx->md);
            if (ov[1] <= ov[0]) { /* the pattern has no empty alternative; guard anyway */
                at = ov[0] + 1;
                continue;
            }
            /* text between matches cannot occur (every character matches some alternative) but
             * would be one piece, as transformers.js's match() would drop it: drop it too */
            uint32_t base = prefix ? (ov[0] == 0 ? s0 : s0 + (uint32_t)ov[0] - 1) : s0 + (uint32_t)ov[0];
            int r = bpe_piece(tok, ctx, s + ov[0], ov[1] - ov[0], base, prefix && ov[0] == 0);
            if (r) return r;
            at = ov[1];
        }
    }
    if (tok->trim_offsets) {
        /* drop leading/trailing spaces from each span (the Python library's process_offsets); the
         * space added by add_prefix_space is zero-width already */
        const uint8_t *o = orig;
        for (size_t i = first_tok; i < ctx->out.n; i++) {
            uint32_t b = ctx->out.bs[i], e = ctx->out.be[i];
            while (b < e && o[b] == ' ') b++;
            while (e > b && o[e - 1] == ' ') e--;
            ctx->out.bs[i] = b;
            ctx->out.be[i] = e;
        }
    }
    return 0;
}
