/* pickle.c - the restricted unpickler of torch.save state dicts (pickle.h). */
#include "io/pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TB_MAX_STACK (1u << 20)    /* stack entries */
#define TB_MAX_OBJECTS (1u << 22)  /* objects per pickle (~12 per tensor); ~200 MB at worst */
#define TB_MAX_GLOBAL 128          /* bytes of a GLOBAL module or name */

static const char *const pk_kind_names[] = {"None", "bool",   "int",     "float",  "str", "tuple",
                                            "list", "dict", "global", "storage", "tensor"};

const char *eng__pk_kind_name(pk_kind k) { return pk_kind_names[k]; }

/* The globals a state dict may reference; everything else is refused. */
typedef enum {
    G_ORDERED_DICT, G_REBUILD_TENSOR, G_REBUILD_PARAMETER, G_REBUILD_FROM_TYPE, G_TENSOR_TYPE, G_STORAGE
} g_kind;

static const struct {
    const char *module, *name;
    g_kind kind;
    eng_dtype dtype; /* G_STORAGE only */
} allowed_globals[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT, 0},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR, 0},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAMETER, 0},
    {"torch._tensor", "_rebuild_from_type_v2", G_REBUILD_FROM_TYPE, 0},
    {"torch", "Tensor", G_TENSOR_TYPE, 0},
    {"torch._tensor", "Tensor", G_TENSOR_TYPE, 0},
    {"torch.nn.parameter", "Parameter", G_TENSOR_TYPE, 0},
    {"torch", "FloatStorage", G_STORAGE, ENG_DT_F32},
    {"torch", "DoubleStorage", G_STORAGE, ENG_DT_F64},
    {"torch", "HalfStorage", G_STORAGE, ENG_DT_F16},
    {"torch", "BFloat16Storage", G_STORAGE, ENG_DT_BF16},
    {"torch", "LongStorage", G_STORAGE, ENG_DT_I64},
    {"torch", "IntStorage", G_STORAGE, ENG_DT_I32},
    {"torch", "ShortStorage", G_STORAGE, ENG_DT_I16},
    {"torch", "CharStorage", G_STORAGE, ENG_DT_I8},
    {"torch", "ByteStorage", G_STORAGE, ENG_DT_U8},
    {"torch", "BoolStorage", G_STORAGE, ENG_DT_BOOL},
};

static int vm_fail(pk_vm *vm, eng_status code, const char *what) {
    return eng_err_set(vm->err, code, "%s: data.pkl at byte %zu: %s", vm->label, vm->op_at, what);
}

void eng__pickle_free(pk_vm *vm) {
    for (pk_obj *o = vm->objs, *nx; o; o = nx) {
        nx = o->next;
        if (o->kind == PK_TUPLE || o->kind == PK_LIST || o->kind == PK_DICT) free(o->u.seq.v);
        if (o->kind == PK_TENSOR) free(o->u.tensor);
        free(o);
    }
    free(vm->stack);
    free(vm->memo);
}

