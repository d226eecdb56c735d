/* cmd_predict.c - `adapterd predict`: run one or more tasks on one input and print their outputs.
 *
 *   adapterd predict --model DIR --adapter DIR [--adapter DIR ...] [--fusion DIR [--head DIR]]
 *                    [--skip N] (--text STR [--text-pair STR] | --ids 2,415,1284,261,1387,3) [--explain]
 *                    [--aggregation none|simple|first] [--top-k N] [--max-answer-len N] [--handle-impossible-answer]
 *                    [--max-seq-len N] [--doc-stride N] [--max-question-len N] [--stride N] [--long mean|max]
 *                    [--long-stride N]
 *
 * Each task is answered as POST /v1/predict answers it: the result from the server's converter
 * (server/answer.h: scores, label, tagging entities, QA spans) and the JSON from proto's encoder
 * (proto_local_predict_encode), so the two give the same answer for the same input
 * (tests/tools/adapterd/test_predict.c).
 *
 * Each --adapter folder is one task on the same input (a comma-separated list of folders is one
 * task that stacks them, e.g. a MAD-X language + task adapter). With --fusion, the --adapter
 * folders are the fusion's children and the fusion is the task. All tasks run in one planner pass:
 * layers below every task's first adapter layer are computed once.
 *
 * Long inputs are read in windows as POST /v1/predict reads them (engine/tokenizer.h's plans, the
 * server's converter over all windows): QA contexts always (the question-answering pipeline's
 * max_seq_len, doc_stride, max_question_len), a tagged text with --stride, a classified text with
 * --long (the request's "long": {"mode": "chunks"}); every window is one more input of the one pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "engine/answer.h"
#include "engine/model.h"
#include "engine/platform.h"
#include "engine/run.h"
#include "engine/task.h"
#include "engine/tokenizer.h"
#include "opts.h"
#include "proto/proto.h"
#include "server/answer.h"

#define MAX_TASKS 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: adapterd predict --model DIR --adapter DIR[,DIR...] [--adapter ...] [--fusion DIR [--head DIR]]\n"
            "                        [--skip N] (--text STR [--text-pair STR] | --ids LIST) [--explain]\n"
            "                        [--threads N] [--blas-core NAME] [--precision P] [--aggregation A]\n"
            "                        [--top-k N] [--max-answer-len N] [--handle-impossible-answer]\n\n"
            "Prints {\"tasks\":{\"NAME\":{...}}}: each task as POST /v1/predict answers it (\"label\", \"scores\",\n"
            "\"labels\", \"value\", \"tokens\" or \"entities\", \"answer\"; always \"logits\"), plus \"kind\" (the adapter\n"
            "forms) and \"start_layer\". QA tasks print \"answer\": the best span of --text-pair (the context;\n"
            "--text is the question), {\"text\",\"start\",\"end\",\"score\"}, offsets in code points.\n\n"
            "  --adapter DIR      an AdapterHub or PEFT adapter folder = one task; DIR1,DIR2 stacks them\n"
            "  --fusion DIR       AdapterFusion folder: the --adapter folders are its children, one task\n"
            "  --head DIR         head folder (head_config.json) for the fusion task\n"
            "  --skip N           AdapterDrop: run layers 0..N-1 without adapters (default 0)\n"
            "  --explain          add the plan: streams and rows per layer, GFLOP, time per layer\n"
            "  --aggregation A    tagging: \"entities\" grouped as none, simple or first instead of every\n"
            "                     token (as the server's \"aggregation\"; needs --text)\n"
            "  --precision P      backbone Linear layers in fp32, bf16 or int8 (default: DIR/model.json's, else fp32)\n"
            "  --top-k N          QA: the N best answers (\"answers\"), as the server's \"top_k\" (default 1)\n"
            "  --max-answer-len N QA: tokens of an answer at most (default 15, the pipeline's)\n"
            "  --handle-impossible-answer  QA: the no-answer competes, as the server's \"handle_impossible_answer\"\n"
            "Long inputs, read in windows as POST /v1/predict reads them (docs/OPERATIONS.md \"Long inputs\"):\n"
            "  --max-seq-len N    QA: tokens of a window (default 384, or the model's limit when lower)\n"
            "  --doc-stride N     QA: tokens two windows of the context share (default half the window, at most 128)\n"
            "  --max-question-len N  QA: the question is cut to N tokens (default 64)\n"
            "  --stride N         tagging: a long text in windows sharing N tokens, entities merged (needs\n"
            "                     --aggregation simple or first), as the server's \"stride\"\n"
            "  --long mean|max    classification, multi-label, regression: a long text in windows, logits\n"
            "                     aggregated per label (the server's \"long\": {\"mode\": \"chunks\"}); default: the\n"
            "                     first window\n"
            "  --long-stride N    tokens the --long windows share (default 0; with --stride, the same)\n");
}

/* What one task's answer borrows until it is printed: the converter's buffers, the label names. */
typedef struct {
    srv_answer_bufs ans;
    const char **labels;               /* (n_labels) proto_label_name of each */
    char (*names)[PROTO_LABEL_BUF];    /* (n_labels) where the head has no name */
} task_bufs;

