/* config.c - server options from flags, a JSON file and ADAPTERD_* variables, through one table, so
 * the three sources accept the same names and the same ranges. Precedence (flags > file > env) is
 * the order srv_config_load applies them in: env first, then the file, then flags. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/proto.h"
#include "server/server.h"

srv_config srv_default_config(void) {
    srv_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.host, sizeof c.host, "127.0.0.1");
    c.port = 8080;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c.threads = n > 0 ? (int)n : 1;
    c.workers = 1;
    c.max_batch_tokens = 8192;
    c.max_wait_us = 500;
    c.max_queue = 256;
    c.max_body_bytes = 1 << 20;
    proto_limits pl = proto_default_limits(); /* one default for the codec and the server */
    c.max_inputs = pl.max_inputs;
    c.max_tasks = pl.max_tasks;
    c.drain_timeout_ms = 30000;
    c.access_log = 1;
    c.max_upload_bytes = (size_t)256 << 20;
    c.watch = SRV_WATCH_INOTIFY;
    c.watch_debounce_ms = 200;
    c.watch_interval_ms = 5000;
    c.http_threads = 2;
    c.target_queue_ms = 50;
    c.max_connections = 4096;
    c.max_connections_per_ip = 256;
    c.health_reserve = 16;
    c.header_timeout_ms = 10000;
    c.min_body_rate = 1024;
    c.metrics_tasks = 100;
    c.grpc_buffer_bytes = (size_t)8 << 20;
    c.load_rate = (size_t)256 << 20;            /* the store's own default is unpaced */
    c.load_burst = store_default_params().load_burst;
    return c;
}

typedef enum { OPT_STR, OPT_INT, OPT_SIZE, OPT_BOOL, OPT_WATCH } opt_type;

typedef struct {
    const char *name;
    opt_type type;
    size_t off, size;
    long long min, max;
} opt;

#define STR(f) OPT_STR, offsetof(srv_config, f), sizeof(((srv_config *)0)->f), 0, 0
#define INT(f, lo, hi) OPT_INT, offsetof(srv_config, f), sizeof(int), lo, hi
static const opt opts[] = {
    {"registry", STR(registry)},
    {"host", STR(host)},
    {"port", INT(port, 0, 65535)},
    {"port-file", STR(port_file)},
    {"threads", INT(threads, 1, 1024)},
    {"workers", INT(workers, 1, 64)},
    {"max-batch-tokens", INT(max_batch_tokens, 1, 1 << 24)},
    {"max-wait-us", INT(max_wait_us, 0, 10000000)},
    {"max-queue", INT(max_queue, 1, 1 << 20)},
    {"max-body-bytes", OPT_SIZE, offsetof(srv_config, max_body_bytes), sizeof(size_t), 1, 1LL << 32},
    {"max-inputs", INT(max_inputs, 1, 1 << 16)},
    {"max-tasks", INT(max_tasks, 1, 1 << 16)},
    {"max-seq-len", INT(max_seq_len, 0, 1 << 20)},
    {"allow-skip", INT(allow_skip, 0, 1024)},
    {"admin-token", STR(admin_token)},
    {"precision", STR(precision)},
    {"drain-timeout-ms", INT(drain_timeout_ms, 0, 3600000)},
    {"access-log", OPT_BOOL, offsetof(srv_config, access_log), sizeof(int), 0, 1},
    {"adapter-memory", OPT_SIZE, offsetof(srv_config, adapter_memory), sizeof(size_t), 0, 1LL << 50},
    {"load-rate", OPT_SIZE, offsetof(srv_config, load_rate), sizeof(size_t), 0, 1LL << 40},
    {"load-burst", OPT_SIZE, offsetof(srv_config, load_burst), sizeof(size_t), 0, 1LL << 40},
    {"max-upload-bytes", OPT_SIZE, offsetof(srv_config, max_upload_bytes), sizeof(size_t), 1, 1LL << 40},
    {"watch", OPT_WATCH, offsetof(srv_config, watch), sizeof(int), 0, 2},
    {"watch-debounce-ms", INT(watch_debounce_ms, 0, 600000)},
    {"watch-interval-ms", INT(watch_interval_ms, 0, 86400000)},
    {"http-threads", INT(http_threads, 1, 256)},
    {"adaptive-skips", OPT_BOOL, offsetof(srv_config, adaptive_skips), sizeof(int), 0, 1},
    {"target-queue-ms", INT(target_queue_ms, 0, 3600000)},
    {"max-connections", INT(max_connections, 1, 1 << 20)},
    {"max-connections-per-ip", INT(max_connections_per_ip, 0, 1 << 20)},
    {"health-reserve", INT(health_reserve, 0, 4096)},
    {"header-timeout-ms", INT(header_timeout_ms, 100, 3600000)},
    {"min-body-rate", OPT_SIZE, offsetof(srv_config, min_body_rate), sizeof(size_t), 0, 1LL << 40},
    {"metrics-tasks", INT(metrics_tasks, 0, 1 << 20)},
    {"grpc-port", INT(grpc_port, 0, 65535)},
    {"grpc-buffer-bytes", OPT_SIZE, offsetof(srv_config, grpc_buffer_bytes), sizeof(size_t), 1, 1LL << 40},
};

