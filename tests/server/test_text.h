/* test_text.h - text helpers shared by the server's tests: a text of the fixture model's one-token words
 * (test_long.c, test_embed_long.c) and a file replaced whole by rename, as an operator's tool or a
 * Kubernetes Secret update does (test_keys.c, test_tenants.c). */
#ifndef ADAPTERD_TESTS_SERVER_TEST_TEXT_H
#define ADAPTERD_TESTS_SERVER_TEST_TEXT_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

/* words words of the fixture's vocabulary, each one token, drawn from seed; malloc'd. */
static inline char *fixture_words(int words, unsigned seed) {
    static const char *const vocab[] = {"john", "is", "a", "player", "in", "paris", "and", "he", "was", "for",
                                        "the", "city", "london", "who", "happy", "where", "movie", "great"};
    size_t cap = (size_t)words * 8 + 1, o = 0;
    char *s = malloc(cap);
    cr_assert(s);
    s[0] = '\0';
    for (int i = 0; i < words; i++) {
        seed = seed * 1103515245u + 12345u;
        o += (size_t)snprintf(s + o, cap - o, "%s%s", i ? " " : "", vocab[(seed >> 16) % (sizeof vocab / sizeof vocab[0])]);
    }
    return s;
}

/* Replaces path's contents with text at once (a sibling written, then renamed over it). */
static inline void write_file_atomic(const char *path, const char *text) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(rename(tmp, path), 0);
}

#endif
