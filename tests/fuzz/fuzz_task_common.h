/* fuzz_task_common.h - the body of the adapter_config.json and head_config.json harnesses: one
 * fuzzed file written into a copy of a fixture adapter folder (its weights and other configs kept),
 * and the task loaded against the fixture BERT (engine/task loaders); a task that loads is queried
 * and freed. FUZZ_FILE names the fuzzed file. The option byte picks the fixture folder. */
#ifndef ADAPTERD_TESTS_FUZZ_TASK_COMMON_H
#define ADAPTERD_TESTS_FUZZ_TASK_COMMON_H

#include <stdint.h>
#include <stdlib.h>

#include "engine/model.h"
#include "engine/task.h"
#include "fuzz_fixture.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Saved folders of every form the loaders read: bottleneck (safetensors and .bin), LoRA, PEFT
 * LoRA/AdaLoRA, IA3, prefix, AdaMix, parallel, heads of each kind. */
static const char *const fixtures[] = {
    "adapters/bert-tiny/seq_bn_st/adapters/sst",        "adapters/bert-tiny/lora_ah/adapters/lora",
    "adapters/bert-tiny/peft_lora/adapters/peft_task",  "adapters/bert-tiny/head_pooler/adapters/pool",
    "adapters/bert-tiny/prefix/adapters/prefix_task",   "adapters/bert-tiny/ia3/adapters/ia3",
    "adapters/bert-tiny/head_tagging/adapters/ner",     "adapters/bert-tiny/head_qa/adapters/squad",
    "adapters/bert-tiny/head_multilabel/adapters/ml",   "adapters/bert-tiny/head_regression/adapters/reg",
    "adapters/bert-tiny/peft_adalora/adapters/peft_task", "adapters/bert-tiny/adamix_seq_bn/adapters/sst",
    "adapters/bert-tiny/par_bn/adapters/par",           "adapters/bert-tiny/seq_bn_bin/adapters/sst",
};
#define N_FIXTURES (sizeof fixtures / sizeof fixtures[0])

static char g_dirs[N_FIXTURES][512];
static int g_ok[N_FIXTURES];
static eng_model *g_model;
static int g_ready = -1;

static int setup(void) {
    const char *scratch = fuzz_scratch("task");
    eng_err err;
    char model[1024];
    snprintf(model, sizeof model, "%s/models/bert-tiny", ADAPTERD_FIXTURES);
    if (!scratch || eng_model_load(model, &g_model, &err)) return -1;
    int any = 0;
    for (size_t i = 0; i < N_FIXTURES; i++) {
        snprintf(g_dirs[i], sizeof g_dirs[i], "%s/a%zu", scratch, i);
        g_ok[i] = fuzz_copy_fixture(fixtures[i], g_dirs[i]) == 0; /* a renamed fixture is skipped */
        any |= g_ok[i];
    }
    return any ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_ready < 0) g_ready = setup() == 0;
    if (!g_ready || size < 1) return 0;
    size_t k = data[0] % N_FIXTURES;
    if (!g_ok[k]) return 0;
    const char *dir = g_dirs[k];
    if (fuzz_write(dir, FUZZ_FILE, data + 1, size - 1)) return 0;
    eng_task_params p = eng_task_default_params();
    eng_task *t = NULL;
    eng_err err;
    const char *dirs[1] = {dir};
    int rc = eng_task_load(g_model, dirs, 1, &p, &t, &err);
    fuzz_log(FUZZ_FILE, rc, err.msg);
    if (rc == 0) {
        fuzz_keep(eng_task_bytes(t) + (size_t)eng_task_first_layer(t) + strlen(eng_task_name(t)) + strlen(eng_task_kind(t)));
        eng_task_free(t);
    }
    return 0;
}

#endif
