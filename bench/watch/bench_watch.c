/* bench_watch.c - the libuv loop's share of a registry rescan (server/watch.c follow(): match the
 * listing of tasks/ with the folders watched, start and stop watches) at 1,000, 3,000 and 10,000 task
 * folders. Real folders in a temporary directory, real inotify watches, no store: the store's rescan
 * runs on the pool and is the store bench's (bench/store). For each N it prints the first follow
 * (every folder new: N inotify_add_watch) and the median of 7 steady ones (every folder already
 * watched: the matching alone, which is what every rescan costs the loop).
 *
 *     build/bench/bench_watch [N ...]
 *
 * The file under test is included (white-box: follow() and watch_new() are static); compile with
 * -DWATCH_C='"path/to/watch.c"' to time another version of it (bench/README.md: before and after). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#ifndef WATCH_C
#define WATCH_C "watch.c"
#endif
#include WATCH_C

static srv_server fake;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The pool's listing of tasks/, as the server hands it to follow() (sorted: what watch.c's pool side
 * does since follow() merges; the nested search it replaced takes any order). */
static void listing(srv_watch *w, char **names, int n) {
    w->found = malloc((size_t)n * sizeof *w->found);
    for (int i = 0; i < n; i++) w->found[i] = strdup(names[i]);
    w->n_found = n;
}

enum { REPS = 7 };

static int run(int n) {
    char root[64] = "bench-watch-XXXXXX", p[PATH_MAX];
    if (!mkdtemp(root)) return -1;
    snprintf(p, sizeof p, "%s/tasks", root);
    mkdir(p, 0755);
    char **names = calloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        /* created in a scrambled order, like tasks added over time */
        char nm[32];
        snprintf(nm, sizeof nm, "task-%05d", (int)(((long)i * 7919) % n));
        names[i] = strdup(nm);
        snprintf(p, sizeof p, "%s/tasks/%s", root, nm);
        mkdir(p, 0755);
    }
    qsort(names, (size_t)n, sizeof *names, by_name);
    uv_loop_init(&fake.loop);
    fake.cfg.watch = SRV_WATCH_INOTIFY;
    fake.cfg.watch_debounce_ms = 60000;
    srv_watch *w = watch_new(&fake, root);
    if (!w) return -1;
    listing(w, names, n);
    double t = now_ms();
    int added = follow(w);
    double first = now_ms() - t, steady[REPS];
    for (int r = 0; r < REPS; r++) {
        listing(w, names, n);
        t = now_ms();
        follow(w);
        steady[r] = now_ms() - t;
    }
    qsort(steady, REPS, sizeof *steady, by_value);
    printf("%-8d %8d %12.3f %12.3f %12.3f\n", n, added, first, steady[REPS / 2], steady[0]);
    fflush(stdout);
    srv__watch_stop(w);
    uv_run(&fake.loop, UV_RUN_DEFAULT);
    uv_loop_close(&fake.loop);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    snprintf(p, sizeof p, "rm -rf '%s'", root);
    return system(p) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    int sizes[16], ns = 0;
    for (int i = 1; i < argc && ns < 16; i++) sizes[ns++] = atoi(argv[i]);
    if (!ns) sizes[ns++] = 1000, sizes[ns++] = 3000, sizes[ns++] = 10000;
    printf("watch.c: %s\n%-8s %8s %12s %12s %12s\n", WATCH_C, "folders", "watched", "first_ms", "steady_p50", "steady_min");
    for (int i = 0; i < ns; i++)
        if (sizes[i] <= 0 || run(sizes[i])) return fprintf(stderr, "bench_watch: N = %d failed\n", sizes[i]), 1;
    return 0;
}
