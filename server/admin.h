/* admin.h - the admin routes behind --admin-token (see admin.c). */
#ifndef ADAPTERD_SERVER_ADMIN_H
#define ADAPTERD_SERVER_ADMIN_H

#include <stdbool.h>

#include "internal.h"

/* First call of a request: true when url/method is an admin route (sets r->route and r->admin). */
bool srv__admin_claims(srv_request *r, const char *url, const char *method);
/* Last call (body complete): answers or offloads the admin request. */
enum MHD_Result srv__admin_dispatch(srv_request *r, const char *url, const char *method);

#endif
