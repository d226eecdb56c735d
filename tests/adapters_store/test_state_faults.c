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
 * (append) and with every write compacting. The one call made only on a failure path (ftruncate,
 * cutting a failed append back) is failed after the append's own. */
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
/* the faults armed (at most 3: a failure path's own calls fail only after another): the at-th call of
 * op since armed fails with kind */
typedef struct {
    int op, kind, at;
} fault;
static fault faults[3];
static int n_faults, calls[N_OPS], fired;

/* The kind of fault this call of op gets, or -1 for the real call. */
static int hit(int op) {
    int at = calls[op]++;
    for (int i = 0; i < n_faults; i++)
        if (faults[i].op == op && faults[i].at == at) return fired = 1, faults[i].kind;
    return -1;
}

static int fail(int kind) {
    errno = kind == F_EIO ? EIO : kind == F_EINTR ? EINTR : ENOSPC;
    return -1;
}

static int f_open(const char *p, int fl, mode_t m) {
    int k = hit(OP_OPEN);
    return k >= 0 ? fail(k) : real.open(p, fl, m);
}
static int f_stat(const char *p, struct stat *st) {
    int k = hit(OP_STAT);
    return k >= 0 ? fail(k) : real.stat(p, st);
}
static int f_fstat(int fd, struct stat *st) {
    int k = hit(OP_FSTAT);
    return k >= 0 ? fail(k) : real.fstat(fd, st);
}
static ssize_t f_pread(int fd, void *b, size_t n, off_t off) {
    int k = hit(OP_PREAD);
    if (k < 0) return real.pread(fd, b, n, off);
    return k == F_SHORT ? real.pread(fd, b, n > 1 ? n / 2 : n, off) : fail(k);
}
static ssize_t f_write(int fd, const void *b, size_t n) {
    int k = hit(OP_WRITE);
    if (k < 0) return real.write(fd, b, n);
    return k == F_SHORT ? real.write(fd, b, n > 1 ? n / 2 : n) : fail(k);
}
static int f_fsync(int fd) {
    int k = hit(OP_FSYNC);
    return k >= 0 ? fail(k) : real.fsync(fd);
}
static int f_ftruncate(int fd, off_t n) {
    int k = hit(OP_FTRUNCATE);
    return k >= 0 ? fail(k) : real.ftruncate(fd, n);
}
static int f_rename(const char *a, const char *b) {
    int k = hit(OP_RENAME);
    return k >= 0 ? fail(k) : real.rename(a, b);
}
static int f_close(int fd) {
    int k = hit(OP_CLOSE);
    if (k < 0) return real.close(fd);
    real.close(fd); /* as Linux does: the descriptor is gone whatever close answers */
    return fail(k);
}

/* Arms the faults f (n of them) until disarm. */
static void arm_all(const fault *f, int n) {
    real = store__state_io;
    memcpy(faults, f, (size_t)n * sizeof *f);
    n_faults = n, fired = 0;
    memset(calls, 0, sizeof calls);
    store__state_io = (store__io_calls){f_open, f_stat, f_fstat, f_pread, f_write, f_fsync, f_ftruncate, f_rename, f_close};
}

static void arm(int op, int kind, int at) { arm_all(&(fault){op, kind, at}, 1); }

static void disarm(void) {
    store__state_io = real;
    n_faults = 0;
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

/* The last byte of the journal. */
static int journal_last_byte(void) {
    char p[700];
    snprintf(p, sizeof p, "%s/.adapterd-state.log", reg_dir);
    FILE *f = fopen(p, "rb");
    cr_assert(f, "%s", p);
    cr_assert_eq(fseek(f, -1, SEEK_END), 0);
    int c = fgetc(f);
    fclose(f);
    return c;
}

/* The failure path's own call: an append that writes part of its line, then finds the disk full,
 * and cannot cut the journal back either. The partial line is followed by no reader, the next write
 * (the other replica's) compacts instead of appending after it, and no other task changes. */
Test(state_faults, an_append_that_fails_and_cannot_be_cut_back) {
    replicas x;
    replicas_open(&x, -1);
    other_replica_changes(&x);
    json_t *before = others_of("cls2");
    eng_err e = {0};
    const fault f[] = {{OP_WRITE, F_SHORT, 0}, {OP_WRITE, F_ENOSPC, 1}, {OP_FTRUNCATE, F_EIO, 0}};
    arm_all(f, 3);
    int rc = store_pin(x.a, "cls2", 1, &e);
    int cut = calls[OP_FTRUNCATE];
    disarm();
    cr_expect_eq(rc, ENG_NO_SPACE, "a full disk: %s", e.msg);
    cr_expect_eq(cut, 1, "the cut back was tried");
    cr_expect_neq(journal_last_byte(), '\n', "a partial line is left");
    cr_expect_eq(pinned_in(x.a, "cls2"), 0, "not pinned here either");
    json_t *after = others_of("cls2");
    cr_expect(json_equal(before, after), "no other task changed");
    json_decref(before), json_decref(after);
    x.round++;
    other_replica_changes(&x);
    cr_expect_eq(journal_last_byte(), '\n', "the other replica's write compacted");
    before = others_of("cls2");
    cr_assert_eq(store_pin(x.a, "cls2", 1, &e), 0, "%s", e.msg);
    after = others_of("cls2");
    cr_expect(json_equal(before, after), "no other task changed");
    json_decref(before), json_decref(after);
    json_t *root = fx_state_read(reg_dir);
    cr_expect(json_is_true(json_object_get(json_object_get(json_object_get(root, "tasks"), "cls2"), "pinned")), "the pin is recorded");
    json_decref(root);
    replicas_close(&x);
}
