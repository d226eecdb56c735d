/* replay_main.c - runs a fuzz harness without libFuzzer: every file named on the command line, and
 * every regular file inside a directory named there, is read and passed once to
 * LLVMFuzzerTestOneInput. Linked into the harnesses of the ordinary build (and its ASan build), so
 * ctest replays the committed seed corpora and crash regressions in seconds. A harness that crashes
 * or trips a sanitizer fails the test; a missing directory is an error, so a renamed corpus cannot
 * silently replay nothing. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* In the sanitizer build, one allocation past 2 GiB is an error, as it is for libFuzzer when it
 * fuzzes (its malloc limit is bench/fuzz/run.sh's -rss_limit_mb=2048): an input that made a parser
 * ask for gigabytes fails its replay too, instead of passing on an overcommitted allocation. Read
 * only by ASan; ASAN_OPTIONS still overrides it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=2048"; }

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return -1;
    }
    /* an exact-size copy, so ASan sees a read past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays the files of dir in name order; returns how many ran, or -1. */
static int run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *nn);
            if (!nn) {
                rc = -1;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == 0 && !stat(path, &st) && S_ISREG(st.st_mode)) {
            if (run_file(path)) rc = -1;
            else ran++;
        }
        free(names[i]);
    }
    free(names);
    return rc ? -1 : ran;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        int n = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) ? -1 : 1;
        if (n < 0) return 1;
        total += n;
    }
    printf("replay: %d inputs, no crash\n", total);
    return 0;
}
