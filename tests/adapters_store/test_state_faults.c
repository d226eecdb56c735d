/* test_state_faults.c - adapters_store/state.c when the file system fails one call of a state write.
 *
 * Two replicas share one registry folder. Before each write of replica A, replica B changes what A
 * has not followed yet (a pin, a rollback), and the state holds a tombstone of a third task. Then
 * one call of A's write fails, through store__state_io (store_test.h): each call the read, append
 * and compaction paths make (open, stat, fstat, pread, write, fsync, ftruncate, rename, close), the
 * first, second, ... of its kind until the write makes no more, each with EIO, EINTR, a short count
 * (pread and write) and ENOSPC. Whatever A answers, no other task's entry (version, max, pin) or
 * tombstone may change in the state as any reader folds it (store_fixture.h); a write that could not
 * read the state answers ENG_UNAVAILABLE and writes nothing; an interrupted or short read or write
 * is continued and succeeds. The writes are an activation, a pin and an upload, over the journal
 * (append) and with every write compacting. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>

#include "store_fixture.h"
#include "store_test.h"

static char reg_dir[512];
static void setup(void) {
    fx_copy(reg_dir, sizeof reg_dir);
    /* a second task with two versions, the one replica A writes */
    fx_sh("cp -r '%s/tasks/cls_lora' '%s/tasks/cls2'", reg_dir, reg_dir);
}
static void teardown(void) {
    store__journal_limit = -1;
    store_remove_dir(reg_dir);
}
TestSuite(state_faults, .init = setup, .fini = teardown, .timeout = 600);

/* ---- the fault: one call of one kind, the at-th since armed ---- */

enum { OP_OPEN, OP_STAT, OP_FSTAT, OP_PREAD, OP_WRITE, OP_FSYNC, OP_FTRUNCATE, OP_RENAME, OP_CLOSE, N_OPS };
static const char *const op_names[] = {"open", "stat", "fstat", "pread", "write", "fsync", "ftruncate", "rename", "close"};
enum { F_EIO, F_EINTR, F_SHORT, F_ENOSPC, N_FAULTS };
static const char *const fault_names[] = {"EIO", "EINTR", "a short count", "ENOSPC"};

static store__io_calls real;
static int fault_op = -1, fault_kind, fault_at, calls, fired;

/* 1 when this call of op is the one to fail */
static int hit(int op) {
    if (op != fault_op || calls++ != fault_at) return 0;
    fired = 1;
    return 1;
}

static int fail(void) {
    errno = fault_kind == F_EIO ? EIO : fault_kind == F_EINTR ? EINTR : ENOSPC;
    return -1;
}

static int f_open(const char *p, int fl, mode_t m) { return hit(OP_OPEN) ? fail() : real.open(p, fl, m); }
static int f_stat(const char *p, struct stat *st) { return hit(OP_STAT) ? fail() : real.stat(p, st); }
static int f_fstat(int fd, struct stat *st) { return hit(OP_FSTAT) ? fail() : real.fstat(fd, st); }
static ssize_t f_pread(int fd, void *b, size_t n, off_t off) {
    if (!hit(OP_PREAD)) return real.pread(fd, b, n, off);
    return fault_kind == F_SHORT ? real.pread(fd, b, n > 1 ? n / 2 : n, off) : fail();
}
static ssize_t f_write(int fd, const void *b, size_t n) {
    if (!hit(OP_WRITE)) return real.write(fd, b, n);
    return fault_kind == F_SHORT ? real.write(fd, b, n > 1 ? n / 2 : n) : fail();
}
static int f_fsync(int fd) { return hit(OP_FSYNC) ? fail() : real.fsync(fd); }
static int f_ftruncate(int fd, off_t n) { return hit(OP_FTRUNCATE) ? fail() : real.ftruncate(fd, n); }
static int f_rename(const char *a, const char *b) { return hit(OP_RENAME) ? fail() : real.rename(a, b); }
static int f_close(int fd) {
    if (!hit(OP_CLOSE)) return real.close(fd);
    real.close(fd); /* as Linux does: the descriptor is gone whatever close answers */
    return fail();
}

