/* opts.c - one parser for every subcommand's options (see opts.h). strtol/strtod over the whole
 * value, then the range, so a number the user mistyped stops the command with its name instead of
 * running with a different one. */
#include "opts.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n <= CLI_MAX_THREADS ? (int)n : n > CLI_MAX_THREADS ? CLI_MAX_THREADS : 1;
}

static const cli_opt *find(const cli_opt *opts, const char *name) {
    for (const cli_opt *o = opts; o->name; o++)
        if (!strcmp(o->name, name)) return o;
    return NULL;
}

/* strtoll and strtod skip leading blanks: a value is a number from its first byte. */
static int starts_number(const char *v) {
    const char *p = v[0] == '-' || v[0] == '+' ? v + 1 : v;
    return isdigit((unsigned char)p[0]) || (p[0] == '.' && isdigit((unsigned char)p[1]));
}

/* Sets o's destination from v; returns 0 or 2 with the message printed. */
static int set(const char *cmd, const cli_opt *o, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case CLI_STR: *(const char **)o->dst = v; return 0;
    case CLI_FLAG: *(int *)o->dst = 1; return 0;
    case CLI_LIST: {
        cli_list *l = o->dst;
        if (l->n >= (int)o->max) {
            fprintf(stderr, "adapterd %s: %s given more than %d times\n", cmd, o->name, (int)o->max);
            return 2;
        }
        l->v[l->n++] = v;
        return 0;
    }
    case CLI_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (!strcmp(v, o->choices[i])) {
                *(int *)o->dst = i;
                return 0;
            }
        fprintf(stderr, "adapterd %s: %s must be one of", cmd, o->name);
        for (int i = 0; o->choices[i]; i++) fprintf(stderr, "%s %s", i ? "," : "", o->choices[i]);
        fprintf(stderr, "; got '%s'\n", v);
        return 2;
    case CLI_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || !starts_number(v) || *end || x < o->min || x > o->max) {
            fprintf(stderr, "adapterd %s: %s expects an integer in %.0f..%.0f, got '%s'\n", cmd, o->name, o->min, o->max, v);
            return 2;
        }
        *(int *)o->dst = (int)x;
        return 0;
    }
    case CLI_REAL: {
        double x = strtod(v, &end);
        if (errno || !starts_number(v) || *end || !isfinite(x) || x < o->min || (o->open_min && x == o->min) || x > o->max) {
            if (isinf(o->min) && isinf(o->max))
                fprintf(stderr, "adapterd %s: %s expects a number, got '%s'\n", cmd, o->name, v);
            else
                fprintf(stderr, "adapterd %s: %s expects a number in %s%g, %g], got '%s'\n", cmd, o->name,
                        o->open_min ? "(" : "[", o->min, o->max, v);
            return 2;
        }
        *(double *)o->dst = x;
        return 0;
    }
    }
    return 2;
}

int cli_opts_parse(const char *cmd, const cli_opt *opts, void (*usage)(FILE *), int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    for (int i = 1; i < argc; i++) {
        const cli_opt *o = find(opts, argv[i]);
        if (!o) {
            fprintf(stderr, "adapterd %s: unknown option '%s' (adapterd %s --help)\n", cmd, argv[i], cmd);
            return 2;
        }
        if (o->type != CLI_FLAG && i + 1 >= argc) {
            fprintf(stderr, "adapterd %s: %s needs a value\n", cmd, o->name);
            return 2;
        }
        if (set(cmd, o, o->type == CLI_FLAG ? NULL : argv[++i])) return 2;
    }
    return -1;
}
