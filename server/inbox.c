/* inbox.c - see inbox.h. */
#include "inbox.h"

void srv__inbox_run(srv_inbox *in) {
    pthread_mutex_lock(&in->mu);
    srv_inbox_node *first = in->head;
    in->head = in->tail = NULL;
    pthread_mutex_unlock(&in->mu);
    if (first) in->cb(in, first);
}

static void on_async(uv_async_t *a) { srv__inbox_run(a->data); }

int srv__inbox_init(srv_inbox *in, uv_loop_t *loop, srv_inbox_cb cb, void *data) {
    in->head = in->tail = NULL;
    in->cb = cb;
    in->data = data;
    int rc = uv_async_init(loop, &in->async, on_async);
    if (rc) return rc;
    in->async.data = in;
    pthread_mutex_init(&in->mu, NULL);
    return 0;
}

void srv__inbox_push(srv_inbox *in, srv_inbox_node *n) {
    n->next = NULL;
    pthread_mutex_lock(&in->mu);
    if (in->tail) in->tail->next = n;
    else in->head = n;
    in->tail = n;
    pthread_mutex_unlock(&in->mu);
    uv_async_send(&in->async);
}

void srv__inbox_destroy(srv_inbox *in) { pthread_mutex_destroy(&in->mu); }
