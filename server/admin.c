/* admin.c - the admin API: versions of tasks uploaded, activated, rolled back, deleted, pinned
 * while the server serves, and KServe v2's repository extension. Behind a bearer token
 * (--admin-token); without one the routes do not exist (404).
 *
 *     PUT    /v1/tasks/{name}/versions/{v}[?activate=true]   body: .tar or .tar.gz of the folders
 *     GET    /v1/tasks/{name}/versions
 *     DELETE /v1/tasks/{name}/versions/{v}      DELETE /v1/tasks/{name}
 *     POST   /v1/tasks/{name}:activate {"version": "v"}      :pin  :unpin
 *     POST   /v1/tasks/{name}:rollout {"version": "v", "mode": "canary"|"shadow", "percent": P, ...}
 *     POST   /v1/tasks/{name}:promote   :abort            GET /v1/tasks/{name}/rollout (with the comparison)
 *     POST   /v2/repository/index     /v2/repository/models/{task}/load     .../unload
 *
 * Everything slow (untar, load, validate, remove files) runs on libuv's pool through offload.c;
 * the registry serializes version changes itself (store.h), so two admin calls never interleave
 * and requests keep being served on the versions they hold. A rejected upload leaves the task on
 * its current version: the store lists a version only after it loaded. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admin.h"
#include "http.h"
#include "http_status.h"
#include "keys.h"
#include "offload.h"
#include "rollout.h"
#include "tar.h"

/* Bytes of the verb in /v1/tasks/{name}:verb. */
#define VERB_MAX 32
/* Versions listed in one answer. */
#define VERSIONS_MAX 256
/* Limits of an uploaded archive: unpacked bytes per upload byte allowed, entries, gzip ratio. */
#define UPLOAD_UNPACK_FACTOR 4
#define UPLOAD_MAX_ENTRIES 4096
#define UPLOAD_MAX_RATIO 100

/* Names of the upload area's entries (body files and staged folders), unique within the process. */
static atomic_int upload_seq;

/* ---- routing ---- */

/* Splits /v1/tasks/{name}[/versions[/{v}]][:verb] into name, version, verb. Returns the route. */
static srv_route parse(const char *url, const char *method, char *name, size_t nn, char *ver, size_t vn, char *verb,
                       size_t bn) {
    name[0] = ver[0] = verb[0] = '\0';
    if (!strncmp(url, "/v2/repository/", 15)) {
        const char *p = url + 15;
        if (!strcmp(p, "index")) return SRV_ROUTE_V2_REPO_INDEX;
        if (strncmp(p, "models/", 7)) return SRV_ROUTE_UNKNOWN;
        p += 7;
        const char *sl = strchr(p, '/');
        if (!sl || (size_t)(sl - p) >= nn || sl == p) return SRV_ROUTE_UNKNOWN;
        snprintf(name, nn, "%.*s", (int)(sl - p), p);
        if (!strcmp(sl, "/load")) return SRV_ROUTE_V2_REPO_LOAD;
        if (!strcmp(sl, "/unload")) return SRV_ROUTE_V2_REPO_UNLOAD;
        return SRV_ROUTE_UNKNOWN;
    }
    if (strncmp(url, "/v1/tasks/", 10) || !url[10]) return SRV_ROUTE_UNKNOWN;
    const char *p = url + 10;
    size_t n = strcspn(p, "/:");
    if (n == 0 || n >= nn) return SRV_ROUTE_UNKNOWN;
    snprintf(name, nn, "%.*s", (int)n, p);
    p += n;
    if (*p == ':') {
        snprintf(verb, bn, "%s", p + 1);
        return SRV_ROUTE_ADMIN_ACTIVATE; /* all verbs share the label; the verb picks the action */
    }
    if (!*p) return strcmp(method, "DELETE") ? SRV_ROUTE_UNKNOWN : SRV_ROUTE_ADMIN_TASK;
    if (!strcmp(p, "/versions")) return SRV_ROUTE_ADMIN_VERSIONS;
    if (!strcmp(p, "/rollout")) return SRV_ROUTE_ADMIN_ROLLOUT;
    if (!strncmp(p, "/versions/", 10) && p[10] && !strchr(p + 10, '/') && strlen(p + 10) < vn) {
        snprintf(ver, vn, "%s", p + 10);
        return SRV_ROUTE_ADMIN_VERSION;
    }
    return SRV_ROUTE_UNKNOWN;
}

