/* isa_peak_main.c - bench_isa_peak as a program: the instruction peak of each precision at the CPU level in
 * force, on every thread, so the figure every benchmark divides by can be read (and checked) on its own.
 *
 *   bench_isa_peak [--threads N] [--runs N]          (ADAPTERD_CPU_LEVEL=LEVEL caps the level, as everywhere)
 *
 * Each precision's peak is measured --runs times (each the best of 5 loops of ~20 ms, bench_util.h) and the
 * best and median are printed with the kernel family that the loop stands for: the best is the figure the
 * benchmarks keep. One line per precision, then a JSON line for scripts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine/platform.h"

int main(int argc, char **argv) {
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_isa_peak [--threads N] [--runs N]\n");
            return 2;
        }
    }
    if (threads < 1 || runs < 1 || runs > 64) return 2;
    eng_pool *pool = eng__pool_new(threads);
    if (!pool) return 1;
    double best[3] = {0}, med[3] = {0};
    printf("level %s, %d threads, %d runs\n", eng_cpu_level(), threads, runs);
    for (int p = 0; p < 3; p++) {
        double v[64];
        for (int r = 0; r < runs; r++) {
            v[r] = bench_isa_peak(pool, (eng_precision)p);
            if (v[r] > best[p]) best[p] = v[r];
        }
        med[p] = bench_median(v, runs);
        const char *name = eng_precision_name((eng_precision)p);
        printf("%-5s %-12s best %8.1f  median %8.1f G ops/s\n", name, eng_kernel_family(name), best[p], med[p]);
    }
    printf("{\"level\":\"%s\",\"threads\":%d,\"fp32\":%.1f,\"bf16\":%.1f,\"int8\":%.1f}\n", eng_cpu_level(), threads,
           best[0], best[1], best[2]);
    eng__pool_free(pool);
    return 0;
}
