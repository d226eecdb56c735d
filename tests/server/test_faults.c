/* test_faults.c - faults under load on the real `adapterd serve` (adapters_store/'s crash
 * consistency and start-up, server/admin.c's answers): kills at random moments while versions
 * change and clients predict, a full disk during an upload, a state that cannot be read, and a
 * start-up over broken versions.
 * Registries are copies of the bert-tiny fixtures in temporary folders. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "http_client.h"

#define AD ADAPTERD_FIXTURES "/adapters/bert-tiny"
#define TOKEN "t0ken"
#define AUTH "Authorization: Bearer " TOKEN

/* A registry in a fresh temporary folder (absolute path): bert-tiny, task cls (versions 0 and 1
 * of the fixture cls_lora) and task other (ia3), files copied. */
static char *make_registry(void) {
    char *dir = ts_registry_ok("adapterd-faults");
    ts_sh_ok("mkdir -p %s/tasks/other/1 && cp -rL %s/ia3/adapters/* %s/tasks/other/1/", dir, AD, dir);
    return dir;
}

/* Swaps reg's state file and the folder state.saved in one rename (RENAME_EXCHANGE): the server's
 * rescans (every 300 ms here) never see the registry without a state file in between, which they
 * would rightly follow as "no state" (the highest version current): a mv then mkdir left that window,
 * and a rescan under AddressSanitizer on a busy machine once fell in it. */
static void swap_state(const char *reg) {
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/state.saved", reg);
    snprintf(b, sizeof b, "%s/.adapterd-state.json", reg);
    cr_assert_eq(renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE), 0, "exchange %s and %s: %s", a, b, strerror(errno));
}

static int start_on(test_server *s, const char *reg) {
    const char *args[] = {"--registry", reg, "--admin-token", TOKEN, "--max-upload-bytes", "2000000",
                          "--watch-interval-ms", "300", "--watch-debounce-ms", "50", NULL};
    return ts_start(s, args, NULL);
}

typedef struct {
    char *data;
    size_t len;
} blob;

/* The folder src (its contents become a version) as a .tar.gz in memory. */
static blob tgz_of(const char *src) {
    blob b;
    b.data = ts_tgz_of(src, &b.len);
    cr_assert(b.data, "cannot pack %s", src);
    return b;
}

static long upload(const test_server *s, const char *task, const char *version, const blob *b, int activate, json_t **out) {
    char path[256];
    snprintf(path, sizeof path, "/v1/tasks/%s/versions/%s%s", task, version, activate ? "?activate=true" : "");
    return ts_request(s, "PUT", path, b->data, b->len, "application/gzip", AUTH, out);
}

static long activate(const test_server *s, const char *task, const char *version) {
    char path[256], body[64];
    snprintf(path, sizeof path, "/v1/tasks/%s:activate", task);
    snprintf(body, sizeof body, "{\"version\":\"%s\"}", version);
    return ts_request(s, "POST", path, body, strlen(body), "application/json", AUTH, NULL);
}

/* The version a predict of task answered, into version; returns the status. */
static long predict(const test_server *s, const char *task, char *version, size_t vn) {
    char body[256];
    snprintf(body, sizeof body, "{\"inputs\":\"the movie was great\",\"tasks\":[\"%s\"]}", task);
    json_t *d = NULL;
    long st = ts_request(s, "POST", "/v1/predict", body, strlen(body), "application/json", NULL, &d);
    if (st == 200 && version) {
        json_t *t = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), task);
        snprintf(version, vn, "%s", json_string_value(json_object_get(t, "version")) ?: "");
    }
    json_decref(d);
    return st;
}

/* The task's versions listing (admin), or NULL. */
static json_t *versions(const test_server *s, const char *task) {
    char path[256];
    snprintf(path, sizeof path, "/v1/tasks/%s/versions", task);
    json_t *d = NULL;
    if (ts_request(s, "GET", path, NULL, 0, NULL, AUTH, &d) != 200) {
        json_decref(d);
        return NULL;
    }
    return d;
}

/* Names in tasks/ and tasks/<name>/ that a server writes only while it works (staging, deletion),
 * and the state files' temporaries: after a start-up there must be none. Returns how many. */
