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
#include "engine/files.h"
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

/* The micro fixtures (the config.json fuzz harness's weights) hold the single case only. */
Test(encoder, micro_fixtures_match_reference) {
    static const char *micro[] = {"bert-micro", "roberta-micro", "distilbert-micro", "bert-micro-bf16-sharded"};
    for (size_t i = 0; i < sizeof micro / sizeof micro[0]; i++) {
        char dir[1024], msg[1024];
        fixture_path(dir, sizeof dir, micro[i], NULL);
        encoder_check_result r;
        cr_assert_eq(encoder_check(dir, 2, TOL, 1e-5f, &r, msg, sizeof msg), 0, "%s: %s", micro[i], msg);
        cr_assert_eq(r.cases, 1, "%s: %d expected cases", micro[i], r.cases);
    }
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

/* ---- lower precision ---- */

/* The backbone in bf16 and int8 against the same float64 PyTorch reference (the fixtures), which
 * the float32 path matches within 2e-5. The portable kernels compute the same quantized products as
 * the AVX-512 ones (tests/engine/math/test_gemm_lowp.c), so emulation is allowed here and the
 * portable build checks the same numbers.
 *
 * Tolerances, on outputs of magnitude ~1-4 after LayerNorm (hidden 64, 2 layers): a bf16 operand
 * carries a relative rounding error up to 2^-9, an int8 one up to 1/254 of its row's (or output
 * feature's) largest magnitude; over the four products of two layers that gave at most 0.014 (bf16)
 * and 0.064 (int8), mean 0.0023 and 0.0092, on every fixture. The bounds are 2.5x those: bf16 max
 * 0.035, mean 0.006; int8 max 0.16, mean 0.025. A floor (max > 1e-4, 5x the float32 path's error)
 * proves the lower precision actually ran. */
static void check_prec(const char *name, eng_precision prec, float tol, double tol_mean) {
    char dir[1024], msg[1024];
    fixture_path(dir, sizeof dir, name, NULL);
    eng_model_params p = eng_model_default_params();
    p.precision = prec;
    p.allow_emulated = 1;
    encoder_check_result r;
    int rc = encoder_check_params(dir, &p, 2, tol, 1e-5f, &r, msg, sizeof msg);
    cr_log_info("%s %s: max |diff| hidden %.3g pooled %.3g, mean %.3g", name, eng_precision_name(prec), r.max_hidden,
                r.max_pooled, r.mean_hidden);
    cr_assert_eq(rc, 0, "%s %s: %s", name, eng_precision_name(prec), msg);
    cr_assert_leq(r.mean_hidden, tol_mean, "%s %s: mean |diff| %g > %g", name, eng_precision_name(prec), r.mean_hidden,
                  tol_mean);
    cr_assert_gt(r.max_hidden, 1e-4f, "%s %s: no rounding at all: did the float32 path run?", name,
                 eng_precision_name(prec));
}

Test(encoder, bf16_and_int8_near_reference) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        check_prec(models[i], ENG_PRECISION_BF16, 0.035f, 0.006);
        check_prec(models[i], ENG_PRECISION_INT8, 0.16f, 0.025);
    }
}

