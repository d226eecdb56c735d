/* grpc_impl.h - the gRPC port's connection and server records, shared by grpc.c (HTTP/2 on the
 * loop) and grpc_tls.c (GnuTLS under it, --tls-cert). Private to server/. */
#ifndef SRV_GRPC_IMPL_H
#define SRV_GRPC_IMPL_H

#include <gnutls/gnutls.h>
#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "grpc.h"
#include "tls.h"

struct srv_grpc_conn {
    uv_tcp_t tcp;
    srv_grpc *g;
    nghttp2_session *h2;
    srv_grpc_conn *prev, *next;
    srv_conn *sc;                /* conn.c's record, the limits HTTP and gRPC share; NULL: not counted */
    int n_streams;
    size_t writing;              /* bytes in uv_write requests not completed */
    size_t buffered;             /* bytes of request messages its calls hold (each its want), <= grpc_buffer_bytes */
    bool closing, drain_counted;
    bool in_recv;                /* inside nghttp2_session_mem_recv: its callbacks may not send or close */
    bool idle;                   /* conn.c was told it has no call open and nothing to write */
    bool reserve;                /* accepted beyond --max-connections: ServerLive and ServerReady only */
    bool answered_any;           /* a call was answered (a refused or reserve connection then says GOAWAY) */
    bool goaway;                 /* GOAWAY submitted: closes once its calls are done */
    char refuse[200];            /* refused: every call answers UNAVAILABLE with this; "" when not refused */
    double last_read;            /* srv__now() of the last bytes read */
    double t_open;
    void (*out)(void *ud, const uint8_t *p, size_t n); /* a memory connection's output; NULL: the socket */
    void *out_ud;
    /* --tls-cert: the connection's TLS session (NULL: h2c), driven from the loop. GnuTLS reads the
     * ciphertext of the read being handled (tin, tin_len: its pull function) and writes records into
     * tout (its push function), which goes to the socket as one uv_write after each GnuTLS call. */
    gnutls_session_t tls;
    srv_tls_creds *creds;      /* the credentials its handshake used, referenced for its life */
    bool tls_up;               /* handshake done and h2 negotiated: nghttp2 speaks */
    bool tls_failed;           /* handshake refused: closes once its alert is written */
    const uint8_t *tin;
    size_t tin_len;
    struct write_req *tout;
    size_t tout_cap;
};

struct srv_grpc {
    srv_server *s;
    uv_tcp_t listener;
    bool listening, draining;
    srv_grpc_conn *conns;
    int n_conns;
    int n_refusing;              /* connections with refuse set */
    srv_grpc_call *calls;
    srv_grpc_hooks hooks;
    uv_timer_t sweep;
};

typedef struct write_req {
    uv_write_t req;
    srv_grpc_conn *c;
    size_t len;
    char data[];
} write_req;

/* --tls-cert: the connection's session on the current credentials, GnuTLS reading tin and writing
 * tout (grpc_tls.c); -1 when no session could be made. srv__grpc_tls_end frees what begin made. */
int srv__grpc_tls_begin(srv_grpc_conn *c);
void srv__grpc_tls_end(srv_grpc_conn *c);

#endif
