/* cmd_predict.c - `adapterd predict`: run one or more tasks on one input and print their outputs.
 *
 *   adapterd predict --model DIR --adapter DIR [--adapter DIR ...] [--fusion DIR [--head DIR]]
 *                    [--skip N] (--text STR [--text-pair STR] | --ids 101,2023,102) [--explain]
 *
 * Each --adapter folder is one task on the same input (a comma-separated list of folders is one
 * task that stacks them, e.g. a MAD-X language + task adapter). With --fusion, the --adapter
 * folders are the fusion's children and the fusion is the task. All tasks run in one planner pass:
 * layers below every task's first adapter layer are computed once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/task.h"
#include "engine/platform.h"
#include "cli.h"
#include "engine/model.h"
#include "engine/run.h"

#define MAX_TASKS 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: adapterd predict --model DIR --adapter DIR[,DIR...] [--adapter ...] [--fusion DIR [--head DIR]]\n"
            "                        [--skip N] (--text STR [--text-pair STR] | --ids LIST) [--explain]\n"
            "                        [--threads N] [--blas-core NAME] [--precision P]\n\n"
            "Prints {\"tasks\":{\"NAME\":{\"logits\":[...],\"label\":\"...\",\"scores\":{...}}}}.\n\n"
            "  --adapter DIR      an AdapterHub or PEFT adapter folder = one task; DIR1,DIR2 stacks them\n"
            "  --fusion DIR       AdapterFusion folder: the --adapter folders are its children, one task\n"
            "  --head DIR         head folder (head_config.json) for the fusion task\n"
            "  --skip N           AdapterDrop: run layers 0..N-1 without adapters (default 0)\n"
            "  --explain          add the plan: streams and rows per layer, GFLOP, time per layer\n"
            "  --precision P      backbone Linear layers in fp32, bf16 or int8 (default: DIR/model.json's, else fp32)\n");
}

static const char *label_name(const eng_head *h, int i, char *buf, size_t n) {
    if (h->labels && h->labels[i]) return h->labels[i];
    snprintf(buf, n, "LABEL_%d", i);
    return buf;
}

/* ,"fusion":{"TASK":{"kept":[...],"pruned":[...]}} for the tasks with a fusion, as the server's explain. */
static void print_fusions(eng_task *const *tasks, int n_tasks) {
    int any = 0;
    for (int k = 0; k < n_tasks; k++) {
        const char *const *names;
        int n = eng_task_fusion_children(tasks[k], &names);
        if (n <= 0) continue;
        const uint8_t *kept = eng_task_fusion_kept(tasks[k]);
        printf(any++ ? "," : ",\"fusion\":{");
        cli_print_json_string(eng_task_name(tasks[k]), strlen(eng_task_name(tasks[k])));
        for (int pass = 1; pass >= 0; pass--) {
            printf(pass ? ":{\"kept\":[" : "],\"pruned\":[");
            for (int i = 0, c = 0; i < n; i++)
                if (kept[i] == pass) {
                    if (c++) putchar(',');
                    cli_print_json_string(names[i], strlen(names[i]));
                }
        }
        printf("]}");
    }
    if (any) putchar('}');
}

static void print_task(const eng_task *t, const eng_task_out *o, int skip) {
    const eng_head *h = eng_task_head(t);
    char buf[32];
    float *probs = malloc((size_t)o->n_rows * o->num_labels * sizeof *probs);
    if (!probs) {
        printf("{\"error\":\"out of memory\"}");
        return;
    }
    eng_head_probs(h, o->logits, o->n_rows, probs);
    cli_print_json_string(eng_task_name(t), strlen(eng_task_name(t)));
    printf(":{\"kind\":\"%s\",\"skip\":%d,\"start_layer\":%d,\"logits\":[", eng_task_kind(t), skip, o->start_layer);
    for (int r = 0; r < o->n_rows; r++) {
        if (o->n_rows > 1) printf(r ? ",[" : "[");
        for (int j = 0; j < o->num_labels; j++) printf(j ? ",%.9g" : "%.9g", o->logits[(size_t)r * o->num_labels + j]);
        if (o->n_rows > 1) putchar(']');
    }
    putchar(']');
    if (h->type == ENG_HEAD_REGRESSION) {
        printf(",\"value\":%.9g", o->logits[0]);
    } else if (h->type == ENG_HEAD_QA) {
        int best_s = 0, best_e = 0;
        float best = -1e30f;
        for (int s = 0; s < o->n_rows; s++)
            for (int e = s; e < o->n_rows && e < s + 30; e++) {
                float v = o->logits[(size_t)s * 2] + o->logits[(size_t)e * 2 + 1];
                if (v > best) best = v, best_s = s, best_e = e;
            }
        printf(",\"start\":%d,\"end\":%d,\"score\":%.9g", best_s, best_e, best);
    } else if (h->type == ENG_HEAD_TAGGING) {
        printf(",\"labels\":[");
        for (int r = 0; r < o->n_rows; r++) {
            if (r) putchar(',');
            const char *l = label_name(h, eng_argmax(probs + (size_t)r * o->num_labels, o->num_labels), buf, sizeof buf);
            cli_print_json_string(l, strlen(l));
        }
        putchar(']');
    } else {
        int best = eng_argmax(probs, o->num_labels);
        const char *l = label_name(h, best, buf, sizeof buf);
        printf(",\"label\":");
        cli_print_json_string(l, strlen(l));
        printf(",\"score\":%.9g,\"scores\":{", probs[best]);
        for (int j = 0; j < o->num_labels; j++) {
            if (j) putchar(',');
            l = label_name(h, j, buf, sizeof buf);
            cli_print_json_string(l, strlen(l));
            printf(":%.9g", probs[j]);
        }
        putchar('}');
    }
    putchar('}');
    free(probs);
}

