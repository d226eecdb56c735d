/* files.c - file and directory existence (engine/files.h) and JSON config files (io/tensor_file.h). */
#include "engine/files.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

#include "io/tensor_file.h"

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

json_t *eng__json_object_load(const char *dir, const char *name, eng_err *err) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "%s/%s: path too long", dir, name);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) {
        int there = eng_file_exists(p);
        eng_err_set(err, there ? ENG_FORMAT : ENG_NOT_FOUND, "%s: %s", p, there ? je.text : "not found");
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        eng_err_set(err, ENG_FORMAT, "%s: not a JSON object", p);
        return NULL;
    }
    return j;
}
