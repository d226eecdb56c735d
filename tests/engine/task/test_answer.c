/* test_answer.c - engine/task/answer.c (QA spans, tagging entities) and eng_tok_subword_flags.
 *
 * Against tools/reference/heads.py (a tensor formulation of the span search and a restatement of
 * the token-classification pipeline's aggregation) on generated logits: spans and entities equal,
 * scores within 1e-6 relative (both compute in double from the same float32 inputs; the C side
 * returns a float). The reference part skips when /usr/bin/python3 cannot import torch. Hand cases
 * pin what the reference cannot: the bug this replaced (a span starting at [SEP]) and the
 * tokenizer's subword flags on the fixture vocabulary. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/answer.h"
#include "engine/tokenizer.h"

static json_t *reference(int seed) {
    const char *py = getenv("ADAPTERD_PYTHON") ? getenv("ADAPTERD_PYTHON") : "/usr/bin/python3";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch' 2>/dev/null && %s %s/tools/reference/heads.py --seed %d --qa 60 --tagging 60",
             py, py, ADAPTERD_SOURCE_DIR, seed);
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    json_error_t e;
    json_t *doc = json_loadf(f, 0, &e);
    pclose(f);
    return doc;
}

static float *floats_of(json_t *a) {
    float *v = malloc((json_array_size(a) + 1) * sizeof *v);
    cr_assert(v);
    for (size_t i = 0; i < json_array_size(a); i++) v[i] = (float)json_number_value(json_array_get(a, i));
    return v;
}

static void close_rel(double got, double want, const char *what, size_t c) {
    cr_expect(fabs(got - want) <= 1e-6 * fmax(fabs(want), 1e-30) + 1e-12, "%s case %zu: %.9g, reference %.9g", what, c, got,
              want);
}

Test(answer, qa_matches_reference) {
    json_t *doc = reference(11);
    if (!doc) cr_skip_test("the reference needs /usr/bin/python3 with torch (Debian's python3-torch)");
    json_t *cases = json_object_get(doc, "qa");
    cr_assert_gt(json_array_size(cases), 10);
    int found = 0, cut = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *k = json_array_get(cases, c), *sq = json_object_get(k, "seq_ids"), *want = json_object_get(k, "expected");
        int n = (int)json_array_size(sq), max_len = (int)json_integer_value(json_object_get(k, "max_len"));
        int8_t *seq = malloc((size_t)n);
        cr_assert(seq);
        for (int i = 0; i < n; i++) seq[i] = (int8_t)json_integer_value(json_array_get(sq, (size_t)i));
        float *lg = floats_of(json_object_get(k, "logits"));
        eng_qa_span s;
        int rc = eng_qa_best_span(lg, seq, n, 1, max_len, &s);
        if (json_is_null(want)) {
            cr_expect_eq(rc, ENG_NOT_FOUND, "case %zu: no context, no span", c);
        } else {
            cr_assert_eq(rc, 0, "case %zu", c);
            cr_expect_eq(s.start, (int)json_integer_value(json_object_get(want, "start")), "case %zu start", c);
            cr_expect_eq(s.end, (int)json_integer_value(json_object_get(want, "end")), "case %zu end", c);
            close_rel(s.score, json_number_value(json_object_get(want, "score")), "qa score", c);
            found++;
            cut += s.end - s.start + 1 == max_len;
        }
        free(seq), free(lg);
    }
    cr_expect_gt(found, 10, "the generator gave too few cases with a context");
    cr_expect_gt(cut, 0, "no case where the length limit binds");
    json_decref(doc);
}

Test(answer, tagging_matches_reference) {
    json_t *doc = reference(12);
    if (!doc) cr_skip_test("the reference needs /usr/bin/python3 with torch (Debian's python3-torch)");
    json_t *cases = json_object_get(doc, "tagging");
    cr_assert_gt(json_array_size(cases), 10);
    size_t merged = 0, total = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *k = json_array_get(cases, c), *sq = json_object_get(k, "seq_ids"), *jl = json_object_get(k, "labels");
        int n = (int)json_array_size(sq), nl = (int)json_array_size(jl);
        int8_t *seq = malloc((size_t)n);
        uint8_t *sp = malloc((size_t)n), *sw = malloc((size_t)n);
        const char **labels = malloc((size_t)nl * sizeof *labels);
        eng_tag_entity *ents = malloc(((size_t)n + 1) * sizeof *ents);
        cr_assert(seq && sp && sw && labels && ents);
        for (int i = 0; i < n; i++) {
            seq[i] = (int8_t)json_integer_value(json_array_get(sq, (size_t)i));
            sp[i] = (uint8_t)json_integer_value(json_array_get(json_object_get(k, "special"), (size_t)i));
            sw[i] = (uint8_t)json_integer_value(json_array_get(json_object_get(k, "subword"), (size_t)i));
        }
        for (int i = 0; i < nl; i++) labels[i] = json_string_value(json_array_get(jl, (size_t)i));
        float *p = floats_of(json_object_get(k, "probs"));
        for (int a = 0; a < 3; a++) {
            json_t *want = json_object_get(json_object_get(k, "expected"), eng_tag_aggregation_name((eng_tag_aggregation)a));
            int m = eng_tag_entities(p, n, nl, sp, sw, seq, labels, (eng_tag_aggregation)a, ents);
            cr_assert_eq((size_t)m, json_array_size(want), "case %zu %s: %d entities, reference %zu", c,
                         eng_tag_aggregation_name((eng_tag_aggregation)a), m, json_array_size(want));
            for (int e = 0; e < m; e++) {
                json_t *w = json_array_get(want, (size_t)e);
                cr_expect_eq(ents[e].label, (int)json_integer_value(json_object_get(w, "label")), "case %zu entity %d", c, e);
                cr_expect_eq(ents[e].first, (int)json_integer_value(json_object_get(w, "first")), "case %zu entity %d", c, e);
                cr_expect_eq(ents[e].last, (int)json_integer_value(json_object_get(w, "last")), "case %zu entity %d", c, e);
                cr_expect_eq(ents[e].seq, (int)json_integer_value(json_object_get(w, "seq")), "case %zu entity %d", c, e);
                if (a) cr_expect_str_eq(eng_tag_group_name(labels[ents[e].label]), json_string_value(json_object_get(w, "name")));
                close_rel(ents[e].score, json_number_value(json_object_get(w, "score")), "tag score", c);
                merged += ents[e].last > ents[e].first;
                total++;
            }
        }
        free(seq), free(sp), free(sw), free(labels), free(ents), free(p);
    }
    cr_expect_gt(merged, 20, "too few entities spanning several tokens: the cases do not exercise grouping");
    cr_expect_gt(total, 200);
    json_decref(doc);
}

/* [CLS] q q [SEP] c c c [SEP]: [CLS]/[SEP]/question carry the largest logits; the answer must still
 * be in the context. Expected by hand: start logits over the context (0, 1, 0) and end (0, 0, 2):
 * best span (5, 6); p_start = e / (2 + e), p_end = e^2 / (2 + e^2). */
