/* unigram.c - the Metaspace pre-tokenizer, Unigram (Viterbi) segmentation and SentencePiece BPE.
 *
 * Unigram picks, over all ways to cut a word into vocabulary pieces, the one whose piece scores
 * (log probabilities) add up highest: a forward Viterbi pass over code point positions, where the
 * pieces starting at a position are found by one walk of the piece trie (trie.c) from that position,
 * byte by byte, which stops as soon as no piece can continue; a node reached at a character boundary
 * holding a piece is a lattice edge. A character no piece covers becomes the unknown piece with score
 * min_score - 10. This is sentencepiece's EncodeOptimized and Hugging Face's encode_optimized: the
 * first best path found wins ties (strictly greater replaces). SentencePiece stores float32 path scores
 * but compares the double sum against them (which decides its ties), Hugging Face uses doubles; tok->spm_exact selects which, with SentencePiece's other rules: only NORMAL,
 * USER_DEFINED and UNUSED pieces in the lattice (UNUSED skipped), USER_DEFINED scored length *
 * max_score - 0.1, byte fallback piece by piece with the first bytes zero-width, consecutive unknowns
 * fused into one token. Hugging Face fuses unknowns first and gives every fallback byte the span.
 *
 * SentencePiece BPE (CamemBERT, XLM-R's file) starts from characters and repeatedly merges the
 * adjacent pair whose concatenation is a piece with the highest score, leftmost first on ties, with
 * sentencepiece's lazy agenda (a stale pair is recognized by its two symbols' lengths). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* A word to segment: code points with UTF-8 bytes and original spans. end: the original offset
 * where the word ends (SentencePiece's rule: a token ends where the next begins). */
typedef struct {
    const char *b;
    const uint32_t *boff, *os, *oe;
    size_t n;
    uint32_t end;
} view;

typedef struct {
    double score;
    int32_t start; /* -1: unreached */
    int32_t piece; /* -2: the unknown node */
} lnode;

static int32_t find_piece(const eng_tokenizer *tok, const view *v, size_t i, size_t j) {
    int32_t p = eng__trie_find(&tok->pieces, (const uint8_t *)v->b + v->boff[i], v->boff[j] - v->boff[i]);
    return p >= 0 ? p : -2;
}

static uint32_t span_end(const eng_tokenizer *tok, const view *v, size_t j) {
    if (tok->spm_exact) return j < v->n ? v->os[j] : v->end;
    return v->oe[j - 1];
}

/* Emits the segmentation of v into cps [starts[k], starts[k+1]) with pieces[k] (-2 unknown),
 * fusing unknowns and applying byte fallback by the rules of tok. */
static int emit(const eng_tokenizer *tok, eng__tok_ctx *ctx, const view *v, const int32_t *starts,
                const int32_t *pieces, size_t k) {
    eng__toklist *out = &ctx->out;
    int32_t unk_id = tok->sp_unk >= 0 ? tok->out_id[tok->sp_unk] : -1;
    bool prev_unk = false;
    for (size_t x = 0; x < k; x++) {
        size_t i = (size_t)starts[x], j = (size_t)starts[x + 1];
        bool unk = pieces[x] < 0 || pieces[x] == tok->sp_unk;
        if (unk && !tok->spm_exact) { /* Hugging Face: fuse the run first */
            while (x + 1 < k && (pieces[x + 1] < 0 || pieces[x + 1] == tok->sp_unk)) j = (size_t)starts[++x + 1];
        }
        uint32_t os = v->os[i], oe = span_end(tok, v, j);
        if (unk && tok->byte_fallback) {
            uint32_t nb = v->boff[j] - v->boff[i];
            bool all = true;
            for (uint32_t q = 0; q < nb; q++) all = all && tok->byte_piece[(uint8_t)v->b[v->boff[i] + q]] >= 0;
            if (all) {
                for (uint32_t q = 0; q < nb; q++) {
                    int32_t id = tok->out_id[tok->byte_piece[(uint8_t)v->b[v->boff[i] + q]]];
                    bool last = q + 1 == nb;
                    if (eng__toklist_push(out, id, os, tok->spm_exact && !last ? os : oe)) return ENG_NO_MEMORY;
                }
                continue;
            }
        }
        if (unk && prev_unk && tok->spm_exact) {
            out->be[out->n - 1] = oe;
            continue;
        }
        prev_unk = unk;
        int32_t id = unk ? unk_id : tok->out_id[pieces[x]];
        if (id >= 0 && eng__toklist_push(out, id, os, oe)) return ENG_NO_MEMORY;
    }
    return 0;
}

