/* stress_conn.c - server/conn.c under many threads, as a plain program (no Criterion) so that it runs
 * under ThreadSanitizer, whose runtime cannot live beside Criterion's process arena:
 *
 *     cc -std=c11 -O1 -g -fsanitize=thread -Iserver tests/server/stress_conn.c server/conn.c \
 *        -lmicrohttpd -lpthread -o stress_conn && ./stress_conn
 *
 * Four threads play libmicrohttpd's: open a connection, headers, body chunks, answer, keep-alive,
 * close; the main thread sweeps meanwhile, with limits small enough that the sweep and the reserve's
 * eviction both act on connections other threads are using. Every other connection is gRPC's (idle,
 * busy, idle again, as grpc.c marks it), and connections come from a few addresses (the cap per
 * address is asked, as libmicrohttpd's accept policy does, before each open). Exit 0 when the count returns to 0
 * (ctest runs it in the plain build too, where ASan would see what it leaks). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"

enum { THREADS = 4, ROUNDS = 3000, HELD = 4 };

static atomic_int finished;

static void *play(srv_conns *cs) {
    for (int i = 0; i < ROUNDS; i++) {
        int sv[HELD][2];
        srv_conn *c[HELD];
        for (int h = 0; h < HELD; h++) {
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x0a000001u + (uint32_t)((i + h) % 3))};
            srv_conn_kind kind = h % 2 ? SRV_CONN_GRPC : SRV_CONN_HTTP;
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[h])) return (void *)1;
            (void)srv__conns_count_from(cs, (struct sockaddr *)&a);
            srv_conn_verdict why = SRV_CONN_OK;
            if (kind == SRV_CONN_HTTP) { /* libmicrohttpd registers what its accept policy let in */
                (void)srv__conns_check(cs, (struct sockaddr *)&a);
                c[h] = srv__conn_open_from(cs, sv[h][0], (struct sockaddr *)&a, kind);
            } else { /* grpc.c asks and registers at once; a refused one stays NULL (every call takes NULL) */
                c[h] = srv__conn_accept(cs, sv[h][0], (struct sockaddr *)&a, kind, &why);
            }
            if (!c[h] && why == SRV_CONN_OK) return (void *)1;
            usleep(1); /* let the sweep see it past its (tiny) deadline */
        }
        for (int h = 0; h < HELD; h++) {
            srv__conn_phase(cs, c[h], SRV_CONN_BODY);
            for (int k = 0; k < 4; k++) srv__conn_body(c[h], 256);
            (void)srv__conn_reserve(c[h]);
            srv__conn_phase(cs, c[h], h % 2 ? SRV_CONN_BUSY : SRV_CONN_WAITING);
        }
        for (int h = 0; h < HELD; h++) {
            srv__conn_close(cs, c[h]);
            close(sv[h][0]), close(sv[h][1]);
        }
    }
    return NULL;
}

static void *player(void *arg) {
    void *rc = play(arg);
    atomic_fetch_add(&finished, 1);
    return rc;
}

int main(void) {
    srv_conn_params p = {.max_connections = 6, .reserve = 4, .max_per_ip = 3, .header_timeout_s = 0.00001, .min_body_rate = 1u << 30};
    srv_conns *cs = srv__conns_new(&p);
    if (!cs) return 1;
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&th[i], NULL, player, cs)) return 1;
    long swept = 0;
    int failed = 0;
    while (atomic_load(&finished) < THREADS) swept += srv__conns_sweep(cs);
    for (int i = 0; i < THREADS; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        failed |= rc != NULL;
    }
    int left = srv__conns_count(cs);
    srv__conns_free(cs);
    printf("stress_conn: %d threads x %d rounds x %d connections, %ld closed by the sweep, %d left\n", THREADS, ROUNDS, HELD,
           swept, left);
    return failed || left != 0;
}
