/* test_store.c - the store (open, versions, the state file; adapters_store/) on a copy of tests/fixtures/registry (bert-tiny, seven
 * tasks; cls_lora has versions 0 and 1, and 1's task.json allows skips 0..1). The fixture's version
 * folders link to tests/fixtures/adapters; the copy links to the same targets. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "adapters_store/store.h"
#include "store_fixture.h"
#include "store_test.h"

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

static store_registry *open_reg(size_t budget) { return fx_open(reg_dir, budget); }

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

/* ---- crash consistency and start-up (the store's file-top notes: disk.c, state.c) ---- */

#define LORA ADAPTERD_FIXTURES "/adapters/bert-tiny/lora_ah/adapters/lora"

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fx_vsh(fmt, ap);
    va_end(ap);
}

static int exists(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int exists(const char *fmt, ...) {
    char p[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p, sizeof p, fmt, ap);
    va_end(ap);
    struct stat st;
    return lstat(p, &st) == 0;
}

/* A staging folder in tasks/ holding a copy (real files) of the LoRA fixture, as an upload leaves it. */
static void stage(char *out, size_t n, const char *tag) {
    snprintf(out, n, "%s/tasks/.upload-test-%s", reg_dir, tag);
    sh("mkdir -p %s && cp -rL %s %s/", out, LORA, out);
}

static void expect_current(store_registry *r, const char *task, const char *want, const char *why) {
    fx_expect_current(r, task, want, why);
}

Test(store, an_upload_not_activated_stays_not_current_after_a_restart) {
    store_registry *r = open_reg(0);
    char staged[256];
    stage(staged, sizeof staged, "a");
    eng_err e = {0};
    cr_assert_eq(store_version_add(r, "cls_lora", "2", staged, 0, &e), 0, "%s", e.msg);
    expect_current(r, "cls_lora", "1", "an upload without activate does not move current");
    store_free(r);
    r = open_reg(0);
    expect_current(r, "cls_lora", "1", "a restart keeps the current version (2 is the highest, not current)");
    store_free(r);
}

Test(store, version_names_with_a_leading_zero_are_refused) {
    store_registry *r = open_reg(0);
    char staged[256];
    stage(staged, sizeof staged, "b");
    eng_err e = {0};
    cr_expect_eq(store_version_add(r, "cls_lora", "01", staged, 1, &e), ENG_INVALID_ARGUMENT, "01 next to 1");
    cr_expect(strstr(e.msg, "leading zero"), "%s", e.msg);
    cr_expect_eq(store_version_add(r, "cls_lora", "002", staged, 1, &e), ENG_INVALID_ARGUMENT);
    cr_expect(exists("%s", staged), "a refused upload stays staged for the caller to remove");
    cr_expect_eq(store_version_add(r, "cls_lora", "0", staged, 0, &e), ENG_CONFLICT, "\"0\" itself is a name (it exists)");
    store_free(r);
    /* a folder laid out by hand as 01 is listed as failed, not taken for version 1 */
    sh("cp -r %s/tasks/cls_lora/0 %s/tasks/cls_lora/01", reg_dir, reg_dir);
    r = open_reg(0);
    expect_current(r, "cls_lora", "1", "01 is not a second version 1");
    store_version_info v[8];
    int n = store_versions(r, "cls_lora", v, 8);
    cr_assert_eq(n, 3, "0, 01 (failed), 1");
    int failed = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].version, "01")) {
            failed = 1;
            cr_expect_str_eq(v[i].state, "failed");
            cr_expect(strstr(v[i].reason, "leading zero"), "%s", v[i].reason);
        } else {
            cr_expect_str_eq(v[i].state, "available");
        }
    cr_expect(failed);
    store_free(r);
}

