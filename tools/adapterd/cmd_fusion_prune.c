/* cmd_fusion_prune.c - `adapterd fusion-prune`: calibrate an AdapterFusion on real texts and keep
 * its k most-attended adapters (AdapterDrop paper, section 5).
 *
 *   adapterd fusion-prune --model DIR --adapter DIR [--adapter DIR ...] --fusion DIR [--head DIR]
 *                         --calib FILE --keep K [--max-texts N] [--dry-run]
 *
 * FILE holds one text per line (a TSV's first column is used). The mean attention of every adapter
 * per fusion layer and the kept set are printed as JSON and written to DIR/fusion_pruning.json,
 * which the loader applies from then on (so the server keeps the pruning across restarts). */
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

#define MAX_ADAPTERS 16

int cmd_fusion_prune(int argc, char **argv) {
    const char *model_dir = NULL, *fusion = NULL, *head = NULL, *calib = NULL, *adapters[MAX_ADAPTERS];
    int n_adapters = 0, keep_k = 0, max_texts = 512, dry = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: adapterd fusion-prune --model DIR --adapter DIR [--adapter DIR ...] --fusion DIR [--head DIR]\n"
                   "                             --calib FILE --keep K [--max-texts N] [--dry-run] [--threads N]\n\n"
                   "Runs up to N texts of FILE (one per line, or a TSV's first column) through the fusion, prints each\n"
                   "adapter's mean attention per fusion layer, keeps the K adapters with the largest total and writes\n"
                   "DIR/fusion_pruning.json (applied whenever the fusion is loaded) unless --dry-run.\n");
            return 0;
        }
        if (!strcmp(a, "--dry-run")) {
            dry = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "adapterd fusion-prune: incomplete option '%s'\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--adapter") && n_adapters < MAX_ADAPTERS) adapters[n_adapters++] = v;
        else if (!strcmp(a, "--fusion")) fusion = v;
        else if (!strcmp(a, "--head")) head = v;
        else if (!strcmp(a, "--calib")) calib = v;
        else if (!strcmp(a, "--keep")) keep_k = atoi(v);
        else if (!strcmp(a, "--max-texts")) max_texts = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else {
            fprintf(stderr, "adapterd fusion-prune: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!model_dir || !fusion || !calib || n_adapters < 1 || keep_k < 1 || max_texts < 1 || threads < 1) {
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
    if (eng_task_load(m, adapters, n_adapters, &tp, &t, &err)) goto fail;
    const char *const *names;
    int N = eng_task_fusion_children(t, &names), L = eng_model_config(m)->n_layers;
    if (keep_k > N) {
        eng_err_set(&err, ENG_INVALID_ARGUMENT, "--keep %d but the fusion has %d adapters", keep_k, N);
        goto fail;
    }
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
    if (eng_fusion_calibrate(m, st, t, in, n, mean, &err)) goto fail;
    uint8_t keep[ENG_MAX_FUSE];
    eng_fusion_choose(mean, L, N, keep_k, keep);
    printf("{\"calibration_texts\":%d,\"adapters\":[", n);
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
    eng_state_free(st);
    eng_task_free(t);
    eng_tokenizer_free(tok);
    eng_model_free(m);
    return rc;
}
