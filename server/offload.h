/* offload.h - slow work of a request (an upload, task loads) on libuv's thread pool while its
 * connection is suspended (see offload.c). */
#ifndef ADAPTERD_SERVER_OFFLOAD_H
#define ADAPTERD_SERVER_OFFLOAD_H

#include "internal.h"

/* Loop thread. NULL when out of memory or when the loop refuses a handle. */
srv_offloader *srv__offload_new(uv_loop_t *loop);
/* After the loop closed its handles. */
void srv__offload_free(srv_offloader *o);
/* MHD thread: suspends r's connection and runs fn(r) on libuv's pool; when it returns the loop
 * resumes the connection and on_request sees r->off.state == SRV_OFFLOAD_DONE. fn answers by
 * setting r->off.status and r->off.body, or leaves status 0 to have the request run again. */
void srv__offload(srv_offloader *o, srv_request *r, void (*fn)(srv_request *r));
/* Lowers the calling pool thread's priority to nice 19 once: loads yield the CPU to inference. */
void srv__pool_thread_nice(void);
/* Pool thread: sets r's offload answer to the error for code. */
void srv__offload_fail(srv_request *r, eng_status code, const char *msg);
/* Releases what an offload held; with the request. */
void srv__offload_clear(srv_request *r);

#endif
