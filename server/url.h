/* url.h - how request paths are decoded. libmicrohttpd percent-decodes the path in place before
 * the access handler sees it, so a decoded NUL would cut the string ("/v1/tasks/a%00/versions/1"
 * reads as "/v1/tasks/a") and a decoded '/' would move segment boundaries. The server installs its
 * own decoder: a byte that must not appear inside a segment (NUL, a control character, DEL, '/')
 * decodes to SRV_URL_BAD_BYTE instead, and the router answers 400 for any path holding a control
 * character, so nothing is ever truncated or re-split. */
#ifndef ADAPTERD_SERVER_URL_H
#define ADAPTERD_SERVER_URL_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

/* What a forbidden escape decodes to: DEL, itself a control character that the check refuses. */
#define SRV_URL_BAD_BYTE 0x7f

/* Decodes %XX escapes of s in place (MHD_OPTION_UNESCAPE_CALLBACK); an escape of a byte below
 * 0x20, 0x7f or '/' becomes SRV_URL_BAD_BYTE, a malformed escape stays as written. Returns the new
 * length; s stays NUL-terminated. */
size_t srv__url_unescape(void *cls, struct MHD_Connection *c, char *s);

/* True when the decoded path holds no control character (raw or from an escape): the only paths
 * the router accepts. */
bool srv__url_ok(const char *path);

#endif