bool srv__admin_claims(srv_request *r, const char *url, const char *method) {
    char verb[VERB_MAX];
    srv_route rt = parse(url, method, r->off.name, sizeof r->off.name, r->off.version, sizeof r->off.version, verb, sizeof verb);
    if (rt == SRV_ROUTE_UNKNOWN) return false;
    snprintf(r->verb, sizeof r->verb, "%s", verb);
    r->route = rt;
    r->dialect = srv__route_dialect(rt); /* KServe's repository routes answer errors in its shape */
    r->admin = true;
    return true;
}

/* Constant-time comparison of the bearer token. */
static bool token_ok(srv_request *r) {
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    const char *want = r->srv->cfg.admin_token;
    return h && !strncasecmp(h, "Bearer ", 7) && srv__token_equal(h + 7, want);
}

static enum MHD_Result send_401(srv_request *r) {
    return srv__send_error(r, ENG_UNAUTHENTICATED, r->srv->keys ? "admin routes need \"Authorization: Bearer <key>\" (a known key)"
                                                                : "admin routes need \"Authorization: Bearer <admin token>\"");
}

/* --keys: who the caller is (r->caller) and whether it may administer the route's task: 0, or -1
 * with the answer (401 no or an unknown key, 403 a task outside the tenant's "admin" list) in *ans.
 * The operator's --admin-token may do everything. */
static int admin_allowed(srv_request *r, enum MHD_Result *ans) {
    srv_server *s = r->srv;
    snprintf(r->caller, sizeof r->caller, "-");
    if (s->cfg.admin_token[0] && token_ok(r)) {
        snprintf(r->caller, sizeof r->caller, "operator");
        return 0;
    }
    if (!s->keys) return *ans = send_401(r), -1;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    const char *key = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : NULL;
    srv_keyset *ks = srv__keys_acquire(s->keys);
    const srv_tenant *t = key ? srv__keyset_find(ks, key, strlen(key)) : NULL;
    int rc = 0;
    if (!t) {
        srv__keys_count_unauthenticated(s->keys);
        *ans = send_401(r), rc = -1;
    } else {
        snprintf(r->caller, sizeof r->caller, "%s", t->name);
        /* a route without a task (the repository's index) needs some admin right */
        bool ok = r->off.name[0] ? srv__keys_match(t->admin, t->n_admin, r->off.name, strlen(r->off.name)) : t->n_admin > 0;
        if (!ok) {
            srv__keys_count_refusal(s->keys, t->cls.slot, SRV_REFUSE_FORBIDDEN);
            *ans = r->off.name[0] ? srv__send_error(r, ENG_FORBIDDEN, "tenant \"%s\" may not administer task \"%.100s\"", t->name,
                                                    r->off.name)
                                  : srv__send_error(r, ENG_FORBIDDEN, "tenant \"%s\" may not administer tasks", t->name);
            rc = -1;
        }
    }
    srv__keyset_release(ks);
    return rc;
}

void srv__admin_audit(const srv_request *r, unsigned status) {
    const char *action;
    switch (r->route) {
    case SRV_ROUTE_ADMIN_VERSION:
        action = !strcmp(r->method, "PUT") ? "upload" : !strcmp(r->method, "DELETE") ? "delete_version" : "get_version";
        break;
    case SRV_ROUTE_ADMIN_VERSIONS: action = "list_versions"; break;
    case SRV_ROUTE_ADMIN_TASK: action = "delete_task"; break;
    case SRV_ROUTE_ADMIN_ACTIVATE: action = r->verb[0] ? r->verb : "activate"; break;
    case SRV_ROUTE_ADMIN_ROLLOUT: action = "get_rollout"; break;
    case SRV_ROUTE_V2_REPO_INDEX: action = "repository_index"; break;
    case SRV_ROUTE_V2_REPO_LOAD: action = "load"; break;
    case SRV_ROUTE_V2_REPO_UNLOAD: action = "unload"; break;
    default: action = "admin"; break;
    }
    /* one line per admin action, allowed or refused: who, what, on which task and version, how it ended */
    fprintf(stderr, "adapterd: audit caller=%s action=%s task=%s version=%s status=%u request=%s\n",
            r->caller[0] ? r->caller : "-", action, r->off.name[0] ? r->off.name : "-", r->off.version[0] ? r->off.version : "-",
            status, r->id);
}

