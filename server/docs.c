/* docs.c - GET /docs: a readable reference of the API, rendered in the browser by Redoc from
 * /openapi.json. The page (here: HTML is the server's business, not the JSON codec's) and Redoc's
 * script (proto_redoc_js, compiled in by proto's build from docs/redoc's npm package) are in the
 * binary, so it works on a machine with no network. Redoc is MIT-licensed and its bundle holds
 * other libraries: their licence texts travel in the binary with it and are served at
 * /docs/redoc.standalone.js.LICENSE.txt, the file the bundle's first line names. A build that did
 * not find Redoc (npm absent) answers 503 with how to get it, and the rest of the server is
 * unaffected. */
#include "docs.h"

#include <string.h>

#include "http.h"

/* Redoc rendering ./openapi.json, its script at docs/redoc.standalone.js: relative URLs, so a path
 * prefix added by a proxy keeps working. */
static const char docs_html[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>adapterd API reference</title>\n"
    "<style>body { margin: 0; padding: 0; }</style>\n</head>\n<body>\n"
    "<redoc spec-url=\"openapi.json\" hide-download-button=\"false\" expand-responses=\"200\"></redoc>\n"
    "<script src=\"docs/redoc.standalone.js\"></script>\n"
    "<!-- Redoc: MIT licence and its bundle's notices at docs/redoc.standalone.js.LICENSE.txt -->\n</body>\n</html>\n";

enum MHD_Result srv__docs(srv_request *r) {
    size_t len = 0;
    const char *js = proto_redoc_js(&len);
    if (!js)
        return srv__send_error(r, ENG_UNAVAILABLE,
                               "this build has no API reference page: it needs npm's redoc at build time (scripts/setup.sh "
                               "installs it in docs/redoc); GET /openapi.json has the same content");
    if (!strcmp(r->path, "/docs/redoc.standalone.js.LICENSE.txt")) {
        const char *lic = proto_redoc_license(&len);
        if (!lic) return srv__send_error(r, ENG_UNAVAILABLE, "this build has Redoc's bundle without its licence texts");
        return srv__send_body(r, 200, "text/plain; charset=utf-8", (char *)lic, len, MHD_RESPMEM_PERSISTENT);
    }
    if (!strcmp(r->path, "/docs/redoc.standalone.js"))
        return srv__send_body(r, 200, "application/javascript; charset=utf-8", (char *)js, len, MHD_RESPMEM_PERSISTENT);
    return srv__send_body(r, 200, "text/html; charset=utf-8", (char *)docs_html, sizeof docs_html - 1, MHD_RESPMEM_PERSISTENT);
}
