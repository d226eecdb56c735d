/* test_unigram.c - unit tests of the SentencePiece family in engine/tokenizer/ (unigram.c,
 * spm_model.c, precompiled.c, unorm.c, load_seq.c).
 *
 * Small vocabularies are written here so every expected segmentation can be worked out by hand from
 * the scores (each test says how); the real files of the shared data are checked against ids that
 * python3-sentencepiece 0.1.97 gives for the same text (sp.encode(text, out_type='immutable_proto'),
 * quoted in each test). The full comparison over ~16,000 inputs is tests/parity/tokenizer
 * (spm_parity.py, parity_json.mjs). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/files.h"
#include "engine/tokenizer.h"
#include "tokenizer/tok_internal.h"
#include "tok_json.h"

static eng_tok_encoding enc(const eng_tokenizer *tok, const char *s) {
    eng_tok_encoding e;
    eng_err err = {0};
    eng_tok_params p = eng_tok_default_params();
    cr_assert_eq(eng_tok_encode(tok, s, strlen(s), NULL, 0, &p, &e, &err), 0, "%s", err.msg);
    return e;
}

/* ids and code point offsets (s0, e0, s1, e1, ...) of text */
static void expect(const eng_tokenizer *tok, const char *text, const int32_t *ids, const int32_t *offs, size_t n) {
    eng_tok_encoding e = enc(tok, text);
    cr_expect_eq(e.n, n, "\"%s\": %zu tokens, want %zu", text, e.n, n);
    for (size_t i = 0; i < n && i < e.n; i++) {
        cr_expect_eq(e.ids[i], ids[i], "\"%s\" token %zu: id %d, want %d", text, i, e.ids[i], ids[i]);
        if (offs) {
            cr_expect_eq(e.offsets[2 * i], offs[2 * i], "\"%s\" token %zu start %d want %d", text, i, e.offsets[2 * i],
                         offs[2 * i]);
            cr_expect_eq(e.offsets[2 * i + 1], offs[2 * i + 1], "\"%s\" token %zu end %d want %d", text, i,
                         e.offsets[2 * i + 1], offs[2 * i + 1]);
        }
    }
    eng_tok_encoding_free(&e);
}

/* ids: 0 <unk>, 1 ▁, 2 ▁a, 3 b, 4 ab, 5 ▁ab, 6 a, 7 <0xC3>, 8 <0xA9> */
#define UNI_VOCAB                                                                                                   \
    "[[\"<unk>\", 0.0], [\"\\u2581\", -2.0], [\"\\u2581a\", -1.5], [\"b\", -3.0], [\"ab\", -2.5], [\"\\u2581ab\", " \
    "-2.0], [\"a\", -4.0], [\"<0xC3>\", -5.0], [\"<0xA9>\", -5.0]]"

static eng_tokenizer *uni(bool byte_fallback) {
    static char buf[2048];
    snprintf(buf, sizeof buf,
             "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": %s, \"vocab\": " UNI_VOCAB "},"
             " \"normalizer\": null,"
             " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\","
             " \"split\": true}, \"post_processor\": null}",
             byte_fallback ? "true" : "false");
    return load_json(buf);
}

Test(unigram, viterbi_takes_the_best_total_score) {
    eng_tokenizer *t = uni(false);
    cr_expect_eq(eng_tokenizer_kind(t), ENG_TOK_UNIGRAM);
    /* "▁ab": ▁ab -2.0 beats ▁a+b -4.5, ▁+ab -4.5, ▁+a+b -9.0 */
    expect(t, "ab", (int32_t[]){5}, (int32_t[]){0, 2}, 1);
    /* "▁abab" is one Metaspace word: ▁ab+ab -4.5 beats ▁a+b+ab -7.0 and ▁ab+a+b -9.0 */
    expect(t, "abab", (int32_t[]){5, 4}, (int32_t[]){0, 2, 2, 4}, 2);
    /* "b": "▁b" has no piece: ▁ + b = -5.0 */
    expect(t, "b", (int32_t[]){1, 3}, (int32_t[]){0, 0, 0, 1}, 2);
    /* the space becomes ▁ and starts the second word, spanning the space */
    expect(t, "ab ab", (int32_t[]){5, 5}, (int32_t[]){0, 2, 2, 5}, 2);
    eng_tokenizer_free(t);
}

Test(unigram, unknowns_fuse_into_one_token) {
    eng_tokenizer *t = uni(false);
    /* "▁xyz": ▁ then x, y, z unknown (min score -5 - 10 each), fused as Hugging Face's fuse_unk */
    expect(t, "ab xyz", (int32_t[]){5, 1, 0}, (int32_t[]){0, 2, 2, 3, 3, 6}, 3);
    /* byte fallback with every byte present: é is C3 A9, each byte token spans the character */
    eng_tokenizer_free(t);
    t = uni(true);
    expect(t, "é", (int32_t[]){1, 7, 8}, (int32_t[]){0, 0, 0, 1, 0, 1}, 3);
    /* ü is C3 BC: <0xBC> is missing, so the character stays unknown */
    expect(t, "ü", (int32_t[]){1, 0}, (int32_t[]){0, 0, 0, 1}, 2);
    eng_tokenizer_free(t);
}