static int lat_reserve(eng__tok_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->lat_cap) return 0;
    size_t cap = ctx->lat_cap ? ctx->lat_cap : 4096;
    while (cap < bytes) cap *= 2;
    void *p = realloc(ctx->lat, cap);
    if (!p) return ENG_NO_MEMORY;
    ctx->lat = p;
    ctx->lat_cap = cap;
    return 0;
}

static int viterbi(const eng_tokenizer *tok, eng__tok_ctx *ctx, const view *v) {
    size_t n = v->n;
    if (!n) return 0;
    /* nodes (n + 1), then starts and pieces of the result (n + 1 each) */
    size_t need = (n + 1) * (sizeof(lnode) + 2 * sizeof(int32_t));
    if (n > INT32_MAX / 2 || lat_reserve(ctx, need)) return ENG_NO_MEMORY;
    lnode *best = ctx->lat;
    int32_t *starts = (int32_t *)(best + n + 1), *pieces = starts + n + 1;
    for (size_t i = 0; i <= n; i++) best[i] = (lnode){0, -1, -1};
    const bool exact = tok->spm_exact;
    const double unk_score = exact ? (double)((float)tok->min_score - 10.0f) : tok->min_score - 10.0;
    const eng__trie_node *nd = tok->pieces.nodes;
    const uint8_t *b = (const uint8_t *)v->b;
    const uint32_t *boff = v->boff;
    const uint32_t bend = boff[n];
    for (size_t s = 0; s < n; s++) {
        double base = best[s].score;
        bool single = false;
        /* one walk of the trie from s; e: the code point whose start boundary is next */
        uint32_t node = 0;
        size_t e = s + 1;
        for (uint32_t q = boff[s]; q < bend;) {
            uint32_t x = (uint32_t)nd[node].base + b[q];
            if (nd[x].check != node) break; /* no piece continues */
            node = x;
            if (++q != boff[e]) continue; /* inside a character */
            int32_t p = nd[node].value;
            size_t end = e++;
            if (p < 0) continue;
            double sc;
            if (exact) {
                /* as sentencepiece: the piece score is promoted to double (the user-defined branch is
                 * double), the sum compared in double against the stored float, then stored as float */
                if (tok->ptype[p] == ENG__SP_UNUSED) continue;
                double f = tok->ptype[p] == ENG__SP_USER
                               ? (double)(boff[end] - boff[s]) * (double)(float)tok->max_score - 0.1
                               : (double)(float)tok->score[p];
                sc = f + base;
                if (best[end].start < 0 || sc > best[end].score) best[end] = (lnode){(double)(float)sc, (int32_t)s, p};
            } else {
                sc = tok->score[p] + base;
                if (best[end].start < 0 || sc > best[end].score) best[end] = (lnode){sc, (int32_t)s, p};
            }
            if (end == s + 1) single = true;
        }
        if (!single) {
            double sc = exact ? (double)((float)unk_score + (float)base) : unk_score + base;
            if (best[s + 1].start < 0 || sc > best[s + 1].score) best[s + 1] = (lnode){sc, (int32_t)s, -2};
        }
    }
    size_t k = 0;
    for (size_t e = n; e > 0; e = (size_t)best[e].start) k++;
    size_t x = k;
    starts[k] = (int32_t)n;
    for (size_t e = n; e > 0; e = (size_t)best[e].start) {
        x--;
        starts[x] = best[e].start;
        pieces[x] = best[e].piece;
    }
    return emit(tok, ctx, v, starts, pieces, k);
}

/* ---- SentencePiece BPE ---- */

typedef struct {
    float score;
    int32_t left, right;
    uint32_t size; /* bytes of the merged piece */
} agenda_ent;

