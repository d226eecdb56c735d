/* offload.c - slow work a request needs before it can be answered or scheduled (an admin upload:
 * untar, load, validate; a task to load under the memory budget) runs on libuv's thread pool,
 * never on libmicrohttpd's threads or the loop.
 *
 * The path keeps the server's one way across threads: the MHD thread suspends the connection and
 * puts the request in an inbox (mutex + uv_async_send); the loop queues it with uv_queue_work; the
 * pool thread runs the work; the after-work callback, on the loop again, resumes the connection,
 * and MHD calls on_request, which sends the answer or runs the request again. Suspending before
 * queueing means the resume can never overtake the suspend. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string.h>

#include "http_status.h"
#include "internal.h"

struct srv_offloader {
    uv_async_t async;
    pthread_mutex_t mu;
    srv_request *head, *tail;
};

/* Pool threads run loads and uploads: below the engine workers and HTTP threads in the scheduler's
 * eyes, so a large load takes longer rather than slowing other tasks' requests. */
void srv__pool_thread_nice(void) {
    static __thread int done;
    if (!done) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19), done = 1;
}

static void work_cb(uv_work_t *w) {
    srv__pool_thread_nice();
    srv_request *r = w->data;
    r->off.fn(r);
}

static void after_cb(uv_work_t *w, int status) {
    srv_request *r = w->data;
    if (status == UV_ECANCELED && !r->off.status) {
        r->off.status = 503;
        r->off.body = proto_error_encode("unavailable", "the server is stopping", &r->off.len);
    }
    r->off.state = 2;
    MHD_resume_connection(r->conn);
}

static void async_cb(uv_async_t *a) {
    srv_offloader *o = a->data;
    pthread_mutex_lock(&o->mu);
    srv_request *h = o->head;
    o->head = o->tail = NULL;
    pthread_mutex_unlock(&o->mu);
    for (srv_request *r = h, *nx; r; r = nx) {
        nx = r->off.next;
        r->off.next = NULL;
        r->off.work.data = r;
        if (uv_queue_work(a->loop, &r->off.work, work_cb, after_cb)) after_cb(&r->off.work, UV_ECANCELED);
    }
}

srv_offloader *srv__offload_new(uv_loop_t *loop) {
    srv_offloader *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    pthread_mutex_init(&o->mu, NULL);
    uv_async_init(loop, &o->async, async_cb);
    o->async.data = o;
    return o;
}

/* The async handle is closed by srv_run's uv_walk before this runs. */
void srv__offload_free(srv_offloader *o) {
    if (!o) return;
    pthread_mutex_destroy(&o->mu);
    free(o);
}

void srv__offload(srv_server *s, srv_request *r, void (*fn)(srv_request *r)) {
    srv_offloader *o = s->offl;
    free(r->off.body);
    r->off.body = NULL;
    r->off.status = 0;
    r->off.fn = fn;
    r->off.state = 1;
    MHD_suspend_connection(r->conn);
    r->suspended = 1;
    pthread_mutex_lock(&o->mu);
    if (o->tail) o->tail->off.next = r;
    else o->head = r;
    o->tail = r;
    pthread_mutex_unlock(&o->mu);
    uv_async_send(&o->async);
}

void srv__offload_clear(srv_request *r) {
    for (int i = 0; i < r->off.n_held; i++) store_task_release(r->off.held[i]);
    free(r->off.held);
    r->off.held = NULL;
    r->off.n_held = 0;
    free(r->off.body);
    r->off.body = NULL;
}

/* ---- lazy loading ---- */

/* Acquires the current version of every task the request names (all when none) into held;
 * returns how many are not resident, or -1 when out of memory. Unknown names are left to
 * job_prepare, which answers 404. */
static int acquire_named(srv_request *r, store_task ***held, int *n_held) {
    store_registry *reg = r->srv->reg;
    int n = r->preq.n_tasks ? r->preq.n_tasks : store_n_tasks(reg), missing = 0, k = 0;
    store_task **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) return -1;
    for (int i = 0; i < n; i++) {
        store_task *t = r->preq.n_tasks ? store_task_acquire(reg, r->preq.tasks[i], strlen(r->preq.tasks[i]))
                                        : store_task_acquire_at(reg, i);
        if (!t) continue;
        v[k++] = t;
        missing += !store_task_resident(t);
    }
    *held = v;
    *n_held = k;
    return missing;
}

int srv__tasks_missing(srv_request *r) {
    store_task **v;
    int n, missing = acquire_named(r, &v, &n);
    for (int i = 0; i < n; i++) store_task_release(v[i]);
    if (missing >= 0) free(v);
    return missing > 0;
}

static void load_tasks(srv_request *r) {
    for (int i = 0; i < r->off.n_held; i++) {
        eng_err e = {0};
        int rc = store_task_ensure(r->srv->reg, r->off.held[i], &e);
        if (rc) {
            r->off.status = srv_http_status((eng_status)rc);
            r->off.body = proto_error_encode(eng_status_name(rc), e.msg, &r->off.len);
            if (!r->off.body) r->off.status = 0;
            return;
        }
    }
}

enum MHD_Result srv__load_then_retry(srv_request *r) {
    if (++r->off.rounds > 3)
        return srv__send_error(r, ENG_UNAVAILABLE, "tasks were evicted or replaced while loading; retry");
    /* drop what an earlier round held: the current versions may have changed */
    for (int i = 0; i < r->off.n_held; i++) store_task_release(r->off.held[i]);
    free(r->off.held);
    r->off.held = NULL;
    r->off.n_held = 0;
    if (acquire_named(r, &r->off.held, &r->off.n_held) < 0) return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    srv__offload(r->srv, r, load_tasks);
    return MHD_YES;
}
