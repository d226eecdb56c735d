/* test_modernbert.c - ModernBERT (model/modernbert.c) against the PyTorch reference's outputs, and
 * what it refuses with a reason.
 *
 * tests/fixtures/models/modernbert-tiny was written by tools/reference/gen_modernbert.py (3 layers:
 * layer 0 global with the identity attn_norm, layers 1 and 2 local with a window of 16, so the
 * packed case's sequences of up to 64 tokens cross windows; H 64, 4 heads, GeGLU 2 x 96, 'model.'
 * keys, prediction head, a classifier the encoder ignores, mean pooling). The oracle is a float64
 * padded, masked batch; tolerance 2e-5 as for the BERT fixtures (test_encoder.c). The 8,192-token
 * and base-shape checks need torch and run in tests/parity (parity_modernbert). */
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
#include "engine/task.h"

#define TOL 2e-5f

static void fixture(char *out, size_t n, const char *rest) {
    snprintf(out, n, "%s/models/modernbert-tiny%s%s", ADAPTERD_FIXTURES, rest ? "/" : "", rest ? rest : "");
}

Test(modernbert, matches_reference) {
    char dir[1024], msg[1024];
    fixture(dir, sizeof dir, NULL);
    for (int threads = 1; threads <= 3; threads++) {
        encoder_check_result r;
        cr_assert_eq(encoder_check(dir, threads, TOL, 1e-5f, &r, msg, sizeof msg), 0, "%d threads: %s", threads, msg);
        cr_assert_eq(r.cases, 2);
        cr_assert_eq(r.sequences, 13);
    }
}

Test(modernbert, config_fields) {
    char dir[1024];
    eng_model *m;
    eng_err e = {0};
    fixture(dir, sizeof dir, NULL);
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    const eng_config *c = eng_model_config(m);
    cr_assert_eq(c->arch, ENG_ARCH_MODERNBERT);
    cr_assert_eq(c->glu, 1);
    cr_assert_eq(c->global_every, 3);
    cr_assert_eq(c->local_window, 16);
    cr_assert_eq(c->max_pos, 8192);
    cr_assert_eq(c->type_vocab, 0);
    cr_assert_eq(c->has_pooler, 1); /* head.dense + head.norm */
    cr_assert_eq(c->pool_mean, 1);
    cr_assert_float_eq(c->rope_global, 160000.0f, 1e-3);
    cr_assert_float_eq(c->rope_local, 10000.0f, 1e-3);
    cr_assert_float_eq(c->ln_eps, 1e-5f, 1e-12);
    eng_model_free(m);
}

/* Past max_position_embeddings: a clear error, not a read beyond the rotary tables. */
Test(modernbert, too_long_is_refused) {
    char dir[1024];
    eng_model *m;
    eng_err e = {0};
    fixture(dir, sizeof dir, NULL);
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    int n = 8193, H = eng_model_config(m)->hidden;
    int32_t *ids = calloc((size_t)n, sizeof *ids), len = n;
    float *h = malloc((size_t)n * H * sizeof *h);
    cr_assert(ids && h);
    for (int i = 0; i < n; i++) ids[i] = 3 + i % 1000;
    eng_state *st = eng_state_new(2);
    eng_batch b = {.n_seq = 1, .ids = ids, .seq_len = &len};
    cr_assert_eq(eng_encode(m, st, &b, h, NULL, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "8193 tokens") && strstr(e.msg, "8192"), "%s", e.msg);
    eng_state_free(st);
    free(ids);
    free(h);
    eng_model_free(m);
}

/* ---- configs that are refused, on a copy of the fixture ---- */

/* Loads the fixture's weights with its config.json's text `from` replaced by `to`; returns the status. */
static int load_with(const char *from, const char *to, eng_err *e) {
    char dir[1024];
    fixture(dir, sizeof dir, NULL);
    int rc = encoder_load_edited(dir, from, to, e);
    cr_assert(rc != -1, "config lacks %s", from);
    return rc;
}

