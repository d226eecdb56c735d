/* cmd_serve.c - `adapterd serve`: load a registry and serve it over HTTP until SIGTERM/SIGINT.
 *
 * Options come from three places, applied by srv_config_load so that flags beat the JSON config
 * file, which beats ADAPTERD_* environment variables; all three use the names of server/config.c's
 * one table. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/platform.h"
#include "cli.h"
#include "server/server.h"
#include "adapters_store/store.h"

/* Blocks from this size on get their own mapping (see cmd_serve). */
#define MMAP_THRESHOLD_BYTES (1 << 20)

/* Help layout: the options' descriptions start at this column and wrap before this width. */
#define HELP_COL 26
#define HELP_WIDTH 112

/* Prints text from column col (the cursor is there), words wrapped before width, each further line
 * indented to col. */
static void print_wrapped(FILE *f, const char *text, int col, int width) {
    int at = col;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (!w) break;
        if (at > col && at + 1 + (int)w > width) {
            fprintf(f, "\n%*s", col, "");
            at = col;
        } else if (at > col) {
            fputc(' ', f);
            at++;
        }
        fwrite(p, 1, w, f);
        at += (int)w;
        p += w;
    }
    fputc('\n', f);
}

/* The help is made from server/config.c's table (srv_config_option_at), so every option the
 * flags, the config file and the environment take is listed. */
static void usage(FILE *f) {
    fprintf(f, "usage: adapterd serve --registry DIR [--OPTION VALUE ...] [--config FILE]\n\n"
               "Serves the tasks of a registry (models/<name>/, tasks/<name>/<version>/) over HTTP/JSON:\n"
               "POST /v1/predict, /v1/embed, /v1/tokenize, GET /v1/tasks, /v1/models, /healthz, /readyz, /metrics,\n"
               "/openapi.json, /docs; text-embeddings-inference's and OpenAI's embeddings routes and the KServe v2\n"
               "routes. SIGTERM/SIGINT drain: readiness turns false, work in flight completes, exit 0.\n\n");
    const srv_config_option *o;
    for (size_t i = 0; (o = srv_config_option_at(i)); i++) {
        int w = fprintf(f, "  --%s %s", o->name, o->arg);
        if (w + 2 > HELP_COL) fprintf(f, "\n%*s", HELP_COL, "");
        else fprintf(f, "%*s", HELP_COL - w, "");
        print_wrapped(f, o->help, HELP_COL, HELP_WIDTH);
    }
    fprintf(f, "  --config FILE");
    fprintf(f, "%*s", HELP_COL - 15, "");
    print_wrapped(f, "JSON object of these options ({\"port\": 8080, \"max-queue\": 64, \"served-model-name\": [\"a\", \"b\"]})",
                  HELP_COL, HELP_WIDTH);
    fprintf(f, "Environment: ADAPTERD_<OPTION> (ADAPTERD_PORT, ADAPTERD_MAX_QUEUE, ADAPTERD_CONFIG, ...).\n"
               "Precedence: flags, then the --config file, then the environment.\n");
}

int cmd_serve(int argc, char **argv) {
    srv_config c = srv_default_config();
    eng_err err = {0};
    /* Every block of 1 MB or more gets its own mapping, returned to the system when freed: adapter
     * weights come and go under the memory budget, and glibc's default (a threshold that grows with
     * each freed block) would serve them from the heap, which then needs malloc_trim; trimming a
     * ~700 MB heap stalled other requests (bench/store: p99 1.2-1.6x while a large task reloads). */
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    }
    if (srv_config_load(&c, argc - 1, (const char *const *)argv + 1, &err)) {
        fprintf(stderr, "adapterd serve: %s\n", err.msg);
        usage(stderr);
        return 2;
    }
    if (!c.registry[0]) {
        fprintf(stderr, "adapterd serve: --registry DIR is required\n");
        usage(stderr);
        return 2;
    }
    if (srv_tls_check(&c, &err)) {
        fprintf(stderr, "adapterd serve: %s\n", err.msg);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* a file size limit (ulimit -f, a container's) fails the write with EFBIG, answered as a full disk */
    signal(SIGXFSZ, SIG_IGN);
    store_params sp = store_default_params();
    sp.allow_skip = c.allow_skip;
    sp.memory_budget = c.adapter_memory;
    sp.load_rate = c.load_rate;
    sp.load_burst = c.load_burst;
    if (c.precision[0]) {
        int prec = eng_precision_parse(c.precision);
        if (prec < 0) {
            fprintf(stderr, "adapterd serve: --precision %s: expected fp32, bf16 or int8\n", c.precision);
            return 2;
        }
        sp.precision = (eng_precision)prec;
    }
    store_registry *reg = NULL;
    if (store_open(c.registry, &sp, &reg, &err)) {
        fprintf(stderr, "adapterd serve: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "adapterd: OpenBLAS core %s\n", eng_blas_core());
    int rc = srv_run(&c, reg, &err);
    store_free(reg);
    if (rc) {
        fprintf(stderr, "adapterd serve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
