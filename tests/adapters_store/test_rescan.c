/* test_rescan.c - adapters_store/rescan.c: a rescan checks folders outside the registry mutex, and
 * still follows what was removed by hand.
 *
 * At scale, a rescan of the folders file events named looks at those only, and a full rescan
 * takes admin_mu task by task, so an upload or an admin change never waits for the whole registry.
 *
 * Every request takes reg->mu to find its task. A rescan stats every version folder (every 5 s by
 * default, and on file events); on a network file system a stat may take long. Here the test hook
 * (store_test.h) makes every folder check and fingerprint of the rescan take DELAY_MS, and lookups
 * run meanwhile: none may wait anywhere near DELAY_MS. Before the checks moved out of the lock the
 * same test (the hook placed at the same checks) measured a lookup held 400 ms. */
#define _GNU_SOURCE
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "store_fixture.h"
#include "store_test.h"

#define DELAY_MS 100

static char reg_dir[512];
static void setup(void) { fx_copy(reg_dir, sizeof reg_dir); }
static void teardown(void) {
    store__fs_hook = NULL;
    store_remove_dir(reg_dir);
}
TestSuite(rescan, .init = setup, .fini = teardown);

static atomic_int slow_calls;
static void slow_fs(const char *path) {
    if (!strstr(path, "/tasks/")) return;
    atomic_fetch_add(&slow_calls, 1);
    usleep(DELAY_MS * 1000);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

typedef struct {
    store_registry *r;
    atomic_int done;
    int rc;
} rescan_run;

static void *run_rescan(void *arg) {
    rescan_run *x = arg;
    eng_err e = {0};
    x->rc = store_rescan(x->r, &e);
    atomic_store(&x->done, 1);
    return NULL;
}

Test(rescan, lookups_are_not_held_up_by_a_slow_file_system, .timeout = 300) {
    rescan_run x = {.r = fx_open(reg_dir, 0)};
    store__fs_hook = slow_fs;
    pthread_t th;
    double t0 = now_ms();
    cr_assert_eq(pthread_create(&th, NULL, run_rescan, &x), 0);
    double worst = 0;
    int lookups = 0;
    while (!atomic_load(&x.done)) {
        double a = now_ms();
        store_task *t = store_task_acquire(x.r, "qa", 2);
        cr_assert(t, "qa is served during the rescan");
        store_task_release(t);
        store_task **all = NULL;
        int n = store_tasks_acquire(x.r, &all);
        cr_assert_eq(n, N_FIXTURE_TASKS);
        store_tasks_release(all, n);
        double dt = now_ms() - a;
        if (dt > worst) worst = dt;
        lookups++;
        usleep(1000);
    }
    pthread_join(th, NULL);
    double rescan_ms = now_ms() - t0;
    store__fs_hook = NULL;
    cr_expect_eq(x.rc, 0, "nothing new to add");
    cr_expect_gt(atomic_load(&slow_calls), 10, "the rescan went through the slow file system (%d checks)",
                 atomic_load(&slow_calls));
    cr_expect_gt(rescan_ms, 10.0 * DELAY_MS, "the rescan was slow (%.0f ms)", rescan_ms);
    cr_expect_gt(lookups, 100, "lookups ran during the rescan (%d)", lookups);
    cr_log_info("%d lookups during a %.0f ms rescan (%d slow checks): the slowest took %.2f ms", lookups, rescan_ms,
                atomic_load(&slow_calls), worst);
    cr_expect_lt(worst, DELAY_MS / 2.0, "the slowest of %d lookups took %.1f ms during a %.0f ms rescan whose folder "
                 "checks take %d ms each", lookups, worst, rescan_ms, DELAY_MS);
    store_free(x.r);
}

static int listed(store_registry *r, const char *task, const char *version, const char *state) {
    store_version_info v[16];
    int n = store_versions(r, task, v, 16);
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].version, version)) return !state || !strcmp(v[i].state, state);
    return 0;
}

Test(rescan, versions_removed_by_hand_are_unlisted_the_current_one_last) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    /* a failed version (a leading zero), then its folder removed */
    fx_sh("mkdir -p '%s/tasks/qa/07' && cp -rL '%s' '%s/tasks/qa/07/'", reg_dir, FIXTURE_LORA, reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    cr_expect(listed(r, "qa", "07", "failed"), "a folder with a leading zero is listed as failed");
    fx_sh("rm -rf '%s/tasks/qa/07'", reg_dir);
    /* cls_lora serves 1; 0 goes first, then 1 with a third version 2 left */
    fx_sh("mkdir -p '%s/tasks/cls_lora/2' && cp -rL '%s' '%s/tasks/cls_lora/2/'", reg_dir, FIXTURE_LORA, reg_dir);
    cr_assert_eq(store_rescan(r, &e), 1, "version 2 is added: %s", e.msg);
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t);
    cr_expect_str_eq(store_task_version(t), "2", "a version dropped in above the recorded max becomes current");
    store_task_release(t);
    fx_sh("rm -rf '%s/tasks/cls_lora/0' '%s/tasks/cls_lora/2'", reg_dir, reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    cr_expect(!listed(r, "qa", "07", NULL), "a failed version whose folder is gone is no longer listed");
    cr_expect(!listed(r, "cls_lora", "0", NULL), "version 0's folder is gone");
    cr_expect(!listed(r, "cls_lora", "2", NULL), "version 2's folder is gone");
    t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t, "cls_lora is still served");
    cr_expect_str_eq(store_task_version(t), "1", "the remaining version is current");
    cr_expect(store_task_engine(t) || store_task_ensure(r, t, &e) == 0, "and loads: %s", e.msg);
    store_task_release(t);
    store_free(r);
}

