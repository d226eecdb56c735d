/* test_tokenizer.c - unit tests of engine/tokenizer/ (WordPiece, byte-level BPE, pipeline).
 *
 * Expected ids come from transformers.js 4.3.1 (@huggingface/tokenizers 0.2.0) run on the same
 * fixture files with env.allowRemoteModels = false, e.g.
 *   tok('Crème brûlée', {return_tensor: false}).input_ids
 * (the full comparison over ~15,000 sentences is tests/parity/tokenizer). transformers.js has no
 * offsets, so expected offsets follow the Python library's documented return_offsets_mapping
 * semantics (code points of the original text, special tokens (0, 0), byte-level spans without
 * the leading space when trim_offsets is set) and are worked out by hand in each test. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/files.h"
#include "engine/tokenizer.h"
#include "test_rand.h"
#include "test_tmp.h"
#include "tokenizer/tok_internal.h"

/* The real bert-base-uncased and roberta-base files: third-party data read in place from the
 * shared data folder (ADAPTERD_DATA_DIR), never copied into the repository. Tests that need them
 * are skipped with a message when it is absent. */
#define BERT_DIR ADAPTERD_DATA_DIR "/tokenizers/bert-base-uncased"
#define ROBERTA_DIR ADAPTERD_DATA_DIR "/tokenizers/roberta-base"

static void need_shared_tokenizers(void) {
    const char *dirs[] = {BERT_DIR, ROBERTA_DIR};
    for (int i = 0; i < 2; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/tokenizer.json", dirs[i]);
        if (!eng_file_exists(p)) cr_skip_test("%s is absent: set ADAPTERD_DATA_DIR to the shared data", p);
    }
}

static eng_tokenizer *load(const char *dir) {
    need_shared_tokenizers();
    eng_err err = {0};
    eng_tokenizer *tok = NULL;
    int rc = eng_tokenizer_load(dir, &tok, &err);
    cr_assert_eq(rc, 0, "load %s: %s", dir, err.msg);
    cr_assert_not_null(tok);
    return tok;
}

static eng_tok_encoding enc_pair(const eng_tokenizer *tok, const char *a, size_t na, const char *b, size_t nb,
                                 const eng_tok_params *p) {
    eng_tok_encoding e;
    eng_err err = {0};
    int rc = eng_tok_encode(tok, a, na, b, nb, p, &e, &err);
    cr_assert_eq(rc, 0, "encode: %s", err.msg);
    return e;
}

static eng_tok_encoding enc(const eng_tokenizer *tok, const char *s) { return enc_pair(tok, s, strlen(s), NULL, 0, NULL); }

static void expect_ids(const eng_tokenizer *tok, const char *text, const int32_t *want, size_t n) {
    eng_tok_encoding e = enc(tok, text);
    cr_assert_eq(e.n, n, "\"%s\": %zu tokens, want %zu", text, e.n, n);
    for (size_t i = 0; i < n; i++) cr_expect_eq(e.ids[i], want[i], "\"%s\" token %zu: %d, want %d", text, i, e.ids[i], want[i]);
    eng_tok_encoding_free(&e);
}
#define EXPECT_IDS(tok, text, ...)                                                       \
    do {                                                                                 \
        const int32_t w_[] = {__VA_ARGS__};                                              \
        expect_ids(tok, text, w_, sizeof w_ / sizeof w_[0]);                             \
    } while (0)

static void expect_offsets(const eng_tok_encoding *e, const int32_t *want, size_t n) {
    cr_assert_eq(e->n, n);
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(e->offsets[2 * i], want[2 * i], "token %zu start %d, want %d", i, e->offsets[2 * i], want[2 * i]);
        cr_expect_eq(e->offsets[2 * i + 1], want[2 * i + 1], "token %zu end %d, want %d", i, e->offsets[2 * i + 1],
                     want[2 * i + 1]);
    }
}
#define EXPECT_OFFSETS(e, ...)                                                           \
    do {                                                                                 \
        const int32_t w_[] = {__VA_ARGS__};                                              \
        expect_offsets(e, w_, sizeof w_ / sizeof w_[0] / 2);                             \
    } while (0)

/* ---- loading and accessors ---- */

Test(tokenizer, load_bert) {
    eng_tokenizer *t = load(BERT_DIR);
    cr_expect_eq(eng_tokenizer_kind(t), ENG_TOK_WORDPIECE);
    cr_expect_eq(eng_tokenizer_vocab_size(t), 30522);
    cr_expect_eq(eng_tokenizer_cls_id(t), 101);
    cr_expect_eq(eng_tokenizer_sep_id(t), 102);
    cr_expect_eq(eng_tokenizer_pad_id(t), 0);
    cr_expect_eq(eng_tokenizer_unk_id(t), 100);
    cr_expect_eq(eng_tokenizer_mask_id(t), 103);
    /* model_max_length is 1e30 in tokenizer_config.json: capped to 512 */
    cr_expect_eq(eng_tokenizer_max_length(t), 512);
    cr_expect_str_eq(eng_tok_id_to_token(t, 7592), "hello");
    cr_expect_eq(eng_tok_token_to_id(t, "##ing", 5), 2075);
    cr_expect_null(eng_tok_id_to_token(t, 30522));
    cr_expect_null(eng_tok_id_to_token(t, -1));
    cr_expect_eq(eng_tok_token_to_id(t, "no-such-token", 13), -1);
    eng_tokenizer_free(t);
    eng_tokenizer_free(NULL);
}