static int leftovers(const char *reg, char *first, size_t fn) {
    char p[PATH_MAX];
    int n = 0;
    first[0] = '\0';
    const char *tmps[] = {".adapterd-state.json.tmp", ".adapterd-state.log.tmp"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", reg, tmps[i]);
        if (access(p, F_OK) == 0 && !n++) snprintf(first, fn, "%s", tmps[i]);
    }
    snprintf(p, sizeof p, "%s/tasks", reg);
    DIR *d = opendir(p);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (de->d_name[0] == '.') {
            if (!n++) snprintf(first, fn, "tasks/%s", de->d_name);
            continue;
        }
        char q[PATH_MAX];
        snprintf(q, sizeof q, "%s/tasks/%s", reg, de->d_name);
        DIR *t = opendir(q);
        struct dirent *te;
        while (t && (te = readdir(t)))
            if (te->d_name[0] == '.' && strcmp(te->d_name, ".") && strcmp(te->d_name, ".."))
                if (!n++) snprintf(first, fn, "tasks/%s/%s", de->d_name, te->d_name);
        if (t) closedir(t);
    }
    if (d) closedir(d);
    return n;
}

/* ---- kills at random moments ---- */

#define KILL_CYCLES 50
#define MAX_VERSIONS 6

static test_server kill_srv;
static atomic_int kill_stop, kill_killed, kill_failed_before_kill, kill_answers, kill_admin_errors;
static char kill_admin_error[256]; /* the first admin answer that was not the expected one */

/* An admin answer other than want while the server was not being killed (checked by the main thread). */
static void admin_answer(long st, long want, const char *what, const char *v) {
    if (st == want || atomic_load(&kill_killed)) return;
    if (atomic_fetch_add(&kill_admin_errors, 1) == 0)
        snprintf(kill_admin_error, sizeof kill_admin_error, "%s %s: %ld, want %ld", what, v, st, want);
}
static blob kill_src[3];

typedef struct {
    unsigned seed;
    char acked[32];          /* cls's current version as last acknowledged to this client */
    char pending[32];        /* the current version the request in flight would make, or "" */
    int in_flight;           /* an admin request was sent and not answered */
    int tmp_acked;           /* task tmp exists, as last acknowledged */
    int tmp_pending;         /* what the request in flight would make of it; -1: it is not about tmp */
    int next;                /* next version number to upload */
    char vers[64][32];       /* cls's versions at the cycle's start (updated as answers come) */
    int n_vers;
    int ops;
} admin_state;

static void *predict_client(void *arg) {
    const char *task = arg;
    while (!atomic_load(&kill_stop)) {
        long st = predict(&kill_srv, task, NULL, 0);
        if (st == 200) atomic_fetch_add(&kill_answers, 1);
        else if (!atomic_load(&kill_killed)) atomic_fetch_add(&kill_failed_before_kill, 1);
    }
    return NULL;
}

static void drop_version(admin_state *a, int i) {
    memmove(a->vers[i], a->vers[i + 1], (size_t)(a->n_vers - i - 1) * sizeof a->vers[0]);
    a->n_vers--;
}

/* One admin change: on cls an upload (activated or not), an activation, or the deletion of a
 * version that is not current; or task tmp created by an upload or deleted whole. Tracks what was
 * acknowledged; a request cut by the kill stays pending. */