static void task_bufs_free(task_bufs *b) {
    srv_answer_free(&b->ans);
    free(b->labels), free(b->names);
}

/* One task's output as the server answers it (server/answer.h, the server's converter). Returns 0,
 * or ENG_NO_MEMORY. */
static int task_answer(const eng_task *t, const eng_task_out *o, int skip, const srv_answer_input *in, proto_aggregation agg,
                       task_bufs *b, proto_task_result *r) {
    const eng_head *h = eng_task_head(t);
    int k = o->num_labels;
    b->labels = malloc(((size_t)k + 1) * sizeof *b->labels);
    b->names = malloc(((size_t)k + 1) * sizeof *b->names);
    if (!b->labels || !b->names) return ENG_NO_MEMORY;
    for (int j = 0; j < k; j++) b->labels[j] = proto_label_name((const char *const *)h->labels, j, b->names[j], sizeof b->names[j]);
    *r = (proto_task_result){.task = eng_task_name(t), .skip = skip, .n_labels = k, .labels = b->labels, .logits = o->logits};
    return srv_answer_task(h, o, in, agg, &b->ans, r);
}

/* --ids as an encoding, marked as the server marks ids: no offsets, the tokenizer's [CLS], [SEP] and
 * [PAD] special (tok NULL: none). Returns 0 or ENG_NO_MEMORY. */
