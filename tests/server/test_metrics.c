/* test_metrics.c - server/metrics.c: the Prometheus text for known counts. Every expected line
 * follows from the values fed in and the exposition format (cumulative buckets, _sum, _count). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "http_status.h"
#include "metrics.h"
#include "prom_text.h"
#include "../common/test_tmp.h"

static char *render(srv_metrics *m, srv_metrics_live live) {
    size_t len = 0;
    char *t = srv__metrics_render(m, &live, &len);
    cr_assert(t);
    cr_assert_eq(strlen(t), len);
    return t;
}

static void has(const char *text, const char *line) {
    /* a whole line: preceded by a newline (or the start) and followed by one */
    size_t n = strlen(line);
    for (const char *p = strstr(text, line); p; p = strstr(p + 1, line))
        if ((p == text || p[-1] == '\n') && p[n] == '\n') return;
    cr_expect_fail("missing line \"%s\" in\n%s", line, text);
}

Test(metrics, counters_histograms_and_live_gauges) {
    srv_metrics *m = srv__metrics_new(NULL);
    cr_assert(m);
    srv__metrics_request(m, SRV_ROUTE_PREDICT, 200, 0.003);   /* le 0.005 */
    srv__metrics_request(m, SRV_ROUTE_PREDICT, 200, 0.0004);  /* le 0.0005 */
    srv__metrics_request(m, SRV_ROUTE_PREDICT, 429, 0.02);
    srv__metrics_request(m, SRV_ROUTE_HEALTHZ, 299, 0.001);   /* a code outside the table */
    srv__metrics_request(m, SRV_ROUTE_ADMIN_VERSION, 201, 0.2);
    srv__metrics_request(m, SRV_ROUTE_ADMIN_VERSION, 409, 0.01);
    srv__metrics_request(m, SRV_ROUTE_ADMIN_VERSIONS, 401, 0.001);
    srv__metrics_task(m, "sentiment", 2, 3, 0.004);   /* le 0.005 */
    srv__metrics_task(m, "sentiment", 2, 1, 0.03);    /* le 0.05 */
    srv__metrics_task(m, "topic", 0, 5, -1);          /* not known: not observed */
    srv__metrics_lazy_load(m, 0.3);                   /* le 0.5 */
    srv__metrics_queue_wait(m, -1); /* never ran: not observed */
    srv__metrics_queue_wait(m, 0.5);
    srv__metrics_batch(m, 2, 4, 100, 0.25);
    srv__metrics_adaptive(m, 3);
    srv__metrics_latency_refused(m);
    char *t = render(m, (srv_metrics_live){.queue_depth = 7, .adaptive_level = 2, .ready = true});
    has(t, "adapterd_requests_total{route=\"/v1/predict\",code=\"200\"} 2");
    has(t, "adapterd_requests_total{route=\"/v1/predict\",code=\"429\"} 1");
    has(t, "adapterd_requests_total{route=\"/healthz\",code=\"other\"} 1");
    has(t, "adapterd_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"0.0005\"} 1");
    has(t, "adapterd_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"0.005\"} 2");
    has(t, "adapterd_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"0.025\"} 3");
    has(t, "adapterd_request_duration_seconds_bucket{route=\"/v1/predict\",le=\"+Inf\"} 3");
    has(t, "adapterd_request_duration_seconds_count{route=\"/v1/predict\"} 3");
    has(t, "adapterd_request_duration_seconds_sum{route=\"/v1/predict\"} 0.0234");
    has(t, "adapterd_requests_total{route=\"/v1/tasks/{name}/versions/{version}\",code=\"201\"} 1");
    has(t, "adapterd_requests_total{route=\"/v1/tasks/{name}/versions/{version}\",code=\"409\"} 1");
    has(t, "adapterd_requests_total{route=\"/v1/tasks/{name}/versions\",code=\"401\"} 1");
    has(t, "adapterd_task_request_duration_seconds_bucket{task=\"sentiment\",le=\"0.0025\"} 0");
    has(t, "adapterd_task_request_duration_seconds_bucket{task=\"sentiment\",le=\"0.005\"} 1");
    has(t, "adapterd_task_request_duration_seconds_bucket{task=\"sentiment\",le=\"0.05\"} 2");
    has(t, "adapterd_task_request_duration_seconds_count{task=\"sentiment\"} 2");
    has(t, "adapterd_task_request_duration_seconds_count{task=\"topic\"} 0");
    has(t, "adapterd_lazy_load_seconds_bucket{le=\"0.25\"} 0");
    has(t, "adapterd_lazy_load_seconds_bucket{le=\"0.5\"} 1");
    has(t, "adapterd_lazy_load_seconds_count{} 1");
    has(t, "adapterd_queue_wait_seconds_count{} 1");
    has(t, "adapterd_batch_tokens_bucket{le=\"64\"} 0");
    has(t, "adapterd_batch_tokens_bucket{le=\"256\"} 1");
    has(t, "adapterd_tokens_total 100");
    has(t, "adapterd_task_requests_total{task=\"sentiment\"} 2");
    has(t, "adapterd_task_requests_total{task=\"topic\"} 1");
    has(t, "adapterd_task_skip_total{task=\"sentiment\",skip=\"2\"} 4");
    has(t, "adapterd_task_skip_total{task=\"topic\",skip=\"0\"} 5");
    has(t, "adapterd_queue_depth 7");
    has(t, "adapterd_adaptive_level 2");
    has(t, "adapterd_adaptive_raises_total 1");
    has(t, "adapterd_adaptive_layers_total 3");
    has(t, "adapterd_latency_refused_total 1");
    has(t, "adapterd_ready 1");
    /* task series come in name order */
    cr_expect_lt(strstr(t, "task=\"sentiment\"} 2"), strstr(t, "task=\"topic\"} 1"));
    free(t);
    t = render(m, (srv_metrics_live){.ready = false});
    has(t, "adapterd_ready 0");
    has(t, "adapterd_queue_depth 0");
    free(t);
    srv__metrics_free(m);
}