static void admin_op(admin_state *a) {
    int r = (int)(rand_r(&a->seed) % 100);
    char v[32];
    long st;
    a->ops++;
    a->tmp_pending = -1;
    if (a->n_vers >= MAX_VERSIONS && r < 60) r = 90 + r % 10; /* keep the registry small: delete */
    if (r >= 55 && r < 60) {
        snprintf(a->pending, sizeof a->pending, "%s", a->acked);
        a->tmp_pending = !a->tmp_acked;
        a->in_flight = 1;
        st = a->tmp_acked ? ts_request(&kill_srv, "DELETE", "/v1/tasks/tmp", NULL, 0, NULL, AUTH, NULL)
                          : upload(&kill_srv, "tmp", "1", &kill_src[2], 1, NULL);
        if (st < 0) return;
        a->in_flight = 0;
        admin_answer(st, a->tmp_acked ? 200 : 201, a->tmp_acked ? "delete task" : "create task", "tmp");
        if (st == 200 || st == 201) a->tmp_acked = !a->tmp_acked;
    } else if (r < 55) {
        int act = r < 40;
        snprintf(v, sizeof v, "%d", a->next++);
        snprintf(a->pending, sizeof a->pending, "%s", act ? v : a->acked);
        a->in_flight = 1;
        st = upload(&kill_srv, "cls", v, &kill_src[rand_r(&a->seed) % 3], act, NULL);
        if (st < 0) return;
        a->in_flight = 0;
        admin_answer(st, 201, "upload", v);
        if (st == 201) {
            snprintf(a->vers[a->n_vers++], sizeof a->vers[0], "%s", v);
            if (act) snprintf(a->acked, sizeof a->acked, "%s", v);
        }
    } else if (r < 85) {
        snprintf(v, sizeof v, "%s", a->vers[rand_r(&a->seed) % (unsigned)a->n_vers]);
        snprintf(a->pending, sizeof a->pending, "%s", v);
        a->in_flight = 1;
        st = activate(&kill_srv, "cls", v);
        if (st < 0) return;
        a->in_flight = 0;
        admin_answer(st, 200, "activate", v);
        if (st == 200) snprintf(a->acked, sizeof a->acked, "%s", v);
    } else {
        int i = (int)(rand_r(&a->seed) % (unsigned)a->n_vers);
        if (!strcmp(a->vers[i], a->acked)) {
            a->ops--; /* not a change: the current version stays */
            return;
        }
        snprintf(v, sizeof v, "%s", a->vers[i]);
        snprintf(a->pending, sizeof a->pending, "%s", a->acked);
        a->in_flight = 1;
        char path[128];
        snprintf(path, sizeof path, "/v1/tasks/cls/versions/%s", v);
        st = ts_request(&kill_srv, "DELETE", path, NULL, 0, NULL, AUTH, NULL);
        if (st < 0) return;
        a->in_flight = 0;
        admin_answer(st, 200, "delete", v);
        if (st == 200) drop_version(a, i);
    }
}

static admin_state kill_admin;

static void *admin_client(void *arg) {
    admin_state *a = arg;
    while (!atomic_load(&kill_stop) && !atomic_load(&kill_killed)) admin_op(a);
    return NULL;
}

/* After a restart: the registry loaded, every task serves, cls's current version is the last one
 * acknowledged (or the one a request cut by the kill was making), and nothing is left over. */
