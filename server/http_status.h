/* http_status.h - the one mapping from adapterd's errors to HTTP: the error table (engine/status.h)
 * to statuses, and the few places where another module's code, or the step that failed, decides
 * which table entry a client sees. The error body's "code" is the table's API code
 * (eng_status_name). */
#ifndef ADAPTERD_SERVER_HTTP_STATUS_H
#define ADAPTERD_SERVER_HTTP_STATUS_H

#include <stddef.h>

#include "engine/status.h"

/* HTTP status for code: MALFORMED 400, UNAUTHENTICATED 401, FORBIDDEN 403, NOT_FOUND 404, METHOD_NOT_ALLOWED 405,
 * CONFLICT 409, TOO_LARGE 413, MEDIA_TYPE 415, INVALID_ARGUMENT/LIMIT/SHAPE/UNSUPPORTED 422, BUSY 429,
 * UNAVAILABLE 503, NO_SPACE 507, else 500 (FORMAT too: a broken file on the server; an upload's own
 * broken files are mapped to 422 by srv__status_of_upload). */
unsigned srv__http_status(eng_status code);

/* A failure to tokenize a request's text is the client's (422), unless memory ran out. */
eng_status srv__status_of_tokenize(int eng_rc);

/* A task version that does not load from an upload is the upload's fault: the loader's shape,
 * format and unsupported-method errors become ENG_INVALID_ARGUMENT (422, *prefix set so the message
 * keeps the loader's code), while out of memory, I/O, a full disk, a registry state that could not
 * be read (503), conflicts and invalid arguments keep theirs. */
eng_status srv__status_of_upload(eng_status rc, int *prefix);

/* Builds {"error":{"code","message"}} for code into *body / *len and returns its HTTP status; an
 * empty msg uses the table's description. When out of memory *body is NULL and the status is 500. */
unsigned srv__error_body(eng_status code, const char *msg, char **body, size_t *len);
/* The same in the error shape of dialect (a proto_dialect: TEI's, OpenAI's, KServe's; see
 * proto_error_encode_as). An int here so this header needs no proto include. */
unsigned srv__error_body_as(int dialect, eng_status code, const char *msg, char **body, size_t *len);

#endif
