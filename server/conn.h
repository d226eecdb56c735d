/* conn.h - the server's view of its connections, for the limits libmicrohttpd's options cannot
 * express (see conn.c): a deadline for a request's headers, a minimum rate for its body, a reserve
 * of connections beyond --max-connections that only health and readiness may use, and the count of
 * connections per client address. HTTP's connections (libmicrohttpd's) and gRPC's (grpc.c's, on the
 * loop) are counted here together, so --max-connections, --max-connections-per-ip and the reserve
 * are one set of limits for both protocols. */
#ifndef ADAPTERD_SERVER_CONN_H
#define ADAPTERD_SERVER_CONN_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

typedef struct {
    int max_connections;     /* connections for any route */
    int reserve;             /* further connections, health and readiness only */
    int max_per_ip;          /* connections from one client address (both protocols); 0: no cap */
    double header_timeout_s; /* from accept (or the previous answer) to the end of the headers */
    size_t min_body_rate;    /* bytes/s a body must average once header_timeout_s has passed; 0: none */
} srv_conn_params;

/* Whose connection it is. An HTTP connection waits for headers under the header deadline and the
 * body rate; a gRPC connection keeps its calls' deadlines itself (grpc.c) and, while it has no call
 * open, may be closed to make room as an HTTP one waiting for headers is. */
typedef enum { SRV_CONN_HTTP, SRV_CONN_GRPC } srv_conn_kind;

/* Whether a connection may be accepted now. */
typedef enum {
    SRV_CONN_OK,
    SRV_CONN_OVER_PER_IP,    /* its address holds max_per_ip connections already */
    SRV_CONN_FULL,           /* max_connections + reserve connections are open */
} srv_conn_verdict;

typedef struct srv_conns srv_conns;
typedef struct srv_conn srv_conn;

/* NULL when out of memory. */
srv_conns *srv__conns_new(const srv_conn_params *p);
/* After the daemon stopped (no callback can run). */
void srv__conns_free(srv_conns *cs);

/* MHD_OPTION_NOTIFY_CONNECTION (cls: the srv_conns): registers and forgets connections; a
 * connection beyond max_connections is marked reserve and the connection that has waited longest
 * for its headers is closed, so idle connections give way to new ones. */
void srv__conns_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code);
/* libmicrohttpd's accept policy (cls: the srv_conns): MHD_NO, and the connection is closed before
 * libmicrohttpd reads from it, when srv__conns_check refuses its address. */
enum MHD_Result srv__conns_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* A request's phases, from the MHD thread that owns the connection. */
typedef enum {
    SRV_CONN_WAITING,   /* for a request's headers (just accepted, or kept alive after an answer) */
    SRV_CONN_BODY,      /* headers read, body arriving */
    SRV_CONN_BUSY,      /* the request is complete: being answered, maybe suspended */
} srv_conn_phase;
void srv__conns_phase(srv_conns *cs, struct MHD_Connection *c, srv_conn_phase ph);
/* Counts n body bytes of c's request: one atomic add, no lock. */
void srv__conns_body(srv_conns *cs, struct MHD_Connection *c, size_t n);
/* True when c was accepted into the reserve (health and readiness only). */
bool srv__conns_reserve(srv_conns *cs, struct MHD_Connection *c);

/* Any thread (the loop's timer): closes the connections past their header deadline or below the
 * body rate; returns how many. Walks only the connections older than the header deadline. */
int srv__conns_sweep(srv_conns *cs);

/* The same on a connection known by its socket, without libmicrohttpd (what the MHD entry points
 * above call, and grpc.c; the unit tests drive these with socketpairs). srv__conn_open returns the
 * new connection, in phase WAITING, or NULL when out of memory; srv__conn_close forgets and frees it
 * (before its socket is closed: conn.c may shut a registered socket down from any thread). */
srv_conn *srv__conn_open(srv_conns *cs, int fd);
/* srv__conn_open for a connection of kind from peer (NULL, or not an IP address: not counted per
 * address): registered whatever the limits (libmicrohttpd accepted it already, after
 * srv__conns_check). A gRPC connection starts with no call open (phase WAITING). */
srv_conn *srv__conn_open_from(srv_conns *cs, int fd, const struct sockaddr *peer, srv_conn_kind kind);
/* Would a connection from peer be accepted now? Between this check and srv__conn_open_from on
 * another thread, others may register: libmicrohttpd's threads may overshoot a cap by one
 * connection each. */
srv_conn_verdict srv__conns_check(srv_conns *cs, const struct sockaddr *peer);
/* Check and registration under one lock (gRPC's accept): the new connection, or NULL with *why set
 * (out of memory: SRV_CONN_OK). */
srv_conn *srv__conn_accept(srv_conns *cs, int fd, const struct sockaddr *peer, srv_conn_kind kind, srv_conn_verdict *why);
void srv__conn_close(srv_conns *cs, srv_conn *c);
/* For a gRPC connection: WAITING while it has no call open, BUSY while it has one. */
void srv__conn_phase(srv_conns *cs, srv_conn *c, srv_conn_phase ph);
void srv__conn_body(srv_conn *c, size_t n);
bool srv__conn_reserve(const srv_conn *c);
/* Connections open now (reserve included). */
int srv__conns_count(srv_conns *cs);
/* Connections open now from peer's address (0 for a peer that is not an IP address). */
int srv__conns_count_from(srv_conns *cs, const struct sockaddr *peer);

#endif
