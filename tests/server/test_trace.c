/* test_trace.c - server/trace.c's pure parts: traceparent and tracestate read as W3C Trace Context says
 * (its examples, and each rule broken once), the samplers' decisions, and the OpenMetrics rewrite of
 * metrics.c that carries the exemplars. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "trace.h"

static int tp(const char *s, srv_trace_parent *p) { return srv__trace_parse_traceparent(s, strlen(s), p); }

Test(trace, traceparent_valid) {
    srv_trace_parent p;
    cr_assert_eq(tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &p), 0);
    char h[33];
    srv__trace_hex(p.trace_id, 16, h);
    cr_assert_str_eq(h, "4bf92f3577b34da6a3ce929d0e0e4736");
    srv__trace_hex(p.span_id, 8, h);
    cr_assert_str_eq(h, "00f067aa0ba902b7");
    cr_assert_eq(p.flags, 1);
    cr_assert_eq(tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &p), 0);
    cr_assert_eq(p.flags, 0);
    /* unknown flags of version 00 are read and not propagated */
    cr_assert_eq(tp("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", &p), 0);
    cr_assert_eq(p.flags, 1);
    /* a later version: its first 55 bytes by version 00's rules, then the end or '-' */
    cr_assert_eq(tp("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &p), 0);
    cr_assert_eq(tp("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds", &p), 0);
}

Test(trace, traceparent_invalid) {
    static const char *const bad[] = {
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",         /* short */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",       /* version 00 is exactly 55 */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",        /* version ff is invalid */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",        /* uppercase */
        "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",        /* all-zero ids */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",        /* separators */
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",        /* not hex */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",       /* a later version: '-' must follow */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",
    };
    srv_trace_parent p;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) cr_expect_eq(tp(bad[i], &p), -1, "accepted \"%s\"", bad[i]);
    cr_assert_eq(srv__trace_parse_traceparent(NULL, 0, &p), -1);
}

static bool ts(const char *s) { return srv__trace_state_valid(s, strlen(s)); }

