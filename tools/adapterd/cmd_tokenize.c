/* cmd_tokenize.c - `adapterd tokenize`: tokenize a text (or pair) and print ids, tokens, offsets.
 *
 * A thin shell over engine/tokenizer.h so users can check what the server will feed the encoder:
 * one JSON line {"ids":[...],"type_ids":[...],"tokens":[...],"offsets":[[s,e],...]} where offsets
 * are code-point spans into the text (or the pair, for its tokens), (0,0) for special tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/tokenizer.h"
#include "opts.h"

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
    static const char *const truncations[] = {"longest_first", "only_first", "only_second", "none", NULL};
    static const eng_tok_truncation truncation_of[] = {ENG_TOK_TRUNCATE_LONGEST_FIRST, ENG_TOK_TRUNCATE_ONLY_FIRST,
                                                       ENG_TOK_TRUNCATE_ONLY_SECOND, ENG_TOK_TRUNCATE_NONE};
    const char *model = NULL, *text = NULL, *pair = NULL;
    int max_length = 0, truncation = 0, no_special = 0;
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &model),
        CLI_OPT_STR("--text", &text),
        CLI_OPT_STR("--text-pair", &pair),
        CLI_OPT_INT("--max-length", &max_length, 1, 1 << 30),
        CLI_OPT_CHOICE("--truncation", &truncation, truncations),
        CLI_OPT_FLAG("--no-special-tokens", &no_special),
        CLI_OPT_END,
    };
    int prc = cli_opts_parse("tokenize", opts, usage, argc, argv);
    if (prc >= 0) return prc;
    eng_tok_params p = eng_tok_default_params();
    if (max_length) p.max_length = max_length;
    p.truncation = truncation_of[truncation];
    p.add_special_tokens = !no_special;
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
