/* alloc.c - 64-byte aligned allocations (core/tensor.h): a cache line, and an AVX-512 vector. */
#include <stdlib.h>

#include "core/tensor.h"

void *eng__alloc_aligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
    return p;
}

void eng__free_aligned(void *p) { free(p); }