static void check_restart(admin_state *a, const char *reg, int cycle) {
    json_t *d = NULL;
    cr_assert_eq(ts_request(&kill_srv, "GET", "/v1/tasks", NULL, 0, NULL, NULL, &d), 200, "cycle %d", cycle);
    json_t *tasks = json_object_get(d, "tasks");
    /* task tmp exists as acknowledged, or as the request cut by the kill was making it */
    long tmp_st = ts_request(&kill_srv, "GET", "/v1/tasks/tmp", NULL, 0, NULL, NULL, NULL);
    int tmp = tmp_st == 200;
    cr_expect(tmp_st == 200 || tmp_st == 404, "cycle %d: GET /v1/tasks/tmp: %ld", cycle, tmp_st);
    cr_expect(tmp == a->tmp_acked || (a->in_flight && a->tmp_pending == tmp), "cycle %d: task tmp %s; acknowledged %s%s",
              cycle, tmp ? "exists" : "is gone", a->tmp_acked ? "created" : "deleted",
              a->in_flight && a->tmp_pending >= 0 ? ", a change of it in flight" : "");
    a->tmp_acked = tmp;
    cr_expect_eq(json_array_size(tasks), 2 + (size_t)tmp, "cycle %d: every task listed", cycle);
    size_t i;
    json_t *t;
    json_array_foreach(tasks, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        char v[32] = "";
        cr_expect_eq(predict(&kill_srv, name, v, sizeof v), 200, "cycle %d: task %s serves", cycle, name);
    }
    json_decref(d);
    json_t *vs = versions(&kill_srv, "cls");
    cr_assert(vs, "cycle %d: cls has versions", cycle);
    const char *cur = json_string_value(json_object_get(vs, "current"));
    cr_assert(cur, "cycle %d: cls has a current version", cycle);
    int ok = !strcmp(cur, a->acked) || (a->in_flight && !strcmp(cur, a->pending));
    cr_expect(ok, "cycle %d: current is %s; last acknowledged %s%s%s", cycle, cur, a->acked,
              a->in_flight ? ", in flight " : "", a->in_flight ? a->pending : "");
    char v[32] = "";
    cr_expect_eq(predict(&kill_srv, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, cur, "cycle %d: predictions use the current version", cycle);
    /* the versions now on disk and listed (an upload or deletion cut by the kill may or may not
     * have happened); every one of them is good */
    a->n_vers = 0;
    int maxv = 0;
    json_array_foreach(json_object_get(vs, "versions"), i, t) {
        const char *ver = json_string_value(json_object_get(t, "version"));
        cr_expect_str_eq(json_string_value(json_object_get(t, "state")) ?: "", "available", "cycle %d: version %s", cycle, ver);
        if (a->n_vers < 64) snprintf(a->vers[a->n_vers++], sizeof a->vers[0], "%s", ver);
        if (atoi(ver) > maxv) maxv = atoi(ver);
    }
    if (a->next <= maxv) a->next = maxv + 1;
    snprintf(a->acked, sizeof a->acked, "%s", cur);
    a->in_flight = 0;
    json_decref(vs);
    char first[PATH_MAX];
    int n = leftovers(reg, first, sizeof first);
    cr_expect_eq(n, 0, "cycle %d: %d leftovers after start-up, e.g. %s", cycle, n, first);
}

Test(faults, kills_at_random_moments_lose_nothing_acknowledged, .timeout = 300) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = make_registry();
    kill_src[0] = tgz_of(AD "/lora_ah/adapters");
    kill_src[1] = tgz_of(AD "/seq_bn_st/adapters");
    kill_src[2] = tgz_of(AD "/ia3/adapters");
    const char *seed_env = getenv("ADAPTERD_FAULT_SEED");
    unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);
    cr_log_info("faults: seed %u (ADAPTERD_FAULT_SEED reproduces a run)", seed);
    admin_state *a = &kill_admin;
    memset(a, 0, sizeof *a);
    a->seed = seed;
    a->next = 2;
    snprintf(a->acked, sizeof a->acked, "1");
    int ops = 0, answers = 0, in_flight_at_kill = 0;
    double t0 = (double)time(NULL);
    /* first a version uploaded without activate, then a kill: the restart must keep version 1
     * current (the highest, 2, is not what any client was told) */
    cr_assert_eq(start_on(&kill_srv, reg), 0);
    cr_assert_eq(upload(&kill_srv, "cls", "2", &kill_src[2], 0, NULL), 201);
    kill(kill_srv.pid, SIGKILL);
    waitpid(kill_srv.pid, NULL, 0);
    a->next = 3;
    for (int cycle = 0; cycle < KILL_CYCLES; cycle++) {
        cr_assert_eq(start_on(&kill_srv, reg), 0, "cycle %d: the server did not start on the registry a kill left", cycle);
        check_restart(a, reg, cycle);
        atomic_store(&kill_stop, 0);
        atomic_store(&kill_killed, 0);
        atomic_store(&kill_answers, 0);
        pthread_t th[3];
        pthread_create(&th[0], NULL, predict_client, "cls");
        pthread_create(&th[1], NULL, predict_client, "other");
        pthread_create(&th[2], NULL, admin_client, a);
        int ops0 = a->ops;
        ts_sleep_ms(50 + (int)(rand_r(&a->seed) % 700));
        atomic_store(&kill_killed, 1);
        kill(kill_srv.pid, SIGKILL);
        waitpid(kill_srv.pid, NULL, 0);
        atomic_store(&kill_stop, 1);
        for (int k = 0; k < 3; k++) pthread_join(th[k], NULL);
        ops += a->ops - ops0;
        answers += atomic_load(&kill_answers);
        in_flight_at_kill += a->in_flight;
    }
    cr_assert_eq(start_on(&kill_srv, reg), 0, "the server did not start after the last kill");
    check_restart(a, reg, KILL_CYCLES);
    cr_expect_eq(ts_stop(&kill_srv), 0);
    cr_log_info("faults: %d kills in %.0f s, %d admin changes (%d cut by a kill), %d predictions answered", KILL_CYCLES,
                (double)time(NULL) - t0, ops, in_flight_at_kill, answers);
    cr_expect_eq(atomic_load(&kill_failed_before_kill), 0, "%d predictions failed before a kill",
                 atomic_load(&kill_failed_before_kill));
    cr_expect_eq(atomic_load(&kill_admin_errors), 0, "%d admin answers were wrong, first: %s",
                 atomic_load(&kill_admin_errors), kill_admin_error);
    cr_expect_gt(ops, KILL_CYCLES, "the kills landed among admin changes");
    cr_expect_gt(in_flight_at_kill, 0, "some kills cut an admin change");
    for (int k = 0; k < 3; k++) free(kill_src[k].data);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- a full disk during an upload ---- */

