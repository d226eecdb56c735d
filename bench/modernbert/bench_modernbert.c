/* bench_modernbert.c - adapterd's ModernBERT forward pass at long inputs (512 and 8,192 tokens).
 *
 *   bench_modernbert --model DIR [--lens 512,8192] [--batch 1] [--reps 3] [--threads N] [--precision fp32|bf16|int8]
 *
 * --batch sequences of each length (random ordinary ids), one warm-up pass, then --reps passes; prints one
 * JSON line per length with the median and minimum milliseconds and tokens per second. run.sh runs it
 * next to the PyTorch reference (tools/reference/bench_modernbert.py) in the same run. It loads any architecture
 * eng_model_load_params takes, so bench/archs/run.sh uses it for BERT, ELECTRA and DeBERTa-v3 (1x128, 8x128). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "engine/model.h"

int main(int argc, char **argv) {
    const char *dir = NULL, *prec = "fp32", *lens_s = "512,8192";
    int reps = 3, threads = 2, batch = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--lens") && i + 1 < argc) lens_s = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) prec = argv[++i];
        else {
            fprintf(stderr, "usage: bench_modernbert --model DIR [--lens 512,8192] [--batch 1] [--reps 3] "
                            "[--threads N] [--precision fp32|bf16|int8]\n");
            return 2;
        }
    }
    int lens[16], n_lens = bench_parse_list(lens_s, lens, 16);
    if (!dir || n_lens <= 0 || reps < 1 || threads < 1 || batch < 1 || batch > 4096) {
        fprintf(stderr, "bench_modernbert: --model DIR is required; --lens, --reps, --threads must be positive, "
                        "--batch in [1, 4096]\n");
        return 2;
    }
    eng_model_params mp = eng_model_default_params();
    int p = eng_precision_parse(prec);
    if (p < 0) return fprintf(stderr, "bench_modernbert: unknown precision %s\n", prec), 2;
    mp.precision = (eng_precision)p;
    eng_model *m;
    eng_err e = {0};
    if (eng_model_load_params(dir, &mp, &m, &e)) return fprintf(stderr, "bench_modernbert: %s\n", e.msg), 1;
    const eng_config *c = eng_model_config(m);
    eng_state *st = eng_state_new(threads);
    if (!st) return fprintf(stderr, "bench_modernbert: out of memory\n"), 1;
    int rc = 0;
    for (int k = 0; k < n_lens && !rc; k++) {
        int n = lens[k], tot = n * batch;
        int32_t *ids = malloc(sizeof *ids * (size_t)tot), *len = malloc(sizeof *len * (size_t)batch);
        float *h = malloc(sizeof *h * (size_t)tot * c->hidden);
        double *ms = malloc(sizeof *ms * (size_t)reps);
        if (!ids || !len || !h || !ms) return fprintf(stderr, "bench_modernbert: out of memory\n"), 1;
        bench_random_ids(ids, tot, 7u + (unsigned)k, 0, c->vocab < 50000 ? c->vocab : 50000);
        for (int s = 0; s < batch; s++) len[s] = n;
        eng_batch b = {.n_seq = batch, .ids = ids, .seq_len = len};
        for (int r = -1; r < reps && !rc; r++) {
            double t0 = bench_now_ms();
            if ((rc = eng_encode(m, st, &b, h, NULL, &e))) fprintf(stderr, "bench_modernbert: %s\n", e.msg);
            if (r >= 0) ms[r] = bench_now_ms() - t0;
        }
        if (!rc) {
            double mn = ms[0];
            for (int r = 1; r < reps; r++) mn = ms[r] < mn ? ms[r] : mn;
            double med = bench_median(ms, reps);
            printf("{\"peer\":\"adapterd\",\"precision\":\"%s\",\"threads\":%d,\"batch\":%d,\"tokens\":%d,"
                   "\"median_ms\":%.1f,\"min_ms\":%.1f,\"tokens_per_s\":%.1f}\n",
                   prec, threads, batch, n, med, mn, tot / (med / 1000.0));
            fflush(stdout);
        }
        free(ids), free(len), free(h), free(ms);
    }
    eng_state_free(st);
    eng_model_free(m);
    return rc ? 1 : 0;
}