Test(answer, qa_span_stays_in_the_context) {
    const int8_t seq[] = {-1, 0, 0, -1, 1, 1, 1, -1};
    const float lg[] = {9, 9, 8, 8, 8, 8, 9, 9, 0, 0, 1, 0, 0, 2, 9, 9};
    eng_qa_span s;
    cr_assert_eq(eng_qa_best_span(lg, seq, 8, 1, 30, &s), 0);
    cr_expect_eq(s.start, 5);
    cr_expect_eq(s.end, 6);
    double e = exp(1.0), e2 = exp(2.0);
    cr_expect_float_eq(s.score, e / (2 + e) * (e2 / (2 + e2)), 1e-6);
    /* limit 1: single tokens only; (5,5) = e/(2+e) * 1/(2+e^2) vs (6,6) = 1/(2+e) * e^2/(2+e^2): (6,6) */
    cr_assert_eq(eng_qa_best_span(lg, seq, 8, 1, 1, &s), 0);
    cr_expect(s.start == 6 && s.end == 6, "got (%d, %d)", s.start, s.end);
    const int8_t noctx[] = {-1, 0, -1};
    cr_expect_eq(eng_qa_best_span(lg, noctx, 3, 1, 30, &s), ENG_NOT_FOUND);
    cr_expect_eq(eng_qa_best_span(lg, seq, 8, 1, 0, &s), ENG_INVALID_ARGUMENT);
}

