/* bench_tokenizer.c - tokenizer throughput of adapterd next to transformers.js, in one run.
 *
 * For each model (bert-base-uncased, roberta-base by default) it tokenizes every AG News text
 * (text column of agnews_test.tsv) single-threaded with the default parameters, once to warm up
 * and then --reps times, and reports the median pass as MB/s and sentences/s. It then runs the
 * transformers.js peer (bench_transformers.mjs, same texts, same repetitions, also one thread) and
 * prints its numbers, the ratio, the token counts of both (they must match: the same ids are
 * produced) and the machine. The peer is skipped with a message when node or transformers.js is
 * missing. Usage:
 *   bench_tokenizer [--data agnews_test.tsv] [--fixtures DIR] [--reps N] [--models a,b] [--no-node]
 *                   [--modules DIR_WITH_NODE_MODULES] [--peer bench_transformers.mjs] [--threads N]
 * --threads N adds a row with N threads sharing one tokenizer (each takes a slice of the texts),
 * which shows how the shared, sharded BPE cache scales. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/tokenizer.h"

#ifndef BENCH_DATA
#define BENCH_DATA "../shared/data/datasets/agnews_test.tsv"
#endif
#ifndef BENCH_FIXTURES
#define BENCH_FIXTURES "../shared/data/tokenizers"
#endif
#ifndef BENCH_PEER
#define BENCH_PEER "bench/tokenizer/bench_transformers.mjs"
#endif
#ifndef BENCH_MODULES
#define BENCH_MODULES "tests/parity/tokenizer"
#endif

typedef struct {
    char **text;
    size_t *len;
    size_t n, bytes;
} corpus;

static int load_corpus(const char *path, corpus *c) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    size_t alloc = 0;
    memset(c, 0, sizeof *c);
    while ((got = getline(&line, &cap, f)) > 0) {
        size_t n = (size_t)got;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        char *tab = NULL;
        for (size_t i = n; i-- > 0;)
            if (line[i] == '\t') {
                tab = line + i;
                break;
            }
        if (tab) n = (size_t)(tab - line);
        if (!n) continue;
        if (c->n == alloc) {
            alloc = alloc ? alloc * 2 : 1024;
            c->text = realloc(c->text, alloc * sizeof *c->text);
            c->len = realloc(c->len, alloc * sizeof *c->len);
            if (!c->text || !c->len) return -1;
        }
        c->text[c->n] = malloc(n + 1);
        if (!c->text[c->n]) return -1;
        memcpy(c->text[c->n], line, n);
        c->text[c->n][n] = '\0';
        c->len[c->n++] = n;
        c->bytes += n;
    }
    free(line);
    fclose(f);
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One pass over the corpus; returns the token count or -1. */
static long pass(const eng_tokenizer *tok, const corpus *c) {
    long tokens = 0;
    eng_tok_params p = eng_tok_default_params();
    p.truncation = ENG_TOK_TRUNCATE_NONE; /* transformers.js's encode() does not truncate either */
    for (size_t i = 0; i < c->n; i++) {
        eng_tok_encoding e;
        eng_err err;
        if (eng_tok_encode(tok, c->text[i], c->len[i], NULL, 0, &p, &e, &err)) {
            fprintf(stderr, "bench_tokenizer: text %zu: %s\n", i, err.msg);
            return -1;
        }
        tokens += (long)e.n;
        eng_tok_encoding_free(&e);
    }
    return tokens;
}

typedef struct {
    const eng_tokenizer *tok;
    corpus slice;
    long tokens;
} slice_arg;

static void *slice_main(void *p) {
    slice_arg *a = p;
    a->tokens = pass(a->tok, &a->slice);
    return NULL;
}

/* One pass with n threads over contiguous slices; returns the total token count or -1. */
static long pass_threads(const eng_tokenizer *tok, const corpus *c, int n) {
    pthread_t th[64];
    slice_arg arg[64];
    size_t per = (c->n + (size_t)n - 1) / (size_t)n;
    for (int i = 0; i < n; i++) {
        size_t b = per * (size_t)i < c->n ? per * (size_t)i : c->n;
        size_t e = b + per < c->n ? b + per : c->n;
        arg[i] = (slice_arg){tok, {c->text + b, c->len + b, e - b, 0}, 0};
        pthread_create(&th[i], NULL, slice_main, &arg[i]);
    }
    long total = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (arg[i].tokens < 0) total = -1;
        else if (total >= 0) total += arg[i].tokens;
    }
    return total;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *v = strchr(line, ':');
            if (v) {
                v += 2;
                v[strcspn(v, "\n")] = '\0';
                snprintf(out, n, "%s", v);
            }
            break;
        }
    fclose(f);
}

