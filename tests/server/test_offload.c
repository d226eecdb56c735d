/* test_offload.c - server/offload.c with a real libmicrohttpd daemon and libuv loop, no adapterd
 * routes: a handler hands each request's slow work to srv__offload, and the test checks the path the
 * server relies on: the work runs on a pool thread (not the daemon's, not the loop's) at nice 19,
 * the connection is resumed with its answer, an answer left empty runs the request again, a failure
 * names no registry path (scrubbed to <registry>), and no connection stays suspended. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "http_client.h"
#include "offload.h"

static srv_server fake; /* what offload.c reads of a server: loop, registry, counts */
static struct MHD_Daemon *daemon_;
static pthread_t loop_thread;
static atomic_int completed;
static atomic_int work_nice, work_on_pool, ran_again;

static void work_ok(srv_request *r) {
    work_nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    work_on_pool = !pthread_equal(pthread_self(), loop_thread);
    r->off.body = strdup("{\"done\":true}");
    r->off.len = strlen(r->off.body);
    r->off.status = 200;
}

static void work_fail(srv_request *r) {
    char msg[512];
    snprintf(msg, sizeof msg, "cannot read %s/tasks/x/adapter_config.json", store_dir(r->srv->reg));
    srv__offload_fail(r, ENG_NOT_FOUND, msg);
}

static void work_nothing(srv_request *r) { (void)r; } /* status 0: run the request again */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *body, size_t len, enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
    (void)cls, (void)method, (void)version, (void)upload_data;
    srv_request *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->srv = &fake;
        r->conn = conn;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->suspended && r->off.state == SRV_OFFLOAD_DONE) {
        r->suspended = false;
        r->off.state = SRV_OFFLOAD_IDLE;
        if (!r->off.status) { /* the work asked to run again: this time answer from here */
            ran_again++;
            return reply(conn, 200, "{\"again\":true}", 14, MHD_RESPMEM_PERSISTENT);
        }
        char *b = r->off.body;
        r->off.body = NULL;
        return reply(conn, r->off.status, b, r->off.len, MHD_RESPMEM_MUST_FREE);
    }
    void (*fn)(srv_request *) = !strcmp(url, "/ok") ? work_ok : !strcmp(url, "/fail") ? work_fail : work_nothing;
    srv__offload(fake.offl, r, fn);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    srv_request *r = *con_cls;
    if (!r) return;
    srv__offload_clear(r);
    free(r);
    *con_cls = NULL;
    completed++;
}

static void close_handle(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void setup(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    memset(&fake, 0, sizeof fake);
    eng_err e = {0};
    store_params sp = store_default_params();
    cr_assert_eq(store_open(ADAPTERD_FIXTURES "/registry", &sp, &fake.reg, &e), 0, "%s", e.msg);
    snprintf(fake.cfg.registry, sizeof fake.cfg.registry, "%s", ADAPTERD_FIXTURES "/registry");
    cr_assert_eq(uv_loop_init(&fake.loop), 0);
    cr_assert(fake.offl = srv__offload_new(&fake.loop));
    loop_thread = pthread_self();
    daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, handler, NULL,
                               MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    cr_assert(daemon_);
    completed = 0;
}

static void teardown(void) {
    MHD_stop_daemon(daemon_);
    uv_walk(&fake.loop, close_handle, NULL);
    uv_run(&fake.loop, UV_RUN_DEFAULT);
    srv__offload_free(fake.offl);
    uv_loop_close(&fake.loop);
    store_free(fake.reg);
}

TestSuite(offload, .init = setup, .fini = teardown, .timeout = 60);

/* POSTs to path from a thread of its own while this thread runs the loop. */
static ts_resp call(const char *path) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    cr_assert(di);
    test_server s = {.pid = 0, .port = di->port};
    ts_post p;
    int before = completed;
    cr_assert_eq(ts_post_start(&p, &s, path, "{}"), 0);
    for (int spins = 0; completed == before && spins < 200000; spins++) {
        uv_run(&fake.loop, UV_RUN_NOWAIT);
        usleep(50);
    }
    ts_post_join(&p);
    return p.resp;
}

Test(offload, work_runs_on_the_pool_and_its_answer_is_sent) {
    ts_resp r = call("/ok");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(r.body, "{\"done\":true}");
    cr_expect(work_on_pool, "the work ran on the loop's thread");
    cr_expect_eq(work_nice, 19, "pool threads run at nice 19, below inference");
    cr_expect_eq(atomic_load(&fake.n_suspended), 0, "the connection was resumed");
    ts_resp_free(&r);
}

Test(offload, a_failure_names_no_registry_path) {
    ts_resp r = call("/fail");
    cr_expect_eq(r.status, 404, "%s", r.body);
    cr_expect(strstr(r.body, "<registry>/tasks/x/adapter_config.json"), "%s", r.body);
    cr_expect(!strstr(r.body, ADAPTERD_FIXTURES), "the server's path leaked: %s", r.body);
    cr_expect_eq(atomic_load(&fake.n_suspended), 0);
    ts_resp_free(&r);
}

Test(offload, an_empty_answer_runs_the_request_again) {
    ts_resp r = call("/again");
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(r.body, "{\"again\":true}");
    cr_expect_eq(ran_again, 1);
    cr_expect_eq(atomic_load(&fake.n_suspended), 0);
    ts_resp_free(&r);
}
