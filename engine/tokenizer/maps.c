/* maps.c - the tokenizer's containers: vocabulary hash map, BPE merge map, the word cache, and the
 * token list the models append to.
 *
 * Vocabulary lookups are the inner loop of WordPiece (one per candidate sub-word) so the map is a
 * flat open-addressing table of entry indexes with the keys in one buffer, compared by length first.
 * The BPE word cache is the only mutable state a loaded tokenizer has: 64 shards, each a
 * direct-mapped table of fixed-size entries (512, fewer for a small vocabulary) behind its own
 * mutex, so concurrent encodes rarely meet on a lock and a miss costs one memcmp. Entries are
 * overwritten on collision (no LRU list): repeated words in real text hit, rare words are simply
 * recomputed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)s[i] << (8 * i);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

void eng__strmap_free(eng__strmap *m) {
    free(m->slots);
    free(m->key_off);
    free(m->key_len);
    free(m->val);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

int64_t eng__strmap_find(const eng__strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
        uint32_t e = m->slots[i];
        if (!e) return -1;
        e--;
        if (m->key_len[e] == len && !memcmp(m->keys + m->key_off[e], key, len)) return e;
    }
}

static int strmap_grow(eng__strmap *m) {
    uint32_t cap = m->cap ? m->cap * 2 : 64;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t i = (uint32_t)hash_bytes(m->keys + m->key_off[e], m->key_len[e]) & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = e + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

int64_t eng__strmap_intern(eng__strmap *m, const char *key, size_t len, int32_t val, bool *added) {
    if (added) *added = false;
    int64_t f = eng__strmap_find(m, key, len);
    if (f >= 0) return f;
    if (len > UINT32_MAX / 2) return -1;
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m)) return -1;
    if (m->n == m->n_alloc) {
        uint32_t na = m->n_alloc ? m->n_alloc * 2 : 64;
        uint32_t *ko = realloc(m->key_off, na * sizeof *ko);
        if (!ko) return -1;
        m->key_off = ko;
        uint32_t *kl = realloc(m->key_len, na * sizeof *kl);
        if (!kl) return -1;
        m->key_len = kl;
        int32_t *v = realloc(m->val, na * sizeof *v);
        if (!v) return -1;
        m->val = v;
        m->n_alloc = na;
    }
    if (m->keys_len + len + 1 > m->keys_cap) {
        size_t pc = m->keys_cap ? m->keys_cap : 4096;
        while (pc < m->keys_len + len + 1) pc *= 2;
        if (pc > UINT32_MAX) return -1;
        char *keys = realloc(m->keys, pc);
        if (!keys) return -1;
        m->keys = keys;
        m->keys_cap = pc;
    }
    uint32_t e = m->n++;
    m->key_off[e] = (uint32_t)m->keys_len;
    m->key_len[e] = (uint32_t)len;
    m->val[e] = val;
    memcpy(m->keys + m->keys_len, key, len);
    m->keys[m->keys_len + len] = '\0';
    m->keys_len += len + 1;
    uint32_t mask = m->cap - 1;
    uint32_t i = (uint32_t)hash_bytes(key, len) & mask;
    while (m->slots[i]) i = (i + 1) & mask;
    m->slots[i] = e + 1;
    if (added) *added = true;
    return e;
}

/* ---- merge pairs ---- */

static inline uint32_t pair_hash(uint64_t k) {
    k *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

int eng__pairmap_put(eng__pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    if ((m->n + 1) * 2 > m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 1024;
        eng__pair_slot *s = malloc((size_t)cap * sizeof *s);
        if (!s) return -1;
        for (uint32_t i = 0; i < cap; i++) s[i].key = UINT64_MAX;
        for (uint32_t j = 0; j < m->cap; j++) {
            if (m->slots[j].key == UINT64_MAX) continue;
            uint32_t i = pair_hash(m->slots[j].key) & (cap - 1);
            while (s[i].key != UINT64_MAX) i = (i + 1) & (cap - 1);
            s[i] = m->slots[j];
        }
        free(m->slots);
        m->slots = s;
        m->cap = cap;
    }
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = pair_hash(k) & (m->cap - 1);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != k) i = (i + 1) & (m->cap - 1);
    if (m->slots[i].key == UINT64_MAX) m->n++;
    /* a repeated pair keeps the later rank, as transformers.js's Map construction does */
    m->slots[i] = (eng__pair_slot){k, rank, merged};
    return 0;
}

int eng__bpe_pair(const eng__pairmap *m, int32_t a, int32_t b, int32_t *merged) {
    if (!m->cap) return -1;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint32_t i = pair_hash(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        const eng__pair_slot *s = &m->slots[i];
        if (s->key == k) {
            *merged = s->merged;
            return s->rank;
        }
        if (s->key == UINT64_MAX) return -1;
    }
}