Test(store, what_a_killed_server_left_behind_is_swept_at_start) {
    sh("mkdir -p %s/tasks/.upload-99-0/lora && echo x > %s/tasks/.upload-99-0/lora/adapter_config.json", reg_dir, reg_dir);
    sh("mkdir -p %s/tasks/.deleted-99-1/1 %s/tasks/cls_lora/.deleted-99-2/x %s/tasks/left-empty", reg_dir, reg_dir, reg_dir);
    sh("echo '{' > %s/.adapterd-state.json.tmp", reg_dir);
    sh("mkdir -p %s/tasks/cls_lora/.incoming", reg_dir); /* a writer's copy in progress: not ours */
    store_registry *r = open_reg(0);
    cr_expect_not(exists("%s/tasks/.upload-99-0", reg_dir), "upload staging removed");
    cr_expect_not(exists("%s/tasks/.deleted-99-1", reg_dir), "a task folder moved aside for deletion removed");
    cr_expect_not(exists("%s/tasks/cls_lora/.deleted-99-2", reg_dir), "a version folder moved aside removed");
    cr_expect_not(exists("%s/tasks/left-empty", reg_dir), "an empty task folder removed");
    cr_expect_not(exists("%s/.adapterd-state.json.tmp", reg_dir), "the state file's temporary removed");
    cr_expect(exists("%s/tasks/cls_lora/.incoming", reg_dir), "another writer's staging stays");
    cr_expect_eq(store_n_tasks(r), 7);
    store_free(r);
}

Test(store, a_broken_version_does_not_stop_start_up) {
    /* cls_lora 2: a truncated tensor file (the highest, so it would be current); cls_lora 0: an
     * unreadable task.json (old, unused); ner: its only version has no adapter folder */
    sh("mkdir -p %s/tasks/cls_lora/2 && cp -rL %s %s/tasks/cls_lora/2/ && truncate -s 300 %s/tasks/cls_lora/2/lora/adapter.safetensors",
       reg_dir, LORA, reg_dir, reg_dir);
    sh("echo '{\"model\": ' > %s/tasks/cls_lora/0/task.json", reg_dir);
    sh("rm -f %s/tasks/ner/1/* && touch %s/tasks/ner/1/notes.txt", reg_dir, reg_dir);
    store_registry *r = open_reg(0);
    cr_expect_eq(store_n_tasks(r), 6, "every good task serves; ner has no good version");
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t);
    cr_expect_str_eq(store_task_version(t), "1", "the newest good version stands in");
    cr_expect(store_task_resident(t));
    const char *from = NULL, *why = store_task_fallback(t, &from);
    cr_assert(why, "the fallback is visible");
    cr_expect_str_eq(from, "2");
    cr_expect(strstr(why, "adapter.safetensors"), "the reason names the file: %s", why);
    store_task_release(t);
    store_version_info v[8];
    int n = store_versions(r, "cls_lora", v, 8);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(v[0].version, "0");
    cr_expect_str_eq(v[0].state, "failed");
    cr_expect(strstr(v[0].reason, "task.json"), "%s", v[0].reason);
    cr_expect_str_eq(v[1].version, "1");
    cr_expect_str_eq(v[1].state, "available");
    cr_expect(v[1].current);
    cr_expect_str_eq(v[2].version, "2");
    cr_expect_str_eq(v[2].state, "failed");
    cr_expect_eq(store_versions(r, "ner", v, 8), 1, "a task with no good version still lists why");
    cr_expect_null(store_task_acquire(r, "ner", 3));
    /* activating another version ends the fallback note; failed versions can be deleted */
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    t = store_task_acquire(r, "cls_lora", 8);
    cr_expect_null(store_task_fallback(t, NULL));
    store_task_release(t);
    cr_assert_eq(store_delete_version(r, "cls_lora", "2", &e), 0, "%s", e.msg);
    cr_expect_not(exists("%s/tasks/cls_lora/2", reg_dir));
    cr_expect_eq(store_versions(r, "cls_lora", v, 8), 2);
    cr_assert_eq(store_delete_task(r, "ner", &e), 0, "%s", e.msg);
    cr_expect_not(exists("%s/tasks/ner", reg_dir));
    store_free(r);
}

/* With a memory budget start-up reads metadata only, so a broken current version shows at its
 * first load: it is then handled as start-up handles it (listed as failed with its reason, the
 * newest remaining version standing in and saying so), not failed again on every request while
 * listed as available. A task whose only version breaks is no longer served. */
