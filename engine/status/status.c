/* status.c - names and messages for the error table in status.h. */
#include "engine/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *eng_status_name(eng_status code) {
    switch (code) {
#define ENG__STATUS_NAME(name, value, code, desc) \
    case ENG_##name:                              \
        return code;
        ENG_STATUS_LIST(ENG__STATUS_NAME)
#undef ENG__STATUS_NAME
    }
    return "unknown";
}

const char *eng_status_desc(eng_status code) {
    switch (code) {
#define ENG__STATUS_DESC(name, value, code, desc) \
    case ENG_##name:                              \
        return desc;
        ENG_STATUS_LIST(ENG__STATUS_DESC)
#undef ENG__STATUS_DESC
    }
    return "unknown error";
}

eng_status eng_err_set(eng_err *err, eng_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

eng_status eng_err_prefix(eng_err *err, const char *fmt, ...) {
    if (!err) return ENG_INTERNAL;
    char head[ENG_ERR_MSG_MAX], tail[ENG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(tail, err->msg, sizeof tail);
    size_t n = strlen(head);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, head, n);
    memcpy(err->msg + n, ": ", 2);
    size_t rest = sizeof err->msg - n - 3;
    size_t t = strnlen(tail, rest);
    memcpy(err->msg + n + 2, tail, t);
    err->msg[n + 2 + t] = '\0';
    return err->code;
}

