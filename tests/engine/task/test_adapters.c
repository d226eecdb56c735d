/* test_adapters.c - every adapter form, head and fusion in tests/fixtures/adapters against the
 * PyTorch reference (tools/reference/gen_adapters.py), at skip 0 and skip 1, all sequences of a case
 * run together through the planner.
 *
 * Tolerance 1e-4 on logits (float32 against the float64 oracle on these 2-layer models differs by
 * ~1e-6). Each case's largest reference logit is printed so a vanishing check would show. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/safetensors_write.h"
#include "ref_case.h"
#include "task/task_impl.h"
#include "task_check.h"
#include "test_tmp.h"

static int check_backbone(const char *backbone, int threads) {
    char root[1024], dir[1200];
    snprintf(root, sizeof root, "%s", ADAPTERD_FIXTURES);
    snprintf(dir, sizeof dir, "%s/adapters/%s", ADAPTERD_FIXTURES, backbone);
    DIR *d = opendir(dir);
    cr_assert(d, "no %s", dir);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char c[2400], msg[2048];
        snprintf(c, sizeof c, "%s/%s", dir, de->d_name);
        task_check_result r;
        int rc = task_check(root, c, threads, 1e-4f, &r, msg, sizeof msg);
        cr_log_info("%s/%s: %d files, max |diff| %.2g, max |logit| %.3g", backbone, de->d_name, r.files, r.max_diff,
                    r.max_logit);
        cr_expect_eq(rc, 0, "%s/%s: %s", backbone, de->d_name, msg);
        cr_expect_gt(r.max_logit, 0.0f, "%s/%s: reference logits are all zero", backbone, de->d_name);
        n++;
    }
    closedir(d);
    return n;
}

Test(adapters, bert_tiny_all_forms) { cr_assert_geq(check_backbone("bert-tiny", 2), 20); }
Test(adapters, roberta_tiny) { cr_assert_geq(check_backbone("roberta-tiny", 2), 4); }
Test(adapters, distilbert_tiny) { cr_assert_geq(check_backbone("distilbert-tiny", 1), 4); }
/* ModernBERT's fused attn.Wqkv LoRA is one B split into q, k and v slices at load (AdapterHub's merged
 * form in task/load_adapterhub.c, PEFT's in task/load_lora.c); when the slices pointed into one
 * allocation, packing the first freed the B the others still read (logits off by up to 4,
 * different at every level; AddressSanitizer names it here). AdapterHub q,v + Wi + Wo and q,k,v, PEFT
 * Wqkv + Wo + Wi. The other ModernBERT cases: parity_modernbert[_adapters]. */
Test(adapters, modernbert_tiny_fused_qkv_lora) { cr_assert_eq(check_backbone("modernbert-tiny", 2), 3); }

Test(adapters, sparse_storage_gives_the_same_logits) {
    /* threshold 0 stores every bottleneck matrix in CSR and runs the sparse kernel */
    const char *cases[] = {"seq_bn_st", "double_seq_bn_bin", "par_bn", "fusion_dynamic_n3", "seq_bn_ln_before_after",
                           "adamix_seq_bn"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char c[1200], msg[2048];
        snprintf(c, sizeof c, "%s/adapters/bert-tiny/%s", ADAPTERD_FIXTURES, cases[i]);
        task_check_result r;
        cr_expect_eq(task_check_sparse(ADAPTERD_FIXTURES, c, 2, 1e-4f, 0.0f, &r, msg, sizeof msg), 0, "%s: %s", cases[i],
                     msg);
    }
}

/* The forms a task reports (GET /v1/tasks "adapters", the command line's "kind") are AdapterHub's
 * config names, whatever the saved config spells: Pfeiffer is seq_bn, Houlsby double_seq_bn. The
 * expected names come from each fixture's notes (setup.json, written with the config that built it). */
