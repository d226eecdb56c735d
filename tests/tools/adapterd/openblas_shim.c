/* openblas_shim.c - preloaded into adapterd by test_blas_core.c: an OpenBLAS that reports the
 * generic Prescott core unless OPENBLAS_CORETYPE names another, as OpenBLAS does on a CPU model
 * newer than its release. Only the name is faked; the products still run OpenBLAS's real kernels. */
#include <stdlib.h>

const char *openblas_get_corename(void);

const char *openblas_get_corename(void) {
    const char *c = getenv("OPENBLAS_CORETYPE");
    return c && *c ? c : "Prescott";
}
