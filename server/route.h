/* route.h - the server's routes, one X-macro table: dispatch (routes.c, admin.c) and the metrics
 * labels (metrics.c) come from the same list. */
#ifndef ADAPTERD_SERVER_ROUTE_H
#define ADAPTERD_SERVER_ROUTE_H

#define SRV_ROUTE_LIST(X)                  \
    X(PREDICT, "/v1/predict")              \
    X(EMBED, "/v1/embed")                  \
    X(TOKENIZE, "/v1/tokenize")            \
    X(TASKS, "/v1/tasks")                  \
    X(TASK, "/v1/tasks/{name}")            \
    X(MODELS, "/v1/models")                \
    X(OPENAI_MODEL, "/v1/models/{id}")     \
    X(HEALTHZ, "/healthz")                 \
    X(READYZ, "/readyz")                   \
    X(METRICS, "/metrics")                 \
    X(OPENAPI, "/openapi.json")            \
    X(DOCS, "/docs")                       \
    X(V2_LIVE, "/v2/health/live")          \
    X(V2_READY, "/v2/health/ready")        \
    X(V2_MODEL, "/v2/models/{task}")       \
    X(V2_MODEL_READY, "/v2/models/{task}/ready") \
    X(V2_INFER, "/v2/models/{task}/infer") \
    X(ADMIN_VERSIONS, "/v1/tasks/{name}/versions") \
    X(ADMIN_VERSION, "/v1/tasks/{name}/versions/{version}") \
    X(ADMIN_ACTIVATE, "/v1/tasks/{name}:activate") \
    X(ADMIN_ROLLOUT, "/v1/tasks/{name}/rollout") \
    X(ADMIN_TASK, "DELETE /v1/tasks/{name}") \
    X(V2_REPO_INDEX, "/v2/repository/index") \
    X(V2_REPO_LOAD, "/v2/repository/models/{task}/load") \
    X(V2_REPO_UNLOAD, "/v2/repository/models/{task}/unload") \
    X(TEI_EMBED, "/embed")                 \
    X(TEI_EMBED_ALL, "/embed_all")         \
    X(TEI_TOKENIZE, "/tokenize")           \
    X(TEI_INFO, "/info")                   \
    X(TEI_PREDICT, "/predict")             \
    X(TEI_RERANK, "/rerank")               \
    X(TEI_DECODE, "/decode")               \
    X(TEI_HEALTH, "/health")               \
    X(OPENAI_EMBEDDINGS, "/v1/embeddings") \
    X(V2_SERVER, "/v2")                    \
    X(V2_STATS, "/v2/models/{task}/stats") \
    X(UNKNOWN, "other")

typedef enum {
#define SRV__ROUTE_ENUM(name, path) SRV_ROUTE_##name,
    SRV_ROUTE_LIST(SRV__ROUTE_ENUM)
#undef SRV__ROUTE_ENUM
        SRV_ROUTE_COUNT
} srv_route;

#endif
