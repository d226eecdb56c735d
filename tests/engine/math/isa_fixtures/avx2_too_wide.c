/* avx2_too_wide.c - a fixture for engine_kernel_isa_refuses_*: named for the AVX2 level but compiled
 * for x86-64-v4 (tests/CMakeLists.txt), so its loop uses zmm registers the check must refuse. */
void isa_fixture_scale(float *x, int n); /* no header: nothing calls it */
void isa_fixture_scale(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = x[i] * 2.0f + 1.0f;
}
