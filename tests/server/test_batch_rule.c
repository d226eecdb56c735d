/* test_batch_rule.c - server/batch_rule.c: when a batch closes (the rule is written in batch_rule.h;
 * each case below is one of its clauses, with the wait the rule's arithmetic gives). */
#include <criterion/criterion.h>
#include <math.h>

#include "batch_rule.h"

/* An idle server (last pass long ago) with max_wait_us 500 and room for more tokens. */
static srv_batch_clock idle(void) {
    return (srv_batch_clock){.now = 100.0, .head_submit = 100.0, .last_arrival = 100.0, .last_done = 10.0,
                             .last_pass_s = 0.01, .pending_tokens = 10, .max_batch_tokens = 8192, .max_wait_us = 500};
}

#define NEAR(a, b) (fabs((a) - (b)) < 1e-3)

Test(batch_rule, a_fresh_job_waits_the_quiet_window) {
    srv_batch_clock c = idle();
    double w = srv__batch_wait_us(&c);
    cr_expect(NEAR(w, 500), "wait %g us, want 500", w);
    c.now += 200e-6; /* 200 us later, nobody else came */
    w = srv__batch_wait_us(&c);
    cr_expect(NEAR(w, 300), "wait %g us, want 300", w);
    c.now += 301e-6; /* past the window (a whole 300 us could round to just under it) */
    cr_expect_eq(srv__batch_wait_us(&c), 0, "quiet for the whole window: close");
}

Test(batch_rule, a_full_batch_closes_at_once) {
    srv_batch_clock c = idle();
    c.pending_tokens = c.max_batch_tokens;
    cr_expect_eq(srv__batch_wait_us(&c), 0);
    c = idle();
    c.max_wait_us = 0;
    cr_expect_eq(srv__batch_wait_us(&c), 0, "no window: every batch closes at once");
}

Test(batch_rule, arrivals_extend_the_wait_up_to_the_hold) {
    srv_batch_clock c = idle();
    /* jobs keep arriving every 100 us: the window restarts from the last one */
    c.now = 100.0 + 9000e-6;
    c.last_arrival = c.now - 100e-6;
    double w = srv__batch_wait_us(&c);
    cr_expect(NEAR(w, 400), "wait %g us, want 400", w);
    /* the hold: 20 windows (10 ms) after the oldest job, whatever arrives */
    c.now = 100.0 + 9800e-6;
    c.last_arrival = c.now - 100e-6;
    w = srv__batch_wait_us(&c);
    cr_expect(NEAR(w, 200), "wait %g us, want 200 (hold left)", w);
    c.now = 100.0 + 10001e-6;
    c.last_arrival = c.now;
    cr_expect_eq(srv__batch_wait_us(&c), 0, "hold over: close");
}

Test(batch_rule, after_a_long_pass_the_window_is_a_share_of_it) {
    /* a 1 s pass ended 1 ms ago: the window is 1% of it, 10 ms, and the end counts as an arrival */
    srv_batch_clock c = idle();
    c.last_pass_s = 1.0;
    c.last_done = 100.0;
    c.head_submit = 99.5; /* queued during the pass */
    c.last_arrival = 99.5;
    c.now = 100.001;
    double w = srv__batch_wait_us(&c);
    cr_expect(NEAR(w, 9000), "wait %g us, want 9000", w);
    /* long after that pass, a new job waits only max_wait_us */
    c.now = 100.5;
    c.head_submit = c.last_arrival = c.now;
    w = srv__batch_wait_us(&c);
    cr_expect(NEAR(w, 500), "wait %g us, want 500", w);
}