void eng__pairmap_free(eng__pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- word cache ---- */

#define CACHE_SHARDS 64
#define CACHE_WAYS_MAX 512 /* entries per shard at most: 64 * 512 * 128 B = 4 MiB */
#define CACHE_WAYS_MIN 4

typedef struct {
    uint64_t hash; /* 0 = empty */
    uint8_t klen, ntok;
    uint8_t ends[ENG__CACHE_TOK_MAX];
    char key[ENG__CACHE_KEY_MAX];
    int32_t ids[ENG__CACHE_TOK_MAX];
} cache_entry;

typedef struct {
    _Alignas(64) pthread_mutex_t mu; /* one cache line or more each: shards do not share lines */
} cache_lock;

struct eng__bpe_cache {
    uint32_t ways;        /* entries per shard, a power of two */
    cache_lock lock[CACHE_SHARDS];
    cache_entry *e;       /* (CACHE_SHARDS, ways) */
};

eng__bpe_cache *eng__bpe_cache_new(int32_t n_ids) {
    /* one way per 64 vocabulary entries: the real vocabularies of this family (30k-250k) get the
     * largest cache, a test vocabulary of a few dozen tokens does not pay 4 MiB for each load */
    uint32_t ways = CACHE_WAYS_MIN;
    while (ways < CACHE_WAYS_MAX && (int64_t)ways * 64 < n_ids) ways *= 2;
    eng__bpe_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->e = calloc((size_t)CACHE_SHARDS * ways, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    c->ways = ways;
    for (int i = 0; i < CACHE_SHARDS; i++) pthread_mutex_init(&c->lock[i].mu, NULL);
    return c;
}

void eng__bpe_cache_free(eng__bpe_cache *c) {
    if (!c) return;
    for (int i = 0; i < CACHE_SHARDS; i++) pthread_mutex_destroy(&c->lock[i].mu);
    free(c->e);
    free(c);
}

int eng__bpe_cache_get(eng__bpe_cache *c, const uint8_t *w, size_t n, int32_t *ids, uint8_t *ends) {
    if (n > ENG__CACHE_KEY_MAX) return -1;
    uint64_t h = hash_bytes(w, n) | 1;
    size_t s = h % CACHE_SHARDS;
    pthread_mutex_t *mu = &c->lock[s].mu;
    cache_entry *e = &c->e[s * c->ways + ((h >> 8) & (c->ways - 1))];
    int r = -1;
    pthread_mutex_lock(mu);
    if (e->hash == h && e->klen == n && !memcmp(e->key, w, n)) {
        r = e->ntok;
        memcpy(ids, e->ids, (size_t)r * sizeof *ids);
        memcpy(ends, e->ends, (size_t)r);
    }
    pthread_mutex_unlock(mu);
    return r;
}

void eng__bpe_cache_put(eng__bpe_cache *c, const uint8_t *w, size_t n, const int32_t *ids,
                        const uint8_t *ends, int ntok) {
    if (n > ENG__CACHE_KEY_MAX || ntok > ENG__CACHE_TOK_MAX || ntok < 0) return;
    uint64_t h = hash_bytes(w, n) | 1;
    size_t s = h % CACHE_SHARDS;
    pthread_mutex_t *mu = &c->lock[s].mu;
    cache_entry *e = &c->e[s * c->ways + ((h >> 8) & (c->ways - 1))];
    pthread_mutex_lock(mu);
    e->hash = h;
    e->klen = (uint8_t)n;
    e->ntok = (uint8_t)ntok;
    memcpy(e->key, w, n);
    memcpy(e->ids, ids, (size_t)ntok * sizeof *ids);
    memcpy(e->ends, ends, (size_t)ntok);
    pthread_mutex_unlock(mu);
}

/* ---- token lists (the models' output, eng__toklist) ---- */

int eng__toklist_push(eng__toklist *l, int32_t id, uint32_t bs, uint32_t be) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        int32_t *ids = realloc(l->ids, cap * sizeof *ids);
        if (!ids) return ENG_NO_MEMORY;
        l->ids = ids;
        uint32_t *a = realloc(l->bs, cap * sizeof *a);
        if (!a) return ENG_NO_MEMORY;
        l->bs = a;
        a = realloc(l->be, cap * sizeof *a);
        if (!a) return ENG_NO_MEMORY;
        l->be = a;
        l->cap = cap;
    }
    l->ids[l->n] = id;
    l->bs[l->n] = bs;
    l->be[l->n] = be;
    l->n++;
    return 0;
}
