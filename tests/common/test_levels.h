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
    static const char *names[] = {"baseline", "avx2", "avx_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"};
    eng_cpu_restrict(ENG_CPU_ALL);
    unsigned have = eng_cpu_features();
    int ran = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        unsigned m = (unsigned)eng_cpu_level_mask(names[i]);
        if ((have & m) != m) {
            cr_log_info("level %s: not on this CPU (or above ADAPTERD_CPU_LEVEL), skipped", names[i]);
            continue;
        }
        eng_cpu_restrict(m);
        const eng_kernels *k = eng_kern();
        cr_log_info("level %s: fp32 %s, bf16 %s, int8 %s, element-wise %s", names[i], k->f32, k->bf16, k->int8, k->elem);
        check(ctx);
        ran++;
    }
    eng_cpu_restrict(ENG_CPU_ALL);
    return ran;
}

#endif
