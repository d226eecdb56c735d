/* test_deberta.c - ELECTRA and DeBERTa-v2 (engine/model/deberta.c) against the PyTorch reference's
 * outputs (tests/fixtures/models/{electra-tiny,deberta-tiny,deberta-tiny-proj}, written by
 * tools/reference/gen_encoder.py from tools/reference/deberta.py), the relative-position index
 * against the reference's log buckets, and the configs and adapters they refuse, with the reason.
 * Tolerance 2e-5 absolute, as test_encoder.c (float32 sums over hidden 64, 2 layers; the fixtures'
 * own float32 path is within 1.5e-6 of their float64 oracle). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "encoder_check.h"
#include "engine/model.h"
#include "engine/task.h"
#include "model/deberta.h"
#include "test_tmp.h"

#define TOL 2e-5f

static void fixture_path(char *out, size_t n, const char *sub, const char *model) {
    snprintf(out, n, "%s/%s/%s", ADAPTERD_FIXTURES, sub, model);
}

Test(deberta, fixtures_match_reference) {
    static const char *models[] = {"electra-tiny", "deberta-tiny", "deberta-tiny-proj"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        for (int threads = 1; threads <= 2; threads++) {
            char dir[1024], msg[1024];
            fixture_path(dir, sizeof dir, "models", models[i]);
            encoder_check_result r;
            cr_assert_eq(encoder_check(dir, threads, TOL, 1e-5f, &r, msg, sizeof msg), 0, "%s (%d threads): %s",
                         models[i], threads, msg);
            cr_assert_eq(r.cases, 4, "%s: %d cases (single, packed, pair, long)", models[i], r.cases);
        }
}

Test(deberta, config_fields) {
    char dir[1024];
    eng_model *m;
    eng_err e = {0};
    fixture_path(dir, sizeof dir, "models", "electra-tiny");
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    const eng_config *c = eng_model_config(m);
    cr_assert_eq(c->arch, ENG_ARCH_ELECTRA);
    cr_assert_eq(c->emb_dim, 32);
    cr_assert_eq(c->hidden, 64);
    cr_assert_eq(c->has_pooler, 0);
    eng_model_free(m);
    fixture_path(dir, sizeof dir, "models", "deberta-tiny");
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    c = eng_model_config(m);
    cr_assert_eq(c->arch, ENG_ARCH_DEBERTA_V2);
    cr_assert(c->c2p && c->p2c && c->share_att_key && c->norm_rel && !c->pos_biased);
    cr_assert_eq(c->rel_buckets, 8);
    cr_assert_eq(c->rel_max, 64); /* max_relative_positions -1: max_position_embeddings */
    cr_assert_eq(c->rel_span, 8);
    cr_assert_float_eq(c->ln_eps, 1e-7f, 1e-14);
    eng_model_free(m);
}

/* Row of the relative table for distance i - j, deberta-v3's config (256 buckets, max_relative_positions
 * = max_position_embeddings 512). Expected values from the reference's float32 log buckets:
 *   X.make_cfg("deberta-v2", 768, 1, 12, 3072, 10, 512); torch.clamp(X.log_bucket(d, 256, 512) + 256, 0, 511)
 * (tools/reference/deberta.py), which matches Hugging Face's make_log_bucket_position (README there). */
