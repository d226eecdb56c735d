/* fuzz_tar.c - the upload archive reader (server/tar.c): ustar, pax, GNU long names, base-256
 * sizes, gzip. Each input is extracted into a fresh folder of the scratch directory under small
 * limits, then the folder is removed. Besides memory safety the harness checks that nothing was
 * written beside the extraction folder (an entry escaping with '..' or an absolute path) and that
 * the limits held. */
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_BYTES (1u << 20)

static size_t g_bytes;

static int sum_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)path, (void)ftw;
    if (type == FTW_F) g_bytes += (size_t)sb->st_size;
    return 0;
}

static int rm_visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    remove(path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *scratch = fuzz_scratch("tar");
    if (!scratch) return 0;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/x", scratch);
    if (mkdir(dir, 0700)) return 0;
    srv_tar_limits lim = {.max_bytes = MAX_BYTES, .max_entries = 64, .max_ratio = 100};
    int n_files = 0;
    eng_err err;
    int rc = srv__untar(data, size, dir, &lim, &n_files, &err);
    fuzz_log("untar", rc, err.msg);
    g_bytes = 0;
    nftw(dir, sum_visit, 16, FTW_PHYS);
    if (rc == 0 && (n_files < 0 || n_files > lim.max_entries || g_bytes > MAX_BYTES)) abort();
    nftw(dir, rm_visit, 16, FTW_DEPTH | FTW_PHYS);
    /* the scratch directory held only the extraction folder: anything else escaped */
    DIR *d = opendir(scratch);
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) abort();
        closedir(d);
    }
    return 0;
}
