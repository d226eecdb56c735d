/* tls.h - the server's certificate and key (--tls-cert, --tls-key, --tls-client-ca) for both ports:
 * loaded at start, re-read from the loop when the files change, handed to libmicrohttpd's handshakes
 * (a certificate callback) and to gRPC's GnuTLS sessions (grpc.c). */
#ifndef ADAPTERD_SERVER_TLS_H
#define ADAPTERD_SERVER_TLS_H

#include <gnutls/gnutls.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "engine/status.h"
#include "server/server.h"

typedef struct srv_tls srv_tls;
/* One loaded certificate chain and its key; refcounted (a gRPC session holds one for its life). */
typedef struct srv_tls_creds srv_tls_creds;

/* srv_tls_check (server.h) is the start-up check of the same files. */

/* Reads cfg's --tls-cert/--tls-key (and --tls-client-ca) and starts watching them on loop (once a
 * second). Returns 0 with *out set, or a negative status with err naming the file and what is wrong
 * with it (unreadable, not PEM, key not matching the certificate); *out is then NULL. */
int srv__tls_start(const srv_config *cfg, uv_loop_t *loop, srv_tls **out, eng_err *err);
/* After the loop closed its handles (the watch timer): frees everything. NULL does nothing. */
void srv__tls_free(srv_tls *t);
/* Stops the watch timer (the drain); NULL does nothing. Loop thread. */
void srv__tls_stop(srv_tls *t);

/* libmicrohttpd's options for HTTPS (MHD_USE_TLS is the caller's): the certificate callback and, with
 * --tls-client-ca, the trusted CA. Fills items (room for 4) ending with MHD_OPTION_END. Any thread. */
struct MHD_OptionItem;
void srv__tls_mhd_options(srv_tls *t, struct MHD_OptionItem *items);

/* A new server session for a gRPC connection: the current credentials (a reference taken, returned
 * in *creds for srv__tls_release at the connection's end), ALPN offering only h2, and the client's
 * certificate required and verified with --tls-client-ca. Returns 0 or -1 (out of memory). Loop thread. */
int srv__tls_session(srv_tls *t, gnutls_session_t *session, srv_tls_creds **creds);
/* Drops a reference taken by srv__tls_session; NULL does nothing. */
void srv__tls_release(srv_tls_creds *c);

/* For /metrics: reloads that took, reloads refused (the last good pair kept), the loaded
 * certificate's notAfter (Unix seconds), and the handshakes begun on the HTTP [0] and gRPC [1]
 * ports. Any thread. */
void srv__tls_stats(srv_tls *t, uint64_t *reloads, uint64_t *errors, double *not_after, uint64_t handshakes[2]);

#endif
