/* fuzz_task_json.c - a registry version's task.json (adapters_store/store.c): a scratch registry
 * holds the fixture BERT and one task version whose sub-folders are copies of fixture adapters
 * (four fusion children, a fusion, a head, a LoRA); the input is its task.json. The option byte's
 * low bit chooses metadata only (a memory budget: weights load on demand, then once here) or
 * everything loaded at start. A broken task.json must leave the version listed as failed, never
 * crash the scan. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adapters_store/store.h"
#include "fuzz_fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_reg[256], g_ver[512];
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
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_ready < 0) g_ready = setup() == 0;
    if (!g_ready || size < 1) return 0;
    if (fuzz_write(g_ver, "task.json", data + 1, size - 1)) return 0;
    store_params p = store_default_params();
    p.verbose = 0;
    p.memory_budget = data[0] & 1 ? (size_t)64 << 20 : 0;
    store_registry *r = NULL;
    eng_err err;
    int rc = store_open(g_reg, &p, &r, &err);
    fuzz_log("store_open", rc, err.msg);
    if (rc) return 0;
    store_task *t = store_task_acquire(r, "t", 1);
    fuzz_log("task", !t, "no current version");
    if (t) {
        rc = store_task_resident(t) ? 0 : store_task_ensure(r, t, &err);
        fuzz_log("ensure", rc, err.msg);
        store_task_release(t);
    }
    store_free(r);
    return 0;
}
