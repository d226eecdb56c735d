/* cmd_tokenize.c - `adapterd tokenize`: tokenize a text (or pair) and print ids, tokens, offsets.
 *
 * A thin shell over engine/tokenizer.h so users can check what the server will feed the encoder:
 * one JSON line {"ids":[...],"type_ids":[...],"tokens":[...],"offsets":[[s,e],...]} where offsets
 * are code-point spans into the text (or the pair, for its tokens), (0,0) for special tokens. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: adapterd tokenize --model DIR --text STR [--text-pair STR] [--max-length N]\n"
            "                         [--truncation longest_first|only_first|only_second|none]\n"
            "                         [--no-special-tokens]\n\n"
            "Tokenizes STR with the tokenizer in DIR (tokenizer.json, or vocab.txt, or vocab.json +\n"
            "merges.txt) and prints one JSON line with ids, type_ids, tokens and offsets. Offsets are\n"
            "[start, end) in Unicode code points of the text the token came from (the pair text for\n"
            "tokens of the second sequence); special tokens have [0, 0]. --max-length defaults to\n"
            "the model's maximum; truncation defaults to longest_first.\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *pair = NULL;
    eng_tok_params p = eng_tok_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-special-tokens")) {
            p.add_special_tokens = 0;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "adapterd tokenize: unknown option or missing value: %s\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--text")) text = v;
        else if (!strcmp(a, "--text-pair")) pair = v;
        else if (!strcmp(a, "--max-length")) {
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || *end || n <= 0 || n > 1 << 30) {
                fprintf(stderr, "adapterd tokenize: --max-length must be a positive integer, got '%s'\n", v);
                return 2;
            }
            p.max_length = (int32_t)n;
        } else if (!strcmp(a, "--truncation")) {
            if (!strcmp(v, "longest_first")) p.truncation = ENG_TOK_TRUNCATE_LONGEST_FIRST;
            else if (!strcmp(v, "only_first")) p.truncation = ENG_TOK_TRUNCATE_ONLY_FIRST;
            else if (!strcmp(v, "only_second")) p.truncation = ENG_TOK_TRUNCATE_ONLY_SECOND;
            else if (!strcmp(v, "none")) p.truncation = ENG_TOK_TRUNCATE_NONE;
            else {
                fprintf(stderr, "adapterd tokenize: unknown truncation '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "adapterd tokenize: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !text) {
        fprintf(stderr, "adapterd tokenize: --model and --text are required\n");
        usage(stderr);
        return 2;
    }

    eng_err err = {0};
    eng_tokenizer *tok;
    if (eng_tokenizer_load(model, &tok, &err)) {
        fprintf(stderr, "adapterd tokenize: %s\n", err.msg);
        return 1;
    }
    eng_tok_encoding enc;
    if (eng_tok_encode(tok, text, strlen(text), pair, pair ? strlen(pair) : 0, &p, &enc, &err)) {
        fprintf(stderr, "adapterd tokenize: %s\n", err.msg);
        eng_tokenizer_free(tok);
        return 1;
    }
    printf("{\"ids\":[");
    for (size_t i = 0; i < enc.n; i++) printf("%s%d", i ? "," : "", enc.ids[i]);
    printf("],\"type_ids\":[");
    for (size_t i = 0; i < enc.n; i++) printf("%s%d", i ? "," : "", enc.type_ids[i]);
    printf("],\"tokens\":[");
    for (size_t i = 0; i < enc.n; i++) {
        const char *t = eng_tok_id_to_token(tok, enc.ids[i]);
        if (i) putchar(',');
        if (t) cli_print_json_string(t, strlen(t));
        else printf("null");
    }
    printf("],\"offsets\":[");
    for (size_t i = 0; i < enc.n; i++)
        printf("%s[%d,%d]", i ? "," : "", enc.offsets[2 * i], enc.offsets[2 * i + 1]);
    printf("]}\n");
    eng_tok_encoding_free(&enc);
    eng_tokenizer_free(tok);
    return 0;
}