/* ---- at scale: the folders file events name, and admin_mu task by task ---- */

static char seen_paths[64][512];
static atomic_int n_seen;
static void record_fs(const char *path) {
    int i = atomic_fetch_add(&n_seen, 1);
    if (i < 64) snprintf(seen_paths[i], sizeof seen_paths[i], "%s", path);
}

Test(rescan, a_rescan_of_named_tasks_looks_at_their_folders_only) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    fx_sh("mkdir -p '%s/tasks/cls_lora/2' && cp -rL '%s' '%s/tasks/cls_lora/2/'", reg_dir, FIXTURE_LORA, reg_dir);
    fx_sh("mkdir -p '%s/tasks/qa/9' && cp -rL '%s' '%s/tasks/qa/9/'", reg_dir, FIXTURE_LORA, reg_dir);
    atomic_store(&n_seen, 0);
    store__fs_hook = record_fs;
    char *names[] = {"cls_lora"};
    cr_expect_eq(store_rescan_tasks(r, names, 1, &e), 1, "cls_lora's version 2 is added: %s", e.msg);
    store__fs_hook = NULL;
    int n = atomic_load(&n_seen);
    cr_expect_gt(n, 0, "the folder was checked");
    for (int i = 0; i < n && i < 64; i++)
        cr_expect(strstr(seen_paths[i], "/tasks/cls_lora"), "only cls_lora's folders are looked at, not %s", seen_paths[i]);
    cr_expect(listed(r, "cls_lora", "2", NULL), "cls_lora 2 is listed");
    cr_expect(!listed(r, "qa", "9", NULL), "qa, not named, is not looked at");
    /* a task folder removed by hand and named: dropped; an invalid name: skipped */
    fx_sh("rm -rf '%s/tasks/ner'", reg_dir);
    char *gone[] = {"ner", ".staging", "../x"};
    cr_expect_eq(store_rescan_tasks(r, gone, 3, &e), 0, "%s", e.msg);
    cr_expect_null(store_task_acquire(r, "ner", 3), "ner's folder is gone: the task is dropped");
    cr_expect_eq(store_rescan(r, &e), 1, "the full rescan finds qa 9: %s", e.msg);
    cr_expect(listed(r, "qa", "9", NULL));
    store_free(r);
}

/* Another writer's change of the state file reaches every task through a rescan of no folder. */
Test(rescan, a_changed_state_file_is_followed_by_every_task_without_a_folder_named) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    /* another replica makes 1 current again: its entry's line appended to the journal */
    fx_state_set(reg_dir, "cls_lora", "1", 1, FX_APPEND);
    atomic_store(&n_seen, 0);
    store__fs_hook = record_fs;
    cr_expect_eq(store_rescan_tasks(r, NULL, 0, &e), 0, "%s", e.msg);
    store__fs_hook = NULL;
    cr_expect_eq(atomic_load(&n_seen), 0, "no folder is looked at");
    store_task *t = store_task_acquire(r, "cls_lora", 8);
    cr_assert(t);
    cr_expect_str_eq(store_task_version(t), "1", "the other writer's current version is followed");
    store_task_release(t);
    store_free(r);
}

/* A full rescan through a slow file system: an admin change waits for one task's check at most,
 * never for the whole rescan. Before admin_mu was taken task by task, the pin below waited for the
 * rescan to end (every folder check of every task, DELAY_MS each). */
Test(rescan, an_admin_change_waits_for_one_task_of_a_full_rescan, .timeout = 300) {
    rescan_run x = {.r = fx_open(reg_dir, 0)};
    atomic_store(&slow_calls, 0);
    store__fs_hook = slow_fs;
    pthread_t th;
    double t0 = now_ms();
    cr_assert_eq(pthread_create(&th, NULL, run_rescan, &x), 0);
    while (atomic_load(&slow_calls) < 3) usleep(1000); /* the rescan is under way */
    double a = now_ms();
    eng_err e = {0};
    cr_expect_eq(store_pin(x.r, "reg", 1, &e), 0, "%s", e.msg);
    double pin_ms = now_ms() - a;
    int rescan_done_first = atomic_load(&x.done);
    pthread_join(th, NULL);
    double rescan_ms = now_ms() - t0;
    store__fs_hook = NULL;
    cr_log_info("a pin during a %.0f ms full rescan (%d slow checks of %d ms) took %.0f ms", rescan_ms,
                atomic_load(&slow_calls), DELAY_MS, pin_ms);
    cr_expect_not(rescan_done_first, "the pin did not wait for the rescan to end");
    cr_expect_gt(rescan_ms, 10.0 * DELAY_MS, "the rescan was slow (%.0f ms)", rescan_ms);
    cr_expect_lt(pin_ms, rescan_ms / 2, "the pin took %.0f ms of a %.0f ms rescan", pin_ms, rescan_ms);
    store_free(x.r);
}

