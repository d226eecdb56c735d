/* state.c - creation and release of an eng_state, and its scratch slots (see math/state.h).
 *
 * The buffers grow to the largest batch seen and are kept: a worker serving similar requests
 * allocates nothing after its first few passes. */
#include "math/state.h"

#include <stdlib.h>

#include "math/blas.h"

eng_state *eng_state_new(int n_threads) {
    eng__blas_init();
    eng_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->n_threads = n_threads < 1 ? 1 : n_threads;
    st->pool = eng__pool_new(st->n_threads);
    st->scores = calloc((size_t)st->n_threads, sizeof *st->scores);
    if (!st->pool || !st->scores) {
        eng_state_free(st);
        return NULL;
    }
    return st;
}

void eng__state_free_rows(eng_state *st) {
    eng__free_aligned(st->qkv);
    eng__free_aligned(st->ctx);
    eng__free_aligned(st->h);
    eng__free_aligned(st->inter);
    free(st->pos);
    st->qkv = st->ctx = st->h = st->inter = NULL;
    st->pos = NULL;
    st->cap_rows = 0;
}

void eng_state_free(eng_state *st) {
    if (!st) return;
    eng__pool_free(st->pool);
    eng__state_free_rows(st);
    if (st->scores)
        for (int i = 0; i < st->n_threads; i++) eng__free_aligned(st->scores[i]);
    free(st->scores);
    free(st->segs);
    eng__free_aligned(st->pooler_in);
    eng__free_aligned(st->lin_ws);
    for (int i = 0; i < ENG_SCRATCH_SLOTS; i++) eng__free_aligned(st->scratch[i]);
    free(st);
}

eng_pool *eng__state_pool(eng_state *st) { return st->pool; }

float *eng__state_scratch(eng_state *st, eng_scratch_slot slot, size_t n_floats) {
    if ((int)slot < 0 || slot >= ENG_SCRATCH_SLOTS) return NULL;
    if (n_floats > st->scratch_cap[slot]) {
        size_t cap = n_floats + n_floats / 4 + 16;
        float *p = eng__alloc_aligned(cap * sizeof(float));
        if (!p) return NULL;
        eng__free_aligned(st->scratch[slot]);
        st->scratch[slot] = p;
        st->scratch_cap[slot] = cap;
    }
    return st->scratch[slot];
}