static void arm(int op, int kind, int at) {
    real = store__state_io;
    fault_op = op, fault_kind = kind, fault_at = at, calls = 0, fired = 0;
    store__state_io = (store__io_calls){f_open, f_stat, f_fstat, f_pread, f_write, f_fsync, f_ftruncate, f_rename, f_close};
}

static void disarm(void) {
    store__state_io = real;
    fault_op = -1;
}

/* ---- what must not change ---- */

/* The folded state without task name's entry and tombstones (a new reference). */
static json_t *others_of(const char *name) {
    json_t *root = fx_state_read(reg_dir), *tasks = json_object_get(root, "tasks"), *dead = json_object_get(root, "deleted");
    json_object_del(tasks, name);
    size_t nl = strlen(name);
    for (size_t i = json_array_size(dead); i-- > 0;) {
        const char *t = json_string_value(json_array_get(dead, i));
        if (t && !strncmp(t, name, nl) && t[nl] == '/') json_array_remove(dead, i);
    }
    json_t *o = json_pack("{s:O,s:O}", "tasks", tasks, "deleted", dead);
    json_decref(root);
    return o;
}

/* The folded state, whole, as text; with_gen: its generation too (a refused write renames nothing
 * in; an upload refused at its second write has written its first and then the entry as before). */
static char *whole_state(int with_gen) {
    json_t *root = fx_state_read(reg_dir);
    if (!with_gen) json_object_del(root, "generation");
    char *s = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(root);
    cr_assert(s);
    return s;
}

/* Whether task name's current version is pinned, as replica r serves it. */
static int pinned_in(store_registry *r, const char *name) {
    store_version_info v[8];
    int n = store_versions(r, name, v, 8), p = 0;
    for (int i = 0; i < n; i++) p |= v[i].current && v[i].pinned;
    return p;
}

/* ---- the writes ---- */

enum { W_ACTIVATE, W_PIN, W_UPLOAD };

typedef struct {
    store_registry *a, *b; /* replica A writes under a fault; B changes what A has not followed */
    int round;             /* alternates B's pin and rollback, A's activation and pin */
    int next_version;      /* A's next upload */
} replicas;

static void replicas_open(replicas *x, long journal_limit) {
    store__journal_limit = journal_limit;
    x->a = fx_open(reg_dir, 0), x->b = fx_open(reg_dir, 0), x->round = 0, x->next_version = 2;
    eng_err e = {0};
    /* another replica's tombstone: peft's version 7, whose folder could not be removed */
    cr_assert_eq(store_pin(x->b, "qa", 1, &e), 0, "%s", e.msg);
    fx_sh("printf '{\"task\": \"peft\", \"current\": \"1\", \"max\": 7, \"deleted\": [\"7\"]}\\n' >> '%s/.adapterd-state.log'",
          reg_dir);
    cr_assert_eq(store_pin(x->b, "reg", 1, &e), 0, "%s", e.msg); /* and B's next write keeps it */
    json_t *o = others_of("cls2");
    cr_assert_eq(json_array_size(json_object_get(o, "deleted")), 1, "the tombstone is in the state");
    json_decref(o);
}

static void replicas_close(replicas *x) {
    store_free(x->a);
    store_free(x->b);
}

/* B's changes A has not followed: qa's pin and cls_lora's version, alternating round by round. */
static void other_replica_changes(replicas *x) {
    eng_err e = {0};
    int odd = x->round & 1;
    cr_assert_eq(store_pin(x->b, "qa", odd, &e), 0, "%s", e.msg);
    cr_assert_eq(store_activate(x->b, "cls_lora", odd ? "0" : "1", &e), 0, "%s", e.msg);
}

/* A's write of task cls2 (or ml's pin); returns its status, e set. */
static int write_of_a(replicas *x, int what, char *version, size_t vn, eng_err *e) {
    int odd = x->round & 1;
    if (what == W_ACTIVATE) return store_activate(x->a, "cls2", odd ? "0" : "1", e);
    if (what == W_PIN) return store_pin(x->a, "cls2", odd, e);
    char staged[900];
    snprintf(version, vn, "%d", x->next_version++);
    fx_stage(reg_dir, staged, sizeof staged, version);
    int rc = store_version_add(x->a, "cls2", version, staged, odd, e);
    if (rc) store_remove_dir(staged);
    return rc;
}

