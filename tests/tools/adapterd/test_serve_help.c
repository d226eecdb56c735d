/* test_serve_help.c - `adapterd serve --help` (tools/adapterd/cmd_serve.c) against server/config.c's
 * option table: every option the flags, the config file and ADAPTERD_* take is listed with its
 * placeholder and some help, and nothing is listed that the table does not take. The help is made
 * from the table, so this fails when that link breaks or an option is added without help (five
 * options once went unlisted because the help was a copy). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "server/server.h"

#define BIN ADAPTERD_BINARY_DIR "/tools/adapterd"

/* Bytes of help read. */
#define HELP_MAX (64 << 10)

/* The output of `adapterd serve --help`, malloc'd; asserts exit status 0. */
static char *serve_help(void) {
    FILE *p = popen(BIN " serve --help", "r");
    cr_assert(p, "cannot run %s", BIN);
    char *out = calloc(1, HELP_MAX);
    cr_assert(out);
    size_t n = fread(out, 1, HELP_MAX - 1, p);
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "serve --help exited %d", st);
    cr_assert(n > 0 && n < HELP_MAX - 1, "serve --help printed %zu bytes", n);
    return out;
}

/* Whether name (without "--") is in the table, or the one flag handled beside it. */
static bool in_table(const char *name, size_t len) {
    if (len == 6 && !strncmp(name, "config", 6)) return true;
    const srv_config_option *o;
    for (size_t i = 0; (o = srv_config_option_at(i)); i++)
        if (strlen(o->name) == len && !strncmp(o->name, name, len)) return true;
    return false;
}

Test(serve_help, lists_every_option_of_the_table) {
    char *help = serve_help();
    const srv_config_option *o;
    size_t n = 0;
    for (size_t i = 0; (o = srv_config_option_at(i)); i++, n++) {
        char line[160];
        snprintf(line, sizeof line, "\n  --%s %s", o->name, o->arg);
        const char *at = strstr(help, line);
        cr_expect(at, "serve --help does not list --%s %s", o->name, o->arg);
        cr_expect(o->help && strlen(o->help) > 10, "--%s has no help", o->name);
        /* the line goes on with the help, or the help starts on the next line */
        if (at) {
            at += strlen(line);
            cr_expect(*at == ' ' || *at == '\n', "--%s: '%.20s' after its placeholder", o->name, at);
        }
        /* the option must be one srv_config_set takes, by the name help shows */
        srv_config c = srv_default_config();
        eng_err e = {0};
        cr_expect_neq(srv_config_set(&c, o->name, "", &e), ENG_NOT_FOUND, "--%s is listed but not taken: %s", o->name, e.msg);
    }
    cr_expect_gt(n, 30, "the table has %zu options", n);
    free(help);
}

Test(serve_help, lists_nothing_the_table_does_not_take) {
    char *help = serve_help();
    for (const char *p = help; (p = strstr(p, "\n  --")); p++) {
        const char *name = p + 5;
        size_t len = strcspn(name, " \n");
        cr_expect(in_table(name, len), "serve --help lists --%.*s, which no source of options takes", (int)len, name);
    }
    free(help);
}

/* Options that used to be missing from a hand-written help, named so that a regression reads plainly. */
Test(serve_help, names_the_connection_limits) {
    char *help = serve_help();
    const char *want[] = {"--header-timeout-ms", "--min-body-rate", "--max-connections ", "--max-connections-per-ip",
                          "--health-reserve", "--served-model-name", "--metrics-tasks"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) cr_expect(strstr(help, want[i]), "%s is not in the help", want[i]);
    free(help);
}