Test(tokenizer, load_roberta) {
    eng_tokenizer *t = load(ROBERTA_DIR);
    cr_expect_eq(eng_tokenizer_kind(t), ENG_TOK_BPE);
    cr_expect_eq(eng_tokenizer_vocab_size(t), 50265);
    cr_expect_eq(eng_tokenizer_cls_id(t), 0);
    cr_expect_eq(eng_tokenizer_sep_id(t), 2);
    cr_expect_eq(eng_tokenizer_pad_id(t), 1);
    cr_expect_eq(eng_tokenizer_unk_id(t), 3);
    cr_expect_eq(eng_tokenizer_mask_id(t), 50264);
    cr_expect_eq(eng_tokenizer_max_length(t), 512);
    cr_expect_str_eq(eng_tok_id_to_token(t, 232), "\xc4\xa0world"); /* "Ġworld" */
    eng_tokenizer_free(t);
}

static char tmpdir_buf[1024];
static const char *make_dir(void) {
    cr_assert_not_null(mkdtemp(test_tmp_template(tmpdir_buf, sizeof tmpdir_buf, "tok")));
    return tmpdir_buf;
}
static void write_file(const char *dir, const char *name, const char *content) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs(content, f);
    fclose(f);
}
static void copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    FILE *f = fopen(a, "rb"), *g = fopen(b, "wb");
    cr_assert(f && g);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, g);
    fclose(f);
    fclose(g);
}
static void remove_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

Test(tokenizer, load_errors) {
    eng_err err = {0};
    eng_tokenizer *t = (eng_tokenizer *)1;
    cr_expect_eq(eng_tokenizer_load("/nonexistent/dir", &t, &err), ENG_NOT_FOUND);
    cr_expect_null(t);
    cr_expect_neq(err.msg[0], '\0');

    const char *d = make_dir();
    write_file(d, "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": ");
    cr_expect_eq(eng_tokenizer_load(d, &t, &err), ENG_FORMAT, "%s", err.msg);
    write_file(d, "tokenizer.json",
               "{\"model\": {\"type\": \"Unigram\", \"vocab\": {}}, \"normalizer\": null, \"pre_tokenizer\": null}");
    cr_expect_eq(eng_tokenizer_load(d, &t, &err), ENG_FORMAT, "%s", err.msg); /* a Unigram vocab is a list */
    write_file(d, "tokenizer.json",
               "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0, \"a\": 1}}, "
               "\"normalizer\": {\"type\": \"Prepend\"}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}");
    cr_expect_eq(eng_tokenizer_load(d, &t, &err), ENG_UNSUPPORTED, "%s", err.msg);
    cr_expect(strstr(err.msg, "Prepend") != NULL, "%s", err.msg);
    remove_dir(d);
}

/* Found by the tokenizer fuzz harness: a vocab.json id past int32 was truncated (1788888888888888
 * became 650 million) and sized a 5 GB id table. Ids over the limit, or past int32, are refused. */
Test(tokenizer, huge_token_ids_are_refused) {
    eng_err err = {0};
    eng_tokenizer *t = NULL;
    const char *d = make_dir();
    write_file(d, "merges.txt", "#version: 0.2\na b\n");
    write_file(d, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 1788888888888888}");
    cr_expect_eq(eng_tokenizer_load(d, &t, &err), ENG_FORMAT, "%s", err.msg);
    cr_expect(strstr(err.msg, "1788888888888888") != NULL, "%s", err.msg);
    write_file(d, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 4294967298}"); /* 2^32 + 2: not id 2 */
    cr_expect_eq(eng_tokenizer_load(d, &t, &err), ENG_FORMAT, "%s", err.msg);
    write_file(d, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    cr_expect_eq(eng_tokenizer_load(d, &t, &err), 0, "%s", err.msg);
    eng_tokenizer_free(t);
    remove_dir(d);
}

/* The vocab-file fallbacks build the same pipeline as tokenizer.json. */
Test(tokenizer, fallback_files_match_tokenizer_json) {
    need_shared_tokenizers();
    static const char *texts[] = {"Hello world!", "Crème brûlée [MASK] <mask> 你好 😀", "don't  stop\tme\n", ""};
    const char *d = make_dir();
    copy_file(BERT_DIR, d, "vocab.txt");
    copy_file(BERT_DIR, d, "tokenizer_config.json");
    eng_tokenizer *a = load(BERT_DIR), *b = load(d);
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        eng_tok_encoding x = enc(a, texts[i]), y = enc(b, texts[i]);
        cr_assert_eq(x.n, y.n, "%s", texts[i]);
        cr_expect_arr_eq(x.ids, y.ids, x.n * sizeof *x.ids, "%s", texts[i]);
        cr_expect_arr_eq(x.offsets, y.offsets, 2 * x.n * sizeof *x.offsets, "%s", texts[i]);
        eng_tok_encoding_free(&x);
        eng_tok_encoding_free(&y);
    }
    eng_tokenizer_free(a);
    eng_tokenizer_free(b);
    remove_dir(d);

    d = make_dir();
    copy_file(ROBERTA_DIR, d, "vocab.json");
    copy_file(ROBERTA_DIR, d, "merges.txt");
    a = load(ROBERTA_DIR);
    b = load(d); /* no tokenizer_config.json at all: RoBERTa defaults */
    cr_expect_eq(eng_tokenizer_mask_id(b), 50264);
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        eng_tok_encoding x = enc(a, texts[i]), y = enc(b, texts[i]);
        cr_assert_eq(x.n, y.n, "%s", texts[i]);
        cr_expect_arr_eq(x.ids, y.ids, x.n * sizeof *x.ids, "%s", texts[i]);
        eng_tok_encoding_free(&x);
        eng_tok_encoding_free(&y);
    }
    eng_tokenizer_free(a);
    eng_tokenizer_free(b);
    remove_dir(d);
}

