/* url.c - see url.h. */
#include "url.h"

static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t srv__url_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls, (void)c;
    char *w = s;
    for (const char *p = s; *p;) {
        int hi, lo;
        if (p[0] == '%' && (hi = hex(p[1])) >= 0 && (lo = hex(p[2])) >= 0) {
            unsigned char b = (unsigned char)(hi * 16 + lo);
            *w++ = (char)(b < 0x20 || b == 0x7f || b == '/' ? SRV_URL_BAD_BYTE : b);
            p += 3;
        } else {
            *w++ = *p++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

bool srv__url_ok(const char *path) {
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return false;
    return true;
}
