/* cpu_generic.c - CPU detection on an architecture without kernels of its own (cpu_arch.h): one
 * level, the portable C kernels, and the float mode left as it is. */
#include "math/cpu.h"
#include "math/cpu_arch.h"

const eng__cpu_level eng__cpu_levels[] = {{"baseline", 0}};
const size_t eng__cpu_n_levels = 1;
const eng__cpu_feature eng__cpu_feature_names[] = {{0, "none"}};
const size_t eng__cpu_n_feature_names = 0;
const char eng__cpu_lowp_need[] = "vector kernels, which this build has only for x86-64 and ARM64";

unsigned eng__cpu_detect(void) { return 0; }
void eng__cpu_lacking(unsigned f, char *buf, int n) {
    (void)f;
    if (n > 0) buf[0] = '\0';
}
void eng__cpu_fp_flush(int flush) { (void)flush; }
int eng__cpu_fp_flushed(void) { return 0; }
void eng__kern_fill_arch(eng_kernels *k, unsigned f) { (void)k, (void)f; }
const char *eng__blas_core_pick(const char *core, unsigned features) { return (void)core, (void)features, NULL; }
