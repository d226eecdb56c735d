/* docs.h - GET /docs, the API reference page (see docs.c). */
#ifndef ADAPTERD_SERVER_DOCS_H
#define ADAPTERD_SERVER_DOCS_H

#include "internal.h"

/* MHD thread: the page (/docs), its script (/docs/redoc.standalone.js) or the script's licence texts
 * (/docs/redoc.standalone.js.LICENSE.txt), or 503 when the build had no Redoc bundle. */
enum MHD_Result srv__docs(srv_request *r);

#endif
