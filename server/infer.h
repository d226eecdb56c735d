/* infer.h - the HTTP edge of the front door: the inference routes and their codecs (see infer.c). */
#ifndef ADAPTERD_SERVER_INFER_H
#define ADAPTERD_SERVER_INFER_H

#include "internal.h"

/* The codec of an inference route, or NULL when route is not one. */
const proto_codec *srv__infer_codec(srv_route route);

/* MHD thread, body complete (or resumed after the request's tasks were loaded): answers a refusal at
 * once, or takes the request through the front door and suspends the connection until its job is
 * answered. arg, arg_len: what the router matched in the path (KServe v2's task). */
enum MHD_Result srv__infer(srv_request *r, const char *arg, size_t arg_len);

#endif
