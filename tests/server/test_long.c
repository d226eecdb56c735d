/* test_long.c - long inputs on the real `adapterd serve` over tests/fixtures/registry: a QA context
 * read in the question-answering pipeline's windows (server/predict.c), answered from all of them
 * (server/answer.c, engine/task/answer.c), and the limits on long inputs.
 *
 * Parity: tools/reference/qa_pipeline.py gets the context's whole encoding from this build's tokenizer
 * (itself parity-tested against transformers.js) and does the rest on its own: the question cut, the
 * windows (the tokenizers library's overflow loop), the fixture's QA task run on every window in
 * float64 PyTorch (adapters.py), the pipeline's post-processing and the words. The server's answers
 * must equal its answers: same spans and texts, scores within 1e-4 (float32 engine against the
 * float64 reference; the spans' probabilities are products of two softmaxes). The fixture model takes
 * 64 positions, so its windows are 64 tokens with a stride of 32, and a context of 1 to 10 windows is
 * a few hundred characters. The parity cases skip (77) when /usr/bin/python3 cannot import torch. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/tokenizer.h"
#include "http_client.h"
#include "test_post.h"
#include "test_text.h"
#include "../common/test_tmp.h"

#define MODEL_DIR ADAPTERD_FIXTURES "/registry/models/bert-tiny"
#define QA_TASK ADAPTERD_FIXTURES "/registry/tasks/qa/1/squad"
/* the fixture model's limit: windows of 64 tokens, the pipeline's stride min(64 / 2, 128) */
#define MAX_SEQ 64
#define STRIDE 32

static test_server srv;
static eng_tokenizer *tok;

static void start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--max-input-tokens", "700", "--max-windows", "24", NULL};
    cr_assert_eq(ts_start(&srv, args, NULL), 0, "server did not start");
    eng_err e;
    cr_assert_eq(eng_tokenizer_load(MODEL_DIR, &tok, &e), 0, "%s", e.msg);
}
static void stop(void) {
    eng_tokenizer_free(tok);
    cr_expect_eq(ts_stop(&srv), 0, "server did not exit 0 after SIGTERM");
}

TestSuite(long_inputs, .init = start, .fini = stop, .timeout = 120);

static int have_torch(void) {
    return system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}


static int context_tokens(const char *q, const char *ctx) {
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    eng_tok_encoding e;
    eng_err err;
    cr_assert_eq(eng_tok_encode(tok, q, strlen(q), ctx, strlen(ctx), &tp, &e, &err), 0, "%s", err.msg);
    int n = eng_tok_seq_len(&e, 1);
    eng_tok_encoding_free(&e);
    return n;
}

static json_t *ints(const int32_t *v, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* The reference's request for (q, ctx) with params (a JSON object of the pipeline's parameters): the
 * whole encoding, with this build's word starts. */
static json_t *ref_request(const char *q, const char *ctx, json_t *params) {
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    eng_tok_encoding e;
    eng_err err;
    cr_assert_eq(eng_tok_encode(tok, q, strlen(q), ctx, strlen(ctx), &tp, &e, &err), 0, "%s", err.msg);
    uint8_t *ws = malloc(e.n + 1);
    int32_t *seq = malloc((e.n + 1) * sizeof *seq), *w32 = malloc((e.n + 1) * sizeof *w32);
    cr_assert(ws && seq && w32);
    eng_tok_word_starts(tok, &e, q, strlen(q), ctx, strlen(ctx), ws);
    for (size_t i = 0; i < e.n; i++) seq[i] = e.seq_ids[i], w32[i] = ws[i];
    json_t *full = json_pack("{s:o,s:o,s:o,s:o,s:o}", "ids", ints(e.ids, e.n), "type_ids", ints(e.type_ids, e.n), "seq_ids",
                             ints(seq, e.n), "offsets", ints(e.offsets, 2 * e.n), "word_starts", ints(w32, e.n));
    json_t *req = json_pack("{s:o,s:s,s:i,s:O}", "full", full, "context", ctx, "cls_id", eng_tokenizer_cls_id(tok), "params", params);
    free(ws), free(seq), free(w32);
    eng_tok_encoding_free(&e);
    return req;
}

/* A reference script's answers to reqs (a JSON array), one run (torch loads once): script is
 * tools/reference/SCRIPT, run on the fixture model's task. */
static json_t *run_reference(const char *script, const char *task, json_t *reqs) {
    char path[512];
    int fd = mkstemp(test_tmp_template(path, sizeof path, "long"));
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    json_dumpf(reqs, f, JSON_COMPACT);
    fclose(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tools/reference/%s --model %s --task %s < %s", ADAPTERD_SOURCE_DIR, script,
             MODEL_DIR, task, path);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    json_t *out = json_loadf(p, 0, NULL);
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    unlink(path);
    cr_assert(json_is_array(out) && json_array_size(out) == json_array_size(reqs), "the reference gave no answers");
    return out;
}

/* The QA reference's answers to reqs (an array of ref_request's). */
static json_t *reference(json_t *reqs) { return run_reference("qa_pipeline.py", QA_TASK, reqs); }

