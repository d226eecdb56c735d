/* embed.h - the routes in the shape of text-embeddings-inference: POST /v1/embed (through the
 * scheduler, see embed.c) and POST /v1/tokenize (answered on the MHD thread). */
#ifndef ADAPTERD_SERVER_EMBED_H
#define ADAPTERD_SERVER_EMBED_H

#include "internal.h"

/* MHD thread, body complete: answers errors at once; otherwise suspends the connection and submits
 * an embed job. */
enum MHD_Result srv__embed(srv_request *r);

/* MHD thread, body complete: tokenizes the inputs and answers. */
enum MHD_Result srv__tokenize(srv_request *r);

#endif
