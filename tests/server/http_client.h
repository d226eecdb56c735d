/* http_client.h - what the server integration tests share, one copy each: start and stop the real
 * `adapterd serve` on 127.0.0.1 with a free port, a registry copied from the fixtures, requests with
 * libcurl (JSON or binary bodies, or in flight on a thread of their own), uploads packed as
 * .tar.gz, metrics read back, and bodies checked against proto/openapi.yaml.
 *
 * Tests wait for states (a metric reaching a value, a process exiting), bounded, rather than for
 * fixed times, so a loaded machine makes them slower, not flaky. */
#ifndef ADAPTERD_TESTS_HTTP_CLIENT_H
#define ADAPTERD_TESTS_HTTP_CLIENT_H

#include <jansson.h>
#include <pthread.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
} test_server;

/* Starts adapterd serve (this build's, or the binary named by ADAPTERD_TEST_SERVER) on the fixture registry with extra arguments (NULL-terminated list, may be
 * NULL); env: "KEY=VALUE" strings to set in the child (NULL-terminated, may be NULL). Returns 0 when
 * it listens within 20 s. */
int ts_start(test_server *s, const char *const *args, const char *const *env);
/* SIGTERM, wait; returns the exit status (or -1 when it did not exit normally within 20 s). */
int ts_stop(test_server *s);
/* Waits up to bound_ms for a server that is stopping on its own (a drain already signalled) and
 * returns its exit status, or -1 when it was killed by a signal or had to be killed at the bound.
 * Unlike ts_stop it sends no second SIGTERM, which could land after the server restored the
 * default action at the end of its drain. */
int ts_wait_exit(test_server *s, int bound_ms);

typedef struct {
    long status;
    char *body;
    size_t len;
    char retry_after[32];
    char request_id[96];
    char content_type[96];
} ts_resp;

/* One request; ctype NULL means application/json when body is set. extra_header may be NULL.
 * Returns 0 when an HTTP answer arrived. */
int ts_http(const test_server *s, const char *method, const char *path, const char *body, const char *ctype,
            const char *extra_header, ts_resp *out);
void ts_resp_free(ts_resp *r);

/* One request with a binary body of len bytes (body NULL: none). ctype NULL sends no Content-Type of
 * its own; extra_header (e.g. the admin "Authorization: Bearer ...") may be NULL. Returns the HTTP
 * status, or -1 when no answer arrived (the server died); *out, when out is not NULL, gets the body
 * parsed as JSON (NULL when it is empty or not JSON), the caller's to json_decref. */
long ts_request(const test_server *s, const char *method, const char *path, const void *body, size_t len,
                const char *ctype, const char *extra_header, json_t **out);

/* A file's bytes (NUL-terminated, *len not counting the NUL), the caller's to free; NULL when it
 * cannot be read. */
char *ts_read_file(const char *path, size_t *len);

/* The contents of folder dir as a .tar.gz in memory (what an upload sends), the caller's to free;
 * NULL when tar fails. */
char *ts_tgz_of(const char *dir, size_t *len);

/* A registry in a fresh folder "<name>-XXXXXX" of the current directory: the fixture model
 * bert-tiny and the task cls (versions 0 and 1 of the fixture cls_lora), files copied, so a test may
 * change them. Returns its absolute path (the caller removes the folder and frees the string), or
 * NULL on failure. */
char *ts_registry_new(const char *name);
/* ts_registry_new that asserts success (Criterion, at the call site). */
#define ts_registry_ok(name)                                                      \
    ({                                                                            \
        char *ts_reg_ = ts_registry_new(name);                                    \
        cr_assert(ts_reg_, "cannot copy the fixture registry into %s-*", name);   \
        ts_reg_;                                                                  \
    })

/* Validates doc against the OpenAPI response schema of (method, template path, status) in the
 * generated openapi.json; returns 0, or -1 with a message naming the JSON path at fault. */
int ts_validate(const char *method, const char *tmpl, long status, json_t *doc, char *msg, size_t msg_len);

/* A POST sent from a thread of its own, so that a test can act while it is in flight. */
typedef struct {
    const test_server *s;
    const char *path, *body;   /* borrowed until ts_post_join */
    ts_resp resp;              /* the answer once joined; resp.status is -1 when none arrived */
    pthread_t th;
} ts_post;
/* Starts POSTing body (application/json) to path on s; returns 0, or -1 when no thread started. */
int ts_post_start(ts_post *p, const test_server *s, const char *path, const char *body);
/* Waits for the answer; p->resp is then the caller's to ts_resp_free. */
void ts_post_join(ts_post *p);

/* The value of the sample `name` (a metric name, with its labels if it has any) in GET /metrics, cut
 * to an integer; -1 when the server does not answer or does not show it. */
long ts_metric(const test_server *s, const char *name);
/* Polls ts_metric every 10 ms until it is at least at_least or bound_ms have passed; returns the
 * last value read (the caller checks it). */
long ts_wait_metric(const test_server *s, const char *name, long at_least, int bound_ms);

/* True when a and b, two non-empty JSON objects of numbers (a task's "scores"), have the same keys
 * and every value within tol. */
int ts_scores_close(json_t *a, json_t *b, double tol);

/* Sleeps ms milliseconds. */
void ts_sleep_ms(int ms);
/* Runs a shell command made like printf; returns system()'s status (0: it succeeded), -1 when the
 * command does not fit. ts_sh_ok asserts success (Criterion, at the call site). */
int ts_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define ts_sh_ok(...) cr_assert_eq(ts_sh(__VA_ARGS__), 0, "command failed: " __VA_ARGS__)

#endif