/* {"inputs":[{"text": q, "text_pair": ctx}], "tasks": ["qa"], params...} to the server. */
static json_t *ask(const char *q, const char *ctx, json_t *params) {
    json_t *body = json_pack("{s:[{s:s,s:s}],s:[s]}", "inputs", "text", q, "text_pair", ctx, "tasks", "qa");
    json_object_update(body, params);
    char *b = json_dumps(body, JSON_COMPACT);
    json_t *d = post_ok(&srv, b, 200);
    free(b);
    json_decref(body);
    return d;
}

static json_t *input0(json_t *d) { return json_array_get(json_object_get(d, "results"), 0); }
static json_t *qa_of(json_t *d) { return json_object_get(json_object_get(input0(d), "tasks"), "qa"); }

/* The server's answers (the list with top_k > 1, else the one answer) against the reference's. */
static int same_answers(json_t *d, json_t *ref, int top_k, const char *what) {
    json_t *qa = qa_of(d), *want = json_object_get(ref, "answers");
    json_t *got = top_k > 1 ? json_object_get(qa, "answers") : NULL;
    if (top_k <= 1) {
        got = json_array();
        if (!json_is_null(json_object_get(qa, "answer"))) json_array_append(got, json_object_get(qa, "answer"));
    } else {
        json_incref(got);
    }
    cr_assert(json_is_array(got), "%s: no answers: %s", what, json_dumps(qa, 0));
    cr_expect_eq(json_array_size(got), json_array_size(want), "%s: %zu answers, reference %zu", what, json_array_size(got),
                 json_array_size(want));
    int nw = json_object_get(input0(d), "windows") ? (int)json_integer_value(json_object_get(input0(d), "windows")) : 1;
    cr_expect_eq(nw, (int)json_integer_value(json_object_get(ref, "windows")), "%s: windows", what);
    for (size_t i = 0; i < json_array_size(got) && i < json_array_size(want); i++) {
        json_t *g = json_array_get(got, i), *w = json_array_get(want, i);
        cr_expect_eq(json_integer_value(json_object_get(g, "start")), json_integer_value(json_object_get(w, "start")), "%s answer %zu start",
                     what, i);
        cr_expect_eq(json_integer_value(json_object_get(g, "end")), json_integer_value(json_object_get(w, "end")), "%s answer %zu end",
                     what, i);
        cr_expect_str_eq(json_string_value(json_object_get(g, "text")), json_string_value(json_object_get(w, "text")), "%s answer %zu",
                         what, i);
        double gs = json_number_value(json_object_get(g, "score")), ws = json_number_value(json_object_get(w, "score"));
        cr_expect(fabs(gs - ws) <= 1e-4, "%s answer %zu: score %.7g, reference %.7g", what, i, gs, ws);
    }
    json_decref(got);
    return nw;
}

static json_t *params_of(int top_k, int impossible, int max_question_len) {
    return json_pack("{s:i,s:i,s:b,s:i,s:i,s:i,s:b}", "top_k", top_k, "max_answer_len", 15, "handle_impossible_answer", impossible,
                     "max_seq_len", MAX_SEQ, "doc_stride", STRIDE, "max_question_len", max_question_len, "align_to_words", 1);
}

/* Contexts of 1 to 10 windows, top_k 1 and 3, with and without the no-answer. */
Test(long_inputs, qa_windows_match_the_pipeline) {
    if (!have_torch()) cr_skip_test("the reference needs /usr/bin/python3 with torch (Debian's python3-torch)");
    const char *q = "who is john";
    enum { N = 10 };
    json_t *got[N], *reqs = json_array();
    int top_ks[N];
    for (int c = 0; c < N; c++) {
        int words = 20 + c * 30;
        char *ctx = fixture_words(words, 7u + (unsigned)c);
        int top_k = c % 2 ? 3 : 1, imp = c % 3 == 0;
        /* the server's request: defaults except what the case sets; the reference gets every value */
        json_t *rp = json_pack("{s:i,s:b}", "top_k", top_k, "handle_impossible_answer", imp);
        got[c] = ask(q, ctx, rp);
        top_ks[c] = top_k;
        json_t *pp = params_of(top_k, imp, 64);
        json_array_append_new(reqs, ref_request(q, ctx, pp));
        json_decref(rp), json_decref(pp);
        free(ctx);
    }
    json_t *ref = reference(reqs);
    int seen[12] = {0};
    for (int c = 0; c < N; c++) {
        char what[64];
        snprintf(what, sizeof what, "context of %d words", 20 + c * 30);
        int nw = same_answers(got[c], json_array_get(ref, (size_t)c), top_ks[c], what);
        seen[nw < 11 ? nw : 11]++;
        cr_expect(!json_is_true(json_object_get(input0(got[c]), "truncated")), "%s: a QA request reads the whole context", what);
        json_decref(got[c]);
    }
    json_decref(ref), json_decref(reqs);
    int kinds = 0;
    for (int k = 1; k <= 10; k++) kinds += seen[k] > 0;
    cr_expect_geq(kinds, 6, "the contexts should span 1 to 10 windows");
    cr_expect_gt(seen[1], 0);
    cr_expect_gt(seen[9] + seen[10], 0);
}

