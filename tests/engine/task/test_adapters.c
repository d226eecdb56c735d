/* test_adapters.c - every adapter form, head and fusion in tests/fixtures/adapters against the
 * PyTorch reference (tools/reference/gen_adapters.py), at skip 0 and skip 1, all sequences of a case
 * run together through the planner.
 *
 * Tolerance 1e-4 on logits (the bound; float32 vs the float64 oracle on 2-layer models is
 * ~1e-6). Each case's largest reference logit is printed so a vanishing check would show. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "task_check.h"

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