/* ---- WordPiece / BERT (ids from transformers.js, see the file comment) ---- */

Test(tokenizer, bert_ids) {
    eng_tokenizer *t = load(BERT_DIR);
    EXPECT_IDS(t, "Hello world!", 101, 7592, 2088, 999, 102);
    EXPECT_IDS(t, "héllo wörld", 101, 7592, 2088, 102);                 /* accents stripped */
    EXPECT_IDS(t, "Crème brûlée", 101, 13675, 21382, 7987, 9307, 2063, 102); /* cr ##eme br ##ule ##e */
    EXPECT_IDS(t, "ΟΔΟΣ", 101, 1169, 29722, 15297, 102);                /* final sigma: ##ος */
    EXPECT_IDS(t, "don't stop", 101, 2123, 1005, 1056, 2644, 102);      /* punctuation split */
    EXPECT_IDS(t, "a😀b", 101, 100, 102);                              /* one word, unknown piece: [UNK] */
    EXPECT_IDS(t, "你好", 101, 100, 100, 102);                          /* CJK split per character */
    EXPECT_IDS(t, "[MASK]", 101, 103, 102);                             /* special token in the text */
    EXPECT_IDS(t, "x<mask>y", 101, 1060, 1026, 7308, 1028, 1061, 102);
    char longw[102];
    memset(longw, 'a', 101);
    longw[101] = '\0';
    EXPECT_IDS(t, longw, 101, 100, 102); /* > max_input_chars_per_word */
    eng_tokenizer_free(t);
}

Test(tokenizer, bert_control_and_nul) {
    eng_tokenizer *t = load(BERT_DIR);
    /* clean_text drops NUL and control characters: "a\0b" is "ab" (transformers.js: 101 11113 102) */
    eng_tok_encoding e = enc_pair(t, "a\0b", 3, NULL, 0, NULL);
    cr_assert_eq(e.n, 3);
    cr_expect_eq(e.ids[1], 11113);
    /* the token spans the original "a\0b", three code points */
    cr_expect_eq(e.offsets[2], 0);
    cr_expect_eq(e.offsets[3], 3);
    eng_tok_encoding_free(&e);
    /* U+200B is Cf: removed, one word "zerowidth" (transformers.js: zero ##wi ##dt ##h) */
    EXPECT_IDS(t, "zero\xe2\x80\x8bwidth", 101, 5717, 9148, 11927, 2232, 102);
    eng_tokenizer_free(t);
}

Test(tokenizer, bert_offsets_are_code_points) {
    eng_tokenizer *t = load(BERT_DIR);
    eng_tok_encoding e = enc(t, "Hello world!");
    EXPECT_OFFSETS(&e, 0, 0, 0, 5, 6, 11, 11, 12, 0, 0);
    cr_expect_eq(e.special_mask[0], 1);
    cr_expect_eq(e.special_mask[1], 0);
    cr_expect_eq(e.seq_ids[0], -1);
    cr_expect_eq(e.seq_ids[1], 0);
    eng_tok_encoding_free(&e);
    /* "héllo wörld": é and ö are 2 bytes but 1 code point */
    e = enc(t, "h\xc3\xa9llo w\xc3\xb6rld");
    EXPECT_OFFSETS(&e, 0, 0, 0, 5, 6, 11, 0, 0);
    cr_expect_eq(e.byte_offsets[2], 0);
    cr_expect_eq(e.byte_offsets[3], 6);
    cr_expect_eq(e.byte_offsets[4], 7);
    cr_expect_eq(e.byte_offsets[5], 13);
    eng_tok_encoding_free(&e);
    /* "Crème" -> cr ##eme: pieces map back through the decomposition */
    e = enc(t, "Cr\xc3\xa8me");
    EXPECT_OFFSETS(&e, 0, 0, 0, 2, 2, 5, 0, 0);
    eng_tok_encoding_free(&e);
    /* an emoji is one code point (two UTF-16 units in JavaScript) */
    e = enc(t, "\xf0\x9f\x98\x80 ok");
    EXPECT_OFFSETS(&e, 0, 0, 0, 1, 2, 4, 0, 0);
    eng_tok_encoding_free(&e);
    eng_tokenizer_free(t);
}

Test(tokenizer, bert_pair_type_ids_and_offsets) {
    eng_tokenizer *t = load(BERT_DIR);
    /* transformers.js: 101 2054 2003 2009 1029 102 2009 2003 1037 3231 1012 102 */
    const char *a = "What is it?", *b = "It is a test.";
    eng_tok_encoding e = enc_pair(t, a, strlen(a), b, strlen(b), NULL);
    const int32_t ids[] = {101, 2054, 2003, 2009, 1029, 102, 2009, 2003, 1037, 3231, 1012, 102};
    const int32_t types[] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
    cr_assert_eq(e.n, 12);
    cr_expect_arr_eq(e.ids, ids, sizeof ids);
    cr_expect_arr_eq(e.type_ids, types, sizeof types);
    /* pair tokens are offsets into the pair text */
    cr_expect_eq(e.offsets[2 * 6], 0);
    cr_expect_eq(e.offsets[2 * 6 + 1], 2);
    cr_expect_eq(e.seq_ids[6], 1);
    cr_expect_eq(e.special_mask[11], 1);
    eng_tok_encoding_free(&e);
    eng_tokenizer_free(t);
}

/* ---- byte-level BPE / RoBERTa ---- */

