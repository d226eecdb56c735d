/* predict.h - the inference routes up to the scheduler (see predict.c). */
#ifndef ADAPTERD_SERVER_PREDICT_H
#define ADAPTERD_SERVER_PREDICT_H

#include "internal.h"

/* MHD thread, body complete: POST /v1/predict (task NULL) or /v2/models/{task}/infer (task, task_len
 * from the URL). Answers errors at once; otherwise suspends the connection and submits a job (or
 * offloads the loads of tasks that are not resident and runs again when they are). Also the entry
 * for a request resumed after such loads. */
enum MHD_Result srv__predict(srv_request *r, const char *task, size_t task_len);

#endif
