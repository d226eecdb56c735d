/* config.c - server options from flags, a JSON file and ADAPTERD_* variables, through one table, so
 * the three sources accept the same names and the same ranges. Precedence (flags > file > env) is
 * the order srv_config_load applies them in: env first, then the file, then flags. The table also
 * carries each option's help, which `adapterd serve --help` prints (srv_config_option_at), so an
 * option cannot be added without being documented there. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
    c.max_input_tokens = 4096;
    c.max_windows = 64;
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
    c.trace_schedule_delay_ms = 5000;   /* the OpenTelemetry SDKs' defaults (OTEL_BSP_*) */
    c.trace_max_queue = 2048;
    c.trace_max_export_batch = 512;
    c.trace_export_timeout_ms = 30000;
    c.trace_request_timeout_ms = 10000; /* OTEL_EXPORTER_OTLP_TIMEOUT's default */
    return c;
}

typedef enum { OPT_STR, OPT_INT, OPT_SIZE, OPT_BOOL, OPT_WATCH } opt_type;

/* One option: its public face (name, placeholder, help) and where and how it is stored. */
typedef struct {
    srv_config_option pub;
    opt_type type;
    size_t off, size;
    long long min, max;
} opt;

/* The table, in the order `adapterd serve --help` lists it. The help says the default where it is
 * not obvious from srv_default_config. */