Test(faults, a_full_disk_during_an_upload_leaves_the_task_as_it_was, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = make_registry();
    blob big = tgz_of(AD "/lora_ah/adapters"); /* adapter.safetensors: 42 KB */
    blob small = tgz_of(AD "/ia3/adapters");   /* every file under 5 KB */
    /* a 16 KB file size limit stands for a full disk: the server inherits it (the soft limit is
     * restored for this process at once) */
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 16384;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    test_server s;
    int started = start_on(&s, reg);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    cr_assert_eq(started, 0);
    json_t *d = NULL;
    long st = upload(&s, "cls", "7", &big, 1, &d);
    cr_expect_eq(st, 507, "a full disk is 507 (got %ld)", st);
    json_t *e = json_object_get(d, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")) ?: "", "insufficient_storage");
    const char *msg = json_string_value(json_object_get(e, "message"));
    cr_expect(msg && !strstr(msg, reg), "the message names no server path: %s", msg ? msg : "(none)");
    char vmsg[512];
    cr_expect_eq(ts_validate("PUT", "/v1/tasks/{name}/versions/{version}", 507, d, vmsg, sizeof vmsg), 0, "%s", vmsg);
    json_decref(d);
    /* the task keeps its version; nothing half-written remains */
    char v[32] = "";
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, "1");
    json_t *vs = versions(&s, "cls");
    cr_expect_str_eq(json_string_value(json_object_get(vs, "current")) ?: "", "1");
    cr_expect_eq(json_array_size(json_object_get(vs, "versions")), 2);
    json_decref(vs);
    char first[PATH_MAX], p[PATH_MAX];
    cr_expect_eq(leftovers(reg, first, sizeof first), 0, "left behind: %s", first);
    snprintf(p, sizeof p, "%s/tasks/cls/7", reg);
    cr_expect_neq(access(p, F_OK), 0, "no version folder");
    /* what fits still goes in */
    cr_expect_eq(upload(&s, "cls", "8", &small, 1, NULL), 201);
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, "8");
    cr_expect_eq(ts_stop(&s), 0);
    free(big.data), free(small.data);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* The same on a file system that is really full: tasks/ is a small tmpfs (needs the right to
 * mount, else skipped) filled up but for 16 KB; the upload's 42 KB tensor file gets ENOSPC. */