Test(tokenizer, roberta_ids) {
    eng_tokenizer *t = load(ROBERTA_DIR);
    EXPECT_IDS(t, "Hello world!", 0, 31414, 232, 328, 2);
    EXPECT_IDS(t, "héllo wörld", 0, 298, 1140, 9905, 885, 17920, 4779, 2);
    EXPECT_IDS(t, "a😀b", 0, 102, 18636, 7471, 428, 2);
    EXPECT_IDS(t, "ΟΔΟΣ", 0, 41335, 4333, 41335, 10674, 41335, 4333, 41335, 2469, 2);
    EXPECT_IDS(t, "[MASK]", 0, 10975, 32804, 530, 742, 2);
    EXPECT_IDS(t, "x<mask>y", 0, 1178, 50264, 219, 2);
    EXPECT_IDS(t, "I <mask> you", 0, 100, 50264, 47, 2); /* <mask> lstrip eats the space before it */
    EXPECT_IDS(t, "don't stop", 0, 7254, 75, 912, 2);
    EXPECT_IDS(t, "你好", 0, 47856, 21402, 48975, 10809, 2);
    char longw[102];
    memset(longw, 'a', 101);
    longw[101] = '\0';
    /* transformers.js: 25 x "aaaa" (44172) then "a" (102) */
    eng_tok_encoding e = enc(t, longw);
    cr_assert_eq(e.n, 28);
    for (int i = 1; i <= 25; i++) cr_expect_eq(e.ids[i], 44172);
    cr_expect_eq(e.ids[26], 102);
    eng_tok_encoding_free(&e);
    /* NUL is a byte like any other: "Ā" (50108) */
    e = enc_pair(t, "a\0b", 3, NULL, 0, NULL);
    const int32_t want[] = {0, 102, 50108, 428, 2};
    cr_assert_eq(e.n, 5);
    cr_expect_arr_eq(e.ids, want, sizeof want);
    eng_tok_encoding_free(&e);
    eng_tokenizer_free(t);
}

Test(tokenizer, roberta_offsets) {
    eng_tokenizer *t = load(ROBERTA_DIR);
    /* trim_offsets: "Ġworld" spans "world", not " world" */
    eng_tok_encoding e = enc(t, "Hello world!");
    EXPECT_OFFSETS(&e, 0, 0, 0, 5, 6, 11, 11, 12, 0, 0);
    eng_tok_encoding_free(&e);
    /* byte fragments of one emoji both span the whole character (code point 1..2) */
    e = enc(t, "a\xf0\x9f\x98\x80" "b");
    EXPECT_OFFSETS(&e, 0, 0, 0, 1, 1, 2, 1, 2, 2, 3, 0, 0);
    cr_expect_eq(e.byte_offsets[2 * 2], 1);
    cr_expect_eq(e.byte_offsets[2 * 2 + 1], 5);
    eng_tok_encoding_free(&e);
    /* pair: <s> A </s></s> B </s>, all type ids 0 (the Python library's RobertaProcessing) */
    e = enc_pair(t, "What is it?", 11, "It is a test.", 13, NULL);
    const int32_t ids[] = {0, 2264, 16, 24, 116, 2, 2, 243, 16, 10, 1296, 4, 2};
    cr_assert_eq(e.n, 13);
    cr_expect_arr_eq(e.ids, ids, sizeof ids);
    for (size_t i = 0; i < e.n; i++) cr_expect_eq(e.type_ids[i], 0);
    cr_expect_eq(e.offsets[2 * 8], 3); /* "Ġis" in "It is a test." */
    cr_expect_eq(e.offsets[2 * 8 + 1], 5);
    eng_tok_encoding_free(&e);
    eng_tokenizer_free(t);
}

/* Reference (quadratic) and fast (heap) BPE merges agree on random words. */
Test(tokenizer, bpe_merge_simple_equals_heap) {
    eng_tokenizer *t = load(ROBERTA_DIR);
    eng__tok_ctx ctx = {0};
    unsigned seed = 7;
    const char alphabet[] = "aeioustrnlh'.,-0123 ";
    int32_t s1[300], s2[300];
    uint32_t p1[301], p2[301];
    for (int iter = 0; iter < 2000; iter++) {
        int n = 1 + (int)test_rand_below(&seed, 200);
        for (int i = 0; i < n; i++) {
            uint8_t b = iter % 3 ? (uint8_t)alphabet[test_rand_below(&seed, sizeof alphabet - 1)]
                                : (uint8_t)test_rand_below(&seed, 256);
            s1[i] = s2[i] = t->byte_sym[b];
            p1[i] = p2[i] = (uint32_t)i;
        }
        int k1 = eng__bpe_merge_simple(t, &ctx, s1, p1, n);
        int k2 = eng__bpe_merge_heap(t, &ctx, s2, p2, n);
        cr_assert_eq(k1, k2, "iteration %d: %d vs %d symbols", iter, k1, k2);
        cr_assert_arr_eq(s1, s2, (size_t)k1 * sizeof *s1, "iteration %d", iter);
        cr_assert_arr_eq(p1, p2, (size_t)k1 * sizeof *p1, "iteration %d", iter);
    }
    eng__ctx_free(&ctx);
    eng_tokenizer_free(t);
}

/* ---- truncation (the Python library's truncate_encodings) ---- */

