/* tsan_libuv_close.c - checks tools/tsan/libuv_close.c (CI's ThreadSanitizer step builds this twice,
 * with and without it). A descriptor made by the main thread (socket) is closed by libuv (uv_close on
 * a uv_tcp_t: libuv's syscall(SYS_close)); a thread started before it, told of the close only by a
 * relaxed atomic (no synchronisation for TSan), then gets the same number from opendir and closes
 * it. Without the shim TSan reports the number's two owners as a data race (exit 66 with CI's
 * TSAN_OPTIONS); with it, nothing. The program itself fails (exit 2) when the number was not reused,
 * as then it proves nothing. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

static int sock_fd = -1, dir_fd = -2;
static int closed; /* set by main after the close; read relaxed: no happens-before for TSan */

static void *scan(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&closed, __ATOMIC_RELAXED)) usleep(1000);
    DIR *d = opendir("/");
    if (!d) return NULL;
    dir_fd = dirfd(d);
    closedir(d);
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, scan, NULL)) return 2;
    uv_loop_t *loop = uv_default_loop();
    uv_tcp_t h;
    uv_tcp_init(loop, &h);
    sock_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (sock_fd < 0 || uv_tcp_open(&h, sock_fd)) return 2;
    uv_close((uv_handle_t *)&h, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    __atomic_store_n(&closed, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    if (dir_fd != sock_fd) {
        fprintf(stderr, "tsan_libuv_close: opendir got %d, not the closed socket's %d\n", dir_fd, sock_fd);
        return 2;
    }
    printf("tsan_libuv_close: descriptor %d reused by another thread after libuv closed it\n", sock_fd);
    return 0;
}
