/* test_watch.c - server/watch.c's loop side without a server: the listing of tasks/ (sorted, on the
 * pool in the server, called here directly), follow() (watches for new folders, kept ones left alone,
 * vanished ones closed, the watch list sorted), poll mode (no watches), and the debounce armed by an
 * event in a watched task folder but not by a writer's staging name. White-box: the file is included,
 * so its static functions are reachable; its store and pool calls are never made here. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "watch.c"

static char root[64]; /* short: the paths built on it fit PATH_MAX */
static srv_server fake;   /* what the watch reads of a server: its loop and options */
#define loop (fake.loop)

static void mkdir_task(const char *name) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/tasks/%s", root, name);
    cr_assert_eq(mkdir(p, 0755), 0, "mkdir %s", p);
}

static void rm_rf(const char *dir) {
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

static void setup(void) {
    snprintf(root, sizeof root, "%s", "adapterd-watch-XXXXXX");
    cr_assert(mkdtemp(root));
    char t[PATH_MAX];
    snprintf(t, sizeof t, "%s/tasks", root);
    cr_assert_eq(mkdir(t, 0755), 0);
    cr_assert_eq(uv_loop_init(&loop), 0);
    fake.cfg.watch_debounce_ms = 60000; /* armed, never fired within a test */
}

static void teardown(void) {
    uv_loop_close(&loop);
    rm_rf(root);
}

/* A watch on root/tasks with its four handles as srv__watch_start makes them, nothing started. */
static srv_watch *watch_of(bool poll) {
    fake.cfg.watch = poll ? SRV_WATCH_POLL : SRV_WATCH_INOTIFY;
    srv_watch *w = watch_new(&fake, root);
    cr_assert(w);
    return w;
}

static void watch_free(srv_watch *w) {
    srv__watch_stop(w);
    uv_run(&loop, UV_RUN_DEFAULT); /* close callbacks: the last one frees w */
}

/* One rescan's loop side: list (sorted), then follow. */
static int rescan(srv_watch *w) {
    list_tasks(w);
    return follow(w);
}

static bool watched(srv_watch *w, const char *name) {
    for (int i = 0; i < w->n_tw; i++)
        if (!strcmp(w->tw[i]->name, name)) return uv_is_active((uv_handle_t *)&w->tw[i]->h);
    return false;
}

static void expect_sorted(srv_watch *w) {
    for (int i = 1; i < w->n_tw; i++)
        cr_expect_lt(strcmp(w->tw[i - 1]->name, w->tw[i]->name), 0, "watches out of order at %d: %s, %s", i,
                     w->tw[i - 1]->name, w->tw[i]->name);
}

TestSuite(watch, .init = setup, .fini = teardown, .timeout = 30);

Test(watch, the_listing_is_sorted_folders_only_without_staging_names) {
    mkdir_task("zeta"), mkdir_task("alpha"), mkdir_task(".staging"), mkdir_task("mid");
    char f[PATH_MAX];
    snprintf(f, sizeof f, "%s/tasks/a-file", root);
    FILE *fp = fopen(f, "w");
    cr_assert(fp);
    fclose(fp);
    srv_watch *w = watch_of(false);
    list_tasks(w);
    cr_assert_eq(w->n_found, 3, "folders only, no '.' names");
    cr_expect_str_eq(w->found[0], "alpha");
    cr_expect_str_eq(w->found[1], "mid");
    cr_expect_str_eq(w->found[2], "zeta");
    found_free(w);
    watch_free(w);
}

Test(watch, follow_adds_keeps_and_drops_watches) {
    const char *names[] = {"t07", "t03", "t11", "t01", "t05"};
    for (size_t i = 0; i < 5; i++) mkdir_task(names[i]);
    srv_watch *w = watch_of(false);
    cr_expect_eq(rescan(w), 5, "every folder is new");
    cr_expect_eq(w->n_tw, 5);
    for (size_t i = 0; i < 5; i++) cr_expect(watched(w, names[i]), "%s watched", names[i]);
    expect_sorted(w);
    task_watch *kept = w->tw[1]; /* t03 */
    cr_expect_eq(rescan(w), 0, "nothing new: no watch is made again");
    cr_expect_eq(w->tw[1], kept, "a followed folder keeps its watch");
    /* t03 and t11 go, t02, t12 and t00 come */
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/tasks/t03", root), rmdir(p);
    snprintf(p, sizeof p, "%s/tasks/t11", root), rmdir(p);
    mkdir_task("t02"), mkdir_task("t12"), mkdir_task("t00");
    cr_expect_eq(rescan(w), 3);
    cr_expect_eq(w->n_tw, 6);
    cr_expect(!watched(w, "t03") && !watched(w, "t11"), "vanished folders are no longer watched");
    const char *now[] = {"t00", "t01", "t02", "t05", "t07", "t12"};
    for (int i = 0; i < 6; i++) cr_expect_str_eq(w->tw[i]->name, now[i]);
    /* every folder gone */
    for (int i = 0; i < 6; i++) snprintf(p, sizeof p, "%s/tasks/%s", root, now[i]), rmdir(p);
    cr_expect_eq(rescan(w), 0);
    cr_expect_eq(w->n_tw, 0);
    watch_free(w);
}

Test(watch, poll_mode_watches_nothing) {
    mkdir_task("a"), mkdir_task("b");
    srv_watch *w = watch_of(true);
    cr_expect_eq(rescan(w), 0);
    cr_expect_eq(w->n_tw, 0, "--watch poll: the periodic rescan only");
    watch_free(w);
}

Test(watch, an_event_in_a_task_folder_arms_the_debounce) {
    mkdir_task("cls");
    srv_watch *w = watch_of(false);
    cr_assert_eq(rescan(w), 1);
    char p[PATH_MAX];
    /* a writer's staging area: ignored */
    snprintf(p, sizeof p, "%s/tasks/cls/.tmp-upload", root);
    cr_assert_eq(mkdir(p, 0755), 0);
    for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT), usleep(5000);
    cr_expect(!uv_is_active((uv_handle_t *)&w->debounce), "a '.' name arms nothing");
    /* the atomic rename that publishes a version */
    snprintf(p, sizeof p, "%s/tasks/cls/3", root);
    char from[PATH_MAX];
    snprintf(from, sizeof from, "%s/tasks/cls/.tmp-upload", root);
    cr_assert_eq(rename(from, p), 0);
    for (int i = 0; i < 200 && !uv_is_active((uv_handle_t *)&w->debounce); i++) uv_run(&loop, UV_RUN_NOWAIT), usleep(5000);
    cr_expect(uv_is_active((uv_handle_t *)&w->debounce), "a new version folder arms the debounced rescan");
    watch_free(w);
}

