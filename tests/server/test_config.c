/* test_config.c - server/config.c: one option table for flags, the JSON file and ADAPTERD_*
 * variables, applied by srv_config_load so that flags > file > env. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "server/server.h"

static char cfg_path[64];

static void write_file(const char *text) {
    snprintf(cfg_path, sizeof cfg_path, "adapterd-test-config-%d.json", (int)getpid());
    FILE *f = fopen(cfg_path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

static void cleanup(void) {
    if (cfg_path[0]) unlink(cfg_path);
    unsetenv("ADAPTERD_PORT"), unsetenv("ADAPTERD_MAX_QUEUE"), unsetenv("ADAPTERD_MAX_WAIT_US");
    unsetenv("ADAPTERD_CONFIG"), unsetenv("ADAPTERD_THREADS"), unsetenv("ADAPTERD_WORKERS");
    unsetenv("ADAPTERD_SERVED_MODEL_NAME");
}

TestSuite(config, .fini = cleanup);

Test(config, flags_beat_file_beat_env) {
    /* each source sets what the ones below it set too, and one key of its own */
    setenv("ADAPTERD_PORT", "1111", 1);
    setenv("ADAPTERD_MAX_QUEUE", "11", 1);
    setenv("ADAPTERD_MAX_WAIT_US", "111", 1);
    write_file("{\"port\": 2222, \"max-queue\": 22}");
    const char *args[] = {"--config", cfg_path, "--port", "3333"};
    srv_config c = srv_default_config();
    eng_err e = {0};
    cr_assert_eq(srv_config_load(&c, 4, args, &e), 0, "%s", e.msg);
    cr_expect_eq(c.port, 3333, "flag over file and env");
    cr_expect_eq(c.max_queue, 22, "file over env");
    cr_expect_eq(c.max_wait_us, 111, "env when nothing else sets it");
    cr_expect_eq(c.max_batch_tokens, srv_default_config().max_batch_tokens, "default when nobody sets it");
}

Test(config, config_file_from_the_environment) {
    write_file("{\"max_batch_tokens\": 4096, \"access-log\": false}");
    setenv("ADAPTERD_CONFIG", cfg_path, 1);
    srv_config c = srv_default_config();
    eng_err e = {0};
    cr_assert_eq(srv_config_load(&c, 0, NULL, &e), 0, "%s", e.msg);
    cr_expect_eq(c.max_batch_tokens, 4096, "JSON keys may use '_' for '-'");
    cr_expect_eq(c.access_log, 0);
}

Test(config, workers_share_the_cores_unless_threads_given) {
    srv_config c = srv_default_config();
    c.threads = 8;
    eng_err e = {0};
    const char *a1[] = {"--workers", "2"};
    cr_assert_eq(srv_config_load(&c, 2, a1, &e), 0, "%s", e.msg);
    cr_expect_eq(c.threads, 4);
    c = srv_default_config();
    const char *a2[] = {"--workers", "2", "--threads", "3"};
    cr_assert_eq(srv_config_load(&c, 4, a2, &e), 0, "%s", e.msg);
    cr_expect_eq(c.threads, 3);
}

Test(config, keys_bring_two_workers_unless_workers_given) {
    eng_err e = {0};
    srv_config c = srv_default_config();
    c.threads = 8;
    const char *a1[] = {"--keys", "keys.json"};
    cr_assert_eq(srv_config_load(&c, 2, a1, &e), 0, "%s", e.msg);
    cr_expect_eq(c.workers, 2, "tenants: one worker can be kept for a light tenant");
    cr_expect_eq(c.threads, 4, "the cores shared by the two");
    c = srv_default_config();
    c.threads = 8;
    const char *a2[] = {"--keys", "keys.json", "--workers", "1"};
    cr_assert_eq(srv_config_load(&c, 4, a2, &e), 0, "%s", e.msg);
    cr_expect_eq(c.workers, 1, "--workers wins");
    c = srv_default_config();
    c.threads = 1;
    cr_assert_eq(srv_config_load(&c, 2, a1, &e), 0, "%s", e.msg);
    cr_expect_eq(c.workers, 1, "one core: one worker");
    c = srv_default_config();
    cr_assert_eq(srv_config_load(&c, 0, NULL, &e), 0, "%s", e.msg);
    cr_expect_eq(c.workers, 1, "no keys: one worker");
}

Test(config, errors_name_the_source) {
    srv_config c = srv_default_config();
    eng_err e = {0};
    setenv("ADAPTERD_PORT", "70000", 1);
    cr_expect_eq(srv_config_load(&c, 0, NULL, &e), ENG_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "ADAPTERD_PORT"), "%s", e.msg);
    unsetenv("ADAPTERD_PORT");
    write_file("{\"no-such-option\": 1}");
    const char *a1[] = {"--config", cfg_path};
    cr_expect_eq(srv_config_load(&c, 2, a1, &e), ENG_NOT_FOUND);
    cr_expect(strstr(e.msg, cfg_path) && strstr(e.msg, "no-such-option"), "%s", e.msg);
    const char *a2[] = {"--port"};
    cr_expect_eq(srv_config_load(&c, 1, a2, &e), ENG_INVALID_ARGUMENT, "a flag without its value");
    const char *a3[] = {"--max-queue", "0"};
    cr_expect_eq(srv_config_load(&c, 2, a3, &e), ENG_INVALID_ARGUMENT, "max-queue is at least 1");
}

Test(config, metrics_tasks_defaults_to_100_and_is_range_checked) {
    srv_config c = srv_default_config();
    eng_err e = {0};
    cr_expect_eq(c.metrics_tasks, 100);
    const char *a1[] = {"--metrics-tasks", "0"};
    cr_expect_eq(srv_config_load(&c, 2, a1, &e), 0, "%s", e.msg);
    cr_expect_eq(c.metrics_tasks, 0, "0: every task in (other)");
    const char *a2[] = {"--metrics-tasks", "-1"};
    cr_expect_eq(srv_config_load(&c, 2, a2, &e), ENG_INVALID_ARGUMENT);
}

Test(config, served_model_name_from_every_source) {
    srv_config c = srv_default_config();
    eng_err e = {0};
    cr_expect_str_eq(c.served_model_name, "", "no alias unless given");
    setenv("ADAPTERD_SERVED_MODEL_NAME", "from-env", 1);
    cr_assert_eq(srv_config_load(&c, 0, NULL, &e), 0, "%s", e.msg);
    cr_expect_str_eq(c.served_model_name, "from-env");
    /* the file may list the names as an array, as vLLM's config does: joined as the flag spells them */
    write_file("{\"served_model_name\": [\"text-embedding-ada-002\", \"ada\"]}");
    const char *a1[] = {"--config", cfg_path};
    cr_assert_eq(srv_config_load(&c, 2, a1, &e), 0, "%s", e.msg);
    cr_expect_str_eq(c.served_model_name, "text-embedding-ada-002,ada");
    const char *a2[] = {"--config", cfg_path, "--served-model-name", "a=bert-tiny"};
    cr_assert_eq(srv_config_load(&c, 4, a2, &e), 0, "%s", e.msg);
    cr_expect_str_eq(c.served_model_name, "a=bert-tiny", "the flag wins");
    unsetenv("ADAPTERD_SERVED_MODEL_NAME");
    write_file("{\"served-model-name\": [\"a\", 1]}");
    cr_expect_eq(srv_config_load(&c, 2, a1, &e), ENG_FORMAT, "an array of strings only");
    cr_expect(strstr(e.msg, "served-model-name"), "%s", e.msg);
}
