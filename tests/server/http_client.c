/* http_client.c - see http_client.h. */
#define _GNU_SOURCE
#include "http_client.h"

#include <curl/curl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void ts_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int ts_start(test_server *s, const char *const *args, const char *const *env) {
    char pf[256];
    snprintf(pf, sizeof pf, "adapterd-test-%d-%ld.port", (int)getpid(), (long)random());
    unlink(pf);
    const char *argv[64];
    int n = 0;
    /* ADAPTERD_TEST_SERVER runs another build of the server (CI: the ThreadSanitizer one) */
    const char *bin = getenv("ADAPTERD_TEST_SERVER");
    argv[n++] = bin && *bin ? bin : ADAPTERD_BINARY_DIR "/tools/adapterd";
    argv[n++] = "serve";
    argv[n++] = "--registry";
    argv[n++] = ADAPTERD_FIXTURES "/registry";
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--port-file";
    argv[n++] = pf;
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--access-log";
    argv[n++] = getenv("ADAPTERD_TEST_LOG") ? "true" : "false";
    for (int i = 0; args && args[i] && n < 62; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* the server dies with the test process: a test that fails before its .fini (or a skip) must
         * not leave a server holding ctest's output pipe open until the timeout */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        if (!getenv("ADAPTERD_TEST_LOG")) freopen("/dev/null", "w", stderr);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    s->port = 0;
    for (int i = 0; i < 2000; i++) {
        FILE *f = fopen(pf, "r");
        if (f) {
            int ok = fscanf(f, "%d", &s->port) == 1;
            fclose(f);
            if (ok) {
                unlink(pf);
                return 0;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return -1;
        ts_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

int ts_wait_exit(test_server *s, int bound_ms) {
    for (int waited = 0; waited <= bound_ms; waited += 10) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        ts_sleep_ms(10);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    return -1;
}

int ts_stop(test_server *s) {
    kill(s->pid, SIGTERM);
    return ts_wait_exit(s, 20000);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
    ts_resp *r = ud;
    size_t k = sz * n;
    char *nb = realloc(r->body, r->len + k + 1);
    if (!nb) return 0;
    memcpy(nb + r->len, p, k);
    r->body = nb;
    r->len += k;
    r->body[r->len] = '\0';
    return k;
}

static void header_value(const char *line, size_t n, const char *name, char *dst, size_t dn) {
    size_t ln = strlen(name);
    if (n <= ln + 1 || strncasecmp(line, name, ln) || line[ln] != ':') return;
    const char *v = line + ln + 1;
    while (*v == ' ') v++;
    size_t k = 0;
    while (v + k < line + n && v[k] != '\r' && v[k] != '\n' && k + 1 < dn) k++;
    memcpy(dst, v, k);
    dst[k] = '\0';
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    ts_resp *r = ud;
    header_value(p, sz * n, "Retry-After", r->retry_after, sizeof r->retry_after);
    header_value(p, sz * n, "X-Request-Id", r->request_id, sizeof r->request_id);
    header_value(p, sz * n, "Content-Type", r->content_type, sizeof r->content_type);
    return sz * n;
}

/* One request: body of len bytes (NULL: none) with the given Content-Type line (NULL: curl's own);
 * "Expect: 100-continue" only when expect_continue. */
static int perform(const test_server *s, const char *method, const char *path, const void *body, size_t len,
                   const char *ctype_line, int expect_continue, const char *extra_header, ts_resp *out) {
    memset(out, 0, sizeof *out);
    CURL *c = curl_easy_init();
    if (!c) return -1;
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    struct curl_slist *h = NULL;
    if (ctype_line) h = curl_slist_append(h, ctype_line);
    h = curl_slist_append(h, expect_continue ? "Expect: 100-continue" : "Expect:");
    if (extra_header) h = curl_slist_append(h, extra_header);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (!out->body) out->body = calloc(1, 1);
    return rc == CURLE_OK ? 0 : -1;
}

int ts_http(const test_server *s, const char *method, const char *path, const char *body, const char *ctype,
            const char *extra_header, ts_resp *out) {
    char ct[160];
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype ? ctype : "application/json");
    return perform(s, method, path, body, body ? strlen(body) : 0, body ? ct : NULL, 0, extra_header, out);
}

long ts_request(const test_server *s, const char *method, const char *path, const void *body, size_t len,
                const char *ctype, const char *extra_header, json_t **out) {
    char ct[160];
    if (ctype) snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
    ts_resp r;
    /* a large body waits for "100 Continue", so a refusal (413) arrives before the body is sent
     * rather than racing a connection reset */
    int rc = perform(s, method, path, body, len, ctype ? ct : NULL, len > (1u << 20), extra_header, &r);
    if (out) *out = !rc && r.body && *r.body ? json_loads(r.body, 0, NULL) : NULL;
    long status = rc ? -1 : r.status;
    ts_resp_free(&r);
    return status;
}

void ts_resp_free(ts_resp *r) {
    free(r->body);
    r->body = NULL;
}

/* ---- structural OpenAPI validation: $ref, type, required, properties, additionalProperties,
 * items, oneOf, enum ---- */

static json_t *spec(void) {
    static json_t *doc;
    if (!doc) doc = json_load_file(ADAPTERD_BINARY_DIR "/proto/openapi.json", 0, NULL);
    return doc;
}

static json_t *deref(json_t *sch) {
    const char *ref = json_string_value(json_object_get(sch, "$ref"));
    if (!ref || strncmp(ref, "#/components/", 13)) return sch;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ref + 13);
    char *slash = strchr(buf, '/');
    if (!slash) return NULL;
    *slash = '\0';
    return deref(json_object_get(json_object_get(json_object_get(spec(), "components"), buf), slash + 1));
}

static int type_ok(const char *t, json_t *v) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return 0;
}

static int check(json_t *sch, json_t *v, const char *at, char *msg, size_t ml) {
    sch = deref(sch);
    if (!sch) return snprintf(msg, ml, "%s: unresolvable $ref", at), -1;
    json_t *t = json_object_get(sch, "type");
    if (json_is_string(t) && !type_ok(json_string_value(t), v))
        return snprintf(msg, ml, "%s: expected %s", at, json_string_value(t)), -1;
    if (json_is_array(t)) {
        int ok = 0;
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) ok |= type_ok(json_string_value(e), v);
        if (!ok) return snprintf(msg, ml, "%s: type not in the allowed list", at), -1;
    }
    json_t *en = json_object_get(sch, "enum");
    if (en) {
        int ok = 0;
        size_t i;
        json_t *e;
        json_array_foreach(en, i, e) ok |= json_equal(e, v);
        if (!ok) return snprintf(msg, ml, "%s: not in enum", at), -1;
    }
    json_t *one = json_object_get(sch, "oneOf");
    if (one) {
        int ok = 0;
        size_t i;
        json_t *e;
        char tmp[256];
        json_array_foreach(one, i, e) ok += check(e, v, at, tmp, sizeof tmp) == 0;
        if (ok < 1) return snprintf(msg, ml, "%s: matches no oneOf branch", at), -1;
    }
    char sub[512];
    if (json_is_object(v)) {
        json_t *req = json_object_get(sch, "required"), *props = json_object_get(sch, "properties"),
               *addl = json_object_get(sch, "additionalProperties");
        size_t i;
        json_t *e;
        json_array_foreach(req, i, e) if (!json_object_get(v, json_string_value(e))) return snprintf(msg, ml, "%s: missing required \"%s\"", at, json_string_value(e)), -1;
        const char *k;
        json_object_foreach(v, k, e) {
            snprintf(sub, sizeof sub, "%s.%s", at, k);
            json_t *ps = json_object_get(props, k);
            if (ps) {
                if (check(ps, e, sub, msg, ml)) return -1;
            } else if (json_is_false(addl)) {
                return snprintf(msg, ml, "%s: not allowed", sub), -1;
            } else if (json_is_object(addl) && check(addl, e, sub, msg, ml)) {
                return -1;
            }
        }
    }
    if (json_is_array(v) && json_object_get(sch, "items")) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            snprintf(sub, sizeof sub, "%s[%zu]", at, i);
            if (check(json_object_get(sch, "items"), e, sub, msg, ml)) return -1;
        }
    }
    return 0;
}

