/* test_state.c - adapters_store/state.c: the state's one reader and one writer. The state is a
 * base (.adapterd-state.json) and its journal (.adapterd-state.log); the store keeps both as it
 * last read or wrote them and reads again only what changed. Here another writer's changes (a
 * journal line, or a compaction renamed in) are followed, what is written is plain JSON a reader
 * written from the format folds (store_fixture.h), a write costs one line whatever the number of
 * tasks, the journal is compacted past its limit, and what does not parse (a base, a partial line,
 * a journal of another base) is not followed and is replaced by the next change. */
#define _GNU_SOURCE
#include <jansson.h>

#include "store_fixture.h"
#include "store_test.h"

static char reg_dir[512], state_path[600];
static void setup(void) {
    fx_copy(reg_dir, sizeof reg_dir);
    snprintf(state_path, sizeof state_path, "%s/.adapterd-state.json", reg_dir);
}
static void teardown(void) { store_remove_dir(reg_dir); }
TestSuite(state, .init = setup, .fini = teardown);

static json_t *load_state(void) { return fx_state_read(reg_dir); }

static const char *current_of(json_t *root, const char *task) { return fx_state_current(root, task); }

/* The journal's lines (each must be a JSON object), or -1 when there is none. */
static int journal_lines(void) {
    char p[700], line[4096];
    snprintf(p, sizeof p, "%s/.adapterd-state.log", reg_dir);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        cr_expect(json_is_object(o), "journal line %d is a JSON object: %s", n, line);
        json_decref(o);
        n++;
    }
    fclose(f);
    return n;
}

/* Closes r, expects the state to record cls_lora's current version as version, and a restart to
 * serve it. */
static void expect_kept(store_registry *r, const char *version, const char *why) {
    store_free(r);
    json_t *root = load_state();
    cr_expect_str_eq(current_of(root, "cls_lora") ?: "", version, "%s: recorded", why);
    json_decref(root);
    char msg[256];
    snprintf(msg, sizeof msg, "%s: after a restart", why);
    r = fx_open(reg_dir, 0);
    fx_expect_current(r, "cls_lora", version, msg);
    store_free(r);
}

static long long base_generation(void) {
    json_t *b = fx_state_base(reg_dir);
    long long g = json_integer_value(json_object_get(b, "generation"));
    json_decref(b);
    return g;
}

Test(state, the_written_file_is_plain_json_with_every_task) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    json_t *root = load_state();
    cr_expect_eq(json_integer_value(json_object_get(root, "version")), 2);
    cr_expect(json_is_array(json_object_get(root, "deleted")));
    for (int i = 0; i < N_FIXTURE_TASKS; i++)
        cr_expect(current_of(root, fixture_tasks[i]), "task %s recorded", fixture_tasks[i]);
    cr_expect_str_eq(current_of(root, "cls_lora") ?: "", "0");
    json_t *qa = json_object_get(json_object_get(root, "tasks"), "qa");
    cr_expect(json_is_true(json_object_get(qa, "pinned")), "the pin is recorded");
    cr_expect(json_is_integer(json_object_get(qa, "max")));
    json_decref(root);
    store_free(r);
}

/* Another writer's edit of cls_lora's entry: current set to version (max 1: no version above), as
 * a journal line (in place) or a compaction (new base and journal renamed in). */
static void edit_entry(const char *version, int by_rename) {
    fx_state_set(reg_dir, "cls_lora", version, 1, by_rename ? FX_COMPACT : FX_APPEND);
}

Test(state, another_writers_change_is_followed_in_place_or_by_rename) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    fx_expect_current(r, "cls_lora", "1", "activated");
    edit_entry("0", 0); /* in place: same inode, other size and times */
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    fx_expect_current(r, "cls_lora", "0", "an edit in place is read again");
    edit_entry("1", 1);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    fx_expect_current(r, "cls_lora", "1", "a renamed-in file is read again");
    /* and this process's next write keeps the other writer's entry */
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    json_t *root = load_state();
    cr_expect_str_eq(current_of(root, "cls_lora") ?: "", "1");
    json_decref(root);
    store_free(r);
}

Test(state, a_file_that_does_not_parse_is_not_followed_and_is_replaced_by_the_next_change) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    fx_sh("echo '{\"tasks\": {\"cls_lora\": {\"current\": \"1\"' > '%s'", state_path);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    fx_expect_current(r, "cls_lora", "0", "a broken state file changes nothing");
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    json_t *root = load_state();
    cr_expect_str_eq(current_of(root, "reg") ?: "", "1", "every task again");
    json_decref(root);
    expect_kept(r, "0", "rewritten from what this process serves");
}

/* The cost of a write does not grow with the registry: one journal line, the base untouched. */
Test(state, a_write_appends_one_line_and_leaves_the_base) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg); /* the first write: base and journal */
    struct stat before, after;
    cr_assert_eq(stat(state_path, &before), 0);
    int lines = journal_lines();
    cr_expect_eq(lines, 1, "a new journal holds its header only");
    const char *versions[] = {"1", "0", "1"};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(store_activate(r, "cls_lora", versions[i], &e), 0, "%s", e.msg);
        cr_expect_eq(journal_lines(), lines + 1 + i, "one line a write");
    }
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    cr_assert_eq(stat(state_path, &after), 0);
    cr_expect(before.st_ino == after.st_ino && before.st_size == after.st_size && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec,
              "the base is not rewritten");
    json_t *root = load_state();
    cr_expect(json_is_true(json_object_get(json_object_get(json_object_get(root, "tasks"), "qa"), "pinned")));
    json_decref(root);
    expect_kept(r, "1", "base and journal");
}

