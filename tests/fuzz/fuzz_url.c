/* fuzz_url.c - request-path decoding and routing (server/url.c, the matchers of server/routes.c
 * and server/admin.c). The input, cut at its first NUL as libmicrohttpd would hand it over, is
 * decoded with the server's unescape callback and routed; the first byte picks the method. Beyond
 * memory safety the harness checks the decoding contract (issue "URL decoding"): the result never
 * gets longer, no escape ever yields '/', NUL or a control character other than the marker, and a
 * path the check accepts holds no control character; a route's name argument lies inside the path
 * and holds no '/' (but /v1/models/{id}'s, the rest of the path). A broken contract aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "internal.h"
#include "routes.h"
#include "url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t count(const char *s, size_t n, char c) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == c;
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", "HEAD"};
    if (size < 1) return 0;
    const char *method = methods[data[0] % 5];
    size_t n = strnlen((const char *)data + 1, size - 1);
    char *raw = malloc(n + 1), *url = malloc(n + 1);
    if (!raw || !url) {
        free(raw), free(url);
        return 0;
    }
    memcpy(raw, data + 1, n), raw[n] = '\0';
    memcpy(url, raw, n + 1);

    size_t len = srv__url_unescape(NULL, NULL, url);
    if (len > n || strlen(url) != len) abort();                      /* never longer, never cut */
    if (count(url, len, '/') > count(raw, n, '/')) abort();          /* no '/' from an escape */
    bool raw_ctl = false, ctl = false;
    for (size_t i = 0; i < n; i++) raw_ctl |= (unsigned char)raw[i] < 0x20 || raw[i] == 0x7f;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)url[i];
        if (b < 0x20 && !raw_ctl) abort();                           /* escapes yield only the marker */
        ctl |= b < 0x20 || b == 0x7f;
    }
    if (srv__url_ok(url) == ctl) abort();

    const char *arg = NULL;
    size_t arg_len = 0;
    srv_route rt = srv__route_match(url, &arg, &arg_len);
    if (rt < 0 || rt >= SRV_ROUTE_COUNT) abort();
    if (arg) {
        if (arg < url || arg + arg_len > url + len) abort();
        /* a name is one segment, but for /v1/models/{id}'s: the rest of the path (served names such as org/model) */
        if (rt != SRV_ROUTE_OPENAI_MODEL && memchr(arg, '/', arg_len)) abort();
    }

    srv_request *r = calloc(1, sizeof *r);
    if (r) {
        if (srv__admin_claims(r, url, method)) {
            if (!r->admin || r->route < 0 || r->route >= SRV_ROUTE_COUNT) abort();
            if (strchr(r->off.name, '/') || strchr(r->off.version, '/')) abort();
            if (strlen(r->off.name) >= sizeof r->off.name || strlen(r->off.version) >= sizeof r->off.version) abort();
        }
        free(r);
    }
    free(raw), free(url);
    return 0;
}
