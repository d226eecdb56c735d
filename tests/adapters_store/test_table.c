/* test_table.c - adapters_store/table.c: "every task" as one snapshot (store_tasks_acquire).
 *
 * The server answers a request without "tasks" with every task. It used to read the count, then
 * take the i-th task once per index, each under its own lock: a delete in between left an index
 * with no task (404 unknown task "?"), an add shifted the indexes and silently left the last task
 * out. Here a writer adds and deletes a task whose name sorts first (so it shifts every index)
 * while readers take snapshots: every snapshot must hold each fixture task exactly once, in name
 * order, with the new task wholly in or wholly out. With the old pattern (count, then one lock per
 * index) it failed 5 runs of 5, with 4-12 torn views in about 10 million per run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>

#include "store_fixture.h"

static char reg_dir[512];
static void setup(void) { fx_copy(reg_dir, sizeof reg_dir); }
static void teardown(void) { store_remove_dir(reg_dir); }
TestSuite(table, .init = setup, .fini = teardown);

typedef struct {
    store_registry *r;
    atomic_int stop;
    atomic_int views, torn, with_new;
    char why[256];
} race;

/* One snapshot checked: the fixture's tasks each once, sorted, plus at most the new one. */
static void check_view(race *x) {
    store_task **v = NULL;
    int n = store_tasks_acquire(x->r, &v), k = 0, bad = n < 0, has_new = 0;
    for (int i = 0; !bad && i < n; i++) {
        const char *nm = v[i] ? store_task_name(v[i]) : NULL;
        if (!nm) bad = 1;
        else if (!strcmp(nm, "aaa_new")) has_new = 1;
        else if (k < N_FIXTURE_TASKS && !strcmp(nm, fixture_tasks[k])) k++;
        else bad = 1;
        if (!bad && i && strcmp(store_task_name(v[i - 1]), nm) >= 0) bad = 1;
    }
    if (k != N_FIXTURE_TASKS || n != k + has_new) bad = 1;
    if (bad && !atomic_fetch_add(&x->torn, 1))
        snprintf(x->why, sizeof x->why, "a view of %d tasks held %d of the fixture's %d", n, k, N_FIXTURE_TASKS);
    atomic_fetch_add(&x->views, 1);
    atomic_fetch_add(&x->with_new, has_new);
    store_tasks_release(v, n);
}

static void *reader(void *arg) {
    race *x = arg;
    while (!atomic_load(&x->stop)) check_view(x);
    return NULL;
}

Test(table, every_task_is_one_snapshot_while_a_task_is_added_and_deleted, .timeout = 300) {
    race x = {.r = fx_open(reg_dir, 0)};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, reader, &x), 0);
    char staged[600];
    for (int it = 0; it < 150; it++) {
        eng_err e = {0};
        fx_stage(reg_dir, staged, sizeof staged, "race");
        cr_assert_eq(store_version_add(x.r, "aaa_new", "1", staged, 1, &e), 0, "%s", e.msg);
        cr_assert_eq(store_delete_task(x.r, "aaa_new", &e), 0, "%s", e.msg);
    }
    atomic_store(&x.stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    cr_expect_eq(atomic_load(&x.torn), 0, "%d of %d views torn: %s", atomic_load(&x.torn), atomic_load(&x.views), x.why);
    cr_expect_gt(atomic_load(&x.views), 100, "the readers ran during the changes (%d views)", atomic_load(&x.views));
    store_free(x.r);
}

Test(table, a_snapshot_keeps_its_tasks_after_they_are_deleted) {
    store_registry *r = fx_open(reg_dir, 0);
    store_task **v = NULL;
    int n = store_tasks_acquire(r, &v);
    cr_assert_eq(n, N_FIXTURE_TASKS);
    eng_err e = {0};
    cr_assert_eq(store_delete_task(r, "qa", &e), 0, "%s", e.msg);
    cr_expect_eq(store_n_tasks(r), N_FIXTURE_TASKS - 1);
    /* the deleted task's last reference is the snapshot's: its name and weights are still there */
    cr_expect_str_eq(store_task_name(v[5]), "qa");
    cr_expect(store_task_engine(v[5]) != NULL);
    store_tasks_release(v, n); /* destroys qa (ASan: no leak, no use after free) */
    store_task **w = NULL;
    cr_expect_eq(store_tasks_acquire(r, &w), N_FIXTURE_TASKS - 1);
    store_tasks_release(w, N_FIXTURE_TASKS - 1);
    store_tasks_release(NULL, 0);
    store_free(r);
}