Test(store, with_a_budget_a_current_version_that_fails_at_first_use_falls_back) {
    sh("mkdir -p %s/tasks/cls_lora/2 && cp -rL %s %s/tasks/cls_lora/2/ && truncate -s 300 %s/tasks/cls_lora/2/lora/adapter.safetensors",
       reg_dir, LORA, reg_dir, reg_dir);
    sh("mkdir -p %s/tasks/solo/1 && cp -rL %s %s/tasks/solo/1/ && truncate -s 300 %s/tasks/solo/1/lora/adapter.safetensors",
       reg_dir, LORA, reg_dir, reg_dir);
    store_registry *r = open_reg((size_t)256 << 20);
    int n_tasks = store_n_tasks(r);
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t);
    cr_assert_str_eq(store_task_version(t), "2", "start-up did not load it: the highest is current");
    eng_err e = {0};
    cr_expect_neq(store_task_ensure(r, t, &e), 0, "the truncated file does not load");
    cr_expect(strstr(e.msg, "adapter.safetensors"), "%s", e.msg);
    store_task_release(t);
    t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t);
    cr_expect_str_eq(store_task_version(t), "1", "the newest good version stands in");
    const char *from = NULL, *why = store_task_fallback(t, &from);
    cr_expect(why && strstr(why, "adapter.safetensors") && !strstr(why, reg_dir), "%s", why ? why : "(none)");
    cr_expect_str_eq(from ? from : "", "2");
    cr_expect_eq(store_task_ensure(r, t, &e), 0, "%s", e.msg);
    store_task_release(t);
    store_version_info v[8];
    cr_assert_eq(store_versions(r, "cls_lora", v, 8), 3);
    cr_expect_str_eq(v[2].version, "2");
    cr_expect_str_eq(v[2].state, "failed");
    cr_expect(strstr(v[2].reason, "adapter.safetensors"), "%s", v[2].reason);
    cr_expect(v[1].current);
    /* the only version of solo: the task goes, its failed version stays listed */
    t = store_task_acquire(r, "solo", 4);
    cr_assert(t);
    cr_expect_neq(store_task_ensure(r, t, &e), 0);
    store_task_release(t);
    cr_expect_null(store_task_acquire(r, "solo", 4), "a task with no version that loads is not served");
    cr_expect_eq(store_n_tasks(r), n_tasks - 1);
    cr_assert_eq(store_versions(r, "solo", v, 8), 1);
    cr_expect_str_eq(v[0].state, "failed");
    /* a failed version can be deleted like one found at start-up */
    cr_expect_eq(store_delete_version(r, "cls_lora", "2", &e), 0, "%s", e.msg);
    cr_expect_not(exists("%s/tasks/cls_lora/2", reg_dir));
    store_free(r);
}

Test(store, a_model_that_does_not_load_takes_out_its_tasks_only) {
    sh("mkdir -p %s/models/broken-model && echo '{\"model_type\": ' > %s/models/broken-model/config.json", reg_dir, reg_dir);
    sh("mkdir -p %s/tasks/on-broken/1 && cp -rL %s %s/tasks/on-broken/1/ && "
       "echo '{\"model\": \"broken-model\", \"adapters\": [\"lora\"]}' > %s/tasks/on-broken/1/task.json",
       reg_dir, LORA, reg_dir, reg_dir);
    store_registry *r = open_reg(0);
    cr_expect_eq(store_n_models(r), 1);
    expect_current(r, "cls_lora", "1", "a task naming the good model serves");
    cr_expect_null(store_task_acquire(r, "on-broken", 9), "a task on the broken model is not served");
    store_version_info v[4];
    cr_assert_eq(store_versions(r, "on-broken", v, 4), 1);
    cr_expect_str_eq(v[0].state, "failed");
    cr_expect(strstr(v[0].reason, "broken-model") && strstr(v[0].reason, "did not load"), "%s", v[0].reason);
    cr_expect_null(strstr(v[0].reason, reg_dir), "registry-relative: %s", v[0].reason);
    /* with two model folders a version without task.json cannot say which it runs on */
    cr_assert_eq(store_versions(r, "reg", v, 4), 1);
    cr_expect(strstr(v[0].reason, "must name the model"), "%s", v[0].reason);
    store_free(r);
    /* no model that loads: start-up fails, naming it */
    sh("rm -rf %s/models/bert-tiny", reg_dir);
    store_params p = store_default_params();
    p.verbose = 0;
    eng_err e = {0};
    cr_expect_neq(store_open(reg_dir, &p, &r, &e), 0);
    cr_expect(strstr(e.msg, "broken-model"), "%s", e.msg);
}

