/* http_status.c - the one place where error codes become HTTP statuses (see http_status.h). */
#include "http_status.h"

#include "proto/proto.h" /* proto_error_encode */

unsigned srv__http_status(eng_status code) {
    switch (code) {
    case ENG_OK: return 200;
    case ENG_MALFORMED: return 400;
    case ENG_UNAUTHENTICATED: return 401;
    case ENG_FORBIDDEN: return 403;
    case ENG_NOT_FOUND: return 404;
    case ENG_METHOD_NOT_ALLOWED: return 405;
    case ENG_CONFLICT: return 409;
    case ENG_TOO_LARGE: return 413;
    case ENG_MEDIA_TYPE: return 415;
    case ENG_INVALID_ARGUMENT: return 422;
    case ENG_LIMIT: return 422;
    case ENG_TEXT_PAIR_REQUIRED: return 422;
    case ENG_SHAPE: return 422;
    case ENG_UNSUPPORTED: return 422;
    case ENG_BUSY: return 429;
    case ENG_UNAVAILABLE: return 503;
    case ENG_NO_SPACE: return 507;
    case ENG_FORMAT: /* a file on the server (a task's, a model's) is broken: not the request's fault */
    case ENG_IO:
    case ENG_NO_MEMORY:
    case ENG_INTERNAL: return 500;
    }
    return 500;
}

eng_status srv__status_of_tokenize(int eng_rc) { return eng_rc == ENG_NO_MEMORY ? ENG_NO_MEMORY : ENG_INVALID_ARGUMENT; }

eng_status srv__status_of_upload(eng_status rc, int *prefix) {
    *prefix = 0;
    switch (rc) {
    case ENG_OK:
    case ENG_NO_MEMORY:
    case ENG_IO:
    case ENG_NO_SPACE:
    case ENG_UNAVAILABLE: /* the registry state could not be read: nothing changed, the client may retry */
    case ENG_INVALID_ARGUMENT:
    case ENG_CONFLICT: return rc;
    default: *prefix = 1; return ENG_INVALID_ARGUMENT;
    }
}

unsigned srv__error_body(eng_status code, const char *msg, char **body, size_t *len) {
    return srv__error_body_as(PROTO_DIALECT_ADAPTERD, code, msg, body, len);
}

unsigned srv__error_body_as(int d, eng_status code, const char *msg, char **body, size_t *len) {
    unsigned status = srv__http_status(code);
    *body = proto_error_encode_as((proto_dialect)d, eng_status_name(code), status, msg && *msg ? msg : eng_status_desc(code), len);
    return *body ? status : 500;
}