/* Every HTTP status the error table maps to, and the success statuses, is a label of its own. */
Test(metrics, every_status_the_server_sends_has_its_own_label) {
    static const eng_status all[] = {
#define ALL_STATUS(name, value, code, desc) ENG_##name,
        ENG_STATUS_LIST(ALL_STATUS)
#undef ALL_STATUS
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        cr_expect(srv__metrics_code_known(srv__http_status(all[i])), "%s -> %u is counted as \"other\"",
                  eng_status_name(all[i]), srv__http_status(all[i]));
    const unsigned more[] = {200, 201, 499};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) cr_expect(srv__metrics_code_known(more[i]), "%u", more[i]);
    cr_expect(!srv__metrics_code_known(299));
}

/* Per-precision figures: batches, tokens and seconds by the backbone precision they ran in; all
 * three precisions always listed; unknown names are not counted. */
Test(metrics, per_precision_batches_tokens_and_seconds) {
    srv_metrics *m = srv__metrics_new(NULL);
    cr_assert(m);
    cr_assert(srv__metrics_precision(m, "fp32", 100, 0.25));
    cr_assert(srv__metrics_precision(m, "fp32", 28, 0.5));
    cr_assert(srv__metrics_precision(m, "int8", 64, 0.125));
    cr_assert(!srv__metrics_precision(m, "fp16", 10, 1.0));
    cr_assert(!srv__metrics_precision(m, NULL, 10, 1.0));
    char *t = render(m, (srv_metrics_live){.ready = true});
    has(t, "adapterd_inference_batches_total{precision=\"fp32\"} 2");
    has(t, "adapterd_inference_tokens_total{precision=\"fp32\"} 128");
    has(t, "adapterd_inference_seconds_total{precision=\"fp32\"} 0.75");
    has(t, "adapterd_inference_batches_total{precision=\"int8\"} 1");
    has(t, "adapterd_inference_tokens_total{precision=\"int8\"} 64");
    has(t, "adapterd_inference_seconds_total{precision=\"int8\"} 0.125");
    has(t, "adapterd_inference_tokens_total{precision=\"bf16\"} 0");
    cr_expect_null(strstr(t, "fp16"));
    free(t);
    srv__metrics_free(m);
}

