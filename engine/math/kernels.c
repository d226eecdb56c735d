/* kernels.c - activation names, the reference element-wise kernels, and the fast ones' entry points
 * (kernels.h): each calls the version of this CPU's level (kern.h; the loops are in elem_impl.h). */
#include "math/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "math/kern.h"

static const struct {
    const char *name;
    eng_act act;
} act_names[] = {
    {"linear", ENG_ACT_IDENTITY},     {"identity", ENG_ACT_IDENTITY},   {"none", ENG_ACT_IDENTITY},
    {"gelu", ENG_ACT_GELU},           {"gelu_python", ENG_ACT_GELU},    {"gelu_orig", ENG_ACT_GELU},
    {"gelu_new", ENG_ACT_GELU_NEW},   {"gelu_pytorch_tanh", ENG_ACT_GELU_NEW},
    {"gelu_fast", ENG_ACT_GELU_NEW}, /* same tanh formula, differently factored */
    {"relu", ENG_ACT_RELU},           {"silu", ENG_ACT_SILU},           {"swish", ENG_ACT_SILU},
    {"tanh", ENG_ACT_TANH},           {"sigmoid", ENG_ACT_SIGMOID},     {"quick_gelu", ENG_ACT_QUICK_GELU},
    {"leaky_relu", ENG_ACT_LEAKY_RELU},
};

int eng_act_from_name(const char *name) {
    if (!name) return ENG_ACT_IDENTITY;
    for (size_t i = 0; i < sizeof act_names / sizeof act_names[0]; i++)
        if (!strcasecmp(name, act_names[i].name)) return (int)act_names[i].act;
    return -1;
}

const char *eng_act_name(eng_act act) {
    switch (act) {
#define ENG__ACT_NAME(name, str) \
    case ENG_ACT_##name:         \
        return str;
        ENG_ACT_LIST(ENG__ACT_NAME)
#undef ENG__ACT_NAME
    default:
        return "unknown";
    }
}

/* ---- the fast kernels: this CPU's version ---- */

void eng__exp(float *y, const float *x, size_t n) { eng__kern()->exp(y, x, n); }
void eng__act_apply(eng_act act, float *x, size_t n) { eng__kern()->act_apply(act, x, n); }
void eng__layernorm(float *x, size_t rows, size_t dim, const float *g, const float *b, float eps) {
    eng__kern()->layernorm(x, rows, dim, g, b, eps);
}
void eng__softmax_row(float *x, size_t n) { eng__kern()->softmax_rows(x, 1, n, n); }
void eng__softmax_rows(float *x, size_t rows, size_t n, size_t ld) { eng__kern()->softmax_rows(x, rows, n, ld); }
void eng__add(float *x, const float *y, size_t n) { eng__kern()->add(x, y, n); }

/* ---- the reference kernels ---- */

void eng__ref_act_apply(eng_act act, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        switch (act) {
        case ENG_ACT_IDENTITY: break;
        case ENG_ACT_GELU: v = 0.5 * v * (1.0 + erf(v / sqrt(2.0))); break;
        case ENG_ACT_GELU_NEW: v = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); break;
        case ENG_ACT_RELU: v = v > 0 ? v : 0; break;
        case ENG_ACT_SILU: v = v / (1.0 + exp(-v)); break;
        case ENG_ACT_TANH: v = tanh(v); break;
        case ENG_ACT_SIGMOID: v = 1.0 / (1.0 + exp(-v)); break;
        case ENG_ACT_QUICK_GELU: v = v / (1.0 + exp(-1.702 * v)); break;
        case ENG_ACT_LEAKY_RELU: v = v > 0 ? v : 0.01 * v; break;
        default: break;
        }
        x[i] = (float)v;
    }
}

void eng__ref_layernorm(float *x, size_t rows, size_t dim, const float *g, const float *b, float eps) {
    for (size_t r = 0; r < rows; r++) {
        float *v = x + r * dim;
        double mean = 0, var = 0;
        for (size_t i = 0; i < dim; i++) mean += v[i];
        mean /= (double)dim;
        for (size_t i = 0; i < dim; i++) var += (v[i] - mean) * (v[i] - mean);
        var /= (double)dim;
        double inv = 1.0 / sqrt(var + eps);
        for (size_t i = 0; i < dim; i++) v[i] = (float)((v[i] - mean) * inv * g[i] + b[i]);
    }
}

void eng__ref_softmax_row(float *x, size_t n) {
    double mx = -INFINITY, sum = 0;
    for (size_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (size_t i = 0; i < n; i++) sum += exp(x[i] - mx);
    for (size_t i = 0; i < n; i++) x[i] = (float)(exp(x[i] - mx) / sum);
}