Test(faults, a_full_file_system_during_an_upload_is_507_and_leaves_nothing, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = make_registry();
    char tasks[PATH_MAX], cmd[PATH_MAX * 3];
    snprintf(tasks, sizeof tasks, "%s/tasks", reg);
    ts_sh_ok("mv %s %s.orig && mkdir %s", tasks, tasks, tasks);
    snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=512k tmpfs %s 2>/dev/null", tasks);
    if (system(cmd) != 0) {
        ts_sh_ok("rm -rf %s", reg);
        free(reg);
        cr_skip_test("cannot mount a tmpfs here (needs CAP_SYS_ADMIN); the file size limit test covers the path");
    }
    ts_sh_ok("cp -a %s.orig/. %s/ && rm -rf %s.orig", tasks, tasks, tasks);
    /* fill it, then free 16 KB (the filler is a plain file in a task folder: not a version) */
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=%s/other/filler.bin bs=4096 2>/dev/null; truncate -s -16K %s/other/filler.bin", tasks,
             tasks);
    cr_expect_eq(system(cmd), 0);
    blob big = tgz_of(AD "/lora_ah/adapters"), small = tgz_of(AD "/ia3/adapters");
    test_server s;
    cr_expect_eq(start_on(&s, reg), 0);
    json_t *d = NULL;
    long st = upload(&s, "cls", "7", &big, 1, &d);
    cr_expect_eq(st, 507, "a full file system is 507 (got %ld)", st);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(d, "error"), "code")) ?: "", "insufficient_storage");
    json_decref(d);
    char v[32] = "", first[PATH_MAX];
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, "1", "the task keeps its version");
    cr_expect_eq(leftovers(reg, first, sizeof first), 0, "left behind: %s", first);
    snprintf(cmd, sizeof cmd, "%s/cls/7", tasks);
    cr_expect_neq(access(cmd, F_OK), 0, "no version folder");
    /* room again: the same server takes uploads */
    snprintf(cmd, sizeof cmd, "%s/other/filler.bin", tasks);
    unlink(cmd);
    cr_expect_eq(upload(&s, "cls", "8", &small, 1, NULL), 201);
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, "8");
    cr_expect_eq(ts_stop(&s), 0);
    snprintf(cmd, sizeof cmd, "umount %s", tasks);
    cr_expect_eq(system(cmd), 0);
    free(big.data), free(small.data);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* ---- start-up over broken versions ---- */

/* A state the server cannot read (here a folder where the base should be: stat succeeds, reading
 * fails, as a network file system's I/O error does) is not "no state": an upload and an activation
 * answer 503 naming the cause, and change nothing; once it reads again, they go through. */
Test(faults, a_state_that_cannot_be_read_refuses_changes_with_503, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = make_registry();
    blob small = tgz_of(AD "/ia3/adapters");
    test_server s;
    cr_assert_eq(start_on(&s, reg), 0);
    cr_assert_eq(activate(&s, "cls", "0"), 200, "the state written once");
    ts_sh_ok("mkdir %s/state.saved", reg);
    swap_state(reg); /* the state file is now state.saved, and .adapterd-state.json a folder */
    json_t *d = NULL;
    long st = upload(&s, "cls", "7", &small, 1, &d);
    cr_expect_eq(st, 503, "an upload: %ld", st);
    json_t *e = json_object_get(d, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")) ?: "", "unavailable");
    const char *msg = json_string_value(json_object_get(e, "message"));
    cr_expect(msg && strstr(msg, "registry state could not be read") && strstr(msg, "nothing changed"), "%s", msg ?: "(none)");
    char vmsg[512];
    cr_expect_eq(ts_validate("PUT", "/v1/tasks/{name}/versions/{version}", st, d, vmsg, sizeof vmsg), 0, "%s", vmsg);
    json_decref(d);
    d = NULL;
    st = ts_request(&s, "POST", "/v1/tasks/cls:activate", "{\"version\":\"1\"}", 15, "application/json", AUTH, &d);
    cr_expect_eq(st, 503, "an activation: %ld", st);
    msg = json_string_value(json_object_get(json_object_get(d, "error"), "message"));
    cr_expect(msg && strstr(msg, "registry state could not be read"), "%s", msg ?: "(none)");
    cr_expect_eq(ts_validate("POST", "/v1/tasks/{name}:activate", st, d, vmsg, sizeof vmsg), 0, "%s", vmsg);
    json_decref(d);
    char v[32] = "", p[PATH_MAX];
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, "0", "the task keeps its version");
    json_t *vs = versions(&s, "cls");
    cr_expect_eq(json_array_size(json_object_get(vs, "versions")), 2, "nothing listed");
    json_decref(vs);
    snprintf(p, sizeof p, "%s/tasks/cls/7", reg);
    cr_expect_neq(access(p, F_OK), 0, "no version folder");
    snprintf(p, sizeof p, "%s/state.saved", reg);
    cr_expect_eq(access(p, F_OK), 0, "the state was not rewritten");
    /* readable again */
    swap_state(reg);
    ts_sh_ok("rmdir %s/state.saved", reg);
    cr_expect_eq(activate(&s, "cls", "1"), 200);
    cr_expect_eq(upload(&s, "cls", "7", &small, 0, NULL), 201);
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, "1");
    cr_expect_eq(ts_stop(&s), 0);
    free(small.data);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

