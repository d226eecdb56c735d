/* fuzz_task_common.h - the body of the adapter_config.json and head_config.json harnesses: a task
 * loaded against the fixture BERT (engine/task loaders) from a fixture adapter folder (its weights
 * and other configs as saved) with the fuzzed input standing for one config file of it;
 * a task that loads is queried and freed. FUZZ_FILE names the fuzzed file. The option byte picks the
 * fixture folder. The input reaches the loader from memory (eng__task_load_texts: the parse code the
 * file's bytes go through), so an execution writes no file. With FUZZ_HEAD_DIR the picked folder is
 * the task's head folder (eng_task_params.head_dir, as task.json's "head" names one) over the
 * first fixture's adapter, so each execution loads that folder's head, not its adapter again. */
#ifndef ADAPTERD_TESTS_FUZZ_TASK_COMMON_H
#define ADAPTERD_TESTS_FUZZ_TASK_COMMON_H

#include <stdint.h>
#include <stdlib.h>

#include "engine/model.h"
#include "engine/task.h"
#include "fuzz_util.h"
#include "task/task_impl.h"

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
static eng_model *g_model;
static int g_ready = -1;

static int setup(void) {
    eng_err err;
    char model[1024];
    snprintf(model, sizeof model, "%s/models/bert-tiny", ADAPTERD_FIXTURES);
    if (eng_model_load(model, &g_model, &err)) return -1;
    for (size_t i = 0; i < N_FIXTURES; i++) snprintf(g_dirs[i], sizeof g_dirs[i], "%s/%s", ADAPTERD_FIXTURES, fixtures[i]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_ready < 0) g_ready = setup() == 0;
    if (!g_ready || size < 1) return 0;
    const char *dir = g_dirs[data[0] % N_FIXTURES];
    eng_task_params p = eng_task_default_params();
    eng_task *t = NULL;
    eng_err err;
    const char *dirs[1] = {dir};
#ifdef FUZZ_HEAD_DIR
    dirs[0] = g_dirs[0];
    p.head_dir = dir;
#endif
    eng__task_text text = {.dir = dir, .name = FUZZ_FILE, .text = (const char *)data + 1, .len = size - 1};
    int rc = eng__task_load_texts(g_model, dirs, 1, &p, &text, 1, &t, &err);
    fuzz_log(FUZZ_FILE, rc, err.msg);
    if (rc == 0) {
        fuzz_keep(eng_task_bytes(t) + (size_t)eng_task_first_layer(t) + strlen(eng_task_name(t)) + strlen(eng_task_kind(t)));
        eng_task_free(t);
    }
    return 0;
}

#endif
