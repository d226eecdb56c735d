/* test_state.c - adapters_store/state.c: the state file's one reader and one writer. The writer
 * keeps the file as it last read or wrote it and reads it again only when its identity (inode,
 * size, times) changed; here another writer's edits, in place or by rename, are followed, the text
 * written is plain JSON any reader takes, and a file that does not parse is replaced by the next
 * change rather than followed. */
#define _GNU_SOURCE
#include <jansson.h>

#include "store_fixture.h"

static char reg_dir[512], state_path[600];
static void setup(void) {
    fx_copy(reg_dir, sizeof reg_dir);
    snprintf(state_path, sizeof state_path, "%s/.adapterd-state.json", reg_dir);
}
static void teardown(void) { store_remove_dir(reg_dir); }
TestSuite(state, .init = setup, .fini = teardown);

static json_t *load_state(void) {
    json_error_t je;
    json_t *root = json_load_file(state_path, 0, &je);
    cr_assert(json_is_object(root), "%s: %s", state_path, je.text);
    return root;
}

static const char *current_of(json_t *root, const char *task) {
    return json_string_value(json_object_get(json_object_get(json_object_get(root, "tasks"), task), "current"));
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

/* Another writer's edit of cls_lora's entry: current set to version (max 1: no version above). */
static void edit_entry(const char *version, int by_rename) {
    json_t *root = load_state(), *o = json_object();
    json_object_set_new(o, "current", json_string(version));
    json_object_set_new(o, "max", json_integer(1));
    json_object_set_new(json_object_get(root, "tasks"), "cls_lora", o);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.edit", state_path);
    cr_assert_eq(json_dump_file(root, by_rename ? tmp : state_path, JSON_COMPACT), 0);
    if (by_rename) cr_assert_eq(rename(tmp, state_path), 0);
    json_decref(root);
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
    cr_expect_str_eq(current_of(root, "cls_lora") ?: "", "0", "rewritten from what this process serves");
    cr_expect_str_eq(current_of(root, "reg") ?: "", "1", "every task again");
    json_decref(root);
    /* a restart reads the rewritten file */
    store_free(r);
    r = fx_open(reg_dir, 0);
    fx_expect_current(r, "cls_lora", "0", "after a restart");
    store_free(r);
}