#define STR(f) OPT_STR, offsetof(srv_config, f), sizeof(((srv_config *)0)->f), 0, 0
#define INT(f, lo, hi) OPT_INT, offsetof(srv_config, f), sizeof(int), lo, hi
#define SIZE(f, lo, hi) OPT_SIZE, offsetof(srv_config, f), sizeof(size_t), lo, hi
#define BOOL(f) OPT_BOOL, offsetof(srv_config, f), sizeof(int), 0, 1
static const opt opts[] = {
    {{"registry", "DIR", "registry directory (models/NAME/, tasks/NAME/VERSION/)"}, STR(registry)},
    {{"host", "ADDR", "IPv4 address to listen on (default 127.0.0.1)"}, STR(host)},
    {{"port", "N", "port (default 8080; 0 picks a free one, see --port-file)"}, INT(port, 0, 65535)},
    {{"port-file", "FILE", "once listening, write the bound port to FILE (for --port 0)"}, STR(port_file)},
    {{"grpc-port", "N",
      "also serve KServe v2's GRPCInferenceService (gRPC, HTTP/2 cleartext) on port N, through the same queue and "
      "limits (default 0: off)"},
     INT(grpc_port, 0, 65535)},
    {{"grpc-buffer-bytes", "N",
      "request messages the calls of one gRPC connection may hold at once; a call beyond is answered "
      "RESOURCE_EXHAUSTED (default 8388608)"},
     SIZE(grpc_buffer_bytes, 1, 1LL << 40)},
    {{"tls-cert", "FILE",
      "PEM certificate (chain) with --tls-key: HTTP serves HTTPS and --grpc-port gRPC over TLS (h2 by ALPN); both "
      "files are re-read when they change (a broken pair keeps the last good one) (default: none, plain ports)"},
     STR(tls_cert)},
    {{"tls-key", "FILE", "PEM private key of --tls-cert"}, STR(tls_key)},
    {{"tls-client-ca", "FILE",
      "PEM CA certificate(s): mutual TLS on both ports, a client without a certificate it signed is refused at the "
      "handshake (needs --tls-cert; default: none)"},
     STR(tls_client_ca)},
    {{"served-model-name", "NAME[,NAME...]",
      "names clients may send as \"model\" (vLLM's option), besides the registry's model names: with one model each "
      "NAME is an alias of it, with several write NAME=MODEL; a model's first name is its id in GET /v1/models and "
      "TEI's /info, and a name served by no model gets 404 (default: none)"},
     STR(served_model_name)},
    {{"threads", "N", "engine threads per worker (default: all cores, shared by the workers)"}, INT(threads, 1, 1024)},
    {{"workers", "N", "engine workers, each running its own batches (default 1; 2 with --keys on two or more cores)"}, INT(workers, 1, 64)},
    {{"http-threads", "N", "libmicrohttpd threads that parse and tokenize, each with its own epoll (default 2)"},
     INT(http_threads, 1, 256)},
    {{"max-batch-tokens", "N", "token budget of one packed batch (default 8192)"}, INT(max_batch_tokens, 1, 1 << 24)},
    {{"max-wait-us", "N",
      "a batch closes once no request came for N us (default 500), at the latest when its oldest request waited 20 x N"},
     INT(max_wait_us, 0, 10000000)},
    {{"max-queue", "N", "requests waiting or running before 429 (default 256)"}, INT(max_queue, 1, 1 << 20)},
    {{"max-body-bytes", "N", "inference request body limit, 413 beyond (default 1048576)"}, SIZE(max_body_bytes, 1, 1LL << 32)},
    {{"max-inputs", "N", "inputs per request (default 64)"}, INT(max_inputs, 1, 1 << 16)},
    {{"max-tasks", "N", "tasks per request (default 32)"}, INT(max_tasks, 1, 1 << 16)},
    {{"max-seq-len", "N", "tokens per input (default 0: the model's limit)"}, INT(max_seq_len, 0, 1 << 20)},
    {{"max-input-tokens", "N",
      "tokens of a whole input read in overlapping windows (a long QA context), 413 beyond (default 4096; 0: no limit)"},
     INT(max_input_tokens, 0, 1 << 24)},
    {{"max-windows", "N", "windows a request's long inputs are read in, all inputs together, 413 beyond (default 64; 0: no limit)"},
     INT(max_windows, 0, 1 << 20)},
    {{"allow-skip", "N", "let every task skip up to N layers (AdapterDrop), beyond its task.json"}, INT(allow_skip, 0, 1024)},
    {{"adaptive-skips", "true|false",
      "load-adaptive mode: when the queue wait exceeds --target-queue-ms, raise the skips of tasks a request left at "
      "their default, within each task's range (default false)"},
     BOOL(adaptive_skips)},
    {{"target-queue-ms", "N", "adaptive mode's queue-wait target (default 50)"}, INT(target_queue_ms, 0, 3600000)},
    {{"precision", "P",
      "backbone Linear layers of models without models/NAME/model.json in fp32 (default), bf16 or int8; a model whose "
      "precision this CPU has no fast kernel for is not served"},
     STR(precision)},
    {{"admin-token", "T",
      "bearer token of the admin routes (off without one): upload, activate, delete versions (PUT/POST/DELETE "
      "/v1/tasks/{name}/...), /v2/repository/*"},
     STR(admin_token)},
    {{"keys", "FILE",
      "tenants' keys file (JSON, docs/SECURITY.md): inference and admin then need \"Authorization: Bearer <key>\", "
      "each key limited to its tenant's tasks and quotas; re-read within a second when it changes (--admin-token "
      "stays the operator's key)"},
     STR(keys)},
    {{"adapter-memory", "N",
      "bytes of adapter weights kept resident; tasks then load on first use and the least recently used are evicted "
      "(default 0: all, loaded at start)"},
     SIZE(adapter_memory, 0, 1LL << 50)},
    {{"load-rate", "B/S",
      "bytes per second a task load converts beyond its first --load-burst bytes, so large loads leave memory "
      "bandwidth to inference (default 268435456; 0: unpaced)"},
     SIZE(load_rate, 0, 1LL << 40)},
    {{"load-burst", "N", "bytes of each load converted at full speed (default 16777216)"}, SIZE(load_burst, 0, 1LL << 40)},
    {{"max-upload-bytes", "N", "admin upload limit (default 268435456)"}, SIZE(max_upload_bytes, 1, 1LL << 40)},
    {{"watch", "inotify|poll|off",
      "follow the registry while serving: new version directories of tasks/ and the state file other replicas "
      "write (current versions, pins). inotify (default; also true): file events plus the periodic rescan; poll: "
      "only the periodic rescan, for network file systems (NFS, CephFS, EFS); off (false)"},
     OPT_WATCH, offsetof(srv_config, watch), sizeof(int), 0, 2},
    {{"watch-debounce-ms", "N", "quiet time before a rescan (default 200)"}, INT(watch_debounce_ms, 0, 600000)},
    {{"watch-interval-ms", "N",
      "periodic rescan: new versions, the state file, changed files (default 5000; 0: none in inotify mode; poll "
      "mode needs one)"},
     INT(watch_interval_ms, 0, 86400000)},
    {{"max-connections", "N",
      "open connections for any route (default 4096); beyond them the longest-idle connection is closed to make "
      "room"},
     INT(max_connections, 1, 1 << 20)},
    {{"health-reserve", "N",
      "connections beyond --max-connections that serve /healthz, /readyz and /v2/health/* only (default 16)"},
     INT(health_reserve, 0, 4096)},
    {{"max-connections-per-ip", "N",
      "open connections from one address (default 256; 0: no cap; raise it behind a proxy that connects from one "
      "address)"},
     INT(max_connections_per_ip, 0, 1 << 20)},
    {{"header-timeout-ms", "N",
      "time from connecting (or from the previous answer on a kept-alive connection) to a request's last header "
      "byte (default 10000)"},
     INT(header_timeout_ms, 100, 3600000)},
    {{"min-body-rate", "B/S", "average rate of a body once --header-timeout-ms has passed (default 1024; 0: off)"},
     SIZE(min_body_rate, 0, 1LL << 40)},
    {{"drain-timeout-ms", "N", "longest drain after SIGTERM (default 30000)"}, INT(drain_timeout_ms, 0, 3600000)},
    {{"access-log", "true|false", "one line per request on stderr (default true)"}, BOOL(access_log)},
    {{"rollout-samples", "N",
      "disagreements between a rollout's candidate and current version kept per rollout for review in GET "
      "/v1/tasks/{name}/rollout (default 0: off)"},
     INT(rollout_samples, 0, 4096)},
    {{"rollout-sample-text", "true|false",
      "keep the input's text (its first 160 bytes) with each disagreement kept; else its request id and input index "
      "only (default false)"},
     BOOL(rollout_sample_text)},
    {{"metrics-tasks", "N",
      "tasks with their own /metrics series, the busiest; the rest are summed as task=\"(other)\" (default 100)"},
     INT(metrics_tasks, 0, 1 << 20)},
    {{"trace-endpoint", "URL",
      "OpenTelemetry: export every request's spans over OTLP/HTTP (protobuf) to URL, a collector's /v1/traces "
      "(default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces; none: tracing off)"},
     STR(trace_endpoint)},
    {{"trace-headers", "K=V[,K=V...]",
      "headers of each export, values percent-encoded, e.g. an API key (default: OTEL_EXPORTER_OTLP_TRACES_HEADERS or "
      "OTEL_EXPORTER_OTLP_HEADERS)"},
     STR(trace_headers)},
    {{"trace-service-name", "NAME", "the spans' service.name (default: OTEL_SERVICE_NAME, else adapterd)"},
     STR(trace_service_name)},
    {{"trace-resource-attributes", "K=V[,K=V...]",
      "more resource attributes of the spans (default: OTEL_RESOURCE_ATTRIBUTES)"},
     STR(trace_resource_attributes)},
    {{"trace-sampler", "NAME",
      "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio "
      "(default: OTEL_TRACES_SAMPLER, else parentbased_always_on: a caller's sampled flag decides, else every request)"},
     STR(trace_sampler)},
    {{"trace-sampler-arg", "R", "the ratio of the traceidratio samplers, 0..1 (default: OTEL_TRACES_SAMPLER_ARG, else 1)"},
     STR(trace_sampler_arg)},
    {{"trace-schedule-delay-ms", "N", "longest wait between two exports (default: OTEL_BSP_SCHEDULE_DELAY, else 5000)"},
     INT(trace_schedule_delay_ms, 1, 3600000)},
    {{"trace-max-queue", "N",
      "spans waiting for export; beyond, a request's spans are dropped and counted (adapterd_trace_spans_dropped_total) "
      "(default: OTEL_BSP_MAX_QUEUE_SIZE, else 2048)"},
     INT(trace_max_queue, 1, 1 << 22)},
    {{"trace-max-export-batch", "N", "spans per export (default: OTEL_BSP_MAX_EXPORT_BATCH_SIZE, else 512)"},
     INT(trace_max_export_batch, 1, 1 << 22)},
    {{"trace-export-timeout-ms", "N",
      "one export with its retries (429, 502, 503, 504, no connection: exponential back-off) (default: "
      "OTEL_BSP_EXPORT_TIMEOUT, else 30000)"},
     INT(trace_export_timeout_ms, 1, 3600000)},
    {{"trace-request-timeout-ms", "N",
      "one POST to the collector, within the export's timeout (default: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT or "
      "OTEL_EXPORTER_OTLP_TIMEOUT, else 10000)"},
     INT(trace_request_timeout_ms, 1, 3600000)},
};

