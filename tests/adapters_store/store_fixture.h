/* store_fixture.h - a scratch copy of tests/fixtures/registry (bert-tiny, seven tasks) for the
 * store's unit tests, and the staging of an upload. The copy holds real files (cp -L), so a test
 * may change any of them. */
#ifndef ADAPTERD_TESTS_STORE_FIXTURE_H
#define ADAPTERD_TESTS_STORE_FIXTURE_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/test_tmp.h"
#include "adapters_store/store.h"

#define FIXTURE_REGISTRY ADAPTERD_FIXTURES "/registry"
#define FIXTURE_LORA ADAPTERD_FIXTURES "/adapters/bert-tiny/lora_ah/adapters/lora"
/* the fixture's tasks, in name order */
static const char *const fixture_tasks[] = {"cls_lora", "fusion", "ml", "ner", "peft", "qa", "reg"};
#define N_FIXTURE_TASKS 7

/* Runs a shell command made from fmt; the test fails when it fails. */
static inline void fx_vsh(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static inline void fx_vsh(const char *fmt, va_list ap) {
    char cmd[4096];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    cr_assert_eq(system(cmd), 0, "command failed: %s", cmd);
}

static inline void fx_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void fx_sh(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fx_vsh(fmt, ap);
    va_end(ap);
}

/* Copies the fixture registry into a new scratch folder; dir receives its path. */
static inline void fx_copy(char *dir, size_t n) {
    test_tmp_template(dir, n, "store");
    cr_assert(mkdtemp(dir), "mkdtemp %s", dir);
    fx_sh("cp -rL '%s'/. '%s'/", FIXTURE_REGISTRY, dir);
}

static inline store_registry *fx_open(const char *dir, size_t budget) {
    store_params p = store_default_params();
    p.verbose = 0;
    p.memory_budget = budget;
    store_registry *r = NULL;
    eng_err e = {0};
    cr_assert_eq(store_open(dir, &p, &r, &e), 0, "%s", e.msg);
    return r;
}

/* Copies the regular files of folder src (no sub-folders) into a new folder dst, without a
 * process per call (a test stages hundreds of uploads). */
static inline void fx_copy_files(const char *src, const char *dst) {
    cr_assert_eq(mkdir(dst, 0755), 0, "mkdir %s", dst);
    DIR *d = opendir(src);
    cr_assert(d, "%s", src);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char a[1024], b[1024], buf[65536];
        snprintf(a, sizeof a, "%s/%s", src, de->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, de->d_name);
        int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_EXCL, 0644);
        cr_assert(in >= 0 && out >= 0, "copy %s to %s", a, b);
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0) cr_assert_eq(write(out, buf, (size_t)n), n);
        close(in), close(out);
    }
    closedir(d);
}

/* Expects task's current version to be want. */
static inline void fx_expect_current(store_registry *r, const char *task, const char *want, const char *why) {
    store_task *t = store_task_acquire(r, task, strlen(task));
    cr_assert(t, "%s: task %s is served", why, task);
    cr_expect_str_eq(store_task_version(t), want, "%s", why);
    store_task_release(t);
}

/* A staging folder in dir/tasks/ holding a copy of the LoRA fixture, as an upload leaves it. */
static inline void fx_stage(const char *dir, char *out, size_t n, const char *tag) {
    char sub[1024];
    snprintf(out, n, "%s/tasks/.upload-%s", dir, tag);
    store_remove_dir(out);
    cr_assert_eq(mkdir(out, 0755), 0, "mkdir %s", out);
    snprintf(sub, sizeof sub, "%s/lora", out);
    fx_copy_files(FIXTURE_LORA, sub);
}

#endif
