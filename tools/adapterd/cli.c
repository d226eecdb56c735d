/* cli.c - helpers shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/tokenizer.h"

int cli_parse_ids(const char *s, int32_t **out) {
    *out = NULL;
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "adapterd: out of memory\n");
        return -1;
    }
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "adapterd: --ids must be comma-separated non-negative integers, got '%s'\n", s);
            free(ids);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *t = realloc(ids, cap * sizeof *ids);
            if (!t) {
                free(ids);
                fprintf(stderr, "adapterd: out of memory\n");
                return -1;
            }
            ids = t;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "adapterd: --ids is empty\n");
        free(ids);
        return -1;
    }
    *out = ids;
    return (int)n;
}

void cli_print_json_string(const char *s, size_t len) {
    putchar('"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\b': fputs("\\b", stdout); break;
        case '\f': fputs("\\f", stdout); break;
        default:
            if (c < 0x20)
                printf("\\u%04x", c);
            else
                putchar(c);
        }
    }
    putchar('"');
}

int cli_tokenize(const char *model_dir, const char *text, const char *pair, int max_length, int32_t **ids,
                 int32_t **types, int *n, eng_err *err) {
    eng_tokenizer *tok = NULL;
    *ids = *types = NULL;
    int rc = eng_tokenizer_load(model_dir, &tok, err);
    if (rc) return rc;
    eng_tok_params tp = eng_tok_default_params();
    if (max_length > 0) tp.max_length = max_length;
    eng_tok_encoding enc = {0};
    rc = eng_tok_encode(tok, text, strlen(text), pair, pair ? strlen(pair) : 0, &tp, &enc, err);
    eng_tokenizer_free(tok);
    if (rc) return rc;
    *n = (int)enc.n;
    *ids = malloc(enc.n * sizeof **ids);
    *types = malloc(enc.n * sizeof **types);
    if (!*ids || !*types) {
        free(*ids);
        free(*types);
        *ids = *types = NULL;
        eng_tok_encoding_free(&enc);
        return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    }
    memcpy(*ids, enc.ids, enc.n * sizeof **ids);
    memcpy(*types, enc.type_ids, enc.n * sizeof **types);
    eng_tok_encoding_free(&enc);
    return 0;
}

int cli_read_input(const char *model_dir, const char *ids_arg, const char *text, const char *pair, int max_length,
                   int32_t **ids, int32_t **types, int *n, eng_err *err) {
    *ids = *types = NULL;
    if (!ids_arg) return cli_tokenize(model_dir, text, pair, max_length, ids, types, n, err);
    *n = cli_parse_ids(ids_arg, ids);
    return *n < 0 ? 2 : 0;
}

int cli_model_load(const char *model_dir, const char *precision, eng_model **out, eng_err *err) {
    eng_model_params p = eng_model_default_params();
    if (precision) {
        int v = eng_precision_parse(precision);
        if (v < 0) return eng_err_set(err, ENG_INVALID_ARGUMENT, "--precision %s: expected fp32, bf16 or int8", precision);
        p.precision = (eng_precision)v;
    } else {
        int rc = eng_model_json_precision(model_dir, &p.precision, err);
        if (rc) return rc;
    }
    return eng_model_load_params(model_dir, &p, out, err);
}
