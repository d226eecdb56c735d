/* conn.c - see conn.h. libmicrohttpd's connection timeout is an idle timeout: every byte restarts
 * it, so a client that sends one header byte every 250 ms holds its connection forever, and 4,200
 * such clients hold all of them. Its connection limit stops accepting when full, so /healthz times
 * out behind them. What it offers is the socket of every connection (NOTIFY_CONNECTION) and the
 * access handler's calls, which mark when headers and body arrive; this file keeps that per
 * connection, and a sweep on the loop's timer closes the connections that are too slow.
 *
 * What takes the lock, and for how long. The hot path, a body chunk, is one relaxed atomic add on
 * the connection's own counter: no lock. The lock is taken once per accept, close and phase change
 * (three times a request), and only for O(1) work: a connection waiting for headers sits in one list,
 * a connection receiving a body in another, each appended when it enters its phase (the time taken
 * under the lock), so both lists are in the order of their deadlines. The oldest connection waiting
 * for headers, which an arrival beyond max_connections closes, is the head of the first list: no
 * scan. The sweep walks each list from the head only while its connections are past the header
 * deadline: what it reads is what it may close (and, for bodies, the uploads older than the
 * deadline that are keeping up with the rate).
 *
 * Closing from another thread: the sweep calls shutdown(2) on the socket, never close(2), and only
 * while the connection is still registered. libmicrohttpd tells us a connection is gone
 * (NOTIFY_CLOSED, which takes the same lock) before it closes its socket, so the descriptor cannot
 * have been reused; after the shutdown its own thread sees the end of the stream and closes the
 * connection the usual way (the request's completion callback runs as for any client that went
 * away). A connection shut down leaves both lists for good.
 *
 * The reserve: libmicrohttpd accepts max_connections + reserve; a connection accepted beyond
 * max_connections serves only /healthz, /readyz and the v2 health routes (others get 503), and
 * its arrival closes the connection that has waited longest for its headers, so the count falls
 * back below max_connections when idle clients fill it.
 *
 * Both protocols, one count. gRPC's connections (grpc.c, on the loop) register here too, so
 * max_connections, the reserve and the cap per address hold for HTTP and gRPC together: a client
 * cannot take twice its share by speaking both. A gRPC connection is in neither deadline list (its
 * calls have their own deadlines, in grpc.c); while it has no call open it sits in a third list,
 * oldest first, of connections that may give way to an arrival beyond max_connections once no HTTP
 * connection is waiting for headers. The cap per address is a table of counts by address (IPv4, or
 * IPv6 with IPv4-mapped addresses counted as IPv4), an entry per address with a connection open.
 * libmicrohttpd asks it before accepting (its accept policy), which refuses the connection before a
 * byte of it is read; grpc.c asks and registers under one lock. */
#define _GNU_SOURCE
#include "conn.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"

/* Buckets of the table of counts by address: a few entries per bucket at thousands of addresses. */
#define IP_BUCKETS 1024

/* Which of the time-ordered lists a connection is in: HTTP's two deadline lists, or gRPC's idle. */
typedef enum { LIST_NONE, LIST_WAITING, LIST_BODY, LIST_IDLE } conn_list;

/* Connections open from one address. */
typedef struct ip_count {
    struct ip_count *next;        /* in its bucket */
    int n;
    uint8_t len;                  /* 4 (IPv4) or 16 (IPv6) */
    uint8_t addr[16];
} ip_count;

struct srv_conn {
    struct srv_conn *prev, *next; /* in its list; guarded by the conns' mu */
    struct srv_conn *all_prev, *all_next; /* every connection open, for srv__conns_free; guarded by mu */
    int fd;
    conn_list list;               /* guarded by mu */
    double t_phase;               /* guarded by mu: when it entered its list, seconds, monotonic */
    atomic_size_t body_bytes;     /* of the current request: the MHD thread adds, the sweep reads */
    bool reserve;                 /* written at accept, before the connection's first request */
    bool closing;                 /* guarded by mu: shut down by us; waiting for its owner to close it */
    srv_conn_kind kind;           /* written at accept */
    ip_count *ip;                 /* guarded by mu: its address's count; NULL when not counted by address */
};

