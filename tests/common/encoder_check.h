/* encoder_check.h - compare the engine with the PyTorch reference's expected outputs.
 *
 * A model directory written by tools/reference/gen_encoder.py holds expected/<case>.safetensors
 * (input_ids, token_type_ids, seq_lens, last_hidden_state, cls, pooler_output when the model has a
 * pooler). For every case the check runs all sequences packed in one batch and compares the hidden
 * states and pooled outputs with the reference, then runs each sequence alone and compares it with
 * its rows of the packed batch. Shared by the unit test (committed tiny fixtures) and the parity
 * test (generated bert-base-sized checkpoints). */
#ifndef ADAPTERD_TESTS_ENCODER_CHECK_H
#define ADAPTERD_TESTS_ENCODER_CHECK_H

#include <stddef.h>

#include "engine/model.h"

typedef struct {
    int cases;           /* expected files checked */
    int sequences;       /* sequences across all cases */
    float max_hidden;    /* largest |engine - reference| over last_hidden_state */
    float max_pooled;    /* ... over pooler_output (or cls) */
    float max_alone;     /* largest |packed - alone| */
    double mean_hidden;  /* mean |engine - reference| over last_hidden_state */
} encoder_check_result;

/* Returns 0 when every value is within tol (and packed-vs-alone within tol_alone), else -1 with a
 * message in msg. */
int encoder_check(const char *model_dir, int threads, float tol, float tol_alone, encoder_check_result *res, char *msg,
                  size_t msg_len);

/* The same with the model loaded with p (a precision; NULL: the defaults). */
int encoder_check_params(const char *model_dir, const eng_model_params *p, int threads, float tol, float tol_alone,
                         encoder_check_result *res, char *msg, size_t msg_len);

/* Loads model_dir's weights with its config.json's first `from` replaced by `to` (a config edit under test);
 * returns the load's status (the model is freed), or -1 when the config lacks `from`. */
int encoder_load_edited(const char *model_dir, const char *from, const char *to, eng_err *err);

#endif