int cmd_predict(int argc, char **argv) {
    const char *precision = NULL;
    const char *model_dir = NULL, *text = NULL, *pair = NULL, *ids_arg = NULL, *fusion = NULL, *head = NULL;
    const char *adapters[MAX_TASKS];
    int n_adapters = 0, skip = 0, explain = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--explain")) {
            explain = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "adapterd predict: unknown or incomplete option '%s'\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--adapter") && n_adapters < MAX_TASKS) adapters[n_adapters++] = v;
        else if (!strcmp(a, "--fusion")) fusion = v;
        else if (!strcmp(a, "--head")) head = v;
        else if (!strcmp(a, "--skip")) skip = atoi(v);
        else if (!strcmp(a, "--text")) text = v;
        else if (!strcmp(a, "--text-pair")) pair = v;
        else if (!strcmp(a, "--ids")) ids_arg = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--precision")) precision = v;
        else {
            fprintf(stderr, "adapterd predict: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (precision && eng_precision_parse(precision) < 0) {
        fprintf(stderr, "adapterd %s: --precision must be fp32, bf16 or int8\n", argv[0]);
        return 2;
    }
    if (!model_dir || !n_adapters || (!text == !ids_arg) || (pair && !text) || threads < 1 || (head && !fusion)) {
        fprintf(stderr, "adapterd predict: need --model, at least one --adapter, and exactly one of --text or --ids\n");
        usage(stderr);
        return 2;
    }
    int rc = 1, n = 0, n_tasks = 0;
    int32_t *ids = NULL, *types = NULL;
    eng_err err = {0};
    eng_model *m = NULL;
    eng_state *st = NULL;
    eng_task *tasks[MAX_TASKS] = {0};
    eng_task_out outs[MAX_TASKS];
    eng_task_req reqs[MAX_TASKS];
    eng_plan_stats stats = {0};
    int have_outs = 0;
    if (cli_model_load(model_dir, precision, &m, &err)) goto fail;
    const eng_config *c = eng_model_config(m);
    if (skip < 0 || skip > c->n_layers) {
        eng_err_set(&err, ENG_INVALID_ARGUMENT, "--skip %d outside 0..%d", skip, c->n_layers);
        goto fail;
    }
    /* tasks */
    eng_task_params tp = eng_task_default_params();
    if (fusion) {
        tp.fusion_dir = fusion;
        tp.head_dir = head;
        if (eng_task_load(m, adapters, n_adapters, &tp, &tasks[n_tasks++], &err)) goto fail;
    } else {
        for (int i = 0; i < n_adapters; i++) {
            char list[8192];
            snprintf(list, sizeof list, "%s", adapters[i]);
            const char *dirs[16];
            int nd = 0;
            for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && nd < 16; tok = strtok_r(NULL, ",", &save))
                dirs[nd++] = tok;
            if (eng_task_load(m, dirs, nd, &tp, &tasks[n_tasks], &err)) goto fail;
            n_tasks++;
        }
    }
    /* input */
    int irc = cli_read_input(model_dir, ids_arg, text, pair, 0, &ids, &types, &n, &err);
    if (irc == 2) {
        rc = 2;
        goto out;
    }
    if (irc) goto fail;
    for (int i = 0; i < n_tasks; i++) reqs[i] = (eng_task_req){tasks[i], skip};
    eng_input in = {.ids = ids, .type_ids = types, .len = n, .tasks = reqs, .n_tasks = n_tasks};
    if (!(st = eng_state_new(threads))) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    if (eng_run(m, st, &in, 1, outs, explain ? &stats : NULL, &err)) goto fail;
    have_outs = 1;
    printf("{\"tasks\":{");
    for (int i = 0; i < n_tasks; i++) {
        if (i) putchar(',');
        print_task(tasks[i], &outs[i], skip);
    }
    putchar('}');
    if (explain) {
        double gf = 0;
        for (int l = 0; l < stats.n_layers; l++) gf += stats.gflop[l];
        printf(",\"plan\":{\"tokens\":%d,\"blas_core\":\"%s\",\"threads\":%d,\"gflop\":%.4f,\"embed_ms\":%.3f,"
               "\"heads_ms\":%.3f,\"total_ms\":%.3f,\"layers\":[",
               stats.tokens, eng_blas_core(), threads, gf, stats.embed_ms, stats.heads_ms, stats.total_ms);
        for (int l = 0; l < stats.n_layers; l++)
            printf("%s{\"layer\":%d,\"streams\":%d,\"trunks\":%d,\"rows\":%d,\"gflop\":%.4f,\"ms\":%.3f}",
                   l ? "," : "", l, stats.streams[l], stats.trunks[l], stats.rows[l], stats.gflop[l], stats.ms[l]);
        printf("]");
        print_fusions(tasks, n_tasks);
        putchar('}');
    }
    printf("}\n");
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "adapterd predict: %s\n", err.msg[0] ? err.msg : eng_status_desc(err.code));
    rc = 1;
out:
    if (have_outs) eng_task_outs_free(outs, n_tasks);
    eng_plan_stats_free(&stats);
    for (int i = 0; i < n_tasks; i++) eng_task_free(tasks[i]);
    free(ids);
    free(types);
    eng_state_free(st);
    eng_model_free(m);
    return rc;
}
