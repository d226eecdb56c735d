/* libuv_close.c - ThreadSanitizer builds of adapterd only (-DADAPTERD_TSAN=ON): tells TSan when libuv
 * closes a descriptor. Debian's libuv is not instrumented, and on Linux it closes descriptors with
 * syscall(SYS_close, fd) (src/unix/core.c, uv__close_nocancel; `objdump -d libuv.so.1` shows
 * `syscall(3, fd)` and no call to close), which TSan does not intercept; a libuv built with TSan calls
 * the sanitizer's close hooks there itself. Without them TSan still takes a socket libuv accepted (a
 * gRPC connection) for open after it is closed, and when another thread is given the same number
 * (the registry watcher's opendir) it reports the number's two owners as a data race on the
 * descriptor. This file defines syscall(), to which the dynamic linker binds libuv's calls (the
 * executable comes first), runs the hooks around SYS_close and hands every call to the C library's
 * syscall(). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

/* the sanitizer's own hooks (<sanitizer/linux_syscall_hooks.h>, which GCC does not install) */
void __sanitizer_syscall_pre_impl_close(long fd);
void __sanitizer_syscall_post_impl_close(long res, long fd);

typedef long (*syscall_fn)(long, ...);

long syscall(long n, ...) {
    static syscall_fn real;
    syscall_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!f) {
        *(void **)&f = dlsym(RTLD_NEXT, "syscall");
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    /* syscall(2) passes up to six register-sized arguments; reading six is how its callers'
     * arguments reach it on x86-64 and AArch64 whatever their number */
    va_list ap;
    va_start(ap, n);
    long a[6];
    for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
    va_end(ap);
    if (n != SYS_close) return f(n, a[0], a[1], a[2], a[3], a[4], a[5]);
    __sanitizer_syscall_pre_impl_close(a[0]);
    long r = f(n, a[0]);
    __sanitizer_syscall_post_impl_close(r, a[0]);
    return r;
}