/* The boundaries: a context of exactly one window, one token over (two windows), an empty context,
 * and a question longer than max_question_len (cut, the input flagged truncated). */
Test(long_inputs, qa_window_boundaries) {
    if (!have_torch()) cr_skip_test("the reference needs /usr/bin/python3 with torch (Debian's python3-torch)");
    const char *q = "who is john";
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    eng_tok_encoding e;
    eng_err err;
    cr_assert_eq(eng_tok_encode(tok, q, strlen(q), "", 0, &tp, &e, &err), 0);
    int room = MAX_SEQ - (int)e.n; /* [CLS] q [SEP] [SEP]: what a window leaves the context */
    eng_tok_encoding_free(&e);
    /* grow a context word by word to exactly room tokens, then one token more */
    char *exact = NULL;
    for (int words = 1; words < 200 && !exact; words++) {
        char *ctx = fixture_words(words, 99u);
        int n = context_tokens(q, ctx);
        if (n == room) exact = ctx;
        else free(ctx);
        cr_assert_leq(n, room + 2, "one-token words should reach the room exactly");
    }
    cr_assert(exact, "no context of exactly %d tokens", room);
    char *over = malloc(strlen(exact) + 8);
    cr_assert(over);
    sprintf(over, "%s a", exact);
    cr_assert_eq(context_tokens(q, over), room + 1);
    struct {
        const char *q, *ctx;
        int windows, mql, imp, truncated;
    } cases[] = {{q, exact, 1, 64, 0, 0},
                 {q, over, 2, 64, 1, 0},
                 {q, "", 1, 64, 1, 0},
                 {q, "", 1, 64, 0, 0},
                 {"who is john and where was he in london", exact, 2, 4, 0, 1}};
    enum { N = sizeof cases / sizeof cases[0] };
    json_t *got[N], *reqs = json_array();
    for (size_t c = 0; c < N; c++) {
        json_t *rp = json_pack("{s:b,s:i}", "handle_impossible_answer", cases[c].imp, "max_question_len", cases[c].mql);
        got[c] = ask(cases[c].q, cases[c].ctx, rp);
        json_t *pp = params_of(1, cases[c].imp, cases[c].mql);
        json_array_append_new(reqs, ref_request(cases[c].q, cases[c].ctx, pp));
        json_decref(rp), json_decref(pp);
    }
    json_t *ref = reference(reqs);
    for (size_t c = 0; c < N; c++) {
        json_t *d = got[c];
        char what[32];
        snprintf(what, sizeof what, "boundary case %zu", c);
        int nw = same_answers(d, json_array_get(ref, c), 1, what);
        cr_expect_eq(nw, cases[c].windows, "%s: windows", what);
        cr_expect_eq(json_is_true(json_object_get(input0(d), "truncated")), cases[c].truncated, "%s: truncated", what);
        json_t *a = json_object_get(qa_of(d), "answer");
        if (!*cases[c].ctx && cases[c].imp)
            cr_expect(json_is_object(a) && !strcmp(json_string_value(json_object_get(a, "text")), "") &&
                          json_integer_value(json_object_get(a, "end")) == 0,
                      "an empty context with handle_impossible_answer answers the no-answer");
        if (!*cases[c].ctx && !cases[c].imp) cr_expect(json_is_null(a), "an empty context has no answer");
        json_decref(d);
    }
    json_decref(ref), json_decref(reqs);
    free(exact), free(over);
}

/* ---- tagging with "stride" ---- */

#define NER_TASK ADAPTERD_FIXTURES "/registry/tasks/ner/1/ner"

/* The reference's request for a single text tagged with stride and aggregation. */
static json_t *tag_request(const char *text, int stride, const char *agg) {
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    eng_tok_encoding e;
    eng_err err;
    cr_assert_eq(eng_tok_encode(tok, text, strlen(text), NULL, 0, &tp, &e, &err), 0, "%s", err.msg);
    uint8_t *sw = malloc(e.n + 1);
    int32_t *seq = malloc((e.n + 1) * sizeof *seq), *sp = malloc((e.n + 1) * sizeof *sp), *s32 = malloc((e.n + 1) * sizeof *s32);
    cr_assert(sw && seq && sp && s32);
    eng_tok_subword_flags(tok, &e, text, strlen(text), NULL, 0, sw);
    for (size_t i = 0; i < e.n; i++) seq[i] = e.seq_ids[i], sp[i] = e.special_mask[i], s32[i] = sw[i];
    json_t *full = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "ids", ints(e.ids, e.n), "type_ids", ints(e.type_ids, e.n), "seq_ids",
                             ints(seq, e.n), "offsets", ints(e.offsets, 2 * e.n), "special", ints(sp, e.n), "subword", ints(s32, e.n));
    json_t *req = json_pack("{s:o,s:s,s:{s:i,s:i,s:s}}", "full", full, "text", text, "params", "max_len", MAX_SEQ, "stride", stride,
                            "aggregation", agg);
    free(sw), free(seq), free(sp), free(s32);
    eng_tok_encoding_free(&e);
    return req;
}

/* Texts of 1 to 6 windows tagged with "stride" and "simple" / "first": entities merged over the
 * windows as the token-classification pipeline merges them, offsets into the original text. */
