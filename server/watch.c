/* watch.c - the registry directory watch: new version directories that appear in tasks/ (by an
 * atomic rename, writers copy into a '.'-name first) are loaded, validated and listed without a
 * restart.
 *
 * libuv fs events (inotify, not recursive) watch tasks/ and every tasks/<name>/; an event whose
 * file name starts with '.' is a writer's staging area and is ignored. Events only arm a debounce
 * timer: when tasks/ has been quiet for --watch-debounce-ms, one store_rescan runs on libuv's pool
 * (it loads weights; never on the loop). A periodic rescan (--watch-interval-ms) catches what
 * inotify cannot see: files changed inside a listed version (several directories deep), which the
 * store reports and never reloads, and events lost between a rescan and a new task's watch.
 *
 * Replicas sharing one registry (a ReadWriteMany volume): every rescan also re-reads the registry
 * state file, where the admin API of any replica records current versions and pins, and applies it
 * (store_rescan). In inotify mode the state file's rename in the registry directory arms the
 * debounce too, so replicas on one host follow at once. Network file systems deliver no events
 * for other hosts' changes: --watch poll drops the fs events and rescans every --watch-interval-ms,
 * which bounds how long two replicas can disagree. */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "watch.h"

#include "engine/files.h"
#include "clock.h"
#include "offload.h"

typedef struct {
    uv_fs_event_t h;
    char *name;
    struct srv_watch *w;
} task_watch;

struct srv_watch {
    srv_server *s;
    char tasks_dir[PATH_MAX - 256];
    uv_fs_event_t root, state;   /* tasks/ and the registry directory (state file); inotify mode */
    uv_timer_t debounce, periodic;
    int poll;                    /* --watch poll: no fs events, the periodic rescan only */
    uv_work_t work;
    task_watch **tw;             /* watched tasks/<name>/, sorted by name */
    int n_tw;
    char **found;                /* the pool thread's listing of tasks/ */
    int n_found;
    int running, dirty, stopping, open_handles;
};

static void maybe_free(srv_watch *w) {
    if (!w->stopping || w->open_handles || w->running) return;
    free(w->tw);
    free(w);
}

static void on_closed(uv_handle_t *h) {
    srv_watch *w = h->data;
    if (h->type == UV_FS_EVENT && h != (uv_handle_t *)&w->root && h != (uv_handle_t *)&w->state) {
        task_watch *t = (task_watch *)h;
        free(t->name);
        free(t);
    }
    w->open_handles--;
    maybe_free(w);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Pool thread: tasks/' folders into w->found, sorted (follow() merges them with its sorted watches). */
static void list_tasks(srv_watch *w) {
    w->found = NULL;
    w->n_found = 0;
    DIR *d = opendir(w->tasks_dir);
    struct dirent *de;
    int cap = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", w->tasks_dir, de->d_name) >= (int)sizeof p || !eng_dir_exists(p)) continue;
        if (w->n_found == cap) {
            cap = cap ? cap * 2 : 64;
            char **nf = realloc(w->found, (size_t)cap * sizeof *nf);
            if (!nf) break;
            w->found = nf;
        }
        if ((w->found[w->n_found] = strdup(de->d_name))) w->n_found++;
    }
    if (d) closedir(d);
    if (w->n_found > 1) qsort(w->found, (size_t)w->n_found, sizeof *w->found, cmp_name);
}