Test(adapters, forms_are_named_as_adapterhub_configs) {
    static const struct {
        const char *fixture, *kind;
    } cases[] = {{"seq_bn_st", "seq_bn"},      {"double_seq_bn_st", "double_seq_bn"}, {"par_bn", "par_bn"},
                 {"prefix", "prefix_tuning"}, {"prefix_flat", "prefix_tuning"},     {"lora_ah", "lora"},
                 {"ia3", "ia3"},              {"peft_lora", "lora"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char c[1200], msg[512];
        snprintf(c, sizeof c, "%s/adapters/bert-tiny/%s", ADAPTERD_FIXTURES, cases[i].fixture);
        ref_case rc;
        cr_assert_eq(ref_case_open(&rc, ADAPTERD_FIXTURES, c, msg, sizeof msg), 0, "%s", msg);
        eng_model *m = NULL;
        eng_task *t = NULL;
        eng_err e = {0};
        cr_assert_eq(eng_model_load(rc.backbone, &m, &e), 0, "%s", e.msg);
        cr_assert_eq(ref_case_load_task(&rc, m, NULL, &t, &e), 0, "%s: %s", cases[i].fixture, e.msg);
        cr_expect_str_eq(eng_task_kind(t), cases[i].kind, "%s", cases[i].fixture);
        eng_task_free(t);
        eng_model_free(m);
        ref_case_close(&rc);
    }
}

/* Found by the head_config.json fuzz harness (UBSan): "layers": 2222222223 was converted to int
 * with a plain cast, which is undefined past INT_MAX. Config numbers are clamped to the type's
 * range first, so the shape checks refuse them. */
Test(adapters, config_numbers_are_clamped_not_cast) {
    json_t *o = json_pack("{s:f, s:f, s:f, s:i, s:s}", "big", 1e300, "neg", -1e300, "frac", 3.75, "int", 7, "str", "9");
    cr_assert_not_null(o);
    cr_expect_eq(eng__jint(o, "big", 2), INT_MAX);
    cr_expect_eq(eng__jint(o, "neg", 2), INT_MIN);
    cr_expect_eq(eng__jint(o, "frac", 2), 3);
    cr_expect_eq(eng__jint(o, "int", 2), 7);
    cr_expect_eq(eng__jint(o, "str", 2), 2, "not a number: the default");
    cr_expect_eq(eng__jint(o, "absent", 2), 2);
    cr_expect_eq(eng__jfloat(o, "big", 1.0f), FLT_MAX);
    cr_expect_eq(eng__jfloat(o, "neg", 1.0f), -FLT_MAX);
    cr_expect_eq(eng__jfloat(o, "frac", 1.0f), 3.75f);
    json_decref(o);
}

/* A PEFT folder may hold tensors outside the encoder layers that are not its modules_to_save head. A
 * LoRA of the word embeddings is read (the peft_lora_embedding fixture, checked above against the
 * reference); a LoRA of another embedding, the embeddings saved whole (save_embedding_layers), or an
 * embedding LoRA with one of its two matrices are refused, naming the tensor (until session 10 the
 * loader counted every such tensor as head and answered as if the embeddings were the base
 * model's). The folders are the peft_lora fixture plus the one extra tensor. */
Test(adapters, peft_tensors_on_the_embeddings_are_refused) {
    static const struct {
        const char *name;
        int64_t d0, d1;
        eng_status code;
    } extra[] = {{"base_model.model.bert.embeddings.position_embeddings.lora_embedding_A", 8, 0, ENG_UNSUPPORTED},
                 {"base_model.model.bert.embeddings.word_embeddings.lora_embedding_A", 8, 0, ENG_FORMAT},
                 {"base_model.model.bert.embeddings.word_embeddings.weight", 0, 0, ENG_UNSUPPORTED}};
    char c[1200], msg[512];
    snprintf(c, sizeof c, "%s/adapters/bert-tiny/peft_lora", ADAPTERD_FIXTURES);
    ref_case rc;
    cr_assert_eq(ref_case_open(&rc, ADAPTERD_FIXTURES, c, msg, sizeof msg), 0, "%s", msg);
    eng_model *m = NULL;
    eng_err e = {0};
    cr_assert_eq(eng_model_load(rc.backbone, &m, &e), 0, "%s", e.msg);
    const eng_config *cfg = eng_model_config(m);
    char src[1400], tmpl[PATH_MAX], path[PATH_MAX + 64];
    snprintf(src, sizeof src, "%s/adapters/peft_task", c);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", src);
    eng_st_file *f = NULL;
    cr_assert_eq(eng__st_open(path, &f, &e), 0, "%s", e.msg);
    size_t n = eng__st_count(f);
    eng_st_tensor *ts = calloc(n + 1, sizeof *ts); /* the fixture's tensors, then the extra one */
    cr_assert_not_null(ts);
    for (size_t i = 0; i < n; i++) ts[i] = *eng__st_at(f, i);
    for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++) {
        char dir[PATH_MAX];
        /* the extra tensor: [8, vocab] for the LoRA A, [vocab, hidden] for whole embeddings */
        int64_t d0 = extra[k].d0 ? extra[k].d0 : cfg->vocab, d1 = extra[k].d0 ? cfg->vocab : cfg->hidden;
        float *zeros = calloc((size_t)(d0 * d1), sizeof *zeros);
        cr_assert_not_null(zeros);
        ts[n] = (eng_st_tensor){.name = extra[k].name, .dtype = ENG_DT_F32, .ndim = 2, .shape = {d0, d1},
                                .numel = d0 * d1, .data = zeros, .nbytes = (size_t)(d0 * d1) * sizeof *zeros};
        strcpy(dir, test_tmp_template(tmpl, sizeof tmpl, "peft-emb"));
        cr_assert_not_null(mkdtemp(dir));
        char out[PATH_MAX + 64], cfgsrc[PATH_MAX + 64], cfgdst[PATH_MAX + 64];
        snprintf(out, sizeof out, "%s/adapter_model.safetensors", dir);
        cr_assert_eq(eng__st_write(out, ts, n + 1, NULL, 0, &e), 0, "%s", e.msg);
        snprintf(cfgsrc, sizeof cfgsrc, "%s/adapter_config.json", src);
        snprintf(cfgdst, sizeof cfgdst, "%s/adapter_config.json", dir);
        cr_assert_eq(symlink(cfgsrc, cfgdst), 0);
        eng_task *t = NULL;
        const char *dirs[1] = {dir};
        eng_err le = {0};
        int r = eng_task_load(m, dirs, 1, NULL, &t, &le);
        cr_expect_eq(r, extra[k].code, "%s: loaded (%d) %s", extra[k].name, r, le.msg);
        cr_expect(strstr(le.msg, extra[k].name) != NULL, "the message names the tensor: %s", le.msg);
        if (!r) eng_task_free(t);
        unlink(cfgdst);
        unlink(out);
        rmdir(dir);
        free(zeros);
    }
    free(ts);
    eng__st_close(f);
    eng_model_free(m);
    ref_case_close(&rc);
}