Test(encoder, precision_info_and_refusal) {
    char dir[1024];
    fixture_path(dir, sizeof dir, "bert-tiny", NULL);
    size_t bytes[3] = {0};
    for (int k = 0; k < 3; k++) {
        eng_model_params p = eng_model_default_params();
        p.precision = (eng_precision)k;
        eng_model *m = NULL;
        eng_err e = {0};
        int rc = eng_model_load_params(dir, &p, &m, &e);
        if (rc) { /* refused: only a low precision this CPU has no fast kernel for, said in words */
            cr_assert_neq(k, ENG_PRECISION_FP32, "%s", e.msg);
            cr_assert_eq(rc, ENG_UNSUPPORTED, "%s", e.msg);
            cr_assert(strstr(e.msg, "AVX2") || strstr(e.msg, "NEON"), "%s", e.msg); /* what the CPU (x86-64, ARM64) lacks */
            cr_assert_null(m);
            p.allow_emulated = 1;
            cr_assert_eq(eng_model_load_params(dir, &p, &m, &e), 0, "%s", e.msg);
        }
        eng_model_precision_info pi = eng_model_precision(m);
        cr_assert_eq(pi.precision, (eng_precision)k);
        cr_assert_str_eq(pi.name, k == 0 ? "fp32" : k == 1 ? "bf16" : "int8");
        cr_assert(pi.kernel && *pi.kernel);
        if (!rc && k) cr_assert_str_neq(pi.kernel, "c");
        bytes[k] = pi.packed_bytes;
        eng_model_free(m);
    }
    /* 2 layers of (3H + H + I + I) x H weights, H 64, I 128 (config.json): 4, 2, ~1 bytes each */
    size_t w = 2 * (size_t)(3 * 64 + 64 + 128 + 128) * 64;
    cr_assert_geq(bytes[0], 4 * w);
    cr_assert_lt(bytes[1], bytes[0] * 6 / 10);
    cr_assert_lt(bytes[2], bytes[1] * 7 / 10);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

Test(encoder, model_json_precision) {
    char tmp[1024], p[1100];
    cr_assert(mkdtemp(test_tmp_template(tmp, sizeof tmp, "modeljson")));
    eng_precision prec = ENG_PRECISION_FP32;
    eng_err e = {0};
    cr_assert_eq(eng_model_json_precision(tmp, &prec, &e), 0); /* no file: left alone */
    cr_assert_eq(prec, ENG_PRECISION_FP32);
    snprintf(p, sizeof p, "%s/model.json", tmp);
    write_text(p, "{\"precision\": \"INT8\"}");
    cr_assert_eq(eng_model_json_precision(tmp, &prec, &e), 0, "%s", e.msg);
    cr_assert_eq(prec, ENG_PRECISION_INT8);
    write_text(p, "{\"precision\": \"fp16\"}");
    cr_assert_eq(eng_model_json_precision(tmp, &prec, &e), ENG_FORMAT);
    cr_assert(strstr(e.msg, "precision"), "%s", e.msg);
    write_text(p, "{\"precision\": ");
    cr_assert_eq(eng_model_json_precision(tmp, &prec, &e), ENG_FORMAT);
    write_text(p, "{}");
    prec = ENG_PRECISION_BF16;
    cr_assert_eq(eng_model_json_precision(tmp, &prec, &e), 0);
    cr_assert_eq(prec, ENG_PRECISION_BF16);
    unlink(p);
    rmdir(tmp);
}

/* eng_model_load_config with the bytes of config.json builds the model eng_model_load builds from
 * the folder (same config, same hidden states), and refuses a cut-short or swapped config from
 * memory as it would from the file. */
Test(encoder, load_config_from_memory_matches_folder) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char dir[1024], path[1100];
        fixture_path(dir, sizeof dir, models[i], NULL);
        snprintf(path, sizeof path, "%s/config.json", dir);
        char *text = NULL;
        size_t len = 0;
        eng_err e = {0};
        cr_assert_eq(eng_file_read(path, 1 << 20, &text, &len, &e), 0, "%s", e.msg);
        eng_model *a = NULL, *b = NULL;
        eng_model_params p = eng_model_default_params();
        cr_assert_eq(eng_model_load(dir, &a, &e), 0, "%s", e.msg);
        cr_assert_eq(eng_model_load_config(dir, text, len, &p, &b, &e), 0, "%s", e.msg);
        cr_expect_arr_eq(eng_model_config(a), eng_model_config(b), sizeof(eng_config), "%s", models[i]);
        int32_t ids[5] = {2, 7, 11, 5, 3}, seq_len = 5;
        int h = eng_model_config(a)->hidden;
        eng_batch batch = {.n_seq = 1, .ids = ids, .type_ids = NULL, .seq_len = &seq_len};
        float *ha = calloc((size_t)5 * h, sizeof *ha), *hb = calloc((size_t)5 * h, sizeof *hb);
        eng_state *st = eng_state_new(1);
        cr_assert(ha && hb && st);
        cr_assert_eq(eng_encode(a, st, &batch, ha, NULL, &e), 0, "%s", e.msg);
        cr_assert_eq(eng_encode(b, st, &batch, hb, NULL, &e), 0, "%s", e.msg);
        cr_expect_arr_eq(ha, hb, (size_t)5 * h * sizeof *ha, "%s: same weights, same config, same states", models[i]);
        eng_state_free(st);
        free(ha);
        free(hb);
        eng_model_free(b);
        cr_expect_eq(eng_model_load_config(dir, text, len / 2, &p, &b, &e), ENG_FORMAT, "%s", e.msg);
        cr_expect_null(b);
        cr_expect(strstr(e.msg, "config.json") != NULL, "%s", e.msg);
        eng_model_free(a);
        free(text);
    }
    char dir[1024];
    fixture_path(dir, sizeof dir, "bert-tiny", NULL);
    eng_model *m = NULL;
    eng_model_params p = eng_model_default_params();
    eng_err e = {0};
    static const char distil[] = "{\"model_type\": \"distilbert\", \"dim\": 64, \"n_layers\": 2, \"n_heads\": 4, "
                                 "\"hidden_dim\": 128, \"vocab_size\": 1024, \"max_position_embeddings\": 64}";
    cr_expect_neq(eng_model_load_config(dir, distil, sizeof distil - 1, &p, &m, &e), 0, "BERT weights, DistilBERT config");
    cr_expect_null(m);
}