Test(store, a_recorded_current_version_that_fails_falls_back_to_the_newest_good_one) {
    store_registry *r = open_reg(0);
    char staged[256];
    stage(staged, sizeof staged, "c");
    eng_err e = {0};
    cr_assert_eq(store_version_add(r, "cls_lora", "5", staged, 0, &e), 0, "%s", e.msg);
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    store_free(r);
    /* version 0 (current) breaks on disk while the server is down */
    sh("rm %s/tasks/cls_lora/0/lora && cp -rL %s %s/tasks/cls_lora/0/ && truncate -s 100 %s/tasks/cls_lora/0/lora/adapter.safetensors",
       reg_dir, LORA, reg_dir, reg_dir);
    r = open_reg(0);
    expect_current(r, "cls_lora", "5", "the newest good version, not the highest-but-one or the state's");
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    const char *from = NULL;
    cr_expect(store_task_fallback(t, &from));
    cr_expect_str_eq(from ? from : "", "0");
    store_task_release(t);
    store_free(r);
}

/* ---- durability: fsync and rename seen through interposed libc calls ---- */

#include <dlfcn.h>

#define MAX_EV 1024
static struct {
    char path[MAX_EV][1200]; /* "S <path>" for an fsync, "R <from> <to>" for a rename */
    int n;
    int on;
    const char *fail_suffix; /* fsync of a path ending so fails with ENOSPC */
} ev;

static void record(const char *kind, const char *a, const char *b) {
    if (!ev.on || ev.n == MAX_EV) return;
    snprintf(ev.path[ev.n++], sizeof ev.path[0], "%s %s%s%s", kind, a, b ? " " : "", b ? b : "");
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    char link[64], path[512];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n > 0) {
        path[n] = '\0';
        record("S", path, NULL);
        size_t pl = strlen(path), sl = ev.fail_suffix ? strlen(ev.fail_suffix) : 0;
        if (sl && pl >= sl && !strcmp(path + pl - sl, ev.fail_suffix)) {
            errno = ENOSPC;
            return -1;
        }
    }
    return real(fd);
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    char a[512], b[512];
    char *ra = realpath(from, NULL);
    snprintf(a, sizeof a, "%s", ra ? ra : from);
    free(ra);
    int rc = real(from, to);
    char *rb = realpath(to, NULL);
    snprintf(b, sizeof b, "%s", rb ? rb : to);
    free(rb);
    if (rc == 0) record("R", a, b);
    return rc;
}

static int find_ev(const char *line, int from) {
    for (int i = from; i < ev.n; i++)
        if (!strcmp(ev.path[i], line)) return i;
    return -1;
}

