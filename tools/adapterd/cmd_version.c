/* cmd_version.c - `adapterd version`: version, BLAS core, thread defaults, CPU level and kernels. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/platform.h"
#include "cli.h"

#ifndef ADAPTERD_VERSION
#define ADAPTERD_VERSION "0.1.0"
#endif

int cmd_version(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help")) {
            printf("usage: adapterd version\n\nPrints adapterd's version, the OpenBLAS core in use, the core count, the CPU's\n"
                   "level and the level the engine's kernels run at (below --cpu-level / ADAPTERD_CPU_LEVEL),\n"
                   "and the kernel family each precision runs.\n");
            return 0;
        }
    printf("{\"version\":\"%s\",\"blas_core\":\"%s\",\"cpus\":%ld,\"cpu_level\":\"%s\",\"cpu_level_detected\":\"%s\","
           "\"kernels\":{\"fp32\":\"%s\",\"bf16\":\"%s\",\"int8\":\"%s\"}}\n",
           ADAPTERD_VERSION, eng_blas_core(), sysconf(_SC_NPROCESSORS_ONLN), eng_cpu_level(), eng_cpu_level_detected(),
           eng_kernel_family("fp32"), eng_kernel_family("bf16"), eng_kernel_family("int8"));
    return 0;
}
