/* act.h - the activation functions a model or adapter config may name.
 *
 * Public because a model's config (engine/model.h) and a task's head (engine/task.h) carry one; the
 * kernels that apply them are internal (math/kernels.h). */
#ifndef ADAPTERD_ENGINE_ACT_H
#define ADAPTERD_ENGINE_ACT_H

/* Activation functions, named as Hugging Face's ACT2FN names them. */
#define ENG_ACT_LIST(X)               \
    X(IDENTITY, "linear")             \
    X(GELU, "gelu")           /* erf */ \
    X(GELU_NEW, "gelu_new")   /* tanh approximation */ \
    X(RELU, "relu")                   \
    X(SILU, "silu")           /* also "swish" */ \
    X(TANH, "tanh")                   \
    X(SIGMOID, "sigmoid")             \
    X(QUICK_GELU, "quick_gelu")       \
    X(LEAKY_RELU, "leaky_relu")

typedef enum {
#define ENG__ACT_ENUM(name, str) ENG_ACT_##name,
    ENG_ACT_LIST(ENG__ACT_ENUM)
#undef ENG__ACT_ENUM
        ENG_ACT_COUNT
} eng_act;

/* Maps a Hugging Face activation name ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "swish",
 * "silu", "tanh", ...) to eng_act; returns -1 for an unknown name. Case-insensitive. */
int eng_act_from_name(const char *name);

/* Returns the canonical name of act. */
const char *eng_act_name(eng_act act);

#endif