Test(store, an_upload_is_on_disk_before_it_is_published) {
    store_registry *r = open_reg(0);
    char staged[256], line[600];
    stage(staged, sizeof staged, "d");
    char *abs_staged = realpath(staged, NULL), *abs_reg = realpath(reg_dir, NULL);
    cr_assert(abs_staged && abs_reg);
    eng_err e = {0};
    ev.n = 0, ev.on = 1;
    int rc = store_version_add(r, "cls_lora", "3", staged, 1, &e);
    ev.on = 0;
    cr_assert_eq(rc, 0, "%s", e.msg);
    snprintf(line, sizeof line, "R %s %s/tasks/cls_lora/3", abs_staged, abs_reg);
    int pub = find_ev(line, 0);
    cr_assert_geq(pub, 0, "the staged folder is renamed into place");
    const char *must[] = {"", "/lora", "/lora/adapter.safetensors", "/lora/adapter_config.json", "/lora/head_config.json",
                          "/lora/model_head.safetensors"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        snprintf(line, sizeof line, "S %s%s", abs_staged, must[i]);
        int at = find_ev(line, 0);
        cr_expect(at >= 0 && at < pub, "%s is fsynced before the rename (at %d, rename at %d)", line, at, pub);
    }
    snprintf(line, sizeof line, "S %s/tasks/cls_lora", abs_reg);
    cr_expect_geq(find_ev(line, pub + 1), 0, "the task folder is fsynced after the rename");
    snprintf(line, sizeof line, "S %s/.adapterd-state.log", abs_reg);
    cr_expect_geq(find_ev(line, pub + 1), 0, "the state's journal line is appended and fsynced after the rename");
    /* a deletion is durable too: the folder is moved aside and the move fsynced */
    ev.n = 0, ev.on = 1;
    cr_assert_eq(store_delete_version(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    ev.on = 0;
    snprintf(line, sizeof line, "S %s/tasks/cls_lora", abs_reg);
    cr_expect_geq(find_ev(line, 0), 0, "the deletion's rename is fsynced");
    /* a write that compacts the state: each file's temporary fsynced, renamed in, the folder fsynced */
    store__journal_limit = 0;
    ev.n = 0, ev.on = 1;
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    ev.on = 0;
    store__journal_limit = -1;
    int at = 0;
    for (int f = 0; f < 2; f++) {
        const char *file = f ? ".adapterd-state.log" : ".adapterd-state.json";
        snprintf(line, sizeof line, "S %s/%s.tmp", abs_reg, file);
        int synced = find_ev(line, at);
        snprintf(line, sizeof line, "R %s/%s.tmp %s/%s", abs_reg, file, abs_reg, file);
        int renamed = find_ev(line, at);
        cr_expect(synced >= at && renamed > synced, "%s: fsynced (at %d) before its rename (at %d)", file, synced, renamed);
        snprintf(line, sizeof line, "S %s", abs_reg);
        at = find_ev(line, renamed + 1);
        cr_expect_gt(at, renamed, "%s: the folder fsynced after the rename", file);
        if (at < 0) break;
    }
    free(abs_staged), free(abs_reg);
    store_free(r);
}

/* The disk fills up at the state's file ending in suffix (journal_limit: store__journal_limit, 0 for
 * writes that compact): the upload is refused and nothing changes. The upload writes the state
 * twice: before the rename (on a registry without state: a compaction) and after it (a journal
 * line, unless every write compacts); the journal fails after the publish, the compaction (of a
 * registry that has a state already) before it. */
static void upload_whose_state_fails(const char *suffix, long journal_limit) {
    store_registry *r = open_reg(0);
    char staged[256];
    stage(staged, sizeof staged, "e");
    eng_err e = {0};
    if (!journal_limit) cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg); /* a state to keep */
    store__journal_limit = journal_limit;
    ev.fail_suffix = suffix;
    int rc = store_version_add(r, "cls_lora", "4", staged, 1, &e);
    ev.fail_suffix = NULL;
    store__journal_limit = -1;
    cr_expect_eq(rc, ENG_NO_SPACE, "%s", e.msg);
    cr_expect(strstr(e.msg, "state"), "%s", e.msg);
    cr_expect(exists("%s", staged), "the upload is back in staging for the caller to remove");
    cr_expect_not(exists("%s/tasks/cls_lora/4", reg_dir), "nothing published");
    cr_expect_not(exists("%s/.adapterd-state.json.tmp", reg_dir));
    cr_expect_not(exists("%s/.adapterd-state.log.tmp", reg_dir));
    json_t *root = fx_state_read(reg_dir);
    cr_expect_str_eq(fx_state_current(root, "cls_lora") ?: "", "1", "the state still records version 1");
    json_decref(root);
    expect_current(r, "cls_lora", "1", "the task keeps its version");
    cr_expect_null(store_task_acquire_version(r, "cls_lora", "4"));
    store_free(r);
    r = open_reg(0);
    expect_current(r, "cls_lora", "1", "and so does a restart");
    store_version_info v[8];
    cr_expect_eq(store_versions(r, "cls_lora", v, 8), 2);
    store_free(r);
}

Test(store, an_upload_whose_state_line_cannot_be_written_is_not_published) {
    upload_whose_state_fails("/.adapterd-state.log", -1);
}

Test(store, an_upload_whose_state_cannot_be_compacted_is_not_published) {
    upload_whose_state_fails("/.adapterd-state.json.tmp", 0);
}

/* ---- the state file shared by replicas: one task's entry per write, max, the rule ---- */

/* the state as any reader folds it (store_fixture.h) */
static json_t *state_load_file(void) { return fx_state_read(reg_dir); }

/* what another replica's writer leaves: task name's entry set to {current, max}, one journal line */
static void state_set_entry(const char *name, const char *current, long max) { fx_state_set(reg_dir, name, current, max, FX_APPEND); }

static void add_version_by_hand(const char *task, const char *version) {
    sh("mkdir -p %s/tasks/%s/.copy-%s && cp -rL %s %s/tasks/%s/.copy-%s/ && mv %s/tasks/%s/.copy-%s %s/tasks/%s/%s", reg_dir,
       task, version, LORA, reg_dir, task, version, reg_dir, task, version, reg_dir, task, version);
}

Test(store, a_state_write_records_every_task_and_keeps_other_writers_entries) {
    store_registry *r = open_reg(0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    json_t *root = state_load_file();
    cr_expect_eq(json_integer_value(json_object_get(root, "version")), 2);
    json_t *tasks = json_object_get(root, "tasks");
    char **names = NULL;
    int n = store_task_names(r, &names);
    cr_assert_gt(n, 1);
    for (int i = 0; i < n; i++) {
        store_task *t = store_task_acquire(r, names[i], strlen(names[i]));
        cr_assert(t);
        json_t *o = json_object_get(tasks, names[i]);
        cr_expect_str_eq(json_string_value(json_object_get(o, "current")) ?: "", store_task_version(t),
                         "task %s: its current version is recorded", names[i]);
        cr_expect(json_is_integer(json_object_get(o, "max")), "task %s has a max", names[i]);
        store_task_release(t);
        free(names[i]);
    }
    free(names);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(tasks, "cls_lora"), "max")), 1,
                 "cls_lora: versions 0 and 1 on disk");
    json_decref(root);
    /* another replica changes reg's entry (max 7: no number this process would write); a write
     * about cls_lora replaces cls_lora's entry only */
    store_task *t = store_task_acquire(r, "reg", 3);
    cr_assert(t);
    char reg_cur[32];
    snprintf(reg_cur, sizeof reg_cur, "%s", store_task_version(t));
    store_task_release(t);
    state_set_entry("reg", reg_cur, 7);
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    root = state_load_file();
    tasks = json_object_get(root, "tasks");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(tasks, "reg"), "max")), 7, "reg's entry kept as on disk");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(tasks, "cls_lora"), "current")) ?: "", "1");
    json_decref(root);
    store_free(r);
}

