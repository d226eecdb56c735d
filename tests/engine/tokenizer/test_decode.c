/* test_decode.c - engine/tokenizer/decode.c (eng_tok_decode) on small tokenizers built in memory,
 * against texts worked out by hand from the decoders' rules (Hugging Face tokenizers' WordPiece,
 * ByteLevel and Metaspace decoders; GPT-2's byte alphabet; U+FFFD for each maximal invalid UTF-8
 * subpart, as Rust's from_utf8_lossy and the WHATWG decoder do). tests/parity/tokenizer checks the
 * same function against transformers.js and sentencepiece on real vocabularies. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "tok_json.h"

/* Decodes ids and expects want (wn bytes: it may hold a NUL). */
static void expect(const eng_tokenizer *t, const int32_t *ids, int n, bool skip, const char *want, size_t wn) {
    char *out = NULL;
    size_t len = 0;
    int bad = -1;
    cr_assert_eq(eng_tok_decode(t, ids, n, skip, &out, &len, &bad), 0);
    cr_expect(len == wn && !memcmp(out, want, wn), "got \"%s\" (%zu bytes), want \"%s\" (%zu)", out, len, want, wn);
    free(out);
}
#define EXPECT(t, skip, want, ...) \
    expect(t, (int32_t[]){__VA_ARGS__}, (int)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)), skip, want, sizeof want - 1)

