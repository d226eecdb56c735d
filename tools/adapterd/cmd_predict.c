/* cmd_predict.c - `adapterd predict`: run one or more tasks on one input and print their outputs.
 *
 *   adapterd predict --model DIR --adapter DIR [--adapter DIR ...] [--fusion DIR [--head DIR]]
 *                    [--skip N] (--text STR [--text-pair STR] | --ids 101,2023,102) [--explain]
 *                    [--aggregation none|simple|first]
 *
 * QA answers and tagging entities come from engine/answer.h, the code the server answers with, so
 * the two give the same answer for the same input.
 *
 * Each --adapter folder is one task on the same input (a comma-separated list of folders is one
 * task that stacks them, e.g. a MAD-X language + task adapter). With --fusion, the --adapter
 * folders are the fusion's children and the fusion is the task. All tasks run in one planner pass:
 * layers below every task's first adapter layer are computed once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/answer.h"
#include "engine/task.h"
#include "engine/platform.h"
#include "engine/tokenizer.h"
#include "cli.h"
#include "engine/model.h"
#include "engine/run.h"

#define MAX_TASKS 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: adapterd predict --model DIR --adapter DIR[,DIR...] [--adapter ...] [--fusion DIR [--head DIR]]\n"
            "                        [--skip N] (--text STR [--text-pair STR] | --ids LIST) [--explain]\n"
            "                        [--threads N] [--blas-core NAME] [--precision P] [--aggregation A]\n\n"
            "Prints {\"tasks\":{\"NAME\":{\"logits\":[...],\"label\":\"...\",\"scores\":{...}}}}.\n"
            "QA tasks print \"answer\": the best span of --text-pair (the context; --text is the question),\n"
            "{\"text\",\"start\",\"end\",\"score\"}, offsets in code points, score the span's probability.\n\n"
            "  --adapter DIR      an AdapterHub or PEFT adapter folder = one task; DIR1,DIR2 stacks them\n"
            "  --fusion DIR       AdapterFusion folder: the --adapter folders are its children, one task\n"
            "  --head DIR         head folder (head_config.json) for the fusion task\n"
            "  --skip N           AdapterDrop: run layers 0..N-1 without adapters (default 0)\n"
            "  --explain          add the plan: streams and rows per layer, GFLOP, time per layer\n"
            "  --aggregation A    tagging: also print \"entities\" grouped as none, simple or first (as the\n"
            "                     server's \"aggregation\"; needs --text)\n"
            "  --precision P      backbone Linear layers in fp32, bf16 or int8 (default: DIR/model.json's, else fp32)\n");
}

static const char *label_name(const eng_head *h, int i, char *buf, size_t n) {
    if (h->labels && h->labels[i]) return h->labels[i];
    snprintf(buf, n, "LABEL_%d", i);
    return buf;
}

/* The input as text, when it was given as text: its encoding gives QA and tagging their offsets. */
typedef struct {
    const eng_tokenizer *tok;
    const eng_tok_encoding *enc;
    const char *text, *pair;
    int aggregation; /* eng_tag_aggregation, or -1: no entities */
} text_input;

static void print_answer(const eng_task_out *o, const text_input *in) {
    eng_qa_span sp;
    const eng_tok_encoding *e = in->enc;
    if (o->num_labels != 2 || (size_t)o->n_rows != e->n ||
        eng_qa_best_span(o->logits, e->seq_ids, o->n_rows, 1, ENG_QA_MAX_ANSWER_TOKENS, &sp)) {
        printf(",\"answer\":null");
        return;
    }
    int32_t b0 = e->byte_offsets[2 * sp.start], b1 = e->byte_offsets[2 * sp.end + 1];
    printf(",\"answer\":{\"text\":");
    cli_print_json_string(in->pair + b0, b1 > b0 ? (size_t)(b1 - b0) : 0);
    printf(",\"start\":%d,\"end\":%d,\"score\":%.9g,\"start_token\":%d,\"end_token\":%d}", e->offsets[2 * sp.start],
           e->offsets[2 * sp.end + 1], sp.score, sp.start, sp.end);
}

