/* test_admission.c - integration test of admission (server/front.c srv__front_admit, scheduler.h): the
 * real `adapterd serve` on the fixture registry, called with libcurl. A request takes its place in
 * --max-queue before its body is parsed, so what is refused costs no parse, tokenization or load;
 * bench/http/flood.sh measures that cost. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <string.h>

#include "http_client.h"

#define TWO_INPUTS "{\"inputs\":[\"the movie\",\"a song\"]}"

/* Admission comes before any work on the body: with --max-queue 1 held by a request waiting for
 * its batch to close (a 3 s quiet window: refused requests are not arrivals, so nothing closes it
 * early), a body that is not even JSON is refused 429 (it is 400 when parsed first, as before the
 * admission moved), with Retry-After; every request beyond the queue gets 429, the admitted one
 * completes (200), none is lost, and the place is given back afterwards. */
Test(admission, before_parse, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--max-queue", "1", "--max-wait-us", "3000000", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    ts_post held;
    cr_assert_eq(ts_post_start(&held, &s, "/v1/predict", TWO_INPUTS), 0);
    long depth = 0;
    for (int waited = 0; depth != 1 && waited < 20000; waited += 2) {
        depth = ts_metric(&s, "adapterd_admitted_requests");
        if (depth != 1) ts_sleep_ms(2);
    }
    cr_assert_eq(depth, 1, "the first request holds the only place");
    enum { N = 12 };
    ts_post a[N];
    for (int i = 0; i < N; i++) cr_assert_eq(ts_post_start(&a[i], &s, "/v1/predict", i % 2 ? TWO_INPUTS : "{not json"), 0);
    for (int i = 0; i < N; i++) {
        ts_post_join(&a[i]);
        cr_expect_eq(a[i].resp.status, 429, "request %d (%s) beyond the queue: status %ld: %s", i,
                     i % 2 ? "valid" : "not JSON", a[i].resp.status, a[i].resp.body);
        cr_expect(a[i].resp.retry_after[0], "429 without Retry-After");
        cr_expect(a[i].resp.body && strstr(a[i].resp.body, "\"busy\""), "429 body: %s", a[i].resp.body);
        ts_resp_free(&a[i].resp);
    }
    ts_post_join(&held);
    cr_expect_eq(held.resp.status, 200, "the admitted request completes: %s", held.resp.body);
    ts_resp_free(&held.resp);
    cr_expect_eq(ts_metric(&s, "adapterd_requests_total{route=\"/v1/predict\",code=\"429\"}"), N, "every 429 counted once");
    cr_expect_eq(ts_metric(&s, "adapterd_requests_total{route=\"/v1/predict\",code=\"200\"}"), 1, "the admitted one, once");
    cr_expect_eq(ts_metric(&s, "adapterd_admitted_requests"), 0, "every place was given back");
    /* with the place free, the same bad body is parsed and refused as such */
    ts_resp r;
    cr_assert_eq(ts_http(&s, "POST", "/v1/predict", "{not json", NULL, NULL, &r), 0);
    cr_expect_eq(r.status, 400, "parsed once admitted: %s", r.body);
    ts_resp_free(&r);
    cr_expect_eq(ts_metric(&s, "adapterd_admitted_requests"), 0, "a refused body gives its place back");
    cr_assert_eq(ts_stop(&s), 0);
}
