/* cmd_encode.c - `adapterd encode`: run the encoder on one input and print its outputs as JSON.
 *
 * Output: {"ids":[...],"last_hidden_state":[[...],...],"pooler_output":[...]} with floats printed
 * with 9 significant digits (exact float32 round trip). pooler_output is the BERT/RoBERTa pooler,
 * or the CLS row for models without a pooler (DistilBERT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/platform.h"
#include "cli.h"
#include "engine/model.h"
#include "opts.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: adapterd encode --model DIR (--text STR [--text-pair STR] | --ids 2,415,1284,261,1387,3)\n"
            "                       [--max-length N] [--threads N] [--blas-core NAME] [--precision P]\n\n"
            "Runs the encoder in DIR (config.json + model.safetensors) and prints one JSON object:\n"
            "  {\"ids\":[...],\"last_hidden_state\":[[...],...],\"pooler_output\":[...]}\n\n"
            "  --model DIR        Hugging Face model directory (BERT, RoBERTa/XLM-R, DistilBERT, ELECTRA,\n"
            "                     DeBERTa-v2/v3, ModernBERT: its pooler_output is the prediction head's)\n"
            "  --text STR         text to tokenize with DIR's tokenizer (tokenizer.json or vocab files)\n"
            "  --text-pair STR    second segment of a pair\n"
            "  --ids LIST         comma-separated token ids, used as given (no special tokens added)\n"
            "  --max-length N     truncate the tokenized text to N tokens (default: the model's limit)\n"
            "  --threads N        threads (default: all cores)\n"
            "  --blas-core NAME   OpenBLAS kernels: auto, Haswell, SkylakeX, Cooperlake, ...\n"
            "  --precision P      backbone Linear layers in fp32, bf16 or int8 (default: DIR/model.json's, else\n"
            "                     fp32); refused when this CPU has no fast kernel for it\n");
}

static void print_floats(const float *v, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%.9g" : "%.9g", v[i]);
    putchar(']');
}

int cmd_encode(int argc, char **argv) {
    const char *precision = NULL, *model_dir = NULL, *text = NULL, *pair = NULL, *ids_arg = NULL;
    int max_length = 0, threads = cli_default_threads();
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &model_dir),
        CLI_OPT_STR("--text", &text),
        CLI_OPT_STR("--text-pair", &pair),
        CLI_OPT_STR("--ids", &ids_arg),
        CLI_OPT_INT("--max-length", &max_length, 0, 1 << 20), /* 0: the model's limit */
        CLI_OPT_INT("--threads", &threads, 1, CLI_MAX_THREADS),
        CLI_OPT_STR("--precision", &precision),
        CLI_OPT_END,
    };
    int prc = cli_opts_parse("encode", opts, usage, argc, argv);
    if (prc >= 0) return prc;
    if (precision && eng_precision_parse(precision) < 0) {
        fprintf(stderr, "adapterd %s: --precision must be fp32, bf16 or int8\n", argv[0]);
        return 2;
    }
    if (!model_dir || (!text == !ids_arg) || (pair && !text)) {
        fprintf(stderr, "adapterd encode: need --model and exactly one of --text or --ids\n");
        usage(stderr);
        return 2;
    }
    int rc = 1, n = 0;
    int32_t *ids = NULL, *types = NULL;
    eng_err err = {0};
    eng_model *m = NULL;
    eng_state *st = NULL;
    float *hidden = NULL, *pooled = NULL;
    if (cli_model_load(model_dir, precision, &m, &err)) goto fail;
    const eng_config *c = eng_model_config(m);
    int ml = max_length ? max_length : c->max_pos - c->pos_offset;
    int irc = cli_read_input(model_dir, ids_arg, text, pair, ml, &ids, &types, &n, &err);
    if (irc == 2) {
        rc = 2;
        goto out;
    }
    if (irc) goto fail;
    st = eng_state_new(threads);
    hidden = malloc((size_t)n * c->hidden * sizeof *hidden);
    pooled = malloc((size_t)c->hidden * sizeof *pooled);
    if (!st || !hidden || !pooled) {
        eng_err_set(&err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    eng_model_precision_info pi = eng_model_precision(m);
    fprintf(stderr, "adapterd: OpenBLAS core %s, %d threads, precision %s (%s kernel)\n", eng_blas_core(), threads,
            pi.name, pi.kernel);
    int32_t len = n;
    eng_batch b = {.n_seq = 1, .ids = ids, .type_ids = types, .seq_len = &len};
    if (eng_encode(m, st, &b, hidden, pooled, &err)) goto fail;
    printf("{\"ids\":[");
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    printf("],\"last_hidden_state\":[");
    for (int i = 0; i < n; i++) {
        if (i) putchar(',');
        print_floats(hidden + (size_t)i * c->hidden, c->hidden);
    }
    printf("],\"pooler_output\":");
    print_floats(pooled, c->hidden);
    printf("}\n");
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "adapterd encode: %s\n", err.msg[0] ? err.msg : eng_status_desc(err.code));
    rc = 1;
out:
    free(ids);
    free(types);
    free(hidden);
    free(pooled);
    eng_state_free(st);
    eng_model_free(m);
    return rc;
}
