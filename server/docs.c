/* docs.c - GET /docs: a readable reference of the API, rendered in the browser by Redoc from
 * /openapi.json. The page and Redoc's script are compiled into the binary (proto_docs_html,
 * proto_redoc_js), so it works on a machine with no network; a build that did not find Redoc
 * (npm absent) answers 503 with how to get it, and the rest of the server is unaffected. */
#include "docs.h"

#include <string.h>

#include "http.h"

enum MHD_Result srv__docs(srv_request *r) {
    size_t len = 0;
    const char *js = proto_redoc_js(&len);
    if (!js)
        return srv__send_error(r, ENG_UNAVAILABLE,
                               "this build has no API reference page: it needs npm's redoc at build time (scripts/setup.sh "
                               "installs it); GET /openapi.json has the same content");
    if (!strcmp(r->path, "/docs/redoc.standalone.js"))
        return srv__send_body(r, 200, "application/javascript; charset=utf-8", (char *)js, len, MHD_RESPMEM_PERSISTENT);
    const char *html = proto_docs_html(&len);
    return srv__send_body(r, 200, "text/html; charset=utf-8", (char *)html, len, MHD_RESPMEM_PERSISTENT);
}