/* How folders combine into one task: a PEFT folder without a head may sit beside AdapterHub ones
 * (the peft_embedding_stack fixture), but one with a modules_to_save head must be a task of its own,
 * a task takes one PEFT folder, and no Linear takes two LoRAs (the second folder's used to overwrite
 * the first's). An embedding LoRA made for another vocabulary is refused by its shape. */
Test(adapters, folders_combine_only_where_the_math_is_defined) {
    char model[1200], fx[1200];
    snprintf(model, sizeof model, "%s/models/bert-tiny", ADAPTERD_FIXTURES);
    snprintf(fx, sizeof fx, "%s/adapters/bert-tiny", ADAPTERD_FIXTURES);
    eng_model *m = NULL;
    eng_err e = {0};
    cr_assert_eq(eng_model_load(model, &m, &e), 0, "%s", e.msg);
    static const struct {
        const char *a, *b, *why;
        eng_status code;
    } cases[] = {
        {"seq_bn_st/adapters/sst", "peft_lora/adapters/peft_task", "modules_to_save head", ENG_UNSUPPORTED},
        {"peft_embedding_stack/adapters/emb", "peft_embedding_stack/adapters/emb", "one PEFT folder", ENG_UNSUPPORTED},
        {"lora_ah/adapters/lora", "lora_ah/adapters/lora", "already has a LoRA", ENG_UNSUPPORTED},
        {"ia3/adapters/ia3", "ia3/adapters/ia3", "already has an (IA)^3", ENG_UNSUPPORTED},
        {"peft_embedding_stack/adapters/sst", "peft_embedding_stack/adapters/emb", NULL, ENG_OK},
        {"peft_embedding_stack/adapters/emb", "peft_embedding_stack/adapters/sst", NULL, ENG_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[1400], b[1400];
        snprintf(a, sizeof a, "%s/%s", fx, cases[i].a);
        snprintf(b, sizeof b, "%s/%s", fx, cases[i].b);
        const char *dirs[2] = {a, b};
        eng_task *t = NULL;
        eng_err le = {0};
        int r = eng_task_load(m, dirs, 2, NULL, &t, &le);
        cr_expect_eq(r, cases[i].code, "%s + %s: %d %s", cases[i].a, cases[i].b, r, le.msg);
        if (cases[i].why) cr_expect(strstr(le.msg, cases[i].why) != NULL, "%s + %s: %s", cases[i].a, cases[i].b, le.msg);
        if (!r) {
            cr_expect_not_null(eng__task_emb_lora(t));
            const char *kind = eng_task_kind(t);
            cr_expect(strstr(kind, "seq_bn") && strstr(kind, "embedding_lora"), "kind %s", kind);
            cr_expect_eq(eng_task_head(t)->num_labels, 2, "the head is the AdapterHub folder's, wherever it sits");
        }
        eng_task_free(t);
    }
    eng_model_free(m);
    /* the embedding LoRA of a 1,024-word vocabulary on a model with another */
    snprintf(model, sizeof model, "%s/models/bert-micro", ADAPTERD_FIXTURES);
    cr_assert_eq(eng_model_load(model, &m, &e), 0, "%s", e.msg);
    char d[1400];
    snprintf(d, sizeof d, "%s/peft_embedding_stack/adapters/emb", fx);
    const char *dirs[1] = {d};
    eng_task *t = NULL;
    eng_err le = {0};
    cr_expect_eq(eng_task_load(m, dirs, 1, NULL, &t, &le), ENG_SHAPE, "%s", le.msg);
    cr_expect(strstr(le.msg, "lora_embedding_A") && strstr(le.msg, "vocabulary"), "%s", le.msg);
    eng_task_free(t);
    eng_model_free(m);
}
