/* parity_encoder.c - the engine against the PyTorch reference at real model shapes.
 *
 *   parity_encoder [--tol 1e-4] [--precision fp32|bf16|int8] MODEL_DIR...
 *
 * Each MODEL_DIR comes from tools/reference/gen_encoder.py (expected/ cases inside). Prints one
 * line per model with the largest and mean differences and exits 1 if any exceeds the tolerance.
 * --precision loads the models with their backbone Linear layers in bf16 or int8 (emulated when
 * the CPU lacks the kernel), to measure the drift from the float64 reference at real shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encoder_check.h"

int main(int argc, char **argv) {
    float tol = 1e-4f;
    int failed = 0, models = 0;
    eng_model_params p = eng_model_default_params();
    p.allow_emulated = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
            tol = strtof(argv[++i], NULL);
            continue;
        }
        if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            int v = eng_precision_parse(argv[++i]);
            if (v < 0) return 2;
            p.precision = (eng_precision)v;
            continue;
        }
        for (int threads = 1; threads <= 2; threads++) {
            encoder_check_result r;
            char msg[1024];
            int rc = encoder_check_params(argv[i], &p, threads, tol, tol, &r, msg, sizeof msg);
            printf("%-6s %s (%s, %d threads): %d cases, %d sequences, max |diff| hidden %.3g (mean %.3g) pooled %.3g "
                   "packed-vs-alone %.3g (tol %g)\n",
                   rc ? "FAIL" : "ok", argv[i], eng_precision_name(p.precision), threads, r.cases, r.sequences,
                   r.max_hidden, r.mean_hidden, r.max_pooled, r.max_alone, tol);
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