Test(unigram, normalizer_sequence_and_prepend_scheme) {
    const char *json =
        "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": " UNI_VOCAB "},"
        " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, {\"type\": \"Lowercase\"},"
        "   {\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true},"
        "   {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": \"\\u2581\"}]},"
        " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\"},"
        " \"added_tokens\": [{\"id\": 6, \"content\": \"<a>\", \"special\": true, \"normalized\": false}]}";
    eng_tokenizer *t = load_json(json);
    /* NFKC turns fullwidth ＡＢ into AB, Lowercase into ab; Strip drops the outer spaces; "  " becomes
     * one ▁ spanning both spaces */
    expect(t, " ＡＢ  ab ", (int32_t[]){5, 5}, (int32_t[]){1, 3, 3, 7}, 2);
    /* prepend_scheme first: the section after an added token gets no ▁ */
    expect(t, "ab<a>ab", (int32_t[]){5, 6, 4}, (int32_t[]){0, 2, 2, 5, 5, 7}, 3);
    eng_tokenizer_free(t);
}

/* ---- SentencePiece ModelProto written by hand ---- */

typedef struct {
    uint8_t b[4096];
    size_t n;
} pbuf;

static void put_varint(pbuf *p, uint64_t v) {
    do {
        uint8_t c = v & 0x7F;
        v >>= 7;
        p->b[p->n++] = (uint8_t)(c | (v ? 0x80 : 0));
    } while (v);
}
static void put_bytes(pbuf *p, int field, const void *s, size_t n) {
    put_varint(p, (uint64_t)field << 3 | 2);
    put_varint(p, n);
    memcpy(p->b + p->n, s, n);
    p->n += n;
}
static void put_int(pbuf *p, int field, uint64_t v) {
    put_varint(p, (uint64_t)field << 3);
    put_varint(p, v);
}

typedef struct {
    const char *piece;
    float score;
    int type;
} test_piece;

static pbuf spm(int model_type, const test_piece *pieces, int n) {
    pbuf m = {0};
    for (int i = 0; i < n; i++) {
        pbuf sp = {0};
        put_bytes(&sp, 1, pieces[i].piece, strlen(pieces[i].piece));
        put_varint(&sp, 2 << 3 | 5);
        memcpy(sp.b + sp.n, &pieces[i].score, 4);
        sp.n += 4;
        put_int(&sp, 3, (uint64_t)pieces[i].type);
        put_bytes(&m, 1, sp.b, sp.n);
    }
    pbuf tr = {0};
    put_int(&tr, 3, (uint64_t)model_type);
    put_int(&tr, 999, 7); /* an unknown field is skipped */
    put_bytes(&m, 2, tr.b, tr.n);
    return m;
}

/* 0 <unk>, 1 <s>, 2 </s>, 3 ▁, 4 ▁a, 5 b, 6 ab, 7 a */
static const test_piece PIECES[] = {{"<unk>", 0, 2}, {"<s>", 0, 3},    {"</s>", 0, 3},  {"\xe2\x96\x81", -2, 1},
                                    {"\xe2\x96\x81" "a", -1.5f, 1},   {"b", -3, 1},    {"ab", -2.5f, 1}, {"a", -4, 1}};

static eng_tokenizer *load_spm(const pbuf *m, const char *name, const char *cfg, int *rc) {
    eng_tok_files f = {.spm_model = {(const char *)m->b, m->n}, .spm_name = name};
    if (cfg) f.tokenizer_config_json = (eng_tok_text){cfg, strlen(cfg)};
    eng_err err = {0};
    eng_tokenizer *tok = NULL;
    *rc = eng_tokenizer_load_files(&f, &tok, &err);
    return tok;
}

Test(unigram, spm_model_unigram_with_sentencepiece_whitespace) {
    pbuf m = spm(1, PIECES, 8);
    int rc;
    eng_tokenizer *t = load_spm(&m, "spiece.model", NULL, &rc);
    cr_assert_eq(rc, 0);
    cr_expect_eq(eng_tokenizer_kind(t), ENG_TOK_UNIGRAM);
    /* SentencePiece's normalizer: leading spaces dropped, a dummy ▁, the run collapsed to one ▁, the
     * trailing space dropped: "▁ab▁b". At "b" two paths tie at -4.5 (▁ + ab, found first, and ▁a + b);
     * an equal score does not replace the first. Offsets: a token ends where the next begins (the
     * dummy ▁ is zero-width at 2), the last where the trailing space begins (7); the template is
     * A </s> (T5's: no cls/sep in a config). */
    expect(t, "  ab  b ", (int32_t[]){3, 6, 3, 5, 2}, (int32_t[]){2, 2, 2, 4, 4, 6, 6, 7, 0, 0}, 5);
    eng_tokenizer_free(t);
}

