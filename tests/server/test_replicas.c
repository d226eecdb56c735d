/* test_replicas.c - two `adapterd serve` on one registry directory, as replicas sharing a volume
 * (adapters_store/state.c and versions.c: the state file and the current version; server/watch.c: --watch poll).
 *
 * What is proved: a change made through one replica's admin API (upload, activation, roll-back,
 * deletion, pin) reaches the other within its watch interval (plus one rescan), whichever replica
 * made it; an upload that is not activated never becomes current anywhere; and while versions
 * change, every answer of the other replica is that of a complete version: its scores equal the
 * writer's answer for the same version number (the writer's process loaded the same files on its
 * own). A version copied in by hand is seen only once renamed to its number. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"

#define AD ADAPTERD_FIXTURES "/adapters/bert-tiny"
#define AUTH "Authorization: Bearer t0ken"
#define INTERVAL_MS 400
/* a change is seen at the next rescan (at most one interval away) once that rescan has loaded the
 * version (a few ms for these fixtures); the slack covers a loaded CI machine */
#define FOLLOW_BOUND_MS (INTERVAL_MS + 1200)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void start_replica(test_server *s, const char *reg, const char *mode, const char *interval) {
    const char *args[] = {"--registry", reg, "--admin-token", "t0ken", "--watch", mode, "--watch-interval-ms", interval,
                          "--watch-debounce-ms", "20", NULL};
    cr_assert_eq(ts_start(s, args, NULL), 0, "a replica did not start on %s", reg);
}

static long call(const test_server *s, const char *method, const char *path, const char *body, json_t **out) {
    return ts_request(s, method, path, body, body ? strlen(body) : 0, body ? "application/json" : NULL, AUTH, out);
}

/* Uploads the folder src as version `version` of task cls through s. */
static long upload(const test_server *s, int version, const char *src, int activate) {
    char path[128];
    size_t len;
    char *b = ts_tgz_of(src, &len);
    cr_assert(b, "cannot pack %s", src);
    snprintf(path, sizeof path, "/v1/tasks/cls/versions/%d%s", version, activate ? "?activate=true" : "");
    long st = ts_request(s, "PUT", path, b, len, "application/gzip", AUTH, NULL);
    free(b);
    return st;
}

/* The version and scores one predict of cls answered; returns the HTTP status. */
static long predict(const test_server *s, char *version, size_t vn, json_t **scores) {
    json_t *d = NULL;
    long st = call(s, "POST", "/v1/predict", "{\"inputs\":\"the movie was great\",\"tasks\":[\"cls\"]}", &d);
    json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "cls");
    snprintf(version, vn, "%s", st == 200 ? json_string_value(json_object_get(t, "version")) ?: "" : "");
    if (st == 200 && !version[0]) { /* an answer without a version: what it said instead (atoi reads 0, never allowed) */
        char *txt = json_dumps(t ? t : d, JSON_COMPACT);
        snprintf(version, vn, "(none) %s", txt ? txt : "");
        free(txt);
    }
    if (scores) *scores = st == 200 ? json_incref(json_object_get(t, "scores")) : NULL;
    json_decref(d);
    return st;
}

/* Two processes that loaded the same files answer alike to 1e-6. */
static int same_scores(json_t *a, json_t *b) { return ts_scores_close(a, b, 1e-6); }

/* Milliseconds until s answers cls with version want (polled every 10 ms), or -1 after 10 s. */
static double until_serves(const test_server *s, const char *want) {
    double t0 = now_ms();
    char v[32];
    while (now_ms() - t0 < 10000) {
        if (predict(s, v, sizeof v, NULL) == 200 && !strcmp(v, want)) return now_ms() - t0;
        ts_sleep_ms(10);
    }
    return -1;
}

static json_t *versions_of(const test_server *s) {
    json_t *d = NULL;
    cr_assert_eq(call(s, "GET", "/v1/tasks/cls/versions", NULL, &d), 200);
    return d;
}

static int listed(json_t *versions_doc, const char *version, const char *flag) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(versions_doc, "versions"), i, e)
        if (!strcmp(json_string_value(json_object_get(e, "version")) ?: "", version))
            return flag ? json_is_true(json_object_get(e, flag)) : 1;
    return 0;
}

/* Waits up to bound_ms for the version list of s to satisfy want(listed(...)). */
static double until_listed(const test_server *s, const char *version, const char *flag, int want, double bound_ms) {
    double t0 = now_ms();
    while (now_ms() - t0 < bound_ms + 2000) {
        json_t *d = versions_of(s);
        int l = listed(d, version, flag);
        json_decref(d);
        if (l == want) return now_ms() - t0;
        ts_sleep_ms(10);
    }
    return -1;
}