Test(tokenizer, truncation) {
    eng_tokenizer *t = load(BERT_DIR);
    /* transformers.js without special tokens: A = 2028 2048 2093 2176 2274 2416 2698 2809 (8 tokens),
     * B = 6541 8247 (2); max 9 leaves 6 for the sequences: longest_first cuts A to 4 */
    const char *a = "one two three four five six seven eight", *b = "alpha beta";
    eng_tok_params p = eng_tok_default_params();
    p.max_length = 9;
    eng_tok_encoding e = enc_pair(t, a, strlen(a), b, strlen(b), &p);
    cr_assert_eq(e.n, 9);
    const int32_t w9[] = {101, 2028, 2048, 2093, 2176, 102, 6541, 8247, 102}; /* ends with [SEP], unlike transformers.js */
    const int32_t t9[] = {0, 0, 0, 0, 0, 0, 1, 1, 1};
    cr_expect_arr_eq(e.ids, w9, sizeof w9);
    cr_expect_arr_eq(e.type_ids, t9, sizeof t9);
    eng_tok_encoding_free(&e);
    /* both long: split evenly, the second gets the odd one */
    p.max_length = 8; /* 5 for sequences: A 2, B 3 */
    e = enc_pair(t, a, strlen(a), a, strlen(a), &p);
    const int32_t w8[] = {101, 2028, 2048, 102, 2028, 2048, 2093, 102};
    cr_assert_eq(e.n, 8);
    cr_expect_arr_eq(e.ids, w8, sizeof w8);
    eng_tok_encoding_free(&e);
    /* single */
    p.max_length = 4;
    e = enc_pair(t, a, strlen(a), NULL, 0, &p);
    cr_assert_eq(e.n, 4);
    cr_expect_eq(e.ids[3], 102);
    eng_tok_encoding_free(&e);
    /* only_first that cannot fit, and a max_length below the special tokens: errors, output zeroed */
    eng_err err = {0};
    p.truncation = ENG_TOK_TRUNCATE_ONLY_FIRST;
    p.max_length = 6; /* 3 for the sequences: B keeps its 2, A loses 7 of its 8 */
    cr_expect_eq(eng_tok_encode(t, a, strlen(a), b, strlen(b), &p, &e, &err), 0, "%s", err.msg);
    const int32_t w6[] = {101, 2028, 102, 6541, 8247, 102};
    cr_assert_eq(e.n, 6);
    cr_expect_arr_eq(e.ids, w6, sizeof w6);
    eng_tok_encoding_free(&e);
    cr_expect_eq(eng_tok_encode(t, "x", 1, a, strlen(a), &p, &e, &err), ENG_INVALID_ARGUMENT);
    cr_expect_eq(e.n, 0);
    cr_expect_null(e.ids);
    p.truncation = ENG_TOK_TRUNCATE_LONGEST_FIRST;
    p.max_length = 2;
    cr_expect_eq(eng_tok_encode(t, a, strlen(a), b, strlen(b), &p, &e, &err), ENG_INVALID_ARGUMENT);
    /* default: the model's 512 */
    eng_tok_params d = eng_tok_default_params();
    size_t n = 3000;
    char *big = malloc(n * 2);
    for (size_t i = 0; i < n; i++) big[2 * i] = 'x', big[2 * i + 1] = ' ';
    e = enc_pair(t, big, n * 2, NULL, 0, &d);
    cr_expect_eq(e.n, 512);
    eng_tok_encoding_free(&e);
    d.truncation = ENG_TOK_TRUNCATE_NONE;
    e = enc_pair(t, big, n * 2, NULL, 0, &d);
    cr_expect_eq(e.n, n + 2);
    eng_tok_encoding_free(&e);
    free(big);
    eng_tokenizer_free(t);
}

/* ---- robustness ---- */

Test(tokenizer, invalid_utf8_is_an_error) {
    static const char *bad[] = {"\x80", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ok\xff", "\xe2\x82"};
    eng_tokenizer *ts[2] = {load(BERT_DIR), load(ROBERTA_DIR)};
    for (int m = 0; m < 2; m++)
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            eng_tok_encoding e;
            eng_err err = {0};
            int rc = eng_tok_encode(ts[m], bad[i], strlen(bad[i]), NULL, 0, NULL, &e, &err);
            cr_expect_eq(rc, ENG_INVALID_ARGUMENT, "case %zu", i);
            cr_expect(strstr(err.msg, "UTF-8") != NULL, "%s", err.msg);
            cr_expect_eq(e.n, 0);
            rc = eng_tok_encode(ts[m], "fine", 4, bad[i], strlen(bad[i]), NULL, &e, &err);
            cr_expect_eq(rc, ENG_INVALID_ARGUMENT, "pair case %zu", i);
            cr_expect(strstr(err.msg, "pair") != NULL, "%s", err.msg);
        }
    eng_tokenizer_free(ts[0]);
    eng_tokenizer_free(ts[1]);
}

Test(tokenizer, empty_inputs) {
    eng_tokenizer *b = load(BERT_DIR), *r = load(ROBERTA_DIR);
    EXPECT_IDS(b, "", 101, 102);
    EXPECT_IDS(b, " \t\n ", 101, 102);
    EXPECT_IDS(r, "", 0, 2);
    eng_tok_encoding e = enc_pair(b, NULL, 0, "", 0, NULL); /* NULL with length 0 is the empty text */
    const int32_t w[] = {101, 102, 102};
    cr_assert_eq(e.n, 3);
    cr_expect_arr_eq(e.ids, w, sizeof w);
    eng_tok_encoding_free(&e);
    eng_tok_params p = eng_tok_default_params();
    p.add_special_tokens = 0;
    e = enc_pair(r, "", 0, NULL, 0, &p);
    cr_expect_eq(e.n, 0);
    eng_tok_encoding_free(&e);
    eng_tok_encoding_free(&e); /* twice is fine: zeroed */
    eng_tok_encoding_free(NULL);
    eng_tokenizer_free(b);
    eng_tokenizer_free(r);
}