static bool ag_before(const agenda_ent *a, const agenda_ent *b) { /* a pops first */
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void ag_push(agenda_ent *h, size_t *n, agenda_ent e) {
    size_t i = (*n)++;
    while (i > 0 && ag_before(&e, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static agenda_ent ag_pop(agenda_ent *h, size_t *n) {
    agenda_ent top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && ag_before(&h[c + 1], &h[c])) c++;
        if (!ag_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

static int spm_bpe(const eng_tokenizer *tok, eng__tok_ctx *ctx, const view *v) {
    size_t n = v->n;
    if (!n) return 0;
    if (n > INT32_MAX / 4) return ENG_TOO_LARGE;
    /* symbol i: cps [st[i], en[i]) (en == st: merged away); prev/next links; each merge adds at most
     * two agenda entries, so 3n bounds the agenda */
    size_t need = n * 4 * sizeof(int32_t) + 3 * n * sizeof(agenda_ent) + 2 * (n + 1) * sizeof(int32_t);
    if (lat_reserve(ctx, need)) return ENG_NO_MEMORY;
    int32_t *st = ctx->lat, *en = st + n, *prev = en + n, *next = prev + n;
    agenda_ent *ag = (agenda_ent *)(next + n);
    int32_t *starts = (int32_t *)(ag + 3 * n), *pieces = starts + n + 1;
    size_t na = 0;
    for (size_t i = 0; i < n; i++) {
        st[i] = (int32_t)i, en[i] = (int32_t)i + 1;
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
#define MAYBE_ADD(l, r)                                                                                       \
    do {                                                                                                      \
        if ((l) >= 0 && (r) >= 0) {                                                                           \
            int32_t p_ = find_piece(tok, v, (size_t)st[l], (size_t)en[r]);                                    \
            if (p_ >= 0)                                                                                      \
                ag_push(ag, &na, (agenda_ent){(float)tok->score[p_], (l), (r), v->boff[en[r]] - v->boff[st[l]]}); \
        }                                                                                                     \
    } while (0)
    for (size_t i = 1; i < n; i++) MAYBE_ADD((int32_t)i - 1, (int32_t)i);
    while (na) {
        agenda_ent t = ag_pop(ag, &na);
        int32_t l = t.left, r = t.right;
        uint32_t ls = v->boff[en[l]] - v->boff[st[l]], rs = v->boff[en[r]] - v->boff[st[r]];
        if (en[l] == st[l] || en[r] == st[r] || ls + rs != t.size) continue; /* stale */
        en[l] = en[r];
        en[r] = st[r];
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        if (na + 2 > 3 * n) continue; /* cannot happen (see above) */
        MAYBE_ADD(prev[l], l);
        MAYBE_ADD(l, next[l]);
    }
#undef MAYBE_ADD
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) {
        starts[k] = st[i];
        int32_t p = find_piece(tok, v, (size_t)st[i], (size_t)en[i]);
        pieces[k++] = p >= 0 ? p : -2;
    }
    starts[k] = (int32_t)n;
    return emit(tok, ctx, v, starts, pieces, k);
}

/* ---- Metaspace and the entry point ---- */

static int segment(const eng_tokenizer *tok, eng__tok_ctx *ctx, const view *v) {
    return tok->kind == ENG_TOK_SPM_BPE ? spm_bpe(tok, ctx, v) : viterbi(tok, ctx, v);
}

/* Metaspace over cps [a, b) of t: spaces become the replacement, which is prepended as the scheme
 * says, and the word is split before each replacement when split is set. */
static int metaspace(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a, size_t b) {
    eng__ntext *w = &ctx->t1; /* free once the normalizer is done */
    w->n = 0;
    uint32_t rep = tok->meta_rep;
    uint32_t first = t->cps[a] == ' ' ? rep : t->cps[a];
    bool prepend = first != rep && (tok->meta_prepend == 2 || (tok->meta_prepend == 1 && ctx->section == 0));
    if (prepend && eng__ntext_push(w, rep, t->os[a], t->os[a])) return ENG_NO_MEMORY;
    for (size_t i = a; i < b; i++)
        if (eng__ntext_push(w, t->cps[i] == ' ' ? rep : t->cps[i], t->os[i], t->oe[i])) return ENG_NO_MEMORY;
    if (eng__ntext_bytes(w)) return ENG_NO_MEMORY;
    uint32_t end = b == t->n ? ctx->end_orig : t->os[b];
    size_t s = 0;
    for (size_t i = 1; i <= w->n; i++) {
        if (i < w->n && (!tok->meta_split || w->cps[i] != rep)) continue;
        view v = {w->b, w->boff + s, w->os + s, w->oe + s, i - s, i < w->n ? w->os[i] : end};
        int rc = segment(tok, ctx, &v);
        if (rc) return rc;
        s = i;
    }
    return 0;
}

int eng__unigram_text(const eng_tokenizer *tok, eng__tok_ctx *ctx, const eng__ntext *t, size_t a, size_t b) {
    if (b <= a) return 0;
    if (tok->pretok != ENG__PRETOK_METASPACE) {
        view v = {t->b, t->boff + a, t->os + a, t->oe + a, b - a, b == t->n ? ctx->end_orig : t->os[b]};
        return segment(tok, ctx, &v);
    }
    if (!tok->ws_split) return metaspace(tok, ctx, t, a, b);
    /* WhitespaceSplit: the runs of non-whitespace (JavaScript's \S, as transformers.js), each a word */
    for (size_t i = a; i < b;) {
        while (i < b && eng__is_js_space(t->cps[i])) i++;
        size_t j = i;
        while (j < b && !eng__is_js_space(t->cps[j])) j++;
        if (j > i) {
            int rc = metaspace(tok, ctx, t, i, j);
            if (rc) return rc;
        }
        i = j;
    }
    return 0;
}

/* ---- building the piece index ---- */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int eng__pieces_index(eng_tokenizer *tok, const char *const *names, const uint32_t *lens, eng_err *err) {
    size_t np = tok->n_pieces > 0 ? (size_t)tok->n_pieces : 1, nk = 0;
    const char **keys = malloc(np * sizeof *keys);
    uint32_t *klens = malloc(np * sizeof *klens);
    int32_t *kvals = malloc(np * sizeof *kvals);
    if (!keys || !klens || !kvals) {
        free(keys);
        free(klens);
        free(kvals);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory indexing pieces");
    }
    for (int b = 0; b < 256; b++) tok->byte_piece[b] = -1;
    tok->min_score = 1e300;
    tok->max_score = tok->spm_exact ? 1.17549435e-38 : -1e300; /* sentencepiece starts from FLT_MIN */
    for (int32_t i = 0; i < tok->n_pieces; i++) {
        uint8_t ty = tok->ptype[i];
        const char *s = names[i];
        uint32_t n = lens[i];
        if (!tok->spm_exact || ty == ENG__SP_NORMAL) {
            if (tok->score[i] < tok->min_score) tok->min_score = tok->score[i];
            if (tok->score[i] > tok->max_score) tok->max_score = tok->score[i];
        }
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0 &&
            (!tok->spm_exact || ty == ENG__SP_BYTE)) {
            int v = hex_digit(s[3]) * 16 + hex_digit(s[4]); /* two hex digits: no sign, no space (strtol took "-1") */
            if (tok->byte_piece[v] < 0) tok->byte_piece[v] = i;
        }
        if (ty == ENG__SP_UNKNOWN && tok->sp_unk < 0) tok->sp_unk = i;
        bool lattice = !tok->spm_exact || ty == ENG__SP_NORMAL || ty == ENG__SP_USER || ty == ENG__SP_UNUSED;
        if (!lattice || !n) continue;
        keys[nk] = s;
        klens[nk] = n;
        kvals[nk++] = i;
    }
    int rc = eng__trie_build(&tok->pieces, keys, klens, kvals, nk);
    free(keys);
    free(klens);
    free(kvals);
    if (rc) return eng_err_set(err, rc, rc == ENG_NO_MEMORY ? "out of memory indexing pieces" : "too many pieces");
    if (tok->min_score > tok->max_score && !tok->n_pieces) tok->min_score = tok->max_score = 0;
    return 0;
}

size_t eng__pieces_bytes(const eng_tokenizer *tok) { return (size_t)tok->pieces.n * sizeof *tok->pieces.nodes; }