static int same_key(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a == '_' ? '-' : (char)tolower((unsigned char)*a);
        if (x != *b) return 0;
    }
    return *a == *b;
}

int srv_config_set(srv_config *c, const char *key, const char *value, eng_err *err) {
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        const opt *o = &opts[i];
        if (!same_key(key, o->name)) continue;
        char *dst = (char *)c + o->off;
        if (o->type == OPT_STR) {
            if (strlen(value) >= o->size)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: value longer than %zu bytes", o->name, o->size - 1);
            memcpy(dst, value, strlen(value) + 1);
            return 0;
        }
        long long v;
        if (o->type == OPT_BOOL) {
            if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "on")) v = 1;
            else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "off")) v = 0;
            else return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: expected true or false, got '%s'", o->name, value);
        } else if (o->type == OPT_WATCH) {
            /* true/false stay accepted: true is inotify */
            if (!strcmp(value, "inotify") || !strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "on")) v = SRV_WATCH_INOTIFY;
            else if (!strcmp(value, "poll")) v = SRV_WATCH_POLL;
            else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "off")) v = SRV_WATCH_OFF;
            else return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: expected inotify, poll or off, got '%s'", o->name, value);
        } else {
            char *end;
            errno = 0;
            v = strtoll(value, &end, 10);
            if (errno || end == value || *end || v < o->min || v > o->max)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: expected an integer in %lld..%lld, got '%s'", o->name,
                                   o->min, o->max, value);
        }
        if (o->type == OPT_SIZE) *(size_t *)dst = (size_t)v;
        else *(int *)dst = (int)v;
        return 0;
    }
    return eng_err_set(err, ENG_NOT_FOUND, "unknown option '%s'", key);
}

int srv_config_from_env(srv_config *c, eng_err *err) {
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        char env[64] = "ADAPTERD_";
        size_t k = strlen(env);
        for (const char *p = opts[i].name; *p && k < sizeof env - 1; p++) env[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        env[k] = '\0';
        const char *v = getenv(env);
        if (v && srv_config_set(c, opts[i].name, v, err)) return eng_err_prefix(err, "%s", env);
    }
    return 0;
}

int srv_config_from_file(srv_config *c, const char *path, eng_err *err) {
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) return eng_err_set(err, ENG_FORMAT, "%s:%d: %s", path, je.line, je.text);
    int rc = 0;
    if (!json_is_object(root)) rc = eng_err_set(err, ENG_FORMAT, "%s: must be a JSON object", path);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (rc) break;
        char buf[1100];
        if (json_is_string(v)) snprintf(buf, sizeof buf, "%s", json_string_value(v));
        else if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        else if (json_is_boolean(v)) snprintf(buf, sizeof buf, "%s", json_is_true(v) ? "true" : "false");
        else {
            rc = eng_err_set(err, ENG_FORMAT, "%s: \"%s\" must be a string, integer or boolean", path, k);
            break;
        }
        if ((rc = srv_config_set(c, k, buf, err))) eng_err_prefix(err, "%s", path);
    }
    json_decref(root);
    return rc;
}

int srv_config_load(srv_config *c, int argc, const char *const *args, eng_err *err) {
    const char *config = getenv("ADAPTERD_CONFIG");
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(args[i], "--config")) config = args[i + 1];
    int rc = srv_config_from_env(c, err);
    if (!rc && config) rc = srv_config_from_file(c, config, err);
    if (rc) return rc;
    bool threads_given = getenv("ADAPTERD_THREADS") != NULL;
    for (int i = 0; i < argc; i += 2) {
        const char *a = args[i];
        if (strncmp(a, "--", 2) || i + 1 >= argc)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "unknown or incomplete option '%s'", a);
        if (!strcmp(a, "--config")) continue;
        if (!strcmp(a, "--threads")) threads_given = true;
        if ((rc = srv_config_set(c, a + 2, args[i + 1], err))) return rc;
    }
    /* the cores are shared by the workers unless told otherwise */
    if (!threads_given && c->workers > 1) c->threads = c->threads / c->workers > 0 ? c->threads / c->workers : 1;
    return 0;
}