/* An upload: PUT on a version. */
static bool is_upload(const srv_request *r, const char *method) {
    return r->route == SRV_ROUTE_ADMIN_VERSION && !strcmp(method, "PUT");
}

/* Content types an upload may declare (parameters allowed); none at all is accepted too. */
static bool tar_media_type(const char *ct) {
    static const char *const ok[] = {"application/x-tar", "application/gzip", "application/x-gzip",
                                     "application/octet-stream"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (srv__media_type_is(ct, ok[i])) return true;
    return false;
}

enum MHD_Result srv__admin_begin(srv_request *r, const char *method) {
    srv_server *s = r->srv;
    r->upload_fd = -1;
    if (!s->cfg.admin_token[0] && !s->keys)
        return srv__send_error(r, ENG_NOT_FOUND, "no route %s %.200s (the admin API is off: start with --admin-token or --keys)",
                               method, r->path);
    enum MHD_Result ans;
    if (admin_allowed(r, &ans)) return ans;
    bool upload = is_upload(r, method);
    size_t limit = upload ? s->cfg.max_upload_bytes : SRV_ADMIN_BODY_MAX;
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > limit)
        return srv__send_error(r, ENG_TOO_LARGE, "a body of %.40s bytes is over this route's limit of %zu", cl, limit);
    if (!upload) return MHD_YES;
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
    if (ct && !tar_media_type(ct))
        return srv__send_error(r, ENG_MEDIA_TYPE, "Content-Type must be application/x-tar or application/gzip (got %.100s)", ct);
    if (atomic_load(&s->draining)) return srv__send_error(r, ENG_UNAVAILABLE, "the server is draining");
    /* the body streams into the upload area (tasks/.upload-*, which the watch ignores), never
     * into memory */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tasks/.upload-%d-%d.body", store_dir(s->reg), (int)getpid(), atomic_fetch_add(&upload_seq, 1));
    if (!(r->upload_path = strdup(path))) return srv__send_error(r, ENG_NO_MEMORY, "out of memory");
    r->upload_fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (r->upload_fd < 0) {
        fprintf(stderr, "adapterd: cannot create %s (%s)\n", path, strerror(errno));
        free(r->upload_path);
        r->upload_path = NULL;
        return srv__send_error(r, ENG_IO, "cannot store the upload (%s)", strerror(errno));
    }
    return MHD_YES;
}

int srv__admin_body(srv_request *r, const char *data, size_t n) {
    if (!r->upload_path) return srv__append_body(r, data, n, SRV_ADMIN_BODY_MAX);
    if (n > r->srv->cfg.max_upload_bytes - r->body_len) {
        r->too_large = true;
        return 0;
    }
    /* after a failed write the rest of the body is read and dropped, so the client gets an answer */
    for (size_t done = 0; done < n && !r->upload_errno;) {
        ssize_t w = write(r->upload_fd, data + done, n - done);
        if (w <= 0) {
            r->upload_errno = w < 0 ? errno : EIO;
            fprintf(stderr, "adapterd: cannot write %s (%s)\n", r->upload_path, strerror(r->upload_errno));
            break;
        }
        done += (size_t)w;
    }
    r->body_len += n;
    return 0;
}

void srv__admin_end(srv_request *r) {
    if (!r->upload_path) return;
    if (r->upload_fd >= 0) close(r->upload_fd);
    unlink(r->upload_path);
    free(r->upload_path);
    r->upload_path = NULL;
    r->upload_fd = -1;
}

/* ---- answers (built on pool threads into r->off) ---- */

