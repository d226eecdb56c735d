/* parity_adapters.c - adapter tasks at real model shapes against the PyTorch reference.
 *
 *   parity_adapters [--tol 1e-4] [--threads 2] CASES_DIR...
 *
 * Every sub-folder of a CASES_DIR that holds a setup.json is one case, written by
 * tools/reference/gen_adapters.py (synthesized forms, or real AdapterHub / PEFT folders read in
 * place with --load). Prints one line per case with the largest |logit diff| over its expected
 * files (skips) and the largest reference logit, then "N passed, M failed". */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "task_check.h"

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    float tol = 1e-4f;
    int threads = 2, passed = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
            tol = strtof(argv[++i], NULL);
            continue;
        }
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            printf("FAIL   %s: cannot open\n", argv[i]);
            failed++;
            continue;
        }
        char **names = NULL;
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            char p[4096];
            struct stat sb;
            snprintf(p, sizeof p, "%s/%s/setup.json", argv[i], de->d_name);
            if (de->d_name[0] == '.' || stat(p, &sb)) continue;
            names = realloc(names, (n + 1) * sizeof *names);
            names[n++] = strdup(de->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp);
        const char *set = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
        for (size_t k = 0; k < n; k++) {
            char c[4096], msg[2048] = "";
            snprintf(c, sizeof c, "%s/%s", argv[i], names[k]);
            task_check_result r;
            double t0 = now();
            int rc = task_check(argv[i], c, threads, tol, &r, msg, sizeof msg);
            if (!rc && !(r.max_logit > 0)) {
                snprintf(msg, sizeof msg, "reference logits are all zero");
                rc = -1;
            }
            printf("%-6s %s/%s: %d files, max |diff| %.3g, max |ref logit| %.3g (tol %g, %.1f s)\n", rc ? "FAIL" : "ok",
                   set, names[k], r.files, r.max_diff, r.max_logit, tol, now() - t0);
            if (rc) {
                printf("       %s\n", msg);
                failed++;
            } else {
                passed++;
            }
            fflush(stdout);
            free(names[k]);
        }
        free(names);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : passed ? 0 : 2;
}
