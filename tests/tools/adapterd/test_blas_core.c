/* test_blas_core.c - `adapterd` replaces a generic OpenBLAS core with the one the CPU's features
 * call for (tools/adapterd/main.c), and keeps an explicit choice. OpenBLAS's detection is faked by
 * a preloaded shim (openblas_shim.c) that reports Prescott unless OPENBLAS_CORETYPE is set. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "math/cpu.h"

/* Runs `adapterd version ARGS` with the shim preloaded and env_core as OPENBLAS_CORETYPE (NULL:
 * unset); stores the reported blas_core in core and returns whether stderr announced a change. */
static int run_version(const char *env_core, const char *args, char *core, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "env %s%s LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0 %s/tools/adapterd version %s 2>&1",
             env_core ? "OPENBLAS_CORETYPE=" : "-u OPENBLAS_CORETYPE", env_core ? env_core : "", SHIM_PATH,
             ADAPTERD_BINARY_DIR, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "cannot run %s", cmd);
    char out[4096] = {0};
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = '\0';
    cr_assert_eq(pclose(p), 0, "%s:\n%s", cmd, out);
    const char *c = strstr(out, "\"blas_core\":\"");
    cr_assert(c, "no blas_core in: %s", out);
    c += strlen("\"blas_core\":\"");
    size_t len = strcspn(c, "\"");
    cr_assert(len < n);
    memcpy(core, c, len);
    core[len] = '\0';
    return strstr(out, "older than this CPU") != NULL;
}

Test(blas_core, generic_core_is_replaced_unless_chosen) {
    const char *want = eng__blas_core_pick("Prescott", eng__cpu_features());
    char core[64];
    int said = run_version(NULL, "", core, sizeof core);
    cr_log_info("OpenBLAS faked as Prescott; adapterd runs %s", core);
    if (want) {
        cr_assert_str_eq(core, want);
        cr_assert(said, "the change must be logged");
    } else {
        cr_assert_str_eq(core, "Prescott"); /* a CPU without AVX2: nothing better */
        cr_assert(!said);
    }
    said = run_version("Prescott", "", core, sizeof core); /* the user's choice is kept */
    cr_assert_str_eq(core, "Prescott");
    cr_assert(!said);
    said = run_version("Prescott", "--blas-core Haswell", core, sizeof core);
    cr_assert_str_eq(core, "Haswell");
    cr_assert(!said);
    said = run_version("Haswell", "--blas-core auto", core, sizeof core); /* auto: detection, corrected */
    cr_assert_str_eq(core, want ? want : "Prescott");
}