int ts_validate(const char *method, const char *tmpl, long status, json_t *doc, char *msg, size_t msg_len) {
    if (!spec()) return snprintf(msg, msg_len, "cannot load openapi.json"), -1;
    char lm[16], code[8];
    size_t i;
    for (i = 0; method[i] && i < sizeof lm - 1; i++) lm[i] = (char)(method[i] | 0x20);
    lm[i] = '\0';
    snprintf(code, sizeof code, "%ld", status);
    json_t *op = json_object_get(json_object_get(json_object_get(spec(), "paths"), tmpl), lm);
    if (!op) return snprintf(msg, msg_len, "%s %s is not in openapi.yaml", method, tmpl), -1;
    json_t *resp = deref(json_object_get(json_object_get(op, "responses"), code));
    if (!resp) return snprintf(msg, msg_len, "%s %s: status %s is not documented", method, tmpl, code), -1;
    json_t *sch = json_object_get(json_object_get(json_object_get(resp, "content"), "application/json"), "schema");
    if (!sch) return snprintf(msg, msg_len, "%s %s %s: no application/json schema", method, tmpl, code), -1;
    return check(sch, doc, "$", msg, msg_len);
}

int ts_sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd) return -1;
    return system(cmd);
}

char *ts_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long n = -1;
    if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)n + 1))) {
        if (fread(b, 1, (size_t)n, f) == (size_t)n) {
            b[n] = '\0';
            *len = (size_t)n;
        } else {
            free(b);
            b = NULL;
        }
    }
    fclose(f);
    return b;
}