static void answer_err(srv_request *r, eng_status code, const char *msg) { srv__offload_fail(r, code, msg); }

static void answer_json(srv_request *r, unsigned status, json_t *doc) {
    r->off.body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!r->off.body) {
        answer_err(r, ENG_NO_MEMORY, "out of memory");
        return;
    }
    r->off.len = strlen(r->off.body);
    r->off.status = status;
}

static json_t *versions_doc(store_registry *reg, const char *name) {
    store_version_info v[VERSIONS_MAX];
    int n = store_versions(reg, name, v, VERSIONS_MAX);
    if (n < 0) return NULL;
    json_t *a = json_array();
    const char *cur = NULL;
    for (int i = 0; i < n; i++) {
        if (v[i].current) cur = v[i].version;
        json_t *o = json_pack("{s:s,s:s,s:b,s:b,s:b,s:i,s:I}", "version", v[i].version, "state", v[i].state, "current",
                              v[i].current, "resident", v[i].resident, "pinned", v[i].pinned, "in_flight", v[i].in_flight,
                              "bytes", (json_int_t)v[i].bytes);
        if (o && v[i].reason[0]) json_object_set_new(o, "reason", json_string(v[i].reason));
        json_array_append_new(a, o);
    }
    return json_pack("{s:s,s:o,s:o}", "task", name, "current", cur ? json_string(cur) : json_null(), "versions", a);
}

static void answer_versions(srv_request *r, unsigned status) {
    json_t *d = versions_doc(r->srv->reg, r->off.name);
    if (!d) {
        char msg[256];
        snprintf(msg, sizeof msg, "unknown task \"%.100s\"", r->off.name);
        answer_err(r, ENG_NOT_FOUND, msg);
        return;
    }
    answer_json(r, status, d);
}

static void do_upload(srv_request *r) {
    srv_server *s = r->srv;
    char staged[PATH_MAX];
    snprintf(staged, sizeof staged, "%s/tasks/.upload-%d-%d", store_dir(s->reg), (int)getpid(), atomic_fetch_add(&upload_seq, 1));
    eng_err e = {0};
    if (mkdir(staged, 0755)) {
        fprintf(stderr, "adapterd: cannot create %s (%s)\n", staged, strerror(errno));
        eng_err_set(&e, ENG_IO, "cannot unpack the upload (%s)", strerror(errno));
        answer_err(r, ENG_IO, e.msg);
        return;
    }
    srv_tar_limits lim = {.max_bytes = s->cfg.max_upload_bytes * UPLOAD_UNPACK_FACTOR, .max_entries = UPLOAD_MAX_ENTRIES,
                          .max_ratio = UPLOAD_MAX_RATIO};
    /* the body file is mapped, not read: its pages are the page cache's, not the heap's */
    void *map = r->body_len ? mmap(NULL, r->body_len, PROT_READ, MAP_PRIVATE, r->upload_fd, 0) : NULL;
    int files = 0, rc, wr_errno = 0;
    if (map == MAP_FAILED) rc = eng_err_set(&e, ENG_IO, "cannot read the upload back (%s)", strerror(errno));
    else rc = srv__untar(map ? map : "", r->body_len, staged, &lim, &files, &e), wr_errno = errno;
    if (map && map != MAP_FAILED) munmap(map, r->body_len);
    srv__admin_end(r); /* the body file goes as soon as it is unpacked */
    if (rc == ENG_IO && (wr_errno == ENOSPC || wr_errno == EDQUOT || wr_errno == EFBIG)) {
        /* the registry's disk is full (or a file size limit hit): the client may retry later */
        eng_err_set(&e, ENG_NO_SPACE, "no room for task %.100s version %.40s on the registry's file system (%s)",
                    r->off.name, r->off.version, strerror(wr_errno));
        rc = ENG_NO_SPACE;
    }
    if (!rc) {
        rc = store_version_add(s->reg, r->off.name, r->off.version, staged, r->off.activate, &e);
        /* a version that does not load is the upload's fault: 422 with the loader's reason */
        int prefix;
        eng_status st = srv__status_of_upload((eng_status)rc, &prefix);
        if (prefix) eng_err_prefix(&e, "rejected (%s)", eng_status_name(rc));
        rc = st;
    }
    if (rc) {
        store_remove_dir(staged);
        /* the loader names files by their staged path: the client sees them relative to its archive */
        char prefix[PATH_MAX + 1];
        snprintf(prefix, sizeof prefix, "%s/", staged);
        srv__scrub_path(e.msg, sizeof e.msg, prefix, "");
        srv__scrub_path(e.msg, sizeof e.msg, staged, "the upload");
        answer_err(r, (eng_status)rc, e.msg);
        return;
    }
    answer_versions(r, 201);
}

