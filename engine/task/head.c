/* head.c - prediction heads: an MLP on the CLS row, the pooler output, or every token.
 *
 * AdapterHub flex heads and PEFT modules_to_save classifiers both reduce to a short list of
 * Linear + activation layers (task/load_head.c builds it); dropout is a no-op at inference. */
#include <string.h>

#include "task/head.h"

#include "math/state.h"
#include "math/blas.h"

int eng__head_forward(const eng_model *m, eng_state *st, const eng_head *h, const float *x, int len, float *out,
                     eng_err *err) {
    int H = eng_model_config(m)->hidden, rows = h->input == ENG_HEAD_IN_TOKENS ? len : 1;
    int widest = H;
    for (int i = 0; i < h->n_layers; i++) widest = h->layers[i].out > widest ? h->layers[i].out : widest;
    float *a = eng__state_scratch(st, ENG_SCRATCH_A, (size_t)rows * widest),
          *b = eng__state_scratch(st, ENG_SCRATCH_U, (size_t)rows * widest);
    if (!a || !b) return eng_err_set(err, ENG_NO_MEMORY, "out of memory (head)");
    memcpy(a, x, (size_t)rows * H * sizeof *a);
    eng_pool *pool = eng__state_pool(st);
    for (int i = 0; i < h->n_layers; i++) {
        int last = i == h->n_layers - 1;
        float *dst = last ? out : b;
        eng_epilogue ep = {.bias = h->layers[i].b, .act = h->layers[i].act};
        eng__gemm(pool, rows, h->layers[i].out, h->layers[i].in, a, h->layers[i].in, h->layers[i].w, h->layers[i].in, dst,
                 h->layers[i].out, &ep);
        float *t = a;
        a = b;
        b = t;
    }
    return 0;
}

void eng_head_probs(const eng_head *h, const float *logits, int n_rows, float *probs) {
    size_t n = (size_t)n_rows * h->num_labels;
    memcpy(probs, logits, n * sizeof *probs);
    switch (h->type) {
    case ENG_HEAD_CLASSIFICATION:
    case ENG_HEAD_TAGGING:
        for (int r = 0; r < n_rows; r++) eng__softmax_row(probs + (size_t)r * h->num_labels, (size_t)h->num_labels);
        break;
    case ENG_HEAD_MULTILABEL:
        eng__act_apply(ENG_ACT_SIGMOID, probs, n);
        break;
    default:
        break;
    }
}

int eng_argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}
