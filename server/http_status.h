/* http_status.h - the one mapping from adapterd's error table (engine/status.h) to HTTP. */
#ifndef ADAPTERD_SERVER_HTTP_STATUS_H
#define ADAPTERD_SERVER_HTTP_STATUS_H

#include "status.h"

/* Conditions that exist only in HTTP and have no entry in the error table yet (see the report on
 * issue 6: they belong in ENG_STATUS_LIST). Kept far from the table's values. */
#define SRV_METHOD_NOT_ALLOWED ((eng_status)-100)
#define SRV_MEDIA_TYPE ((eng_status)-101)
#define SRV_MALFORMED ((eng_status)-102)

/* HTTP status for code: INVALID_ARGUMENT/LIMIT 422, NOT_FOUND 404, TOO_LARGE 413, BUSY 429,
 * UNAVAILABLE 503, FORMAT/SRV_MALFORMED 400, SRV_METHOD_NOT_ALLOWED 405, SRV_MEDIA_TYPE 415,
 * everything else 500. */
unsigned srv_http_status(eng_status code);

/* The "code" string of error bodies: lowercase names ("invalid_argument", "busy", ...). */
const char *srv_error_code(eng_status code);

#endif