Test(store, a_version_within_the_recorded_max_is_not_made_current_one_above_is) {
    store_registry *r = open_reg(0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    /* another replica's upload without activation: the entry covers 2 before 2 appears */
    state_set_entry("cls_lora", "1", 2);
    add_version_by_hand("cls_lora", "2");
    cr_expect_geq(store_rescan(r, &e), 0, "%s", e.msg);
    expect_current(r, "cls_lora", "1", "2 is within the recorded max: listed, not current");
    store_task *t = store_task_acquire_version(r, "cls_lora", "2");
    cr_expect(t, "2 is listed");
    store_task_release(t);
    store_free(r);
    r = open_reg(0);
    expect_current(r, "cls_lora", "1", "and so does a restart");
    /* another replica activates 2: followed at the next rescan */
    state_set_entry("cls_lora", "2", 2);
    cr_expect_geq(store_rescan(r, &e), 0, "%s", e.msg);
    expect_current(r, "cls_lora", "2", "the recorded current is followed");
    /* a version dropped in by hand above the recorded max wins, and is recorded */
    add_version_by_hand("cls_lora", "3");
    cr_expect_geq(store_rescan(r, &e), 0, "%s", e.msg);
    expect_current(r, "cls_lora", "3", "above max: the highest");
    json_t *root = state_load_file();
    json_t *o = json_object_get(json_object_get(root, "tasks"), "cls_lora");
    cr_expect_str_eq(json_string_value(json_object_get(o, "current")) ?: "", "3");
    cr_expect_eq(json_integer_value(json_object_get(o, "max")), 3);
    json_decref(root);
    store_free(r);
    /* the same rule at start-up: within max the recorded version, above it the highest (another
     * replica's write that compacted the state: a new base and journal renamed in) */
    fx_state_set(reg_dir, "cls_lora", "2", 4, FX_COMPACT);
    add_version_by_hand("cls_lora", "4");
    r = open_reg(0);
    expect_current(r, "cls_lora", "2", "at start-up, 4 within the recorded max");
    store_free(r);
    add_version_by_hand("cls_lora", "5");
    r = open_reg(0);
    expect_current(r, "cls_lora", "5", "at start-up, 5 above the recorded max");
    store_free(r);
}

/* A rollout is part of the task's state entry: written through the journal, read at open with every
 * field, acquired with its candidate, ended by a promotion (the candidate current in the same write) or
 * by the candidate's deletion; refused when it names the current version or a second one is asked. */
Test(store, a_rollout_persists_acquires_its_candidate_and_ends) {
    store_registry *r = open_reg(0);
    eng_err e = {0};
    store_rollout ro = {.mode = STORE_ROLLOUT_SHADOW, .percent = 12.5, .max_share = 0.5, .promote_after = 40,
                        .promote_agreement = 0.95, .abort_latency_ratio = 2};
    snprintf(ro.version, sizeof ro.version, "1");
    cr_expect_eq(store_rollout_start(r, "cls_lora", &ro, &e), ENG_INVALID_ARGUMENT, "version 1 is current");
    snprintf(ro.version, sizeof ro.version, "0");
    ro.percent = 100.5;
    cr_expect_eq(store_rollout_start(r, "cls_lora", &ro, &e), ENG_INVALID_ARGUMENT, "a percent over 100");
    ro.percent = 12.5;
    cr_assert_eq(store_rollout_start(r, "cls_lora", &ro, &e), 0, "%s", e.msg);
    cr_expect_eq(store_rollout_start(r, "cls_lora", &ro, &e), ENG_CONFLICT, "a second rollout on one task");
    store_free(r);
    r = open_reg(0); /* a restart reads it back, field by field */
    store_rollout got;
    cr_assert_eq(store_rollout_get(r, "cls_lora", &got), 1);
    cr_expect_eq(got.mode, STORE_ROLLOUT_SHADOW);
    cr_expect_str_eq(got.version, "0");
    cr_expect_eq(got.percent, 12.5);
    cr_expect_eq(got.max_share, 0.5);
    cr_expect_eq(got.promote_after, 40);
    cr_expect_eq(got.promote_agreement, 0.95);
    cr_expect_eq(got.abort_latency_ratio, 2);
    cr_expect_neq(got.id, 0);
    store_task *c = store_rollout_acquire(r, "cls_lora", &got);
    cr_assert(c, "the candidate is acquired with its rollout");
    cr_expect_str_eq(store_task_version(c), "0");
    cr_assert_eq(store_task_ensure(r, c, &e), 0, "%s", e.msg);
    store_task_release(c);
    /* the candidate is not current, yet stays loaded while its rollout lives: it was unloaded whenever its
     * last request let go, so every shadowed or canaried request loaded it again (bench/rollout: +22 ms) */
    c = store_rollout_acquire(r, "cls_lora", &got);
    cr_assert(c);
    cr_expect(store_task_resident(c), "a live rollout's candidate stays resident between requests");
    store_task_release(c);
    cr_expect_eq(store_rollout_get(r, "ml", &got), 0, "another task has none");
    /* promoted: the candidate current, the rollout over, both kept by a restart */
    cr_assert_eq(store_rollout_finish(r, "cls_lora", 1, 0, NULL, &e), 0, "%s", e.msg);
    store_free(r);
    r = open_reg(0);
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    cr_expect_str_eq(store_task_version(t), "0");
    store_task_release(t);
    cr_expect_eq(store_rollout_get(r, "cls_lora", &got), 0);
    cr_expect_eq(store_rollout_finish(r, "cls_lora", 0, 0, NULL, &e), ENG_NOT_FOUND, "nothing left to abort");
    /* the candidate deleted: its rollout ends, recorded */
    snprintf(ro.version, sizeof ro.version, "1");
    ro.mode = STORE_ROLLOUT_CANARY;
    cr_assert_eq(store_rollout_start(r, "cls_lora", &ro, &e), 0, "%s", e.msg);
    cr_assert_eq(store_delete_version(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    cr_expect_eq(store_rollout_get(r, "cls_lora", &got), 0);
    store_free(r);
    r = open_reg(0);
    cr_expect_eq(store_rollout_get(r, "cls_lora", &got), 0, "the ended rollout stays ended after a restart");
    store_free(r);
}