Test(long_inputs, tagging_windows_match_the_pipeline) {
    if (!have_torch()) cr_skip_test("the reference needs /usr/bin/python3 with torch (Debian's python3-torch)");
    enum { N = 8 };
    json_t *got[N], *reqs = json_array();
    char *texts[N];
    for (int c = 0; c < N; c++) {
        texts[c] = fixture_words(30 + c * 40, 31u + (unsigned)c);
        const char *agg = c % 2 ? "first" : "simple";
        int stride = 8 + 6 * (c % 4);
        char *body = NULL;
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[\"ner\"],\"stride\":%d,\"aggregation\":\"%s\"}", texts[c],
                           stride, agg) > 0);
        got[c] = post_ok(&srv, body, 200);
        free(body);
        json_array_append_new(reqs, tag_request(texts[c], stride, agg));
    }
    json_t *ref = run_reference("tag_pipeline.py", NER_TASK, reqs);
    int multi = 0;
    for (int c = 0; c < N; c++) {
        json_t *r = input0(got[c]), *want = json_array_get(ref, (size_t)c);
        json_t *ents = json_object_get(json_object_get(json_object_get(r, "tasks"), "ner"), "entities");
        json_t *we = json_object_get(want, "entities");
        int nw = json_object_get(r, "windows") ? (int)json_integer_value(json_object_get(r, "windows")) : 1;
        cr_expect_eq(nw, (int)json_integer_value(json_object_get(want, "windows")), "text %d: windows", c);
        multi += nw > 1;
        cr_expect(!json_is_true(json_object_get(r, "truncated")), "text %d: read whole", c);
        cr_assert_eq(json_array_size(ents), json_array_size(we), "text %d: %zu entities, reference %zu", c, json_array_size(ents),
                     json_array_size(we));
        for (size_t i = 0; i < json_array_size(ents); i++) {
            json_t *g = json_array_get(ents, i), *w = json_array_get(we, i);
            cr_expect_str_eq(json_string_value(json_object_get(g, "entity_group")), json_string_value(json_object_get(w, "name")),
                             "text %d entity %zu", c, i);
            cr_expect_eq(json_integer_value(json_object_get(g, "start")), json_integer_value(json_object_get(w, "start")),
                         "text %d entity %zu start", c, i);
            cr_expect_eq(json_integer_value(json_object_get(g, "end")), json_integer_value(json_object_get(w, "end")),
                         "text %d entity %zu end", c, i);
            cr_expect_str_eq(json_string_value(json_object_get(g, "word")), json_string_value(json_object_get(w, "word")));
            double gs = json_number_value(json_object_get(g, "score")), ws = json_number_value(json_object_get(w, "score"));
            cr_expect(fabs(gs - ws) <= 1e-4, "text %d entity %zu: score %.7g, reference %.7g", c, i, gs, ws);
        }
        json_decref(got[c]);
        free(texts[c]);
    }
    cr_expect_geq(multi, 5, "most texts should take several windows");
    json_decref(ref), json_decref(reqs);
}

/* One task's answer as compact JSON with every digit: compared as bytes. */
static char *answer_bytes(json_t *result, const char *task) {
    char *s = json_dumps(json_object_get(json_object_get(result, "tasks"), task),
                         JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY);
    cr_assert(s);
    return s;
}

/* Windows are sequences of the batch: short inputs beside a long one, in one request, answer as they
 * do alone, bit for bit, logits included (the long input's windows are more packed rows of the same
 * products, each row summed in one order whatever the row count: engine/math/gemm.c; attention never
 * crosses a sequence). QA (bottleneck adapters) and a LoRA classifier here; the next test, tagging,
 * fusion, regression and the others. */
Test(long_inputs, short_inputs_beside_a_long_one_are_unchanged) {
    char *ctx = fixture_words(400, 5u);
    const char *shorts[][2] = {{"who is john", "john is a player in paris"}, {"where", "he was in london and for the city"}};
    char *alone = NULL, *mixed = NULL;
    cr_assert(asprintf(&alone, "{\"inputs\":[{\"text\":\"%s\",\"text_pair\":\"%s\"},{\"text\":\"%s\",\"text_pair\":\"%s\"}],"
                               "\"tasks\":[\"qa\",\"cls_lora\"],\"top_k\":3,\"return\":{\"logits\":true}}",
                       shorts[0][0], shorts[0][1], shorts[1][0], shorts[1][1]) > 0);
    cr_assert(asprintf(&mixed, "{\"inputs\":[{\"text\":\"%s\",\"text_pair\":\"%s\"},{\"text\":\"who\",\"text_pair\":\"%s\"},"
                               "{\"text\":\"%s\",\"text_pair\":\"%s\"}],\"tasks\":[\"qa\",\"cls_lora\"],\"top_k\":3,"
                               "\"return\":{\"logits\":true}}",
                       shorts[0][0], shorts[0][1], ctx, shorts[1][0], shorts[1][1]) > 0);
    json_t *a = post_ok(&srv, alone, 200), *m = post_ok(&srv, mixed, 200);
    json_t *ra = json_object_get(a, "results"), *rm = json_object_get(m, "results");
    cr_assert_gt(json_integer_value(json_object_get(json_array_get(rm, 1), "windows")), 5, "the long input takes several windows");
    cr_expect(json_is_true(json_object_get(json_array_get(rm, 1), "truncated")),
              "cls_lora answers the long input from its first window: flagged");
    static const char *const tasks[] = {"qa", "cls_lora"};
    for (int i = 0; i < 2; i++)
        for (size_t t = 0; t < 2; t++) {
            char *sx = answer_bytes(json_array_get(ra, (size_t)i), tasks[t]);
            char *sy = answer_bytes(json_array_get(rm, (size_t)(i ? 2 : 0)), tasks[t]);
            cr_expect(strstr(sx, "logits"), "%s", sx);
            cr_expect_str_eq(sx, sy, "short input %d's %s answer changed beside the long one:\n%s\n%s", i, tasks[t], sx, sy);
            free(sx), free(sy);
        }
    json_decref(a), json_decref(m);
    free(alone), free(mixed), free(ctx);
}

