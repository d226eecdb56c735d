/* cmd_rollout.c - `adapterd rollout TASK [VERSION] --canary P | --shadow P | --promote | --abort | --status`:
 * a task's rollout on a running server, through its admin API (POST /v1/tasks/{name}:rollout,
 * :promote, :abort; GET /v1/tasks/{name}/rollout). The server's answer (JSON) is printed as it came.
 *
 * A plain HTTP/1.1 client over one socket (Connection: close): the admin API is on loopback or a
 * private network in the deployments documented (docs/OPERATIONS.md), and the command line takes no
 * HTTP library for one request. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli.h"
#include "opts.h"

/* Bytes of an answer read; an admin answer (a rollout with its disagreements) is far smaller. */
#define ANSWER_MAX (4 << 20)

static void usage(FILE *f) {
    fprintf(f,
            "usage: adapterd rollout TASK VERSION --canary P | --shadow P [options]\n"
            "       adapterd rollout TASK --promote | --abort | --status\n\n"
            "Starts, shows or ends a rollout of TASK's candidate VERSION on a running server (its admin API):\n"
            "  --canary P              P%% of the requests that name no version are answered by VERSION\n"
            "  --shadow P              VERSION also runs on P%% of the inputs, on the same trunk pass; its answers\n"
            "                          are compared with the current version's, never returned\n"
            "  --max-share X           shadow: its rows at most this share of the task rows run (default 0.25)\n"
            "  --promote-after N       rule: promote once N inputs were compared (canary: answered) with\n"
            "  --promote-agreement X   an agreement of at least X (0..1) and no more errors than the current\n"
            "  --abort-error-rate X    rule: abort when the candidate's error rate is above X\n"
            "  --abort-latency-ratio X rule: abort when its latency is above X times the current version's\n"
            "  --min-inputs N          inputs the abort rules wait for (default: --promote-after, else 100)\n"
            "  --promote | --abort     end the rollout: make VERSION current, or drop it\n"
            "  --status                the rollout and its live comparison (the default without a mode)\n"
            "  --server URL            the server (default $ADAPTERD_SERVER, else http://127.0.0.1:8080)\n"
            "  --token T               the admin token (default $ADAPTERD_ADMIN_TOKEN)\n"
            "Prints the server's answer; exit status 1 when it refused (its error on stderr).\n");
}

/* http://HOST[:PORT] into host and port. Returns 0, or -1 (message on stderr). */
static int parse_server(const char *url, char *host, size_t hn, char *port, size_t pn) {
    if (strncmp(url, "http://", 7)) {
        fprintf(stderr, "adapterd rollout: --server must be http://HOST[:PORT], not \"%s\"\n", url);
        return -1;
    }
    const char *h = url + 7, *end = h + strcspn(h, "/"), *colon = memchr(h, ':', (size_t)(end - h));
    size_t hl = (size_t)((colon ? colon : end) - h);
    if (!hl || hl >= hn) {
        fprintf(stderr, "adapterd rollout: --server \"%s\" names no host\n", url);
        return -1;
    }
    memcpy(host, h, hl), host[hl] = '\0';
    snprintf(port, pn, "%.*s", colon ? (int)(end - colon - 1) : 2, colon ? colon + 1 : "80");
    return 0;
}

/* One request; the answer's status into *status and its body into *body (malloc'd). Returns 0, or -1. */
static int http_call(const char *host, const char *port, const char *method, const char *path, const char *token,
                     const char *json, int *status, char **body) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai), fd = -1;
    if (rc) {
        fprintf(stderr, "adapterd rollout: %s:%s: %s\n", host, port, gai_strerror(rc));
        return -1;
    }
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen)) close(fd), fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        fprintf(stderr, "adapterd rollout: cannot connect to %s:%s (%s)\n", host, port, strerror(errno));
        return -1;
    }
    char *req = NULL;
    int n = asprintf(&req, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n%s%s%sContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\n\r\n%s",
                     method, path, host, port, token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "",
                     json ? strlen(json) : 0, json ? json : "");
    if (n < 0) {
        close(fd);
        return -1;
    }
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t k = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            fprintf(stderr, "adapterd rollout: sending to %s:%s: %s\n", host, port, strerror(errno));
            free(req), close(fd);
            return -1;
        }
        off += (size_t)k;
    }
    free(req);
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    for (ssize_t k = 1; buf && k > 0 && len < ANSWER_MAX;) {
        if (len == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) break;
            buf = nb, cap *= 2;
        }
        k = recv(fd, buf + len, cap - len, 0);
        if (k < 0 && errno == EINTR) k = 1;
        else if (k > 0) len += (size_t)k;
    }
    close(fd);
    if (!buf) return -1;
    buf[len] = '\0';
    char *hdr_end = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) || !hdr_end || sscanf(buf + 8, " %d", status) != 1) {
        fprintf(stderr, "adapterd rollout: %s:%s did not answer in HTTP\n", host, port);
        free(buf);
        return -1;
    }
    memmove(buf, hdr_end + 4, strlen(hdr_end + 4) + 1);
    *body = buf;
    return 0;
}

