/* watch.h - the registry directory watch (see watch.c). */
#ifndef ADAPTERD_SERVER_WATCH_H
#define ADAPTERD_SERVER_WATCH_H

#include "internal.h"

/* Loop thread: watches <registry>/tasks; returns NULL (and logs) when it cannot. */
srv_watch *srv__watch_start(srv_server *s);
/* Loop thread: stops; the handles close on the loop's last run. */
void srv__watch_stop(srv_watch *w);

#endif
