/* test_rand.h - the tests' reproducible random numbers: a 32-bit LCG (Numerical Recipes' constants),
 * so every run of a test sees the same inputs from the same seed. */
#ifndef ADAPTERD_TESTS_TEST_RAND_H
#define ADAPTERD_TESTS_TEST_RAND_H

/* A float in [lo, hi) from the state *s, which it advances. */
static inline float frand(unsigned *s, float lo, float hi) {
    *s = *s * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*s >> 8) / (float)(1u << 24);
}

#endif