const srv_config_option *srv_config_option_at(size_t i) {
    return i < sizeof opts / sizeof opts[0] ? &opts[i].pub : NULL;
}

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
        if (!same_key(key, o->pub.name)) continue;
        char *dst = (char *)c + o->off;
        if (o->type == OPT_STR) {
            if (strlen(value) >= o->size)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: value longer than %zu bytes", o->pub.name, o->size - 1);
            memcpy(dst, value, strlen(value) + 1);
            return 0;
        }
        long long v;
        if (o->type == OPT_BOOL) {
            if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "on")) v = 1;
            else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "off")) v = 0;
            else return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: expected true or false, got '%s'", o->pub.name, value);
        } else if (o->type == OPT_WATCH) {
            /* true/false stay accepted: true is inotify */
            if (!strcmp(value, "inotify") || !strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "on")) v = SRV_WATCH_INOTIFY;
            else if (!strcmp(value, "poll")) v = SRV_WATCH_POLL;
            else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "off")) v = SRV_WATCH_OFF;
            else return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: expected inotify, poll or off, got '%s'", o->pub.name, value);
        } else {
            char *end;
            errno = 0;
            v = strtoll(value, &end, 10);
            if (errno || end == value || *end || v < o->min || v > o->max)
                return eng_err_set(err, ENG_INVALID_ARGUMENT, "%s: expected an integer in %lld..%lld, got '%s'", o->pub.name,
                                   o->min, o->max, value);
        }
        if (o->type == OPT_SIZE) *(size_t *)dst = (size_t)v;
        else *(int *)dst = (int)v;
        if (dst == (char *)&c->workers) c->workers_given = true;
        return 0;
    }
    return eng_err_set(err, ENG_NOT_FOUND, "unknown option '%s'", key);
}