static unsigned long long changed_count(store_registry *r) {
    store_stats st = {0};
    store_get_stats(r, &st);
    return (unsigned long long)st.changed;
}

/* A version folder's fingerprint walk is remembered (a stat per file while they stat the same): the
 * rescans after the first still see a file written in place and a file added, and a file replaced
 * by a copy with the same size and time reads as unchanged, as the walk's fingerprint says. */
Test(rescan, remembered_fingerprints_still_see_files_changed_in_place) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg); /* the remembered walks */
    cr_expect_eq(changed_count(r), 0);
    fx_sh("cd '%s/tasks/cls_lora/1/lora' && cp -p adapter_config.json x.tmp && mv x.tmp adapter_config.json", reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    cr_expect_eq(changed_count(r), 0, "a copy with the same size and time: the same fingerprint");
    fx_sh("echo ' ' >> '%s/tasks/qa/1/squad/adapter_config.json'", reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    cr_expect_eq(changed_count(r), 1, "a file written in place is seen");
    fx_sh("echo x > '%s/tasks/reg/1/reg/notes.txt'", reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    cr_expect_eq(changed_count(r), 2, "a file added is seen");
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    cr_expect_eq(changed_count(r), 2, "each reported once");
    store_free(r);
}

/* Issue 41: the periodic full rescan is paced (store_rescan_paced): it pauses between slices of
 * task folders so that its CPU never comes in one long burst. It must still find what was dropped in
 * or removed by hand, hold no registry lock while it pauses (a lookup from another thread answers at
 * once: were reg->mu held, it would wait the whole pause), and end early when the pause says so. */
typedef struct {
    store_registry *r;
    int pauses, stop_at;
    double worst_ms;
} pace_ctx;

static void *lookup_thread(void *arg) {
    pace_ctx *c = arg;
    store_task *t = store_task_acquire(c->r, "qa", 2);
    store_task_release(t);
    store_task **all = NULL;
    int n = store_tasks_acquire(c->r, &all);
    if (n > 0) store_tasks_release(all, n);
    return NULL;
}

static int pace_probe(void *ctx) {
    pace_ctx *c = ctx;
    c->pauses++;
    double a = now_ms();
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, lookup_thread, c), 0);
    pthread_join(th, NULL); /* a lock held by this (the walking) thread would hang here: the test's timeout */
    double dt = now_ms() - a;
    if (dt > c->worst_ms) c->worst_ms = dt;
    usleep(2000); /* the pause itself */
    return c->stop_at && c->pauses >= c->stop_at;
}

Test(rescan, a_paced_full_rescan_finds_changes_and_holds_no_lock_while_it_pauses, .timeout = 60) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    fx_sh("mkdir -p '%s/tasks/qa/9' && cp -rL '%s' '%s/tasks/qa/9/'", reg_dir, FIXTURE_LORA, reg_dir);
    fx_sh("rm -rf '%s/tasks/ner'", reg_dir);
    /* stopped at its first pause: at most two folders looked at, not the whole registry */
    pace_ctx stop = {.r = r, .stop_at = 1};
    cr_expect_geq(store_rescan_paced(r, 2, pace_probe, &stop, &e), 0, "%s", e.msg);
    cr_expect_eq(stop.pauses, 1, "the walk ended at the pause that asked it to (%d pauses)", stop.pauses);
    /* the whole paced walk */
    pace_ctx c = {.r = r};
    int added = store_rescan_paced(r, 2, pace_probe, &c, &e);
    cr_expect_geq(added, 0, "%s", e.msg);
    cr_expect(listed(r, "qa", "9", NULL), "the paced walk finds a version dropped in by hand");
    cr_expect_null(store_task_acquire(r, "ner", 3), "and drops a task whose folder was removed");
    /* steps: 6 folders scanned, 6-7 known tasks checked, 6 tasks following the state: in slices of 2 */
    cr_expect_geq(c.pauses, 8, "the walk paused between slices (%d pauses)", c.pauses);
    cr_log_info("%d pauses; the slowest lookup during one took %.2f ms", c.pauses, c.worst_ms);
    cr_expect_lt(c.worst_ms, 200.0, "a lookup during a pause took %.1f ms", c.worst_ms);
    store_free(r);
}