/* 1 MB of mixed text (ASCII, accents, CJK, emoji, controls, combining marks) and a 1 MB single word. */
Test(tokenizer, one_megabyte_inputs, .timeout = 60) {
    static const char *parts[] = {"The quick brown fox ", "jumps over ", "Crème brûlée ", "你好世界 ", "😀👨‍👩‍👧 ",
                                  "a\xcc\x81\xcc\x82 ", "\x01\x1f\t\n", "[MASK] <mask> ", "don't ", "12,345.67 "};
    size_t cap = 1 << 20, n = 0;
    char *s = malloc(cap + 64);
    for (int i = 0; n < cap; i++) {
        const char *p = parts[i % 10];
        size_t l = strlen(p);
        memcpy(s + n, p, l);
        n += l;
    }
    eng_tokenizer *ts[2] = {load(BERT_DIR), load(ROBERTA_DIR)};
    eng_tok_params p = eng_tok_default_params();
    p.truncation = ENG_TOK_TRUNCATE_NONE;
    for (int m = 0; m < 2; m++) {
        eng_tok_encoding e = enc_pair(ts[m], s, n, NULL, 0, &p);
        cr_expect_gt(e.n, 100000);
        int32_t prev = 0;
        for (size_t i = 1; i + 1 < e.n; i++) { /* spans ordered and inside the text */
            cr_assert_leq(e.byte_offsets[2 * i + 1], (int32_t)n);
            cr_assert_geq(e.offsets[2 * i], prev);
            prev = e.offsets[2 * i];
        }
        eng_tok_encoding_free(&e);
        e = enc_pair(ts[m], s, n, NULL, 0, NULL);
        cr_expect_eq(e.n, 512);
        eng_tok_encoding_free(&e);
    }
    memset(s, 'a', cap); /* one 1 MB word: [UNK] for WordPiece, the heap BPE path for RoBERTa */
    EXPECT_IDS(ts[0], "", 101, 102);
    eng_tok_encoding e = enc_pair(ts[0], s, cap, NULL, 0, &p);
    cr_expect_eq(e.n, 3);
    cr_expect_eq(e.ids[1], 100);
    eng_tok_encoding_free(&e);
    e = enc_pair(ts[1], s, cap, NULL, 0, &p);
    cr_expect_eq(e.n, cap / 4 + 2); /* "aaaa" x 262144 */
    cr_expect_eq(e.ids[1], 44172);
    eng_tok_encoding_free(&e);
    free(s);
    eng_tokenizer_free(ts[0]);
    eng_tokenizer_free(ts[1]);
}

/* ---- threads: one tokenizer, many encoders, the shared BPE cache ---- */

typedef struct {
    const eng_tokenizer *tok;
    int fails;
} thread_arg;

static const char *thread_texts[] = {"Hello world!", "the the the quick brown fox", "Crème brûlée 😀 你好",
                                     "AP - A company founded by a chemistry researcher", "don't stop me now"};

static void *thread_main(void *p) {
    thread_arg *a = p;
    eng_tok_encoding ref[5];
    for (int i = 0; i < 5; i++) eng_tok_encode(a->tok, thread_texts[i], strlen(thread_texts[i]), NULL, 0, NULL, &ref[i], NULL);
    for (int it = 0; it < 300; it++) {
        int i = it % 5;
        eng_tok_encoding e;
        if (eng_tok_encode(a->tok, thread_texts[i], strlen(thread_texts[i]), NULL, 0, NULL, &e, NULL) || e.n != ref[i].n ||
            memcmp(e.ids, ref[i].ids, e.n * sizeof *e.ids))
            a->fails++;
        eng_tok_encoding_free(&e);
    }
    for (int i = 0; i < 5; i++) eng_tok_encoding_free(&ref[i]);
    return NULL;
}

Test(tokenizer, concurrent_encodes) {
    eng_tokenizer *t = load(ROBERTA_DIR);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){t, 0};
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(args[i].fails, 0, "thread %d", i);
    }
    eng_tokenizer_free(t);
}

/* eng_tok_encoding_alloc: the arrays an encoding of n tokens has (the server fills them for ids
 * sent instead of text): all zero, each its full length, none overlapping another (each filled
 * with its own pattern, then all read back), aligned for their types; freed as one block. */
