/* routes.h - libmicrohttpd's callbacks (MHD_AccessHandlerCallback and the completion notice);
 * cls is the srv_server. */
#ifndef ADAPTERD_SERVER_ROUTES_H
#define ADAPTERD_SERVER_ROUTES_H

#include "internal.h"

enum MHD_Result srv__on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls);
/* Matches a decoded path to a non-admin route; a route with a name sets *arg, *arg_len (inside url). */
srv_route srv__route_match(const char *url, const char **arg, size_t *arg_len);
void srv__on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
