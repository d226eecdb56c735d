/* grpc_tls.c - the gRPC port's TLS transport (--tls-cert): GnuTLS over a connection's bytes, driven
 * from the loop by grpc.c. GnuTLS pulls the ciphertext of the read being handled (tin) and pushes its
 * records into tout, which grpc.c writes to the socket after each GnuTLS call. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_impl.h"
#include "internal.h"

/* GnuTLS's pull: what is left of the read being handled; none, EAGAIN (it keeps a partial record). */
static ssize_t tls_pull(gnutls_transport_ptr_t p, void *buf, size_t n) {
    srv_grpc_conn *c = p;
    if (!c->tin_len) {
        gnutls_transport_set_errno(c->tls, EAGAIN);
        return -1;
    }
    if (n > c->tin_len) n = c->tin_len;
    memcpy(buf, c->tin, n);
    c->tin += n, c->tin_len -= n;
    return (ssize_t)n;
}

/* Its readiness check (GnuTLS asks it only with a timeout set): data when the read has bytes left. */
static int tls_pull_timeout(gnutls_transport_ptr_t p, unsigned ms) {
    (void)ms;
    return ((srv_grpc_conn *)p)->tin_len ? 1 : 0;
}

/* GnuTLS's push: records gathered in tout, written by tls_write after the GnuTLS call. */
static ssize_t tls_push(gnutls_transport_ptr_t p, const void *buf, size_t n) {
    srv_grpc_conn *c = p;
    size_t have = c->tout ? c->tout->len : 0;
    if (have + n > c->tout_cap) {
        size_t nc = c->tout_cap ? c->tout_cap : 4096;
        while (nc < have + n) nc *= 2;
        write_req *w = realloc(c->tout, sizeof *w + nc);
        if (!w) {
            gnutls_transport_set_errno(c->tls, ENOMEM);
            return -1;
        }
        if (!c->tout) w->len = 0;
        c->tout = w, c->tout_cap = nc;
    }
    memcpy(c->tout->data + c->tout->len, buf, n);
    c->tout->len += n;
    return (ssize_t)n;
}

void srv__grpc_tls_end(srv_grpc_conn *c) {
    if (c->tls) gnutls_deinit(c->tls);
    c->tls = NULL;
    srv__tls_release(c->creds);
    c->creds = NULL;
    free(c->tout);
    c->tout = NULL, c->tout_cap = 0;
}

/* The connection's session: the current credentials, ALPN h2 only, the client CA's rule (tls.c). */
int srv__grpc_tls_begin(srv_grpc_conn *c) {
    if (srv__tls_session(c->g->s->tls, &c->tls, &c->creds)) return -1;
    gnutls_transport_set_ptr(c->tls, c);
    gnutls_transport_set_pull_function(c->tls, tls_pull);
    gnutls_transport_set_pull_timeout_function(c->tls, tls_pull_timeout);
    gnutls_transport_set_push_function(c->tls, tls_push);
    gnutls_handshake_set_timeout(c->tls, 0); /* the sweep bounds a handshake (--header-timeout-ms) */
    return 0;
}
