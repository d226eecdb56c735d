/* routes.h - libmicrohttpd's callbacks (MHD_AccessHandlerCallback and the completion notice);
 * cls is the srv_server. */
#ifndef ADAPTERD_SERVER_ROUTES_H
#define ADAPTERD_SERVER_ROUTES_H

#include "internal.h"

enum MHD_Result srv__on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls);
/* Matches a decoded path to a non-admin route; a route with a name sets *arg, *arg_len (inside url). */
srv_route srv__route_match(const char *url, const char **arg, size_t *arg_len);
/* The task a v2 path names, as srv__task_acquire_spec reads it: "task" for /v2/models/{task}[/infer],
 * "task@v" for /v2/models/{task}/versions/{v}[/infer|/ready]. name, name_len from the matcher (the
 * version follows name in memory); returns the length written to out, or 0 when it does not fit. */
size_t srv__v2_task_spec(const char *name, size_t name_len, char *out, size_t n);
/* What GET on one task answers. */
typedef enum {
    TASK_VIEW_V1,            /* /v1/tasks/{name} */
    TASK_VIEW_V2,            /* /v2/models/{task} */
    TASK_VIEW_V2_READY,      /* /v2/models/{task}/ready */
    TASK_VIEW_V2_STATS,      /* /v2/models/{task}/stats */
} srv_task_view;
/* The JSON GET on task name (nlen bytes; "/versions/{v}" may follow in memory, naming a version for
 * the v2 views) answers, for routes.c and gRPC's model calls: 0 with *json malloc'd (*jlen bytes),
 * or ENG_NOT_FOUND / ENG_NO_MEMORY with the message in msg (msz bytes). Any thread. */
int srv__task_view(srv_server *s, const char *name, size_t nlen, srv_task_view view, char **json, size_t *jlen, char *msg,
                   size_t msz);
void srv__on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
