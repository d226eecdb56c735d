/* main.c - the adapterd command line: one binary, one subcommand per job.
 *
 * The only place in adapterd that may call exit(): library code returns status codes. */
#include "cli.h"

#include "engine/platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} cli_command;

static const cli_command commands[] = {
    {"encode", cmd_encode, "run the encoder on a text or token ids and print its outputs as JSON"},
    {"fusion-prune", cmd_fusion_prune, "calibrate an AdapterFusion and keep its k most-attended adapters"},
    {"predict", cmd_predict, "run task adapters + heads on a text and print labels and scores as JSON"},
    {"rollout", cmd_rollout, "start, show, promote or abort a task's canary or shadow version on a running server"},
    {"serve", cmd_serve, "serve a registry of tasks over HTTP/JSON (and KServe v2)"},
    {"sparsify", cmd_sparsify, "write a sparse copy of a bottleneck adapter (largest weights kept)"},
    {"tokenize", cmd_tokenize, "tokenize a text (or pair) and print ids, tokens and offsets as JSON"},
    {"version", cmd_version, "print the version and the BLAS core in use"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: adapterd <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`adapterd <command> --help` describes a command's options.\n");
}

/* Takes a global option `flag VALUE` (any position, any command) out of argv, setting *value to the
 * last one given; -1, with a line on stderr, when the flag ends the command line. */
static int take_global(int *argc, char **argv, const char *flag, const char *what, const char **value) {
    int j = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strcmp(argv[i], flag)) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "adapterd: %s needs %s\n", flag, what);
                return -1;
            }
            *value = argv[++i];
            continue;
        }
        argv[j++] = argv[i];
    }
    argv[j] = NULL;
    *argc = j;
    return 0;
}

/* --blas-core NAME (any position, any command): OpenBLAS reads OPENBLAS_CORETYPE only when it
 * loads, so set it and re-execute this binary without the option. "auto" lets OpenBLAS detect,
 * and so does no option at all, except that a detection older than the CPU is corrected:
 * OpenBLAS falls back to a generic SSE3 core (Prescott) on CPU models newer than its release, and
 * every product it runs (adapters, heads, fusion, pooler) is left on SSE3. eng_blas_core_better() picks
 * the core from the CPU's features (Cooperlake, SkylakeX, Haswell); it is set the same way, with
 * a line on stderr. An OPENBLAS_CORETYPE from the environment or a named --blas-core is kept. */
static int apply_blas_core(int *argc, char **argv) {
    const char *core = NULL;
    if (take_global(argc, argv, "--blas-core", "a name (auto, Haswell, SkylakeX, Cooperlake, ...)", &core)) return -1;
    const char *cur = getenv("OPENBLAS_CORETYPE");
    if (!core || (!strcasecmp(core, "auto") && !cur)) {
        const char *better = cur ? NULL : eng_blas_core_better();
        if (!better) return 0;
        fprintf(stderr, "adapterd: OpenBLAS chose its %s kernels, older than this CPU: using %s "
                "(OPENBLAS_CORETYPE or --blas-core NAME to choose)\n", eng_blas_core(), better);
        setenv("OPENBLAS_CORETYPE", better, 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "adapterd: cannot re-execute to apply OPENBLAS_CORETYPE=%s\n", better);
        return -1;
    }
    int want_auto = !strcasecmp(core, "auto");
    if (want_auto ? cur == NULL : (cur && !strcmp(cur, core))) return 0;
    if (want_auto)
        unsetenv("OPENBLAS_CORETYPE");
    else
        setenv("OPENBLAS_CORETYPE", core, 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "adapterd: cannot re-execute to apply --blas-core\n");
    return -1;
}

/* --cpu-level NAME (any position, any command) caps the engine's kernels at a level (baseline,
 * avx2, avx_vnni, avx512, avx512_vnni, avx512_bf16, native), as ADAPTERD_CPU_LEVEL does; the flag
 * wins over the variable. A level this CPU lacks, or an unknown name, is an error either way. */
static int apply_cpu_level(int *argc, char **argv) {
    const char *level = NULL;
    if (take_global(argc, argv, "--cpu-level", "a level (baseline, avx2, avx512, ..., native)", &level)) return -1;
    const char *name = level ? level : getenv("ADAPTERD_CPU_LEVEL");
    char msg[256];
    if (name && eng_cpu_level_apply(name, msg, sizeof msg)) {
        fprintf(stderr, "adapterd: %s: %s\n", level ? "--cpu-level" : "ADAPTERD_CPU_LEVEL", msg);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (apply_blas_core(&argc, argv)) return 2;
    if (apply_cpu_level(&argc, argv)) return 2;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "adapterd: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
