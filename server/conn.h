/* conn.h - the server's view of its connections, for the limits libmicrohttpd's options cannot
 * express (see conn.c): a deadline for a request's headers, a minimum rate for its body, and a
 * reserve of connections beyond --max-connections that only health and readiness may use. */
#ifndef ADAPTERD_SERVER_CONN_H
#define ADAPTERD_SERVER_CONN_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int max_connections;     /* connections for any route */
    int reserve;             /* further connections, health and readiness only */
    double header_timeout_s; /* from accept (or the previous answer) to the end of the headers */
    size_t min_body_rate;    /* bytes/s a body must average once header_timeout_s has passed; 0: none */
} srv_conn_params;

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
 * above call; the unit tests drive these with socketpairs). srv__conn_open returns the new
 * connection, in phase WAITING, or NULL when out of memory; srv__conn_close forgets and frees it
 * (before its socket is closed). */
srv_conn *srv__conn_open(srv_conns *cs, int fd);
void srv__conn_close(srv_conns *cs, srv_conn *c);
void srv__conn_phase(srv_conns *cs, srv_conn *c, srv_conn_phase ph);
void srv__conn_body(srv_conn *c, size_t n);
bool srv__conn_reserve(const srv_conn *c);
/* Connections open now (reserve included). */
int srv__conns_count(srv_conns *cs);

#endif
