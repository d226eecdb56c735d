/* h2_client.h - a gRPC client for the server's gRPC tests (test_grpc.c): nghttp2's client session on
 * a plain socket, many calls at once on one connection, and what came back on each stream (status,
 * grpc-status and grpc-message, how it closed). DATA can also be written straight to the socket,
 * past HTTP/2's flow control, to test what the server does with a client that ignores its windows.
 * One thread; every wait is bounded. */
#ifndef ADAPTERD_TESTS_H2_CLIENT_H
#define ADAPTERD_TESTS_H2_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { H2C_STREAMS_MAX = 256 };

/* One call (stream), as far as it went. */
typedef struct {
    int32_t id;
    int http_status;            /* :status; 0 before any */
    int grpc_status;            /* grpc-status, of the headers or the trailers; -1 before any */
    char grpc_message[512];     /* grpc-message as sent (percent-encoded) */
    bool closed;
    bool reset;                 /* closed by a RST_STREAM (from either side) */
    uint32_t close_code;        /* NO_ERROR, or the reset's error code */
    size_t data_len;            /* bytes of answer DATA */
    const uint8_t *body;        /* the request body nghttp2 is sending (borrowed), body_off of body_len sent */
    size_t body_len, body_off;
    bool end;                   /* END_STREAM after the body */
} h2c_stream;

typedef struct h2c h2c;

/* Connects to 127.0.0.1:port from source address from (NULL: any; the loopback's 127.0.0.2 is
 * another client address), retrying for up to 2 s while nothing listens, and queues the preface and
 * SETTINGS. NULL when it cannot connect. */
h2c *h2c_connect(int port, const char *from);
/* A TCP port on 127.0.0.1 that was free a moment ago (for a server's --grpc-port). */
int h2c_free_port(void);
/* Closes the socket and frees c. NULL does nothing. */
void h2c_free(h2c *c);

/* The "authorization" metadata the calls started from now on send (NULL or "": none). */
void h2c_set_auth(h2c *c, const char *value);
/* Starts a call of method (the name after /inference.GRPCInferenceService/). body: the request's
 * bytes (the gRPC prefix included; borrowed until the stream closes), END_STREAM after them when
 * end; NULL: HEADERS only (END_STREAM when end). Returns the stream's index, or -1. */
int h2c_call(h2c *c, const char *method, const uint8_t *body, size_t len, bool end);
/* DATA frames carrying n bytes on the stream of index i, written straight to the socket whatever
 * the windows, END_STREAM on the last when end. Returns 0, or -1 when the socket refused them. */
int h2c_raw_data(h2c *c, int i, const uint8_t *p, size_t n, bool end);
/* Exchanges frames until pred(c, ud) holds (pred NULL: until every stream closed), the connection
 * ends, or ms pass. Returns whether pred held. */
bool h2c_run(h2c *c, int ms, bool (*pred)(h2c *c, void *ud), void *ud);

h2c_stream *h2c_stream_at(h2c *c, int i);
bool h2c_all_closed(h2c *c, void *unused);
/* Whether the server sent GOAWAY; *code its error code, *debug its debug data (NUL-terminated). */
bool h2c_goaway(const h2c *c, uint32_t *code, const char **debug);
/* Whether the server closed the connection (or it failed). */
bool h2c_eof(const h2c *c);
/* Bytes of request bodies handed to the socket, by nghttp2 or raw. */
size_t h2c_sent(const h2c *c);

/* A gRPC message: the 5-byte prefix for n bytes, then msg (NULL: n bytes of 'x'). malloc'd (the
 * caller frees), *out_len its size; NULL when out of memory. */
uint8_t *h2c_grpc_message(const uint8_t *msg, size_t n, size_t *out_len);
/* A ModelInferRequest for model with one BYTES input "text" holding text (at most 4096 bytes),
 * padded with an unknown field (which decoders skip) to min_len bytes or up to 16 fewer. malloc'd,
 * *len its size; NULL when out of memory. */
uint8_t *h2c_infer_request(const char *model, const char *text, size_t min_len, size_t *len);

#endif
