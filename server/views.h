/* views.h - a task as the server describes it, for HTTP's and gRPC's listings alike (see views.c). */
#ifndef ADAPTERD_SERVER_VIEWS_H
#define ADAPTERD_SERVER_VIEWS_H

#include "internal.h"

/* Versions listed per task in GET /v1/tasks and /v2/models/{task}. */
#define TASK_VERSIONS_MAX 256

/* Fills ti from version t (a task never loaded, under a memory budget, has no head or adapter kind
 * yet: head_known 0). The strings are t's. */
void srv__task_info_fill(store_task *t, proto_task_info *ti);

/* Task name's rollout and its live comparison into ti->rollout (none: mode NULL). */
void srv__task_rollout_fill(srv_server *s, const char *name, proto_task_info *ti);

/* A task's versions for the listings: store_versions' rows and their wire form (pv points into sv). */
typedef struct {
    store_version_info *sv;
    proto_version_info *pv;
    int n;
} srv_task_versions;

/* Fills v with the versions of task name and points ti at them. Returns 0, or -1 when out of memory
 * (ti then lists the current version only). Reads the registry's folders: not on the loop. */
int srv__task_versions_fill(store_registry *reg, const char *name, srv_task_versions *v, proto_task_info *ti);
void srv__task_versions_free(srv_task_versions *v);

/* The task a v2 path names, as srv__task_acquire_spec reads it: "task" for /v2/models/{task}[/infer],
 * "task@v" for /v2/models/{task}/versions/{v}[/infer|/ready]. name, name_len from the matcher (the
 * version follows name in memory); returns the length written to out, or 0 when it does not fit. */
size_t srv__v2_task_spec(const char *name, size_t name_len, char *out, size_t n);

/* What a task description answers. */
typedef enum {
    TASK_VIEW_V1,            /* /v1/tasks/{name} */
    TASK_VIEW_V2,            /* /v2/models/{task}, gRPC ModelMetadata */
    TASK_VIEW_V2_READY,      /* /v2/models/{task}/ready, gRPC ModelReady */
    TASK_VIEW_V2_STATS,      /* /v2/models/{task}/stats, gRPC ModelStatistics */
} srv_task_view;

/* The JSON of view of task name (nlen bytes; "/versions/{v}" may follow in memory, naming a version for
 * the v2 views): 0 with *json malloc'd (*jlen bytes), or ENG_NOT_FOUND / ENG_NO_MEMORY with the message
 * in msg (msz bytes). Any thread but the loop (it lists versions). */
int srv__task_view(srv_server *s, const char *name, size_t nlen, srv_task_view view, char **json, size_t *jlen, char *msg,
                   size_t msz);

#endif
