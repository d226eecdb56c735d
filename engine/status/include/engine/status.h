/* status.h - the one error table of adapterd.
 *
 * Every module returns these codes; the server maps them to HTTP statuses in exactly one place
 * (server/http_status.c). A failing call fills an eng_err with a code and a human sentence that
 * names what went wrong (the tensor, the file, the field), so callers can show it as is.
 *
 * Contract used across the code: functions that can fail return 0 (ENG_OK) on success and a
 * negative eng_status on failure, and fill *err when err is not NULL. */
#ifndef ADAPTERD_ENGINE_STATUS_H
#define ADAPTERD_ENGINE_STATUS_H

#include <stddef.h>

/* X(name, value, API code, short description). The API code is what clients see in
 * {"error":{"code": ...}}; the server maps values to HTTP statuses in server/http_status.c. */
#define ENG_STATUS_LIST(X)                                                              \
    X(OK, 0, "ok", "ok")                                                                \
    X(INVALID_ARGUMENT, -1, "invalid_argument", "invalid argument")                     \
    X(NOT_FOUND, -2, "not_found", "not found")                                          \
    X(IO, -3, "io_error", "i/o error")                                                  \
    X(FORMAT, -4, "malformed_file", "malformed file")                                   \
    X(UNSUPPORTED, -5, "unsupported", "unsupported")                                    \
    X(SHAPE, -6, "shape_mismatch", "shape mismatch")                                    \
    X(NO_MEMORY, -7, "out_of_memory", "out of memory")                                  \
    X(TOO_LARGE, -8, "too_large", "too large")                                          \
    X(LIMIT, -9, "limit", "limit exceeded")                                             \
    X(BUSY, -10, "busy", "busy")                                                        \
    X(UNAVAILABLE, -11, "unavailable", "unavailable")                                   \
    X(INTERNAL, -12, "internal", "internal error")                                      \
    X(MALFORMED, -13, "malformed", "malformed request")                                 \
    X(METHOD_NOT_ALLOWED, -14, "method_not_allowed", "method not allowed")              \
    X(MEDIA_TYPE, -15, "unsupported_media_type", "unsupported media type")                 \
    X(UNAUTHENTICATED, -16, "unauthenticated", "unauthenticated")                       \
    X(CONFLICT, -17, "conflict", "conflict")                                            \
    X(NO_SPACE, -18, "insufficient_storage", "no space left on the registry's file system") \
    X(TEXT_PAIR_REQUIRED, -19, "text_pair_required", "a text_pair is required")          \
    X(FORBIDDEN, -20, "forbidden", "forbidden")

typedef enum {
#define ENG__STATUS_ENUM(name, value, code, desc) ENG_##name = (value),
    ENG_STATUS_LIST(ENG__STATUS_ENUM)
#undef ENG__STATUS_ENUM
} eng_status;

#define ENG_ERR_MSG_MAX 512

typedef struct {
    eng_status code;
    char msg[ENG_ERR_MSG_MAX]; /* NUL-terminated sentence; empty when code == ENG_OK */
} eng_err;

/* Returns the static API code for code ("invalid_argument", "not_found", ...). */
const char *eng_status_name(eng_status code);

/* Returns a static short description for code. */
const char *eng_status_desc(eng_status code);

/* Sets err (when not NULL) to code and a printf-style message; returns code so callers can write
 * `return eng_err_set(err, ENG_FORMAT, "...", ...);`. */
eng_status eng_err_set(eng_err *err, eng_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to err's message, keeping its code; returns the code. */
eng_status eng_err_prefix(eng_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


#endif