/* The same for single texts and every other head and adapter kind of the registry: a long text
 * tagged with `stride` and classified in `"long"` chunks beside short ones, whose answers (tokens,
 * entities, logits, values) stay the same bytes as alone. */
Test(long_inputs, short_texts_beside_a_long_one_are_unchanged_for_every_task) {
    char *doc = fixture_words(300, 9u);
    static const char *const shorts[] = {"john lives in paris", "the city of london is big and he was there"};
    static const char *const tasks[] = {"ner", "fusion", "cls_lora", "reg", "peft", "ml"};
    const char *opts = "\"tasks\":[\"ner\",\"fusion\",\"cls_lora\",\"reg\",\"peft\",\"ml\"],"
                       "\"stride\":16,\"aggregation\":\"simple\",\"long\":{\"mode\":\"chunks\",\"stride\":16},\"return\":{\"logits\":true}";
    char *alone = NULL, *mixed = NULL;
    cr_assert(asprintf(&alone, "{\"inputs\":[\"%s\",\"%s\"],%s}", shorts[0], shorts[1], opts) > 0);
    cr_assert(asprintf(&mixed, "{\"inputs\":[\"%s\",\"%s\",\"%s\"],%s}", shorts[0], doc, shorts[1], opts) > 0);
    json_t *a = post_ok(&srv, alone, 200), *m = post_ok(&srv, mixed, 200);
    json_t *ra = json_object_get(a, "results"), *rm = json_object_get(m, "results");
    cr_assert_gt(json_integer_value(json_object_get(json_array_get(rm, 1), "windows")), 5, "the long text takes several windows");
    for (int i = 0; i < 2; i++)
        for (size_t t = 0; t < sizeof tasks / sizeof tasks[0]; t++) {
            char *sx = answer_bytes(json_array_get(ra, (size_t)i), tasks[t]);
            char *sy = answer_bytes(json_array_get(rm, (size_t)(i ? 2 : 0)), tasks[t]);
            cr_expect_str_eq(sx, sy, "short text %d's %s answer changed beside the long one:\n%s\n%s", i, tasks[t], sx, sy);
            free(sx), free(sy);
        }
    json_decref(a), json_decref(m);
    free(alone), free(mixed), free(doc);
}

static void expect_refused(const char *path, const char *body, long status, const char *code, const char *says) {
    ts_resp r;
    cr_assert_eq(ts_http(&srv, "POST", path, body, NULL, NULL, &r), 0);
    cr_expect_eq(r.status, status, "%.120s: %ld %s", body, r.status, r.body);
    cr_expect(strstr(r.body, code) && strstr(r.body, says), "%s", r.body);
    ts_resp_free(&r);
}

/* --max-input-tokens 700 and --max-windows 24 (start()): refused with 413 before any work, in v1's
 * and KServe v2's shapes; a question that leaves no more than doc_stride tokens of context is a 422. */
Test(long_inputs, limits_refuse_before_the_work) {
    char *big = fixture_words(800, 3u), *mid = fixture_words(500, 3u), *body = NULL;
    cr_assert(asprintf(&body, "{\"inputs\":[{\"text\":\"who\",\"text_pair\":\"%s\"}],\"tasks\":[\"qa\"]}", big) > 0);
    expect_refused("/v1/predict", body, 413, "too_large", "--max-input-tokens");
    free(body);
    /* two inputs of ~17 windows each: 24 windows a request */
    cr_assert(asprintf(&body, "{\"inputs\":[{\"text\":\"who\",\"text_pair\":\"%s\"},{\"text\":\"who\",\"text_pair\":\"%s\"}],"
                              "\"tasks\":[\"qa\"]}", mid, mid) > 0);
    expect_refused("/v1/predict", body, 413, "too_large", "--max-windows");
    free(body);
    cr_assert(asprintf(&body, "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"who\"]},"
                              "{\"name\":\"text_pair\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"%s\"]}]}", big) > 0);
    expect_refused("/v2/models/qa/infer", body, 413, "error", "--max-input-tokens");
    free(body);
    cr_assert(asprintf(&body, "{\"inputs\":[{\"text\":\"who is john\",\"text_pair\":\"%s\"}],\"tasks\":[\"qa\"],\"doc_stride\":60}", mid) > 0);
    expect_refused("/v1/predict", body, 422, "invalid_argument", "doc_stride");
    free(body);
    expect_refused("/v1/predict", "{\"inputs\":[{\"text\":\"a\",\"text_pair\":\"b\"}],\"tasks\":[\"qa\"],\"top_k\":0}", 422,
                   "invalid_argument", "top_k");
    expect_refused("/v1/predict", "{\"inputs\":[{\"text\":\"a\",\"text_pair\":\"b\"}],\"tasks\":[\"qa\"],\"qa_rule\":\"x\"}", 422,
                   "invalid_argument", "qa_rule");
    free(big), free(mid);
}