static void print_entities(const eng_head *h, const eng_task_out *o, const float *probs, const text_input *in) {
    const eng_tok_encoding *e = in->enc;
    int n = o->n_rows;
    eng_tag_entity *ents = malloc(((size_t)n + 1) * sizeof *ents);
    uint8_t *sub = malloc((size_t)n + 1);
    const char **labels = malloc(((size_t)o->num_labels + 1) * sizeof *labels);
    char (*names)[32] = malloc(((size_t)o->num_labels + 1) * sizeof *names);
    if (!ents || !sub || !labels || !names || (size_t)n != e->n) {
        printf(",\"entities\":null");
        free(ents), free(sub), free(labels), free(names);
        return;
    }
    for (int j = 0; j < o->num_labels; j++) labels[j] = label_name(h, j, names[j], sizeof names[j]);
    eng_tok_subword_flags(in->tok, e, in->text, strlen(in->text), in->pair, in->pair ? strlen(in->pair) : 0, sub);
    eng_tag_aggregation a = (eng_tag_aggregation)in->aggregation;
    int m = eng_tag_entities(probs, n, o->num_labels, e->special_mask, sub, e->seq_ids, labels, a, ents);
    printf(",\"aggregation\":\"%s\",\"entities\":[", eng_tag_aggregation_name(a));
    for (int x = 0; x < m; x++) {
        const eng_tag_entity *g = &ents[x];
        const char *src = g->seq == 1 ? in->pair : in->text;
        const char *name = a == ENG_TAG_AGG_NONE ? labels[g->label] : eng_tag_group_name(labels[g->label]);
        int32_t b0 = e->byte_offsets[2 * g->first], b1 = e->byte_offsets[2 * g->last + 1];
        printf("%s{\"%s\":", x ? "," : "", a == ENG_TAG_AGG_NONE ? "entity" : "entity_group");
        cli_print_json_string(name, strlen(name));
        printf(",\"score\":%.9g,\"word\":", g->score);
        cli_print_json_string(src + b0, b1 > b0 ? (size_t)(b1 - b0) : 0);
        printf(",\"start\":%d,\"end\":%d,\"seq\":%d}", e->offsets[2 * g->first], e->offsets[2 * g->last + 1], g->seq);
    }
    putchar(']');
    free(ents), free(sub), free(labels), free(names);
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

static void print_task(const eng_task *t, const eng_task_out *o, int skip, const text_input *in) {
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
        print_answer(o, in); /* cmd_predict refuses QA without a text pair */
    } else if (h->type == ENG_HEAD_TAGGING) {
        printf(",\"labels\":[");
        for (int r = 0; r < o->n_rows; r++) {
            if (r) putchar(',');
            const char *l = label_name(h, eng_argmax(probs + (size_t)r * o->num_labels, o->num_labels), buf, sizeof buf);
            cli_print_json_string(l, strlen(l));
        }
        putchar(']');
        if (in->enc && in->aggregation >= 0) print_entities(h, o, probs, in);
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
    const char *precision = NULL, *aggregation = NULL;
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
        else if (!strcmp(a, "--aggregation")) aggregation = v;
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
    if (aggregation && (eng_tag_aggregation_parse(aggregation) < 0 || !text)) {
        fprintf(stderr, "adapterd predict: --aggregation must be none, simple or first, with --text\n");
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
    eng_tokenizer *tokz = NULL;
    eng_tok_encoding enc = {0};
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
    /* extractive QA answers from a context: refused without one, as the server does */
    for (int i = 0; i < n_tasks; i++)
        if (eng_task_head(tasks[i])->type == ENG_HEAD_QA && !pair) {
            fprintf(stderr, "adapterd predict: task %s answers questions: give --text (the question) and --text-pair (the context)\n",
                    eng_task_name(tasks[i]));
            rc = 2;
            goto out;
        }
    /* input: text is encoded here (QA and tagging need its offsets), ids are used as given */
    if (text) {
        if (eng_tokenizer_load(model_dir, &tokz, &err) ||
            eng_tok_encode(tokz, text, strlen(text), pair, pair ? strlen(pair) : 0, NULL, &enc, &err))
            goto fail;
        n = (int)enc.n;
    } else {
        int irc = cli_read_input(model_dir, ids_arg, NULL, NULL, 0, &ids, &types, &n, &err);
        if (irc == 2) {
            rc = 2;
            goto out;
        }
        if (irc) goto fail;
    }
    for (int i = 0; i < n_tasks; i++) reqs[i] = (eng_task_req){tasks[i], skip};
    eng_input in = {.ids = text ? enc.ids : ids, .type_ids = text ? enc.type_ids : types, .len = n, .tasks = reqs, .n_tasks = n_tasks};
    text_input tin = {.tok = tokz, .enc = text ? &enc : NULL, .text = text, .pair = pair,
                      .aggregation = aggregation ? eng_tag_aggregation_parse(aggregation) : -1};
    if (!(st = eng_state_new(threads))) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    if (eng_run(m, st, &in, 1, outs, explain ? &stats : NULL, &err)) goto fail;
    have_outs = 1;
    printf("{\"tasks\":{");
    for (int i = 0; i < n_tasks; i++) {
        if (i) putchar(',');
        print_task(tasks[i], &outs[i], skip, &tin);
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
    eng_tok_encoding_free(&enc);
    eng_tokenizer_free(tokz);
    eng_state_free(st);
    eng_model_free(m);
    return rc;
}