char *ts_tgz_of(const char *dir, size_t *len) {
    static atomic_int seq;
    char tgz[256];
    snprintf(tgz, sizeof tgz, "adapterd-test-%d-%d.tgz", (int)getpid(), atomic_fetch_add(&seq, 1));
    char *b = ts_sh("tar -C %s -chzf %s .", dir, tgz) == 0 ? ts_read_file(tgz, len) : NULL;
    unlink(tgz);
    return b;
}

char *ts_registry_new(const char *name) {
    char tmpl[256];
    if (snprintf(tmpl, sizeof tmpl, "%s-XXXXXX", name) >= (int)sizeof tmpl || !mkdtemp(tmpl)) return NULL;
    char *dir = realpath(tmpl, NULL);
    if (dir && ts_sh("mkdir -p %s/models %s/tasks && cp -rL %s/registry/models/bert-tiny %s/models/ && "
                     "cp -rL %s/registry/tasks/cls_lora %s/tasks/cls",
                     dir, dir, ADAPTERD_FIXTURES, dir, ADAPTERD_FIXTURES, dir) != 0) {
        ts_sh("rm -rf %s", dir);
        free(dir);
        dir = NULL;
    }
    return dir;
}

long ts_metric(const test_server *s, const char *name) {
    ts_resp r;
    if (ts_http(s, "GET", "/metrics", NULL, NULL, NULL, &r)) return -1;
    size_t n = strlen(name);
    long v = -1;
    /* the sample line: name at the start of a line, then a space and the value */
    for (const char *p = strstr(r.body, name); p; p = strstr(p + 1, name)) {
        if ((p == r.body || p[-1] == '\n') && p[n] == ' ') {
            v = strtol(p + n + 1, NULL, 10);
            break;
        }
    }
    ts_resp_free(&r);
    return v;
}

long ts_wait_metric(const test_server *s, const char *name, long at_least, int bound_ms) {
    long v = ts_metric(s, name);
    for (int waited = 0; v < at_least && waited < bound_ms; waited += 10) {
        ts_sleep_ms(10);
        v = ts_metric(s, name);
    }
    return v;
}

int ts_scores_close(json_t *a, json_t *b, double tol) {
    if (json_object_size(a) != json_object_size(b) || !json_object_size(a)) return 0;
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v) {
        json_t *w = json_object_get(b, k);
        if (!w || !(fabs(json_number_value(v) - json_number_value(w)) <= tol)) return 0;
    }
    return 1;
}

static void *post_main(void *arg) {
    ts_post *p = arg;
    if (ts_http(p->s, "POST", p->path, p->body, NULL, NULL, &p->resp)) p->resp.status = -1;
    return NULL;
}

int ts_post_start(ts_post *p, const test_server *s, const char *path, const char *body) {
    p->s = s, p->path = path, p->body = body;
    memset(&p->resp, 0, sizeof p->resp);
    p->resp.status = -1;
    return pthread_create(&p->th, NULL, post_main, p) ? -1 : 0;
}

void ts_post_join(ts_post *p) { pthread_join(p->th, NULL); }
