/* offload.c - slow work a request needs before it can be answered or scheduled (an admin upload:
 * untar, load, validate; a task to load under the memory budget) runs on libuv's thread pool,
 * never on libmicrohttpd's threads or the loop.
 *
 * The path keeps the server's one way across threads: the MHD thread suspends the connection and
 * puts the request in an inbox (inbox.h); the loop queues it with uv_queue_work; the pool thread
 * runs the work; the after-work callback, on the loop again, resumes the connection, and MHD calls
 * on_request, which sends the answer or runs the request again. Suspending before queueing means
 * the resume can never overtake the suspend. What the work does is the caller's (admin.c,
 * infer.c): this file knows no route. */
#define _GNU_SOURCE
#include "offload.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "http.h"
#include "http_status.h"

/* Bytes of an offloaded error message. */
#define OFFLOAD_MSG_MAX 1024

/* The pool's threads run below the engine workers and HTTP threads. */
#define POOL_THREAD_NICE 19

struct srv_offloader {
    srv_inbox inbox;
};

/* Pool threads run loads and uploads: below the engine workers and HTTP threads in the scheduler's
 * eyes, so a large load takes longer rather than slowing other tasks' requests. */
void srv__pool_thread_nice(void) {
    static __thread bool done;
    if (!done) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), POOL_THREAD_NICE), done = true;
}

static void work_cb(uv_work_t *w) {
    srv__pool_thread_nice();
    srv_request *r = w->data;
    r->off.fn(r);
}

void srv__offload_fail(srv_request *r, eng_status code, const char *msg) {
    free(r->off.body);
    r->off.body = NULL;
    /* loaders name the files they read: the registry's location is the operator's, not the client's */
    char clean[OFFLOAD_MSG_MAX];
    snprintf(clean, sizeof clean, "%s", msg);
    srv__scrub_path(clean, sizeof clean, store_dir(r->srv->reg), "<registry>");
    if (strcmp(store_dir(r->srv->reg), r->srv->cfg.registry))
        srv__scrub_path(clean, sizeof clean, r->srv->cfg.registry, "<registry>");
    r->off.status = srv__error_body_as(r->dialect, code, clean, &r->off.body, &r->off.len); /* the route's shape */
}

static void after_cb(uv_work_t *w, int status) {
    srv_request *r = w->data;
    if (status == UV_ECANCELED && !r->off.status) srv__offload_fail(r, ENG_UNAVAILABLE, "the server is stopping");
    r->off.state = SRV_OFFLOAD_DONE;
    atomic_fetch_sub(&r->srv->n_suspended, 1);
    MHD_resume_connection(r->conn);
}

static void on_requests(srv_inbox *in, srv_inbox_node *first) {
    for (srv_inbox_node *n = first, *nx; n; n = nx) {
        nx = n->next;
        srv_request *r = SRV_CONTAINER_OF(n, srv_request, off.inbox);
        r->off.work.data = r;
        if (uv_queue_work(in->async.loop, &r->off.work, work_cb, after_cb)) after_cb(&r->off.work, UV_ECANCELED);
    }
}

srv_offloader *srv__offload_new(uv_loop_t *loop) {
    srv_offloader *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    if (srv__inbox_init(&o->inbox, loop, on_requests, o)) {
        free(o);
        return NULL;
    }
    return o;
}

void srv__offload_free(srv_offloader *o) {
    if (!o) return;
    srv__inbox_destroy(&o->inbox);
    free(o);
}

void srv__offload(srv_offloader *o, srv_request *r, void (*fn)(srv_request *r)) {
    free(r->off.body);
    r->off.body = NULL;
    r->off.status = 0;
    r->off.fn = fn;
    r->off.state = SRV_OFFLOAD_RUNNING;
    atomic_fetch_add(&r->srv->n_suspended, 1);
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    srv__inbox_push(&o->inbox, &r->off.inbox);
}

void srv__offload_clear(srv_request *r) {
    free(r->off.body);
    r->off.body = NULL;
}
