/* test_rand.h - the tests' reproducible random numbers: a 32-bit LCG (Numerical Recipes' constants),
 * so every run of a test sees the same inputs from the same seed. */
#ifndef ADAPTERD_TESTS_TEST_RAND_H
#define ADAPTERD_TESTS_TEST_RAND_H

/* The next 24 random bits from the state *s, which it advances (the low bits of an LCG are weak). */
static inline unsigned test_rand_bits(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* An integer in [0, n) (n >= 1; slightly biased for n not a power of two, which tests tolerate). */
static inline unsigned test_rand_below(unsigned *s, unsigned n) { return test_rand_bits(s) % n; }

/* A float in [lo, hi). */
static inline float frand(unsigned *s, float lo, float hi) {
    return lo + (hi - lo) * (float)test_rand_bits(s) / (float)(1u << 24);
}

#endif