Test(unigram, spm_model_fairseq_ids) {
    pbuf m = spm(1, PIECES, 8);
    int rc;
    /* CamemBERT: <s>NOTUSED 0 <pad> 1 </s>NOTUSED 2 <unk> 3, pieces + 4, <mask> last (8 + 4).
     * "b x" is ▁ b ▁ x(unknown); <mask> eats the space before it (lstrip) */
    eng_tokenizer *t = load_spm(&m, "sentencepiece.bpe.model", "{\"tokenizer_class\": \"CamembertTokenizer\"}", &rc);
    cr_assert_eq(rc, 0);
    expect(t, "b x <mask>", (int32_t[]){1 + 4, 3 + 4, 5 + 4, 3 + 4, 3, 12, 2 + 4}, NULL, 7);
    cr_expect_eq(eng_tok_token_to_id(t, "<pad>", 5), 1);
    eng_tokenizer_free(t);
    /* XLM-R: <s> 0 <pad> 1 </s> 2 <unk> 3, pieces + 1, <mask> 9 */
    t = load_spm(&m, "sentencepiece.bpe.model", NULL, &rc);
    cr_assert_eq(rc, 0);
    expect(t, "b x <mask>", (int32_t[]){0, 3 + 1, 5 + 1, 3 + 1, 3, 9, 2}, NULL, 7);
    eng_tokenizer_free(t);
}

Test(unigram, spm_bpe_merges_the_best_scored_pair_first) {
    /* 0 <unk>, 1 <s>, 2 </s>, 3 ▁, 4 ▁a, 5 b, 6 ab, 7 a: ▁a (-1.5) merges before ab (-2.5) */
    pbuf m = spm(2, PIECES, 8);
    int rc;
    eng_tokenizer *t = load_spm(&m, "spm.model", NULL, &rc);
    cr_assert_eq(rc, 0);
    cr_expect_eq(eng_tokenizer_kind(t), ENG_TOK_SPM_BPE);
    expect(t, "ab", (int32_t[]){4, 5, 2}, NULL, 3);
    eng_tokenizer_free(t);
    /* with ab at -1.0 it merges first, and ▁ stays alone */
    test_piece p2[8];
    memcpy(p2, PIECES, sizeof p2);
    p2[6].score = -1.0f;
    m = spm(2, p2, 8);
    t = load_spm(&m, "spm.model", NULL, &rc);
    cr_assert_eq(rc, 0);
    expect(t, "ab", (int32_t[]){3, 6, 2}, NULL, 3);
    eng_tokenizer_free(t);
}

Test(unigram, corrupt_spm_models_are_errors) {
    pbuf m = spm(1, PIECES, 8);
    int rc;
    /* every truncation loads or fails cleanly (ASan/UBSan watch the reads) */
    for (size_t n = 0; n < m.n; n++) {
        pbuf c = m;
        c.n = n;
        eng_tokenizer *t = load_spm(&c, "spm.model", NULL, &rc);
        if (rc) cr_expect_null(t);
        eng_tokenizer_free(t);
    }
    pbuf bad = m;
    bad.b[0] = 0x0B; /* field 1, wire type 3 (groups): refused */
    eng_tokenizer *t = load_spm(&bad, "spm.model", NULL, &rc);
    cr_expect_eq(rc, ENG_FORMAT);
    cr_expect_null(t);
    pbuf big = m;
    big.b[1] = 0xFF; /* a length past the end */
    t = load_spm(&big, "spm.model", NULL, &rc);
    cr_expect_eq(rc, ENG_FORMAT);
    pbuf w = spm(3, PIECES, 8); /* a word model */
    t = load_spm(&w, "spm.model", NULL, &rc);
    cr_expect_eq(rc, ENG_UNSUPPORTED);
    /* a charsmap whose trie size runs past the blob */
    pbuf cm = m;
    pbuf ns = {0};
    uint8_t blob[8] = {0xFF, 0xFF, 0, 0, 1, 2, 3, 4};
    put_bytes(&ns, 2, blob, sizeof blob);
    put_bytes(&cm, 3, ns.b, ns.n);
    t = load_spm(&cm, "spm.model", NULL, &rc);
    cr_expect_eq(rc, ENG_FORMAT);
    cr_expect_null(t);
}

/* ---- the real files (shared data; skipped when absent) ---- */