Test(modernbert, bad_configs_are_refused_with_the_field) {
    eng_err e = {0};
    cr_assert_eq(load_with("\"classifier_pooling\": \"mean\"", "\"classifier_pooling\": \"max\"", &e), ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "classifier_pooling 'max'"), "%s", e.msg);
    cr_assert_eq(load_with("\"global_attn_every_n_layers\": 3", "\"global_attn_every_n_layers\": 0", &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "global_attn_every_n_layers"), "%s", e.msg);
    cr_assert_eq(load_with("\"max_position_embeddings\": 8192", "\"max_position_embeddings\": 100000000", &e),
                 ENG_UNSUPPORTED);
    cr_assert(strstr(e.msg, "max_position_embeddings"), "%s", e.msg);
    cr_assert_eq(load_with("\"global_rope_theta\": 160000.0", "\"global_rope_theta\": -1", &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "global_rope_theta"), "%s", e.msg);
    cr_assert_eq(load_with("\"hidden_activation\": \"gelu\"", "\"hidden_activation\": \"nope\"", &e), ENG_UNSUPPORTED);
    /* a config asking for a layer the checkpoint lacks names the tensor */
    cr_assert_eq(load_with("\"num_hidden_layers\": 3", "\"num_hidden_layers\": 4", &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "layers.3."), "%s", e.msg);
    /* fewer layers than the checkpoint holds: a leftover tensor of the encoder */
    cr_assert_eq(load_with("\"num_hidden_layers\": 3", "\"num_hidden_layers\": 2", &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "unexpected tensor 'model.layers.2."), "%s", e.msg);
}

/* What ModernBERT refuses at load, with the reason: prefix tuning (AdapterHub's ModernBERT interface
 * has no prefix site), original_ln_after false (its hooked pre-norm layers add their own residual;
 * AdapterHub refuses it too), and another family's adapter (bert-tiny's, BERT's module names). The
 * ModernBERT configs are written to a scratch folder: the loader refuses them before reading weights.
 * Bottleneck adapters, fusion and LoRA themselves load and match the reference in tests/parity
 * (parity_modernbert_adapters). */
static int load_config(const eng_model *m, const char *config_json, eng_err *e) {
    char dir[1024], path[1100];
    test_tmp_template(dir, sizeof dir, "mbad");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"config\": %s, \"hidden_size\": 64, \"model_class\": \"ModernBertForSequenceClassification\", "
               "\"model_name\": \"m\", \"model_type\": \"modernbert\", \"name\": \"t\", \"version\": \"adapters.1.1.0\"}",
            config_json);
    fclose(f);
    const char *dirs[1] = {dir};
    eng_task *t = NULL;
    int rc = eng_task_load(m, dirs, 1, NULL, &t, e);
    cr_assert_null(t);
    remove(path);
    rmdir(dir);
    return rc;
}

Test(modernbert, adapters_without_a_site_are_refused) {
    char dir[1024], ad[1024];
    eng_model *m;
    eng_err e = {0};
    fixture(dir, sizeof dir, NULL);
    cr_assert_eq(eng_model_load(dir, &m, &e), 0, "%s", e.msg);
    cr_assert_eq(load_config(m, "{\"architecture\": \"prefix_tuning\", \"prefix_length\": 8, \"flat\": false}", &e),
                 ENG_UNSUPPORTED, "%s", e.msg);
    cr_assert(strstr(e.msg, "prefix tuning is not supported on ModernBERT"), "%s", e.msg);
    cr_assert_eq(load_config(m, "{\"architecture\": \"union\", \"configs\": [{\"architecture\": \"prefix_tuning\"}, "
                                "{\"architecture\": \"bottleneck\", \"is_parallel\": true}]}", &e),
                 ENG_UNSUPPORTED, "MAM: %s", e.msg);
    cr_assert(strstr(e.msg, "prefix tuning"), "%s", e.msg);
    cr_assert_eq(load_config(m, "{\"architecture\": \"bottleneck\", \"original_ln_after\": false, "
                                "\"output_adapter\": true, \"reduction_factor\": 16}", &e),
                 ENG_UNSUPPORTED, "%s", e.msg);
    cr_assert(strstr(e.msg, "original_ln_after false is not supported on ModernBERT"), "%s", e.msg);
    snprintf(ad, sizeof ad, "%s/adapters/bert-tiny/seq_bn_bin/adapters/sst", ADAPTERD_FIXTURES);
    const char *dirs[1] = {ad};
    eng_task *t = NULL;
    cr_assert_eq(eng_task_load(m, dirs, 1, NULL, &t, &e), ENG_UNSUPPORTED, "%s", e.msg);
    cr_assert(strstr(e.msg, "model type 'bert'") && strstr(e.msg, "modernbert"), "%s", e.msg);
    cr_assert_null(t);
    eng_model_free(m);
}
