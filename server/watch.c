/* watch.c - the registry directory watch: new version directories that appear in tasks/ (by an
 * atomic rename, writers copy into a '.'-name first) are loaded, validated and listed without a
 * restart.
 *
 * libuv fs events (inotify, not recursive) watch tasks/ and every tasks/<name>/; an event whose
 * file name starts with '.' is a writer's staging area and is ignored. An event names its task
 * folder (the file name in tasks/, or the folder whose watch saw it): the names are collected and a
 * debounce timer armed; when tasks/ has been quiet for --watch-debounce-ms, store_rescan_tasks looks
 * at those folders only, on libuv's pool (it loads weights; never on the loop). A periodic full
 * rescan (--watch-interval-ms, store_rescan, also on the pool) catches what inotify cannot see:
 * files changed inside a listed version (several directories deep), which the store reports and
 * never reloads, and events lost (more than WATCH_NAMES_MAX folders named at once also fall back to
 * it).
 *
 * At scale (10,000 task folders): the loop never does work proportional to the registry in one
 * turn. The folders are listed on the pool; follow() merges that sorted listing with the sorted
 * watches (a strcmp per folder), and starts new watches WATCH_START_CHUNK at a time, one turn each
 * (10,000 inotify watches started in one turn held the loop 92 ms). At start-up the watches are
 * started first and the full rescan runs after them, so no version can arrive unseen between the two.
 *
 * Replicas sharing one registry (a ReadWriteMany volume): every rescan also re-reads the registry
 * state (two stats when it did not change: the base and its journal), where the admin API of any
 * replica records current versions and pins, and applies it. In inotify mode a base renamed in or
 * a line appended to the journal arms the debounce too, so replicas on one host follow at once. Network file systems
 * deliver no events for other hosts' changes: --watch poll drops the fs events and rescans every
 * --watch-interval-ms, which bounds how long two replicas can disagree. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "watch.h"

#include "engine/files.h"
#include "clock.h"
#include "offload.h"

#define WATCH_NAMES_MAX 4096  /* task folders named by events before the next rescan; beyond: a full one */
#define WATCH_START_CHUNK 256 /* watch changes (an inotify watch started or stopped) in one turn of the loop */
#define WATCH_TURN_NS 1000000 /* and at most about this long */
/* The periodic full rescan, spread thinly (issue 41): WATCH_SLICE steps of the walk (a task folder
 * scanned, checked or following the state: three steps a task, ~1.8 ms of CPU a slice), then
 * WATCH_PAUSE_MS asleep with no registry lock held. At 10,000 tasks a walk is ~0.6 s of CPU: in one
 * burst it took a core from the engine's two threads on a 2-vCPU host; paced it is ~3.7 s of wall
 * time, ~15% of one core, within the default 5 s interval (a longer walk delays the next one, it
 * never overlaps it). 64 steps and 20 ms made it 10 s at 10,000 tasks: the interval doubled. */
#define WATCH_SLICE 96
#define WATCH_PAUSE_MS 10

typedef struct {
    uv_fs_event_t h;             /* first: the handle's address is the watch's */
    char *name;
    struct srv_watch *w;
} task_watch;

/* A change of the watches, queued: watch folder name (add), or stop watching it. */
typedef struct {
    char *name;
    unsigned char add, recheck;  /* recheck: a new watch's folder is named to the next rescan */
} watch_op;

/* What a rescan on the pool does. */
typedef enum { WORK_LIST, WORK_FULL, WORK_TASKS } work_kind;

struct srv_watch {
    srv_server *s;
    char tasks_dir[PATH_MAX - 256];
    uv_fs_event_t root, state;   /* tasks/ and the registry directory (state file); inotify mode */
    uv_timer_t debounce, periodic;
    uv_idle_t chunk;             /* while changes are queued: a chunk a turn (a 0 ms timer reruns in one turn) */
    int poll;                    /* --watch poll: no fs events, the periodic rescan only */
    uv_work_t work;
    pthread_mutex_t tw_mu;       /* tw: changed on the loop, read by the pool's diff (never both long) */
    task_watch **tw;             /* watched tasks/<name>/, sorted by name, every one started */
    int n_tw, cap_tw;
    char **found;                /* the pool thread's listing of tasks/ */
    int n_found;
    watch_op *diff;              /* the pool's: the listing against the watches */
    int n_diff;
    watch_op *q;                 /* loop: changes not applied yet, q[q_head .. n_q) */
    int q_head, n_q, cap_q;
    char **pend;                 /* task folders events named since the last rescan: sorted, unique */
    int n_pend, cap_pend;
    int pend_full;               /* the next rescan looks at every folder */
    work_kind kind;              /* the running (or last) rescan's */
    char **names;                /* WORK_TASKS: the folders it looks at */
    unsigned char *there;        /* and whether each is there (on the pool) */
    int n_names;
    int full_after_start;        /* WORK_LIST at start-up: the full rescan runs once the watches started */
    int full_done;               /* the start-up's full rescan ran: later ones are paced (WATCH_SLICE) */
    atomic_int quit;             /* stopping, for a paced walk on the pool: it ends at its next pause */
    int running, dirty, stopping, open_handles;
};

