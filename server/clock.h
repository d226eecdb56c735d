/* clock.h - the server's one clock: monotonic seconds as a double, for waits, batch windows and
 * request timings. */
#ifndef ADAPTERD_SERVER_CLOCK_H
#define ADAPTERD_SERVER_CLOCK_H

#include <time.h>

static inline double srv__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
