/* batch_rule.c - see batch_rule.h. */
#include "batch_rule.h"

double srv__batch_wait_us(const srv_batch_clock *c) {
    if (c->pending_tokens >= c->max_batch_tokens) return 0;
    double last = c->last_arrival > c->last_done ? c->last_arrival : c->last_done;
    double since = c->head_submit > c->last_done ? c->head_submit : c->last_done;
    double window_us = c->max_wait_us, share_us = SRV_BATCH_PASS_SHARE * c->last_pass_s * 1e6;
    /* right after a pass its answers' follow-ups are on their way; a job arriving on an idle
     * server long after the last pass is not one of them and waits only max_wait_us */
    if (window_us > 0 && share_us > window_us && (c->now - c->last_done) * 1e6 < share_us) window_us = share_us;
    double quiet_us = (c->now - last) * 1e6, held_us = (c->now - since) * 1e6;
    double hold_us = SRV_BATCH_HOLD_WINDOWS * window_us;
    if (quiet_us >= window_us || held_us >= hold_us) return 0;
    double left = window_us - quiet_us;
    if (hold_us - held_us < left) left = hold_us - held_us;
    return left;
}
