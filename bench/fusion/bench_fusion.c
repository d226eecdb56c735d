/* bench_fusion.c - AdapterFusion pruning: speed-up at k = 8, 4, 2 of 8 adapters and the max change in
 * logits, with the calibration of the AdapterDrop paper (section 5).
 *
 *   bench_fusion --model DIR --fusion-case DIR --tokenizer DIR --data sst2_dev.tsv [--calib 200] [--heldout 200]
 *                [--ks 8,4,2] [--skip 0] [--threads N] [--reps R] [--batch-reps R] [--batch 8] [--json]
 *
 * --fusion-case is gen_adapters.py's fusion_dynamic_n8 layout (adapters/t0..t7, fusion/, head/), as
 * bench/multitask/gen_tasks.py writes it into the bench cache. The first --calib sentences of the TSV
 * (SST-2 dev, column "sentence") are tokenized with the real bert-base-uncased tokenizer and run through
 * eng_fusion_calibrate (mean attention of each child per fusion layer); eng_fusion_choose keeps the k most
 * attended (summed over layers, one set for the whole model) and eng_task_prune_fusion applies it. The next
 * --heldout sentences are the held-out set: max |logit change| vs the unpruned fusion and the share of unchanged
 * argmax. Speed: 1 random 128-token input (latency, --reps) and --batch of them (throughput, --batch-reps), plus
 * the held-out set itself (its sentences in batches of --batch), medians, with the per-layer profile of the
 * latency plan (eng_plan_stats). Nothing is written beside the fusion (the cache stays unpruned). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "engine/task.h"
#include "math/blas.h"
#include "engine/model.h"
#include "engine/fusion.h"
#include "engine/run.h"
#include "engine/tokenizer.h"

/* Runs n inputs (their tasks set to t at skip) in chunks of `chunk`; logits (n, labels) into out if not NULL. */
static int run_set(const eng_model *m, eng_state *st, const eng_task *t, int skip, eng_input *in, int n, int chunk,
                   float *out, eng_plan_stats *stats) {
    eng_task_req req = {t, skip};
    eng_task_out outs[64];
    eng_err e;
    for (int i = 0; i < n; i++) in[i].tasks = &req, in[i].n_tasks = 1;
    for (int i = 0; i < n; i += chunk) {
        int c = n - i < chunk ? n - i : chunk;
        if (eng_run(m, st, in + i, c, outs, i == 0 ? stats : NULL, &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return -1;
        }
        for (int j = 0; out && j < c; j++)
            memcpy(out + (size_t)(i + j) * outs[j].num_labels, outs[j].logits, sizeof(float) * outs[j].num_labels);
        eng_task_outs_free(outs, c);
    }
    return 0;
}

static double time_set(const eng_model *m, eng_state *st, const eng_task *t, int skip, eng_input *in, int n,
                       int chunk, int reps, eng_plan_stats *stats) {
    double *ts = malloc(sizeof(double) * reps), r;
    run_set(m, st, t, skip, in, n, chunk, NULL, NULL); /* warm-up */
    for (int k = 0; k < reps; k++) {
        double t0 = bench_now_ms();
        if (run_set(m, st, t, skip, in, n, chunk, NULL, k == reps - 1 ? stats : NULL)) return -1;
        ts[k] = bench_now_ms() - t0;
    }
    r = bench_median(ts, reps);
    free(ts);
    return r;
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *case_dir = NULL, *tok_dir = NULL, *data = NULL;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5, batch_reps = 3, batch = 8, n_calib = 200;
    int n_held = 200, skip = 0, json = 0, ks[8] = {8, 4, 2}, n_ks = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model_dir = argv[++i];
        else if (!strcmp(argv[i], "--fusion-case") && i + 1 < argc) case_dir = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_dir = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--calib") && i + 1 < argc) n_calib = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--heldout") && i + 1 < argc) n_held = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ks") && i + 1 < argc) n_ks = bench_parse_list(argv[++i], ks, 8);
        else if (!strcmp(argv[i], "--skip") && i + 1 < argc) skip = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch-reps") && i + 1 < argc) batch_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else {
            fprintf(stderr, "usage: bench_fusion --model DIR --fusion-case DIR --tokenizer DIR --data TSV [--calib N] "
                            "[--heldout N] [--ks 8,4,2] [--skip S] [--threads N] [--reps R] [--batch-reps R] "
                            "[--batch B] [--json]\n");
            return 2;
        }
    }
    if (!model_dir || !case_dir || !tok_dir || !data || batch < 1 || batch > 64 || reps < 1 || batch_reps < 1) return 2;
    eng_err e;
    eng_model *m;
    eng_tokenizer *tok;
    if (eng_model_load(model_dir, &m, &e) || eng_tokenizer_load(tok_dir, &tok, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    const eng_config *cfg = eng_model_config(m);
    if (eng_tokenizer_vocab_size(tok) > cfg->vocab) {
        fprintf(stderr, "bench: tokenizer has %d ids, the backbone %d\n", eng_tokenizer_vocab_size(tok), cfg->vocab);
        return 1;
    }
    /* the fusion task */
    char dirs[8][4096], fdir[4096], hdir[4096];
    const char *dp[8];
    for (int k = 0; k < 8; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/adapters/t%d", case_dir, k);
        dp[k] = dirs[k];
    }
    snprintf(fdir, sizeof fdir, "%s/fusion", case_dir);
    snprintf(hdir, sizeof hdir, "%s/head", case_dir);
    eng_task_params p = eng_task_default_params();
    p.fusion_dir = fdir, p.head_dir = hdir;
    p.keep_pruned = 1; /* calibrates and re-prunes: every child stays loaded */
    eng_task *t;
    if (eng_task_load(m, dp, 8, &p, &t, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    const char *const *names;
    int n = eng_task_fusion_children(t, &names), L = cfg->n_layers, labels = eng_task_head(t)->num_labels;
    /* sentences */
    FILE *f = fopen(data, "r");
    if (!f) {
        fprintf(stderr, "bench: cannot open %s\n", data);
        return 1;
    }
    int n_sent = n_calib + n_held, got = 0;
    eng_tok_encoding *enc = calloc((size_t)n_sent, sizeof *enc);
    eng_input *sin = calloc((size_t)n_sent, sizeof *sin);
    char line[65536];
    long sent_tokens = 0;
    if (!fgets(line, sizeof line, f)) return 1; /* header */
    while (got < n_sent && fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        if (eng_tok_encode(tok, line, (size_t)(tab - line), NULL, 0, NULL, &enc[got], &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
        sin[got] = (eng_input){.ids = enc[got].ids, .type_ids = enc[got].type_ids, .len = (int)enc[got].n};
        sent_tokens += (long)enc[got].n;
        got++;
    }
    fclose(f);
    if (got < n_sent) {
        fprintf(stderr, "bench: %s has %d sentences, need %d\n", data, got, n_sent);
        return 1;
    }
    eng_input *calib = sin, *held = sin + n_calib;
    eng_state *st = eng_state_new(threads);
    /* calibration (unpruned), the unpruned held-out logits */
    double *mean = calloc((size_t)L * n, sizeof *mean), t0 = bench_now_ms();
    if (eng_fusion_calibrate(m, st, t, calib, n_calib, mean, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    double calib_ms = bench_now_ms() - t0;
    double total[ENG_MAX_FUSE] = {0};
    for (int l = 0; l < L; l++)
        for (int i = 0; i < n; i++) total[i] += mean[(size_t)l * n + i];
    float *ref = malloc(sizeof(float) * n_held * labels), *lg = malloc(sizeof(float) * n_held * labels);
    uint8_t all[ENG_MAX_FUSE];
    for (int i = 0; i < n; i++) all[i] = 1;
    if (eng_task_prune_fusion(t, all, n, &e) || run_set(m, st, t, skip, held, n_held, batch, ref, NULL)) return 1;
    /* random 128-token inputs for the speed runs */
    int len = 128;
    int32_t *ids = malloc(sizeof(int32_t) * batch * len);
    bench_random_ids(ids, batch * len, 42, 1000, cfg->vocab);
    eng_input *rin = calloc((size_t)batch, sizeof *rin);
    for (int i = 0; i < batch; i++) rin[i] = (eng_input){.ids = ids + (size_t)i * len, .len = len};
    if (json)
        printf("{\"kind\":\"setup\",\"blas_core\":\"%s\",\"threads\":%d,\"calib\":%d,\"heldout\":%d,"
               "\"heldout_tokens_mean\":%.1f,\"calib_ms\":%.1f,\"skip\":%d,\"children\":%d}\n",
               eng_blas_core(), threads, n_calib, n_held, (double)(sent_tokens) / n_sent, calib_ms, skip, n);
    else {
        printf("AdapterFusion of %d seq_bn adapters, bert-base shapes, skip %d; core %s, %d threads\n", n, skip,
               eng_blas_core(), threads);
        printf("calibration: %d SST-2 dev sentences (bert-base-uncased tokenizer, %.1f tokens on average), %.0f ms\n",
               n_calib, (double)sent_tokens / n_sent, calib_ms);
        printf("mean attention summed over fusion layers:");
        for (int i = 0; i < n; i++) printf(" %s %.3f", names[i], total[i]);
        printf("\n%-3s %-24s %10s %8s %10s %8s %12s %8s %12s %9s\n", "k", "kept", "1x128 ms", "speedup", "8x128 ms",
               "speedup", "held-out ms", "speedup", "max|dlogit|", "same arg");
    }
    double base[3] = {0};
    for (int ki = 0; ki < n_ks; ki++) {
        uint8_t keep[ENG_MAX_FUSE];
        eng_fusion_choose(mean, L, n, ks[ki], keep);
        if (eng_task_prune_fusion(t, keep, n, &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
        if (run_set(m, st, t, skip, held, n_held, batch, lg, NULL)) return 1;
        double dmax = 0;
        int same = 0;
        for (int i = 0; i < n_held; i++) {
            for (int j = 0; j < labels; j++) { /* not fmax: GCC 12 for aarch64 ICEs vectorizing it */
                double dd = fabs(lg[i * labels + j] - ref[i * labels + j]);
                dmax = dd > dmax ? dd : dmax;
            }
            same += eng_argmax(lg + i * labels, labels) == eng_argmax(ref + i * labels, labels);
        }
        eng_plan_stats ps;
        double lat = time_set(m, st, t, skip, rin, 1, 1, reps, &ps);
        double thr = time_set(m, st, t, skip, rin, batch, batch, batch_reps, NULL);
        double hel = time_set(m, st, t, skip, held, n_held, batch, batch_reps, NULL);
        if (lat < 0 || thr < 0 || hel < 0) return 1;
        if (ki == 0) base[0] = lat, base[1] = thr, base[2] = hel;
        char kept[256] = "";
        for (int i = 0; i < n; i++)
            if (keep[i]) snprintf(kept + strlen(kept), sizeof kept - strlen(kept), "%s%s", kept[0] ? "," : "", names[i]);
        if (json) {
            printf("{\"kind\":\"fusion_prune\",\"k\":%d,\"kept\":\"%s\",\"latency_ms\":%.3f,\"throughput_ms\":%.3f,"
                   "\"heldout_ms\":%.3f,\"max_dlogit\":%.6g,\"same_argmax\":%.4f,\"layer_ms\":[",
                   ks[ki], kept, lat, thr, hel, dmax, (double)same / n_held);
            for (int l = 0; l < L; l++) printf("%s%.3f", l ? "," : "", ps.ms[l]);
            printf("],\"layer_gflop\":[");
            for (int l = 0; l < L; l++) printf("%s%.4f", l ? "," : "", ps.gflop[l]);
            printf("]}\n");
        } else {
            printf("%-3d %-24s %10.1f %7.2fx %10.1f %7.2fx %12.1f %7.2fx %12.4g %8.1f%%\n", ks[ki], kept, lat,
                   base[0] / lat, thr, base[1] / thr, hel, base[2] / hel, dmax, 100.0 * same / n_held);
            printf("    1x128 per layer ms:");
            for (int l = 0; l < L; l++) printf(" %.1f", ps.ms[l]);
            printf("  (GFLOP/layer %.2f at layer %d)\n", ps.gflop[L - 1], L - 1);
        }
        eng_plan_stats_free(&ps);
        fflush(stdout);
    }
    if (!json)
        printf("AdapterDrop paper (Rücklé et al. 2021, PyTorch/AdapterHub): keeping 2 of 8 adapters made AdapterFusion "
               "inference 68%% faster (1.68x)\n");
    for (int i = 0; i < n_sent; i++) eng_tok_encoding_free(&enc[i]);
    free(enc), free(sin), free(mean), free(ref), free(lg), free(ids), free(rin);
    eng_task_free(t);
    eng_state_free(st);
    eng_tokenizer_free(tok);
    eng_model_free(m);
    return 0;
}