Test(tokenizer, encoding_alloc_gives_separate_zeroed_arrays) {
    const size_t sizes[] = {0, 1, 3, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        eng_tok_encoding e;
        memset(&e, 0xAB, sizeof e);
        cr_assert_eq(eng_tok_encoding_alloc(&e, n), 0);
        cr_assert_eq(e.n, n);
        cr_assert(e.ids && e.type_ids && e.offsets && e.byte_offsets && e.seq_ids && e.special_mask);
        cr_assert_eq((uintptr_t)e.offsets % sizeof(int32_t), 0);
        cr_assert_eq((uintptr_t)e.byte_offsets % sizeof(int32_t), 0);
        for (size_t i = 0; i < n; i++) {
            cr_assert(!e.ids[i] && !e.type_ids[i] && !e.offsets[2 * i] && !e.offsets[2 * i + 1] && !e.byte_offsets[2 * i] &&
                          !e.byte_offsets[2 * i + 1] && !e.seq_ids[i] && !e.special_mask[i],
                      "n %zu: token %zu is not zeroed", n, i);
        }
        for (size_t i = 0; i < n; i++) {
            e.ids[i] = (int32_t)(1000000 + i);
            e.type_ids[i] = (int32_t)(2000000 + i);
            e.offsets[2 * i] = (int32_t)(3000000 + i), e.offsets[2 * i + 1] = (int32_t)(4000000 + i);
            e.byte_offsets[2 * i] = (int32_t)(5000000 + i), e.byte_offsets[2 * i + 1] = (int32_t)(6000000 + i);
            e.seq_ids[i] = (int8_t)(i % 100);
            e.special_mask[i] = (uint8_t)(200 - i % 50);
        }
        for (size_t i = 0; i < n; i++) {
            cr_assert(e.ids[i] == (int32_t)(1000000 + i) && e.type_ids[i] == (int32_t)(2000000 + i) &&
                          e.offsets[2 * i] == (int32_t)(3000000 + i) && e.offsets[2 * i + 1] == (int32_t)(4000000 + i) &&
                          e.byte_offsets[2 * i] == (int32_t)(5000000 + i) &&
                          e.byte_offsets[2 * i + 1] == (int32_t)(6000000 + i) && e.seq_ids[i] == (int8_t)(i % 100) &&
                          e.special_mask[i] == (uint8_t)(200 - i % 50),
                      "n %zu: token %zu was overwritten by another array", n, i);
        }
        eng_tok_encoding_free(&e);
        cr_assert(!e.ids && !e.n, "free zeroes the encoding");
    }
}

/* Reads dir/name whole into a new buffer (NULL when absent). */
static char *slurp(const char *dir, const char *name, size_t *len) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *buf = NULL;
    eng_err err = {0};
    *len = 0;
    if (!eng_file_exists(p)) return NULL;
    cr_assert_eq(eng_file_read(p, (size_t)1 << 30, &buf, len, &err), 0, "%s", err.msg);
    return buf;
}

static void expect_same_encodings(const eng_tokenizer *a, const eng_tokenizer *b, const char *const *texts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        eng_tok_encoding x = enc(a, texts[i]), y = enc(b, texts[i]);
        cr_expect_eq(x.n, y.n, "%s", texts[i]);
        if (x.n == y.n) {
            cr_expect_arr_eq(x.ids, y.ids, x.n * sizeof *x.ids, "%s", texts[i]);
            cr_expect_arr_eq(x.byte_offsets, y.byte_offsets, 2 * x.n * sizeof *x.byte_offsets, "%s", texts[i]);
        }
        eng_tok_encoding_free(&x);
        eng_tok_encoding_free(&y);
    }
}

/* eng_tokenizer_load_files on a folder's bytes builds the tokenizer eng_tokenizer_load builds from
 * the folder (tokenizer.json and the vocab-file fallbacks), and a tokenizer.json that is cut short
 * is refused from memory as from a file. */
Test(tokenizer, load_files_matches_folder) {
    need_shared_tokenizers();
    static const char *texts[] = {"Hello world!", "Crème brûlée [MASK] <mask> 你好 😀", "don't  stop\tme\n", ""};
    const char *dirs[] = {BERT_DIR, ROBERTA_DIR};
    for (int k = 0; k < 2; k++) {
        char *bufs[3];
        eng_tok_files f = {.dir = dirs[k]};
        bufs[0] = slurp(dirs[k], "tokenizer.json", &f.tokenizer_json.len);
        bufs[1] = slurp(dirs[k], "tokenizer_config.json", &f.tokenizer_config_json.len);
        bufs[2] = NULL;
        f.tokenizer_json.text = bufs[0], f.tokenizer_config_json.text = bufs[1];
        cr_assert_not_null(bufs[0]);
        eng_tokenizer *a = load(dirs[k]), *b = NULL;
        eng_err err = {0};
        cr_assert_eq(eng_tokenizer_load_files(&f, &b, &err), 0, "%s", err.msg);
        expect_same_encodings(a, b, texts, sizeof texts / sizeof *texts);
        eng_tokenizer_free(b);
        f.tokenizer_json.len /= 2;
        cr_expect_eq(eng_tokenizer_load_files(&f, &b, &err), ENG_FORMAT, "%s", err.msg);
        cr_expect(strstr(err.msg, "tokenizer.json") != NULL, "%s", err.msg);
        eng_tokenizer_free(a);
        for (int i = 0; i < 3; i++) free(bufs[i]);
    }
    eng_tok_files none = {.dir = NULL};
    eng_tokenizer *t = (eng_tokenizer *)1;
    eng_err err = {0};
    cr_expect_eq(eng_tokenizer_load_files(&none, &t, &err), ENG_NOT_FOUND, "%s", err.msg);
    cr_expect_null(t);
}

/* The BPE word cache sized for a small vocabulary (4 ways a shard, 256 entries) under 729 distinct
 * words: a lookup either misses or returns exactly what was stored for that word, never another
 * word's tokens, and the words stored last are found. */
