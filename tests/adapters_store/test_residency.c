/* test_residency.c - adapters_store/residency.c under a memory budget, and the bounded list of
 * failed folders (table.c): an eviction finishes what the budget asks, however many versions it
 * takes (it used to stop at 64 per call); a request's tasks held together beyond the budget are
 * refused with the reason once their sizes pass it (a fan-out used to pin 5.6x the budget); a
 * release that leaves the registry over its budget evicts then; a failed folder rewritten again and
 * again keeps one record (the list used to grow by one per change). */
#define _GNU_SOURCE
#include "store_fixture.h"
#include "store_impl.h" /* white-box: the failed-folder records */

#define N_EXTRA 80 /* LoRA tasks f00..f79, each one copy of the fixture */

static char reg_dir[512];
static void setup(void) {
    fx_copy(reg_dir, sizeof reg_dir);
    for (int i = 0; i < N_EXTRA; i++) {
        char d[1024];
        snprintf(d, sizeof d, "%s/tasks/f%02d", reg_dir, i);
        cr_assert_eq(mkdir(d, 0755), 0);
        snprintf(d, sizeof d, "%s/tasks/f%02d/1", reg_dir, i);
        cr_assert_eq(mkdir(d, 0755), 0);
        snprintf(d, sizeof d, "%s/tasks/f%02d/1/lora", reg_dir, i);
        fx_copy_files(FIXTURE_LORA, d);
    }
}
static void teardown(void) { store_remove_dir(reg_dir); }
TestSuite(residency, .init = setup, .fini = teardown);

static store_task *get(store_registry *r, int i) {
    char name[16];
    snprintf(name, sizeof name, "f%02d", i);
    store_task *t = store_task_acquire(r, name, strlen(name));
    cr_assert(t, "task %s", name);
    return t;
}

/* The bytes of one of the LoRA tasks, loaded once under a 1-byte budget. */
static size_t task_bytes(void) {
    store_registry *r = fx_open(reg_dir, 1);
    store_task *t = get(r, 0);
    eng_err e = {0};
    cr_assert_eq(store_task_ensure(r, t, &e), 0, "%s", e.msg);
    size_t b = store_task_bytes(t);
    cr_assert_gt(b, 0);
    store_task_release(t);
    store_free(r);
    return b;
}

static store_stats stats(store_registry *r) {
    store_stats s;
    store_get_stats(r, &s);
    return s;
}

Test(residency, an_eviction_finishes_what_the_budget_asks, .timeout = 300) {
    size_t b = task_bytes(), budget = 3 * b + b / 2; /* room for three */
    store_registry *r = fx_open(reg_dir, budget);
    /* every task held at once (nothing can be evicted while a request holds it), 79 of them loaded */
    store_task **all = NULL;
    int n = store_tasks_acquire(r, &all);
    cr_assert_eq(n, N_FIXTURE_TASKS + N_EXTRA);
    eng_err e = {0};
    for (int i = 0; i < N_EXTRA - 1; i++) cr_assert_eq(store_task_ensure(r, all[i], &e), 0, "%s", e.msg);
    cr_expect_geq(stats(r).resident_bytes, (size_t)(N_EXTRA - 1) * b, "all held tasks stay resident");
    /* let go under one lock: everything beyond the budget is evicted in that one release */
    uint64_t ev0 = stats(r).evictions;
    store_tasks_release(all, n);
    store_stats s = stats(r);
    cr_expect_leq(s.resident_bytes, budget, "%zu bytes resident for a budget of %zu after %llu evictions",
                  s.resident_bytes, budget, (unsigned long long)(s.evictions - ev0));
    cr_expect_geq(s.evictions - ev0, (uint64_t)(N_EXTRA - 4), "76 or more versions evicted at once (%llu)",
                  (unsigned long long)(s.evictions - ev0));
    /* and one at a time: a release that leaves the registry over its budget makes room then */
    store_task *held[8];
    for (int i = 0; i < 8; i++) {
        char name[8];
        snprintf(name, sizeof name, "f%02d", 10 + i);
        held[i] = store_task_acquire(r, name, strlen(name));
        cr_assert_eq(store_task_ensure(r, held[i], &e), 0, "%s", e.msg);
    }
    cr_expect_gt(stats(r).resident_bytes, budget, "eight held: over the budget");
    for (int i = 0; i < 8; i++) store_task_release(held[i]);
    cr_expect_leq(stats(r).resident_bytes, budget, "back within the budget as they are let go");
    store_free(r);
}

