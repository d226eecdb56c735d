/* tensor.h - conventions for every array in the engine, said once.
 *
 * All matrices are row-major float32. A shape comment `(R, C)` means R rows of C contiguous floats.
 * Linear layers keep Hugging Face's layout: a weight `(out, in)` is applied as y = x W^T + b, so a
 * batch of rows x `(R, in)` gives y `(R, out)`.
 *
 * "Packed rows": the sequences of a batch are concatenated without padding; sequence s owns rows
 * [seg.start, seg.start + seg.len). Every GEMM runs over all packed rows at once; only attention
 * looks at sequence boundaries. A task stream (engine/run.h) is one more segment over
 * its own copy of a sequence's rows. */
#ifndef ADAPTERD_ENGINE_CORE_TENSOR_H
#define ADAPTERD_ENGINE_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* A contiguous run of packed rows that attention treats as one sequence. */
typedef struct {
    int32_t start; /* first row */
    int32_t len;   /* number of rows (tokens) */
} eng_seg;

/* Allocates n bytes aligned to 64 (a cache line, an AVX-512 vector); returns NULL on failure.
 * Release with eng__free_aligned. */
void *eng__alloc_aligned(size_t n);
void eng__free_aligned(void *p);

#endif
