/* head.h - a task's prediction head run on one stream's rows (task/head.c), for the planner. */
#ifndef ADAPTERD_ENGINE_TASK_HEAD_H
#define ADAPTERD_ENGINE_TASK_HEAD_H

#include "engine/task.h"

/* Head on the rows of one stream: x holds (len, H) rows for token heads, the CLS row (1, H) for CLS
 * heads and the pooler's output (1, H) for pooler heads (the caller runs the pooler). out gets
 * (1, num_labels) for sequence heads or (len, num_labels) for token heads. Returns 0 or
 * ENG_NO_MEMORY. */
int eng__head_forward(const eng_model *m, eng_state *st, const eng_head *h, const float *x, int len, float *out,
                     eng_err *err);

#endif
