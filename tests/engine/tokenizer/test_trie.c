/* test_trie.c - unit tests of the piece trie (engine/tokenizer/trie.c), the double array the
 * SentencePiece tokenizers walk once per start position.
 *
 * The expected answers come from a brute-force search over the same keys written here (a linear scan
 * of every key, no trie): exact lookups, proper prefixes, non-keys, and the pieces a walk from one
 * position meets. Hand-picked sets cover bytes >= 0x80 (UTF-8 and raw), NUL bytes, the empty set and
 * the empty key, duplicates (the first wins, as the hash index this trie replaced kept the first),
 * and a node with all 256 children; the real models of the shared data check every piece of
 * DeBERTa-v3 (128,000), T5 and CamemBERT. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/files.h"
#include "engine/tokenizer.h"
#include "tokenizer/tok_internal.h"

/* Brute force: the value of the first key equal to s, -1 when s is a proper prefix of a key (or
 * empty), -2 otherwise: eng__trie_find's contract. */
static int32_t brute_find(const char *const *keys, const uint32_t *lens, const int32_t *vals, size_t n,
                          const char *s, size_t len) {
    int32_t r = len ? -2 : -1;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] == len && !memcmp(keys[i], s, len)) return vals[i];
        if (lens[i] > len && !memcmp(keys[i], s, len)) r = -1;
    }
    return r;
}

static void build(eng__trie *t, const char *const *keys, const uint32_t *lens, const int32_t *vals, size_t n) {
    cr_assert_eq(eng__trie_build(t, keys, lens, vals, n), 0);
    cr_assert_not_null(t->nodes);
    cr_assert_geq(t->n, 256u);
}

static int32_t find(const eng__trie *t, const char *s, size_t len) {
    return eng__trie_find(t, (const uint8_t *)s, len);
}

Test(trie, every_key_prefix_and_non_key) {
    /* "▁" is E2 96 81, "é" C3 A9, "日本" E6 97 A5 E6 9C AC; raw bytes 80, FF; a NUL inside a key */
    const char *keys[] = {"\xe2\x96\x81", "\xe2\x96\x81the", "\xe2\x96\x81th", "t", "the", "\xc3\xa9",
                          "\xe6\x97\xa5\xe6\x9c\xac", "\x80", "\xff\xff", "a\0b", "z"};
    uint32_t lens[] = {3, 6, 5, 1, 3, 2, 6, 1, 2, 3, 1};
    int32_t vals[] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    size_t n = sizeof keys / sizeof *keys;
    eng__trie t;
    build(&t, keys, lens, vals, n);
    for (size_t i = 0; i < n; i++) cr_expect_eq(find(&t, keys[i], lens[i]), vals[i], "key %zu", i);
    /* proper prefixes only: inside a UTF-8 character, "▁t", "th", "日", "\xff", "a", "a\0" */
    const char *pre[] = {"\xe2", "\xe2\x96", "\xe2\x96\x81t", "th", "\xe6\x97\xa5", "\xff", "a", "a\0"};
    uint32_t plen[] = {1, 2, 4, 2, 3, 1, 1, 2};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) {
        cr_expect_eq(brute_find(keys, lens, vals, n, pre[i], plen[i]), -1);
        cr_expect_eq(find(&t, pre[i], plen[i]), -1, "prefix %zu", i);
    }
    /* non-keys: extensions, other bytes, a high byte that starts no key */
    const char *non[] = {"\xe2\x96\x81thex", "x", "\xc3\xa8", "\xfe", "\x80\x80", "a\0c", "thea", "zz"};
    uint32_t nlen[] = {7, 1, 2, 1, 2, 3, 4, 2};
    for (size_t i = 0; i < sizeof non / sizeof *non; i++) {
        cr_expect_eq(brute_find(keys, lens, vals, n, non[i], nlen[i]), -2);
        cr_expect_eq(find(&t, non[i], nlen[i]), -2, "non-key %zu", i);
    }
    cr_expect_eq(find(&t, "", 0), -1); /* the root: no key is empty */
    eng__trie_free(&t);
    cr_expect_null(t.nodes);
    eng__trie_free(&t); /* freeing twice is harmless */
}

