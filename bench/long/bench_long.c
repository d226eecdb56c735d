/* bench_long.c - one long document, many tasks, read in windows (bench/long, issue 39).
 *
 *   bench_long --model DIR --tasks DIR [--threads N] [--doc 4096] [--window 384] [--stride 128] [--tasks-n 8]
 *              [--skip 5] [--reps 3] [--short-reps 9]
 *
 * --tasks DIR holds task00..task15 as bench/multitask/gen_tasks.py writes them (seq_bn + 2-layer head). A document
 * of --doc random tokens is cut as the server cuts a long input (engine/tokenizer.h's plans: windows of --window
 * tokens with [CLS] and [SEP], consecutive windows sharing --stride tokens) and every window carries the --tasks-n
 * tasks at --skip: one eng_run, as the server's job runs it (the trunk once per window, the tasks' layers packed).
 * The same run then times one short input of one window's length with the same tasks, alternating with the long
 * document so load changes hit both alike: the time per window of the long document against the short input's.
 * One JSON line per measurement (median ms over --reps after a warm-up), for run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "engine/model.h"
#include "engine/run.h"
#include "engine/task.h"
#include "engine/tokenizer.h"

#define MAX_TASKS 16
#define MAX_WINDOWS 256

static int run(const eng_model *m, eng_state *st, eng_input *in, int n_in, int n_out, eng_task_out *outs) {
    eng_err e;
    if (eng_run(m, st, in, n_in, outs, NULL, &e)) {
        fprintf(stderr, "bench: eng_run: %s\n", e.msg);
        return -1;
    }
    eng_task_outs_free(outs, n_out);
    return 0;
}

int main(int argc, char **argv) {
    const char *model_dir = NULL, *tasks_dir = NULL;
    int threads = 2, doc = 4096, window = 384, stride = 128, n_tasks = 8, skip = 5, reps = 3, short_reps = 9;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--model")) model_dir = v;
        else if (!strcmp(k, "--tasks")) tasks_dir = v;
        else if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--doc")) doc = atoi(v);
        else if (!strcmp(k, "--window")) window = atoi(v);
        else if (!strcmp(k, "--stride")) stride = atoi(v);
        else if (!strcmp(k, "--tasks-n")) n_tasks = atoi(v);
        else if (!strcmp(k, "--skip")) skip = atoi(v);
        else if (!strcmp(k, "--reps")) reps = atoi(v);
        else if (!strcmp(k, "--short-reps")) short_reps = atoi(v);
        else {
            fprintf(stderr, "bench_long: unknown option %s\n", k);
            return 2;
        }
    }
    if (!model_dir || !tasks_dir || n_tasks < 1 || n_tasks > MAX_TASKS || reps < 1 || short_reps < 1 || doc < 1 || window < 3)
        return 2;
    eng_model *m;
    eng_err e;
    if (eng_model_load(model_dir, &m, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    const eng_config *cfg = eng_model_config(m);
    eng_task *tasks[MAX_TASKS] = {0};
    eng_task_req reqs[MAX_TASKS];
    eng_task_params tp = eng_task_default_params();
    char path[4096];
    for (int k = 0; k < n_tasks; k++) {
        snprintf(path, sizeof path, "%s/task%02d", tasks_dir, k);
        const char *d = path;
        if (eng_task_load(m, &d, 1, &tp, &tasks[k], &e)) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
        reqs[k] = (eng_task_req){tasks[k], skip};
    }
    /* the document as an encoding: [CLS] doc [SEP], then the server's plan for a single text */
    eng_tok_encoding full;
    if (eng_tok_encoding_alloc(&full, (size_t)doc + 2)) return 1;
    bench_random_ids(full.ids, (int)full.n, 42, 1000, cfg->vocab);
    for (size_t i = 0; i < full.n; i++) {
        int special = i == 0 || i == full.n - 1;
        full.ids[i] = i == 0 ? 101 : i == full.n - 1 ? 102 : full.ids[i];
        full.type_ids[i] = 0, full.seq_ids[i] = special ? -1 : 0, full.special_mask[i] = (uint8_t)special;
        full.offsets[2 * i] = full.offsets[2 * i + 1] = full.byte_offsets[2 * i] = full.byte_offsets[2 * i + 1] = 0;
    }
    eng_tok_windows plan;
    if (eng_tok_plan_text(&full, window, stride, &plan) || plan.n_windows > MAX_WINDOWS) {
        fprintf(stderr, "bench: no plan for %d tokens in windows of %d sharing %d\n", doc, window, stride);
        return 2;
    }
    int nw = plan.n_windows, tokens = 0;
    static eng_tok_encoding wins[MAX_WINDOWS];
    eng_input in[MAX_WINDOWS], one;
    for (int w = 0; w < nw; w++) {
        if (eng_tok_plan_window(&full, &plan, w, &wins[w])) return 1;
        in[w] = (eng_input){.ids = wins[w].ids, .len = (int)wins[w].n, .tasks = reqs, .n_tasks = n_tasks};
        tokens += (int)wins[w].n;
    }
    one = (eng_input){.ids = wins[0].ids, .len = (int)wins[0].n, .tasks = reqs, .n_tasks = n_tasks};
    eng_state *st = eng_state_new(threads);
    eng_task_out *outs = calloc((size_t)nw * n_tasks, sizeof *outs);
    double *tl = malloc(sizeof(double) * reps), *ts = malloc(sizeof(double) * short_reps);
    if (!st || !outs || !tl || !ts) return 1;
    if (run(m, st, in, nw, nw * n_tasks, outs) || run(m, st, &one, 1, n_tasks, outs)) return 1; /* warm-up */
    /* alternating: a long run, then short runs, so both see the same load */
    int per = (short_reps + reps - 1) / reps, done = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_ms();
        if (run(m, st, in, nw, nw * n_tasks, outs)) return 1;
        tl[r] = bench_now_ms() - t0;
        for (int s = 0; s < per && done < short_reps; s++, done++) {
            t0 = bench_now_ms();
            if (run(m, st, &one, 1, n_tasks, outs)) return 1;
            ts[done] = bench_now_ms() - t0;
        }
    }
    double long_ms = bench_median(tl, reps), short_ms = bench_median(ts, done);
    printf("{\"kind\":\"long\",\"doc_tokens\":%d,\"window\":%d,\"stride\":%d,\"windows\":%d,\"tokens\":%d,\"tasks\":%d,"
           "\"skip\":%d,\"threads\":%d,\"reps\":%d,\"ms\":%.2f,\"ms_per_window\":%.3f}\n",
           doc, window, stride, nw, tokens, n_tasks, skip, threads, reps, long_ms, long_ms / nw);
    printf("{\"kind\":\"short\",\"tokens\":%d,\"tasks\":%d,\"skip\":%d,\"reps\":%d,\"ms\":%.3f,"
           "\"long_per_window_over_short\":%.3f,\"long_per_token_over_short\":%.3f}\n",
           (int)wins[0].n, n_tasks, skip, done, short_ms, long_ms / nw / short_ms,
           (long_ms / tokens) / (short_ms / (double)wins[0].n));
    for (int w = 0; w < nw; w++) eng_tok_encoding_free(&wins[w]);
    eng_tok_encoding_free(&full);
    for (int k = 0; k < n_tasks; k++) eng_task_free(tasks[k]);
    free(outs), free(tl), free(ts);
    eng_state_free(st);
    eng_model_free(m);
    return 0;
}
