/* test_linear.c - the precision switch of engine/math/linear.c: each precision runs exactly the
 * product of its own kernel (compared bit for bit with a direct call), names parse both ways, and a
 * precision the CPU lacks is refused with a sentence. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "math/blas.h"
#include "core/tensor.h"
#include "math/cpu.h"
#include "math/linear.h"

#include "test_rand.h"

Test(linear, runs_each_precision_like_its_kernel) {
    unsigned s = 3;
    int M = 37, N = 130, K = 301;
    float *A = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
    cr_assert(A && W && bias && C1 && C2);
    for (int i = 0; i < M * K; i++) A[i] = frand(&s, -1, 1);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s, -0.1f, 0.1f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s, -1, 1);
    eng_epilogue ep = {.bias = bias, .act = ENG_ACT_GELU};
    eng_pool *pool = eng__pool_new(2);
    cr_assert(pool);
    for (int p = ENG_PREC_F32; p <= ENG_PREC_INT8; p++) {
        eng_linear l;
        eng_err err = {0};
        cr_assert_eq(eng__linear_pack(&l, (eng_prec)p, W, N, K, K, &err), ENG_OK, "%s", err.msg);
        size_t wsb = eng__linear_ws_bytes((eng_prec)p, M, K);
        void *ws = wsb ? eng__alloc_aligned(wsb) : NULL;
        cr_assert(!wsb || ws);
        eng__linear_run(pool, M, A, K, &l, C1, N, &ep, ws);
        if (p == ENG_PREC_F32) {
            float *P = eng__alloc_aligned(sizeof(float) * eng__packed_floats(N, K));
            cr_assert(P);
            eng__pack_linear(W, N, K, K, P);
            eng__pgemm(pool, M, N, K, A, K, P, C2, N, &ep);
            eng__free_aligned(P);
            cr_assert_eq(eng__linear_bytes(&l), sizeof(float) * eng__packed_floats(N, K));
        } else {
            eng_lp_weights q;
            cr_assert_eq(eng__lp_pack(&q, (eng_prec)p, W, N, K, K), 0);
            eng__lp_gemm(pool, M, A, K, &q, C2, N, &ep, ws);
            eng__lp_release(&q);
            /* 3 panels of 48 features x K rounded up to a whole AMX tile row (32 bf16, 64 int8 k), at 2 bytes
             * or 1 (+ scale and sum) */
            size_t want = p == ENG_PREC_BF16 ? (size_t)144 * 320 * 2 : (size_t)144 * 320 + 8 * (size_t)N;
            cr_assert_eq(eng__linear_bytes(&l), want);
        }
        cr_assert(!memcmp(C1, C2, sizeof(float) * M * N), "%s differs from its kernel", eng__prec_name((eng_prec)p));
        eng__linear_release(&l);
        eng__linear_release(&l); /* released twice: empty the second time */
        eng__free_aligned(ws);
    }
    eng__pool_free(pool);
    free(A), free(W), free(bias), free(C1), free(C2);
}

Test(linear, precision_names) {
    cr_assert_eq(eng__prec_parse("fp32"), ENG_PREC_F32);
    cr_assert_eq(eng__prec_parse("Float32"), ENG_PREC_F32);
    cr_assert_eq(eng__prec_parse("BF16"), ENG_PREC_BF16);
    cr_assert_eq(eng__prec_parse("int8"), ENG_PREC_INT8);
    cr_assert_eq(eng__prec_parse("int4"), -1);
    cr_assert_eq(eng__prec_parse(NULL), -1);
    for (int p = ENG_PREC_F32; p <= ENG_PREC_INT8; p++) cr_assert_eq(eng__prec_parse(eng__prec_name((eng_prec)p)), p);
}

#if defined(__aarch64__)
Test(linear, refuses_only_below_neon_and_dotprod) {
    eng_err err = {0};
    cr_assert_eq(eng__prec_check(ENG_PREC_F32, &err), ENG_OK);
    eng__cpu_restrict(0); /* the portable level */
    cr_assert_eq(eng__prec_check(ENG_PREC_BF16, &err), ENG_UNSUPPORTED);
    cr_assert(strstr(err.msg, "NEON"), "%s", err.msg);
    cr_assert_eq(eng__prec_check(ENG_PREC_INT8, &err), ENG_UNSUPPORTED);
    cr_assert(strstr(err.msg, "dotprod"), "%s", err.msg);
    cr_assert_eq(eng__prec_check(ENG_PREC_F32, &err), ENG_OK);
    eng__cpu_restrict(ENG_CPU_ALL);
    unsigned f = eng__cpu_features();
    if (!(f & ENG_CPU_NEON)) return;
    eng__cpu_restrict(ENG_CPU_NEON); /* Cortex-A72 (Graviton 1): bf16 widened, int8 refused */
    cr_assert_eq(eng__prec_check(ENG_PREC_BF16, &err), ENG_OK);
    cr_assert_str_eq(eng__lp_kernel(ENG_PREC_BF16), "neon");
    cr_assert_eq(eng__prec_check(ENG_PREC_INT8, &err), ENG_UNSUPPORTED);
    if (f & ENG_CPU_DOTPROD) {
        eng__cpu_restrict(ENG_CPU_NEON | ENG_CPU_DOTPROD); /* Neoverse N1 (Graviton 2) runs both */
        cr_assert_eq(eng__prec_check(ENG_PREC_INT8, &err), ENG_OK);
        cr_assert_str_eq(eng__lp_kernel(ENG_PREC_INT8), "dotprod");
    }
    eng__cpu_restrict(ENG_CPU_ALL);
}
#else
Test(linear, refuses_only_below_avx2) {
    eng_err err = {0};
    cr_assert_eq(eng__prec_check(ENG_PREC_F32, &err), ENG_OK);
    eng__cpu_restrict(0); /* a CPU below x86-64-v3 */
    cr_assert_eq(eng__prec_check(ENG_PREC_BF16, &err), ENG_UNSUPPORTED);
    cr_assert(strstr(err.msg, "AVX2"), "%s", err.msg);
    cr_assert_eq(eng__prec_check(ENG_PREC_INT8, &err), ENG_UNSUPPORTED);
    cr_assert_eq(eng__prec_check(ENG_PREC_F32, &err), ENG_OK);
    eng__cpu_restrict(ENG_CPU_ALL);
    unsigned f = eng__cpu_features();
    int v3 = (f & ENG_CPU_AVX2) != 0;
    cr_assert_eq(eng__prec_check(ENG_PREC_BF16, &err), v3 ? ENG_OK : ENG_UNSUPPORTED);
    cr_assert_eq(eng__prec_check(ENG_PREC_INT8, &err), v3 ? ENG_OK : ENG_UNSUPPORTED);
    if (!v3) return;
    eng__cpu_restrict(ENG_CPU_AVX2); /* an AVX2-only CPU (AMD Zen 3) runs both */
    cr_assert_eq(eng__prec_check(ENG_PREC_BF16, &err), ENG_OK);
    cr_assert_eq(eng__prec_check(ENG_PREC_INT8, &err), ENG_OK);
    cr_assert_str_eq(eng__lp_kernel(ENG_PREC_INT8), "avx2");
    eng__cpu_restrict(ENG_CPU_ALL);
}
#endif
