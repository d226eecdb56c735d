/* test_opts.c - tools/adapterd/opts.c, the subcommands' one option table: every type, its range and
 * its refusals on the parser alone, then every subcommand of the built binary refusing a bad number
 * with exit status 2 and a line naming the option, its range and the value (atoi read `--threads 4x`
 * as 4 and `--skip abc` as 0). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "opts.h"

#define BIN ADAPTERD_BINARY_DIR "/tools/adapterd"
#define REG ADAPTERD_FIXTURES "/registry"

typedef struct {
    const char *model, *adapters[3];
    int threads, keep, flag, choice;
    double density;
    cli_list list;
} vals;

static int usage_calls;
static void usage(FILE *f) {
    (void)f;
    usage_calls++;
}

/* cli_opts_parse over a test table: -1 parsed, 0 --help answered, 2 a usage error. */
static int parse(vals *v, const char *const *args) {
    static const char *const colours[] = {"red", "green", NULL};
    *v = (vals){.threads = 7, .keep = 1, .choice = -1, .density = -1};
    v->list.v = v->adapters;
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &v->model),
        CLI_OPT_INT("--threads", &v->threads, 1, 1024),
        CLI_OPT_INT("--keep", &v->keep, -2, 5),
        CLI_OPT_FLAG("--flag", &v->flag),
        CLI_OPT_CHOICE("--colour", &v->choice, colours),
        CLI_OPT_REAL("--density", &v->density, 0, 1, 1),
        CLI_OPT_LIST("--adapter", &v->list, 3),
        CLI_OPT_END,
    };
    char *argv[32] = {"test"};
    int argc = 1;
    for (; args[argc - 1]; argc++) argv[argc] = (char *)args[argc - 1];
    return cli_opts_parse("test", opts, usage, argc, argv);
}

Test(opts, every_type_parses_in_range, .init = cr_redirect_stderr) {
    vals v;
    const char *ok[] = {"--model", "m", "--threads", "4", "--keep", "-2", "--flag", "--colour", "green", "--density", "1",
                        "--adapter", "a", "--adapter", "b", NULL};
    cr_assert_eq(parse(&v, ok), -1);
    cr_expect_str_eq(v.model, "m");
    cr_expect_eq(v.threads, 4);
    cr_expect_eq(v.keep, -2);
    cr_expect_eq(v.flag, 1);
    cr_expect_eq(v.choice, 1);
    cr_expect_eq(v.density, 1.0);
    cr_expect_eq(v.list.n, 2);
    cr_expect_str_eq(v.adapters[1], "b");
    const char *none[] = {NULL};
    cr_assert_eq(parse(&v, none), -1);
    cr_expect_eq(v.threads, 7, "defaults stay when an option is not given");
    const char *help[] = {"--threads", "x", "-h", NULL};
    usage_calls = 0;
    cr_expect_eq(parse(&v, help), 0, "--help wins over anything else");
    cr_expect_eq(usage_calls, 1, "and prints the usage");
}

Test(opts, bad_values_are_usage_errors, .init = cr_redirect_stderr) {
    static const char *const bad[][3] = {
        {"--threads", "4x", NULL},   {"--threads", "", NULL},      {"--threads", "0", NULL},
        {"--threads", "1025", NULL}, {"--threads", " 4", NULL},    {"--threads", "99999999999999999999", NULL},
        {"--keep", "-3", NULL},      {"--keep", "2.0", NULL},      {"--density", "0", NULL},
        {"--density", "1.01", NULL}, {"--density", "abc", NULL},   {"--density", "nan", NULL},
        {"--colour", "blue", NULL},  {"--threads", NULL, NULL},    {"--unknown", "1", NULL},
        {"threads", "1", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        vals v;
        cr_expect_eq(parse(&v, bad[i]), 2, "%s '%s' should be refused", bad[i][0], bad[i][1] ? bad[i][1] : "(none)");
    }
    vals v;
    const char *four[] = {"--adapter", "a", "--adapter", "b", "--adapter", "c", "--adapter", "d", NULL};
    cr_expect_eq(parse(&v, four), 2, "a list holds at most its bound");
}

/* Runs the binary with args (stderr into the output); returns the exit status, output in out. */
static int run(const char *args, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", BIN, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t k = fread(out, 1, n - 1, p);
    out[k] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(opts, every_subcommand_refuses_bad_numbers) {
    static const char *const cases[][2] = {
        {"predict --model " REG "/models/bert-tiny --adapter " REG "/tasks/reg/1/reg --text x --threads 4x", "--threads expects an integer in 1..1024, got '4x'"},
        {"predict --model " REG "/models/bert-tiny --adapter " REG "/tasks/reg/1/reg --text x --skip abc", "--skip expects an integer in 0..1000, got 'abc'"},
        {"predict --model " REG "/models/bert-tiny --adapter " REG "/tasks/reg/1/reg --text x --skip 3", "--skip expects an integer in 0..2 (the model's layers), got '3'"},
        {"predict --text x --aggregation max", "--aggregation must be one of none, simple, first; got 'max'"},
        {"encode --model " REG "/models/bert-tiny --text x --max-length 8k", "--max-length expects an integer in 0..1048576, got '8k'"},
        {"encode --model " REG "/models/bert-tiny --text x --threads 0", "--threads expects an integer in 1..1024, got '0'"},
        {"tokenize --model " REG "/models/bert-tiny --text x --max-length -1", "--max-length expects an integer in 1..1073741824, got '-1'"},
        {"tokenize --model " REG "/models/bert-tiny --text x --truncation middle", "--truncation must be one of"},
        {"fusion-prune --keep 0", "--keep expects an integer in 1..16, got '0'"},
        {"fusion-prune --max-texts 1e3", "--max-texts expects an integer in 1..1048576, got '1e3'"},
        {"fusion-prune --threads -4", "--threads expects an integer in 1..1024, got '-4'"},
        {"sparsify --adapter a --out b --density 0.2x", "--density expects a number, got '0.2x'"},
        {"sparsify --adapter a --out b --density ' 0.2'", "--density expects a number, got ' 0.2'"},
        {"predict --threads", "--threads needs a value"},
        {"encode --bogus 1", "unknown option '--bogus'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[8192];
        int rc = run(cases[i][0], out, sizeof out);
        cr_expect_eq(rc, 2, "adapterd %s: exit %d, want 2 (%s)", cases[i][0], rc, out);
        cr_expect(strstr(out, cases[i][1]), "adapterd %s: '%s' lacks '%s'", cases[i][0], out, cases[i][1]);
    }
    char out[8192];
    cr_expect_eq(run("predict --help", out, sizeof out), 0);
    cr_expect(strstr(out, "usage: adapterd predict"), "%s", out);
}
