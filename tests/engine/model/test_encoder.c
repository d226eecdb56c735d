/* test_encoder.c - the encoder against the PyTorch reference's outputs (tests/fixtures/models),
 * packed vs one-at-a-time, thread counts, and load errors that name what is wrong.
 *
 * Fixtures were written by tools/reference/gen_encoder.py: a float64 oracle run as one padded,
 * masked batch, so matching it from padding-free packed rows checks packing for real. Tolerance
 * 2e-5 absolute on outputs of magnitude ~1-4 (float32 accumulation over hidden 64, 2 layers). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "encoder_check.h"
#include "test_tmp.h"
#include "engine/model.h"

#define TOL 2e-5f

static const char *models[] = {"bert-tiny", "roberta-tiny", "distilbert-tiny", "bert-tiny-bf16-sharded"};

static void fixture_path(char *out, size_t n, const char *model, const char *rest) {
    snprintf(out, n, "%s/models/%s%s%s", ADAPTERD_FIXTURES, model, rest ? "/" : "", rest ? rest : "");
}

static void check(const char *name, int threads) {
    char dir[1024], msg[1024];
    fixture_path(dir, sizeof dir, name, NULL);
    encoder_check_result r;
    cr_assert_eq(encoder_check(dir, threads, TOL, 1e-5f, &r, msg, sizeof msg), 0, "%s (%d threads): %s", name, threads,
                 msg);
    cr_assert_geq(r.cases, 2, "%s: only %d expected cases", name, r.cases);
}

Test(encoder, matches_reference_all_fixtures) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) check(models[i], 2);
}

Test(encoder, thread_counts_agree) {
    check("bert-tiny", 1);
    check("roberta-tiny", 3);
}

Test(encoder, config_fields) {
    char dir[1024];
    eng_model *m;
    eng_err e = {0};
    fixture_path(dir, sizeof dir, "roberta-tiny", NULL);
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    const eng_config *c = eng_model_config(m);
    cr_assert_eq(c->arch, ENG_ARCH_ROBERTA);
    cr_assert_eq(c->pos_offset, 2); /* padding_idx 1 + 1 */
    cr_assert_float_eq(c->ln_eps, 1e-5f, 1e-12);
    eng_model_free(m);
    fixture_path(dir, sizeof dir, "distilbert-tiny", NULL);
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_model_config(m)->arch, ENG_ARCH_DISTILBERT);
    cr_assert_eq(eng_model_config(m)->has_pooler, 0);
    cr_assert_eq(eng_model_config(m)->type_vocab, 0);
    eng_model_free(m);
}

/* ---- load errors on doctored copies of bert-tiny ---- */

static void copy_file(const char *from, const char *to, long cut) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    cr_assert(a && b, "copy %s -> %s", from, to);
    fseek(a, 0, SEEK_END);
    long n = ftell(a) - cut;
    fseek(a, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, a), (size_t)n);
    cr_assert_eq(fwrite(buf, 1, (size_t)n, b), (size_t)n);
    free(buf);
    fclose(a);
    fclose(b);
}

/* Copies bert-tiny to a temp dir with config.json's `key` set to `value` (when key != NULL) and
 * model.safetensors cut short by `cut` bytes. */
static void doctored(char *tmp, const char *key, int value, long cut) {
    cr_assert(mkdtemp(test_tmp_template(tmp, 1024, "encoder")));
    char src[1024], dst[1100];
    fixture_path(src, sizeof src, "bert-tiny", "model.safetensors");
    snprintf(dst, sizeof dst, "%s/model.safetensors", tmp);
    copy_file(src, dst, cut);
    fixture_path(src, sizeof src, "bert-tiny", "config.json");
    snprintf(dst, sizeof dst, "%s/config.json", tmp);
    FILE *f = fopen(src, "rb");
    cr_assert(f);
    char cfg[8192];
    size_t n = fread(cfg, 1, sizeof cfg - 1, f);
    cfg[n] = 0;
    fclose(f);
    if (key) {
        char pat[128];
        snprintf(pat, sizeof pat, "\"%s\":", key);
        char *p = strstr(cfg, pat);
        cr_assert(p, "config lacks %s", key);
        p += strlen(pat);
        while (*p == ' ') p++;
        char *q = p;
        while (*q >= '0' && *q <= '9') q++;
        char rest[8192];
        strcpy(rest, q);
        sprintf(p, "%d%s", value, rest);
    }
    f = fopen(dst, "wb");
    cr_assert(f);
    fputs(cfg, f);
    fclose(f);
}

static void cleanup(const char *tmp) {
    char p[1100];
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", tmp);
    unlink(p);
    rmdir(tmp);
}

static void expect_load_error(const char *key, int value, long cut, int code, const char *needle) {
    char tmp[1024];
    doctored(tmp, key, value, cut);
    eng_model *m = NULL;
    eng_err e = {0};
    int rc = eng_model_load(tmp, &m, &e);
    cleanup(tmp);
    cr_assert_eq(rc, code, "%s=%d cut %ld: got %d (%s)", key ? key : "-", value, cut, rc, e.msg);
    cr_assert(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
    cr_assert_null(m);
}

Test(encoder, load_errors_name_the_problem) {
    expect_load_error(NULL, 0, 100, ENG_FORMAT, "beyond the");                     /* truncated file */
    expect_load_error("num_hidden_layers", 3, 0, ENG_FORMAT, "encoder.layer.2.");    /* missing tensor */
    expect_load_error("num_hidden_layers", 1, 0, ENG_FORMAT, "unexpected tensor 'encoder.layer.1."); /* extra */
    expect_load_error("intermediate_size", 96, 0, ENG_SHAPE, "intermediate.dense.weight"); /* wrong shape */
    expect_load_error("num_attention_heads", 7, 0, ENG_FORMAT, "inconsistent sizes");
    eng_model *m;
    eng_err e;
    cr_assert_eq(eng_model_load("/nonexistent-model-dir", &m, &e), ENG_NOT_FOUND);
}

Test(encoder, bad_inputs_are_rejected) {
    char dir[1024];
    eng_model *m;
    eng_err e = {0};
    fixture_path(dir, sizeof dir, "bert-tiny", NULL);
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    const eng_config *c = eng_model_config(m);
    eng_state *st = eng_state_new(2);
    float *out = malloc(sizeof(float) * (size_t)(c->max_pos + 1) * c->hidden);
    int32_t ids[512] = {0}, len = 3;
    ids[1] = c->vocab; /* one past the vocabulary */
    eng_batch b = {.n_seq = 1, .ids = ids, .seq_len = &len};
    cr_assert_eq(eng_encode(m, st, &b, out, NULL, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "outside the vocabulary"), "%s", e.msg);
    ids[1] = 5;
    int32_t types[3] = {0, 2, 0};
    b.type_ids = types;
    cr_assert_eq(eng_encode(m, st, &b, out, NULL, &e), ENG_INVALID_ARGUMENT);
    b.type_ids = NULL;
    len = c->max_pos + 1;
    cr_assert_eq(eng_encode(m, st, &b, out, NULL, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "at most"), "%s", e.msg);
    len = 0;
    cr_assert_eq(eng_encode(m, st, &b, out, NULL, &e), ENG_INVALID_ARGUMENT);
    free(out);
    eng_state_free(st);
    eng_model_free(m);
}