int srv_config_from_env(srv_config *c, eng_err *err) {
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        char env[64] = "ADAPTERD_";
        size_t k = strlen(env);
        for (const char *p = opts[i].pub.name; *p && k < sizeof env - 1; p++) env[k++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        env[k] = '\0';
        const char *v = getenv(env);
        if (v && srv_config_set(c, opts[i].pub.name, v, err)) return eng_err_prefix(err, "%s", env);
    }
    return 0;
}

/* The strings of array a joined by commas into buf. Returns 0, or -1 when an element is not a
 * string or they do not fit. */
static int join_strings(const json_t *a, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *e = json_string_value(json_array_get(a, i));
        if (!e) return -1;
        int w = snprintf(buf + at, n - at, "%s%s", i ? "," : "", e);
        if (w < 0 || (size_t)w >= n - at) return -1;
        at += (size_t)w;
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
        int bad = 0;
        if (json_is_string(v)) snprintf(buf, sizeof buf, "%s", json_string_value(v));
        else if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        else if (json_is_boolean(v)) snprintf(buf, sizeof buf, "%s", json_is_true(v) ? "true" : "false");
        else if (json_is_array(v)) bad = join_strings(v, buf, sizeof buf); /* a list option, as its flag spells it */
        else bad = 1;
        if (bad) {
            rc = eng_err_set(err, ENG_FORMAT, "%s: \"%s\" must be a string, integer, boolean or array of strings%s", path, k,
                             json_is_array(v) ? " (of at most 1 KiB joined)" : "");
            break;
        }
        if ((rc = srv_config_set(c, k, buf, err))) eng_err_prefix(err, "%s", path);
    }
    json_decref(root);
    return rc;
}