/* The fixture vocabulary has whole words ("john", "is") and single letters with "##" forms, so
 * "unhappy" is u ##n ##h ##a ##p ##p ##y: one word of seven tokens. */
Test(answer, subword_flags_on_the_fixture_tokenizer) {
    eng_tokenizer *tok;
    eng_err err;
    cr_assert_eq(eng_tokenizer_load(ADAPTERD_FIXTURES "/registry/models/bert-tiny", &tok, &err), 0, "%s", err.msg);
    const char *text = "john is unhappy";
    eng_tok_encoding enc;
    cr_assert_eq(eng_tok_encode(tok, text, strlen(text), NULL, 0, NULL, &enc, &err), 0, "%s", err.msg);
    uint8_t fl[64];
    cr_assert_lt(enc.n, sizeof fl);
    eng_tok_subword_flags(tok, &enc, text, strlen(text), NULL, 0, fl);
    /* words start where the text has a space before them; pieces inside a word continue it */
    for (size_t i = 0; i < enc.n; i++) {
        if (enc.special_mask[i]) {
            cr_expect_eq(fl[i], 0);
            continue;
        }
        int32_t b = enc.byte_offsets[2 * i];
        int starts_word = b == 0 || text[b - 1] == ' ';
        cr_expect_eq(fl[i], !starts_word, "token %zu (%s) at byte %d", i, eng_tok_id_to_token(tok, enc.ids[i]), b);
    }
    cr_expect_gt(enc.n, 8, "\"unhappy\" should take several pieces in this vocabulary");
    eng_tok_encoding_free(&enc);
    eng_tokenizer_free(tok);
}

/* B-PER I-PER O B-LOC with PER's second piece a subword: simple groups the two PER tokens; first
 * gives the word "jo" its first piece's label even when the second piece says LOC. */
Test(answer, first_takes_the_first_pieces_label) {
    const char *labels[] = {"O", "B-PER", "I-PER", "B-LOC"};
    /* rows: tokens 0..4 = [CLS] j ##o is paris */
    const float p[] = {1, 0, 0, 0, /* [CLS] */
                       .1f, .8f, .05f, .05f, /* j: B-PER .8 */
                       .1f, .1f, .2f, .6f, /* ##o: B-LOC .6 */
                       .9f, .05f, .03f, .02f, /* is: O */
                       .1f, .1f, .1f, .7f}; /* paris: B-LOC .7 */
    const uint8_t skip[] = {1, 0, 0, 0, 0}, sub[] = {0, 0, 1, 0, 0};
    const int8_t seq[] = {-1, 0, 0, 0, 0};
    eng_tag_entity e[5];
    int m = eng_tag_entities(p, 5, 4, skip, sub, seq, labels, ENG_TAG_AGG_FIRST, e);
    cr_assert_eq(m, 2);
    cr_expect(e[0].first == 1 && e[0].last == 2 && e[0].label == 1);
    cr_expect_float_eq(e[0].score, .8f, 1e-6);
    cr_expect(e[1].first == 4 && e[1].last == 4 && e[1].label == 3);
    m = eng_tag_entities(p, 5, 4, skip, sub, seq, labels, ENG_TAG_AGG_SIMPLE, e);
    cr_assert_eq(m, 3, "simple: PER (j), LOC (##o, a B- starts a group), LOC (paris)");
    m = eng_tag_entities(p, 5, 4, skip, sub, seq, labels, ENG_TAG_AGG_NONE, e);
    cr_assert_eq(m, 3, "none: every token but O");
}