static eng_tokenizer *load_shared_spm(const char *sub, const char *name) {
    char path[1024], cpath[1024];
    snprintf(path, sizeof path, "%s/tokenizers/%s/%s", ADAPTERD_DATA_DIR, sub, name);
    snprintf(cpath, sizeof cpath, "%s/tokenizers/%s/tokenizer_config.json", ADAPTERD_DATA_DIR, sub);
    if (!eng_file_exists(path)) cr_skip_test("%s is absent: set ADAPTERD_DATA_DIR to the shared data", path);
    char *buf = NULL, *cbuf = NULL;
    size_t n = 0, cn = 0;
    eng_err err = {0};
    cr_assert_eq(eng_file_read(path, 1 << 28, &buf, &n, &err), 0, "%s", err.msg);
    cr_assert_eq(eng_file_read(cpath, 1 << 24, &cbuf, &cn, &err), 0, "%s", err.msg);
    eng_tok_files f = {.spm_model = {buf, n}, .spm_name = name, .tokenizer_config_json = {cbuf, cn}};
    eng_tokenizer *tok = NULL;
    cr_assert_eq(eng_tokenizer_load_files(&f, &tok, &err), 0, "%s", err.msg);
    free(buf);
    free(cbuf);
    return tok;
}

Test(unigram, real_sentencepiece_models) {
    /* python3-sentencepiece: "Hello  world ﬁ ½" -> T5 ▁Hello 8774 ▁world 296 ▁fi 361 ▁1 209 ⁄ (unk) 2
     * 2 357; DeBERTa-v3 5365 447 16466 14624; CamemBERT 9770 18905 3594 120 0(unk) 249 (+4) */
    const char *text = "Hello  world \xef\xac\x81 \xc2\xbd";
    eng_tokenizer *t = load_shared_spm("t5-v1_1", "spiece.model");
    expect(t, text, (int32_t[]){8774, 296, 361, 209, 2, 357, 1},
           (int32_t[]){0, 5, 5, 12, 12, 14, 14, 15, 15, 15, 15, 16, 0, 0}, 7);
    eng_tokenizer_free(t);
    t = load_shared_spm("deberta-v3", "spm.model");
    expect(t, text, (int32_t[]){1, 5365, 447, 16466, 14624, 2}, (int32_t[]){0, 0, 0, 5, 5, 12, 12, 14, 14, 16, 0, 0},
           6);
    eng_tokenizer_free(t);
    t = load_shared_spm("camembert-base", "sentencepiece.bpe.model");
    expect(t, text, (int32_t[]){5, 9774, 18909, 3598, 124, 3, 253, 6}, NULL, 8);
    eng_tokenizer_free(t);
}

Test(unigram, nfc_before_byte_level_bpe) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/modernbert-base", ADAPTERD_DATA_DIR);
    char tj[1100];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", path);
    if (!eng_file_exists(tj)) cr_skip_test("%s is absent: set ADAPTERD_DATA_DIR to the shared data", tj);
    eng_err err = {0};
    eng_tokenizer *t = NULL;
    cr_assert_eq(eng_tokenizer_load(path, &t, &err), 0, "%s", err.msg);
    /* NFC composes e + U+0301 into é: the same ids as the composed text, and the composed token
     * spans both code points of the input */
    eng_tok_encoding a = enc(t, "caf\xc3\xa9"), b = enc(t, "cafe\xcc\x81");
    cr_assert_eq(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) cr_expect_eq(a.ids[i], b.ids[i]);
    cr_expect_eq(b.offsets[2 * (b.n - 2) + 1], 5, "the last token ends after the combining mark");
    cr_expect_eq(a.ids[0], 50281); /* [CLS] */
    eng_tok_encoding_free(&a);
    eng_tok_encoding_free(&b);
    eng_tokenizer_free(t);
}

Test(unigram, whitespace_split_then_metaspace) {
    const char *json =
        "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": " UNI_VOCAB "},"
        " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"},"
        "   {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\", \"split\": false}]}}";
    eng_tokenizer *t = load_json(json);
    /* every whitespace run separates words, each gets its own ▁ (zero-width): "▁ab" "▁ab" */
    expect(t, " ab \t ab ", (int32_t[]){5, 5}, (int32_t[]){1, 3, 6, 8}, 2);
    eng_tokenizer_free(t);
    const char *bad =
        "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": " UNI_VOCAB "},"
        " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Punctuation\"}]}}";
    eng_tok_files f = {.tokenizer_json = {bad, strlen(bad)}};
    eng_err err = {0};
    t = NULL;
    cr_expect_eq(eng_tokenizer_load_files(&f, &t, &err), ENG_UNSUPPORTED);
    cr_expect(strstr(err.msg, "Punctuation") != NULL, "%s", err.msg);
    cr_expect_null(t);
}
