/* test_store.c - adapters_store/store.c on a copy of tests/fixtures/registry (bert-tiny, seven
 * tasks; cls_lora has versions 0 and 1, and 1's task.json allows skips 0..1). The fixture's version
 * folders link to tests/fixtures/adapters; the copy links to the same targets. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapters_store/store.h"

static char reg_dir[64];
static size_t src_len;

static int copy_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)ftw;
    char dst[1024];
    snprintf(dst, sizeof dst, "%s%s", reg_dir, path + src_len);
    if (type == FTW_D) return mkdir(dst, 0755) && path[src_len] ? -1 : 0;
    if (type == FTW_SL) { /* the fixture links adapter folders: link the copy to the same target */
        char *target = realpath(path, NULL);
        int rc = target && symlink(target, dst) == 0 ? 0 : -1;
        free(target);
        return rc;
    }
    if (type != FTW_F) return -1;
    int in = open(path, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (in < 0 || out < 0) return -1;
    char b[65536];
    ssize_t n;
    while ((n = read(in, b, sizeof b)) > 0)
        if (write(out, b, (size_t)n) != n) return -1;
    close(in), close(out);
    (void)sb;
    return 0;
}

static void copy_registry(void) {
    snprintf(reg_dir, sizeof reg_dir, "adapterd-store-XXXXXX");
    cr_assert(mkdtemp(reg_dir));
    const char *src = ADAPTERD_FIXTURES "/registry";
    src_len = strlen(src);
    cr_assert_eq(nftw(src, copy_visit, 16, FTW_PHYS), 0, "cannot copy the fixture registry");
}

static void remove_registry(void) { store_remove_dir(reg_dir); }

TestSuite(store, .init = copy_registry, .fini = remove_registry);

static store_registry *open_reg(size_t budget) {
    store_params p = store_default_params();
    p.verbose = 0;
    p.memory_budget = budget;
    store_registry *r = NULL;
    eng_err e = {0};
    cr_assert_eq(store_open(reg_dir, &p, &r, &e), 0, "%s", e.msg);
    return r;
}

Test(store, scan_lists_tasks_with_their_current_version_and_skips) {
    store_registry *r = open_reg(0);
    cr_expect_eq(store_n_tasks(r), 7);
    cr_expect_eq(store_n_models(r), 1);
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t);
    cr_expect_str_eq(store_task_version(t), "1", "the highest version is current");
    cr_expect_eq(store_task_skip_min(t), 0);
    cr_expect_eq(store_task_skip_max(t), 1, "from task.json");
    cr_expect_eq(store_task_skip_default(t), 0);
    cr_expect(store_task_resident(t), "no memory budget: everything loads at start");
    cr_expect_str_eq(store_model_name(store_task_model(t)), "bert-tiny");
    store_task_release(t);
    cr_expect_null(store_task_acquire(r, "nope", 4));
    store_version_info v[8];
    cr_expect_eq(store_versions(r, "cls_lora", v, 8), 2);
    store_free(r);
}

Test(store, activation_persists_and_deletion_removes_the_folder) {
    store_registry *r = open_reg(0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    cr_expect_str_eq(store_task_version(t), "0");
    store_task_release(t);
    cr_assert_eq(store_delete_version(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "%s/tasks/cls_lora/1", reg_dir);
    cr_expect_neq(stat(p, &st), 0, "the deleted version's folder is gone");
    store_free(r);
    /* a restart keeps the activation (.adapterd-state.json) */
    r = open_reg(0);
    t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t);
    cr_expect_str_eq(store_task_version(t), "0");
    store_task_release(t);
    store_free(r);
}

Test(store, memory_budget_loads_on_demand) {
    store_registry *r = open_reg(1); /* one byte: nothing stays resident unless referenced */
    store_task *t = store_task_acquire(r, "reg", 3);
    cr_assert(t);
    cr_expect_not(store_task_resident(t), "with a budget start-up reads metadata only");
    cr_expect_null(store_task_engine(t));
    eng_err e = {0};
    cr_assert_eq(store_task_ensure(r, t, &e), 0, "%s", e.msg);
    cr_expect(store_task_resident(t));
    cr_expect_not_null(store_task_engine(t));
    store_task_release(t);
    store_free(r);
}

Test(store, remove_dir_removes_links_not_their_targets) {
    char tree[128], sub[160], outside[128], f[200], l[200];
    snprintf(tree, sizeof tree, "%s/tree", reg_dir);
    snprintf(sub, sizeof sub, "%s/sub", tree);
    snprintf(outside, sizeof outside, "%s/outside.txt", reg_dir);
    cr_assert_eq(mkdir(tree, 0755), 0);
    cr_assert_eq(mkdir(sub, 0755), 0);
    FILE *o = fopen(outside, "w");
    cr_assert(o);
    fputs("keep", o);
    fclose(o);
    snprintf(f, sizeof f, "%s/file", sub);
    o = fopen(f, "w");
    cr_assert(o);
    fputs("x", o);
    fclose(o);
    snprintf(l, sizeof l, "%s/link", sub);
    cr_assert_eq(symlink("../../outside.txt", l), 0);
    cr_expect_eq(store_remove_dir(tree), 0);
    struct stat st;
    cr_expect_neq(stat(tree, &st), 0, "the tree is gone");
    cr_expect_eq(stat(outside, &st), 0, "the link's target stays");
}