Test(deberta, relative_index_matches_reference) {
    eng_config c = {.arch = ENG_ARCH_DEBERTA_V2, .max_pos = 512, .rel_buckets = 256, .rel_max = 512, .rel_span = 256};
    static const int want[][2] = {{0, 256},    {1, 257},    {-1, 255},  {127, 383}, {-127, 129}, {128, 384},
                                  {-128, 128}, {129, 385},  {-129, 127}, {130, 386}, {200, 425},  {-200, 87},
                                  {255, 448},  {256, 448},  {300, 463}, {-300, 49}, {400, 489},  {511, 511},
                                  {-511, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_eq(eng__deberta_rel_index(&c, want[i][0]), want[i][1], "distance %d", want[i][0]);
    /* every distance: monotonic, and odd about the middle (bucket(-d) = -bucket(d)) */
    for (int d = -510; d <= 511; d++) {
        cr_assert_leq(eng__deberta_rel_index(&c, d - 1), eng__deberta_rel_index(&c, d), "distance %d", d);
        cr_assert_eq(eng__deberta_rel_index(&c, -d) - 256, 256 - eng__deberta_rel_index(&c, d), "distance %d", d);
    }
    /* no buckets: the distance itself, clamped to the table */
    eng_config nb = {.arch = ENG_ARCH_DEBERTA_V2, .max_pos = 64, .rel_max = 16, .rel_span = 16};
    cr_assert_eq(eng__deberta_rel_index(&nb, 5), 21);
    cr_assert_eq(eng__deberta_rel_index(&nb, 40), 31);
    cr_assert_eq(eng__deberta_rel_index(&nb, -40), 0);
}

/* deberta-tiny's config.json with `from` replaced by `to`, loaded against its own weights. */
static int load_with(const char *from, const char *to, eng_err *e) {
    char dir[1024];
    fixture_path(dir, sizeof dir, "models", "deberta-tiny");
    int rc = encoder_load_edited(dir, from, to, e);
    cr_assert(rc != -1, "config lacks %s", from);
    return rc;
}

Test(deberta, unsupported_configs_refused_with_reason) {
    eng_err e = {0};
    cr_assert_eq(load_with("\"relative_attention\": true", "\"relative_attention\": true, \"conv_kernel_size\": 3", &e),
                 ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "convolution"), "%s", e.msg);
    cr_assert_eq(load_with("\"relative_attention\": true", "\"relative_attention\": false", &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "relative_attention"), "%s", e.msg);
    cr_assert_eq(load_with("\"c2p\"", "\"p2p\"", &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "p2p"), "%s", e.msg);
    cr_assert_eq(load_with("\"position_buckets\": 8", "\"position_buckets\": 200", &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "position_buckets"), "%s", e.msg);
    /* a checkpoint of another shape: the relative table no longer fits the config */
    cr_assert_eq(load_with("\"position_buckets\": 8", "\"position_buckets\": 10", &e), ENG_SHAPE);
    cr_assert(strstr(e.msg, "rel_embeddings"), "%s", e.msg);
    cr_assert_eq(load_with("\"position_buckets\": 8", "\"position_buckets\": 8", &e), 0, "%s", e.msg);
}

static void copy_file(const char *from, const char *to, const char *replace, const char *with) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    cr_assert(a && b, "copy %s -> %s", from, to);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, a);
    buf[n] = 0;
    char *p = replace ? strstr(buf, replace) : NULL;
    if (p) {
        fwrite(buf, 1, (size_t)(p - buf), b);
        fputs(with, b);
        fwrite(p + strlen(replace), 1, n - (size_t)(p - buf) - strlen(replace), b);
    } else {
        fwrite(buf, 1, n, b);
    }
    fclose(a);
    fclose(b);
}

static int load_task(const char *model, const char *adapter_dir, eng_err *e) {
    char dir[1024];
    eng_model *m;
    fixture_path(dir, sizeof dir, "models", model);
    cr_assert_eq(eng_model_load(dir, &m, e), 0, "%s", e->msg);
    eng_task *t = NULL;
    const char *dirs[1] = {adapter_dir};
    eng_task_params p = eng_task_default_params();
    int rc = eng_task_load(m, dirs, 1, &p, &t, e);
    eng_task_free(t);
    eng_model_free(m);
    return rc;
}

/* A BERT-family adapter (its modules are attention.self.query, ...) is refused on DeBERTa (AdapterHub: by
 * its model_type; PEFT: by its module names) but loads on ELECTRA, and prefix
 * tuning, which has no place in relative attention, even when it claims to be for DeBERTa. */
Test(deberta, adapters_without_their_site_refused_at_load) {
    char src[1024], tmp[1024], a[1200], b[1200];
    eng_err e = {0};
    fixture_path(src, sizeof src, "adapters", "bert-tiny/prefix/adapters/prefix_task");
    cr_assert_eq(load_task("deberta-tiny", src, &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "model type 'bert'"), "%s", e.msg);
    /* PEFT files carry no model type: their module names tell */
    fixture_path(b, sizeof b, "adapters", "bert-tiny/peft_lora/adapters/peft_task");
    cr_assert_eq(load_task("deberta-tiny", b, &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "another model family") && strstr(e.msg, "attention.self.query_proj"), "%s", e.msg);
    cr_assert_eq(load_task("electra-tiny", b, &e), 0, "%s", e.msg); /* BERT's names are ELECTRA's */
    /* ...but electra-tiny's word embeddings are 32 wide, projected to 64: no embedding LoRA there */
    fixture_path(b, sizeof b, "adapters", "bert-tiny/peft_lora_embedding/adapters/peft_task");
    cr_assert_eq(load_task("electra-tiny", b, &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "word embeddings of width 32"), "%s", e.msg);
    /* a head on the pooler output: neither ELECTRA nor DeBERTa has one */
    fixture_path(b, sizeof b, "adapters", "bert-tiny/head_pooler/adapters/pool");
    cr_assert_eq(load_task("electra-tiny", b, &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "pooler output") && strstr(e.msg, "electra"), "%s", e.msg);
    cr_assert(mkdtemp(test_tmp_template(tmp, sizeof tmp, "deberta")));
    static const char *files[] = {"adapter_config.json", "pytorch_adapter.bin"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", src, files[i]);
        snprintf(b, sizeof b, "%s/%s", tmp, files[i]);
        copy_file(a, b, i ? NULL : "\"model_type\": \"bert\"", "\"model_type\": \"deberta-v2\"");
    }
    cr_assert_eq(load_task("deberta-tiny", tmp, &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "prefix tuning") && strstr(e.msg, "DeBERTa"), "%s", e.msg);
    for (int i = 0; i < 2; i++) {
        snprintf(b, sizeof b, "%s/%s", tmp, files[i]);
        unlink(b);
    }
    rmdir(tmp);
}
