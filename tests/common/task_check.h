/* task_check.h - compare a task (adapters + head) with the PyTorch reference's expected logits.
 *
 * A case directory written by tools/reference/gen_adapters.py holds setup.json (backbone, adapter
 * folders, fusion, head, skips) and expected/skip<N>.safetensors (input_ids, token_type_ids,
 * seq_lens, logits). The check loads the task as adapterd would, runs all sequences of a file as
 * one multi-input eng_run at skip N, and compares the logits. Adapter, fusion and head paths in
 * setup.json are relative to the case folder or absolute (real checkpoints read in place); an
 * optional "labels" array must equal the head's label names in logit order. */
#ifndef ADAPTERD_TESTS_TASK_CHECK_H
#define ADAPTERD_TESTS_TASK_CHECK_H

#include <stddef.h>

typedef struct {
    int files;         /* expected files checked */
    float max_diff;    /* largest |engine - reference| over logits */
    float max_logit;   /* largest |reference logit|, to see the check is not trivial */
} task_check_result;

/* root: folder that setup.json's relative backbone path is relative to. Returns 0 when every logit
 * is within tol, else -1 with a message. */
int task_check(const char *root, const char *case_dir, int threads, float tol, task_check_result *res, char *msg,
               size_t msg_len);

/* The same with an explicit eng_task_params.sparse_threshold (0: every bottleneck matrix sparse). */
int task_check_sparse(const char *root, const char *case_dir, int threads, float tol, float sparse_threshold,
                      task_check_result *res, char *msg, size_t msg_len);

#endif
