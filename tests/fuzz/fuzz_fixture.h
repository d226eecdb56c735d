/* fuzz_fixture.h - copies of the project's test fixtures into a scratch folder, made once per
 * process, for the harness that needs a writable registry around them (fuzz_task_json.c); the
 * other harnesses read the fixtures in place. ADAPTERD_FIXTURES is the fixtures folder, given by
 * the build. */
#ifndef ADAPTERD_TESTS_FUZZ_FIXTURE_H
#define ADAPTERD_TESTS_FUZZ_FIXTURE_H

#include <dirent.h>
#include <string.h>

#include "fuzz_util.h"

/* Copies every regular file of fixture folder rel (relative to the fixtures) into a new folder dst;
 * returns 0 or -1. */
static inline int fuzz_copy_fixture(const char *rel, const char *dst) {
    char src[1024];
    snprintf(src, sizeof src, "%s/%s", ADAPTERD_FIXTURES, rel);
    if (mkdir(dst, 0700) && access(dst, W_OK)) return -1;
    DIR *d = opendir(src);
    if (!d) return -1;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", src, e->d_name);
        if (!stat(path, &st) && S_ISREG(st.st_mode)) rc = fuzz_copy(path, dst, e->d_name);
    }
    closedir(d);
    return rc;
}

#endif
