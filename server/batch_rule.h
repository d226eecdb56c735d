/* batch_rule.h - when the scheduler closes a batch, as a pure function of the clock and the queue,
 * so the rule is tested on its own (tests/server/test_batch_rule.c) and scheduler.c only acts on it.
 *
 * The rule. Once a worker is free, the batch closes when the queued tokens reach max_batch_tokens,
 * or when no job has arrived for a quiet window, or at the latest HOLD_WINDOWS windows after the
 * later of its oldest job's arrival and the previous batch's end. A finished batch counts as an
 * arrival (its answers bring closed-loop clients' next requests within about a millisecond). The
 * window is max_wait_us; within PASS_SHARE of the last pass's engine time after that pass ended,
 * it is that share when longer (the follow-ups of a long pass arrive over several ms). */
#ifndef ADAPTERD_SERVER_BATCH_RULE_H
#define ADAPTERD_SERVER_BATCH_RULE_H

#include <stdbool.h>

/* Right after a pass, the quiet window grows to this share of it: waiting 1% of the last pass's
 * time for its follow-ups costs at most 1% of latency, while a batch cut in two costs up to a
 * whole pass. */
#define SRV_BATCH_PASS_SHARE 0.01
/* The longest hold, in quiet windows. */
#define SRV_BATCH_HOLD_WINDOWS 20.0

typedef struct {
    double now;              /* seconds, monotonic */
    double head_submit;      /* when the oldest queued job was submitted */
    double last_arrival;     /* when a job last arrived (0: never) */
    double last_done;        /* when a batch last finished (0: never) */
    double last_pass_s;      /* that batch's engine time, seconds */
    int pending_tokens;      /* tokens of all queued jobs */
    int max_batch_tokens;
    int max_wait_us;
} srv_batch_clock;

/* Microseconds to wait before the batch closes; 0 means close it now. */
double srv__batch_wait_us(const srv_batch_clock *c);

#endif
