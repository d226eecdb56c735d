/* server.h - adapterd's HTTP/JSON front end: libmicrohttpd for connections, a libuv loop for the
 * scheduler, engine workers for inference.
 *
 * Threads (one way across each boundary):
 *   - libmicrohttpd's epoll thread accepts connections, parses and validates requests (proto/),
 *     tokenizes, submits a job to the scheduler and suspends the connection. It never waits on
 *     inference.
 *   - the libuv loop (the thread that calls srv_run) owns the scheduler: the queue of jobs, the
 *     batching timer, SIGTERM/SIGINT. Jobs reach it through a mutex-guarded inbox plus
 *     uv_async_send; results reach it only through uv_async_send from the workers. It resumes the
 *     finished connections.
 *   - n_workers engine workers, each with its own eng_state (and so its own engine thread pool),
 *     run one packed eng_run per batch and encode the responses.
 *
 * Usage:
 *     srv_config c = srv_default_config();
 *     srv_config_set(&c, "port", "8080", &err);
 *     store_registry *reg; store_open(c.registry, &sp, &reg, &err);
 *     int rc = srv_run(&c, reg, &err);   // returns after SIGTERM/SIGINT once in-flight work is done */
#ifndef ADAPTERD_SERVER_H
#define ADAPTERD_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/status.h"
#include "adapters_store/store.h"

/* Watch modes (--watch). inotify: file system events, plus a rescan every --watch-interval-ms;
 * poll: only the periodic rescan, for network file systems, which deliver no events from other
 * hosts. Either way each rescan re-reads the registry state file (current versions, pins), so
 * replicas sharing a registry agree within one interval. */
enum { SRV_WATCH_OFF = 0, SRV_WATCH_INOTIFY = 1, SRV_WATCH_POLL = 2 };

typedef struct {
    char registry[1024];     /* registry directory */
    char host[64];           /* listen address; "127.0.0.1" */
    int port;                /* 8080; 0 picks a free port (see port_file) */
    char port_file[1024];    /* when set, the bound port is written there once listening */
    int threads;             /* engine threads per worker; all cores / workers */
    int workers;             /* engine workers (each runs its own batches); 1, or 2 with keys on 2+ cores */
    bool workers_given;      /* workers was set (option, environment or config file): no default applies */
    int max_batch_tokens;    /* token budget of one packed batch; 8192 */
    int max_wait_us;         /* how long a job may wait for others to join its batch; 500 */
    int max_queue;           /* requests waiting or running beyond which the answer is 429; 256 */
    size_t max_body_bytes;   /* request body limit (413); 1 MiB */
    int max_inputs;          /* inputs per request (422); 64 */
    int max_tasks;           /* tasks per request (422); 32 */
    int max_seq_len;         /* tokens per input, special tokens included; 0: the model's limit */
    int max_input_tokens;    /* tokens of a whole input read in windows (413 beyond); 4096; 0: no limit */
    int max_windows;         /* windows (sequences) a request's long inputs are read in (413 beyond); 64; 0: no limit */
    int allow_skip;          /* widen every task's skip range to 0..N (operator flag); 0 */
    char admin_token[256];   /* bearer token of the admin routes (issue 7); empty: admin off */
    char keys[4096];         /* --keys: the tenants' keys file (docs/SECURITY.md); empty: no tenants */
    char precision[16];      /* backbone precision of models without model.json: fp32, bf16, int8; "": fp32 */
    int drain_timeout_ms;    /* longest wait for in-flight work after SIGTERM; 30000 */
    int access_log;          /* one line per request on stderr; 1 */
    size_t adapter_memory;   /* bytes of adapter weights kept resident (LRU beyond); 0: all, loaded at start */
    size_t load_rate;        /* bytes/s a load converts beyond its first load_burst bytes (store_params); 0: unpaced */
    size_t load_burst;       /* bytes of each load converted at full speed */
    size_t max_upload_bytes; /* admin upload body limit (.tar / .tar.gz); 256 MiB */
    int watch;               /* how tasks/ and the registry state are followed: SRV_WATCH_*; inotify */
    int watch_debounce_ms;   /* quiet time before a rescan; 200 */
    int watch_interval_ms;   /* periodic rescan (new versions, the state file, changed files); 5000 (0: none,
                              * inotify mode only) */
    int http_threads;        /* libmicrohttpd threads (each its own epoll) that parse and tokenize; 2 */
    int adaptive_skips;      /* load-adaptive mode: raise skips of requests that did not choose them; 0 */
    int target_queue_ms;     /* adaptive mode's queue-wait target; 50 */
    int max_connections;     /* open connections for any route, HTTP and gRPC together; 4096 */
    int max_connections_per_ip; /* open connections per client address, HTTP and gRPC together (0: no cap); 256 */
    int health_reserve;      /* connections beyond max_connections for the health and readiness routes; 16 */
    int header_timeout_ms;   /* from accept or the previous answer to a request's last header byte; 10000 */
    size_t min_body_rate;    /* bytes/s a body must average after header_timeout_ms (0: none); 1024 */
    int rollout_samples;     /* disagreements of a rollout kept for review (GET /v1/tasks/{name}/rollout); 0: off */
    int rollout_sample_text; /* keep the input's text (cut) with each; 0: its request id and index only */
    int metrics_tasks;       /* tasks with their own /metrics series, the busiest; the rest sum as task="(other)"; 100 */
    int grpc_port;           /* KServe v2 GRPCInferenceService on host:grpc_port (HTTP/2, cleartext); 0: off */
    char served_model_name[1024]; /* "NAME[,NAME...]" or "NAME=MODEL,...": names clients may give as "model"
                                   * (server/models.c reads it); "": the registry's names only */
    size_t grpc_buffer_bytes; /* request messages the calls of one gRPC connection may hold at once; 8 MiB */
    /* OpenTelemetry traces (server/trace.c); each defaults to its OTEL_* variable (srv_config_load) */
    char trace_endpoint[1024];   /* OTLP/HTTP traces URL (.../v1/traces); "": tracing off */
    char trace_headers[2048];    /* "k=v,k2=v2": headers of each export (an API key) */
    char trace_service_name[256]; /* service.name; "": "adapterd" */
    char trace_resource_attributes[2048]; /* "k=v,...": more resource attributes */
    char trace_sampler[64];      /* always_on, always_off, traceidratio, parentbased_*; "": parentbased_always_on */
    char trace_sampler_arg[32];  /* the ratio of the *traceidratio samplers; "": 1.0 */
    int trace_schedule_delay_ms; /* longest wait between two exports; 5000 */
    int trace_max_queue;         /* spans waiting for export beyond which a request's spans are dropped; 2048 */
    int trace_max_export_batch;  /* spans per export; 512 */
    int trace_export_timeout_ms; /* one export, its retries included; 30000 */
    int trace_request_timeout_ms; /* one POST to the collector (OTEL_EXPORTER_OTLP_TIMEOUT); 10000 */
    char tls_cert[1024];     /* PEM certificate chain: both ports serve TLS (server/tls.c); "": plain HTTP and h2c */
    char tls_key[1024];      /* PEM private key of tls_cert */
    char tls_client_ca[1024]; /* PEM CA: clients must present a certificate it signed (mutual TLS); "": none asked */
} srv_config;