typedef struct {
    srv_conn *head, *tail;        /* oldest first */
} conn_fifo;

struct srv_conns {
    srv_conn_params p;
    pthread_mutex_t mu;
    conn_fifo waiting, body;      /* guarded by mu: HTTP's */
    conn_fifo idle;               /* guarded by mu: gRPC connections with no call open */
    srv_conn *all;                /* guarded by mu */
    int n;                        /* guarded by mu */
    ip_count *ips[IP_BUCKETS];    /* guarded by mu */
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
    for (srv_conn *c = cs->all, *nx; c; c = nx) nx = c->all_next, free(c);
    for (int b = 0; b < IP_BUCKETS; b++)
        for (ip_count *e = cs->ips[b], *nx; e; e = nx) nx = e->next, free(e);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

static conn_fifo *fifo_of(srv_conns *cs, conn_list l) {
    return l == LIST_WAITING ? &cs->waiting : l == LIST_BODY ? &cs->body : l == LIST_IDLE ? &cs->idle : NULL;
}

/* ---- counts by address ---- */

/* The address of peer as a key (4 bytes for IPv4 and IPv4-mapped IPv6, else 16); 0 when peer is
 * not an IP address (a socketpair's, or unknown). */
static uint8_t key_of(const struct sockaddr *peer, uint8_t key[16]) {
    if (!peer) return 0;
    if (peer->sa_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)peer)->sin_addr, 4);
        return 4;
    }
    if (peer->sa_family == AF_INET6) {
        const uint8_t *a = ((const struct sockaddr_in6 *)peer)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a, mapped, 12)) {
            memcpy(key, a + 12, 4);
            return 4;
        }
        memcpy(key, a, 16);
        return 16;
    }
    return 0;
}

static ip_count **bucket_of(srv_conns *cs, const uint8_t *key, uint8_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (uint8_t i = 0; i < len; i++) h = (h ^ key[i]) * 16777619u;
    return &cs->ips[h & (IP_BUCKETS - 1)];
}

/* Under mu: the count of an address, NULL when it has no connection. */
static ip_count *ip_find(srv_conns *cs, const uint8_t *key, uint8_t len) {
    for (ip_count *e = *bucket_of(cs, key, len); e; e = e->next)
        if (e->len == len && !memcmp(e->addr, key, len)) return e;
    return NULL;
}

/* Under mu: counts one more connection from the address; NULL when out of memory (the connection
 * is then not counted by address). */
static ip_count *ip_add(srv_conns *cs, const uint8_t *key, uint8_t len) {
    ip_count *e = ip_find(cs, key, len);
    if (!e) {
        if (!(e = calloc(1, sizeof *e))) return NULL;
        e->len = len;
        memcpy(e->addr, key, len);
        ip_count **b = bucket_of(cs, key, len);
        e->next = *b;
        *b = e;
    }
    e->n++;
    return e;
}

