/* cli.c - helpers shared by the subcommands. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int cli_parse_ids(const char *s, int32_t **out) {
    *out = NULL;
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "adapterd: out of memory\n");
        return -1;
    }
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "adapterd: --ids must be comma-separated non-negative integers, got '%s'\n", s);
            free(ids);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *t = realloc(ids, cap * sizeof *ids);
            if (!t) {
                free(ids);
                fprintf(stderr, "adapterd: out of memory\n");
                return -1;
            }
            ids = t;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "adapterd: --ids is empty\n");
        free(ids);
        return -1;
    }
    *out = ids;
    return (int)n;
}

void cli_print_json_string(const char *s, size_t len) {
    putchar('"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\b': fputs("\\b", stdout); break;
        case '\f': fputs("\\f", stdout); break;
        default:
            if (c < 0x20)
                printf("\\u%04x", c);
            else
                putchar(c);
        }
    }
    putchar('"');
}
