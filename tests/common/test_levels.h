/* test_levels.h - run a check once per CPU level this machine has (engine/math/cpu.h, kern.h), so
 * that every kernel variant it can run is tested, whatever the default choice would be. A level the
 * CPU lacks (or that ADAPTERD_CPU_LEVEL caps away) is skipped with a log line, never silently. */
#ifndef ADAPTERD_TEST_LEVELS_H
#define ADAPTERD_TEST_LEVELS_H

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "math/cpu.h"
#include "math/kern.h"

static inline int for_each_level(void (*check)(void *ctx), void *ctx) {
    eng__cpu_restrict(ENG_CPU_ALL);
    unsigned have = eng__cpu_features();
    int ran = 0;
    const char *name;
    for (size_t i = 0; (name = eng__cpu_level_name(i)); i++) { /* this architecture's levels */
        unsigned m = (unsigned)eng__cpu_level_mask(name);
        if ((have & m) != m) {
            cr_log_info("level %s: not on this CPU (or above ADAPTERD_CPU_LEVEL), skipped", name);
            continue;
        }
        eng__cpu_restrict(m);
        const eng_kernels *k = eng__kern();
        cr_log_info("level %s: fp32 %s, bf16 %s, int8 %s, element-wise %s", name, k->f32, k->bf16, k->int8, k->elem);
        check(ctx);
        ran++;
    }
    eng__cpu_restrict(ENG_CPU_ALL);
    return ran;
}

#endif
