/* http_status.h - the one mapping from adapterd's error table (engine/status.h) to HTTP. The error
 * body's "code" is the table's API code (eng_status_name). */
#ifndef ADAPTERD_SERVER_HTTP_STATUS_H
#define ADAPTERD_SERVER_HTTP_STATUS_H

#include "engine/status.h"

/* HTTP status for code: MALFORMED/FORMAT 400, UNAUTHENTICATED 401, NOT_FOUND 404, CONFLICT 409, METHOD_NOT_ALLOWED 405, TOO_LARGE 413,
 * MEDIA_TYPE 415, INVALID_ARGUMENT/LIMIT/SHAPE/UNSUPPORTED 422, BUSY 429, UNAVAILABLE 503, else 500. */
unsigned srv_http_status(eng_status code);

#endif