Test(trace, tracestate) {
    cr_expect(ts("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
    cr_expect(ts("congo=t61rcWkgMzE , rojo=00f067aa0ba902b7")); /* optional whitespace */
    cr_expect(ts("tenant@vendor=value,a*b/c_d-e=x"));
    cr_expect(ts("a=1,,b=2"));                                  /* empty members are ignored */
    cr_expect(!ts("Rojo=1"));                                   /* keys are lowercase */
    cr_expect(!ts("1abc=1"));                                   /* a simple key starts with a letter */
    cr_expect(ts("1abc@sys=1"));                                /* a tenant may start with a digit */
    cr_expect(!ts("a@1sys=1"));
    cr_expect(!ts("a@systemnameover14=1"));
    cr_expect(!ts("a=1,a=2"));                                  /* a key at most once */
    cr_expect(!ts("a=b=c"));
    cr_expect(!ts("a="));                                       /* a value has at least one character */
    cr_expect(!ts("a=x\x01"));                                  /* printable characters only */
    cr_expect(ts("a=x "));                                      /* trailing whitespace is OWS, not the value */
    cr_expect(!ts("novalue"));
    char many[1024] = "";
    for (int i = 0; i < 33; i++) sprintf(many + strlen(many), "%sk%d=v", i ? "," : "", i);
    cr_expect(!ts(many), "33 list members");
    many[strlen(many) - strlen(",k32=v")] = '\0';
    cr_expect(ts(many), "32 list members");
    char big[600];
    memset(big, 'v', sizeof big), memcpy(big, "k=", 2), big[sizeof big - 1] = '\0';
    cr_expect(!ts(big), "over the kept size");
}

Test(trace, samplers) {
    uint8_t lo[16] = {0}, hi[16];
    memset(hi, 0xff, sizeof hi);
    lo[15] = 1;
    srv_trace_parent yes = {.flags = 1}, no = {.flags = 0};
    cr_assert_eq(srv__trace_sampler_parse("parentbased_traceidratio"), SRV_SAMPLE_PB_RATIO);
    cr_assert_eq(srv__trace_sampler_parse("jaeger_remote"), -1);
    cr_expect(srv__trace_sample(SRV_SAMPLE_ALWAYS_ON, 0, hi, &no));
    cr_expect(!srv__trace_sample(SRV_SAMPLE_ALWAYS_OFF, 1, lo, &yes));
    cr_expect(srv__trace_sample(SRV_SAMPLE_RATIO, 0.5, lo, &no));       /* the id decides, not the parent */
    cr_expect(!srv__trace_sample(SRV_SAMPLE_RATIO, 0.5, hi, &yes));
    cr_expect(!srv__trace_sample(SRV_SAMPLE_RATIO, 0, lo, NULL));
    cr_expect(srv__trace_sample(SRV_SAMPLE_RATIO, 1, hi, NULL));
    cr_expect(srv__trace_sample(SRV_SAMPLE_PB_ALWAYS_OFF, 0, hi, &yes)); /* the parent decides */
    cr_expect(!srv__trace_sample(SRV_SAMPLE_PB_ALWAYS_ON, 0, lo, &no));
    cr_expect(srv__trace_sample(SRV_SAMPLE_PB_ALWAYS_ON, 0, lo, NULL));  /* a root: the root sampler */
    cr_expect(!srv__trace_sample(SRV_SAMPLE_PB_RATIO, 0.5, hi, NULL));
    cr_expect(srv__trace_sample(SRV_SAMPLE_PB_RATIO, 0.5, lo, NULL));
    /* the ratio holds over many ids (the last 7 bytes against ratio x 2^56) */
    int n = 0;
    for (int i = 0; i < 10000; i++) {
        uint8_t id[16] = {0};
        uint64_t v = (uint64_t)i * 0x9e3779b97f4a7c15ull;
        for (int k = 0; k < 8; k++) id[8 + k] = (uint8_t)(v >> (8 * k));
        n += srv__trace_sample(SRV_SAMPLE_RATIO, 0.25, id, NULL);
    }
    cr_expect(n > 2300 && n < 2700, "%d of 10000 sampled at 0.25", n);
}

Test(trace, openmetrics_text) {
    const char *prom = "# HELP adapterd_requests_total Requests.\n# TYPE adapterd_requests_total counter\n"
                       "adapterd_requests_total{route=\"predict\"} 3\n# HELP adapterd_ready Ready.\n# TYPE adapterd_ready gauge\n"
                       "adapterd_ready 1\n";
    size_t len = strlen(prom);
    char *t = srv__metrics_openmetrics(strdup(prom), &len);
    cr_assert(t);
    cr_assert_eq(strlen(t), len);
    cr_assert_str_eq(t, "# HELP adapterd_requests Requests.\n# TYPE adapterd_requests counter\n"
                        "adapterd_requests_total{route=\"predict\"} 3\n# HELP adapterd_ready Ready.\n# TYPE adapterd_ready gauge\n"
                        "adapterd_ready 1\n# EOF\n");
    free(t);
}

Test(trace, exemplars_only_when_asked) {
    srv_metrics *m = srv__metrics_new(NULL);
    cr_assert(m);
    uint8_t id[16];
    for (int i = 0; i < 16; i++) id[i] = (uint8_t)(0xa0 + i);
    srv__metrics_request_traced(m, SRV_ROUTE_PREDICT, 200, 0.003, id); /* le 0.005 */
    srv__metrics_request(m, SRV_ROUTE_PREDICT, 200, 0.2);              /* le 0.25: none */
    size_t len;
    srv_metrics_live live = {0};
    char *plain = srv__metrics_render(m, &live, &len);
    live.openmetrics = true;
    char *om = srv__metrics_render(m, &live, &len);
    cr_assert(plain && om);
    cr_expect(!strstr(plain, "# {"));
    cr_expect(strstr(om, "adapterd_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"0.005\"} 1 # "
                         "{trace_id=\"a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\"} 0.003 "),
              "%s", om);
    cr_expect(!strstr(om, "le=\"0.25\"} 2 #"));
    free(plain), free(om);
    srv__metrics_free(m);
}