static void do_activate(srv_request *r) {
    eng_err e = {0};
    int rc = store_activate(r->srv->reg, r->off.name, r->off.version, &e);
    if (rc) answer_err(r, (eng_status)rc, e.msg);
    else answer_versions(r, 200);
}

static void do_pin(srv_request *r) {
    eng_err e = {0};
    int rc = store_pin(r->srv->reg, r->off.name, r->off.activate, &e);
    if (rc) answer_err(r, (eng_status)rc, e.msg);
    else answer_versions(r, 200);
}

static void do_delete_version(srv_request *r) {
    eng_err e = {0};
    int rc = store_delete_version(r->srv->reg, r->off.name, r->off.version, &e);
    if (rc) {
        answer_err(r, (eng_status)rc, e.msg);
        return;
    }
    json_t *d = versions_doc(r->srv->reg, r->off.name);
    answer_json(r, 200, d ? d : json_pack("{s:s,s:n,s:[]}", "task", r->off.name, "current", "versions"));
}

static void do_delete_task(srv_request *r) {
    eng_err e = {0};
    int rc = store_delete_task(r->srv->reg, r->off.name, &e);
    if (rc) answer_err(r, (eng_status)rc, e.msg);
    else answer_json(r, 200, json_pack("{s:s,s:b}", "task", r->off.name, "deleted", 1));
}

/* ---- rollouts ---- */

/* {"task", "current", "rollout": {version, mode, percent, max_share, rules, started, comparison} or
 * null}; with ended, the rollout that just ended instead (promote, abort). NULL: unknown task. */
static json_t *rollout_doc(srv_server *s, const char *name, const store_rollout *ended, bool promoted) {
    store_rollout ro;
    int rc = ended ? 1 : store_rollout_get(s->reg, name, &ro);
    if (rc < 0) return NULL;
    if (ended) ro = *ended;
    store_task *cur = store_task_acquire(s->reg, name, strlen(name));
    json_t *d = json_pack("{s:s,s:o}", "task", name, "current", cur ? json_string(store_task_version(cur)) : json_null());
    store_task_release(cur);
    json_t *o = NULL;
    if (rc == 1) {
        o = json_pack("{s:s,s:s,s:f,s:f,s:{s:I,s:f,s:f,s:f,s:I},s:I,s:o}", "version", ro.version, "mode",
                      store_rollout_mode_name(ro.mode), "percent", ro.percent, "max_share", ro.max_share, "rules",
                      "promote_after", (json_int_t)ro.promote_after, "promote_agreement", ro.promote_agreement,
                      "abort_error_rate", ro.abort_error_rate, "abort_latency_ratio", ro.abort_latency_ratio, "min_inputs",
                      (json_int_t)ro.rule_min, "started", (json_int_t)ro.started, "comparison",
                      srv__rollout_comparison(s->rollouts, name, &ro, !ended));
        if (o && ended) json_object_set_new(o, "ended", json_string(promoted ? "promoted" : "aborted"));
    }
    if (d) json_object_set_new(d, ended ? "ended" : "rollout", o ? o : json_null());
    return d;
}

static void answer_rollout(srv_request *r, unsigned status, const store_rollout *ended, bool promoted) {
    json_t *d = rollout_doc(r->srv, r->off.name, ended, promoted);
    if (!d) {
        char msg[256];
        snprintf(msg, sizeof msg, "unknown task \"%.100s\"", r->off.name);
        answer_err(r, ENG_NOT_FOUND, msg);
        return;
    }
    answer_json(r, status, d);
}

