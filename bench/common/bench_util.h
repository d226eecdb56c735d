/* bench_util.h - what every benchmark needs: a monotonic clock, medians, a list parser, and the
 * sgemm peak of this machine measured through the engine's own GEMM (so a benchmark can state its
 * achieved GFLOP/s next to what the hardware and OpenBLAS core reach in the same run). */
#ifndef ADAPTERD_BENCH_UTIL_H
#define ADAPTERD_BENCH_UTIL_H

#include <stdint.h>

#include "engine/model.h"
#include "math/pool.h"
#include "test_rand.h" /* the one LCG: test_rand_bits, frand */

/* Monotonic time in milliseconds. */
double bench_now_ms(void);

/* Median of n values; sorts v in place. */
double bench_median(double *v, int n);

/* Parses "1,8,64" into at most max ints; returns the count. */
int bench_parse_list(const char *s, int *v, int max);

/* n token ids drawn from [lo, hi) by the LCG seeded with seed: the same inputs on every run. */
void bench_random_ids(int32_t *ids, int n, unsigned seed, int lo, int hi);

/* Best GFLOP/s of a 2048 x 3072 x 768 product through eng__gemm on pool, over reps runs after two
 * warm-ups; 0 when memory runs out. */
double bench_sgemm_peak(eng_pool *pool, int reps);

/* The instruction peak of precision p on every thread of pool, in G operations per second (a
 * multiply-add is 2), of the instruction the engine's kernel for p multiplies with at its level now
 * (bench_peak_x86.c: vfmadd231ps zmm/ymm, vdpbf16ps, vpdpbusd zmm/ymm, vpmaddwd; bench_peak_arm.c: fmla,
 * sdot, smmla, bfmmla), best of 5 runs of ~20 ms. 0 for the portable C kernels. */
double bench_isa_peak(eng_pool *pool, eng_precision p);

/* Best of 5 runs of loop(iters) on every thread of pool at once, in G operations per second, for ops
 * operations per iteration (bench_peak_x86.c, bench_peak_arm.c). */
typedef void (*bench_loop_fn)(long n);
double bench_peak_loop(eng_pool *pool, bench_loop_fn loop, long iters, double ops);

#endif