/* KServe v2 carries the same parameters: its answer tensors hold the v1 answer's first span. */
Test(long_inputs, v2_parameters_answer_as_v1) {
    char *ctx = fixture_words(200, 11u), *v1 = NULL, *v2 = NULL;
    cr_assert(asprintf(&v1, "{\"inputs\":[{\"text\":\"who is john\",\"text_pair\":\"%s\"}],\"tasks\":[\"qa\"],\"max_answer_len\":4,"
                            "\"handle_impossible_answer\":true}", ctx) > 0);
    cr_assert(asprintf(&v2, "{\"inputs\":[{\"name\":\"text\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"who is john\"]},"
                            "{\"name\":\"text_pair\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"%s\"]}],"
                            "\"parameters\":{\"max_answer_len\":4,\"handle_impossible_answer\":true}}", ctx) > 0);
    json_t *a = post_ok(&srv, v1, 200);
    json_t *b = NULL;
    long st = ts_request(&srv, "POST", "/v2/models/qa/infer", v2, strlen(v2), "application/json", NULL, &b);
    cr_assert_eq(st, 200);
    json_t *ans = json_object_get(qa_of(a), "answer");
    const char *text = json_string_value(json_object_get(ans, "text"));
    int found = 0;
    json_t *outs = json_object_get(b, "outputs"), *o;
    size_t i;
    json_array_foreach(outs, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        json_t *v = json_array_get(json_object_get(o, "data"), 0);
        if (!strcmp(name, "answer")) {
            cr_expect_str_eq(json_string_value(v), text);
            found++;
        }
        if (!strcmp(name, "start")) {
            cr_expect_eq(json_integer_value(v), json_integer_value(json_object_get(ans, "start")));
            found++;
        }
    }
    cr_expect_eq(found, 2);
    json_decref(a), json_decref(b);
    free(v1), free(v2), free(ctx);
}

/* Tagging's window boundaries: a text of exactly one window's tokens is one window, one token over
 * is two; "stride" without an aggregation that merges entities, or not below a window, is refused. */
Test(long_inputs, tagging_window_boundaries) {
    const int room = MAX_SEQ - 2; /* [CLS] ... [SEP] */
    for (int extra = 0; extra < 2; extra++) {
        char *text = fixture_words(room + extra, 5u), *body = NULL;
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[\"ner\"],\"stride\":16,\"aggregation\":\"simple\"}", text) > 0);
        json_t *d = post_ok(&srv, body, 200), *r = input0(d);
        json_t *w = json_object_get(r, "windows");
        cr_expect_eq(w ? (int)json_integer_value(w) : 1, 1 + extra, "%d tokens", room + extra);
        cr_expect(!json_is_true(json_object_get(r, "truncated")), "%d tokens: read whole", room + extra);
        json_decref(d);
        free(body), free(text);
    }
    expect_refused("/v1/predict", "{\"inputs\":[\"john is in paris\"],\"tasks\":[\"ner\"],\"stride\":8,\"aggregation\":\"none\"}",
                   422, "invalid_argument", "aggregation");
    char *text = fixture_words(100, 5u), *body = NULL;
    cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[\"ner\"],\"stride\":%d,\"aggregation\":\"first\"}", text, room) > 0);
    expect_refused("/v1/predict", body, 422, "invalid_argument", "stride");
    free(body), free(text);
}

/* "long": {"mode": "chunks"} on a text of two blocks A and B of exactly one window each (62 one-token
 * words, stride 0): the windows are A's and B's tokens, so the answer's logits are the mean (or max)
 * of A's and B's logits asked alone; per task it overrides the request; without it the first window
 * answers, flagged truncated. */