/* Under mu: one connection fewer from e's address; the entry goes with its last connection. */
static void ip_remove(srv_conns *cs, ip_count *e) {
    if (--e->n > 0) return;
    for (ip_count **p = bucket_of(cs, e->addr, e->len); *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    free(e);
}

/* Under mu. */
static srv_conn_verdict verdict(srv_conns *cs, const uint8_t *key, uint8_t len) {
    if (cs->p.max_per_ip > 0 && len) {
        const ip_count *e = ip_find(cs, key, len);
        if (e && e->n >= cs->p.max_per_ip) return SRV_CONN_OVER_PER_IP;
    }
    if (cs->n >= cs->p.max_connections + cs->p.reserve) return SRV_CONN_FULL;
    return SRV_CONN_OK;
}

/* Under mu. */
static void unlink_conn(srv_conns *cs, srv_conn *c) {
    conn_fifo *f = fifo_of(cs, c->list);
    if (!f) return;
    if (c->prev) c->prev->next = c->next;
    else f->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else f->tail = c->prev;
    c->prev = c->next = NULL;
    c->list = LIST_NONE;
}

/* Under mu: appends c to list l, stamped now (so each list stays in time order). */
static void append_conn(srv_conns *cs, srv_conn *c, conn_list l, double now) {
    conn_fifo *f = fifo_of(cs, l);
    c->list = l;
    c->t_phase = now;
    c->next = NULL;
    c->prev = f->tail;
    if (f->tail) f->tail->next = c;
    else f->head = c;
    f->tail = c;
}

/* Under mu: shuts c down once and takes it out of the lists. */
static void shut(srv_conns *cs, srv_conn *c) {
    unlink_conn(cs, c);
    if (c->closing) return;
    c->closing = true;
    shutdown(c->fd, SHUT_RDWR);
}

/* Under mu: registers c (allocated, fd and kind set) from the address key. */
static void register_conn(srv_conns *cs, srv_conn *c, const uint8_t *key, uint8_t len) {
    cs->n++;
    c->all_next = cs->all;
    if (cs->all) cs->all->all_prev = c;
    cs->all = c;
    if (len) c->ip = ip_add(cs, key, len);
    if (cs->n > cs->p.max_connections) {
        c->reserve = true;
        /* the head of the waiting list has waited longest (c is not in it yet); with no HTTP
         * connection waiting, the gRPC connection idle the longest */
        if (cs->waiting.head) shut(cs, cs->waiting.head);
        else if (cs->idle.head) shut(cs, cs->idle.head);
    }
    append_conn(cs, c, c->kind == SRV_CONN_GRPC ? LIST_IDLE : LIST_WAITING, srv__now());
}

static srv_conn *conn_new(int fd, srv_conn_kind kind) {
    srv_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->kind = kind;
    atomic_init(&c->body_bytes, 0);
    return c;
}

srv_conn *srv__conn_open_from(srv_conns *cs, int fd, const struct sockaddr *peer, srv_conn_kind kind) {
    srv_conn *c = conn_new(fd, kind);
    if (!c) return NULL;
    uint8_t key[16], len = key_of(peer, key);
    pthread_mutex_lock(&cs->mu);
    register_conn(cs, c, key, len);
    pthread_mutex_unlock(&cs->mu);
    return c;
}

srv_conn *srv__conn_open(srv_conns *cs, int fd) { return srv__conn_open_from(cs, fd, NULL, SRV_CONN_HTTP); }

srv_conn_verdict srv__conns_check(srv_conns *cs, const struct sockaddr *peer) {
    uint8_t key[16], len = key_of(peer, key);
    pthread_mutex_lock(&cs->mu);
    srv_conn_verdict v = verdict(cs, key, len);
    pthread_mutex_unlock(&cs->mu);
    return v;
}

srv_conn *srv__conn_accept(srv_conns *cs, int fd, const struct sockaddr *peer, srv_conn_kind kind, srv_conn_verdict *why) {
    *why = SRV_CONN_OK;
    srv_conn *c = conn_new(fd, kind);
    if (!c) return NULL;
    uint8_t key[16], len = key_of(peer, key);
    pthread_mutex_lock(&cs->mu);
    if ((*why = verdict(cs, key, len)) == SRV_CONN_OK) register_conn(cs, c, key, len);
    pthread_mutex_unlock(&cs->mu);
    if (*why == SRV_CONN_OK) return c;
    free(c);
    return NULL;
}

void srv__conn_close(srv_conns *cs, srv_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&cs->mu);
    unlink_conn(cs, c);
    if (c->ip) ip_remove(cs, c->ip);
    cs->n--;
    if (c->all_prev) c->all_prev->all_next = c->all_next;
    else cs->all = c->all_next;
    if (c->all_next) c->all_next->all_prev = c->all_prev;
    pthread_mutex_unlock(&cs->mu);
    free(c);
}

