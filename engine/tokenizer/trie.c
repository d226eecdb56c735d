/* trie.c - the piece index of the SentencePiece tokenizers: a double-array trie over bytes.
 *
 * Unigram's lattice needs, at every start position of a word, every piece that begins there; a hash
 * of each growing prefix (what this file replaces) costs a hash and a key compare per character and
 * per start, and needs every proper prefix of every piece stored as a key of its own (DeBERTa-v3:
 * 14 MiB). A trie walked once per start position finds them all in one pass of single-byte steps, as
 * sentencepiece does with darts-clone. Its layout is the classic double array (Aoe): node s's child
 * on byte c is t = base[s] + c, which is a child of s exactly when check[t] == s. A step is one add,
 * one load and one compare, and the children of a node sit within 256 slots of each other, so the hot
 * upper levels of the trie stay in cache. The value of a node (the piece ending there, or -1) sits
 * next to its check, so the step that arrives at a node also brings its value. Keys are bytes (any of
 * the 256); the array is padded by 256 slots past the largest base, so base + c never needs a bounds
 * check, and a node without children keeps base 0, whose slots 0..255 are never its children.
 *
 * Built once at load and read-only afterwards (shared by every encoding thread): keys sorted, then
 * the nodes placed breadth-first from an explicit queue (no recursion: a piece may be long), each
 * node's children at the first base whose slots are all free, found by walking a list of the free
 * slots. The build's scratch is freed before it returns. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define FREE UINT32_MAX
#define ROOT_CHECK (UINT32_MAX - 1)
#define RETIRED (UINT32_MAX - 2) /* free, but no longer offered (see find_base); FREE again at the end */
#define MAX_TRIALS 16

typedef struct {
    const char *key;
    uint32_t len, index;
} key_ref;

static int cmp_keys(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index); /* equal keys: the first index first, so it is kept */
}

typedef struct {
    eng__trie_node *nodes; /* (cap) */
    uint32_t cap;
    uint32_t *next_free, *prev_free; /* (cap) the free slots as a circular doubly linked list */
    uint8_t *trials;                 /* (cap) times a free slot was tried as a first child and did not fit */
    uint32_t head;                   /* a free slot, FREE when none */
    uint32_t used_end;               /* one past the highest used slot */
    uint32_t max_base;
} builder;

static void unlink_free(builder *b, uint32_t i) {
    uint32_t n = b->next_free[i], p = b->prev_free[i];
    if (n == i) {
        b->head = FREE;
    } else {
        b->next_free[p] = n;
        b->prev_free[n] = p;
        if (b->head == i) b->head = n;
    }
}

/* Grows the array to at least need slots; the new slots join the free list. Returns 0 or -1. */
static int grow(builder *b, uint64_t need) {
    if (need <= b->cap) return 0;
    if (need > (uint64_t)INT32_MAX) return -1;
    uint64_t cap = b->cap ? b->cap : 1024;
    while (cap < need) cap *= 2;
    if (cap > (uint64_t)INT32_MAX) cap = INT32_MAX;
    eng__trie_node *nodes = realloc(b->nodes, cap * sizeof *nodes);
    if (!nodes) return -1;
    b->nodes = nodes;
    uint32_t *nf = realloc(b->next_free, cap * sizeof *nf);
    if (!nf) return -1;
    b->next_free = nf;
    uint32_t *pf = realloc(b->prev_free, cap * sizeof *pf);
    if (!pf) return -1;
    b->prev_free = pf;
    uint8_t *tr = realloc(b->trials, cap);
    if (!tr) return -1;
    b->trials = tr;
    memset(tr + b->cap, 0, cap - b->cap);
    for (uint32_t i = b->cap; i < (uint32_t)cap; i++) {
        b->nodes[i] = (eng__trie_node){0, FREE, -1};
        if (b->head == FREE) {
            b->head = i;
            b->next_free[i] = b->prev_free[i] = i;
        } else { /* append before head: the list stays in slot order */
            uint32_t last = b->prev_free[b->head];
            b->next_free[last] = i;
            b->prev_free[i] = last;
            b->next_free[i] = b->head;
            b->prev_free[b->head] = i;
        }
    }
    b->cap = (uint32_t)cap;
    return 0;
}

/* The first base at which every label of lab[0, n) (ascending) lands on a free slot, growing the
 * array as needed; returns it, or -1 when the array cannot grow. A free slot that failed MAX_TRIALS
 * times is retired from the list (as darts-clone closes its blocks): the holes left behind a full
 * front would otherwise be scanned again for every node with several children, which made the build
 * quadratic-ish; a retired slot stays empty, costing only its 12 bytes. */