Test(long_inputs, chunks_aggregate_the_windows_logits) {
    char *a = fixture_words(MAX_SEQ - 2, 41u), *b = fixture_words(MAX_SEQ - 2, 43u), *ab = NULL, *body = NULL;
    cr_assert_eq(context_tokens("x", a), MAX_SEQ - 2, "one-token words: a block fills one window");
    cr_assert_eq(context_tokens("x", b), MAX_SEQ - 2);
    cr_assert(asprintf(&ab, "%s %s", a, b) > 0);
    const char *texts[] = {a, b};
    double la[2][2] = {{0}};
    for (int t = 0; t < 2; t++) {
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[\"cls_lora\"],\"return\":{\"logits\":true}}", texts[t]) > 0);
        json_t *d = post_ok(&srv, body, 200);
        free(body);
        json_t *lg = json_object_get(json_object_get(json_object_get(input0(d), "tasks"), "cls_lora"), "logits");
        for (int c = 0; c < 2; c++) la[t][c] = json_number_value(json_array_get(lg, (size_t)c));
        cr_expect(!json_is_true(json_object_get(input0(d), "truncated")), "one window is not cut");
        json_decref(d);
    }
    const char *modes[] = {"mean", "max"};
    for (int m = 0; m < 2; m++) {
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[\"cls_lora\"],\"long\":{\"mode\":\"chunks\",\"aggregate\":\"%s\"},"
                                  "\"return\":{\"logits\":true}}", ab, modes[m]) > 0);
        json_t *d = post_ok(&srv, body, 200);
        free(body);
        cr_expect_eq(json_integer_value(json_object_get(input0(d), "windows")), 2);
        cr_expect(!json_is_true(json_object_get(input0(d), "truncated")));
        json_t *lg = json_object_get(json_object_get(json_object_get(input0(d), "tasks"), "cls_lora"), "logits");
        for (int c = 0; c < 2; c++) {
            double want = m ? fmax(la[0][c], la[1][c]) : (la[0][c] + la[1][c]) / 2, got = json_number_value(json_array_get(lg, (size_t)c));
            cr_expect(fabs(got - want) <= 1e-5 * fmax(1, fabs(want)), "%s logit %d: %.9g, want %.9g", modes[m], c, got, want);
        }
        json_decref(d);
    }
    /* per task, and the default: the first window (A), flagged */
    cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[{\"name\":\"cls_lora\",\"long\":{\"mode\":\"first\"}}],"
                              "\"long\":{\"mode\":\"chunks\"},\"return\":{\"logits\":true}}", ab) > 0);
    json_t *d = post_ok(&srv, body, 200);
    free(body);
    cr_expect(json_is_true(json_object_get(input0(d), "truncated")), "the task's own \"long\" (first) wins");
    json_t *lg = json_object_get(json_object_get(json_object_get(input0(d), "tasks"), "cls_lora"), "logits");
    cr_expect(fabs(json_number_value(json_array_get(lg, 0)) - la[0][0]) <= 1e-5 * fmax(1, fabs(la[0][0])));
    json_decref(d);
    expect_refused("/v1/predict", "{\"inputs\":[\"a\"],\"long\":{\"mode\":\"all\"}}", 422, "invalid_argument", "long");
    free(a), free(b), free(ab);
}

/* ---- "long": chunks for classification, multi-label and regression ---- */

/* The logits task t answered for input i of d, as numbers (n of them). */
static void logits_of(json_t *d, size_t i, const char *t, double *out, int n) {
    json_t *r = json_array_get(json_object_get(d, "results"), i);
    json_t *l = json_object_get(json_object_get(json_object_get(r, "tasks"), t), "logits");
    cr_assert_eq((int)json_array_size(l), n, "%s logits of input %zu", t, i);
    for (int c = 0; c < n; c++) out[c] = json_number_value(json_array_get(l, (size_t)c));
}

/* A text of several windows with "long" chunks answers from the mean (or max) per label of its
 * windows' logits, each window's logits those of its tokens sent alone as ids; a task's own "long"
 * overrides the request's ({"mode": "first"}: the first window, and the input says it was cut). */