Test(faults, start_up_serves_every_good_task_and_lists_the_broken_versions, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = make_registry();
    /* cls 2 (the highest, so current) has a truncated tensor; cls 01 is misnamed; task bad's only
     * version has an unreadable task.json */
    ts_sh_ok("mkdir -p %s/tasks/cls/2 && cp -rL %s/lora_ah/adapters/lora %s/tasks/cls/2/ && "
       "truncate -s 300 %s/tasks/cls/2/lora/adapter.safetensors && cp -r %s/tasks/cls/0 %s/tasks/cls/01 && "
       "mkdir -p %s/tasks/bad/1 && echo '{\"model\":' > %s/tasks/bad/1/task.json",
       reg, AD, reg, reg, reg, reg, reg, reg);
    test_server s;
    cr_assert_eq(start_on(&s, reg), 0, "one broken version folder must not stop the server");
    char v[32] = "", msg[512];
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200);
    cr_expect_str_eq(v, "1", "the newest good version serves");
    cr_expect_eq(predict(&s, "other", v, sizeof v), 200);
    json_t *d = NULL;
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/cls", NULL, 0, NULL, NULL, &d), 200);
    cr_expect_eq(ts_validate("GET", "/v1/tasks/{name}", 200, d, msg, sizeof msg), 0, "%s", msg);
    json_t *fb = json_object_get(d, "fallback");
    cr_expect_str_eq(json_string_value(json_object_get(fb, "version")) ?: "", "2", "the fallback is visible");
    const char *why = json_string_value(json_object_get(fb, "reason"));
    cr_expect(why && strstr(why, "adapter.safetensors") && !strstr(why, reg), "reason: %s", why ? why : "(none)");
    json_decref(d);
    json_t *vs = versions(&s, "cls");
    cr_assert(vs);
    cr_expect_eq(ts_validate("GET", "/v1/tasks/{name}/versions", 200, vs, msg, sizeof msg), 0, "%s", msg);
    size_t i;
    json_t *e;
    int failed = 0;
    json_array_foreach(json_object_get(vs, "versions"), i, e) {
        const char *ver = json_string_value(json_object_get(e, "version"));
        const char *state = json_string_value(json_object_get(e, "state"));
        if (!strcmp(ver, "2") || !strcmp(ver, "01")) {
            failed++;
            cr_expect_str_eq(state, "failed", "version %s", ver);
            cr_expect(json_string_value(json_object_get(e, "reason")), "version %s has a reason", ver);
        } else {
            cr_expect_str_eq(state, "available", "version %s", ver);
        }
    }
    cr_expect_eq(failed, 2);
    json_decref(vs);
    cr_expect_eq(ts_request(&s, "GET", "/v1/tasks/bad", NULL, 0, NULL, NULL, &d), 404, "a task with no good version is not served");
    const char *why404 = json_string_value(json_object_get(json_object_get(d, "error"), "message"));
    cr_expect(why404 && strstr(why404, "not served") && strstr(why404, "task.json") && !strstr(why404, reg),
              "the 404 says why: %s", why404 ?: "(none)");
    json_decref(d);
    /* the public listing: failed versions with their reasons, and the task that has no other under "unserved" */
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks", NULL, 0, NULL, NULL, &d), 200);
    cr_expect_eq(ts_validate("GET", "/v1/tasks", 200, d, msg, sizeof msg), 0, "%s", msg);
    json_t *un = json_object_get(d, "unserved"), *u0 = json_array_get(un, 0);
    cr_assert_eq(json_array_size(un), 1, "only bad is unserved: %s", json_dumps(d, 0));
    cr_expect_str_eq(json_string_value(json_object_get(u0, "name")) ?: "", "bad");
    json_t *uv = json_array_get(json_object_get(u0, "versions"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(uv, "state")) ?: "", "failed");
    const char *ur = json_string_value(json_object_get(uv, "reason"));
    cr_expect(ur && strstr(ur, "task.json") && !strstr(ur, reg), "reason: %s", ur ?: "(none)");
    json_t *tk, *cls_vs = NULL;
    json_array_foreach(json_object_get(d, "tasks"), i, tk)
        if (!strcmp(json_string_value(json_object_get(tk, "name")) ?: "", "cls")) cls_vs = json_object_get(tk, "versions");
    failed = 0;
    json_array_foreach(cls_vs, i, e) failed += json_object_get(e, "reason") && !strcmp(json_string_value(json_object_get(e, "state")), "failed");
    cr_expect_eq(failed, 2, "GET /v1/tasks lists cls's failed versions with reasons: %s", json_dumps(cls_vs, 0));
    json_decref(d);
    vs = versions(&s, "bad");
    cr_expect_eq(json_array_size(json_object_get(vs, "versions")), 1, "but its failed version is listed");
    json_decref(vs);
    /* a leading zero is refused; a failed version can be deleted */
    blob b = tgz_of(AD "/ia3/adapters");
    d = NULL;
    cr_expect_eq(upload(&s, "cls", "03", &b, 0, &d), 422);
    const char *m = json_string_value(json_object_get(json_object_get(d, "error"), "message"));
    cr_expect(m && strstr(m, "leading zero"), "%s", m ? m : "(none)");
    json_decref(d);
    free(b.data);
    cr_expect_eq(ts_request(&s, "DELETE", "/v1/tasks/cls/versions/2", NULL, 0, NULL, AUTH, NULL), 200);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/tasks/cls/2", reg);
    cr_expect_neq(access(p, F_OK), 0, "the failed version's folder is gone");
    cr_expect_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}

