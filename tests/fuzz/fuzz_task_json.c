/* fuzz_task_json.c - a registry version's task.json (adapters_store/meta.c): a scratch registry,
 * made and opened once per process, holds the fixture BERT and one task version whose sub-folders
 * are copies of fixture adapters (four fusion children, a fusion, a head, a LoRA); the input is its
 * task.json. Each execution reads and validates the version with the input as its task.json, from
 * memory (store__version_check: the metadata parse a scan or an upload runs on the file's bytes,
 * then every weight loaded), so nothing is written and the model is not reloaded. The first byte
 * is an option byte kept for the corpus format (it used to pick the registry's residency, which
 * this path does not depend on). A broken task.json must be refused with a reason and the version
 * listed as failed with it (store_versions), never crash; an accepted one is not listed as failed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters_store/store.h"
#include "store_test.h"
#include "fuzz_fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_reg[256], g_ver[512];
static store_registry *g_r;
static int g_ready = -1;

static int setup(void) {
    static const char *const subs[][2] = {
        {"registry/tasks/fusion/1/t0", "t0"},         {"registry/tasks/fusion/1/t1", "t1"},
        {"registry/tasks/fusion/1/t2", "t2"},         {"registry/tasks/fusion/1/t3", "t3"},
        {"registry/tasks/fusion/1/fusion", "fusion"}, {"registry/tasks/fusion/1/head", "head"},
        {"registry/tasks/cls_lora/1/lora", "lora"},
    };
    const char *scratch = fuzz_scratch("taskjson");
    if (!scratch) return -1;
    char p[1024];
    snprintf(g_reg, sizeof g_reg, "%s/reg", scratch);
    snprintf(p, sizeof p, "%s/models", g_reg);
    if (mkdir(g_reg, 0700) || mkdir(p, 0700)) return -1;
    snprintf(p, sizeof p, "%s/models/bert-tiny", g_reg);
    if (fuzz_copy_fixture("registry/models/bert-tiny", p)) return -1;
    snprintf(p, sizeof p, "%s/tasks", g_reg);
    if (mkdir(p, 0700)) return -1;
    snprintf(p, sizeof p, "%s/tasks/t", g_reg);
    if (mkdir(p, 0700)) return -1;
    snprintf(g_ver, sizeof g_ver, "%s/tasks/t/1", g_reg);
    if (mkdir(g_ver, 0700)) return -1;
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_ver, subs[i][1]);
        if (fuzz_copy_fixture(subs[i][0], p)) return -1;
    }
    store_params sp = store_default_params();
    sp.verbose = 0;
    eng_err err;
    return store_open(g_reg, &sp, &g_r, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_ready < 0) g_ready = setup() == 0;
    if (!g_ready || size < 1) return 0;
    eng_err err = {0};
    int rc = store__version_check(g_r, "fz", g_ver, (const char *)data + 1, size - 1, &err);
    fuzz_log("version", rc, err.msg);
    store_version_info v[4];
    int n = store_versions(g_r, "fz", v, 4), failed = 0;
    for (int i = 0; i < n && i < 4; i++) failed += !strcmp(v[i].version, "1") && !strcmp(v[i].state, "failed") && v[i].reason[0];
    if (rc ? !err.msg[0] || failed != 1 : failed != 0) abort(); /* refused: listed once with its reason */
    return 0;
}