static pk_obj *vm_new(pk_vm *vm, pk_kind kind) {
    if (vm->n_objs >= TB_MAX_OBJECTS) {
        vm_fail(vm, ENG_LIMIT, "more objects than a state dict needs");
        return NULL;
    }
    pk_obj *o = calloc(1, sizeof *o);
    if (!o) {
        vm_fail(vm, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    o->kind = kind;
    o->next = vm->objs;
    vm->objs = o;
    vm->n_objs++;
    return o;
}

static int vm_push(pk_vm *vm, pk_obj *o) {
    if (!o) return vm->err ? vm->err->code : ENG_INTERNAL;
    if (vm->sp == vm->stack_cap) {
        if (vm->stack_cap >= TB_MAX_STACK) return vm_fail(vm, ENG_LIMIT, "pickle stack too deep");
        size_t cap = vm->stack_cap ? vm->stack_cap * 2 : 64;
        pk_obj **s = realloc(vm->stack, cap * sizeof *s);
        if (!s) return vm_fail(vm, ENG_NO_MEMORY, "out of memory");
        vm->stack = s;
        vm->stack_cap = cap;
    }
    vm->stack[vm->sp++] = o;
    return 0;
}

/* Index of the first stack slot above the innermost MARK. */
static size_t vm_base(const pk_vm *vm) { return vm->n_marks ? vm->marks[vm->n_marks - 1] : 0; }

/* Pops n objects into out[0..n) (bottom first); fails if that would cross a MARK. */
static int vm_popn(pk_vm *vm, size_t n, pk_obj **out) {
    if (vm->sp - vm_base(vm) < n) return vm_fail(vm, ENG_FORMAT, "pickle stack underflow");
    vm->sp -= n;
    memcpy(out, vm->stack + vm->sp, n * sizeof *out);
    return 0;
}

static pk_obj *vm_top(pk_vm *vm) {
    if (vm->sp == vm_base(vm)) {
        vm_fail(vm, ENG_FORMAT, "pickle stack underflow");
        return NULL;
    }
    return vm->stack[vm->sp - 1];
}

/* Pops everything above the innermost MARK and the MARK; *items stays valid until the next push. */
static int vm_pop_mark(pk_vm *vm, pk_obj ***items, size_t *n) {
    if (!vm->n_marks) return vm_fail(vm, ENG_FORMAT, "opcode needs a MARK and there is none");
    size_t b = vm->marks[--vm->n_marks];
    *items = vm->stack + b;
    *n = vm->sp - b;
    vm->sp = b;
    return 0;
}

static int seq_add(pk_vm *vm, pk_obj *o, pk_obj *item) {
    if (o->u.seq.n == o->u.seq.cap) {
        size_t cap = o->u.seq.cap ? o->u.seq.cap * 2 : 8;
        pk_obj **v = realloc(o->u.seq.v, cap * sizeof *v);
        if (!v) return vm_fail(vm, ENG_NO_MEMORY, "out of memory");
        o->u.seq.v = v;
        o->u.seq.cap = cap;
    }
    o->u.seq.v[o->u.seq.n++] = item;
    return 0;
}

static pk_obj *new_tuple(pk_vm *vm, pk_obj **items, size_t n) {
    pk_obj *t = vm_new(vm, PK_TUPLE);
    if (!t || !n) return t;
    t->u.seq.v = malloc(n * sizeof *items);
    if (!t->u.seq.v) {
        vm_fail(vm, ENG_NO_MEMORY, "out of memory");
        return NULL;
    }
    memcpy(t->u.seq.v, items, n * sizeof *items);
    t->u.seq.n = t->u.seq.cap = n;
    return t;
}

static int is_str(const pk_obj *o, const char *s) {
    return o->kind == PK_STR && o->u.str.len == strlen(s) && !memcmp(o->u.str.s, s, o->u.str.len);
}

static int is_global(const pk_obj *o, g_kind k) { return o->kind == PK_GLOBAL && allowed_globals[o->u.glob].kind == k; }

/* ---------------------------------------------------------------- what the allowed globals do */

static int lookup_global(pk_vm *vm, const char *mod, size_t ml, const char *name, size_t nl) {
    for (size_t i = 0; i < sizeof allowed_globals / sizeof *allowed_globals; i++)
        if (strlen(allowed_globals[i].module) == ml && !memcmp(allowed_globals[i].module, mod, ml) &&
            strlen(allowed_globals[i].name) == nl && !memcmp(allowed_globals[i].name, name, nl)) {
            pk_obj *o = vm_new(vm, PK_GLOBAL);
            if (!o) return vm->err ? vm->err->code : ENG_INTERNAL;
            o->u.glob = (int)i;
            return vm_push(vm, o);
        }
    char mb[TB_MAX_GLOBAL + 1], nb[TB_MAX_GLOBAL + 1];
    return eng_err_set(vm->err, ENG_UNSUPPORTED,
                       "%s: data.pkl at byte %zu: refusing the global '%s.%s': a state dict uses only "
                       "collections.OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter and torch "
                       "storage types",
                       vm->label, vm->op_at, eng__printable(mod, ml, mb, sizeof mb), eng__printable(name, nl, nb, sizeof nb));
}

/* BINPERSID: ('storage', <storage type>, key, location, numel) -> the entry <folder>/data/<key>. */
static int persistent_load(pk_vm *vm, pk_obj *pid) {
    pk_obj **v = pid->kind == PK_TUPLE && pid->u.seq.n == 5 ? pid->u.seq.v : NULL;
    if (!v || !is_str(v[0], "storage") || !is_global(v[1], G_STORAGE) || v[2]->kind != PK_STR ||
        v[3]->kind != PK_STR || v[4]->kind != PK_INT || v[4]->u.i < 0)
        return vm_fail(vm, ENG_FORMAT,
                       "persistent id is not ('storage', <torch storage type>, key, location, numel)");
    const char *key = v[2]->u.str.s;
    size_t kl = v[2]->u.str.len;
    const eng__zip *z = vm->zip;
    if (kl > TB_MAX_KEY) return vm_fail(vm, ENG_FORMAT, "storage key too long");
    char name[2 * TB_MAX_KEY + 8], kb[TB_MAX_KEY + 1];
    size_t nl = 0;
    memcpy(name, z->prefix, z->prefix_len);
    nl += z->prefix_len;
    memcpy(name + nl, "data/", 5);
    nl += 5;
    memcpy(name + nl, key, kl);
    nl += kl;
    const eng__zip_entry *e = eng__zip_find(z, name, nl);
    if (!e) {
        char pb[TB_MAX_KEY + 1];
        eng__printable(key, kl, kb, sizeof kb);
        return eng_err_set(vm->err, ENG_FORMAT, "%s: storage '%s' has no zip entry '%sdata/%s'", vm->label, kb,
                           eng__printable(z->prefix, z->prefix_len, pb, sizeof pb), kb);
    }
    const uint8_t *data;
    int rc = eng__zip_data(z, e, vm->label, &data, vm->err);
    if (rc) return rc;
    eng_dtype dt = allowed_globals[v[1]->u.glob].dtype;
    uint64_t numel = (uint64_t)v[4]->u.i, es = eng__dtype_size(dt);
    if (numel > e->usize / es)
        return eng_err_set(vm->err, ENG_FORMAT, "%s: storage '%s' claims %llu %s elements but its entry has %llu bytes",
                           vm->label, eng__printable(key, kl, kb, sizeof kb), (unsigned long long)numel,
                           eng__dtype_name(dt), (unsigned long long)e->usize);
    pk_obj *s = vm_new(vm, PK_STORAGE);
    if (!s) return vm->err ? vm->err->code : ENG_INTERNAL;
    s->u.storage.dtype = dt;
    s->u.storage.data = data;
    s->u.storage.numel = numel;
    return vm_push(vm, s);
}

/* Reads a tuple of ints into out; returns its length or -1. */
static int int_tuple(const pk_obj *o, int64_t *out) {
    if (o->kind != PK_TUPLE || o->u.seq.n > ENG_MAX_DIMS) return -1;
    for (size_t i = 0; i < o->u.seq.n; i++) {
        if (o->u.seq.v[i]->kind != PK_INT) return -1;
        out[i] = o->u.seq.v[i]->u.i;
    }
    return (int)o->u.seq.n;
}

static int is_empty_dict_or_none(const pk_obj *o) { return o->kind == PK_NONE || (o->kind == PK_DICT && !o->u.seq.n); }

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
static int rebuild_tensor(pk_vm *vm, const pk_obj *args) {
    pk_obj **a = args->u.seq.v;
    size_t n = args->u.seq.n;
    if (n < 6 || n > 7 || a[0]->kind != PK_STORAGE || a[1]->kind != PK_INT || a[4]->kind != PK_BOOL)
        return vm_fail(vm, ENG_FORMAT, "_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, "
                                       "requires_grad, backward_hooks[, metadata])");
    if (!is_empty_dict_or_none(a[5])) return vm_fail(vm, ENG_UNSUPPORTED, "tensor has backward hooks");
    pk_tensor *t = calloc(1, sizeof *t);
    if (!t) return vm_fail(vm, ENG_NO_MEMORY, "out of memory");
    pk_obj *o = vm_new(vm, PK_TENSOR);
    if (!o) {
        free(t);
        return vm->err ? vm->err->code : ENG_INTERNAL;
    }
    o->u.tensor = t;
    int nd = int_tuple(a[2], t->shape), ns = int_tuple(a[3], t->stride);
    if (nd < 0 || ns != nd)
        return vm_fail(vm, ENG_FORMAT, "tensor size and stride must be tuples of ints of equal length (at most 8)");
    t->ndim = nd;
    uint64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        if (t->shape[d] < 0) return vm_fail(vm, ENG_FORMAT, "tensor has a negative size");
        if (t->shape[d] && numel > (uint64_t)INT64_MAX / (uint64_t)t->shape[d])
            return vm_fail(vm, ENG_FORMAT, "tensor size overflows");
        numel *= (uint64_t)t->shape[d];
    }
    t->numel = (int64_t)numel;
    t->contiguous = 1;
    int64_t want = 1;
    if (numel)
        for (int d = nd - 1; d >= 0; d--) {
            if (t->shape[d] != 1 && t->stride[d] != want) t->contiguous = 0;
            want *= t->shape[d];
        }
    const pk_obj *st = a[0];
    int64_t off = a[1]->u.i;
    if (off < 0 || (uint64_t)off > st->u.storage.numel || numel > st->u.storage.numel - (uint64_t)off)
        return vm_fail(vm, ENG_FORMAT, "tensor (offset + elements) runs past the end of its storage");
    t->dtype = st->u.storage.dtype;
    t->data = st->u.storage.data + (uint64_t)off * eng__dtype_size(t->dtype);
    return vm_push(vm, o);
}

static int op_reduce(pk_vm *vm) {
    pk_obj *fa[2];
    int rc = vm_popn(vm, 2, fa);
    if (rc) return rc;
    pk_obj *f = fa[0], *args = fa[1];
    if (f->kind != PK_GLOBAL || args->kind != PK_TUPLE)
        return vm_fail(vm, ENG_FORMAT, "REDUCE needs a global and a tuple of arguments");
    pk_obj **a = args->u.seq.v;
    size_t n = args->u.seq.n;
    switch (allowed_globals[f->u.glob].kind) {
    case G_ORDERED_DICT:
        if (n) return vm_fail(vm, ENG_UNSUPPORTED, "OrderedDict called with arguments");
        return vm_push(vm, vm_new(vm, PK_DICT));
    case G_REBUILD_TENSOR:
        return rebuild_tensor(vm, args);
    case G_REBUILD_PARAMETER: /* (data, requires_grad, backward_hooks) */
        if (n != 3 || a[0]->kind != PK_TENSOR || a[1]->kind != PK_BOOL || !is_empty_dict_or_none(a[2]))
            return vm_fail(vm, ENG_FORMAT, "_rebuild_parameter arguments are not (tensor, requires_grad, {})");
        return vm_push(vm, a[0]);
    case G_REBUILD_FROM_TYPE: /* (func, new_type, args, state): only a plain tensor or Parameter, no state */
        if (n != 4 || !is_global(a[0], G_REBUILD_TENSOR) || !is_global(a[1], G_TENSOR_TYPE) ||
            a[2]->kind != PK_TUPLE || !is_empty_dict_or_none(a[3]))
            return vm_fail(vm, ENG_UNSUPPORTED,
                           "_rebuild_from_type_v2 is supported only for plain tensors without extra state");
        return rebuild_tensor(vm, a[2]);
    case G_TENSOR_TYPE:
    case G_STORAGE:
        break;
    }
    char b[2 * TB_MAX_GLOBAL];
    snprintf(b, sizeof b, "%s.%s cannot be called", allowed_globals[f->u.glob].module, allowed_globals[f->u.glob].name);
    return vm_fail(vm, ENG_UNSUPPORTED, b);
}

/* ---------------------------------------------------------------- the machine */

static int need(pk_vm *vm, size_t n) {
    if ((size_t)(vm->end - vm->p) < n) return vm_fail(vm, ENG_FORMAT, "data.pkl ends inside an opcode");
    return 0;
}

static int memo_put(pk_vm *vm, uint64_t idx) {
    pk_obj *top = vm_top(vm);
    if (!top) return vm->err->code;
    if (idx >= vm->memo_limit) return vm_fail(vm, ENG_LIMIT, "memo index out of range");
    if (idx >= vm->memo_cap) {
        size_t cap = vm->memo_cap ? vm->memo_cap : 64;
        while (cap <= idx) cap *= 2;
        if (cap > vm->memo_limit) cap = vm->memo_limit;
        pk_obj **m = realloc(vm->memo, cap * sizeof *m);
        if (!m) return vm_fail(vm, ENG_NO_MEMORY, "out of memory");
        memset(m + vm->memo_cap, 0, (cap - vm->memo_cap) * sizeof *m);
        vm->memo = m;
        vm->memo_cap = cap;
    }
    if (!vm->memo[idx]) vm->memo_count++;
    vm->memo[idx] = top;
    return 0;
}

static int memo_get(pk_vm *vm, uint64_t idx) {
    if (idx >= vm->memo_cap || !vm->memo[idx]) return vm_fail(vm, ENG_FORMAT, "memo lookup of an unset index");
    return vm_push(vm, vm->memo[idx]);
}

static int push_str(pk_vm *vm, uint64_t len) {
    if ((uint64_t)(vm->end - vm->p) < len) return vm_fail(vm, ENG_FORMAT, "string runs past the end of data.pkl");
    pk_obj *o = vm_new(vm, PK_STR);
    if (!o) return vm->err->code;
    o->u.str.s = (const char *)vm->p;
    o->u.str.len = (size_t)len;
    vm->p += len;
    return vm_push(vm, o);
}

static int push_int(pk_vm *vm, int64_t v, pk_kind kind) {
    pk_obj *o = vm_new(vm, kind);
    if (!o) return vm->err->code;
    o->u.i = v;
    return vm_push(vm, o);
}

/* Reads a '\n'-terminated GLOBAL operand. */
static int read_line(pk_vm *vm, const char **s, size_t *n) {
    const uint8_t *nl = memchr(vm->p, '\n', (size_t)(vm->end - vm->p));
    if (!nl || nl - vm->p > TB_MAX_GLOBAL) return vm_fail(vm, ENG_FORMAT, "GLOBAL operand is not a short line");
    *s = (const char *)vm->p;
    *n = (size_t)(nl - vm->p);
    vm->p = nl + 1;
    return 0;
}

int eng__pickle_run(pk_vm *vm, pk_obj **result) {
    pk_obj *o, *t[3], **items = NULL;
    size_t n = 0;
    int rc = 0;
    while (!rc) {
        if (vm->p >= vm->end) return vm_fail(vm, ENG_FORMAT, "data.pkl ends without STOP");
        vm->op_at = (size_t)(vm->p - vm->start);
        uint8_t op = *vm->p++;
        switch (op) {
        case 0x80: /* PROTO */
            if (!(rc = need(vm, 1)) && *vm->p++ > 5) rc = vm_fail(vm, ENG_UNSUPPORTED, "pickle protocol above 5");
            break;
        case 0x95: /* FRAME: a length hint only */
            if (!(rc = need(vm, 8))) vm->p += 8;
            break;
        case '.': /* STOP */
            if (!(o = vm_top(vm))) return vm->err->code;
            *result = o;
            return 0;
        case '(': /* MARK */
            if (vm->n_marks == TB_MAX_MARKS) return vm_fail(vm, ENG_LIMIT, "MARKs nested too deeply");
            vm->marks[vm->n_marks++] = vm->sp;
            break;
        case '}': rc = vm_push(vm, vm_new(vm, PK_DICT)); break;  /* EMPTY_DICT */
        case ']': rc = vm_push(vm, vm_new(vm, PK_LIST)); break;  /* EMPTY_LIST */
        case ')': rc = vm_push(vm, vm_new(vm, PK_TUPLE)); break; /* EMPTY_TUPLE */
        case 'N': rc = vm_push(vm, vm_new(vm, PK_NONE)); break;  /* NONE */
        case 0x88: rc = push_int(vm, 1, PK_BOOL); break;         /* NEWTRUE */
        case 0x89: rc = push_int(vm, 0, PK_BOOL); break;         /* NEWFALSE */
        case 't': /* TUPLE */
            if (!(rc = vm_pop_mark(vm, &items, &n))) rc = vm_push(vm, new_tuple(vm, items, n));
            break;
        case 0x85: case 0x86: case 0x87: /* TUPLE1..3 */
            n = (size_t)(op - 0x84);
            if (!(rc = vm_popn(vm, n, t))) rc = vm_push(vm, new_tuple(vm, t, n));
            break;
        case 'X': /* BINUNICODE */
            if (!(rc = need(vm, 4))) vm->p += 4, rc = push_str(vm, eng__rd32(vm->p - 4));
            break;
        case 0x8c: /* SHORT_BINUNICODE */
            if (!(rc = need(vm, 1))) vm->p += 1, rc = push_str(vm, vm->p[-1]);
            break;
        case 0x8d: /* BINUNICODE8 */
            if (!(rc = need(vm, 8))) vm->p += 8, rc = push_str(vm, eng__rd64(vm->p - 8));
            break;
        case 'q': /* BINPUT */
            if (!(rc = need(vm, 1))) vm->p += 1, rc = memo_put(vm, vm->p[-1]);
            break;
        case 'r': /* LONG_BINPUT */
            if (!(rc = need(vm, 4))) vm->p += 4, rc = memo_put(vm, eng__rd32(vm->p - 4));
            break;
        case 0x94: rc = memo_put(vm, vm->memo_count); break; /* MEMOIZE */
        case 'h': /* BINGET */
            if (!(rc = need(vm, 1))) vm->p += 1, rc = memo_get(vm, vm->p[-1]);
            break;
        case 'j': /* LONG_BINGET */
            if (!(rc = need(vm, 4))) vm->p += 4, rc = memo_get(vm, eng__rd32(vm->p - 4));
            break;
        case 'J': /* BININT */
            if (!(rc = need(vm, 4))) vm->p += 4, rc = push_int(vm, (int32_t)eng__rd32(vm->p - 4), PK_INT);
            break;
        case 'K': /* BININT1 */
            if (!(rc = need(vm, 1))) vm->p += 1, rc = push_int(vm, vm->p[-1], PK_INT);
            break;
        case 'M': /* BININT2 */
            if (!(rc = need(vm, 2))) vm->p += 2, rc = push_int(vm, eng__rd16(vm->p - 2), PK_INT);
            break;
        case 0x8a: { /* LONG1: n-byte little-endian two's complement */
            if ((rc = need(vm, 1))) break;
            size_t len = *vm->p++;
            if (len > 8) return vm_fail(vm, ENG_UNSUPPORTED, "integer wider than 64 bits");
            if ((rc = need(vm, len))) break;
            uint64_t u = 0;
            for (size_t i = 0; i < len; i++) u |= (uint64_t)vm->p[i] << (8 * i);
            if (len && len < 8 && (vm->p[len - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * len);
            vm->p += len;
            rc = push_int(vm, (int64_t)u, PK_INT);
            break;
        }
        case 'G': { /* BINFLOAT: big-endian double */
            if ((rc = need(vm, 8))) break;
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = u << 8 | vm->p[i];
            vm->p += 8;
            if (!(o = vm_new(vm, PK_FLOAT))) return vm->err->code;
            memcpy(&o->u.f, &u, sizeof u);
            rc = vm_push(vm, o);
            break;
        }
        case 'c': { /* GLOBAL module\nname\n */
            const char *m = NULL, *nm = NULL;
            size_t ml = 0, nl = 0;
            if (!(rc = read_line(vm, &m, &ml)) && !(rc = read_line(vm, &nm, &nl)))
                rc = lookup_global(vm, m, ml, nm, nl);
            break;
        }
        case 0x93: /* STACK_GLOBAL */
            if ((rc = vm_popn(vm, 2, t))) break;
            if (t[0]->kind != PK_STR || t[1]->kind != PK_STR || t[0]->u.str.len > TB_MAX_GLOBAL ||
                t[1]->u.str.len > TB_MAX_GLOBAL)
                return vm_fail(vm, ENG_FORMAT, "STACK_GLOBAL needs two short strings");
            rc = lookup_global(vm, t[0]->u.str.s, t[0]->u.str.len, t[1]->u.str.s, t[1]->u.str.len);
            break;
        case 'R': rc = op_reduce(vm); break; /* REDUCE */
        case 'Q': /* BINPERSID */
            if (!(rc = vm_popn(vm, 1, t))) rc = persistent_load(vm, t[0]);
            break;
        case 's': /* SETITEM */
            if ((rc = vm_popn(vm, 2, t))) break;
            if (!(o = vm_top(vm))) return vm->err->code;
            if (o->kind != PK_DICT) return vm_fail(vm, ENG_FORMAT, "SETITEM on something that is not a dict");
            if (!(rc = seq_add(vm, o, t[0]))) rc = seq_add(vm, o, t[1]);
            break;
        case 'u': /* SETITEMS */
            if ((rc = vm_pop_mark(vm, &items, &n))) break;
            if (!(o = vm_top(vm))) return vm->err->code;
            if (o->kind != PK_DICT || n % 2)
                return vm_fail(vm, ENG_FORMAT, "SETITEMS needs a dict and key/value pairs");
            for (size_t i = 0; i < n && !rc; i++) rc = seq_add(vm, o, items[i]);
            break;
        case 'a': /* APPEND */
            if ((rc = vm_popn(vm, 1, t))) break;
            if (!(o = vm_top(vm))) return vm->err->code;
            if (o->kind != PK_LIST) return vm_fail(vm, ENG_FORMAT, "APPEND on something that is not a list");
            rc = seq_add(vm, o, t[0]);
            break;
        case 'e': /* APPENDS */
            if ((rc = vm_pop_mark(vm, &items, &n))) break;
            if (!(o = vm_top(vm))) return vm->err->code;
            if (o->kind != PK_LIST) return vm_fail(vm, ENG_FORMAT, "APPENDS on something that is not a list");
            for (size_t i = 0; i < n && !rc; i++) rc = seq_add(vm, o, items[i]);
            break;
        case 'b': /* BUILD: only an OrderedDict's attributes (state_dict()._metadata), which are ignored */
            if ((rc = vm_popn(vm, 1, t))) break;
            if (!(o = vm_top(vm))) return vm->err->code;
            if (o->kind != PK_DICT) return vm_fail(vm, ENG_UNSUPPORTED, "BUILD on something that is not a dict");
            break;
        default: {
            char b[96];
            snprintf(b, sizeof b, "opcode 0x%02x ('%c') is not used by state dicts", op,
                     op >= 0x20 && op < 0x7f ? op : '?');
            return vm_fail(vm, ENG_UNSUPPORTED, b);
        }
        }
    }
    return rc;
}
