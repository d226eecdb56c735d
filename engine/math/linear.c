/* linear.c - a packed Linear layer in any precision (linear.h): the switch between eng__pgemm and
 * eng__lp_gemm, made once here instead of at every call site of the encoder. */
#include "math/linear.h"

#include <string.h>
#include <strings.h>

#include "core/tensor.h"
#include "math/cpu.h"
#include "math/cpu_arch.h"

int eng__prec_parse(const char *name) {
    if (!name) return -1;
    if (!strcasecmp(name, "fp32") || !strcasecmp(name, "float32")) return ENG_PREC_F32;
    if (!strcasecmp(name, "bf16") || !strcasecmp(name, "bfloat16")) return ENG_PREC_BF16;
    if (!strcasecmp(name, "int8")) return ENG_PREC_INT8;
    return -1;
}

const char *eng__prec_name(eng_prec prec) {
    return prec == ENG_PREC_BF16 ? "bf16" : prec == ENG_PREC_INT8 ? "int8" : "fp32";
}

eng_status eng__prec_check(eng_prec prec, eng_err *err) {
    if (prec == ENG_PREC_F32) return ENG_OK;
    if (prec != ENG_PREC_BF16 && prec != ENG_PREC_INT8)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown precision %d", (int)prec);
    if (strcmp(eng__lp_kernel(prec), "c")) return ENG_OK;
    char have[128];
    eng__cpu_describe(eng__cpu_features(), have, sizeof have);
    return eng_err_set(err, ENG_UNSUPPORTED,
                       "precision %s needs %s, which this CPU%s lacks (it has: %s)",
                       eng__prec_name(prec), eng__cpu_lowp_need, eng__cpu_features() != eng__cpu_detected() ? ", as capped by the CPU level," : "",
                       have);
}

eng_status eng__linear_pack(eng_linear *l, eng_prec prec, const float *W, int N, int K, int ldw, eng_err *err) {
    memset(l, 0, sizeof *l);
    if (N < 0 || K < 0 || ldw < K) return eng_err_set(err, ENG_INVALID_ARGUMENT, "bad Linear shape (%d, %d)", N, K);
    l->prec = prec, l->N = N, l->K = K;
    if (prec == ENG_PREC_F32) {
        size_t n = eng__packed_floats(N, K);
        l->P = eng__alloc_aligned(sizeof(float) * (n ? n : 16));
        if (!l->P) return eng_err_set(err, ENG_NO_MEMORY, "cannot allocate %zu packed floats", n);
        eng__pack_linear(W, N, K, ldw, l->P);
        return ENG_OK;
    }
    if (prec != ENG_PREC_BF16 && prec != ENG_PREC_INT8)
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown precision %d", (int)prec);
    if (eng__lp_pack(&l->q, prec, W, N, K, ldw)) {
        memset(l, 0, sizeof *l);
        return eng_err_set(err, ENG_NO_MEMORY, "cannot pack a (%d, %d) Linear as %s", N, K, eng__prec_name(prec));
    }
    return ENG_OK;
}

void eng__linear_release(eng_linear *l) {
    if (!l) return;
    eng__free_aligned(l->P);
    eng__lp_release(&l->q);
    memset(l, 0, sizeof *l);
}

size_t eng__linear_ws_bytes(eng_prec prec, int M, int K) {
    return prec == ENG_PREC_F32 ? 0 : eng__lp_ws_bytes(prec, M, K);
}

void eng__linear_run(eng_pool *pool, int M, const float *A, int lda, const eng_linear *l, float *C, int ldc,
                    const eng_epilogue *ep, void *ws) {
    if (l->prec == ENG_PREC_F32)
        eng__pgemm(pool, M, l->N, l->K, A, lda, l->P, C, ldc, ep);
    else
        eng__lp_gemm(pool, M, A, lda, &l->q, C, ldc, ep, ws);
}

size_t eng__linear_bytes(const eng_linear *l) {
    if (l->prec == ENG_PREC_F32) return sizeof(float) * eng__packed_floats(l->N, l->K);
    size_t panels = (size_t)(l->N + ENG__LP_NR - 1) / ENG__LP_NR * ENG__LP_NR * (size_t)l->q.kp;
    return l->prec == ENG_PREC_BF16 ? 2 * panels : panels + (sizeof(float) + sizeof(int32_t)) * (size_t)l->N;
}