Test(state, the_journal_is_compacted_into_a_new_base_past_its_limit) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    long long g0 = base_generation();
    cr_expect_gt(g0, 0, "the base has a generation");
    store__journal_limit = 400; /* a few lines */
    int compacted = 0, max_lines = 0;
    for (int i = 0; i < 12; i++) {
        cr_assert_eq(store_activate(r, "cls_lora", i % 2 ? "0" : "1", &e), 0, "%s", e.msg);
        int n = journal_lines();
        if (n > max_lines) max_lines = n;
        if (base_generation() != g0) compacted++, g0 = base_generation();
    }
    store__journal_limit = -1;
    cr_expect_gt(compacted, 0, "compacted at least once");
    cr_expect_lt(max_lines, 12, "the journal never held every write");
    json_t *root = load_state();
    for (int i = 0; i < N_FIXTURE_TASKS; i++) cr_expect(current_of(root, fixture_tasks[i]), "task %s recorded", fixture_tasks[i]);
    json_decref(root);
    expect_kept(r, "0", "the last write");
}

/* A crashed writer's partial line is not followed; the next write does not append after it. */
Test(state, a_partial_last_line_is_not_followed_and_the_next_write_compacts) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    long long g0 = base_generation();
    fx_sh("printf '{\"task\": \"cls_lora\", \"current\": \"0\", \"max\": 1' >> '%s/.adapterd-state.log'", reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    fx_expect_current(r, "cls_lora", "1", "a partial line changes nothing");
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    cr_expect_neq(base_generation(), g0, "the write compacted");
    cr_expect_eq(journal_lines(), 1, "a fresh journal");
    expect_kept(r, "1", "a partial line skipped");
}

/* A journal whose header names an older base is already in the base; one naming a base not yet
 * seen is not applied to this one. */
Test(state, a_journal_of_another_base_is_not_applied) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg); /* the journal will say 1 ... */
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    /* ... and a base of a later generation says 0, the old journal left in place */
    json_t *root = load_state(), *o = json_object();
    json_object_set_new(o, "current", json_string("0"));
    json_object_set_new(o, "max", json_integer(1));
    json_object_set_new(json_object_get(root, "tasks"), "cls_lora", o);
    long long g = json_integer_value(json_object_get(root, "generation"));
    json_object_set_new(root, "generation", json_integer(g + 1));
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.other", state_path);
    cr_assert_eq(json_dump_file(root, tmp, JSON_COMPACT), 0);
    cr_assert_eq(rename(tmp, state_path), 0);
    json_decref(root);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    fx_expect_current(r, "cls_lora", "0", "the base, not the older journal's line");
    /* a journal naming a generation above the base's: not applied */
    fx_sh("printf '{\"generation\": %lld}\n{\"task\": \"cls_lora\", \"current\": \"1\", \"max\": 1}\n' > '%s/.adapterd-state.log'",
          g + 5, reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    fx_expect_current(r, "cls_lora", "0", "a journal of a base not seen is not applied");
    /* the next write makes base and journal one again */
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    expect_kept(r, "0", "base and journal one again");
}

/* A task dropped in by hand after the last write is recorded once it is served (the rescan that
 * finds it records it), and the next write about another task keeps it. */
Test(state, a_task_added_by_hand_is_recorded_by_the_next_write) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    fx_sh("mkdir -p '%s/tasks/.copy' && cp -rL '%s' '%s/tasks/.copy/' && mkdir -p '%s/tasks/newtask' && mv '%s/tasks/.copy' '%s/tasks/newtask/3'",
          reg_dir, FIXTURE_LORA, reg_dir, reg_dir, reg_dir, reg_dir);
    cr_assert_geq(store_rescan(r, &e), 0, "%s", e.msg);
    fx_expect_current(r, "newtask", "3", "the new task is served");
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    json_t *root = load_state();
    cr_expect_str_eq(current_of(root, "newtask") ?: "", "3", "and recorded");
    cr_expect_str_eq(current_of(root, "cls_lora") ?: "", "0");
    json_decref(root);
    store_free(r);
}

/* The writer walks every task for missing entries only when a task gained a current version or the
 * state changed under it: an entry another writer dropped for a task this process serves comes back
 * with the next write, whichever task that write is about. */
Test(state, an_entry_another_writer_dropped_is_recorded_again_by_the_next_write) {
    store_registry *r = fx_open(reg_dir, 0);
    eng_err e = {0};
    cr_assert_eq(store_activate(r, "cls_lora", "0", &e), 0, "%s", e.msg);
    cr_assert_eq(store_pin(r, "qa", 1, &e), 0, "%s", e.msg);
    fx_sh("printf '{\"task\": \"reg\", \"gone\": true, \"deleted\": []}\\n' >> '%s/.adapterd-state.log'", reg_dir);
    json_t *root = load_state();
    cr_assert_null(current_of(root, "reg"), "the other writer's line dropped reg");
    json_decref(root);
    cr_assert_eq(store_activate(r, "cls_lora", "1", &e), 0, "%s", e.msg);
    root = load_state();
    cr_expect_str_eq(current_of(root, "reg") ?: "", "1", "reg, served here, is recorded again");
    cr_expect_str_eq(current_of(root, "cls_lora") ?: "", "1");
    json_decref(root);
    store_free(r);
}
