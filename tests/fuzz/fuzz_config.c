/* fuzz_config.c - a model folder's config.json (engine/model/model.c) against real weights: the
 * option byte picks one of the micro fixture models (BERT, RoBERTa, DistilBERT, a bf16 sharded BERT),
 * the rest of the input is its config.json. The text goes to the loader from memory
 * (eng_model_load_config, the parse code eng_model_load runs on the file's bytes) and the weights
 * are read from the fixture folder itself, so an execution writes no file. The loader must refuse
 * every config the weights do not match, naming what is wrong, and never read outside a tensor. A
 * model that loads is run once on a short sequence of in-range ids, so a config that passed
 * validation wrongly shows under ASan. */
#include <stdint.h>
#include <stdlib.h>

#include "engine/model.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The micro fixtures (hidden 8, vocab 32): every loader path of the tiny ones at 1/70 of the bytes,
 * which each execution converts and packs. */
static const char *const models[] = {"models/bert-micro", "models/roberta-micro", "models/distilbert-micro",
                                     "models/bert-micro-bf16-sharded"};
#define N_MODELS (sizeof models / sizeof models[0])

static char dirs[N_MODELS][512];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t k = data[0] % N_MODELS;
    if (!dirs[k][0]) snprintf(dirs[k], sizeof dirs[k], "%s/%s", ADAPTERD_FIXTURES, models[k]);
    const char *dir = dirs[k];
    eng_model *m = NULL;
    eng_err err;
    eng_model_params mp = eng_model_default_params();
    int rc = eng_model_load_config(dir, (const char *)data + 1, size - 1, &mp, &m, &err);
    fuzz_log("config", rc, err.msg);
    if (rc) return 0;
    const eng_config *c = eng_model_config(m);
    int len = c->max_pos - c->pos_offset < 4 ? c->max_pos - c->pos_offset : 4;
    if (len > 0 && c->vocab > 0) {
        int32_t ids[4] = {0, 1 % c->vocab, 2 % c->vocab, 3 % c->vocab};
        int32_t seq_len = len;
        eng_batch b = {.n_seq = 1, .ids = ids, .type_ids = NULL, .seq_len = &seq_len};
        eng_state *st = eng_state_new(1);
        float *hidden = malloc((size_t)len * (size_t)c->hidden * sizeof *hidden);
        if (st && hidden) eng_encode(m, st, &b, hidden, NULL, &err);
        free(hidden);
        eng_state_free(st);
    }
    eng_model_free(m);
    return 0;
}