/* The whole text parses as Prometheus's exposition format, with every kind of series filled. */
Test(metrics, the_text_is_valid_exposition_format) {
    srv_metrics *m = srv__metrics_new(NULL);
    cr_assert(m);
    char msg[512];
    char *t = render(m, (srv_metrics_live){0}); /* empty: families with no series */
    cr_assert_eq(prom_check(t, msg, sizeof msg), 0, "%s\n%s", msg, t);
    free(t);
    srv__metrics_request(m, SRV_ROUTE_PREDICT, 200, 0.003);
    srv__metrics_request(m, SRV_ROUTE_PREDICT, 299, 0.003);
    srv__metrics_request(m, SRV_ROUTE_ADMIN_VERSION, 201, 0.2);
    srv__metrics_task(m, "sentiment", 2, 3, 0.004);
    srv__metrics_task(m, "topic.v-2_x", 70, 1, 0.2); /* a skip beyond the table, a name with . - _ */
    srv__metrics_queue_wait(m, 0.5);
    srv__metrics_lazy_load(m, 20);                   /* beyond the last bound */
    srv__metrics_batch(m, 2, 4, 100, 0.25);
    srv__metrics_precision(m, "bf16", 100, 0.25);
    srv__metrics_adaptive(m, 3);
    srv__metrics_latency_refused(m);
    t = render(m, (srv_metrics_live){.queue_depth = 1, .ready = true});
    cr_assert_eq(prom_check(t, msg, sizeof msg), 0, "%s\n%s", msg, t);
    free(t);
    srv__metrics_free(m);
    /* the checker itself refuses what the format forbids */
    static const char *const bad[] = {
        "# TYPE a counter\na 1",                                   /* no final newline */
        "a 1\n",                                                   /* no TYPE */
        "# TYPE a counter\na{x=\"1\"} 1\na{x=\"1\"} 2\n",          /* a series twice */
        "# TYPE a counter\n# TYPE a gauge\na 1\n",                 /* two TYPEs */
        "# TYPE a counter\na 1\n# TYPE b counter\nb 1\na{y=\"2\"} 1\n", /* a family split */
        "# TYPE a counter\na{x=1} 1\n",                            /* unquoted label */
        "# TYPE a counter\na one\n",                               /* not a number */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", /* not cumulative */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", /* count != +Inf */
        "# TYPE 1a counter\n1a 1\n",                               /* bad name */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_neq(prom_check(bad[i], msg, sizeof msg), 0, "accepted: %s", bad[i]);
    cr_expect_eq(prom_check("# HELP a doc\n# TYPE a counter\na{x=\"q\\\"\\\\\"} 1 1700000000\n# a comment\n", msg, sizeof msg),
                 0, "%s", msg);
}

/* Does a line of text start with prefix? */
static bool has_prefix_line(const char *text, const char *prefix) {
    for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix))
        if (p == text || p[-1] == '\n') return true;
    return false;
}

/* --metrics-tasks K: the K busiest tasks keep their names, the rest are summed into task="(other)";
 * every expected figure is the sum of what was fed in. */
Test(metrics, per_task_series_beyond_k_are_summed_as_other) {
    srv_metrics *m = srv__metrics_new(NULL);
    cr_assert(m);
    srv__metrics_set_task_series(m, 2);
    const struct {
        const char *name;
        int requests, skip, inputs;
    } use[] = {{"a", 5, 0, 1}, {"b", 1, 1, 2}, {"c", 3, 0, 1}, {"d", 1, 1, 3}, {"e", 2, 2, 1}};
    for (size_t i = 0; i < 5; i++)
        for (int k = 0; k < use[i].requests; k++) srv__metrics_task(m, use[i].name, use[i].skip, use[i].inputs, 0.004);
    char *t = render(m, (srv_metrics_live){0});
    has(t, "adapterd_task_requests_total{task=\"a\"} 5");
    has(t, "adapterd_task_requests_total{task=\"c\"} 3");
    has(t, "adapterd_task_requests_total{task=\"(other)\"} 4"); /* b 1 + d 1 + e 2 */
    has(t, "adapterd_task_request_duration_seconds_count{task=\"(other)\"} 4");
    has(t, "adapterd_task_request_duration_seconds_bucket{task=\"(other)\",le=\"0.005\"} 4");
    has(t, "adapterd_task_skip_total{task=\"(other)\",skip=\"1\"} 5"); /* b 1 x 2 inputs + d 1 x 3 */
    has(t, "adapterd_task_skip_total{task=\"(other)\",skip=\"2\"} 2"); /* e 2 x 1 */
    has(t, "adapterd_task_series_other 3");
    cr_expect(!strstr(t, "task=\"b\"") && !strstr(t, "task=\"d\"") && !strstr(t, "task=\"e\""), "beyond K: no own series\n%s", t);
    char msg[512];
    cr_expect_eq(prom_check(t, msg, sizeof msg), 0, "%s", msg);
    free(t);
    /* K 0: everything in (other); K at the number of tasks: every task by name, as before */
    srv__metrics_set_task_series(m, 0);
    t = render(m, (srv_metrics_live){0});
    has(t, "adapterd_task_requests_total{task=\"(other)\"} 12");
    cr_expect(!has_prefix_line(t, "adapterd_task_requests_total{task=\"a\"}"));
    free(t);
    srv__metrics_set_task_series(m, 5);
    t = render(m, (srv_metrics_live){0});
    has(t, "adapterd_task_requests_total{task=\"e\"} 2");
    has(t, "adapterd_task_series_other 0");
    cr_expect(!strstr(t, "(other)\"}"), "no (other) series when every task fits");
    free(t);
    srv__metrics_free(m);
}

