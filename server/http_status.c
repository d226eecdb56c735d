/* http_status.c - the one place where error codes become HTTP statuses (see http_status.h). */
#include "http_status.h"

unsigned srv_http_status(eng_status code) {
    switch ((int)code) {
    case ENG_OK: return 200;
    case ENG_INVALID_ARGUMENT: return 422;
    case ENG_LIMIT: return 422;
    case ENG_NOT_FOUND: return 404;
    case ENG_TOO_LARGE: return 413;
    case ENG_BUSY: return 429;
    case ENG_UNAVAILABLE: return 503;
    case ENG_FORMAT: return 400;
    case SRV_MALFORMED: return 400;
    case SRV_METHOD_NOT_ALLOWED: return 405;
    case SRV_MEDIA_TYPE: return 415;
    default: return 500;
    }
}

const char *srv_error_code(eng_status code) {
    switch ((int)code) {
    case ENG_OK: return "ok";
    case ENG_INVALID_ARGUMENT: return "invalid_argument";
    case ENG_LIMIT: return "limit";
    case ENG_NOT_FOUND: return "not_found";
    case ENG_TOO_LARGE: return "too_large";
    case ENG_BUSY: return "busy";
    case ENG_UNAVAILABLE: return "unavailable";
    case ENG_FORMAT: return "malformed";
    case SRV_MALFORMED: return "malformed";
    case SRV_METHOD_NOT_ALLOWED: return "method_not_allowed";
    case SRV_MEDIA_TYPE: return "unsupported_media_type";
    case ENG_NO_MEMORY: return "out_of_memory";
    default: return "internal";
    }
}
