/* parity_encoder.c - the engine against the PyTorch reference at real model shapes.
 *
 *   parity_encoder [--tol 1e-4] MODEL_DIR...
 *
 * Each MODEL_DIR comes from tools/reference/gen_encoder.py (expected/ cases inside). Prints one
 * line per model with the largest differences and exits 1 if any exceeds the tolerance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encoder_check.h"

int main(int argc, char **argv) {
    float tol = 1e-4f;
    int failed = 0, models = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
            tol = strtof(argv[++i], NULL);
            continue;
        }
        for (int threads = 1; threads <= 2; threads++) {
            encoder_check_result r;
            char msg[1024];
            int rc = encoder_check(argv[i], threads, tol, tol, &r, msg, sizeof msg);
            printf("%-6s %s (%d threads): %d cases, %d sequences, max |diff| hidden %.3g pooled %.3g packed-vs-alone %.3g "
                   "(tol %g)\n",
                   rc ? "FAIL" : "ok", argv[i], threads, r.cases, r.sequences, r.max_hidden, r.max_pooled, r.max_alone,
                   tol);
            if (rc) {
                printf("       %s\n", msg);
                failed++;
            }
        }
        models++;
    }
    printf("%d passed, %d failed\n", 2 * models - failed, failed);
    return failed ? 1 : models ? 0 : 2;
}
