/* files.c - file and directory existence (engine/files.h), whole small files read into memory and JSON
 * config files (io/tensor_file.h). */
#include "engine/files.h"

#include <jansson.h>
#include <limits.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/tensor_file.h"

/* The configs of a model or adapter folder are kilobytes; a tokenizer.json is read elsewhere. */
#define JSON_CONFIG_MAX_BYTES ((size_t)64 << 20)

int eng_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int eng_dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int eng_file_exists_in(const char *dir, const char *name) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
    return eng_file_exists(p);
}

json_t *eng__json_object_parse(const char *text, size_t len, const char *label, eng_err *err) {
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!j) {
        eng_err_set(err, ENG_FORMAT, "%s: %s", label, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        eng_err_set(err, ENG_FORMAT, "%s: not a JSON object", label);
        return NULL;
    }
    return j;
}

json_t *eng__json_object_load(const char *dir, const char *name, eng_err *err) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/%s: path too long", dir, name);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0;
    if (eng_file_read(p, JSON_CONFIG_MAX_BYTES, &text, &len, err)) return NULL;
    json_t *j = eng__json_object_parse(text, len, p, err);
    free(text);
    return j;
}

int eng_file_read(const char *path, size_t max, char **out, size_t *len, eng_err *err) {
    *out = NULL;
    *len = 0;
    if (!eng_file_exists(path)) return eng_err_set(err, ENG_NOT_FOUND, "%s: not found", path);
    FILE *f = fopen(path, "rb");
    if (!f) return eng_err_set(err, ENG_IO, "%s: %s", path, strerror(errno));
    /* read up to max + 1 bytes: one more than max is enough to refuse */
    size_t lim = max < SIZE_MAX - 1 ? max + 1 : SIZE_MAX - 1, cap = lim < 4096 ? lim : 4096, n = 0;
    char *buf = malloc(cap + 1);
    int rc = buf ? 0 : eng_err_set(err, ENG_NO_MEMORY, "out of memory reading %s", path);
    while (!rc) {
        n += fread(buf + n, 1, cap - n, f);
        if (n > max) {
            rc = eng_err_set(err, ENG_TOO_LARGE, "%s: larger than %zu bytes", path, max);
            break;
        }
        if (n < cap) {
            if (ferror(f)) rc = eng_err_set(err, ENG_IO, "%s: read error", path);
            break;
        }
        size_t ncap = cap > lim / 2 ? lim : cap * 2;
        char *nb = realloc(buf, ncap + 1);
        if (!nb) {
            rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory reading %s", path);
            break;
        }
        buf = nb;
        cap = ncap;
    }
    fclose(f);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}
