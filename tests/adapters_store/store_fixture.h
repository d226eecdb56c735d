/* store_fixture.h - a scratch copy of tests/fixtures/registry (bert-tiny, seven tasks) for the
 * store's unit tests, and the staging of an upload. The copy holds real files (cp -L), so a test
 * may change any of them. */
#ifndef ADAPTERD_TESTS_STORE_FIXTURE_H
#define ADAPTERD_TESTS_STORE_FIXTURE_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
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

/* ---- the registry's state as any reader sees it, written from the format (adapters_store/state.c's
 * file-top note), not from the store's code: the base .adapterd-state.json, then the lines of the
 * journal .adapterd-state.log when its header names the base's generation ---- */

static inline json_t *fx_state_base(const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s/.adapterd-state.json", dir);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    cr_assert(json_is_object(root), "%s: %s", p, je.text);
    return root;
}

/* The state folded: {"generation", "tasks": {NAME: {current, max, pinned}}, "deleted": [...]}. */
static inline json_t *fx_state_read(const char *dir) {
    json_t *root = fx_state_base(dir), *tasks = json_object_get(root, "tasks"), *dead = json_object_get(root, "deleted");
    cr_assert(json_is_object(tasks) && json_is_array(dead), "the base holds tasks and deleted");
    char p[1024], line[4096];
    snprintf(p, sizeof p, "%s/.adapterd-state.log", dir);
    FILE *f = fopen(p, "r");
    for (int first = 1; f && fgets(line, sizeof line, f); first = 0) {
        if (!strchr(line, '\n')) break; /* a line being written */
        json_t *o = json_loads(line, 0, NULL);
        if (first) {
            int same = json_integer_value(json_object_get(o, "generation")) == json_integer_value(json_object_get(root, "generation"));
            json_decref(o);
            if (!same) break; /* folded into the base already */
            continue;
        }
        const char *name = json_string_value(json_object_get(o, "task"));
        if (!name) {
            json_decref(o);
            continue;
        }
        if (json_is_true(json_object_get(o, "gone"))) {
            json_object_del(tasks, name);
        } else {
            json_t *e = json_object();
            const char *keys[] = {"current", "max", "pinned"};
            for (int k = 0; k < 3; k++)
                if (json_object_get(o, keys[k])) json_object_set(e, keys[k], json_object_get(o, keys[k]));
            json_object_set_new(tasks, name, e);
        }
        size_t nl = strlen(name), i;
        for (i = json_array_size(dead); i-- > 0;) {
            const char *t = json_string_value(json_array_get(dead, i));
            if (t && !strncmp(t, name, nl) && t[nl] == '/') json_array_remove(dead, i);
        }
        json_t *v;
        json_array_foreach(json_object_get(o, "deleted"), i, v) {
            char tomb[512];
            snprintf(tomb, sizeof tomb, "%s/%s", name, json_string_value(v));
            json_array_append_new(dead, json_string(tomb));
        }
        json_decref(o);
    }
    if (f) fclose(f);
    return root;
}

/* Task name's current version in the state, or NULL (valid while root lives). */
static inline const char *fx_state_current(json_t *root, const char *name) {
    return json_string_value(json_object_get(json_object_get(json_object_get(root, "tasks"), name), "current"));
}

/* What another writer leaves: task name's entry set to {current, max}, appended to the journal as
 * one line (FX_APPEND), or the whole state compacted into a new base of a higher generation and a
 * new journal, each renamed in (FX_COMPACT). */
enum { FX_APPEND, FX_COMPACT };
static inline void fx_state_set(const char *dir, const char *name, const char *current, long max, int how) {
    char p[1024], tmp[1100];
    if (how == FX_APPEND) {
        snprintf(p, sizeof p, "%s/.adapterd-state.log", dir);
        FILE *f = fopen(p, "a");
        cr_assert(f, "%s", p);
        fprintf(f, "{\"task\": \"%s\", \"current\": \"%s\", \"max\": %ld, \"deleted\": []}\n", name, current, max);
        cr_assert_eq(fclose(f), 0);
        return;
    }
    json_t *root = fx_state_read(dir), *o = json_object();
    json_object_set_new(o, "current", json_string(current));
    json_object_set_new(o, "max", json_integer(max));
    json_object_set_new(json_object_get(root, "tasks"), name, o);
    json_int_t gen = json_integer_value(json_object_get(root, "generation")) + 1;
    json_object_set_new(root, "generation", json_integer(gen));
    snprintf(p, sizeof p, "%s/.adapterd-state.json", dir);
    snprintf(tmp, sizeof tmp, "%s.other", p);
    cr_assert_eq(json_dump_file(root, tmp, JSON_COMPACT), 0);
    cr_assert_eq(rename(tmp, p), 0);
    json_decref(root);
    snprintf(p, sizeof p, "%s/.adapterd-state.log", dir);
    snprintf(tmp, sizeof tmp, "%s.other", p);
    FILE *f = fopen(tmp, "w");
    cr_assert(f, "%s", tmp);
    fprintf(f, "{\"generation\": %lld}\n", (long long)gen);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(rename(tmp, p), 0);
}

#endif