/* Runs the node peer; fills median seconds and token count, returns 0, or -1 with a reason. */
static int run_peer(const char *peer, const char *modules, const char *fixtures, const char *data, const char *model,
                    int reps, double *med, long *tokens, char *why, size_t why_n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "node '%s' --modules '%s' --fixtures '%s' --data '%s' --model '%s' --reps %d 2>&1", peer,
             modules, fixtures, data, model, reps);
    if (system("command -v node >/dev/null 2>&1")) {
        snprintf(why, why_n, "node is not installed");
        return -1;
    }
    FILE *p = popen(cmd, "r");
    if (!p) {
        snprintf(why, why_n, "cannot run node");
        return -1;
    }
    char buf[1 << 14];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = '\0';
    int st = pclose(p);
    char *j = strstr(buf, "{\"times_s\":[");
    if (st || !j) {
        snprintf(why, why_n, "transformers.js peer failed (install it: cd %s && npm ci --ignore-scripts): %.300s", modules,
                 buf);
        return -1;
    }
    double t[64];
    int k = 0;
    char *s = j + strlen("{\"times_s\":[");
    while (k < 64 && *s && *s != ']') {
        t[k++] = strtod(s, &s);
        if (*s == ',') s++;
    }
    char *tk = strstr(j, "\"tokens\":");
    *tokens = tk ? strtol(tk + 9, NULL, 10) : -1;
    if (!k) {
        snprintf(why, why_n, "cannot parse the peer's output: %.200s", j);
        return -1;
    }
    *med = median(t, k);
    return 0;
}

int main(int argc, char **argv) {
    const char *data = BENCH_DATA, *fixtures = BENCH_FIXTURES, *peer = BENCH_PEER, *modules = BENCH_MODULES;
    const char *models = "bert-base-uncased,roberta-base";
    int reps = 5, use_node = 1, threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-node")) use_node = 0;
        else if (i + 1 < argc && !strcmp(argv[i], "--data")) data = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--fixtures")) fixtures = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--reps")) reps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--models")) models = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--peer")) peer = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--modules")) modules = argv[++i];
        else {
            fprintf(stderr, "usage: bench_tokenizer [--data TSV] [--fixtures DIR] [--reps N] [--models a,b] [--no-node] "
                            "[--peer MJS] [--modules DIR]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64) reps = 5;
    if (threads < 1 || threads > 64) threads = 1;
    corpus c;
    if (load_corpus(data, &c) || !c.n) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", data);
        return 1;
    }
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    printf("tokenizer throughput on %s: %zu texts, %.2f MB; median of %d passes after 1 warm-up, 1 thread\n", data, c.n,
           (double)c.bytes / 1e6, reps);
    printf("machine: %s, %ld cpus\n", cpu, sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-18s %-16s %10s %14s %10s %9s\n", "model", "tokenizer", "MB/s", "sentences/s", "tokens", "speedup");

    char list[256];
    snprintf(list, sizeof list, "%s", models);
    int rc = 0;
    for (char *m = strtok(list, ","); m; m = strtok(NULL, ",")) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", fixtures, m);
        eng_err err;
        eng_tokenizer *tok;
        if (eng_tokenizer_load(dir, &tok, &err)) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        long tokens = pass(tok, &c);
        if (tokens < 0) return 1;
        double t[64];
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            if (pass(tok, &c) != tokens) return 1;
            t[r] = now() - t0;
        }
        double med = median(t, reps);
        printf("%-18s %-16s %10.2f %14.0f %10ld %9s\n", m, "adapterd", (double)c.bytes / med / 1e6, (double)c.n / med,
               tokens, "");
        if (threads > 1) {
            double tt[64];
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                if (pass_threads(tok, &c, threads) != tokens) return 1;
                tt[r] = now() - t0;
            }
            double mt = median(tt, reps);
            char label[32];
            snprintf(label, sizeof label, "adapterd x%d thr", threads);
            printf("%-18s %-16s %10.2f %14.0f %10ld %8.2fx\n", m, label, (double)c.bytes / mt / 1e6, (double)c.n / mt,
                   tokens, med / mt);
        }
        eng_tokenizer_free(tok);
        fflush(stdout);
        if (!use_node) continue;
        double jmed;
        long jtokens;
        char why[512];
        if (run_peer(peer, modules, fixtures, data, m, reps, &jmed, &jtokens, why, sizeof why)) {
            printf("%-18s %-16s skipped: %s\n", m, "transformers.js", why);
            continue;
        }
        printf("%-18s %-16s %10.2f %14.0f %10ld %8.1fx\n", m, "transformers.js", (double)c.bytes / jmed / 1e6,
               (double)c.n / jmed, jtokens, jmed / med);
        if (jtokens != tokens) {
            printf("  token counts differ: the two tokenizers disagree on this corpus\n");
            rc = 1;
        }
        fflush(stdout);
    }
    return rc;
}
