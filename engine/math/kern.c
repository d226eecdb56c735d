/* kern.c - the kernel table (kern.h): the portable defaults, then the architecture's fallback chain
 * (cpu_arch.h: x86/kern_x86.c, arm/kern_arm.c), each written once. */
#include "math/kern.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "engine/platform.h"
#include "math/cpu.h"
#include "math/cpu_arch.h"

static void fill(eng_kernels *k, unsigned f) {
    *k = (eng_kernels){.f32 = "c", .bf16 = "c", .int8 = "c", .elem = "c",
                       .f32_tile = eng__f32_tile_c,
                       .bf16_rows = eng__bf16_c_rows, .bf16_tile = eng__bf16_c_tile, .bf16_act_bytes = 2,
                       .int8_rows = eng__int8_c_rows, .int8_tile = eng__int8_c_tile, .int8_act_bytes = 1,
                       .bf16_mr = ENG__LP_MR, .int8_mr = ENG__LP_MR,
                       .act_apply = eng__act_apply_c, .layernorm = eng__layernorm_c, .softmax_rows = eng__softmax_rows_c,
                       .exp = eng__exp_c, .add = eng__add_c, .sparse_block = eng__sparse_block_c};
    k->level = eng__cpu_level_of(f);
    eng__kern_fill_arch(k, f);
}

/* One table per feature set, filled on first use: a cap changed by a test (eng__cpu_restrict) selects
 * another table instead of rewriting one that a running product may be reading. */
#define SETS 64 /* the six feature bits of cpu.h */
static eng_kernels tables[SETS];
static atomic_int ready[SETS];
static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;

const eng_kernels *eng__kern(void) {
    unsigned f = eng__cpu_features() & (SETS - 1);
    if (!atomic_load_explicit(&ready[f], memory_order_acquire)) {
        pthread_mutex_lock(&fill_lock);
        if (!atomic_load_explicit(&ready[f], memory_order_relaxed)) {
            fill(&tables[f], f);
            atomic_store_explicit(&ready[f], 1, memory_order_release);
        }
        pthread_mutex_unlock(&fill_lock);
    }
    return &tables[f];
}

/* ---- engine/platform.h ---- */

const char *eng_cpu_level(void) { return eng__kern()->level; }

const char *eng_cpu_level_detected(void) { return eng__cpu_level_of(eng__cpu_detected()); }

const char *eng_kernel_family(const char *precision) {
    const eng_kernels *k = eng__kern();
    if (!precision) return NULL;
    if (!strcmp(precision, "fp32")) return k->f32;
    if (!strcmp(precision, "bf16")) return k->bf16;
    if (!strcmp(precision, "int8")) return k->int8;
    return NULL;
}

int eng_cpu_level_apply(const char *name, char *msg, int n) {
    if (eng__cpu_level_check(name ? name : "", msg, n)) return -1;
    return eng__cpu_set_level(name);
}