static int ids_encoding(const eng_tokenizer *tok, const int32_t *ids, const int32_t *types, int n, eng_tok_encoding *e) {
    if (eng_tok_encoding_alloc(e, (size_t)n)) return ENG_NO_MEMORY;
    int32_t special[3] = {-1, -1, -1};
    if (tok) special[0] = eng_tokenizer_cls_id(tok), special[1] = eng_tokenizer_sep_id(tok), special[2] = eng_tokenizer_pad_id(tok);
    memcpy(e->ids, ids, (size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) {
        e->type_ids[i] = types ? types[i] : 0;
        e->special_mask[i] = ids[i] == special[0] || ids[i] == special[1] || ids[i] == special[2];
        e->seq_ids[i] = e->special_mask[i] ? -1 : 0;
    }
    return 0;
}

/* The answer on stdout through proto's encoder, as the server would write each task. */
static int print_answer(eng_task *const *tasks, const eng_task_out *outs, int n_tasks, int skip, const srv_answer_input *in,
                        int chunks, proto_aggregation agg, const proto_local_plan *plan) {
    proto_task_result res[MAX_TASKS];
    task_bufs bufs[MAX_TASKS] = {0};
    const char *kinds[MAX_TASKS];
    int starts[MAX_TASKS], rc = 0;
    for (int k = 0; k < n_tasks && !rc; k++) {
        kinds[k] = eng_task_kind(tasks[k]);
        starts[k] = outs[k].start_layer;
        srv_answer_input tin = *in;
        int h = eng_task_head(tasks[k])->type;
        tin.chunks = h == ENG_HEAD_CLASSIFICATION || h == ENG_HEAD_MULTILABEL || h == ENG_HEAD_REGRESSION ? chunks : 0;
        rc = task_answer(tasks[k], &outs[k], skip, &tin, agg, &bufs[k], &res[k]);
    }
    proto_local_predict p = {.n_tasks = n_tasks, .results = res, .kinds = kinds, .start_layers = starts, .plan = plan};
    size_t len = 0;
    char *json = rc ? NULL : proto_local_predict_encode(&p, &len);
    if (json) printf("%s\n", json);
    free(json);
    for (int k = 0; k < n_tasks; k++) task_bufs_free(&bufs[k]);
    return json ? 0 : ENG_NO_MEMORY;
}

/* The windows POST /v1/predict reads a long text in (server/predict.c, by the same plans): QA over a
 * pair, else a single text strided by stride, in windows of the model's limit (QA: max_seq_len,
 * 384 by default, capped by it). *wins stays NULL when the text fits whole. Returns 0, or an engine
 * status with err set. */
static int plan_windows(const eng_tokenizer *tok, const eng_config *c, const eng_tok_encoding *full, int qa, int max_seq_len,
                        int doc_stride, int max_question_len, int stride, eng_tok_encoding **wins, int *n_win, eng_err *err) {
    int max_len = eng_tokenizer_max_length(tok), pos = c->max_pos - c->pos_offset;
    if (max_len <= 0 || pos < max_len) max_len = pos;
    eng_tok_windows p;
    int seq_len = max_seq_len > 0 ? max_seq_len : ENG_QA_MAX_SEQ_LEN;
    if (seq_len > max_len) seq_len = max_len;
    int bad = qa ? eng_tok_plan_qa(full, seq_len, doc_stride, max_question_len, &p) : eng_tok_plan_text(full, max_len, stride, &p);
    if (p.whole) return 0;
    if (bad && qa)
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "the question and the special tokens leave %d of a window's %d tokens for the context, not more "
                           "than --doc-stride %d; give a shorter question or a smaller --max-question-len or --doc-stride",
                           p.room, seq_len, p.stride);
    if (bad)
        return eng_err_set(err, ENG_INVALID_ARGUMENT,
                           "--stride %d must be below the %d text tokens of a window (the model's %d less the special tokens)",
                           stride, p.room, max_len);
    if (!(*wins = calloc((size_t)p.n_windows, sizeof **wins))) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    *n_win = p.n_windows;
    for (int w = 0; w < p.n_windows; w++)
        if (eng_tok_plan_window(full, &p, w, &(*wins)[w])) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    return 0;
}

