/* opts.h - the subcommands' options through one typed, range-checked table, as server/config.c does
 * for `serve`: a number is a whole number in its range or an error that names the option, the range
 * and what was given (`--threads 4x`, `--skip abc`, `--keep 0`), never atoi's silent 4 or 0.
 *
 *     int threads = 1;
 *     const char *model = NULL;
 *     const cli_opt opts[] = {CLI_OPT_STR("--model", &model), CLI_OPT_INT("--threads", &threads, 1, 1024), CLI_OPT_END};
 *     int rc = cli_opts_parse("encode", opts, usage, argc, argv);
 *     if (rc >= 0) return rc;   // --help answered (0) or a usage error (2)
 */
#ifndef ADAPTERD_TOOLS_OPTS_H
#define ADAPTERD_TOOLS_OPTS_H

#include <stdio.h>

typedef enum {
    CLI_STR,    /* const char **dst: the value (argv's storage) */
    CLI_INT,    /* int *dst: a decimal integer in [min, max] */
    CLI_REAL,   /* double *dst: a finite number in [min, max], or (min, max] with open_min */
    CLI_FLAG,   /* int *dst: set to 1; takes no value */
    CLI_LIST,   /* cli_list *dst: each occurrence appended, at most max of them */
    CLI_CHOICE, /* int *dst: the index of the value in choices (NULL-terminated) */
} cli_opt_type;

typedef struct {
    const char **v; /* (max) storage given by the caller */
    int n;
} cli_list;

typedef struct {
    const char *name;            /* "--threads"; a {0} entry ends the table */
    cli_opt_type type;
    void *dst;
    double min, max;             /* CLI_INT, CLI_REAL: the range; CLI_LIST: max entries */
    int open_min;                /* CLI_REAL: min itself is refused */
    const char *const *choices;  /* CLI_CHOICE */
} cli_opt;

/* Table entries (designated, so each names only what its type uses). */
#define CLI_OPT_STR(n, p) {.name = (n), .type = CLI_STR, .dst = (p)}
#define CLI_OPT_FLAG(n, p) {.name = (n), .type = CLI_FLAG, .dst = (p)}
#define CLI_OPT_INT(n, p, lo, hi) {.name = (n), .type = CLI_INT, .dst = (p), .min = (lo), .max = (hi)}
#define CLI_OPT_REAL(n, p, lo, hi, open) {.name = (n), .type = CLI_REAL, .dst = (p), .min = (lo), .max = (hi), .open_min = (open)}
#define CLI_OPT_LIST(n, l, most) {.name = (n), .type = CLI_LIST, .dst = (l), .max = (most)}
#define CLI_OPT_CHOICE(n, p, names) {.name = (n), .type = CLI_CHOICE, .dst = (p), .choices = (names)}
#define CLI_OPT_END {.name = NULL}

/* Bounds every subcommand states the same way: engine threads, and layers (a model's own count is
 * checked once it is loaded). */
#define CLI_MAX_THREADS 1024
#define CLI_MAX_LAYERS 1000

/* The default of --threads: every online core (1 when that cannot be read). */
int cli_default_threads(void);

/* Parses argv[1..argc-1] (argv[0] is the subcommand) against opts, setting each destination as it
 * goes. Returns -1 when the command should go on; 0 after usage(stdout) when --help or -h was given
 * (nothing else is checked); 2, the usage error status, after a line "adapterd CMD: ..." on stderr
 * for an unknown option, a missing value, or a value out of its type or range. */
int cli_opts_parse(const char *cmd, const cli_opt *opts, void (*usage)(FILE *), int argc, char **argv);

#endif
