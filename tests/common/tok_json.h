/* tok_json.h - a tokenizer built from a tokenizer.json text in memory (eng_tokenizer_load_files), for
 * the tokenizer tests that write small vocabularies inline (test_unigram.c, test_decode.c). The test
 * fails when it does not load. */
#ifndef ADAPTERD_TESTS_TOK_JSON_H
#define ADAPTERD_TESTS_TOK_JSON_H

#include <criterion/criterion.h>
#include <string.h>

#include "engine/tokenizer.h"

static inline eng_tokenizer *load_json(const char *json) {
    eng_tok_files f = {.tokenizer_json = {json, strlen(json)}};
    eng_err err = {0};
    eng_tokenizer *tok = NULL;
    cr_assert_eq(eng_tokenizer_load_files(&f, &tok, &err), 0, "%s", err.msg);
    return tok;
}

#endif