Test(trie, empty_set_and_empty_key) {
    eng__trie t;
    build(&t, NULL, NULL, NULL, 0);
    cr_expect_eq(find(&t, "a", 1), -2);
    cr_expect_eq(find(&t, "\xff", 1), -2);
    cr_expect_eq(find(&t, "", 0), -1);
    for (int c = 0; c < 256; c++) {
        uint32_t node = 0;
        cr_expect_eq(eng__trie_step(&t, &node, (uint8_t)c), -1, "byte %d", c);
        cr_expect_eq(node, 0u);
    }
    eng__trie_free(&t);
    const char *keys[] = {"", "b"};
    uint32_t lens[] = {0, 1};
    int32_t vals[] = {7, 8};
    build(&t, keys, lens, vals, 2);
    cr_expect_eq(find(&t, "", 0), 7);
    cr_expect_eq(find(&t, "b", 1), 8);
    eng__trie_free(&t);
}

Test(trie, duplicates_keep_the_first) {
    const char *keys[] = {"ab", "a", "ab", "a", "ab"};
    uint32_t lens[] = {2, 1, 2, 1, 2};
    int32_t vals[] = {4, 9, 1, 2, 3};
    eng__trie t;
    build(&t, keys, lens, vals, 5);
    cr_expect_eq(find(&t, "ab", 2), 4);
    cr_expect_eq(find(&t, "a", 1), 9);
    eng__trie_free(&t);
}

Test(trie, every_byte_and_every_byte_pair) {
    /* the root and 256 nodes with 256 children each: 65,792 keys, every base search full */
    size_t n = 256 + 65536;
    char *buf = malloc(2 * n);
    const char **keys = malloc(n * sizeof *keys);
    uint32_t *lens = malloc(n * sizeof *lens);
    int32_t *vals = malloc(n * sizeof *vals);
    cr_assert(buf && keys && lens && vals);
    for (size_t i = 0; i < n; i++) {
        bool pair = i >= 256;
        size_t x = pair ? i - 256 : i;
        buf[2 * i] = (char)(pair ? x >> 8 : x);
        buf[2 * i + 1] = (char)(x & 0xFF);
        keys[i] = buf + 2 * i;
        lens[i] = pair ? 2 : 1;
        vals[i] = (int32_t)i;
    }
    eng__trie t;
    build(&t, keys, lens, vals, n);
    for (size_t i = 0; i < n; i++) cr_assert_eq(find(&t, keys[i], lens[i]), vals[i], "key %zu", i);
    cr_expect_eq(find(&t, "\x01\x02\x03", 3), -2);
    eng__trie_free(&t);
    free(buf);
    free(keys);
    free(lens);
    free(vals);
}

/* xorshift, so the random sets are the same on every run */
static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t m) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % m);
}

Test(trie, random_sets_against_brute_force) {
    /* an alphabet of 6 bytes (two ASCII, NUL, 0x80, 0xC3, 0xFF) so keys share long prefixes */
    static const char alpha[] = {'a', 'b', 0, (char)0x80, (char)0xC3, (char)0xFF};
    enum { N = 3000, Q = 6000, L = 12 };
    for (int round = 0; round < 3; round++) {
        static char buf[N][L];
        const char *keys[N];
        uint32_t lens[N];
        int32_t vals[N];
        for (int i = 0; i < N; i++) {
            lens[i] = 1 + rnd(round == 2 ? 3 : L); /* round 2: short keys, many duplicates */
            for (uint32_t k = 0; k < lens[i]; k++) buf[i][k] = alpha[rnd(6)];
            keys[i] = buf[i];
            vals[i] = (int32_t)(1000 + i);
        }
        eng__trie t;
        build(&t, keys, lens, vals, N);
        char q[L + 2];
        for (int i = 0; i < Q; i++) {
            uint32_t len = rnd(L + 2);
            for (uint32_t k = 0; k < len; k++) q[k] = alpha[rnd(6)];
            if (i % 3 == 0) { /* a key, or a key cut short */
                int j = (int)rnd(N);
                len = lens[j] - (i % 2 ? rnd(lens[j]) : 0);
                memcpy(q, keys[j], len);
            }
            cr_assert_eq(find(&t, q, len), brute_find(keys, lens, vals, N, q, len), "round %d query %d", round, i);
            /* one walk from the start meets exactly the keys that are prefixes of q */
            uint32_t node = 0;
            size_t d = 0;
            for (;;) {
                int32_t want = brute_find(keys, lens, vals, N, q, d);
                cr_assert_eq(t.nodes[node].value, want >= 0 ? want : -1, "round %d query %d depth %zu", round, i, d);
                if (d == len || eng__trie_step(&t, &node, (uint8_t)q[d])) break;
                d++;
            }
            cr_assert(d == len || brute_find(keys, lens, vals, N, q, d + 1) == -2, "the walk stopped early");
        }
        eng__trie_free(&t);
    }
}