static int64_t find_base(builder *b, const uint8_t *lab, int n) {
    for (;;) {
        if (b->head == FREE && grow(b, (uint64_t)b->cap + 256)) return -1;
        /* one walk of the list as it is now, head to tail (slots grown meanwhile wait for the next) */
        uint32_t f = b->head, tail = b->prev_free[b->head];
        for (;;) {
            if (f >= lab[0]) {
                uint32_t base = f - lab[0];
                if ((uint64_t)base + 256 > b->cap && grow(b, (uint64_t)base + 256)) return -1;
                int k = 1;
                while (k < n && b->nodes[base + lab[k]].check == FREE) k++;
                if (k == n) return base;
            }
            uint32_t next = b->next_free[f];
            if (++b->trials[f] >= MAX_TRIALS) {
                unlink_free(b, f);
                b->nodes[f].check = RETIRED;
            }
            if (f == tail || b->head == FREE) break;
            f = next;
        }
        /* no free slot fits (every one too low, or the array too full): extend */
        if (grow(b, (uint64_t)b->cap + 256)) return -1;
    }
}

typedef struct {
    uint32_t node, lo, hi, depth; /* the sorted keys [lo, hi) share their first depth bytes, spelling node */
} work;

int eng__trie_build(eng__trie *t, const char *const *keys, const uint32_t *lens, const int32_t *vals, size_t n) {
    memset(t, 0, sizeof *t);
    if (n > (size_t)INT32_MAX) return ENG_TOO_LARGE;
    key_ref *ord = malloc((n ? n : 1) * sizeof *ord);
    work *q = malloc((n ? n : 1) * sizeof *q);
    builder b = {0};
    b.head = FREE;
    int rc = 0;
    if (!ord || !q || grow(&b, 1024)) {
        rc = ENG_NO_MEMORY;
        goto done;
    }
    for (size_t i = 0; i < n; i++) ord[i] = (key_ref){keys[i], lens[i], (uint32_t)i};
    qsort(ord, n, sizeof *ord, cmp_keys);

    unlink_free(&b, 0);
    b.nodes[0].check = ROOT_CHECK;
    b.used_end = 1;
    /* the queue: the items in it hold disjoint, non-empty ranges of keys (a node is popped before
     * its children, which split its range, are pushed), so a ring of n items never overflows */
    size_t qh = 0, qn = 0;
    if (n) q[qn++] = (work){0, 0, (uint32_t)n, 0};
    while (qn) {
        work w = q[qh];
        qh = (qh + 1) % n;
        qn--;
        uint32_t lo = w.lo;
        if (ord[lo].len == w.depth) { /* a key ends here (the first of equal keys wins) */
            b.nodes[w.node].value = vals[ord[lo].index];
            while (lo < w.hi && ord[lo].len == w.depth) lo++;
        }
        if (lo == w.hi) continue;
        uint8_t lab[256];
        uint32_t from[257];
        int nl = 0;
        for (uint32_t i = lo; i < w.hi; i++) {
            uint8_t c = (uint8_t)ord[i].key[w.depth];
            if (!nl || lab[nl - 1] != c) {
                lab[nl] = c;
                from[nl++] = i;
            }
        }
        from[nl] = w.hi;
        int64_t base = find_base(&b, lab, nl);
        if (base < 0) {
            rc = ENG_NO_MEMORY;
            goto done;
        }
        b.nodes[w.node].base = (int32_t)base;
        if ((uint32_t)base > b.max_base) b.max_base = (uint32_t)base;
        for (int k = 0; k < nl; k++) {
            uint32_t s = (uint32_t)base + lab[k];
            unlink_free(&b, s);
            b.nodes[s].check = w.node;
            if (s + 1 > b.used_end) b.used_end = s + 1;
            q[(qh + qn) % n] = (work){s, from[k], from[k + 1], w.depth + 1};
            qn++;
        }
    }
    /* keep every used slot and 256 past the largest base (base + c stays inside without a check) */
    uint32_t keep = b.used_end > b.max_base + 256 ? b.used_end : b.max_base + 256;
    if (grow(&b, keep)) {
        rc = ENG_NO_MEMORY;
        goto done;
    }
    for (uint32_t i = 0; i < keep; i++)
        if (b.nodes[i].check == RETIRED) b.nodes[i].check = FREE;
    eng__trie_node *nodes = realloc(b.nodes, (size_t)keep * sizeof *nodes);
    if (nodes) b.nodes = nodes;
    t->nodes = b.nodes;
    t->n = keep;
    b.nodes = NULL;
done:
    free(b.nodes);
    free(b.next_free);
    free(b.prev_free);
    free(b.trials);
    free(ord);
    free(q);
    return rc;
}

void eng__trie_free(eng__trie *t) {
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

int32_t eng__trie_find(const eng__trie *t, const uint8_t *s, size_t n) {
    if (!t->nodes) return -2;
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++)
        if (eng__trie_step(t, &node, s[i])) return -2;
    return t->nodes[node].value;
}