/* The scrape's size does not grow with the tasks used: 3,000 tasks render like the 100 shown. */
Test(metrics, a_scrape_is_bounded_by_k_not_by_the_registry) {
    size_t len[2];
    const int used[2] = {100, 3000};
    for (int r = 0; r < 2; r++) {
        srv_metrics *m = srv__metrics_new(NULL);
        cr_assert(m);
        for (int i = 0; i < used[r]; i++) {
            char name[32];
            snprintf(name, sizeof name, "task-%05d", i);
            srv__metrics_task(m, name, 0, 1, 0.01);
        }
        char *t = srv__metrics_render(m, &(srv_metrics_live){0}, &len[r]);
        cr_assert(t);
        free(t);
        srv__metrics_free(m);
    }
    cr_log_info("scrape: %zu bytes with 100 tasks used, %zu with 3,000 (K = 100)", len[0], len[1]);
    cr_expect_lt(len[1], len[0] + 4096, "3,000 tasks: %zu bytes, 100 tasks: %zu", len[1], len[0]);
}

/* adapterd_task_resident: one line per registered task while they are at most K; beyond, the K
 * busiest by name and task="(other)", how many of the rest are loaded. A registry of 12 tasks (the
 * fixture's 7 and 5 hard-linked copies of cls_lora), every current version loaded (no budget). */
