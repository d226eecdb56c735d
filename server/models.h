/* models.h - which model a request's "model" names, and the routes that list the models: GET
 * /v1/models and OpenAI's GET /v1/models/{id} (see models.c for the naming rule). */
#ifndef ADAPTERD_SERVER_MODELS_H
#define ADAPTERD_SERVER_MODELS_H

#include "internal.h"

/* Bytes of a model resolution's error message. */
#define SRV_MODEL_MSG_MAX 512

/* Reads --served-model-name (spec: "NAME[,NAME...]" or "NAME=MODEL[,...]") against the models of
 * reg. Returns 0 with *out set (NULL when spec is empty: no served names), or ENG_INVALID_ARGUMENT
 * (err names the entry at fault) or ENG_NO_MEMORY with *out NULL. The caller owns *out. */
int srv__model_names_new(const char *spec, store_registry *reg, srv_model_names **out, eng_err *err);
/* NULL does nothing. */
void srv__model_names_free(srv_model_names *n);

/* What a request that names no model gets. */
typedef enum {
    SRV_MODEL_ONLY,   /* the registry's only model; with several, an error asking for a name */
    SRV_MODEL_FIRST,  /* the first model (TEI's GET /info, which has no way to name one) */
} srv_model_default;

/* A new reference to the model name names (a served name or a registry model's name), or when
 * name is NULL to the default dflt says. *id (id may be NULL) is then the name to answer with: the
 * name given, else the model's first served name; it lives as long as the server (or the model's
 * reference). Returns NULL with *code and msg set (ENG_NOT_FOUND for an unknown name, the message
 * listing the names served; ENG_INVALID_ARGUMENT for no name among several models; ENG_UNAVAILABLE
 * with no model) otherwise. Any thread. */
store_model *srv__model_resolve(srv_server *s, const char *name, srv_model_default dflt, const char **id, eng_status *code,
                                char *msg, size_t msz);

/* MHD thread: GET /v1/models, OpenAI's list and adapterd's descriptions in one answer. */
enum MHD_Result srv__models(srv_request *r);

/* MHD thread: GET /v1/models/{id} (id, len from the path): OpenAI's model object, or 404 in OpenAI's
 * error shape. */
enum MHD_Result srv__model(srv_request *r, const char *id, size_t len);

#endif