static double thread_cpu_s(void) {
    struct timespec ts;
    return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) ? 0 : (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void rescan_work(uv_work_t *req) {
    srv_watch *w = req->data;
    srv__pool_thread_nice();
    eng_err e = {0};
    double t0 = srv__now(), c0 = thread_cpu_s();
    if (store_rescan(w->s->reg, &e) < 0) fprintf(stderr, "adapterd: watch: %s\n", e.msg);
    list_tasks(w); /* here, off the loop, for the watches to follow */
    srv__metrics_rescan(w->s->metrics, SRV_RESCAN_FULL, srv__now() - t0, thread_cpu_s() - c0);
}

static void arm(srv_watch *w);
static void on_task_event(uv_fs_event_t *h, const char *filename, int events, int status);

/* Loop: a watch on tasks/<name>/, or NULL (logged nowhere: the periodic rescan still covers it). */
static task_watch *watch_task(srv_watch *w, const char *name) {
    task_watch *t = calloc(1, sizeof *t);
    char p[PATH_MAX];
    if (!t || !(t->name = strdup(name)) || snprintf(p, sizeof p, "%s/%s", w->tasks_dir, name) >= (int)sizeof p) {
        if (t) free(t->name);
        free(t);
        return NULL;
    }
    t->w = w;
    uv_fs_event_init(w->root.loop, &t->h);
    t->h.data = w;
    w->open_handles++;
    if (uv_fs_event_start(&t->h, on_task_event, p, 0)) {
        uv_close((uv_handle_t *)&t->h, on_closed);
        return NULL;
    }
    return t;
}

static void found_free(srv_watch *w) {
    for (int f = 0; f < w->n_found; f++) free(w->found[f]);
    free(w->found);
    w->found = NULL;
    w->n_found = 0;
}

/* Loop: watch every task directory found, stop watching vanished ones. Returns how many are new.
 * One merge of two sorted lists (the watches, kept sorted by name; the listing, sorted on the pool):
 * linear in the folders, so a rescan of 10,000 tasks costs the loop a few strcmp per task, never the
 * nested search's N^2 / 2 (18.7 ms at 3,000 folders). */
static int follow(srv_watch *w) {
    int added = 0, cap = w->n_tw + (w->poll ? 0 : w->n_found);
    task_watch **nt = cap ? malloc((size_t)cap * sizeof *nt) : NULL;
    if (cap && !nt) { /* out of memory: keep what is watched; the next rescan tries again */
        found_free(w);
        return 0;
    }
    int i = 0, f = 0, n = 0, nf = w->poll ? 0 : w->n_found;
    while (i < w->n_tw || f < nf) {
        int c = i == w->n_tw ? 1 : f == nf ? -1 : strcmp(w->tw[i]->name, w->found[f]);
        if (c < 0) { /* vanished */
            uv_close((uv_handle_t *)&w->tw[i++]->h, on_closed);
        } else if (c == 0) {
            nt[n++] = w->tw[i++];
            f++;
        } else {
            task_watch *t = watch_task(w, w->found[f++]);
            if (t) nt[n++] = t, added++;
        }
    }
    free(w->tw);
    w->tw = nt;
    w->n_tw = n;
    found_free(w);
    return added;
}

static void rescan_after(uv_work_t *req, int status) {
    (void)status;
    srv_watch *w = req->data;
    w->running = 0;
    if (w->stopping) {
        found_free(w);
        maybe_free(w);
        return;
    }
    double t0 = srv__now();
    /* a new task directory: its versions may have arrived before its watch did */
    if (follow(w) > 0 || w->dirty) {
        w->dirty = 0;
        arm(w);
    }
    srv__metrics_watch_busy(w->s->metrics, srv__now() - t0);
}

static void start_rescan(srv_watch *w) {
    if (w->stopping) return;
    if (w->running) {
        w->dirty = 1;
        return;
    }
    w->running = 1;
    w->work.data = w;
    if (uv_queue_work(w->root.loop, &w->work, rescan_work, rescan_after)) w->running = 0;
}

static void on_debounce(uv_timer_t *t) { start_rescan(t->data); }
static void on_periodic(uv_timer_t *t) { start_rescan(t->data); }

static void arm(srv_watch *w) {
    if (!w->stopping) uv_timer_start(&w->debounce, on_debounce, (uint64_t)w->s->cfg.watch_debounce_ms, 0);
}

static void on_event(srv_watch *w, const char *filename, int status) {
    if (status < 0 || (filename && filename[0] == '.')) return; /* a writer's staging area */
    arm(w);
}

static void on_root_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    (void)events;
    on_event(h->data, filename, status);
}

static void on_task_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    (void)events;
    on_event(h->data, filename, status);
}

/* The registry directory: only the state file's arrival (a writer renames it in) matters. */
static void on_state_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    (void)events;
    if (status >= 0 && filename && !strcmp(filename, ".adapterd-state.json")) arm(h->data);
}

/* The watch of registry folder dir on s's loop: its four handles made, none started (srv__watch_stop
 * releases it). NULL when out of memory. */
static srv_watch *watch_new(srv_server *s, const char *dir) {
    srv_watch *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->s = s;
    w->poll = s->cfg.watch == SRV_WATCH_POLL;
    snprintf(w->tasks_dir, sizeof w->tasks_dir, "%s/tasks", dir);
    uv_fs_event_init(&s->loop, &w->root);
    uv_fs_event_init(&s->loop, &w->state);
    uv_timer_init(&s->loop, &w->debounce);
    uv_timer_init(&s->loop, &w->periodic);
    w->root.data = w->state.data = w->debounce.data = w->periodic.data = w;
    w->open_handles = 4;
    return w;
}

srv_watch *srv__watch_start(srv_server *s) {
    srv_watch *w = watch_new(s, store_dir(s->reg));
    if (!w) return NULL;
    if (!w->poll && uv_fs_event_start(&w->root, on_root_event, w->tasks_dir, 0)) {
        fprintf(stderr, "adapterd: watch: cannot watch %s; new versions need the admin API or a restart\n", w->tasks_dir);
        w->stopping = 1;
        uv_close((uv_handle_t *)&w->root, on_closed);
        uv_close((uv_handle_t *)&w->state, on_closed);
        uv_close((uv_handle_t *)&w->debounce, on_closed);
        uv_close((uv_handle_t *)&w->periodic, on_closed);
        return NULL;
    }
    /* without it only the periodic rescan follows other replicas' state changes */
    if (!w->poll && uv_fs_event_start(&w->state, on_state_event, store_dir(s->reg), 0))
        fprintf(stderr, "adapterd: watch: cannot watch %s; the registry state is followed every %d ms\n", store_dir(s->reg),
                s->cfg.watch_interval_ms);
    int every = s->cfg.watch_interval_ms;
    if (w->poll && every <= 0) {
        every = 5000;
        fprintf(stderr, "adapterd: watch: poll mode needs an interval; --watch-interval-ms %d\n", every);
    }
    if (every > 0) uv_timer_start(&w->periodic, on_periodic, (uint64_t)every, (uint64_t)every);
    if (w->poll) fprintf(stderr, "adapterd: watch: polling %s every %d ms\n", store_dir(s->reg), every);
    /* the task directories to watch: one listing on the pool, then follow() on the loop */
    start_rescan(w);
    return w;
}

void srv__watch_stop(srv_watch *w) {
    if (!w) return;
    w->stopping = 1;
    uv_close((uv_handle_t *)&w->root, on_closed);
    uv_close((uv_handle_t *)&w->state, on_closed);
    uv_close((uv_handle_t *)&w->debounce, on_closed);
    uv_close((uv_handle_t *)&w->periodic, on_closed);
    for (int i = 0; i < w->n_tw; i++) uv_close((uv_handle_t *)&w->tw[i]->h, on_closed);
    w->n_tw = 0;
    maybe_free(w);
}