/* byte-level BPE: 0 <s>, 1 </s>, 2 a, 3 Ġb (" b"), 4 Ã (0xC3), 5 © (0xA9), 6 Ċ ("\n"), 7 Ā (0x00), 8 <mask> */
static const char BPE[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<s>\": 0, \"</s>\": 1, \"a\": 2, \"\\u0120b\": 3, \"\\u00c3\": 4, \"\\u00a9\": 5,"
    " \"\\u010a\": 6, \"\\u0100\": 7, \"<mask>\": 8}, \"merges\": []},"
    " \"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true}, {\"id\": 1, \"content\": \"</s>\", \"special\": true},"
    " {\"id\": 8, \"content\": \"<mask>\", \"special\": true}],"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, \"decoder\": {\"type\": \"ByteLevel\"}}";

Test(decode, byte_level_maps_the_alphabet_back_to_bytes) {
    eng_tokenizer *t = load_json(BPE);
    EXPECT(t, true, "a b", 2, 3);
    EXPECT(t, true, "\xc3\xa9", 4, 5);            /* é split over two tokens */
    EXPECT(t, true, "a\n", 2, 6);
    EXPECT(t, true, "a\0a", 2, 7, 2);            /* the byte 0x00 is a token too */
    EXPECT(t, false, "<s>a b</s>", 0, 2, 3, 1);
    EXPECT(t, true, "a b", 0, 2, 3, 1);
    EXPECT(t, false, "a<mask>", 2, 8);
    eng_tokenizer_free(t);
}

Test(decode, byte_level_replaces_invalid_utf8) {
    eng_tokenizer *t = load_json(BPE);
    EXPECT(t, true, "\xef\xbf\xbd", 4);               /* a lone lead byte */
    EXPECT(t, true, "\xef\xbf\xbd" "a", 4, 2);        /* cut by an ASCII byte */
    EXPECT(t, true, "\xef\xbf\xbd\xef\xbf\xbd", 5, 5); /* two stray continuation bytes: one U+FFFD each */
    EXPECT(t, true, "\xc3\xa9\xef\xbf\xbd", 4, 5, 4);
    eng_tokenizer_free(t);
}

/* Unigram with Metaspace (prepend always) and byte fallback: 0 <unk>, 1 ▁, 2 ▁a, 3 b, 4 </s>, 5 <0xC3>, 6 <0xA9>,
 * 7 ▁b▁c (a piece with U+2581 inside) */
static const char UNI[] =
    "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true, \"vocab\": [[\"<unk>\", 0.0], [\"\\u2581\", -2.0],"
    " [\"\\u2581a\", -1.5], [\"b\", -3.0], [\"</s>\", 0.0], [\"<0xC3>\", -5.0], [\"<0xA9>\", -5.0], [\"\\u2581b\\u2581c\", -9.0]]},"
    " \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 4, \"content\": \"</s>\", \"special\": true}],"
    " \"normalizer\": null,"
    " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\", \"split\": true},"
    " \"post_processor\": null}";

Test(decode, metaspace_turns_the_marker_into_spaces) {
    eng_tokenizer *t = load_json(UNI);
    cr_assert_eq(eng_tokenizer_kind(t), ENG_TOK_UNIGRAM);
    EXPECT(t, true, "ab a", 2, 3, 2);             /* the first token's prepended space dropped */
    EXPECT(t, false, "ab a</s>", 2, 3, 2, 4);
    EXPECT(t, true, "ab a", 2, 3, 2, 4);
    EXPECT(t, true, "b a", 3, 2);                 /* no space to drop before "b" */
    EXPECT(t, true, "b c a", 7, 2);               /* one leading space dropped, the inner one kept */
    EXPECT(t, true, "a \xc3\xa9", 2, 1, 5, 6);    /* byte pieces become their bytes */
    EXPECT(t, true, "a \xef\xbf\xbd", 2, 1, 5);   /* ... lossily */
    EXPECT(t, false, "<unk> a", 0, 2);             /* only the first emitted token loses its space */
    eng_tokenizer_free(t);
}

/* WordPiece: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 hello, 5 world, 6 ##s, 7 ",", 8 it, 9 ', 10 s */
static const char WP[] =
    "{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\","
    " \"vocab\": {\"[PAD]\": 0, \"[UNK]\": 1, \"[CLS]\": 2, \"[SEP]\": 3, \"hello\": 4, \"world\": 5, \"##s\": 6, \",\": 7, \"it\": 8,"
    " \"'\": 9, \"s\": 10}},"
    " \"added_tokens\": [{\"id\": 0, \"content\": \"[PAD]\", \"special\": true}, {\"id\": 1, \"content\": \"[UNK]\", \"special\": true},"
    " {\"id\": 2, \"content\": \"[CLS]\", \"special\": true}, {\"id\": 3, \"content\": \"[SEP]\", \"special\": true}],"
    " \"normalizer\": {\"type\": \"BertNormalizer\", \"lowercase\": true}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}";

Test(decode, wordpiece_glues_continuations_and_cleans_up) {
    eng_tokenizer *t = load_json(WP);
    EXPECT(t, true, "hello worlds", 2, 4, 5, 6, 3);
    EXPECT(t, false, "[CLS] hello worlds [SEP]", 2, 4, 5, 6, 3);
    EXPECT(t, true, "hello, it's", 4, 7, 8, 9, 10); /* transformers' clean_up_tokenization */
    EXPECT(t, true, "##s hello", 6, 4);              /* the first token keeps its "##" */
    EXPECT(t, true, "", 2, 3);
    eng_tokenizer_free(t);
}

Test(decode, an_id_with_no_token_is_refused) {
    eng_tokenizer *t = load_json(WP);
    char *out = (char *)1;
    size_t len = 7;
    int bad = -1;
    cr_expect_eq(eng_tok_decode(t, (int32_t[]){4, 99, 5}, 3, true, &out, &len, &bad), ENG_INVALID_ARGUMENT);
    cr_expect_eq(bad, 1);
    cr_expect_null(out);
    cr_expect_eq(eng_tok_decode(t, (int32_t[]){-1}, 1, true, &out, &len, &bad), ENG_INVALID_ARGUMENT);
    cr_expect_eq(bad, 0);
    cr_expect_eq(eng_tok_decode(t, NULL, 0, true, &out, &len, &bad), 0, "no ids: the empty text");
    cr_expect_eq(len, 0);
    free(out);
    eng_tokenizer_free(t);
}