/* The same broken current version under a memory budget, where start-up reads metadata only: the
 * first prediction finds it broken, is answered by the newest good version, and from then on the
 * task says so as after a start-up fallback (it once failed every request, listed as available). */
Test(faults, with_a_budget_a_broken_current_version_falls_back_at_first_use, .timeout = 60) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char *reg = make_registry();
    ts_sh_ok("mkdir -p %s/tasks/cls/2 && cp -rL %s/lora_ah/adapters/lora %s/tasks/cls/2/ && "
       "truncate -s 300 %s/tasks/cls/2/lora/adapter.safetensors", reg, AD, reg, reg);
    const char *args[] = {"--registry", reg, "--admin-token", TOKEN, "--adapter-memory", "268435456", NULL};
    test_server s;
    cr_assert_eq(ts_start(&s, args, NULL), 0);
    char v[32] = "", msg[512];
    cr_expect_eq(predict(&s, "cls", v, sizeof v), 200, "the first request is answered");
    cr_expect_str_eq(v, "1", "by the newest good version");
    json_t *d = NULL;
    cr_assert_eq(ts_request(&s, "GET", "/v1/tasks/cls", NULL, 0, NULL, NULL, &d), 200);
    cr_expect_eq(ts_validate("GET", "/v1/tasks/{name}", 200, d, msg, sizeof msg), 0, "%s", msg);
    json_t *fb = json_object_get(d, "fallback");
    cr_expect_str_eq(json_string_value(json_object_get(fb, "version")) ?: "", "2", "the fallback is visible");
    const char *why = json_string_value(json_object_get(fb, "reason"));
    cr_expect(why && strstr(why, "adapter.safetensors") && !strstr(why, reg), "reason: %s", why ? why : "(none)");
    json_decref(d);
    json_t *vs = versions(&s, "cls");
    cr_assert(vs);
    cr_expect_str_eq(json_string_value(json_object_get(vs, "current")) ?: "", "1");
    size_t i;
    json_t *e;
    int failed = 0;
    json_array_foreach(json_object_get(vs, "versions"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "version")) ?: "", "2")) continue;
        failed++;
        cr_expect_str_eq(json_string_value(json_object_get(e, "state")) ?: "", "failed");
    }
    cr_expect_eq(failed, 1, "version 2 is listed as failed");
    json_decref(vs);
    cr_expect_eq(predict(&s, "other", v, sizeof v), 200);
    cr_expect_eq(ts_stop(&s), 0);
    ts_sh_ok("rm -rf %s", reg);
    free(reg);
}
