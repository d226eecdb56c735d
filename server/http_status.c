/* http_status.c - the one place where error codes become HTTP statuses (see http_status.h). */
#include "http_status.h"

unsigned srv_http_status(eng_status code) {
    switch (code) {
    case ENG_OK: return 200;
    case ENG_MALFORMED: return 400;
    case ENG_FORMAT: return 400;
    case ENG_UNAUTHENTICATED: return 401;
    case ENG_NOT_FOUND: return 404;
    case ENG_METHOD_NOT_ALLOWED: return 405;
    case ENG_CONFLICT: return 409;
    case ENG_TOO_LARGE: return 413;
    case ENG_MEDIA_TYPE: return 415;
    case ENG_INVALID_ARGUMENT: return 422;
    case ENG_LIMIT: return 422;
    case ENG_SHAPE: return 422;
    case ENG_UNSUPPORTED: return 422;
    case ENG_BUSY: return 429;
    case ENG_UNAVAILABLE: return 503;
    case ENG_IO:
    case ENG_NO_MEMORY:
    case ENG_INTERNAL: return 500;
    }
    return 500;
}
