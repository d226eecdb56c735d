/* cmd_fusion_prune.c - `adapterd fusion-prune`: calibrate an AdapterFusion on real texts and keep
 * its k most-attended adapters (AdapterDrop paper, section 5).
 *
 *   adapterd fusion-prune --model DIR --adapter DIR [--adapter DIR ...] --fusion DIR [--head DIR]
 *                         --calib FILE --keep K [--max-texts N] [--dry-run]
 *
 * FILE holds one text per line (a TSV's first column is used). The mean attention of every adapter
 * per fusion layer and the kept set are printed as JSON and written to DIR/fusion_pruning.json,
 * which the loader applies from then on (so the server keeps the pruning across restarts). It also
 * runs the calibration texts through the whole fusion and through the pruned one and prints how
 * often their labels agree: the cost of the pruning on the very texts it was chosen from.
 *
 * The task is loaded with every child (keep_pruned), and a pruning saved before is undone first,
 * so running the command again recalibrates from the whole fusion. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/task.h"
#include "cli.h"
#include "engine/model.h"
#include "engine/fusion.h"
#include "engine/run.h"
#include "engine/tokenizer.h"
#include "opts.h"

#define MAX_ADAPTERS 16

static void usage(FILE *f) {
    fprintf(f, "usage: adapterd fusion-prune --model DIR --adapter DIR [--adapter DIR ...] --fusion DIR [--head DIR]\n"
               "                             --calib FILE --keep K [--max-texts N] [--dry-run] [--threads N]\n\n"
               "Runs up to N texts of FILE (one per line, or a TSV's first column) through the fusion, prints each\n"
               "adapter's mean attention per fusion layer (\"layers\") and summed over layers (\"adapters\"), keeps\n"
               "the K adapters with the largest sum and writes DIR/fusion_pruning.json (applied whenever the fusion\n"
               "is loaded: the server then frees the other adapters' weights) unless --dry-run. It also runs the texts\n"
               "through the whole and the pruned fusion and prints how often their labels agree\n"
               "(\"label_agreement\"; token heads: every token's label). A pruning saved before is ignored: the\n"
               "calibration always starts from every adapter. To serve the result, prune a copy of the version and\n"
               "upload it as a new one (docs/REGISTRY.md).\n");
}

int cmd_fusion_prune(int argc, char **argv) {
    const char *model_dir = NULL, *fusion = NULL, *head = NULL, *calib = NULL, *adapters[MAX_ADAPTERS];
    int keep_k = 0, max_texts = 512, dry = 0, threads = cli_default_threads();
    cli_list adapter_list = {adapters, 0};
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &model_dir),
        CLI_OPT_LIST("--adapter", &adapter_list, MAX_ADAPTERS),
        CLI_OPT_STR("--fusion", &fusion),
        CLI_OPT_STR("--head", &head),
        CLI_OPT_STR("--calib", &calib),
        CLI_OPT_INT("--keep", &keep_k, 1, MAX_ADAPTERS),
        CLI_OPT_INT("--max-texts", &max_texts, 1, 1 << 20),
        CLI_OPT_INT("--threads", &threads, 1, CLI_MAX_THREADS),
        CLI_OPT_FLAG("--dry-run", &dry),
        CLI_OPT_END,
    };
    int prc = cli_opts_parse("fusion-prune", opts, usage, argc, argv);
    if (prc >= 0) return prc;
    int n_adapters = adapter_list.n;
    if (!model_dir || !fusion || !calib || n_adapters < 1 || keep_k < 1) {
        fprintf(stderr, "adapterd fusion-prune: need --model, --adapter, --fusion, --calib and --keep K >= 1\n");
        return 2;
    }
    int rc = 1, n = 0;
    eng_err err = {0};
    eng_model *m = NULL;
    eng_task *t = NULL;
    eng_tokenizer *tok = NULL;
    eng_state *st = NULL;
    eng_tok_encoding *enc = calloc((size_t)max_texts, sizeof *enc);
    eng_input *in = calloc((size_t)max_texts, sizeof *in);
    double *mean = NULL;
    eng_task_out *whole = NULL, *pruned = NULL;
    int have_whole = 0, have_pruned = 0;
    FILE *f = fopen(calib, "r");
    if (!enc || !in) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    if (!f) {
        eng_err_set(&err, ENG_NOT_FOUND, "%s: cannot open", calib);
        goto fail;
    }
    if (eng_model_load(model_dir, &m, &err) || eng_tokenizer_load(model_dir, &tok, &err)) goto fail;
    eng_task_params tp = eng_task_default_params();
    tp.fusion_dir = fusion;
    tp.head_dir = head;
    tp.keep_pruned = 1; /* calibration and the whole-fusion labels need every child */
    if (eng_task_load(m, adapters, n_adapters, &tp, &t, &err)) goto fail;
    const char *const *names;
    int N = eng_task_fusion_children(t, &names), L = eng_model_config(m)->n_layers;
    if (keep_k > N) {
        eng_err_set(&err, ENG_INVALID_ARGUMENT, "--keep %d but the fusion has %d adapters", keep_k, N);
        goto fail;
    }
    uint8_t all[ENG_MAX_FUSE];
    memset(all, 1, sizeof all);
    if (eng_task_prune_fusion(t, all, N, &err)) goto fail; /* undo a saved pruning */
    char line[65536];
    eng_tok_params p = eng_tok_default_params();
    while (n < max_texts && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\t\r\n")] = 0;
        if (!line[0]) continue;
        if (eng_tok_encode(tok, line, strlen(line), NULL, 0, &p, &enc[n], &err)) goto fail;
        in[n] = (eng_input){.ids = enc[n].ids, .type_ids = enc[n].type_ids, .len = (int)enc[n].n};
        n++;
    }
    if (n == 0) {
        eng_err_set(&err, ENG_INVALID_ARGUMENT, "%s: no texts", calib);
        goto fail;
    }
    mean = calloc((size_t)L * N, sizeof *mean);
    st = eng_state_new(threads);
    if (!mean || !st) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    eng_task_req req = {t, 0};
    for (int i = 0; i < n; i++) in[i].tasks = &req, in[i].n_tasks = 1;
    if (!(whole = calloc((size_t)n, sizeof *whole)) || !(pruned = calloc((size_t)n, sizeof *pruned))) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    if (eng_run(m, st, in, n, whole, NULL, &err)) goto fail;
    have_whole = 1;
    if (eng_fusion_calibrate(m, st, t, in, n, mean, &err)) goto fail;
    uint8_t keep[ENG_MAX_FUSE];
    eng_fusion_choose(mean, L, N, keep_k, keep);
    if (eng_task_prune_fusion(t, keep, N, &err) || eng_run(m, st, in, n, pruned, NULL, &err)) goto fail;
    have_pruned = 1;
    int agree = 0;
    for (int i = 0; i < n; i++) {
        int same = 1, C = whole[i].num_labels;
        for (int r = 0; same && r < whole[i].n_rows; r++)
            same = eng_argmax(whole[i].logits + (size_t)r * C, C) == eng_argmax(pruned[i].logits + (size_t)r * C, C);
        agree += same;
    }
    printf("{\"calibration_texts\":%d,\"layers\":[", n);
    for (int l = 0, first = 1; l < L; l++) {
        double sum = 0;
        for (int i = 0; i < N; i++) sum += mean[(size_t)l * N + i];
        if (sum == 0) continue; /* no fusion in this layer */
        printf("%s{\"layer\":%d,\"attention\":{", first ? "" : ",", l);
        first = 0;
        for (int i = 0; i < N; i++) {
            printf("%s", i ? "," : "");
            cli_print_json_string(names[i], strlen(names[i]));
            printf(":%.6f", mean[(size_t)l * N + i]);
        }
        printf("}}");
    }
    printf("],\"label_agreement\":{\"agree\":%d,\"texts\":%d,\"share\":%.4f},\"adapters\":[", agree, n,
           (double)agree / n);
    for (int i = 0; i < N; i++) {
        double tot = 0;
        for (int l = 0; l < L; l++) tot += mean[(size_t)l * N + i];
        printf("%s{\"name\":", i ? "," : "");
        cli_print_json_string(names[i], strlen(names[i]));
        printf(",\"total_attention\":%.6f,\"kept\":%s}", tot, keep[i] ? "true" : "false");
    }
    printf("],\"written\":%s}\n", dry ? "false" : "true");
    if (!dry && eng_fusion_save_pruning(t, fusion, mean, L, keep, n, &err)) goto fail;
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "adapterd fusion-prune: %s\n", err.msg[0] ? err.msg : eng_status_desc(err.code));
    rc = 1;
out:
    if (f) fclose(f);
    for (int i = 0; enc && i < n; i++) eng_tok_encoding_free(&enc[i]);
    free(enc);
    free(in);
    free(mean);
    if (have_whole) eng_task_outs_free(whole, n);
    if (have_pruned) eng_task_outs_free(pruned, n);
    free(whole);
    free(pruned);
    eng_state_free(st);
    eng_task_free(t);
    eng_tokenizer_free(tok);
    eng_model_free(m);
    return rc;
}