/* The OpenTelemetry SDKs' variables, below everything else (ADAPTERD_*, the file, flags): the trace
 * options' defaults, so a platform that sets them for every service configures adapterd too. */
static int config_from_otel(srv_config *c, eng_err *err) {
    static const struct {
        const char *env, *opt;
    } vars[] = {
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "trace-endpoint"}, {"OTEL_EXPORTER_OTLP_HEADERS", "trace-headers"},
        {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "trace-headers"}, {"OTEL_SERVICE_NAME", "trace-service-name"},
        {"OTEL_RESOURCE_ATTRIBUTES", "trace-resource-attributes"}, {"OTEL_TRACES_SAMPLER", "trace-sampler"},
        {"OTEL_TRACES_SAMPLER_ARG", "trace-sampler-arg"}, {"OTEL_BSP_SCHEDULE_DELAY", "trace-schedule-delay-ms"},
        {"OTEL_BSP_MAX_QUEUE_SIZE", "trace-max-queue"}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "trace-max-export-batch"},
        {"OTEL_BSP_EXPORT_TIMEOUT", "trace-export-timeout-ms"}, {"OTEL_EXPORTER_OTLP_TIMEOUT", "trace-request-timeout-ms"},
        {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "trace-request-timeout-ms"},
    };
    const char *base = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (base && *base && !getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) { /* the base URL: the signal's path is added */
        size_t n = strlen(base);
        if (n + sizeof "/v1/traces" > sizeof c->trace_endpoint)
            return eng_err_set(err, ENG_INVALID_ARGUMENT, "OTEL_EXPORTER_OTLP_ENDPOINT: longer than %zu bytes", sizeof c->trace_endpoint - 12);
        snprintf(c->trace_endpoint, sizeof c->trace_endpoint, "%s%s", base, base[n - 1] == '/' ? "v1/traces" : "/v1/traces");
    }
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].env);
        if (v && *v && srv_config_set(c, vars[i].opt, v, err)) return eng_err_prefix(err, "%s", vars[i].env);
    }
    /* tracing switched off the SDKs' way */
    const char *off = getenv("OTEL_SDK_DISABLED"), *exp = getenv("OTEL_TRACES_EXPORTER");
    if ((off && !strcasecmp(off, "true")) || (exp && !strcmp(exp, "none"))) c->trace_endpoint[0] = '\0';
    return 0;
}

int srv_config_load(srv_config *c, int argc, const char *const *args, eng_err *err) {
    const char *config = getenv("ADAPTERD_CONFIG");
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(args[i], "--config")) config = args[i + 1];
    int rc = config_from_otel(c, err);
    if (!rc) rc = srv_config_from_env(c, err);
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
    /* tenants (--keys): two workers unless told otherwise, so one can be kept for a light tenant while another
     * floods (scheduler.c, the light-tenant cap; bench/tenants/fairness.sh: 1.3x idle p99 under a flood with two
     * workers, 4.8x with one) */
    if (!c->workers_given && c->keys[0] && c->threads >= 2) c->workers = 2;
    /* the cores are shared by the workers unless told otherwise */
    if (!threads_given && c->workers > 1) c->threads = c->threads / c->workers > 0 ? c->threads / c->workers : 1;
    return 0;
}