/* ---- the real models (shared data; skipped when absent) ---- */

static void check_model(const char *sub, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/%s/%s", ADAPTERD_DATA_DIR, sub, name);
    if (!eng_file_exists(path)) cr_skip_test("%s is absent: set ADAPTERD_DATA_DIR to the shared data", path);
    char *buf = NULL;
    size_t n = 0;
    eng_err err = {0};
    cr_assert_eq(eng_file_read(path, 1 << 28, &buf, &n, &err), 0, "%s", err.msg);
    eng_tok_files f = {.spm_model = {buf, n}, .spm_name = name};
    eng_tokenizer *tok = NULL;
    cr_assert_eq(eng_tokenizer_load_files(&f, &tok, &err), 0, "%s", err.msg);
    free(buf);
    int32_t found = 0;
    for (int32_t i = 0; i < tok->n_pieces; i++) {
        uint8_t ty = tok->ptype[i];
        const char *s = eng_tok_id_to_token(tok, tok->out_id[i]);
        cr_assert_not_null(s, "%s piece %d has no string", sub, i);
        size_t len = strlen(s);
        int32_t got = find(&tok->pieces, s, len);
        if (ty == ENG__SP_NORMAL || ty == ENG__SP_USER || ty == ENG__SP_UNUSED) {
            cr_assert_eq(got, i, "%s piece %d \"%s\": found %d", sub, i, s, got);
            found++;
            /* its prefixes at character boundaries are walkable */
            for (size_t k = 1; k < len; k++)
                if (((uint8_t)s[k] & 0xC0) != 0x80) cr_assert_neq(find(&tok->pieces, s, k), -2, "%s \"%s\" %zu", sub, s, k);
        } else {
            cr_assert_lt(got, 0, "%s piece %d \"%s\" of type %d is not in the lattice", sub, i, s, ty);
        }
    }
    cr_expect_gt(found, tok->n_pieces - 300, "%s: %d of %d pieces in the trie", sub, found, tok->n_pieces);
    cr_expect_eq(find(&tok->pieces, "\xff\xfe", 2), -2);
    eng_tokenizer_free(tok);
}

Test(trie, every_piece_of_the_real_models) {
    check_model("deberta-v3", "spm.model");
    check_model("t5-v1_1", "spiece.model");
    check_model("camembert-base", "sentencepiece.bpe.model");
}

/* Byte pieces are "<0x" two hex digits ">": the old reader parsed the digits with strtol, which took
 * "<0x 1>" as byte 1 and "<0x-1>" as -1, writing byte_piece[-1] (the field before it: sp_unk). */
Test(trie, byte_piece_names_need_two_hex_digits) {
    const char *json = "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": true, \"vocab\": "
                       "[[\"<unk>\", 0.0], [\"a\", -1.0], [\"<0x-1>\", -2.0], [\"<0x 1>\", -2.0], [\"<0xZZ>\", -2.0], "
                       "[\"<0x4a>\", -3.0]]}, \"normalizer\": null, \"pre_tokenizer\": null, \"post_processor\": null}";
    eng_tok_files f = {.tokenizer_json = {json, strlen(json)}};
    eng_err err = {0};
    eng_tokenizer *tok = NULL;
    cr_assert_eq(eng_tokenizer_load_files(&f, &tok, &err), 0, "%s", err.msg);
    cr_expect_eq(tok->sp_unk, 0);
    for (int b = 0; b < 256; b++) cr_expect_eq(tok->byte_piece[b], b == 0x4a ? 5 : -1, "byte %d", b);
    eng_tokenizer_free(tok);
}
