/* inbox.h - the one way other threads hand work to the libuv loop: a mutex-guarded FIFO of
 * intrusive nodes plus a uv_async_t. Any thread pushes; the loop's callback receives everything
 * pushed since its last run, oldest first, with the lock already released, so no lock is held
 * while the loop works on the items.
 *
 * Bounded by its users: every item is a request or a batch the server admitted (the scheduler's
 * max_queue, the HTTP connection limit), never allocated by the inbox itself.
 *
 *     srv_inbox in;  srv__inbox_init(&in, loop, on_items, ctx);
 *     srv__inbox_push(&in, &job->inbox);          // any thread
 *     static void on_items(srv_inbox *in, srv_inbox_node *first) {   // loop thread
 *         for (srv_inbox_node *n = first, *nx; n; n = nx) { nx = n->next; ... container of n ... }
 *     }
 * The uv_async_t is closed with the loop's other handles (uv_walk in srv_run); srv__inbox_destroy
 * then releases the mutex. */
#ifndef ADAPTERD_SERVER_INBOX_H
#define ADAPTERD_SERVER_INBOX_H

#include <pthread.h>
#include <stddef.h>
#include <uv.h>

typedef struct srv_inbox_node {
    struct srv_inbox_node *next;
} srv_inbox_node;

typedef struct srv_inbox srv_inbox;
/* Loop thread: called with the list of nodes pushed since the last call (first != NULL). */
typedef void (*srv_inbox_cb)(srv_inbox *in, srv_inbox_node *first);

struct srv_inbox {
    uv_async_t async;
    pthread_mutex_t mu;
    srv_inbox_node *head, *tail;  /* guarded by mu */
    srv_inbox_cb cb;
    void *data;                   /* the owner's context, for cb */
};

/* Loop thread, before any push. Returns 0, or a negative libuv error when the async handle cannot
 * be created (the inbox is then unusable and needs no destroy). */
int srv__inbox_init(srv_inbox *in, uv_loop_t *loop, srv_inbox_cb cb, void *data);
/* Any thread: appends n and wakes the loop. */
void srv__inbox_push(srv_inbox *in, srv_inbox_node *n);
/* Loop thread, also once the loop has stopped: runs the callback on what is pending now. */
void srv__inbox_run(srv_inbox *in);
/* After the async handle was closed and the loop ran its close callbacks. */
void srv__inbox_destroy(srv_inbox *in);

/* The struct that holds node as its member `field`. */
#define SRV_CONTAINER_OF(node, type, field) ((type *)(void *)((char *)(node)-offsetof(type, field)))

#endif
