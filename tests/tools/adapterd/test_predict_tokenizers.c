/* test_predict_tokenizers.c - long inputs on tokenizers without offsets-based word marks of their
 * own: tagging with a stride, and QA windows, on byte-level BPE (roberta-base's tokenizer.json) and
 * SentencePiece BPE (camembert-base's sentencepiece.bpe.model), against the pipelines' reference
 * (tools/reference/tag_pipeline.py, qa_pipeline.py). test_long.c does the same on WordPiece.
 *
 * The model: a generated BERT-shaped backbone of the fixture's shape (hidden 64, 2 layers, 64
 * positions: windows of 64 tokens) with each tokenizer's vocabulary, made once into the build folder
 * by tools/reference/gen_encoder.py; the tasks are the fixture registry's ner and squad adapters (the
 * tokenizer family is what this test is about, not the architecture). The answers are `adapterd
 * predict`'s (tests/tools/adapterd/test_predict.c shows they are the server's). For tagging the
 * reference decides word starts itself, as the pipeline does for a tokenizer without a continuing-
 * subword prefix ("subword_rule": "fallback": a token continues a word when neither the character
 * before it nor its first character is a space), from this build's offsets (themselves parity-tested
 * against transformers.js, tests/parity/tokenizer). Skips (77) without /usr/bin/python3's torch or
 * without the shared tokenizers (ADAPTERD_DATA_DIR). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/tokenizer.h"
#include "http_client.h"
#include "test_tmp.h"

#define REG ADAPTERD_FIXTURES "/registry"
#define BIN ADAPTERD_BINARY_DIR "/tools/adapterd"
#define NER REG "/tasks/ner/1/ner"
#define QA REG "/tasks/qa/1/squad"
#define MAX_SEQ 64

typedef struct {
    const char *name, *data, *files; /* files: space-separated names under data, copied into the model */
    int vocab;
} family;

static const family families[] = {
    {"bpe", "tokenizers/roberta-base", "tokenizer.json tokenizer_config.json", 50265},
    {"spm", "tokenizers/camembert-base", "sentencepiece.bpe.model tokenizer_config.json special_tokens_map.json added_tokens.json",
     32005},
};

