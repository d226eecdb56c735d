/* rollout.h - a task's candidate version beside its current one, compared live (see rollout.c). */
#ifndef ADAPTERD_SERVER_ROLLOUT_H
#define ADAPTERD_SERVER_ROLLOUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adapters_store/store.h"
#include "proto/proto.h"

typedef struct srv_rollouts srv_rollouts;

/* Rollouts compared at once (task and rollout id); the least recently touched is forgotten beyond. */
#define SRV_ROLLOUTS_MAX 64
/* Labels a confusion matrix keeps apart; a label at or above it is counted as the last one. */
#define SRV_ROLLOUT_LABELS 16

/* sample_max: disagreements kept per rollout for review (0: none); sample_text: with the input's text
 * (cut), else the request id and input index only. NULL when out of memory. */
srv_rollouts *srv__rollouts_new(int sample_max, bool sample_text);
void srv__rollouts_free(srv_rollouts *t);

/* The bucket of a request's routing in 0..9999: FNV-1a of the route key when the request has one,
 * else of the token ids of its sequences (a retry tokenizes the same, so it lands the same). */
uint32_t srv__rollout_bucket(const char *route_key, size_t key_len, const int32_t *const *ids, const size_t *lens, int n);
/* Whether a bucket falls in the rollout's percent. */
static inline bool srv__rollout_takes(const store_rollout *ro, uint32_t bucket) { return bucket < ro->percent * 100.0; }

/* Any thread: the candidate's answer cand and the current version's cur for one input of request
 * id (input index, its text when given) compared for task's rollout ro: agreement by the head's
 * kind (label; |difference| for regression; entities for tagging; the span for QA), confusion, score
 * difference; a disagreement kept in the sample when on. rows_cur, rows_cand: the streams' rows in
 * the pass (their latency share). */
void srv__rollout_compare(srv_rollouts *t, const char *task, const store_rollout *ro, const proto_task_result *cur,
                          const proto_task_result *cand, const char *id, int input, const char *text, size_t text_len,
                          double rows_cur, double rows_cand);
/* Any thread: a request of task's rollout answered (error: failed) by the candidate or the current
 * version in ms; a shadow's inputs dropped under load (dropped > 0, nothing else counted). */
void srv__rollout_served(srv_rollouts *t, const char *task, const store_rollout *ro, bool candidate, bool error, double ms);
void srv__rollout_dropped(srv_rollouts *t, const char *task, const store_rollout *ro, int inputs);

/* The rule's verdict on task's rollout ro from what was compared: 1 promote, -1 abort, 0 none yet.
 * Each rollout gets one verdict (later calls answer 0), handed to whoever takes it. */
int srv__rollout_verdict(srv_rollouts *t, const char *task, const store_rollout *ro, char *why, size_t wn);

/* The comparison of task's rollout ro as JSON (compared, agreement, ...; a new reference), for
 * GET /v1/tasks/{name}/rollout; with_sample: the disagreements kept. */
json_t *srv__rollout_comparison(srv_rollouts *t, const char *task, const store_rollout *ro, bool with_sample);
/* compared and agreement (-1: none compared) of task's rollout ro, for the listings. */
void srv__rollout_summary(srv_rollouts *t, const char *task, const store_rollout *ro, long long *compared, double *agreement);

/* Appends the Prometheus text of every rollout compared to *text (*len bytes, malloc'd; realloc'd).
 * Returns 0 or -1 when out of memory (the text as it was). */
int srv__rollouts_metrics(srv_rollouts *t, char **text, size_t *len);

#endif
