/* cmd_version.c - `adapterd version`: version, BLAS core and thread defaults. */
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
            printf("usage: adapterd version\n\nPrints adapterd's version, the OpenBLAS core in use and the core count.\n");
            return 0;
        }
    printf("{\"version\":\"%s\",\"blas_core\":\"%s\",\"cpus\":%ld}\n", ADAPTERD_VERSION, eng_blas_core(),
           sysconf(_SC_NPROCESSORS_ONLN));
    return 0;
}