int cmd_rollout(int argc, char **argv) {
    double canary = -1, shadow = -1, max_share = 0, agreement = 0, err_rate = 0, lat_ratio = 0;
    int promote = 0, abort_ = 0, status_ = 0, promote_after = 0, min_inputs = 0;
    const char *server = getenv("ADAPTERD_SERVER"), *token = getenv("ADAPTERD_ADMIN_TOKEN");
    const cli_opt opts[] = {CLI_OPT_REAL("--canary", &canary, 0, 100, 0),
                            CLI_OPT_REAL("--shadow", &shadow, 0, 100, 0),
                            CLI_OPT_REAL("--max-share", &max_share, 0, 1, 1),
                            CLI_OPT_INT("--promote-after", &promote_after, 0, 1 << 30),
                            CLI_OPT_REAL("--promote-agreement", &agreement, 0, 1, 0),
                            CLI_OPT_REAL("--abort-error-rate", &err_rate, 0, 1, 0),
                            CLI_OPT_REAL("--abort-latency-ratio", &lat_ratio, 0, 1e6, 0),
                            CLI_OPT_INT("--min-inputs", &min_inputs, 0, 1 << 30),
                            CLI_OPT_FLAG("--promote", &promote),
                            CLI_OPT_FLAG("--abort", &abort_),
                            CLI_OPT_FLAG("--status", &status_),
                            CLI_OPT_STR("--server", &server),
                            CLI_OPT_STR("--token", &token),
                            CLI_OPT_END};
    /* TASK and VERSION come first; the options after them */
    const char *task = NULL, *version = NULL;
    int k = 1;
    if (k < argc && argv[k][0] != '-') task = argv[k++];
    if (k < argc && argv[k][0] != '-') version = argv[k++];
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return 1;
    rest[0] = argv[0];
    for (int i = k; i < argc; i++) rest[i - k + 1] = argv[i];
    int prc = cli_opts_parse("rollout", opts, usage, argc - k + 1, rest);
    free(rest);
    if (prc >= 0) return prc;
    int modes = (canary >= 0) + (shadow >= 0) + promote + abort_ + status_;
    if (!task || modes > 1 || ((canary >= 0 || shadow >= 0) && !version)) {
        fprintf(stderr, "adapterd rollout: give TASK, then one of --canary P or --shadow P (with VERSION), --promote, "
                        "--abort or --status (--help)\n");
        return 2;
    }
    char host[256], port[16], path[512];
    if (parse_server(server ? server : "http://127.0.0.1:8080", host, sizeof host, port, sizeof port)) return 2;
    char *json = NULL;
    const char *method = "POST";
    if (canary >= 0 || shadow >= 0) {
        snprintf(path, sizeof path, "/v1/tasks/%s:rollout", task);
        char ms[64] = ""; /* no --max-share: the server's default */
        if (max_share > 0) snprintf(ms, sizeof ms, ", \"max_share\": %.17g", max_share);
        if (asprintf(&json,
                     "{\"version\": \"%s\", \"mode\": \"%s\", \"percent\": %.17g%s, \"rules\": {\"promote_after\": %d, "
                     "\"promote_agreement\": %.17g, \"abort_error_rate\": %.17g, \"abort_latency_ratio\": %.17g, "
                     "\"min_inputs\": %d}}",
                     version, canary >= 0 ? "canary" : "shadow", canary >= 0 ? canary : shadow, ms, promote_after,
                     agreement, err_rate, lat_ratio, min_inputs) < 0)
            return 1;
    } else if (promote || abort_) {
        snprintf(path, sizeof path, "/v1/tasks/%s:%s", task, promote ? "promote" : "abort");
    } else {
        method = "GET";
        snprintf(path, sizeof path, "/v1/tasks/%s/rollout", task);
    }
    int status = 0;
    char *body = NULL;
    int rc = http_call(host, port, method, path, token, json, &status, &body);
    free(json);
    if (rc) return 1;
    int ok = status >= 200 && status < 300;
    fprintf(ok ? stdout : stderr, "%s%s", body, body[0] && body[strlen(body) - 1] == '\n' ? "" : "\n");
    free(body);
    return ok ? 0 : 1;
}