Test(metrics, task_resident_is_bounded_by_k) {
    char dir[512];
    test_tmp_template(dir, sizeof dir, "metrics");
    cr_assert(mkdtemp(dir), "mkdtemp %s", dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -rL '%s/registry'/. '%s'/ && for i in 1 2 3 4 5; do cp -al '%s/tasks/cls_lora' '%s/tasks/'copy$i; done",
             ADAPTERD_FIXTURES, dir, dir, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    store_params p = store_default_params();
    p.verbose = 0;
    store_registry *reg = NULL;
    eng_err e = {0};
    cr_assert_eq(store_open(dir, &p, &reg, &e), 0, "%s", e.msg);
    cr_assert_eq(store_n_tasks(reg), 12, "%d tasks in %s", store_n_tasks(reg), dir);
    srv_metrics *m = srv__metrics_new(reg);
    cr_assert(m);
    srv__metrics_task(m, "qa", 0, 1, 0.01), srv__metrics_task(m, "qa", 0, 1, 0.01);
    srv__metrics_task(m, "ner", 0, 1, 0.01), srv__metrics_task(m, "ner", 0, 1, 0.01);
    srv__metrics_task(m, "copy3", 0, 1, 0.01);
    srv__metrics_task(m, "fusion", 0, 1, 0.01); /* fourth busiest: beyond K = 3 */
    srv__metrics_set_task_series(m, 3);
    char *t = render(m, (srv_metrics_live){0});
    has(t, "adapterd_task_resident{task=\"copy3\"} 1");
    has(t, "adapterd_task_resident{task=\"ner\"} 1");
    has(t, "adapterd_task_resident{task=\"qa\"} 1");
    has(t, "adapterd_task_resident{task=\"(other)\"} 9");
    int lines = 0;
    for (const char *q = strstr(t, "\nadapterd_task_resident{"); q; q = strstr(q + 1, "\nadapterd_task_resident{")) lines++;
    cr_expect_eq(lines, 4, "K names and (other), not one line per task:\n%s", t);
    free(t);
    /* K at the number of tasks: every task by name, as before, and no (other) */
    srv__metrics_set_task_series(m, 12);
    t = render(m, (srv_metrics_live){0});
    has(t, "adapterd_task_resident{task=\"cls_lora\"} 1");
    has(t, "adapterd_task_resident{task=\"copy5\"} 1");
    lines = 0;
    for (const char *q = strstr(t, "\nadapterd_task_resident{"); q; q = strstr(q + 1, "\nadapterd_task_resident{")) lines++;
    cr_expect_eq(lines, 12);
    cr_expect(!strstr(t, "adapterd_task_resident{task=\"(other)\""));
    free(t);
    srv__metrics_free(m);
    store_free(reg);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* The event loop's turns, the watch's callbacks and the registry's rescans: a histogram of turns, the
 * longest turn (wall and CPU) and the watch's costliest callback since the previous scrape (each
 * scrape starts them again), rescans by kind with their CPU. */
Test(metrics, loop_turns_and_rescans) {
    srv_metrics *m = srv__metrics_new(NULL);
    cr_assert(m);
    srv__metrics_loop_busy(m, 0.0003, 0.0002);  /* le 0.0005 */
    srv__metrics_loop_busy(m, 0.003, 0.0004);   /* le 0.005: preempted, little CPU */
    srv__metrics_loop_busy(m, 0.0015, 0.0012);  /* le 0.002 */
    srv__metrics_loop_busy(m, -1, -1);          /* a clock step: counted as 0 */
    srv__metrics_watch_busy(m, 0.0007);
    srv__metrics_watch_busy(m, 0.0001);
    srv__metrics_rescan(m, SRV_RESCAN_FULL, 2.0, 0.4);
    srv__metrics_rescan(m, SRV_RESCAN_FULL, 0.02, 0.1);
    srv__metrics_rescan(m, SRV_RESCAN_TASKS, 0.0004, 0.0003);
    char *t = render(m, (srv_metrics_live){0});
    has(t, "adapterd_loop_busy_seconds_bucket{le=\"0.0001\"} 1");
    has(t, "adapterd_loop_busy_seconds_bucket{le=\"0.0005\"} 2");
    has(t, "adapterd_loop_busy_seconds_bucket{le=\"0.001\"} 2");
    has(t, "adapterd_loop_busy_seconds_bucket{le=\"0.002\"} 3");
    has(t, "adapterd_loop_busy_seconds_bucket{le=\"0.005\"} 4");
    has(t, "adapterd_loop_busy_seconds_bucket{le=\"+Inf\"} 4");
    has(t, "adapterd_loop_busy_seconds_count{} 4");
    has(t, "adapterd_loop_busy_max_seconds 0.003");
    has(t, "adapterd_loop_busy_cpu_max_seconds 0.0012");
    has(t, "adapterd_watch_loop_max_seconds 0.0007");
    has(t, "adapterd_registry_rescan_seconds_count{kind=\"full\"} 2");
    has(t, "adapterd_registry_rescan_seconds_sum{kind=\"full\"} 2.02");
    has(t, "adapterd_registry_rescan_seconds_bucket{kind=\"full\",le=\"0.025\"} 1");
    has(t, "adapterd_registry_rescan_seconds_count{kind=\"tasks\"} 1");
    has(t, "adapterd_registry_rescan_cpu_seconds_total{kind=\"full\"} 0.5");
    has(t, "adapterd_registry_rescan_cpu_seconds_total{kind=\"tasks\"} 0.0003");
    free(t);
    /* the maxima are since the previous scrape; the histogram and counters keep counting */
    srv__metrics_loop_busy(m, 0.0002, 0.0001);
    t = render(m, (srv_metrics_live){0});
    has(t, "adapterd_loop_busy_max_seconds 0.0002");
    has(t, "adapterd_loop_busy_cpu_max_seconds 0.0001");
    has(t, "adapterd_watch_loop_max_seconds 0");
    has(t, "adapterd_loop_busy_seconds_count{} 5");
    has(t, "adapterd_registry_rescan_seconds_count{kind=\"full\"} 2");
    free(t);
    srv__metrics_free(m);
}
