/* conn.c - see conn.h. libmicrohttpd's connection timeout is an idle timeout: every byte restarts
 * it, so a client that sends one header byte every 250 ms holds its connection forever, and 4,200
 * such clients hold all of them. Its connection limit stops accepting when full, so /healthz times
 * out behind them. What it offers is the socket of every connection (NOTIFY_CONNECTION) and the
 * access handler's calls, which mark when headers and body arrive; this file keeps that per
 * connection in a list under one mutex, and a sweep on the loop's timer closes the connections that
 * are too slow.
 *
 * Closing from another thread: the sweep calls shutdown(2) on the socket, never close(2), and only
 * while the connection is still listed. libmicrohttpd tells us a connection is gone (NOTIFY_CLOSED,
 * which takes the same mutex) before it closes its socket, so the descriptor cannot have been
 * reused; after the shutdown its own thread sees the end of the stream and closes the connection
 * the usual way (the request's completion callback runs as for any client that went away).
 *
 * The reserve: libmicrohttpd accepts max_connections + reserve; a connection accepted beyond
 * max_connections serves only /healthz, /readyz and the v2 health routes (others get 503), and
 * its arrival closes the connection that has waited longest for its headers, so the count falls
 * back below max_connections when idle clients fill it. */
#define _GNU_SOURCE
#include "conn.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "clock.h"

typedef struct srv_conn {
    struct srv_conn *prev, *next;
    int fd;
    srv_conn_phase phase;
    double t_phase;          /* when the phase began, seconds, monotonic */
    size_t body_bytes;       /* of the current request */
    bool reserve;
    bool closing;            /* shut down by us; waiting for libmicrohttpd to close it */
    bool linked;             /* in the list */
} srv_conn;

struct srv_conns {
    srv_conn_params p;
    pthread_mutex_t mu;
    srv_conn *head;          /* guarded by mu */
    int n;
};

srv_conns *srv__conns_new(const srv_conn_params *p) {
    srv_conns *cs = calloc(1, sizeof *cs);
    if (!cs) return NULL;
    cs->p = *p;
    pthread_mutex_init(&cs->mu, NULL);
    return cs;
}

void srv__conns_free(srv_conns *cs) {
    if (!cs) return;
    for (srv_conn *c = cs->head, *nx; c; c = nx) nx = c->next, free(c);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

/* Under mu: shuts c down once. */
static void shut(srv_conn *c) {
    if (c->closing) return;
    c->closing = true;
    shutdown(c->fd, SHUT_RDWR);
}

void srv__conns_notify(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    srv_conns *cs = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        srv_conn *c = calloc(1, sizeof *c);
        *socket_context = c;
        if (!c || !fi) return; /* untracked: libmicrohttpd's own timeout still applies */
        c->fd = fi->connect_fd;
        c->phase = SRV_CONN_WAITING;
        c->t_phase = srv__now();
        c->linked = true;
        pthread_mutex_lock(&cs->mu);
        c->next = cs->head;
        if (cs->head) cs->head->prev = c;
        cs->head = c;
        cs->n++;
        if (cs->n > cs->p.max_connections) {
            c->reserve = true;
            srv_conn *oldest = NULL;
            for (srv_conn *o = cs->head; o; o = o->next)
                if (o != c && o->phase == SRV_CONN_WAITING && !o->closing && (!oldest || o->t_phase < oldest->t_phase)) oldest = o;
            if (oldest) shut(oldest);
        }
        pthread_mutex_unlock(&cs->mu);
        return;
    }
    srv_conn *c = *socket_context;
    *socket_context = NULL;
    if (!c) return;
    pthread_mutex_lock(&cs->mu);
    if (c->linked) {
        if (c->prev) c->prev->next = c->next;
        else if (cs->head == c) cs->head = c->next;
        if (c->next) c->next->prev = c->prev;
        cs->n--;
    }
    pthread_mutex_unlock(&cs->mu);
    free(c);
}

static srv_conn *of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void srv__conns_phase(srv_conns *cs, struct MHD_Connection *mc, srv_conn_phase ph) {
    srv_conn *c = of(mc);
    if (!c) return;
    pthread_mutex_lock(&cs->mu);
    c->phase = ph;
    c->t_phase = srv__now();
    c->body_bytes = 0;
    pthread_mutex_unlock(&cs->mu);
}

void srv__conns_body(srv_conns *cs, struct MHD_Connection *mc, size_t n) {
    srv_conn *c = of(mc);
    if (!c) return;
    pthread_mutex_lock(&cs->mu);
    c->body_bytes += n;
    pthread_mutex_unlock(&cs->mu);
}

bool srv__conns_reserve(srv_conns *cs, struct MHD_Connection *mc) {
    (void)cs;
    srv_conn *c = of(mc);
    return c && c->reserve; /* written once, before the connection's first request */
}

int srv__conns_sweep(srv_conns *cs) {
    double now = srv__now(), hdr = cs->p.header_timeout_s;
    int closed = 0;
    pthread_mutex_lock(&cs->mu);
    for (srv_conn *c = cs->head; c; c = c->next) {
        if (c->closing) continue;
        double age = now - c->t_phase;
        bool slow_headers = c->phase == SRV_CONN_WAITING && age > hdr;
        bool slow_body = c->phase == SRV_CONN_BODY && cs->p.min_body_rate && age > hdr &&
                         (double)c->body_bytes < (double)cs->p.min_body_rate * age;
        if (slow_headers || slow_body) shut(c), closed++;
    }
    pthread_mutex_unlock(&cs->mu);
    return closed;
}
