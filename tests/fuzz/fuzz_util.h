/* fuzz_util.h - helpers shared by the fuzz harnesses: splitting one input into several files, and
 * a scratch directory under the working directory for the two harnesses that need one (a scratch
 * registry, tar extraction). */
#ifndef ADAPTERD_TESTS_FUZZ_UTIL_H
#define ADAPTERD_TESTS_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

/* Keeps a value computed from what a parser returned, so the reads that produced it stay. */
static inline void fuzz_keep(unsigned long v) { __asm__ volatile("" : : "r"(v) : "memory"); }

/* With FUZZ_VERBOSE set, prints what one execution ended with (to check seeds reach deep code). */
static inline void fuzz_log(const char *what, int rc, const char *msg) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "%s: %s\n", what, rc ? msg : "ok");
}

/* Separates the parts of a multi-file input (chosen unlikely in text and JSON; in the dictionaries). */
#define FUZZ_SEP "\n@@@@\n"
#define FUZZ_SEP_LEN 6
#define FUZZ_MAX_PARTS 4

typedef struct {
    const uint8_t *p;
    size_t n;
} fuzz_part;

/* Splits data at FUZZ_SEP into at most max parts (the last part keeps any further separators);
 * parts past the end are empty. Returns the number of separators found plus one. */
static inline int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int max) {
    int k = 0;
    size_t start = 0;
    for (int i = 0; i < max; i++) parts[i].p = data, parts[i].n = 0;
    for (size_t i = 0; k < max - 1 && size >= FUZZ_SEP_LEN && i + FUZZ_SEP_LEN <= size; i++) {
        if (!memcmp(data + i, FUZZ_SEP, FUZZ_SEP_LEN)) {
            parts[k].p = data + start, parts[k].n = i - start;
            k++;
            start = i + FUZZ_SEP_LEN;
            i = start - 1;
        }
    }
    parts[k].p = data + start, parts[k].n = size - start;
    return k + 1;
}

/* Copies the file src to dir/name; returns 0 or -1. */
static inline int fuzz_copy(const char *src, const char *dir, const char *name) {
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *o = fopen(path, "wb");
    int rc = o ? 0 : -1;
    char buf[65536];
    for (size_t n; rc == 0 && (n = fread(buf, 1, sizeof buf, f)) > 0;)
        if (fwrite(buf, 1, n, o) != n) rc = -1;
    fclose(f);
    if (o && fclose(o)) rc = -1;
    return rc;
}

static inline int fuzz__rm_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    remove(path);
    return 0;
}

static char fuzz__scratch_dir[256];

static inline void fuzz__scratch_remove(void) {
    if (fuzz__scratch_dir[0]) nftw(fuzz__scratch_dir, fuzz__rm_visit, 16, FTW_DEPTH | FTW_PHYS);
}

/* A scratch directory "fuzz-<tag>-<pid>" under the working directory, made once per process
 * (relative, so nothing of the machine's layout appears in the harnesses). Returns its path or
 * NULL. Removed with its contents at exit. */
static inline const char *fuzz_scratch(const char *tag) {
    char *dir = fuzz__scratch_dir;
    if (!dir[0]) {
        snprintf(dir, sizeof fuzz__scratch_dir, "fuzz-%s-%ld", tag, (long)getpid());
        if (mkdir(dir, 0700) && access(dir, W_OK)) {
            dir[0] = '\0';
            return NULL;
        }
        atexit(fuzz__scratch_remove);
    }
    return dir;
}

#endif