Test(residency, a_fan_out_beyond_the_budget_is_refused_with_the_reason, .timeout = 300) {
    size_t b = task_bytes(), budget = 4 * b + b / 2; /* room for four */
    store_registry *r = fx_open(reg_dir, budget);
    store_task *v[20];
    for (int i = 0; i < 20; i++) v[i] = get(r, i);
    eng_err e = {0};
    int failed = -2;
    /* three tasks fit: loaded together */
    cr_expect_eq(store_tasks_ensure(r, v, 3, &failed, &e), 0, "%s", e.msg);
    cr_expect_eq(failed, -1);
    /* twenty do not: refused at the fifth, before the others are loaded */
    cr_expect_eq(store_tasks_ensure(r, v, 20, &failed, &e), ENG_LIMIT);
    cr_expect_eq(failed, 4, "refused at the fifth task (%d)", failed);
    cr_expect(strstr(e.msg, "--adapter-memory") && strstr(e.msg, "fewer tasks"), "the reason: %s", e.msg);
    store_stats s = stats(r);
    cr_expect_leq(s.resident_bytes, budget + b, "within one task of the budget: %zu of %zu", s.resident_bytes, budget);
    for (int i = 5; i < 20; i++) cr_expect_not(store_task_resident(v[i]), "f%02d was not loaded", i);
    /* the sizes are known now: a second try is refused before any load */
    uint64_t loads = s.loads;
    for (int i = 0; i < 20; i++) store_task_release(v[i]);
    for (int i = 0; i < 20; i++) v[i] = get(r, i);
    cr_expect_eq(store_tasks_ensure(r, v, 20, &failed, &e), ENG_LIMIT);
    cr_expect_leq(stats(r).resident_bytes, budget + b);
    cr_expect_leq(stats(r).loads - loads, 1, "at most the one task evicted meanwhile is loaded again");
    /* one task alone is served even above the budget (as store_task_ensure) */
    store_registry *r1 = fx_open(reg_dir, 1);
    store_task *one = get(r1, 7);
    cr_expect_eq(store_tasks_ensure(r1, &one, 1, NULL, &e), 0, "%s", e.msg);
    store_task_release(one);
    store_free(r1);
    for (int i = 0; i < 20; i++) store_task_release(v[i]);
    store_free(r);
}

Test(residency, a_failed_folder_changed_again_and_again_keeps_one_record, .timeout = 300) {
    store_registry *r = fx_open(reg_dir, 0);
    fx_sh("mkdir -p '%s/tasks/broken/1' && echo '{' > '%s/tasks/broken/1/task.json'", reg_dir, reg_dir);
    eng_err e = {0};
    for (int i = 0; i < 30; i++) {
        /* a different file each time: a new fingerprint, tried again and failing again */
        fx_sh("echo '{%d' > '%s/tasks/broken/1/task.json'", i, reg_dir);
        cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    }
    pthread_mutex_lock(&r->mu);
    int n_bad = r->n_bad;
    pthread_mutex_unlock(&r->mu);
    cr_expect_eq(n_bad, 1, "one record for the one failed folder (%d)", n_bad);
    store_version_info v[4];
    cr_expect_eq(store_versions(r, "broken", v, 4), 1);
    cr_expect_str_eq(v[0].state, "failed");
    /* the folder removed: both records go */
    fx_sh("rm -rf '%s/tasks/broken'", reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    pthread_mutex_lock(&r->mu);
    n_bad = r->n_bad;
    pthread_mutex_unlock(&r->mu);
    cr_expect_eq(n_bad, 0);
    cr_expect_eq(store_versions(r, "broken", v, 4), ENG_NOT_FOUND);
    store_free(r);
}