/* :rollout's body, read on the HTTP thread into r->off.rollout: {"version": "2", "mode": "canary" |
 * "shadow", "percent": 10, "max_share": 0.25, "rules": {"promote_after": N, "promote_agreement": X,
 * "abort_error_rate": Y, "abort_latency_ratio": Z, "min_inputs": M}}. Returns 0, or -1 with msg. */
static int body_rollout(srv_request *r, store_rollout *ro, char *msg, size_t mn) {
    json_t *d = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
    int bad = 0;
    memset(ro, 0, sizeof *ro);
#define FAIL(...) (snprintf(msg, mn, __VA_ARGS__), bad = 1)
    if (!json_is_object(d)) FAIL("the body must be {\"version\": \"<version>\", \"mode\": \"canary\" or \"shadow\", \"percent\": P}");
    const char *k;
    json_t *v;
    json_object_foreach(json_is_object(d) ? d : NULL, k, v) {
        if (bad) break;
        if (!strcmp(k, "version")) {
            if (json_is_string(v) && strlen(json_string_value(v)) < sizeof ro->version) snprintf(ro->version, sizeof ro->version, "%s", json_string_value(v));
            else if (json_is_integer(v) && json_integer_value(v) >= 0) snprintf(ro->version, sizeof ro->version, "%lld", (long long)json_integer_value(v));
            else FAIL("\"version\" must be a version name, such as \"2\"");
        } else if (!strcmp(k, "mode")) {
            int m = store_rollout_mode_parse(json_string_value(v));
            if (m <= STORE_ROLLOUT_NONE) FAIL("\"mode\" must be \"canary\" or \"shadow\"");
            else ro->mode = m;
        } else if (!strcmp(k, "percent")) {
            if (!json_is_number(v) || !(json_number_value(v) >= 0 && json_number_value(v) <= 100))
                FAIL("\"percent\" must be a number from 0 to 100");
            else ro->percent = json_number_value(v);
        } else if (!strcmp(k, "max_share")) {
            if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) <= 1))
                FAIL("\"max_share\" must be a number above 0, at most 1");
            else ro->max_share = json_number_value(v);
        } else if (!strcmp(k, "rules")) {
            const char *rk;
            json_t *rv;
            if (!json_is_object(v)) FAIL("\"rules\" must be an object");
            json_object_foreach(json_is_object(v) ? v : NULL, rk, rv) {
                double x = json_number_value(rv);
                if (bad) break;
                if (!json_is_number(rv) || x < 0) FAIL("rules.%.40s must be a number >= 0", rk);
                else if (!strcmp(rk, "promote_after")) ro->promote_after = (long)x;
                else if (!strcmp(rk, "min_inputs")) ro->rule_min = (long)x;
                else if (!strcmp(rk, "promote_agreement") && x <= 1) ro->promote_agreement = x;
                else if (!strcmp(rk, "abort_error_rate") && x <= 1) ro->abort_error_rate = x;
                else if (!strcmp(rk, "abort_latency_ratio")) ro->abort_latency_ratio = x;
                else if (!strcmp(rk, "promote_agreement") || !strcmp(rk, "abort_error_rate")) FAIL("rules.%s must be from 0 to 1", rk);
                else FAIL("rules has an unknown field \"%.60s\" (promote_after, promote_agreement, abort_error_rate, "
                          "abort_latency_ratio, min_inputs)", rk);
            }
        } else {
            FAIL("unknown field \"%.60s\" (version, mode, percent, max_share, rules)", k);
        }
    }
    if (!bad && !ro->version[0]) FAIL("\"version\" is required: the candidate version");
    if (!bad && !ro->mode) FAIL("\"mode\" is required: \"canary\" or \"shadow\"");
    if (!bad && !json_object_get(d, "percent")) FAIL("\"percent\" is required: from 0 to 100");
#undef FAIL
    json_decref(d);
    return bad ? -1 : 0;
}