Test(tokenizer, small_bpe_cache_never_mixes_words) {
    eng__bpe_cache *c = eng__bpe_cache_new(9);
    cr_assert_not_null(c);
    enum { N = 729 }; /* every 6-letter word over {a, b, c} */
    char w[N][6];
    for (int x = 0; x < N; x++)
        for (int i = 0, v = x; i < 6; i++, v /= 3) w[x][i] = (char)('a' + v % 3);
    int hits = 0, misses = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int x = 0; x < N; x++) {
            int32_t ids[ENG__CACHE_TOK_MAX];
            uint8_t ends[ENG__CACHE_TOK_MAX];
            int k = eng__bpe_cache_get(c, (const uint8_t *)w[x], 6, ids, ends);
            if (k < 0) {
                misses++;
                int32_t put_ids[3] = {x, x + 1000, x + 2000};
                uint8_t put_ends[3] = {1, 3, 6};
                eng__bpe_cache_put(c, (const uint8_t *)w[x], 6, put_ids, put_ends, 3);
                continue;
            }
            hits++;
            cr_expect_eq(k, 3, "word %d", x);
            cr_expect(ids[0] == x && ids[1] == x + 1000 && ids[2] == x + 2000, "word %d got the tokens of %d", x, ids[0]);
            cr_expect(ends[0] == 1 && ends[1] == 3 && ends[2] == 6, "word %d", x);
        }
    cr_expect_gt(misses, N, "a 256-entry cache cannot hold 729 words");
    cr_expect_gt(hits, 0);
    int32_t ids[ENG__CACHE_TOK_MAX];
    uint8_t ends[ENG__CACHE_TOK_MAX];
    cr_expect_eq(eng__bpe_cache_get(c, (const uint8_t *)w[N - 1], 6, ids, ends), 3, "the last word stored is found");
    eng__bpe_cache_free(c);
}

/* The start of a tokenizer.json of five WordPiece tokens, up to its post_processor's value. */
#define TINY_WORDPIECE_JSON                                                                                      \
    "{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\","   \
    " \"vocab\": {\"[PAD]\": 0, \"[UNK]\": 1, \"[CLS]\": 2, \"[SEP]\": 3, \"hello\": 4}},"                      \
    " \"normalizer\": {\"type\": \"BertNormalizer\", \"lowercase\": true},"                                    \
    " \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, \"post_processor\": "

/* A post-processor whose special token ids are not ids of the vocabulary (found by fuzz_tokenizer:
 * TemplateProcessing's "[CLS]" with "ids": [22] over a 14-entry vocabulary encoded id 22, which
 * the model's embedding table does not have) is refused at load, naming the id; the same file
 * with the id in range loads and encodes it. Also BertProcessing's [token, id] pairs. */
Test(tokenizer, post_processor_ids_must_be_in_the_vocabulary) {
    static const char *fmt = TINY_WORDPIECE_JSON "%s}";
    static const char *tpl =
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}},"
        " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
        " {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\","
        " \"ids\": [%d], \"tokens\": [\"[CLS]\"]}}}";
    static const char *bert = "{\"type\": \"BertProcessing\", \"cls\": [\"[CLS]\", %d], \"sep\": [\"[SEP]\", 3]}";
    const char *pps[2] = {tpl, bert};
    for (int k = 0; k < 2; k++)
        for (int id = -1; id <= 5; id++) {
            char pp[1024], json[2048];
            snprintf(pp, sizeof pp, pps[k], id);
            snprintf(json, sizeof json, fmt, pp);
            eng_tok_files f = {.dir = NULL, .tokenizer_json = {json, strlen(json)}};
            eng_tokenizer *t = NULL;
            eng_err err = {0};
            int rc = eng_tokenizer_load_files(&f, &t, &err);
            if (id < 0 || id > 4) {
                cr_expect_eq(rc, ENG_FORMAT, "post_processor %d, id %d: %s", k, id, err.msg);
                char want[32];
                snprintf(want, sizeof want, "id %d is not in the vocabulary", id);
                cr_expect(strstr(err.msg, want) != NULL, "%s", err.msg);
                cr_expect_null(t);
                continue;
            }
            cr_assert_eq(rc, 0, "post_processor %d, id %d: %s", k, id, err.msg);
            eng_tok_params p = eng_tok_default_params();
            eng_tok_encoding enc;
            cr_assert_eq(eng_tok_encode(t, "hello", 5, NULL, 0, &p, &enc, &err), 0, "%s", err.msg);
            cr_expect_geq(enc.n, 2);
            cr_expect_eq(enc.ids[0], id);
            eng_tok_encoding_free(&enc);
            eng_tokenizer_free(t);
        }
}

/* A template naming a sequence twice (found by fuzz_tokenizer: a pair template with B twice wrote
 * past the encoding, which is sized for each sequence once) is refused at load, naming the
 * sequence; the same template with B once loads and encodes a pair. */
Test(tokenizer, template_sequence_twice_is_refused) {
    static const char *fmt =
        TINY_WORDPIECE_JSON "{\"type\": \"TemplateProcessing\","
        " \"single\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"Sequence\": {\"id\": \"A\","
        " \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"B\","
        " \"type_id\": 1}}%s], \"special_tokens\": {\"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [3],"
        " \"tokens\": [\"[SEP]\"]}}}}";
    for (int twice = 0; twice < 2; twice++) {
        char json[2048];
        snprintf(json, sizeof json, fmt, twice ? ", {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}" : "");
        eng_tok_files f = {.dir = NULL, .tokenizer_json = {json, strlen(json)}};
        eng_tokenizer *t = NULL;
        eng_err err = {0};
        int rc = eng_tokenizer_load_files(&f, &t, &err);
        if (twice) {
            cr_expect_eq(rc, ENG_UNSUPPORTED, "%s", err.msg);
            cr_expect(strstr(err.msg, "sequence B appears twice") != NULL, "%s", err.msg);
            cr_expect_null(t);
            continue;
        }
        cr_assert_eq(rc, 0, "%s", err.msg);
        eng_tok_params p = eng_tok_default_params();
        eng_tok_encoding enc;
        cr_assert_eq(eng_tok_encode(t, "hello", 5, "hello hello", 11, &p, &enc, &err), 0, "%s", err.msg);
        cr_expect_eq(enc.n, 4); /* hello [SEP] hello hello */
        eng_tok_encoding_free(&enc);
        eng_tokenizer_free(t);
    }
}