srv_config srv_default_config(void);

/* One option of the table behind srv_config_set, for help texts. */
typedef struct {
    const char *name;    /* the flag without "--", also the JSON key; ADAPTERD_<NAME> with '_' for '-' */
    const char *arg;     /* the value's placeholder: "N", "DIR", "true|false" */
    const char *help;    /* one paragraph, unwrapped, naming the default */
} srv_config_option;

/* The i-th option (from 0) in the order help lists them, or NULL past the last. Static storage. */
const srv_config_option *srv_config_option_at(size_t i);

/* Sets one option by name: the long flag without "--" ("max-batch-tokens"), or with '_' for '-'
 * (JSON config keys). Returns 0, ENG_NOT_FOUND for an unknown key, or ENG_INVALID_ARGUMENT for a
 * value out of range; err says which. */
int srv_config_set(srv_config *c, const char *key, const char *value, eng_err *err);

/* Applies the ADAPTERD_<KEY> environment variables (ADAPTERD_MAX_BATCH_TOKENS=...). Returns 0 or
 * the first failing srv_config_set status. */
int srv_config_from_env(srv_config *c, eng_err *err);

/* Applies a JSON config file {"port": 8080, "max-batch-tokens": 4096, ...}; values may be
 * numbers, strings or booleans. Returns 0 or a negative status naming the key or the file. */
int srv_config_from_file(srv_config *c, const char *path, eng_err *err);

/* Applies the options of `adapterd serve` in their order of precedence: the ADAPTERD_* variables,
 * then the JSON file named by --config (or ADAPTERD_CONFIG), then the flags, so flags beat the
 * file, which beats the environment. args are argc flag/value pairs' worth of strings
 * ("--port", "8080", ...), without the command name. Unless --threads or ADAPTERD_THREADS is given,
 * the cores are shared by the workers (threads = threads / workers). Returns 0, or a negative
 * status with err naming the option, the variable or the file. */
int srv_config_load(srv_config *c, int argc, const char *const *args, eng_err *err);

/* --tls-cert, --tls-key and --tls-client-ca checked as the server will load them: both or neither, the
 * files readable PEM, the key the certificate's. Returns 0 (also with no TLS asked) or
 * ENG_INVALID_ARGUMENT with err naming the file and what is wrong; `adapterd serve` runs it before it
 * opens the registry, so a bad file stops the start at once as a configuration error. */
int srv_tls_check(const srv_config *cfg, eng_err *err);

/* Runs the server on reg until SIGTERM/SIGINT and a drain: readiness turns false, new requests get
 * 503, queued and running requests complete (those still waiting at drain_timeout_ms get 503),
 * then it returns 0. Returns a negative status when it
 * cannot start (port in use, out of memory). reg must outlive the call. */
int srv_run(const srv_config *c, store_registry *reg, eng_err *err);

#endif