void srv__conn_phase(srv_conns *cs, srv_conn *c, srv_conn_phase ph) {
    if (!c) return;
    if (ph == SRV_CONN_BODY) atomic_store_explicit(&c->body_bytes, 0, memory_order_relaxed);
    conn_list l = ph == SRV_CONN_BUSY        ? LIST_NONE
                  : c->kind == SRV_CONN_GRPC ? LIST_IDLE
                  : ph == SRV_CONN_WAITING   ? LIST_WAITING
                                             : LIST_BODY;
    pthread_mutex_lock(&cs->mu);
    unlink_conn(cs, c);
    if (!c->closing && l != LIST_NONE) append_conn(cs, c, l, srv__now());
    pthread_mutex_unlock(&cs->mu);
}

void srv__conn_body(srv_conn *c, size_t n) {
    if (c) atomic_fetch_add_explicit(&c->body_bytes, n, memory_order_relaxed);
}

bool srv__conn_reserve(const srv_conn *c) { return c && c->reserve; }

int srv__conns_count(srv_conns *cs) {
    pthread_mutex_lock(&cs->mu);
    int n = cs->n;
    pthread_mutex_unlock(&cs->mu);
    return n;
}

int srv__conns_count_from(srv_conns *cs, const struct sockaddr *peer) {
    uint8_t key[16], len = key_of(peer, key);
    if (!len) return 0;
    pthread_mutex_lock(&cs->mu);
    const ip_count *e = ip_find(cs, key, len);
    int n = e ? e->n : 0;
    pthread_mutex_unlock(&cs->mu);
    return n;
}

/* ---- libmicrohttpd's side ---- */

void srv__conns_notify(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    srv_conns *cs = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        /* untracked when unknown: libmicrohttpd's own timeout still applies */
        *socket_context = fi ? srv__conn_open_from(cs, fi->connect_fd, ai ? ai->client_addr : NULL, SRV_CONN_HTTP) : NULL;
        return;
    }
    srv_conn *c = *socket_context;
    *socket_context = NULL;
    srv__conn_close(cs, c);
}

enum MHD_Result srv__conns_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    (void)addrlen;
    return srv__conns_check(cls, addr) == SRV_CONN_OK ? MHD_YES : MHD_NO;
}

static srv_conn *of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void srv__conns_phase(srv_conns *cs, struct MHD_Connection *mc, srv_conn_phase ph) { srv__conn_phase(cs, of(mc), ph); }

void srv__conns_body(srv_conns *cs, struct MHD_Connection *mc, size_t n) {
    (void)cs;
    srv__conn_body(of(mc), n);
}

bool srv__conns_reserve(srv_conns *cs, struct MHD_Connection *mc) {
    (void)cs;
    return srv__conn_reserve(of(mc)); /* written once, before the connection's first request */
}

/* ---- the sweep ---- */

int srv__conns_sweep(srv_conns *cs) {
    double now = srv__now(), hdr = cs->p.header_timeout_s;
    int closed = 0;
    pthread_mutex_lock(&cs->mu);
    /* waiting for headers: oldest first, so stop at the first one within its deadline */
    while (cs->waiting.head && now - cs->waiting.head->t_phase > hdr) shut(cs, cs->waiting.head), closed++;
    /* bodies older than the deadline must have averaged min_body_rate since their headers */
    for (srv_conn *c = cs->body.head, *nx; cs->p.min_body_rate && c && now - c->t_phase > hdr; c = nx) {
        nx = c->next;
        double age = now - c->t_phase;
        if ((double)atomic_load_explicit(&c->body_bytes, memory_order_relaxed) < (double)cs->p.min_body_rate * age)
            shut(cs, c), closed++;
    }
    pthread_mutex_unlock(&cs->mu);
    return closed;
}