/* ---- a client hammering the follower while versions change ---- */

#define MAXV 8
static test_server follower;
static atomic_int stop_clients, n_ok, n_failed, n_inconsistent, n_unexpected;
/* Bit v: version v may be answered by the follower at this point. A request may answer with any
 * version allowed at some moment while it was in flight: one sent before a roll-back may still
 * answer with the version rolled back (it was admitted on it) even after the writer followed. */
static atomic_uint allowed;
static atomic_int phase;         /* the step of the test under way, for the messages */
static char unexpected_log[512]; /* the first unexpected answers: phase, version (seen_mu) */
static json_t *first_seen[MAXV];
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;

static void *hammer(void *arg) {
    (void)arg;
    while (!atomic_load(&stop_clients)) {
        char v[160];
        json_t *sc = NULL;
        unsigned sent_allowed = atomic_load(&allowed);
        if (predict(&follower, v, sizeof v, &sc) != 200) {
            atomic_fetch_add(&n_failed, 1);
            continue;
        }
        int ver = atoi(v), ph = atomic_load(&phase);
        if (ver < 0 || ver >= MAXV || !((sent_allowed | atomic_load(&allowed)) >> ver & 1)) {
            atomic_fetch_add(&n_unexpected, 1);
            pthread_mutex_lock(&seen_mu);
            size_t l = strlen(unexpected_log);
            snprintf(unexpected_log + l, sizeof unexpected_log - l, " [step %d, version \"%s\"]", ph, v);
            pthread_mutex_unlock(&seen_mu);
        } else {
            pthread_mutex_lock(&seen_mu);
            if (!first_seen[ver]) first_seen[ver] = json_incref(sc);
            else if (!same_scores(first_seen[ver], sc)) atomic_fetch_add(&n_inconsistent, 1);
            pthread_mutex_unlock(&seen_mu);
        }
        atomic_fetch_add(&n_ok, 1);
        json_decref(sc);
    }
    return NULL;
}