static int have_torch(void) { return system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

/* The family's model folder, generated once; NULL (after a skip) when its tokenizer is absent. */
static char *model_for(const family *f) {
    char *src = NULL, *dir = NULL;
    cr_assert(asprintf(&src, "%s/%s", ADAPTERD_DATA_DIR, f->data) > 0);
    if (access(src, R_OK) != 0) {
        free(src);
        return NULL;
    }
    cr_assert(asprintf(&dir, "%s/tests/long-tokenizers/%s", ADAPTERD_BINARY_DIR, f->name) > 0);
    char *cfg = NULL;
    cr_assert(asprintf(&cfg, "%s/model.safetensors", dir) > 0);
    if (access(cfg, R_OK) != 0) {
        cr_assert_eq(ts_sh("rm -rf '%s' && /usr/bin/python3 '%s/tools/reference/gen_encoder.py' --arch bert --shape custom "
                           "--hidden 64 --layers 2 --heads 4 --intermediate 128 --vocab %d --max-pos %d --seed 47 --cases single "
                           "--out '%s' >/dev/null",
                           dir, ADAPTERD_SOURCE_DIR, f->vocab, MAX_SEQ, dir),
                     0, "gen_encoder.py for %s", f->name);
        char files[256];
        snprintf(files, sizeof files, "%s", f->files);
        for (char *save = NULL, *t = strtok_r(files, " ", &save); t; t = strtok_r(NULL, " ", &save))
            cr_assert_eq(ts_sh("cp '%s/%s' '%s/'", src, t, dir), 0, "%s/%s", src, t);
    }
    free(cfg), free(src);
    return dir;
}

/* Words with capitals, digits, punctuation glued to words and accented letters, so that words break
 * into several pieces and the word-start rule matters; words of seed's choosing, no quote. */
static char *text_of(int words, unsigned seed) {
    static const char *const vocab[] = {"Johnson", "lives", "in", "Paris,", "and", "Zürich.", "The", "unbelievably", "tall",
                                        "São", "Paulo", "player", "(2024)", "New-York", "naïve", "Mr.", "O'Brien", "met",
                                        "Anna-Maria", "at", "London;", "résumé", "3.5km", "e-mail", "Schwarzenegger"};
    size_t cap = (size_t)words * 16 + 1, o = 0;
    char *s = malloc(cap);
    cr_assert(s);
    s[0] = '\0';
    for (int i = 0; i < words; i++) {
        seed = seed * 1103515245u + 12345u;
        const char *w = vocab[(seed >> 16) % (sizeof vocab / sizeof vocab[0])];
        if (strchr(w, '\'')) w = "Smith"; /* the command line takes the text in single quotes */
        o += (size_t)snprintf(s + o, cap - o, "%s%s", i ? " " : "", w);
    }
    return s;
}

static json_t *ints(const int32_t *v, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* The tokens of text (and pair) as the references read them: the untruncated encoding, plus this
 * build's word starts (QA's align_to_words). */
static json_t *full_of(const eng_tokenizer *tok, const char *text, const char *pair) {
    eng_tok_params tp = eng_tok_default_params();
    tp.truncation = ENG_TOK_TRUNCATE_NONE;
    eng_tok_encoding e;
    eng_err err;
    cr_assert_eq(eng_tok_encode(tok, text, strlen(text), pair, pair ? strlen(pair) : 0, &tp, &e, &err), 0, "%s", err.msg);
    uint8_t *ws = malloc(e.n + 1);
    int32_t *seq = malloc((e.n + 1) * sizeof *seq), *sp = malloc((e.n + 1) * sizeof *sp), *w32 = malloc((e.n + 1) * sizeof *w32);
    cr_assert(ws && seq && sp && w32);
    eng_tok_word_starts(tok, &e, text, strlen(text), pair, pair ? strlen(pair) : 0, ws);
    for (size_t i = 0; i < e.n; i++) seq[i] = e.seq_ids[i], sp[i] = e.special_mask[i], w32[i] = ws[i];
    json_t *full = json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "ids", ints(e.ids, e.n), "type_ids", ints(e.type_ids, e.n), "seq_ids",
                             ints(seq, e.n), "offsets", ints(e.offsets, 2 * e.n), "special", ints(sp, e.n), "word_starts",
                             ints(w32, e.n));
    free(ws), free(seq), free(sp), free(w32);
    eng_tok_encoding_free(&e);
    return full;
}

/* tools/reference/SCRIPT over reqs on model and task: its answers, one per request. */
static json_t *reference(const char *script, const char *model, const char *task, json_t *reqs) {
    char path[512];
    int fd = mkstemp(test_tmp_template(path, sizeof path, "longtok"));
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    json_dumpf(reqs, f, JSON_COMPACT);
    fclose(f);
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "/usr/bin/python3 %s/tools/reference/%s --model %s --task %s < %s", ADAPTERD_SOURCE_DIR, script,
                       model, task, path) > 0);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    json_t *out = json_loadf(p, 0, NULL);
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    unlink(path);
    free(cmd);
    cr_assert(json_is_array(out) && json_array_size(out) == json_array_size(reqs), "the reference gave no answers");
    return out;
}

/* `adapterd predict` on model: the one task's answer. */
static json_t *predict(const char *model, const char *adapter, const char *args) {
    char path[512];
    int fd = mkstemp(test_tmp_template(path, sizeof path, "longtok"));
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(ts_sh("'%s' predict --model '%s' --adapter '%s' --threads 1 %s > '%s'", BIN, model, adapter, args, path), 0,
                 "adapterd predict %s", args);
    json_t *d = json_load_file(path, 0, NULL);
    unlink(path);
    cr_assert(d);
    const char *k;
    json_t *v, *t = NULL;
    json_object_foreach(json_object_get(d, "tasks"), k, v) t = v;
    json_incref(t);
    json_decref(d);
    return t;
}

