/* test_tmp.h - scratch files and folders for tests, under $TMPDIR or else the build folder.
 *
 * No test names a machine path: scratch space is where the environment says, falling back to the
 * build tree (ADAPTERD_BINARY_DIR, defined for every unit test). */
#ifndef ADAPTERD_TESTS_TEST_TMP_H
#define ADAPTERD_TESTS_TEST_TMP_H

#include <stdio.h>
#include <stdlib.h>

/* Writes "<scratch>/adapterd-<tag>-XXXXXX" into buf (a template for mkdtemp / mkstemp); returns buf. */
static inline char *test_tmp_template(char *buf, size_t n, const char *tag) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = ADAPTERD_BINARY_DIR;
    snprintf(buf, n, "%s/adapterd-%s-XXXXXX", base, tag);
    return buf;
}

#endif