Test(long_inputs, chunks_for_every_head_and_one_stride) {
    enum { STR = 16, MAXW = 16 };
    const int room = MAX_SEQ - 2;
    char *text = fixture_words(150, 9u);
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    eng_tok_encoding full;
    eng_err err;
    cr_assert_eq(eng_tok_encode(tok, text, strlen(text), NULL, 0, &tp, &full, &err), 0, "%s", err.msg);
    int nw = eng_tok_window_count(eng_tok_seq_len(&full, 0), room, STR);
    cr_assert(nw > 2 && nw <= MAXW, "%d windows", nw);
    json_t *ins = json_array();
    for (int w = 0; w < nw; w++) {
        eng_tok_encoding e;
        cr_assert_eq(eng_tok_window(&full, 0, w * (room - STR), room, -1, &e), 0);
        json_array_append_new(ins, json_pack("{s:o}", "ids", ints(e.ids, e.n)));
        eng_tok_encoding_free(&e);
    }
    eng_tok_encoding_free(&full);
    char *ids = json_dumps(ins, JSON_COMPACT), *body = NULL;
    json_decref(ins);
    cr_assert(asprintf(&body, "{\"inputs\":%s,\"tasks\":[\"cls_lora\",\"ml\",\"reg\"],\"return\":{\"logits\":true}}", ids) > 0);
    json_t *alone = post_ok(&srv, body, 200);
    free(body), free(ids);
    static const char *const tasks[] = {"cls_lora", "ml", "reg"};
    int nl[3];
    double win[MAXW][3][8];
    for (int t = 0; t < 3; t++) {
        json_t *l = json_object_get(json_object_get(json_object_get(input0(alone), "tasks"), tasks[t]), "logits");
        nl[t] = (int)json_array_size(l);
        cr_assert(nl[t] >= 1 && nl[t] <= 8);
        for (int w = 0; w < nw; w++) logits_of(alone, (size_t)w, tasks[t], win[w][t], nl[t]);
    }
    for (int max = 0; max < 2; max++) {
        cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[{\"name\":\"cls_lora\",\"long\":{\"mode\":\"first\"}},\"ml\",\"reg\"],"
                                  "\"long\":{\"mode\":\"chunks\",\"aggregate\":\"%s\",\"stride\":%d},\"return\":{\"logits\":true,\"scores\":true}}",
                           text, max ? "max" : "mean", STR) > 0);
        json_t *d = post_ok(&srv, body, 200), *r = input0(d);
        free(body);
        cr_expect_eq(json_integer_value(json_object_get(r, "windows")), nw);
        cr_expect(json_is_true(json_object_get(r, "truncated")), "cls_lora read the first window only");
        for (int t = 0; t < 3; t++) {
            double got[8];
            logits_of(d, 0, tasks[t], got, nl[t]);
            for (int c = 0; c < nl[t]; c++) {
                double want = win[0][t][c];
                for (int w = 1; t > 0 && w < nw; w++) want = max ? fmax(want, win[w][t][c]) : want + win[w][t][c];
                if (t > 0 && !max) want /= nw;
                cr_expect(fabs(got[c] - want) <= 1e-4, "%s %s label %d: %.6g, windows alone %.6g", max ? "max" : "mean", tasks[t], c,
                          got[c], want);
            }
        }
        /* the scores are the head's of the aggregated logits: multi-label's sigmoid */
        json_t *ml = json_object_get(json_object_get(r, "tasks"), "ml"), *sc = json_object_get(ml, "scores");
        double l0 = json_number_value(json_array_get(json_object_get(ml, "logits"), 0));
        const char *k0;
        json_t *v0;
        json_object_foreach(sc, k0, v0) {
            cr_expect(fabs(json_number_value(v0) - 1.0 / (1.0 + exp(-l0))) <= 1e-5, "sigmoid of the aggregated logit");
            break;
        }
        json_decref(d);
    }
    /* per task only: cls_lora chunked, reg the first window */
    cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[{\"name\":\"cls_lora\",\"long\":{\"mode\":\"chunks\",\"stride\":%d}},\"reg\"],"
                              "\"return\":{\"logits\":true}}", text, STR) > 0);
    json_t *d = post_ok(&srv, body, 200);
    free(body);
    double got[8];
    logits_of(d, 0, "reg", got, nl[2]);
    cr_expect(fabs(got[0] - win[0][2][0]) <= 1e-4, "reg answers from the first window");
    logits_of(d, 0, "cls_lora", got, nl[0]);
    double want = 0;
    for (int w = 0; w < nw; w++) want += win[w][0][0];
    cr_expect(fabs(got[0] - want / nw) <= 1e-4, "cls_lora: the mean");
    json_decref(d);
    /* one set of windows for every task: strides must agree */
    cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[{\"name\":\"cls_lora\",\"long\":{\"mode\":\"chunks\",\"stride\":4}},"
                              "{\"name\":\"reg\",\"long\":{\"mode\":\"chunks\",\"stride\":8}}]}", text) > 0);
    expect_refused("/v1/predict", body, 422, "invalid_argument", "one stride");
    free(body);
    expect_refused("/v1/predict", "{\"inputs\":[\"a\"],\"long\":{\"mode\":\"all\"}}", 422, "invalid_argument", "long");
    expect_refused("/v1/predict", "{\"inputs\":[\"a\"],\"tasks\":[{\"name\":\"reg\",\"long\":{\"aggregate\":\"sum\"}}]}", 422,
                   "invalid_argument", "tasks[0].long.aggregate");
    json_decref(alone);
    free(text);
}

/* `adapterd predict` takes the pipeline's QA options and answers a one-window context as the server. */
Test(long_inputs, command_line_takes_the_qa_options) {
    const char *q = "who is john", *ctx = "john is a player in paris and he was in london";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/tools/adapterd predict --model %s --adapter %s --text '%s' --text-pair '%s' --top-k 3 "
                              "--handle-impossible-answer --max-answer-len 6",
             ADAPTERD_BINARY_DIR, MODEL_DIR, QA_TASK, q, ctx);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    json_t *cli = json_loadf(p, 0, NULL);
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    cr_assert(cli);
    json_t *rp = json_pack("{s:i,s:b,s:i}", "top_k", 3, "handle_impossible_answer", 1, "max_answer_len", 6);
    json_t *d = ask(q, ctx, rp);
    json_t *ca = json_object_get(json_object_get(json_object_get(cli, "tasks"), "squad"), "answers"),
           *sa = json_object_get(qa_of(d), "answers");
    cr_assert_eq(json_array_size(ca), 3);
    cr_assert_eq(json_array_size(sa), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *x = json_array_get(ca, i), *y = json_array_get(sa, i);
        cr_expect_str_eq(json_string_value(json_object_get(x, "text")), json_string_value(json_object_get(y, "text")));
        cr_expect_eq(json_integer_value(json_object_get(x, "start")), json_integer_value(json_object_get(y, "start")));
        cr_expect(fabs(json_number_value(json_object_get(x, "score")) - json_number_value(json_object_get(y, "score"))) <= 1e-5);
    }
    json_decref(cli), json_decref(d), json_decref(rp);
}