Test(replicas, changes_through_either_replica_reach_the_other_within_the_interval, .timeout = 120) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = ts_registry_ok("test-replicas");
    char iv[16], v[32];
    snprintf(iv, sizeof iv, "%d", INTERVAL_MS);
    test_server a;
    start_replica(&a, reg, "poll", iv);
    start_replica(&follower, reg, "poll", iv);
    test_server *b = &follower;
    json_t *ref[MAXV] = {0}; /* the writer's answer per version */
    cr_assert_eq(predict(&a, v, sizeof v, &ref[1]), 200);
    cr_assert_str_eq(v, "1");
    atomic_fetch_or(&allowed, 1u << 1);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, hammer, NULL);

    /* an upload that is not activated is listed by the other replica and never served */
    atomic_store(&phase, 1);
    cr_assert_eq(upload(&a, 2, AD "/seq_bn_st/adapters", 0), 201);
    double dt = until_listed(b, "2", NULL, 1, FOLLOW_BOUND_MS);
    cr_expect(dt >= 0 && dt <= FOLLOW_BOUND_MS, "version 2 listed on the other replica after %.0f ms", dt);
    ts_sleep_ms(2 * INTERVAL_MS);
    cr_assert_eq(predict(b, v, sizeof v, NULL), 200);
    cr_expect_str_eq(v, "1", "an upload without activation stays out of service on every replica");

    /* activation through a */
    atomic_store(&phase, 2);
    atomic_fetch_or(&allowed, 1u << 2);
    cr_assert_eq(call(&a, "POST", "/v1/tasks/cls:activate", "{\"version\":\"2\"}", NULL), 200);
    double t_act = until_serves(b, "2");
    cr_expect(t_act >= 0 && t_act <= FOLLOW_BOUND_MS, "activation reached the other replica in %.0f ms (bound %d)", t_act,
              FOLLOW_BOUND_MS);
    cr_assert_eq(predict(&a, v, sizeof v, &ref[2]), 200);
    cr_expect_str_eq(v, "2");

    /* roll back through b */
    atomic_store(&phase, 3);
    cr_assert_eq(call(b, "POST", "/v1/tasks/cls:activate", "{\"version\":\"1\"}", NULL), 200);
    /* b made the change: every request sent to it from now on answers with 1 */
    atomic_fetch_and(&allowed, ~(1u << 2));
    double t_rb = until_serves(&a, "1");
    cr_expect(t_rb >= 0 && t_rb <= FOLLOW_BOUND_MS, "roll-back reached the writer replica in %.0f ms", t_rb);

    /* upload + activate through b: a follows, and both answer alike for version 3 */
    atomic_store(&phase, 4);
    atomic_fetch_or(&allowed, 1u << 3);
    cr_assert_eq(upload(b, 3, AD "/ia3/adapters", 1), 201);
    double t_up = until_serves(&a, "3");
    cr_expect(t_up >= 0 && t_up <= FOLLOW_BOUND_MS, "an activated upload reached the other replica in %.0f ms", t_up);
    cr_assert_eq(predict(&a, v, sizeof v, &ref[3]), 200);

    /* a deletion and a pin through a reach b's listing */
    atomic_store(&phase, 5);
    cr_assert_eq(call(&a, "DELETE", "/v1/tasks/cls/versions/2", NULL, NULL), 200);
    dt = until_listed(b, "2", NULL, 0, FOLLOW_BOUND_MS);
    cr_expect(dt >= 0 && dt <= FOLLOW_BOUND_MS, "the deletion reached the other replica in %.0f ms", dt);
    cr_assert_eq(call(&a, "POST", "/v1/tasks/cls:pin", "", NULL), 200);
    dt = until_listed(b, "3", "pinned", 1, FOLLOW_BOUND_MS);
    cr_expect(dt >= 0 && dt <= FOLLOW_BOUND_MS, "the pin reached the other replica in %.0f ms", dt);

    /* a version copied by hand: invisible under its '.' name however long the copy takes, served
     * by both once renamed (numbered above everything the state file has seen: it becomes current) */
    atomic_store(&phase, 6);
    atomic_fetch_or(&allowed, 1u << 4);
    ts_sh_ok("mkdir -p %s/tasks/cls/.incoming && cp -rL %s/lora_ah/adapters/* %s/tasks/cls/.incoming/", reg, AD, reg);
    ts_sleep_ms(2 * INTERVAL_MS);
    json_t *d = versions_of(b);
    cr_expect(!listed(d, "4", NULL) && !listed(d, ".incoming", NULL), "a staging folder is never listed");
    json_decref(d);
    ts_sh_ok("mv %s/tasks/cls/.incoming %s/tasks/cls/4", reg, reg);
    cr_expect_geq(until_serves(b, "4"), 0);
    cr_expect_geq(until_serves(&a, "4"), 0);
    cr_assert_eq(predict(&a, v, sizeof v, &ref[4]), 200);

    atomic_store(&stop_clients, 1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    cr_log_info("replicas: activation %.0f ms, roll-back %.0f ms, upload %.0f ms (interval %d ms); %d answers",
                t_act, t_rb, t_up, INTERVAL_MS, atomic_load(&n_ok));
    cr_expect_eq(atomic_load(&n_failed), 0, "%d requests to the follower failed", atomic_load(&n_failed));
    cr_expect_eq(atomic_load(&n_unexpected), 0, "%d answers named a version that was not to be served:%s",
                 atomic_load(&n_unexpected), unexpected_log);
    cr_expect_eq(atomic_load(&n_inconsistent), 0, "%d answers differ from the first of their version",
                 atomic_load(&n_inconsistent));
    cr_expect_gt(atomic_load(&n_ok), 50);
    int compared = 0;
    for (int k = 1; k < MAXV; k++) {
        if (!first_seen[k] || !ref[k]) continue;
        cr_expect(same_scores(first_seen[k], ref[k]), "version %d answers alike on both replicas", k);
        compared++;
    }
    cr_expect_geq(compared, 3, "versions 1, 2, 3 and 4 were served by the follower (%d compared)", compared);
    for (int k = 0; k < MAXV; k++) json_decref(ref[k]), json_decref(first_seen[k]);
    cr_assert_eq(ts_stop(&a), 0);
    cr_assert_eq(ts_stop(b), 0);

    /* a restarted replica agrees with the state the two left */
    start_replica(&a, reg, "poll", iv);
    cr_assert_eq(predict(&a, v, sizeof v, NULL), 200);
    cr_expect_str_eq(v, "4");
    cr_assert_eq(ts_stop(&a), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* On one host (a local volume) the state file's rename is an inotify event: the other replica
 * follows without waiting for a periodic rescan (here there is none). */
Test(replicas, inotify_follows_the_state_file_without_polling, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = ts_registry_ok("test-replicas");
    test_server a, b;
    start_replica(&a, reg, "inotify", "0");
    start_replica(&b, reg, "inotify", "0");
    char v[32];
    cr_assert_eq(predict(&b, v, sizeof v, NULL), 200);
    cr_assert_str_eq(v, "1");
    cr_assert_eq(call(&a, "POST", "/v1/tasks/cls:activate", "{\"version\":\"0\"}", NULL), 200);
    double dt = until_serves(&b, "0");
    cr_expect(dt >= 0 && dt <= 1000, "roll-back followed in %.0f ms without a periodic rescan", dt);
    cr_assert_eq(ts_stop(&a), 0);
    cr_assert_eq(ts_stop(&b), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}