/* Texts of 1 to 5 windows tagged with a stride, "simple" and "first", for each tokenizer family. */
Test(long_tokenizers, tagging_windows_match_the_pipeline, .timeout = 300) {
    if (!have_torch()) cr_skip_test("the reference needs /usr/bin/python3 with torch (Debian's python3-torch)");
    int ran = 0;
    for (size_t fi = 0; fi < sizeof families / sizeof families[0]; fi++) {
        char *model = model_for(&families[fi]);
        if (!model) {
            cr_log_info("%s: no %s/%s, skipped", families[fi].name, ADAPTERD_DATA_DIR, families[fi].data);
            continue;
        }
        eng_tokenizer *tok;
        eng_err err;
        cr_assert_eq(eng_tokenizer_load(model, &tok, &err), 0, "%s", err.msg);
        enum { N = 6 };
        json_t *got[N], *reqs = json_array();
        char *texts[N];
        for (int c = 0; c < N; c++) {
            texts[c] = text_of(8 + c * 22, 61u + (unsigned)c);
            const char *agg = c % 2 ? "first" : "simple";
            int stride = 6 + 5 * (c % 3);
            char *args = NULL;
            cr_assert(asprintf(&args, "--text '%s' --stride %d --aggregation %s", texts[c], stride, agg) > 0);
            got[c] = predict(model, NER, args);
            free(args);
            json_array_append_new(reqs, json_pack("{s:o,s:s,s:s,s:{s:i,s:i,s:s}}", "full", full_of(tok, texts[c], NULL), "text",
                                                  texts[c], "subword_rule", "fallback", "params", "max_len", MAX_SEQ, "stride",
                                                  stride, "aggregation", agg));
        }
        json_t *ref = reference("tag_pipeline.py", model, NER, reqs);
        int multi = 0, entities = 0;
        for (int c = 0; c < N; c++) {
            json_t *want = json_array_get(ref, (size_t)c), *ents = json_object_get(got[c], "entities");
            json_t *we = json_object_get(want, "entities");
            multi += json_integer_value(json_object_get(want, "windows")) > 1;
            cr_assert_eq(json_array_size(ents), json_array_size(we), "%s text %d: %zu entities, reference %zu", families[fi].name, c,
                         json_array_size(ents), json_array_size(we));
            entities += (int)json_array_size(ents);
            for (size_t i = 0; i < json_array_size(ents); i++) {
                json_t *g = json_array_get(ents, i), *w = json_array_get(we, i);
                cr_expect_str_eq(json_string_value(json_object_get(g, "entity_group")), json_string_value(json_object_get(w, "name")),
                                 "%s text %d entity %zu", families[fi].name, c, i);
                cr_expect_eq(json_integer_value(json_object_get(g, "start")), json_integer_value(json_object_get(w, "start")),
                             "%s text %d entity %zu start", families[fi].name, c, i);
                cr_expect_eq(json_integer_value(json_object_get(g, "end")), json_integer_value(json_object_get(w, "end")),
                             "%s text %d entity %zu end", families[fi].name, c, i);
                cr_expect_str_eq(json_string_value(json_object_get(g, "word")), json_string_value(json_object_get(w, "word")));
                double gs = json_number_value(json_object_get(g, "score")), ws = json_number_value(json_object_get(w, "score"));
                cr_expect(fabs(gs - ws) <= 1e-4, "%s text %d entity %zu: score %.7g, reference %.7g", families[fi].name, c, i, gs, ws);
            }
            json_decref(got[c]);
            free(texts[c]);
        }
        cr_expect_geq(multi, 3, "%s: most texts should take several windows", families[fi].name);
        cr_expect_gt(entities, 5, "%s: the texts should have entities to compare", families[fi].name);
        json_decref(ref), json_decref(reqs);
        eng_tokenizer_free(tok);
        free(model);
        ran++;
    }
    if (!ran) cr_skip_test("no shared tokenizer under %s", ADAPTERD_DATA_DIR);
}