static void strs_free(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static void ops_free(watch_op *v, int from, int n) {
    for (int i = from; i < n; i++) free(v[i].name);
    free(v);
}

static void maybe_free(srv_watch *w) {
    if (!w->stopping || w->open_handles || w->running) return;
    strs_free(w->pend, w->n_pend);
    strs_free(w->names, w->n_names);
    ops_free(w->q, w->q_head, w->n_q);
    ops_free(w->diff, 0, w->n_diff);
    free(w->there);
    free(w->tw);
    pthread_mutex_destroy(&w->tw_mu);
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

static void found_free(srv_watch *w) {
    for (int f = 0; f < w->n_found; f++) free(w->found[f]);
    free(w->found);
    w->found = NULL;
    w->n_found = 0;
}

/* The listing w->found against the watches, under tw_mu: one merge of two sorted lists, a strcmp per
 * folder (on the pool in the server: 10,000 folders cost the loop nothing). The listing's names move
 * into the changes; w->found is emptied. Returns how many folders are new (NULL *out when out of
 * memory: no change, the next rescan tries again). */
static int diff_listing(srv_watch *w, watch_op **out, int *n_out, int recheck) {
    *out = NULL, *n_out = 0;
    int added = 0, n = 0;
    pthread_mutex_lock(&w->tw_mu);
    watch_op *d = malloc(((size_t)w->n_tw + (size_t)w->n_found + 1) * sizeof *d);
    for (int i = 0, f = 0; d && (i < w->n_tw || f < w->n_found);) {
        int c = i == w->n_tw ? 1 : f == w->n_found ? -1 : strcmp(w->tw[i]->name, w->found[f]);
        if (c < 0) { /* vanished */
            if ((d[n].name = strdup(w->tw[i]->name))) d[n].add = 0, d[n++].recheck = 0;
            i++;
        } else if (c == 0) {
            i++, f++;
        } else {
            d[n].name = w->found[f], w->found[f++] = NULL;
            d[n].add = 1, d[n++].recheck = (unsigned char)recheck, added++;
        }
    }
    pthread_mutex_unlock(&w->tw_mu);
    found_free(w);
    if (!d) return 0;
    *out = d, *n_out = n;
    return added;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) ? 0 : (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Pool thread, between slices of a paced full rescan (no registry lock held): nonzero ends the walk. */
static int pace(void *ctx) {
    srv_watch *w = ctx;
    if (atomic_load(&w->quit)) return 1;
    struct timespec ts = {0, WATCH_PAUSE_MS * 1000000L};
    nanosleep(&ts, NULL);
    return atomic_load(&w->quit);
}

static void rescan_work(uv_work_t *req) {
    srv_watch *w = req->data;
    srv__pool_thread_nice();
    eng_err e = {0};
    double t0 = srv__now(), c0 = thread_cpu_s();
    if (w->kind == WORK_TASKS) {
        if (store_rescan_tasks(w->s->reg, w->names, w->n_names, &e) < 0) fprintf(stderr, "adapterd: watch: %s\n", e.msg);
        char p[PATH_MAX];
        for (int i = 0; i < w->n_names; i++)
            w->there[i] = snprintf(p, sizeof p, "%s/%s", w->tasks_dir, w->names[i]) < (int)sizeof p && eng_dir_exists(p);
        srv__metrics_rescan(w->s->metrics, SRV_RESCAN_TASKS, srv__now() - t0, thread_cpu_s() - c0);
        return;
    }
    /* the start-up's at full speed (readiness waits for it), later ones paced */
    if (w->kind == WORK_FULL && (w->full_done ? store_rescan_paced(w->s->reg, WATCH_SLICE, pace, w, &e)
                                              : store_rescan(w->s->reg, &e)) < 0)
        fprintf(stderr, "adapterd: watch: %s\n", e.msg);
    if (!w->poll) { /* here, off the loop: what the watches must follow */
        list_tasks(w);
        /* a new folder's versions may have arrived before its watch: looked at again (not at
         * start-up, where the full rescan comes after the watches) */
        diff_listing(w, &w->diff, &w->n_diff, w->kind != WORK_LIST);
    }
    if (w->kind == WORK_FULL) srv__metrics_rescan(w->s->metrics, SRV_RESCAN_FULL, srv__now() - t0, thread_cpu_s() - c0);
}

static void arm(srv_watch *w);
static void on_task_event(uv_fs_event_t *h, const char *filename, int events, int status);

/* Loop: index of the watch of folder name, or -1 with *at where it would go. tw_mu held. */
static int tw_find(const srv_watch *w, const char *name, int *at) {
    int lo = 0, hi = w->n_tw;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(w->tw[mid]->name, name);
        if (!c) return *at = mid, mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return *at = lo, -1;
}

static void pend_add(srv_watch *w, const char *name);

/* Loop: one queued change. A new watch that cannot start (the folder went, inotify's limit, memory)
 * is left out; a later full rescan's listing offers it again. tw_mu held. */
static void apply(srv_watch *w, const watch_op *op) {
    int at, i = tw_find(w, op->name, &at);
    if (!op->add) {
        if (i < 0) return;
        uv_close((uv_handle_t *)&w->tw[i]->h, on_closed);
        memmove(&w->tw[i], &w->tw[i + 1], (size_t)(w->n_tw - i - 1) * sizeof *w->tw);
        w->n_tw--;
        return;
    }
    if (i >= 0) return;
    if (w->n_tw == w->cap_tw) {
        int nc = w->cap_tw ? 2 * w->cap_tw : 64;
        task_watch **nt = realloc(w->tw, (size_t)nc * sizeof *nt);
        if (!nt) return;
        w->tw = nt, w->cap_tw = nc;
    }
    task_watch *t = calloc(1, sizeof *t);
    char p[PATH_MAX];
    if (!t || !(t->name = strdup(op->name)) || snprintf(p, sizeof p, "%s/%s", w->tasks_dir, op->name) >= (int)sizeof p) {
        if (t) free(t->name);
        free(t);
        return;
    }
    t->w = w;
    uv_fs_event_init(w->root.loop, &t->h);
    t->h.data = w;
    w->open_handles++;
    if (uv_fs_event_start(&t->h, on_task_event, p, 0)) {
        uv_close((uv_handle_t *)&t->h, on_closed);
        return;
    }
    memmove(&w->tw[at + 1], &w->tw[at], (size_t)(w->n_tw - at) * sizeof *w->tw);
    w->tw[at] = t;
    w->n_tw++;
    if (op->recheck) pend_add(w, op->name);
}

/* Loop: appends n changes to the queue (taking their names); out of memory: dropped. */
static void enqueue(srv_watch *w, watch_op *ops, int n) {
    if (w->q_head == w->n_q) w->q_head = w->n_q = 0;
    if (w->n_q + n > w->cap_q) {
        int nc = w->cap_q ? w->cap_q : 64;
        while (nc < w->n_q + n) nc *= 2;
        watch_op *nq = realloc(w->q, (size_t)nc * sizeof *nq);
        if (!nq) {
            for (int i = 0; i < n; i++) free(ops[i].name);
            return;
        }
        w->q = nq, w->cap_q = nc;
    }
    memcpy(&w->q[w->n_q], ops, (size_t)n * sizeof *ops);
    w->n_q += n;
}

static void on_chunk(uv_idle_t *h);

/* Loop: applies up to WATCH_START_CHUNK queued changes, or fewer once WATCH_TURN_NS have gone (an
 * inotify_add_watch takes 5-20 us, more on a loaded host); more wait for the next turns (the idle
 * handle). Returns how many remain. */
static int apply_some(srv_watch *w) {
    uint64_t t0 = uv_hrtime();
    pthread_mutex_lock(&w->tw_mu);
    for (int k = 0; k < WATCH_START_CHUNK && w->q_head < w->n_q; k++, w->q_head++) {
        if (k && !(k & 15) && uv_hrtime() - t0 > WATCH_TURN_NS) break;
        apply(w, &w->q[w->q_head]);
        free(w->q[w->q_head].name);
    }
    pthread_mutex_unlock(&w->tw_mu);
    int left = w->n_q - w->q_head;
    if (left) uv_idle_start(&w->chunk, on_chunk);
    return left;
}

static void start_rescan(srv_watch *w, int full);

/* A turn of its own for each WATCH_START_CHUNK changes; the start-up's full rescan once all ran. */
static void on_chunk(uv_idle_t *h) {
    srv_watch *w = h->data;
    double t0 = thread_cpu_s();
    if (w->stopping || apply_some(w) == 0) {
        uv_idle_stop(&w->chunk);
        if (!w->stopping && w->full_after_start) w->full_after_start = 0, start_rescan(w, 1);
    }
    if (w->s->metrics) srv__metrics_watch_busy(w->s->metrics, thread_cpu_s() - t0);
}

/* Loop: task name is to be looked at by the next rescan (a full one once too many are). */
static void pend_add(srv_watch *w, const char *name) {
    if (w->pend_full) return;
    int lo = 0, hi = w->n_pend;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(w->pend[mid], name);
        if (!c) return;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (w->n_pend == WATCH_NAMES_MAX) {
        strs_free(w->pend, w->n_pend);
        w->pend = NULL, w->n_pend = w->cap_pend = 0, w->pend_full = 1;
        return;
    }
    if (w->n_pend == w->cap_pend) {
        int nc = w->cap_pend ? 2 * w->cap_pend : 16;
        char **np = realloc(w->pend, (size_t)nc * sizeof *np);
        if (!np) {
            w->pend_full = 1;
            return;
        }
        w->pend = np, w->cap_pend = nc;
    }
    char *c = strdup(name);
    if (!c) {
        w->pend_full = 1;
        return;
    }
    memmove(&w->pend[lo + 1], &w->pend[lo], (size_t)(w->n_pend - lo) * sizeof *w->pend);
    w->pend[lo] = c;
    w->n_pend++;
}

/* Loop: watch every task directory of the listing, stop watching vanished ones: the changes the
 * pool computed (w->diff), or else those of the listing w->found. Returns how many are new. */
static int follow(srv_watch *w) {
    if (w->poll) {
        found_free(w);
        return 0;
    }
    if (!w->diff) diff_listing(w, &w->diff, &w->n_diff, w->kind != WORK_LIST);
    int added = 0;
    for (int i = 0; i < w->n_diff; i++) added += w->diff[i].add;
    if (w->diff) enqueue(w, w->diff, w->n_diff);
    free(w->diff), w->diff = NULL, w->n_diff = 0;
    apply_some(w);
    return added;
}

/* Loop, after a rescan of named folders: those there are watched (new ones named again for the next
 * rescan: their versions may have arrived before the watch), those gone are not. */
static void follow_names(srv_watch *w) {
    if (w->poll || !w->n_names) return;
    watch_op *d = malloc((size_t)w->n_names * sizeof *d);
    int n = 0;
    for (int i = 0; d && i < w->n_names; i++)
        if ((d[n].name = strdup(w->names[i]))) d[n].add = w->there[i], d[n++].recheck = 1;
    if (d) enqueue(w, d, n);
    free(d);
    apply_some(w);
}

static void names_free(srv_watch *w) {
    strs_free(w->names, w->n_names);
    free(w->there);
    w->names = NULL, w->there = NULL, w->n_names = 0;
}

static void rescan_after(uv_work_t *req, int status) {
    (void)status;
    srv_watch *w = req->data;
    w->running = 0;
    if (w->stopping) {
        found_free(w);
        names_free(w);
        ops_free(w->diff, 0, w->n_diff), w->diff = NULL, w->n_diff = 0;
        maybe_free(w);
        return;
    }
    double t0 = thread_cpu_s();
    if (w->kind == WORK_FULL) w->full_done = 1;
    if (w->kind == WORK_TASKS) {
        follow_names(w);
    } else if (!w->poll) {
        follow(w);
    }
    names_free(w);
    if (w->kind == WORK_LIST && w->q_head == w->n_q) start_rescan(w, 1); /* else on_chunk, once they ran */
    else if (w->kind == WORK_LIST) w->full_after_start = 1;
    if (w->n_pend || w->pend_full || w->dirty) {
        w->dirty = 0;
        arm(w);
    }
    if (w->s->metrics) srv__metrics_watch_busy(w->s->metrics, thread_cpu_s() - t0);
}

static void queue(srv_watch *w, work_kind kind) {
    w->running = 1;
    w->kind = kind;
    w->work.data = w;
    if (uv_queue_work(w->root.loop, &w->work, rescan_work, rescan_after)) {
        w->running = 0;
        names_free(w);
    }
}

/* Loop: a full rescan, or one of the folders named since the last (a full one when too many were, or
 * when one is due anyway). One at a time: asked meanwhile, it runs after the one under way. */
static void start_rescan(srv_watch *w, int full) {
    if (w->stopping) return;
    if (full) w->pend_full = 1;
    if (w->running) {
        w->dirty = 1;
        return;
    }
    if (w->pend_full) {
        strs_free(w->pend, w->n_pend);
        w->pend = NULL, w->n_pend = w->cap_pend = 0, w->pend_full = 0;
        queue(w, WORK_FULL);
        return;
    }
    /* the names move to the rescan; none: the state file changed (followed by store_rescan_tasks) */
    if (!(w->there = calloc((size_t)w->n_pend + 1, 1))) {
        w->pend_full = 1;
        return;
    }
    w->names = w->pend, w->n_names = w->n_pend;
    w->pend = NULL, w->n_pend = w->cap_pend = 0;
    queue(w, WORK_TASKS);
}

static void on_debounce(uv_timer_t *t) { start_rescan(t->data, 0); }
static void on_periodic(uv_timer_t *t) { start_rescan(t->data, 1); }

static void arm(srv_watch *w) {
    if (!w->stopping) uv_timer_start(&w->debounce, on_debounce, (uint64_t)w->s->cfg.watch_debounce_ms, 0);
}

/* tasks/: the file name is a task folder's (NULL: inotify lost track, everything is looked at). */
static void on_root_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    (void)events;
    srv_watch *w = h->data;
    if (status < 0 || (filename && filename[0] == '.')) return; /* a writer's staging area */
    if (filename) pend_add(w, filename);
    else w->pend_full = 1;
    arm(w);
}

/* tasks/<name>/: whatever the file name (a version folder renamed in or out), it is that task's. */
static void on_task_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    (void)events;
    srv_watch *w = h->data;
    if (status < 0 || (filename && filename[0] == '.')) return;
    pend_add(w, ((task_watch *)h)->name);
    arm(w);
}

/* The registry directory: only the state's files matter (a writer renames a base in, or appends
 * a line to the journal); a rescan of no folder follows them. */
static void on_state_event(uv_fs_event_t *h, const char *filename, int events, int status) {
    (void)events;
    if (status >= 0 && filename && (!strcmp(filename, ".adapterd-state.json") || !strcmp(filename, ".adapterd-state.log")))
        arm(h->data);
}

/* The watch of registry folder dir on s's loop: its four handles made, none started (srv__watch_stop
 * releases it). NULL when out of memory. */
static srv_watch *watch_new(srv_server *s, const char *dir) {
    srv_watch *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->s = s;
    w->poll = s->cfg.watch == SRV_WATCH_POLL;
    pthread_mutex_init(&w->tw_mu, NULL);
    snprintf(w->tasks_dir, sizeof w->tasks_dir, "%s/tasks", dir);
    uv_fs_event_init(&s->loop, &w->root);
    uv_fs_event_init(&s->loop, &w->state);
    uv_timer_init(&s->loop, &w->debounce);
    uv_timer_init(&s->loop, &w->periodic);
    uv_idle_init(&s->loop, &w->chunk);
    w->root.data = w->state.data = w->debounce.data = w->periodic.data = w->chunk.data = w;
    w->open_handles = 5;
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
        uv_close((uv_handle_t *)&w->chunk, on_closed);
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
    /* the task directories to watch: one listing on the pool, then follow() on the loop, then (its
     * watches started) the full rescan; in poll mode the full rescan at once */
    if (w->poll) start_rescan(w, 1);
    else queue(w, WORK_LIST);
    return w;
}

void srv__watch_stop(srv_watch *w) {
    if (!w) return;
    w->stopping = 1;
    atomic_store(&w->quit, 1);
    uv_close((uv_handle_t *)&w->root, on_closed);
    uv_close((uv_handle_t *)&w->state, on_closed);
    uv_close((uv_handle_t *)&w->debounce, on_closed);
    uv_close((uv_handle_t *)&w->periodic, on_closed);
    uv_close((uv_handle_t *)&w->chunk, on_closed);
    pthread_mutex_lock(&w->tw_mu); /* a listing's diff may be reading them on the pool */
    for (int i = 0; i < w->n_tw; i++) uv_close((uv_handle_t *)&w->tw[i]->h, on_closed);
    w->n_tw = 0;
    pthread_mutex_unlock(&w->tw_mu);
    maybe_free(w);
}