static void do_rollout(srv_request *r) {
    eng_err e = {0};
    int rc = store_rollout_start(r->srv->reg, r->off.name, &r->off.rollout, &e);
    if (rc) answer_err(r, (eng_status)rc, e.msg);
    else answer_rollout(r, 201, NULL, false);
}

static void do_rollout_end(srv_request *r) {
    eng_err e = {0};
    store_rollout ended;
    int rc = store_rollout_finish(r->srv->reg, r->off.name, r->off.activate, 0, &ended, &e);
    if (rc) answer_err(r, (eng_status)rc, e.msg);
    else answer_rollout(r, 200, &ended, r->off.activate);
}

static void do_rollout_get(srv_request *r) { answer_rollout(r, 200, NULL, false); }

/* The error of a task that cannot be acquired: listed but unserved (every version failed to load, so
 * the server's files are at fault: the first failed version's reason), else unknown. */
static int unservable(store_registry *reg, const char *name, eng_err *e) {
    store_version_info v[VERSIONS_MAX];
    int n = store_versions(reg, name, v, VERSIONS_MAX);
    for (int i = 0; i < n; i++)
        if (v[i].reason[0]) return eng_err_set(e, ENG_FORMAT, "task \"%.100s\" has no version that loads: %s", name, v[i].reason);
    return eng_err_set(e, ENG_NOT_FOUND, "unknown task \"%.100s\"", name);
}

static void do_repo_load(srv_request *r) {
    eng_err e = {0};
    store_task *t = store_task_acquire(r->srv->reg, r->off.name, strlen(r->off.name));
    int rc = t ? store_task_ensure(r->srv->reg, t, &e) : unservable(r->srv->reg, r->off.name, &e);
    store_task_release(t);
    if (rc) answer_err(r, (eng_status)rc, e.msg);
    else answer_json(r, 200, json_pack("{s:s,s:s}", "name", r->off.name, "state", "READY"));
}

static void do_repo_unload(srv_request *r) {
    eng_err e = {0};
    int rc = store_unload(r->srv->reg, r->off.name, &e);
    if (rc) answer_err(r, (eng_status)rc, e.msg);
    else answer_json(r, 200, json_pack("{s:s,s:s}", "name", r->off.name, "state", "UNAVAILABLE"));
}

/* KServe repository index: every task, its current version and whether it is in memory. */
static enum MHD_Result repo_index(srv_request *r) {
    store_registry *reg = r->srv->reg;
    json_t *a = json_array();
    store_task **all = NULL;
    int n = a ? store_tasks_acquire(reg, &all) : 0;
    for (int i = 0; i < n; i++) {
        store_task *t = all[i];
        int res = store_task_resident(t);
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:s}", "name", store_task_name(t), "version", store_task_version(t),
                                           "state", res ? "READY" : "UNAVAILABLE", "reason",
                                           res ? "" : "not loaded (loads on first request or /load)"));
    }
    store_tasks_release(all, n);
    if (n < 0) json_decref(a), a = NULL;
    char *j = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return srv__send_json(r, 200, j, j ? strlen(j) : 0);
}

/* The version in an :activate body: {"version": "3"} or {"version": 3}. */
static int body_version(srv_request *r, char *out, size_t n) {
    json_t *d = json_loadb(r->body ? r->body : "", r->body_len, 0, NULL);
    json_t *v = json_object_get(d, "version");
    int ok = 1;
    if (json_is_string(v) && strlen(json_string_value(v)) < n) snprintf(out, n, "%s", json_string_value(v));
    else if (json_is_integer(v) && json_integer_value(v) >= 0) snprintf(out, n, "%lld", (long long)json_integer_value(v));
    else ok = 0;
    json_decref(d);
    return ok;
}