/* QA over contexts of 1 to 6 windows on byte-level BPE: the pipeline's spans, scores and texts. */
Test(long_tokenizers, qa_windows_match_the_pipeline_on_bpe, .timeout = 300) {
    if (!have_torch()) cr_skip_test("the reference needs /usr/bin/python3 with torch (Debian's python3-torch)");
    char *model = model_for(&families[0]);
    if (!model) cr_skip_test("no %s/%s", ADAPTERD_DATA_DIR, families[0].data);
    eng_tokenizer *tok;
    eng_err err;
    cr_assert_eq(eng_tokenizer_load(model, &tok, &err), 0, "%s", err.msg);
    const char *q = "Who lives in Paris?";
    enum { N = 5 };
    json_t *got[N], *reqs = json_array();
    for (int c = 0; c < N; c++) {
        char *ctx = text_of(10 + c * 30, 71u + (unsigned)c), *args = NULL;
        int top_k = c % 2 ? 3 : 1;
        cr_assert(asprintf(&args, "--text '%s' --text-pair '%s' --top-k %d", q, ctx, top_k) > 0);
        got[c] = predict(model, QA, args);
        free(args);
        json_t *params = json_pack("{s:i,s:i,s:b,s:i,s:i,s:i,s:b}", "top_k", top_k, "max_answer_len", 15, "handle_impossible_answer", 0,
                                   "max_seq_len", MAX_SEQ, "doc_stride", MAX_SEQ / 2, "max_question_len", 64, "align_to_words", 1);
        json_array_append_new(reqs, json_pack("{s:o,s:s,s:i,s:o}", "full", full_of(tok, q, ctx), "context", ctx, "cls_id", eng_tokenizer_cls_id(tok),
                                              "params", params));
        free(ctx);
    }
    json_t *ref = reference("qa_pipeline.py", model, QA, reqs);
    int multi = 0;
    for (int c = 0; c < N; c++) {
        json_t *want = json_array_get(ref, (size_t)c), *wa = json_object_get(want, "answers");
        multi += json_integer_value(json_object_get(want, "windows")) > 1;
        json_t *ga = json_object_get(got[c], "answers");
        if (!ga) {
            ga = json_array();
            if (!json_is_null(json_object_get(got[c], "answer"))) json_array_append(ga, json_object_get(got[c], "answer"));
        } else {
            json_incref(ga);
        }
        cr_assert_eq(json_array_size(ga), json_array_size(wa), "context %d: %zu answers, reference %zu", c, json_array_size(ga),
                     json_array_size(wa));
        for (size_t i = 0; i < json_array_size(ga); i++) {
            json_t *g = json_array_get(ga, i), *w = json_array_get(wa, i);
            cr_expect_eq(json_integer_value(json_object_get(g, "start")), json_integer_value(json_object_get(w, "start")),
                         "context %d answer %zu start", c, i);
            cr_expect_eq(json_integer_value(json_object_get(g, "end")), json_integer_value(json_object_get(w, "end")),
                         "context %d answer %zu end", c, i);
            cr_expect_str_eq(json_string_value(json_object_get(g, "text")), json_string_value(json_object_get(w, "text")),
                             "context %d answer %zu", c, i);
            double gs = json_number_value(json_object_get(g, "score")), ws = json_number_value(json_object_get(w, "score"));
            cr_expect(fabs(gs - ws) <= 1e-4, "context %d answer %zu: score %.7g, reference %.7g", c, i, gs, ws);
        }
        json_decref(ga), json_decref(got[c]);
    }
    cr_expect_geq(multi, 3, "most contexts should take several windows");
    json_decref(ref), json_decref(reqs);
    eng_tokenizer_free(tok);
    free(model);
}
