/* admin.h - the admin routes behind --admin-token (see admin.c). */
#ifndef ADAPTERD_SERVER_ADMIN_H
#define ADAPTERD_SERVER_ADMIN_H

#include <stdbool.h>

#include "internal.h"

/* First call of a request: true when url/method is an admin route (sets r->route and r->admin). */
bool srv__admin_claims(srv_request *r, const char *url, const char *method);
/* First call, headers only: decides before a byte of the body is read. Answers 404 when the admin
 * API is off, 401 without the token, 413 when Content-Length is over the route's limit, 415 for an
 * upload that is not a tar; opens the file an upload streams into. Returns MHD's result; r->status
 * is set when it answered. */
enum MHD_Result srv__admin_begin(srv_request *r, const char *method);
/* A chunk of an admin request's body: an upload goes to its file, anything else to memory, both
 * bounded (r->too_large set beyond). Returns 0, or -1 when out of memory or the file cannot be
 * written (r->status unset: the caller closes the connection). */
int srv__admin_body(srv_request *r, const char *data, size_t n);
/* With the request: closes and removes an upload's body file. */
void srv__admin_end(srv_request *r);
/* Bytes an admin request other than an upload may send (a JSON document). */
#define SRV_ADMIN_BODY_MAX 65536
/* Last call (body complete): answers or offloads the admin request. */
enum MHD_Result srv__admin_dispatch(srv_request *r, const char *url, const char *method);

/* The audit line of an admin request, allowed or refused (routes.c, when it completes). */
void srv__admin_audit(const srv_request *r, unsigned status);

#endif