/* Every call of every kind failed once in turn, each kind of fault, around A's write `what`. */
static void each_fault(long journal_limit, int what) {
    replicas x;
    replicas_open(&x, journal_limit);
    int failed = 0, refused = 0, n = 0;
    for (int op = 0; op < N_OPS; op++) {
        for (int kind = 0; kind < N_FAULTS; kind++) {
            if (kind == F_SHORT && op != OP_PREAD && op != OP_WRITE) continue;
            for (int at = 0; at < 64; at++, x.round++) {
                other_replica_changes(&x);
                json_t *before = others_of("cls2");
                char *whole = whole_state(what != W_UPLOAD), version[32] = "";
                store_task *cur = store_task_acquire(x.a, "cls2", 4);
                cr_assert(cur);
                char was[32];
                snprintf(was, sizeof was, "%s", store_task_version(cur));
                store_task_release(cur);
                int was_pinned = pinned_in(x.a, "cls2");
                eng_err e = {0};
                arm(op, kind, at);
                int rc = write_of_a(&x, what, version, sizeof version, &e);
                disarm();
                if (!fired) { /* no call of this kind left to fail */
                    free(whole);
                    json_decref(before);
                    break;
                }
                n++;
                char why[200];
                snprintf(why, sizeof why, "%s of call %d of %s", fault_names[kind], at, op_names[op]);
                json_t *after = others_of("cls2");
                if (!json_equal(before, after)) {
                    char *b = json_dumps(before, JSON_SORT_KEYS | JSON_COMPACT), *a = json_dumps(after, JSON_SORT_KEYS | JSON_COMPACT);
                    cr_expect_fail("%s: another task's entry or tombstone changed\nbefore %s\nafter  %s", why, b, a);
                    free(b), free(a);
                }
                json_decref(before), json_decref(after);
                if ((op == OP_WRITE || op == OP_PREAD) && (kind == F_EINTR || kind == F_SHORT))
                    cr_expect_eq(rc, 0, "%s: continued, the write succeeds (%s)", why, e.msg);
                cr_expect(rc == 0 || rc == ENG_UNAVAILABLE || rc == ENG_IO || rc == ENG_NO_SPACE, "%s: status %d (%s)", why, rc, e.msg);
                if (rc) failed++;
                if (rc == ENG_UNAVAILABLE) {
                    refused++;
                    cr_expect(strstr(e.msg, "registry state could not be read") && strstr(e.msg, "nothing changed"), "%s: %s", why, e.msg);
                    char *now = whole_state(what != W_UPLOAD);
                    cr_expect_str_eq(now, whole, "%s: a refused write changes nothing", why);
                    free(now);
                }
                free(whole);
                if (rc && what == W_UPLOAD) {
                    store_task *t = store_task_acquire_version(x.a, "cls2", version);
                    cr_expect_null(t, "%s: not published", why);
                    store_task_release(t);
                }
                if (rc && what == W_ACTIVATE) fx_expect_current(x.a, "cls2", was, why);
                if (rc && what == W_PIN) cr_expect_eq(pinned_in(x.a, "cls2"), was_pinned, "%s: the pin as it was", why);
            }
        }
    }
    cr_log_info("%d faults, %d writes failed, %d refused", n, failed, refused);
    cr_expect_gt(refused, 0, "some faults stop the read");
    cr_expect_gt(failed, refused, "some stop the write itself");
    /* and A, following the state, serves what B recorded */
    eng_err e = {0};
    cr_assert_geq(store_rescan(x.a, &e), 0, "%s", e.msg);
    fx_expect_current(x.a, "cls_lora", x.round & 1 ? "0" : "1", "A follows B's last rollback");
    replicas_close(&x);
}

Test(state_faults, an_activation_over_the_journal) { each_fault(-1, W_ACTIVATE); }
Test(state_faults, an_activation_that_compacts) { each_fault(0, W_ACTIVATE); }
Test(state_faults, a_pin_over_the_journal) { each_fault(-1, W_PIN); }
Test(state_faults, a_pin_that_compacts) { each_fault(0, W_PIN); }
Test(state_faults, an_upload_over_the_journal) { each_fault(-1, W_UPLOAD); }
Test(state_faults, an_upload_that_compacts) { each_fault(0, W_UPLOAD); }