enum MHD_Result srv__admin_dispatch(srv_request *r, const char *url, const char *method) {
    srv_server *s = r->srv;
    /* the token and the admin switch were checked on the headers (srv__admin_begin) */
    if (r->too_large)
        return srv__send_error(r, ENG_TOO_LARGE, "a body over this route's limit of %zu bytes",
                               r->upload_path ? s->cfg.max_upload_bytes : (size_t)SRV_ADMIN_BODY_MAX);
    if (r->upload_errno) {
        int en = r->upload_errno;
        bool full = en == ENOSPC || en == EDQUOT || en == EFBIG;
        srv__admin_end(r);
        return srv__send_error(r, full ? ENG_NO_SPACE : ENG_IO, "the upload could not be stored on the registry's file system (%s)",
                               strerror(en));
    }
    if (atomic_load(&s->draining)) return srv__send_error(r, ENG_UNAVAILABLE, "the server is draining");
    bool is_get = !strcmp(method, "GET"), is_post = !strcmp(method, "POST"), is_put = !strcmp(method, "PUT"),
         is_del = !strcmp(method, "DELETE");
    char verb[VERB_MAX], name[SRV_NAME_MAX], ver[SRV_VERSION_MAX];
    parse(url, method, name, sizeof name, ver, sizeof ver, verb, sizeof verb);
    switch (r->route) {
    case SRV_ROUTE_ADMIN_VERSIONS:
        if (!is_get) break;
        answer_versions(r, 200);
        {
            char *b = r->off.body;
            r->off.body = NULL;
            return srv__send_json(r, r->off.status, b, r->off.len);
        }
    case SRV_ROUTE_ADMIN_VERSION:
        if (is_put) {
            if (!r->body_len) return srv__send_error(r, ENG_INVALID_ARGUMENT, "the body must be a .tar or .tar.gz of the version's folders");
            const char *act = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "activate");
            r->off.activate = act && (!strcmp(act, "true") || !strcmp(act, "1"));
            srv__offload(s->offl, r, do_upload);
            return MHD_YES;
        }
        if (is_del) {
            srv__offload(s->offl, r, do_delete_version);
            return MHD_YES;
        }
        break;
    case SRV_ROUTE_ADMIN_TASK:
        if (!is_del) break;
        srv__offload(s->offl, r, do_delete_task);
        return MHD_YES;
    case SRV_ROUTE_ADMIN_ACTIVATE:
        if (!is_post) break;
        if (!strcmp(verb, "activate")) {
            if (!body_version(r, r->off.version, sizeof r->off.version))
                return srv__send_error(r, ENG_INVALID_ARGUMENT, "the body must be {\"version\": \"<version>\"}");
            srv__offload(s->offl, r, do_activate);
            return MHD_YES;
        }
        if (!strcmp(verb, "pin") || !strcmp(verb, "unpin")) {
            r->off.activate = !strcmp(verb, "pin");
            srv__offload(s->offl, r, do_pin);
            return MHD_YES;
        }
        if (!strcmp(verb, "rollout")) {
            char msg[300];
            if (body_rollout(r, &r->off.rollout, msg, sizeof msg)) return srv__send_error(r, ENG_INVALID_ARGUMENT, "%s", msg);
            snprintf(r->off.version, sizeof r->off.version, "%s", r->off.rollout.version); /* for the audit line */
            srv__offload(s->offl, r, do_rollout);
            return MHD_YES;
        }
        if (!strcmp(verb, "promote") || !strcmp(verb, "abort")) {
            r->off.activate = !strcmp(verb, "promote");
            srv__offload(s->offl, r, do_rollout_end);
            return MHD_YES;
        }
        return srv__send_error(r, ENG_NOT_FOUND, "no route %s %.200s (verbs: activate, pin, unpin, rollout, promote, abort)",
                               method, url);
    case SRV_ROUTE_ADMIN_ROLLOUT:
        if (!is_get) break;
        srv__offload(s->offl, r, do_rollout_get);
        return MHD_YES;
    case SRV_ROUTE_V2_REPO_INDEX:
        if (!is_post) break;
        return repo_index(r);
    case SRV_ROUTE_V2_REPO_LOAD:
        if (!is_post) break;
        srv__offload(s->offl, r, do_repo_load);
        return MHD_YES;
    case SRV_ROUTE_V2_REPO_UNLOAD:
        if (!is_post) break;
        srv__offload(s->offl, r, do_repo_unload);
        return MHD_YES;
    default: break;
    }
    return srv__send_error(r, ENG_METHOD_NOT_ALLOWED, "%s is not allowed on %.200s", method, url);
}
