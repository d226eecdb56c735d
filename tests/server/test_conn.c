/* test_conn.c - server/conn.c without libmicrohttpd: connections are socketpairs, so "closed by the
 * server" is visible as the end of the stream on the peer. Each case is one limit conn.h promises:
 * the oldest connection waiting for headers gives way to an arrival beyond max_connections (and
 * only a waiting one does), the header deadline, the minimum body rate, a kept-alive connection's
 * fresh deadline, the cap per address and the absolute cap (max_connections + reserve) over both
 * protocols, gRPC's idle connections giving way after HTTP's waiting ones, and the bookkeeping under
 * many threads at once. Deadlines are tens of ms and the
 * waits are several times longer, so a loaded machine makes the tests slower, not flaky. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"

typedef struct {
    int server, client; /* server: the connection's socket (conn.c shuts it down); client: the peer */
    srv_conn *c;
} pair;

static void open_pair(srv_conns *cs, pair *p) {
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    p->server = sv[0], p->client = sv[1];
    cr_assert(p->c = srv__conn_open(cs, p->server));
}

static void close_pair(srv_conns *cs, pair *p) {
    srv__conn_close(cs, p->c);
    close(p->server), close(p->client);
}

/* Did the server shut this connection down? The peer then reads the end of the stream at once. */
static bool was_shut(const pair *p) {
    char b;
    ssize_t n = recv(p->client, &b, 1, MSG_DONTWAIT);
    return n == 0;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static srv_conn_params params(int max, double hdr_s, size_t rate) {
    return (srv_conn_params){.max_connections = max, .reserve = 4, .header_timeout_s = hdr_s, .min_body_rate = rate};
}

Test(conn, an_arrival_beyond_the_limit_closes_the_longest_waiting) {
    srv_conn_params p = params(2, 60, 0);
    srv_conns *cs = srv__conns_new(&p);
    pair a, b, c, d;
    open_pair(cs, &a);
    sleep_ms(2);
    open_pair(cs, &b);
    cr_expect(!srv__conn_reserve(a.c) && !srv__conn_reserve(b.c), "within the limit");
    open_pair(cs, &c);
    cr_expect(srv__conn_reserve(c.c), "the third of max 2 is in the reserve");
    cr_expect(was_shut(&a), "a waited longest for its headers: closed");
    cr_expect(!was_shut(&b) && !was_shut(&c), "the others stay");
    /* b is busy (answering): not idle, so not the one to go; c waits and goes */
    srv__conn_phase(cs, b.c, SRV_CONN_BUSY);
    open_pair(cs, &d);
    cr_expect(srv__conn_reserve(d.c));
    cr_expect(!was_shut(&b), "a busy connection is never closed to make room");
    cr_expect(was_shut(&c), "the longest waiting after a is c");
    cr_expect_eq(srv__conns_count(cs), 4, "closing is libmicrohttpd's: they are counted until it says so");
    close_pair(cs, &a), close_pair(cs, &c);
    cr_expect_eq(srv__conns_count(cs), 2);
    close_pair(cs, &b), close_pair(cs, &d);
    cr_expect_eq(srv__conns_count(cs), 0);
    srv__conns_free(cs);
}

Test(conn, headers_past_their_deadline_are_closed_by_the_sweep) {
    srv_conn_params p = params(100, 0.05, 0);
    srv_conns *cs = srv__conns_new(&p);
    pair idle, busy, body, fresh;
    open_pair(cs, &idle), open_pair(cs, &busy), open_pair(cs, &body);
    srv__conn_phase(cs, busy.c, SRV_CONN_BODY);
    srv__conn_phase(cs, busy.c, SRV_CONN_BUSY);
    srv__conn_phase(cs, body.c, SRV_CONN_BODY);
    cr_expect_eq(srv__conns_sweep(cs), 0, "nobody is late yet");
    sleep_ms(150);
    open_pair(cs, &fresh);
    cr_expect_eq(srv__conns_sweep(cs), 1, "only the idle connection is past its header deadline");
    cr_expect(was_shut(&idle));
    cr_expect(!was_shut(&busy) && !was_shut(&body) && !was_shut(&fresh), "no body rate asked, a busy one, a new one");
    cr_expect_eq(srv__conns_sweep(cs), 0, "a connection is shut down once");
    close_pair(cs, &idle), close_pair(cs, &busy), close_pair(cs, &body), close_pair(cs, &fresh);
    srv__conns_free(cs);
}

Test(conn, a_kept_alive_connection_gets_a_fresh_deadline) {
    srv_conn_params p = params(100, 0.08, 0);
    srv_conns *cs = srv__conns_new(&p);
    pair a;
    open_pair(cs, &a);
    sleep_ms(50);
    srv__conn_phase(cs, a.c, SRV_CONN_BODY);
    srv__conn_phase(cs, a.c, SRV_CONN_BUSY);
    srv__conn_phase(cs, a.c, SRV_CONN_WAITING); /* answered; the next request's headers are due */
    sleep_ms(50);                               /* 100 ms since accept, 50 since the answer */
    cr_expect_eq(srv__conns_sweep(cs), 0, "the deadline runs from the answer, not from accept");
    sleep_ms(80);
    cr_expect_eq(srv__conns_sweep(cs), 1);
    cr_expect(was_shut(&a));
    close_pair(cs, &a);
    srv__conns_free(cs);
}

Test(conn, bodies_below_the_rate_are_closed_once_the_deadline_passed) {
    srv_conn_params p = params(100, 0.05, 10000); /* 10 kB/s */
    srv_conns *cs = srv__conns_new(&p);
    pair slow, fast;
    open_pair(cs, &slow), open_pair(cs, &fast);
    srv__conn_phase(cs, slow.c, SRV_CONN_BODY);
    srv__conn_phase(cs, fast.c, SRV_CONN_BODY);
    srv__conn_body(slow.c, 10);
    srv__conn_body(fast.c, 1 << 20); /* 1 MiB: keeps up for 100 s */
    cr_expect_eq(srv__conns_sweep(cs), 0, "within the header deadline no rate is asked");
    sleep_ms(120);
    cr_expect_eq(srv__conns_sweep(cs), 1);
    cr_expect(was_shut(&slow), "10 bytes in over 120 ms is below 10 kB/s");
    cr_expect(!was_shut(&fast));
    /* a new request on the fast connection starts its count again */
    srv__conn_phase(cs, fast.c, SRV_CONN_BUSY);
    srv__conn_phase(cs, fast.c, SRV_CONN_WAITING);
    srv__conn_phase(cs, fast.c, SRV_CONN_BODY);
    sleep_ms(120);
    cr_expect_eq(srv__conns_sweep(cs), 1, "the bytes of its last request do not count for this one");
    cr_expect(was_shut(&fast));
    close_pair(cs, &slow), close_pair(cs, &fast);
    srv__conns_free(cs);
}

static struct sockaddr_in ip4(const char *a) {
    struct sockaddr_in s = {.sin_family = AF_INET};
    inet_pton(AF_INET, a, &s.sin_addr);
    return s;
}

/* Opens a socketpair connection of kind from address a through the gRPC path (check and register at
 * once); returns the verdict, p->c NULL when refused. */
static srv_conn_verdict accept_pair(srv_conns *cs, pair *p, const struct sockaddr *a, srv_conn_kind kind) {
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    p->server = sv[0], p->client = sv[1];
    srv_conn_verdict why = SRV_CONN_OK;
    p->c = srv__conn_accept(cs, p->server, a, kind, &why);
    cr_assert(p->c || why != SRV_CONN_OK, "out of memory");
    return why;
}

Test(conn, the_cap_per_address_counts_both_kinds) {
    srv_conn_params p = params(100, 60, 0);
    p.max_per_ip = 2;
    srv_conns *cs = srv__conns_new(&p);
    struct sockaddr_in a = ip4("10.0.0.1"), b = ip4("10.0.0.2");
    struct sockaddr_in6 mapped = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::ffff:10.0.0.1", &mapped.sin6_addr);
    pair h, g, x, y;
    open_pair(cs, &h);
    srv__conn_close(cs, h.c); /* a socketpair's connection has no address: never counted by one */
    h.c = srv__conn_open_from(cs, h.server, (struct sockaddr *)&a, SRV_CONN_HTTP);
    cr_expect_eq(accept_pair(cs, &g, (struct sockaddr *)&a, SRV_CONN_GRPC), SRV_CONN_OK, "HTTP then gRPC: 2 of 2");
    cr_expect_eq(srv__conns_count_from(cs, (struct sockaddr *)&a), 2);
    cr_expect_eq(srv__conns_check(cs, (struct sockaddr *)&a), SRV_CONN_OVER_PER_IP, "a third from the address");
    cr_expect_eq(srv__conns_check(cs, (struct sockaddr *)&mapped), SRV_CONN_OVER_PER_IP, "the same address as IPv4-mapped IPv6");
    cr_expect_eq(accept_pair(cs, &x, (struct sockaddr *)&a, SRV_CONN_GRPC), SRV_CONN_OVER_PER_IP);
    cr_expect_null(x.c);
    close(x.server), close(x.client);
    cr_expect_eq(accept_pair(cs, &y, (struct sockaddr *)&b, SRV_CONN_GRPC), SRV_CONN_OK, "another address");
    close_pair(cs, &h);
    cr_expect_eq(srv__conns_check(cs, (struct sockaddr *)&a), SRV_CONN_OK, "one closed: room again");
    cr_expect_eq(srv__conns_count_from(cs, (struct sockaddr *)&a), 1);
    close_pair(cs, &g), close_pair(cs, &y);
    cr_expect_eq(srv__conns_count_from(cs, (struct sockaddr *)&a), 0);
    cr_expect_eq(srv__conns_count(cs), 0);
    srv__conns_free(cs);
}

Test(conn, beyond_the_reserve_nothing_is_accepted) {
    srv_conn_params p = params(2, 60, 0);
    p.reserve = 1;
    srv_conns *cs = srv__conns_new(&p);
    struct sockaddr_in a = ip4("10.0.0.1");
    pair c[4];
    for (int i = 0; i < 3; i++) cr_expect_eq(accept_pair(cs, &c[i], (struct sockaddr *)&a, i % 2 ? SRV_CONN_HTTP : SRV_CONN_GRPC), SRV_CONN_OK);
    cr_expect(srv__conn_reserve(c[2].c), "the third of max 2 is in the reserve");
    cr_expect_eq(srv__conns_check(cs, (struct sockaddr *)&a), SRV_CONN_FULL);
    cr_expect_eq(accept_pair(cs, &c[3], (struct sockaddr *)&a, SRV_CONN_GRPC), SRV_CONN_FULL);
    close(c[3].server), close(c[3].client);
    for (int i = 0; i < 3; i++) close_pair(cs, &c[i]);
    srv__conns_free(cs);
}

/* gRPC connections are in neither deadline list: the sweep leaves them; while one has no call open
 * it gives way to an arrival beyond the limit, after any HTTP connection waiting for headers. */
Test(conn, idle_grpc_connections_give_way_after_waiting_http_ones) {
    srv_conn_params p = params(3, 0.02, 0);
    srv_conns *cs = srv__conns_new(&p);
    pair busy, idle, http, n1, n2;
    cr_assert_eq(accept_pair(cs, &busy, NULL, SRV_CONN_GRPC), SRV_CONN_OK);
    srv__conn_phase(cs, busy.c, SRV_CONN_BUSY); /* a call open */
    cr_assert_eq(accept_pair(cs, &idle, NULL, SRV_CONN_GRPC), SRV_CONN_OK);
    sleep_ms(60);
    cr_expect_eq(srv__conns_sweep(cs), 0, "no header deadline for gRPC connections");
    open_pair(cs, &http);
    open_pair(cs, &n1);
    cr_expect(was_shut(&http) && !was_shut(&idle), "the HTTP connection waiting for headers goes first");
    cr_assert_eq(accept_pair(cs, &n2, NULL, SRV_CONN_GRPC), SRV_CONN_OK);
    cr_expect(was_shut(&n1), "then the next HTTP one waiting");
    pair n3;
    srv__conn_phase(cs, n2.c, SRV_CONN_BUSY);
    cr_assert_eq(accept_pair(cs, &n3, NULL, SRV_CONN_GRPC), SRV_CONN_OK);
    cr_expect(was_shut(&idle), "with none waiting, the idle gRPC connection");
    cr_expect(!was_shut(&busy) && !was_shut(&n2), "a gRPC connection with a call open never gives way");
    pair *all[] = {&busy, &idle, &http, &n1, &n2, &n3};
    for (int i = 0; i < 6; i++) close_pair(cs, all[i]);
    cr_expect_eq(srv__conns_count(cs), 0);
    srv__conns_free(cs);
}

Test(conn, free_releases_connections_still_open) {
    srv_conn_params p = params(1, 60, 0);
    srv_conns *cs = srv__conns_new(&p);
    pair a, b;
    open_pair(cs, &a), open_pair(cs, &b);
    srv__conns_free(cs); /* the daemon stopped without telling (ASan: nothing leaks) */
    close(a.server), close(a.client), close(b.server), close(b.client);
}

/* Many threads at once, as libmicrohttpd's are: each opens, walks its connections through their
 * phases with body chunks, and closes, while this thread sweeps. The count ends at 0 and no
 * connection of a finished thread is left behind (ASan); the ThreadSanitizer build of the server
 * runs the same code under the integration tests. */
enum { HAMMER_THREADS = 4, HAMMER_ROUNDS = 2000 };

typedef struct {
    srv_conns *cs;
} hammer_arg;

static void *hammer(void *arg) {
    srv_conns *cs = ((hammer_arg *)arg)->cs;
    for (int i = 0; i < HAMMER_ROUNDS; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return (void *)1;
        srv_conn *c = srv__conn_open(cs, sv[0]);
        if (!c) return (void *)1;
        srv__conn_phase(cs, c, SRV_CONN_BODY);
        for (int k = 0; k < 8; k++) srv__conn_body(c, 512);
        srv__conn_phase(cs, c, SRV_CONN_BUSY);
        srv__conn_phase(cs, c, SRV_CONN_WAITING);
        srv__conn_close(cs, c);
        close(sv[0]), close(sv[1]);
    }
    return NULL;
}

Test(conn, many_threads_keep_the_count) {
    srv_conn_params p = params(8, 0.0001, 1 << 30); /* tiny limits: the sweep and the reserve both act */
    srv_conns *cs = srv__conns_new(&p);
    pthread_t th[HAMMER_THREADS];
    hammer_arg a = {cs};
    for (int i = 0; i < HAMMER_THREADS; i++) cr_assert_eq(pthread_create(&th[i], NULL, hammer, &a), 0);
    for (int i = 0; i < 200; i++) srv__conns_sweep(cs);
    for (int i = 0; i < HAMMER_THREADS; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        cr_expect_null(rc, "thread %d failed", i);
    }
    cr_expect_eq(srv__conns_count(cs), 0);
    srv__conns_free(cs);
}
