/* cmd_serve.c - `adapterd serve`: load a registry and serve it over HTTP until SIGTERM/SIGINT.
 *
 * Options come from three places, applied by srv_config_load so that flags beat the JSON config
 * file, which beats ADAPTERD_* environment variables; all three use the names of server/config.c's
 * one table. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/platform.h"
#include "cli.h"
#include "server/server.h"
#include "adapters_store/store.h"

/* Blocks from this size on get their own mapping (see cmd_serve). */
#define MMAP_THRESHOLD_BYTES (1 << 20)

static void usage(FILE *f) {
    fprintf(f,
            "usage: adapterd serve --registry DIR [--host 127.0.0.1] [--port 8080] [--threads N] [--workers N]\n"
            "                      [--max-batch-tokens N] [--max-wait-us N] [--max-queue N] [--max-body-bytes N]\n"
            "                      [--max-inputs N] [--max-tasks N] [--max-seq-len N] [--allow-skip N]\n"
            "                      [--admin-token T] [--drain-timeout-ms N] [--access-log true|false]\n"
            "                      [--http-threads N] [--adaptive-skips true|false] [--target-queue-ms N]\n"
            "                      [--adapter-memory BYTES] [--load-rate B/S] [--load-burst B] [--max-upload-bytes N]\n"
            "                      [--watch inotify|poll|off] [--watch-interval-ms N]\n"
            "                      [--precision P] [--port-file FILE] [--grpc-port N] [--grpc-buffer-bytes N]\n"
            "                      [--config FILE]\n\n"
            "Serves the tasks of a registry (models/<name>/, tasks/<name>/<version>/) over HTTP/JSON:\n"
            "POST /v1/predict, GET /v1/tasks, /v1/models, /healthz, /readyz, /metrics, /openapi.json and the\n"
            "KServe v2 routes. SIGTERM/SIGINT drain: readiness turns false, work in flight completes, exit 0.\n\n"
            "  --registry DIR        registry directory\n"
            "  --host ADDR           IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N              port (default 8080; 0 picks a free one, see --port-file)\n"
            "  --grpc-port N         also serve KServe v2's GRPCInferenceService (gRPC, HTTP/2 cleartext) on\n"
            "                        port N, through the same queue and limits (default 0: off)\n"            "  --grpc-buffer-bytes N request messages the calls of one gRPC connection may hold at once;\n"
            "                        a call beyond is answered RESOURCE_EXHAUSTED (default 8388608)\n"
            "  --threads N           engine threads per worker (default: all cores)\n"
            "  --workers N           engine workers, each running its own batches (default 1)\n"
            "  --max-batch-tokens N  token budget of one packed batch (default 8192)\n"
            "  --max-wait-us N       a batch closes once no request came for N us (default 500), at\n"
            "                        the latest when its oldest request waited 20 x N\n"
            "  --max-queue N         requests waiting or running before 429 (default 256)\n"
            "  --max-body-bytes N    request body limit, 413 beyond (default 1048576)\n"
            "  --max-inputs N        inputs per request (default 64)\n"
            "  --max-tasks N         tasks per request (default 32)\n"
            "  --max-seq-len N       tokens per input (default: the model's limit)\n"
            "  --allow-skip N        let every task skip up to N layers (AdapterDrop), beyond task.json\n"
            "  --admin-token T       bearer token of the admin routes (off without one): upload, activate,\n"
            "                        delete versions (PUT/POST/DELETE /v1/tasks/{name}/...), /v2/repository/*\n"
            "  --adapter-memory N    bytes of adapter weights kept resident; tasks then load on first use and\n"
            "                        the least recently used are evicted (default 0: all, loaded at start)\n"
            "  --load-rate N         bytes per second a task load converts beyond its first --load-burst bytes,\n"
            "                        so large loads leave memory bandwidth to inference (default 268435456;\n"
            "                        0: unpaced)\n"
            "  --load-burst N        bytes of each load converted at full speed (default 16777216)\n"
            "  --max-upload-bytes N  admin upload limit (default 268435456)\n"
            "  --watch M             follow the registry while serving: new version directories of tasks/ and\n"
            "                        the state file other replicas write (current versions, pins). inotify\n"
            "                        (default; also true): file events plus the periodic rescan; poll: only the\n"
            "                        periodic rescan, for network file systems (NFS, CephFS, EFS); off (false)\n"
            "  --watch-debounce-ms N quiet time before a rescan (default 200)\n"
            "  --watch-interval-ms N periodic rescan: new versions, the state file, changed files (default 5000;\n"
            "                        0: none in inotify mode; poll mode needs one)\n"
            "  --drain-timeout-ms N  longest drain after SIGTERM (default 30000)\n"
            "  --http-threads N      libmicrohttpd threads that parse and tokenize, each with its own epoll (default 2)\n"
            "  --adaptive-skips B    load-adaptive mode: when the queue wait exceeds --target-queue-ms, raise the\n"
            "                        skips of tasks a request left at their default, within each task's range\n"
            "  --target-queue-ms N   adaptive mode's queue-wait target (default 50)\n"
            "  --precision P         backbone Linear layers of models without models/NAME/model.json in fp32\n"
            "                        (default), bf16 or int8; a model whose precision this CPU has no fast\n"
            "                        kernel for is not served\n"
            "  --config FILE         JSON object of these options ({\"port\": 8080, \"max-queue\": 64})\n"
            "Environment: ADAPTERD_<OPTION> (ADAPTERD_PORT, ADAPTERD_MAX_QUEUE, ADAPTERD_CONFIG, ...).\n");
}

int cmd_serve(int argc, char **argv) {
    srv_config c = srv_default_config();
    eng_err err = {0};
    /* Every block of 1 MB or more gets its own mapping, returned to the system when freed: adapter
     * weights come and go under the memory budget, and glibc's default (a threshold that grows with
     * each freed block) would serve them from the heap, which then needs malloc_trim; trimming a
     * ~700 MB heap stalled other requests (bench/store: p99 1.2-1.6x while a large task reloads). */
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    }
    if (srv_config_load(&c, argc - 1, (const char *const *)argv + 1, &err)) {
        fprintf(stderr, "adapterd serve: %s\n", err.msg);
        usage(stderr);
        return 2;
    }
    if (!c.registry[0]) {
        fprintf(stderr, "adapterd serve: --registry DIR is required\n");
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* a file size limit (ulimit -f, a container's) fails the write with EFBIG, answered as a full disk */
    signal(SIGXFSZ, SIG_IGN);
    store_params sp = store_default_params();
    sp.allow_skip = c.allow_skip;
    sp.memory_budget = c.adapter_memory;
    sp.load_rate = c.load_rate;
    sp.load_burst = c.load_burst;
    if (c.precision[0]) {
        int prec = eng_precision_parse(c.precision);
        if (prec < 0) {
            fprintf(stderr, "adapterd serve: --precision %s: expected fp32, bf16 or int8\n", c.precision);
            return 2;
        }
        sp.precision = (eng_precision)prec;
    }
    store_registry *reg = NULL;
    if (store_open(c.registry, &sp, &reg, &err)) {
        fprintf(stderr, "adapterd serve: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "adapterd: OpenBLAS core %s\n", eng_blas_core());
    int rc = srv_run(&c, reg, &err);
    store_free(reg);
    if (rc) {
        fprintf(stderr, "adapterd serve: %s\n", err.msg);
        return 1;
    }
    return 0;
}
