/* pickle.h - a restricted unpickler for torch.save's data.pkl (io/torch_bin.c reads the archive).
 *
 * An iterative stack machine that implements only the opcodes a state dict uses. Objects live in
 * one chain freed at the end, so cycles (a list appended to itself) cost nothing and nothing ever
 * recurses. Calls (REDUCE) are allowed only on whitelisted globals, and each is interpreted here
 * rather than executed: OrderedDict() makes a dict, _rebuild_tensor_v2 makes a tensor view, and a
 * persistent id ('storage', type, key, location, numel) becomes a storage pointing into the zip
 * entry <folder>/data/<key>. Stack, MARK nesting, memo indices and the object count are bounded. */
#ifndef ADAPTERD_ENGINE_IO_PICKLE_H
#define ADAPTERD_ENGINE_IO_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "io/zip.h"

#define TB_MAX_MARKS 64            /* MARK nesting; a state dict needs 3 */
#define TB_MAX_KEY 256             /* bytes of a storage key (and of the archive's folder name) */
#define TB_MAX_MEMO (1u << 24)     /* memo index bound (also bounded by the pickle's length) */

typedef enum {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_TUPLE, PK_LIST, PK_DICT, PK_GLOBAL, PK_STORAGE, PK_TENSOR
} pk_kind;

/* Printable name of a kind, for messages. */
const char *eng__pk_kind_name(pk_kind k);

typedef struct {
    eng_dtype dtype;
    const uint8_t *data; /* first element, inside the storage */
    int ndim;
    int contiguous; /* 0: reported with the tensor's name when the dict is read */
    int64_t shape[ENG_MAX_DIMS], stride[ENG_MAX_DIMS];
    int64_t numel;
} pk_tensor;

typedef struct pk_obj pk_obj;
struct pk_obj {
    pk_obj *next; /* chain of every object of one run */
    pk_kind kind;
    union {
        int64_t i;                                  /* PK_BOOL, PK_INT */
        double f;                                   /* PK_FLOAT */
        struct { const char *s; size_t len; } str;  /* PK_STR: inside data.pkl */
        struct { pk_obj **v; size_t n, cap; } seq;  /* PK_TUPLE, PK_LIST; PK_DICT as v[2k] -> v[2k + 1] */
        int glob;                                   /* PK_GLOBAL: index in allowed_globals */
        struct { eng_dtype dtype; const uint8_t *data; uint64_t numel; } storage;
        pk_tensor *tensor;                          /* PK_TENSOR: owned */
    } u;
};

typedef struct {
    const char *label;
    const uint8_t *start, *p, *end; /* data.pkl and the cursor */
    const eng__zip *zip;
    eng_err *err;
    pk_obj *objs;
    size_t n_objs;
    pk_obj **stack;
    size_t sp, stack_cap;
    size_t marks[TB_MAX_MARKS];
    size_t n_marks;
    pk_obj **memo;
    size_t memo_cap, memo_count, memo_limit;
    size_t op_at; /* offset of the current opcode, for messages */
} pk_vm;

/* Runs vm->start..vm->end to STOP; *result is the unpickled object (owned by vm). vm->zip (its
 * prefix set) supplies the storages. Returns 0 or a negative eng_status with vm->err set. */
int eng__pickle_run(pk_vm *vm, pk_obj **result);

/* Frees every object of the run, the stack and the memo. */
void eng__pickle_free(pk_vm *vm);

#endif