static int started(srv_watch *w) {
    int n = 0;
    for (int i = 0; i < w->n_tw; i++) n += uv_is_active((uv_handle_t *)&w->tw[i]->h) != 0;
    return n;
}

/* 600 new folders: at most WATCH_START_CHUNK watches (fewer once WATCH_TURN_NS have gone) start in
 * follow()'s turn, the rest in turns of their own (10,000 started in one turn held the loop 92 ms). */
Test(watch, new_watches_start_a_chunk_per_loop_turn) {
    char p[PATH_MAX];
    for (int i = 0; i < 600; i++) snprintf(p, sizeof p, "t%04d", i), mkdir_task(p);
    srv_watch *w = watch_of(false);
    cr_assert_eq(rescan(w), 600, "every folder is new");
    cr_expect(started(w) >= 16 && started(w) <= WATCH_START_CHUNK, "one chunk in follow()'s turn: %d", started(w));
    cr_expect_eq(w->n_tw, started(w), "only started watches are listed");
    expect_sorted(w);
    int before = started(w), turns = 0;
    while (started(w) < 600 && turns < 100) {
        uv_run(&loop, UV_RUN_NOWAIT);
        int now = started(w);
        cr_expect_leq(now - before, WATCH_START_CHUNK, "turn %d started %d", turns, now - before);
        before = now, turns++;
    }
    cr_expect_eq(started(w), 600, "every folder watched after %d turns", turns);
    cr_expect_geq(turns, 2, "in turns of their own");
    cr_expect_eq(w->n_q - w->q_head, 0, "nothing left queued");
    expect_sorted(w);
    /* half of them go: stopped in turns too */
    for (int i = 0; i < 600; i += 2) snprintf(p, sizeof p, "%s/tasks/t%04d", root, i), rmdir(p);
    cr_expect_eq(rescan(w), 0);
    for (int k = 0; k < 100 && w->n_q - w->q_head > 0; k++) uv_run(&loop, UV_RUN_NOWAIT);
    cr_expect_eq(w->n_tw, 300);
    cr_expect(!watched(w, "t0000") && watched(w, "t0001"));
    watch_free(w);
}