/* eng_file_read: the whole file, or a refusal past the limit or for what is not a regular file. */
Test(encoder, file_read_limits) {
    char dir[1024], path[1100];
    fixture_path(dir, sizeof dir, "bert-tiny", NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    char *text = NULL;
    size_t len = 0;
    eng_err e = {0};
    cr_assert_eq(eng_file_read(path, (size_t)st.st_size, &text, &len, &e), 0, "%s", e.msg);
    cr_expect_eq(len, (size_t)st.st_size);
    cr_expect_eq(text[len], '\0');
    free(text);
    cr_expect_eq(eng_file_read(path, (size_t)st.st_size - 1, &text, &len, &e), ENG_TOO_LARGE, "%s", e.msg);
    cr_expect_null(text);
    cr_expect_eq(eng_file_read(dir, 1 << 20, &text, &len, &e), ENG_NOT_FOUND, "a folder is not a file");
}

/* Found by the config.json fuzz harness: max_position_embeddings 165555555 over the micro weights
 * sized a 5 GB arena before the position table's shape was checked. A config that implies more
 * weights than the checkpoint holds is refused before anything is allocated from it: here the
 * arena would be 10^18 bytes, which fails (ENG_NO_MEMORY, or an ASan report) where it is tried. */
Test(encoder, config_larger_than_checkpoint_is_refused_before_allocating) {
    char dir[1024];
    fixture_path(dir, sizeof dir, "bert-micro", NULL);
    static const char *const configs[] = {
        "{\"model_type\": \"bert\", \"hidden_size\": 536870000, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
        "\"intermediate_size\": 16, \"vocab_size\": 32, \"max_position_embeddings\": 536870000}",
        "{\"model_type\": \"bert\", \"hidden_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
        "\"intermediate_size\": 536870000, \"vocab_size\": 32, \"max_position_embeddings\": 16}",
        "{\"model_type\": \"bert\", \"hidden_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
        "\"intermediate_size\": 16, \"vocab_size\": 32, \"max_position_embeddings\": 165555555}",
    };
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        eng_model *m = NULL;
        eng_model_params p = eng_model_default_params();
        eng_err e = {0};
        cr_expect_eq(eng_model_load_config(dir, configs[i], strlen(configs[i]), &p, &m, &e), ENG_SHAPE, "config %zu: %s", i,
                     e.msg);
        cr_expect(strstr(e.msg, "checkpoint holds") != NULL, "config %zu: %s", i, e.msg);
        cr_expect_null(m);
    }
}

/* Found by the config.json fuzz harness (UBSan): "layer_norm_eps": -1 made LayerNorm take the root
 * of a negative variance, and the NaN reached a float-to-int conversion in the GELU's exp. */
Test(encoder, layer_norm_eps_must_be_positive) {
    char dir[1024];
    fixture_path(dir, sizeof dir, "bert-micro", NULL);
    static const char *const eps[] = {"-1", "0", "1e300"};
    for (size_t i = 0; i < sizeof eps / sizeof eps[0]; i++) {
        char cfg[512];
        snprintf(cfg, sizeof cfg,
                 "{\"model_type\": \"bert\", \"hidden_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "
                 "\"intermediate_size\": 16, \"vocab_size\": 32, \"max_position_embeddings\": 16, \"layer_norm_eps\": %s}",
                 eps[i]);
        eng_model *m = NULL;
        eng_model_params p = eng_model_default_params();
        eng_err e = {0};
        cr_expect_eq(eng_model_load_config(dir, cfg, strlen(cfg), &p, &m, &e), ENG_FORMAT, "eps %s: %s", eps[i], e.msg);
        cr_expect(strstr(e.msg, "layer_norm_eps") != NULL, "%s", e.msg);
        cr_expect_null(m);
    }
}