int cmd_predict(int argc, char **argv) {
    static const char *const aggs[] = {"none", "simple", "first", NULL};
    static const proto_aggregation agg_of[] = {PROTO_AGG_NONE, PROTO_AGG_SIMPLE, PROTO_AGG_FIRST};
    const char *precision = NULL, *model_dir = NULL, *text = NULL, *pair = NULL, *ids_arg = NULL, *fusion = NULL,
               *head = NULL, *adapters[MAX_TASKS];
    int skip = 0, explain = 0, agg = -1, threads = cli_default_threads();
    int top_k = 1, max_answer_len = ENG_QA_MAX_ANSWER_LEN, impossible = 0;
    int max_seq_len = 0, doc_stride = -1, max_question_len = 0, stride = -1, long_agg = -1, long_stride = -1;
    static const char *const long_aggs[] = {"mean", "max", NULL};
    cli_list adapter_list = {adapters, 0};
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &model_dir),
        CLI_OPT_LIST("--adapter", &adapter_list, MAX_TASKS),
        CLI_OPT_STR("--fusion", &fusion),
        CLI_OPT_STR("--head", &head),
        CLI_OPT_INT("--skip", &skip, 0, CLI_MAX_LAYERS), /* the model's own count is checked once it is loaded */
        CLI_OPT_STR("--text", &text),
        CLI_OPT_STR("--text-pair", &pair),
        CLI_OPT_STR("--ids", &ids_arg),
        CLI_OPT_INT("--threads", &threads, 1, CLI_MAX_THREADS),
        CLI_OPT_STR("--precision", &precision),
        CLI_OPT_CHOICE("--aggregation", &agg, aggs),
        CLI_OPT_FLAG("--explain", &explain),
        CLI_OPT_INT("--top-k", &top_k, 1, ENG_QA_MAX_TOP_K),
        CLI_OPT_INT("--max-answer-len", &max_answer_len, 1, 8192),
        CLI_OPT_FLAG("--handle-impossible-answer", &impossible),
        CLI_OPT_INT("--max-seq-len", &max_seq_len, 1, 1 << 20),
        CLI_OPT_INT("--doc-stride", &doc_stride, 0, 1 << 20),
        CLI_OPT_INT("--max-question-len", &max_question_len, 1, 1 << 20),
        CLI_OPT_INT("--stride", &stride, 0, 1 << 20),
        CLI_OPT_CHOICE("--long", &long_agg, long_aggs),
        CLI_OPT_INT("--long-stride", &long_stride, 0, 1 << 20),
        CLI_OPT_END,
    };
    int prc = cli_opts_parse("predict", opts, usage, argc, argv);
    if (prc >= 0) return prc;
    int n_adapters = adapter_list.n;
    if (precision && eng_precision_parse(precision) < 0) {
        fprintf(stderr, "adapterd %s: --precision must be fp32, bf16 or int8\n", argv[0]);
        return 2;
    }
    if (agg >= 0 && !text) {
        fprintf(stderr, "adapterd predict: --aggregation needs --text\n");
        return 2;
    }
    if (stride >= 0 && agg != 1 && agg != 2) { /* as the server: the windows' tokens are merged as entities */
        fprintf(stderr, "adapterd predict: --stride reads a long text in windows whose entities are merged: it needs "
                        "--aggregation simple or first\n");
        return 2;
    }
    if (long_stride >= 0 && long_agg < 0) {
        fprintf(stderr, "adapterd predict: --long-stride needs --long\n");
        return 2;
    }
    if (long_agg >= 0 && long_stride < 0) long_stride = stride >= 0 ? stride : 0;
    if (stride >= 0 && long_agg >= 0 && stride != long_stride) {
        fprintf(stderr, "adapterd predict: --stride %d and --long-stride %d: a text is read in one set of windows for every "
                        "task; give them one stride\n", stride, long_stride);
        return 2;
    }
    if (!model_dir || !n_adapters || (!text == !ids_arg) || (pair && !text) || (head && !fusion)) {
        fprintf(stderr, "adapterd predict: need --model, at least one --adapter, and exactly one of --text or --ids\n");
        usage(stderr);
        return 2;
    }
    int rc = 1, n = 0, n_tasks = 0, n_win = 1;
    int32_t *ids = NULL, *types = NULL;
    eng_tok_encoding *wins = NULL; /* (n_win) the windows of a long text; NULL: enc alone */
    eng_input *inputs = NULL;
    eng_task_out *wouts = NULL;    /* (n_win * n_tasks) */
    eng_err err = {0};
    eng_model *m = NULL;
    eng_state *st = NULL;
    eng_task *tasks[MAX_TASKS] = {0};
    eng_task_req reqs[MAX_TASKS];
    eng_plan_stats stats = {0};
    eng_tokenizer *tokz = NULL;
    eng_tok_encoding enc = {0};
    int have_outs = 0;
    if (cli_model_load(model_dir, precision, &m, &err)) goto fail;
    const eng_config *c = eng_model_config(m);
    if (skip > c->n_layers) { /* a usage error, found once the model says how many layers it has */
        fprintf(stderr, "adapterd predict: --skip expects an integer in 0..%d (the model's layers), got '%d'\n",
                c->n_layers, skip);
        rc = 2;
        goto out;
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
    /* input: text is encoded here (QA and tagging need its offsets), ids are used as given; a text
     * some task reads in windows is encoded whole, then cut by the server's plan */
    int qa = 0, tagging = 0;
    for (int i = 0; i < n_tasks; i++) {
        qa |= eng_task_head(tasks[i])->type == ENG_HEAD_QA;
        tagging |= eng_task_head(tasks[i])->type == ENG_HEAD_TAGGING;
    }
    int text_stride = !pair && long_agg >= 0 ? long_stride : !pair && tagging ? stride : -1;
    if (text) {
        if (eng_tokenizer_load(model_dir, &tokz, &err)) goto fail;
        int windowed = (pair && qa) || text_stride >= 0;
        eng_tok_params tkp = eng_tok_default_params();
        if (windowed) tkp.truncation = ENG_TOK_TRUNCATE_NONE;
        if (eng_tok_encode(tokz, text, strlen(text), pair, pair ? strlen(pair) : 0, &tkp, &enc, &err)) goto fail;
        if (windowed && plan_windows(tokz, c, &enc, pair && qa, max_seq_len, doc_stride, max_question_len, text_stride,
                                     &wins, &n_win, &err))
            goto fail;
    } else {
        int irc = cli_read_input(model_dir, ids_arg, NULL, NULL, 0, &ids, &types, &n, &err);
        if (irc == 2) {
            rc = 2;
            goto out;
        }
        if (irc) goto fail;
        eng_err tok_err = {0}; /* a folder without a tokenizer still runs ids: nothing is marked special */
        if (eng_tokenizer_load(model_dir, &tokz, &tok_err)) tokz = NULL;
        if (ids_encoding(tokz, ids, types, n, &enc)) {
            eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
            goto fail;
        }
    }
    n = (int)enc.n;
    for (int i = 0; i < n_tasks; i++) reqs[i] = (eng_task_req){tasks[i], skip};
    const eng_tok_encoding *seqs = wins ? wins : &enc;
    inputs = calloc((size_t)n_win, sizeof *inputs);
    wouts = calloc((size_t)n_win * n_tasks, sizeof *wouts);
    if (!inputs || !wouts) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    for (int w = 0; w < n_win; w++)
        inputs[w] = (eng_input){.ids = seqs[w].ids, .type_ids = seqs[w].type_ids, .len = (int)seqs[w].n, .tasks = reqs,
                                .n_tasks = n_tasks};
    /* the input as the answers read it: its encoding or windows (a text's, or the --ids marked as the
     * server marks them) and, for a text, the text and pair (tokz NULL for --ids without a tokenizer) */
    srv_answer_input tin = {.enc = seqs, .tok = tokz, .text = text, .pair = pair, .n_windows = n_win, .out_stride = n_tasks,
                            .text_len = text ? strlen(text) : 0, .pair_len = pair ? strlen(pair) : 0,
                            .qa = {.max_answer_len = max_answer_len, .top_k = top_k, .handle_impossible = impossible}};
    if (!(st = eng_state_new(threads))) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    if (eng_run(m, st, inputs, n_win, wouts, explain ? &stats : NULL, &err)) goto fail;
    have_outs = 1;
    proto_local_plan plan = {0};
    proto_fusion_view fusions[MAX_TASKS];
    if (explain) {
        double gf = 0;
        for (int l = 0; l < stats.n_layers; l++) gf += stats.gflop[l];
        plan = (proto_local_plan){.tokens = stats.tokens, .threads = threads, .blas_core = eng_blas_core(), .gflop = gf,
                                  .embed_ms = stats.embed_ms, .heads_ms = stats.heads_ms, .total_ms = stats.total_ms,
                                  .n_layers = stats.n_layers, .streams = stats.streams, .trunks = stats.trunks,
                                  .rows = stats.rows, .gflops = stats.gflop, .ms = stats.ms, .fusions = fusions};
        for (int k = 0; k < n_tasks; k++) {
            const char *const *names;
            int nc = eng_task_fusion_children(tasks[k], &names);
            if (nc > 0)
                fusions[plan.n_fusions++] = (proto_fusion_view){.task = eng_task_name(tasks[k]), .children = names,
                                                                .kept = eng_task_fusion_kept(tasks[k]), .n = nc};
        }
    }
    if (print_answer(tasks, wouts, n_tasks, skip, &tin, long_agg >= 0 && !pair ? 1 + long_agg : 0,
                     agg >= 0 ? agg_of[agg] : PROTO_AGG_TOKENS, explain ? &plan : NULL)) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "adapterd predict: %s\n", err.msg[0] ? err.msg : eng_status_desc(err.code));
    rc = 1;
out:
    if (have_outs) eng_task_outs_free(wouts, n_win * n_tasks);
    free(wouts), free(inputs);
    for (int w = 0; wins && w < n_win; w++) eng_tok_encoding_free(&wins[w]);
    free(wins);
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
