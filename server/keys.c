/* keys.c - tenants (--keys FILE, see docs/SECURITY.md): a JSON document naming tenants, the SHA-256
 * digests of their bearer keys, the tasks each may predict with and administer (names or fnmatch
 * globs), their quotas (token buckets on requests and on tokens) and their class (tenant.h).
 *
 * The file is parsed into an immutable, refcounted snapshot (srv_keyset). The loop polls the file's
 * identity (inode, size, mtime) on a timer and swaps in a new snapshot when it changed and parses; a
 * broken file keeps the snapshot in use. Readers on any thread take a reference under a mutex held
 * only for the pointer load and the increment, and read the snapshot without a lock.
 *
 * State that must survive a reload - a tenant's slot, its buckets, its counters - lives here by slot,
 * and a name keeps its slot for the server's life (srv_keys_slots), so a reload never resets a quota.
 * Each bucket has its own short mutex. Keys are stored as digests only: a key in the clear in the file
 * is refused at load, and a presented key is hashed and compared in constant time. */
#define _GNU_SOURCE
#include "keys.h"

#include <errno.h>
#include <fnmatch.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Bytes of a keys file read at most. */
#define KEYS_FILE_MAX (4 << 20)
/* Entries of one tenant's keys, predict or admin lists. */
#define LIST_MAX 1024

static int fail(char *msg, size_t msz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *msg, size_t msz, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msz, fmt, ap);
    va_end(ap);
    return -1;
}

static void free_list(char **l, int n) {
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

void srv__keyset_release(srv_keyset *ks) {
    if (!ks) return;
    int prev = atomic_fetch_sub(&ks->ref, 1);
    if (prev > 1) return;
    for (int i = 0; i < ks->n; i++) {
        free(ks->t[i].digests);
        free_list(ks->t[i].predict, ks->t[i].n_predict);
        free_list(ks->t[i].admin, ks->t[i].n_admin);
    }
    free(ks->t);
    free(ks);
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int parse_digest(const char *s, uint8_t out[32], const char *tn, char *msg, size_t msz) {
    if (strncmp(s, "sha256:", 7))
        return fail(msg, msz,
                    "tenant \"%s\": a key must be given as \"sha256:<64 hex digits>\" (its digest: printf %%s \"$KEY\" | "
                    "sha256sum), never in the clear",
                    tn);
    s += 7;
    if (strlen(s) != 64) return fail(msg, msz, "tenant \"%s\": a sha256 digest has 64 hex digits (got %zu)", tn, strlen(s));
    for (int i = 0; i < 32; i++) {
        int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
        if (a < 0 || b < 0) return fail(msg, msz, "tenant \"%s\": \"%.64s\" is not a hex digest", tn, s);
        out[i] = (uint8_t)(a << 4 | b);
    }
    return 0;
}

static int parse_list(json_t *v, const char *field, const char *tn, char ***out, int *n, char *msg, size_t msz) {
    if (!v) return 0;
    if (!json_is_array(v)) return fail(msg, msz, "tenant \"%s\": \"%s\" must be a list of task names or globs", tn, field);
    size_t m = json_array_size(v);
    if (m > LIST_MAX) return fail(msg, msz, "tenant \"%s\": \"%s\" has over %d entries", tn, field, LIST_MAX);
    if (m && !(*out = calloc(m, sizeof **out))) return fail(msg, msz, "out of memory");
    for (size_t i = 0; i < m; i++) {
        const char *s = json_string_value(json_array_get(v, i));
        if (!s || !*s || strlen(s) >= 160)
            return fail(msg, msz, "tenant \"%s\": \"%s\"[%zu] must be a task name or glob (1 to 159 bytes)", tn, field, i);
        if (!((*out)[i] = strdup(s))) return fail(msg, msz, "out of memory");
        *n = (int)i + 1;
    }
    return 0;
}

static int parse_rate(json_t *v, const char *field, const char *tn, double *out, char *msg, size_t msz) {
    if (!v) return 0;
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (!json_is_number(v) || !isfinite(d) || d <= 0 || d > 1e12)
        return fail(msg, msz, "tenant \"%s\": \"%s\" must be a number above 0 (absent: unlimited)", tn, field);
    *out = d;
    return 0;
}

static const char *const fields[] = {"name", "keys", "predict", "admin", "requests_per_s", "burst", "tokens_per_s",
                                     "tokens_burst", "priority", "share"};

static int parse_tenant(json_t *o, int idx, srv_tenant *t, char *msg, size_t msz) {
    if (!json_is_object(o)) return fail(msg, msz, "tenants[%d] must be an object", idx);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) known |= !strcmp(key, fields[i]);
        if (!known) return fail(msg, msz, "tenants[%d]: unknown field \"%.60s\"", idx, key);
    }
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || !*name || strlen(name) >= SRV_TENANT_NAME_MAX || !strcmp(name, "operator"))
        return fail(msg, msz, "tenants[%d]: \"name\" must be a string of 1 to %d bytes other than \"operator\"", idx,
                    SRV_TENANT_NAME_MAX - 1);
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\' || (unsigned char)*p >= 0x7f)
            return fail(msg, msz, "tenants[%d]: \"name\" must be printable ASCII without quotes or backslashes", idx);
    snprintf(t->name, sizeof t->name, "%s", name);
    json_t *keys = json_object_get(o, "keys");
    if (!json_is_array(keys) || !json_array_size(keys))
        return fail(msg, msz, "tenant \"%s\": \"keys\" must be a non-empty list of \"sha256:<hex>\" digests", name);
    size_t nk = json_array_size(keys);
    if (nk > LIST_MAX) return fail(msg, msz, "tenant \"%s\": over %d keys", name, LIST_MAX);
    if (!(t->digests = calloc(nk, sizeof *t->digests))) return fail(msg, msz, "out of memory");
    for (size_t i = 0; i < nk; i++) {
        const char *s = json_string_value(json_array_get(keys, i));
        if (!s) return fail(msg, msz, "tenant \"%s\": keys[%zu] must be a string \"sha256:<hex>\"", name, i);
        if (parse_digest(s, t->digests[i], name, msg, msz)) return -1;
        t->n_digests = (int)i + 1;
    }
    if (parse_list(json_object_get(o, "predict"), "predict", name, &t->predict, &t->n_predict, msg, msz) ||
        parse_list(json_object_get(o, "admin"), "admin", name, &t->admin, &t->n_admin, msg, msz) ||
        parse_rate(json_object_get(o, "requests_per_s"), "requests_per_s", name, &t->requests_per_s, msg, msz) ||
        parse_rate(json_object_get(o, "burst"), "burst", name, &t->burst, msg, msz) ||
        parse_rate(json_object_get(o, "tokens_per_s"), "tokens_per_s", name, &t->tokens_per_s, msg, msz) ||
        parse_rate(json_object_get(o, "tokens_burst"), "tokens_burst", name, &t->tokens_burst, msg, msz))
        return -1;
    if (t->burst && !t->requests_per_s) return fail(msg, msz, "tenant \"%s\": \"burst\" needs \"requests_per_s\"", name);
    if (t->tokens_burst && !t->tokens_per_s)
        return fail(msg, msz, "tenant \"%s\": \"tokens_burst\" needs \"tokens_per_s\"", name);
    if (t->requests_per_s && !t->burst) t->burst = t->requests_per_s < 1 ? 1 : t->requests_per_s;
    if (t->burst && t->burst < 1) return fail(msg, msz, "tenant \"%s\": \"burst\" must be at least 1", name);
    if (t->tokens_per_s && !t->tokens_burst) t->tokens_burst = t->tokens_per_s; /* one second's tokens */
    t->cls = SRV_TENANT_CLASS_DEFAULT;
    json_t *pr = json_object_get(o, "priority");
    if (pr) {
        const char *p = json_string_value(pr);
        if (p && !strcmp(p, "interactive")) t->cls.priority = SRV_PRIO_INTERACTIVE;
        else if (p && !strcmp(p, "batch")) t->cls.priority = SRV_PRIO_BATCH;
        else return fail(msg, msz, "tenant \"%s\": \"priority\" must be \"interactive\" or \"batch\"", name);
    }
    json_t *sh = json_object_get(o, "share");
    if (sh) {
        double d = json_is_integer(sh) ? (double)json_integer_value(sh) : json_is_real(sh) ? json_real_value(sh) : -1;
        if (!json_is_number(sh) || !isfinite(d) || d <= 0 || d > 1e6)
            return fail(msg, msz, "tenant \"%s\": \"share\" must be a number above 0 and at most 1e6", name);
        t->cls.share = d;
    }
    return 0;
}

srv_keyset *srv__keyset_parse(const char *text, size_t len, srv_keys_slots *slots, char *msg, size_t msz) {
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        fail(msg, msz, "not JSON (line %d, column %d: %s)", je.line, je.column, je.text);
        return NULL;
    }
    srv_keyset *ks = calloc(1, sizeof *ks);
    json_t *list = json_object_get(root, "tenants");
    int rc = -1;
    if (!ks) {
        fail(msg, msz, "out of memory");
        goto out;
    }
    atomic_init(&ks->ref, 1);
    if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(list)) {
        fail(msg, msz, "the keys file must be an object with one field, \"tenants\": a list");
        goto out;
    }
    size_t n = json_array_size(list);
    if (n > SRV_TENANTS_MAX - 1) {
        fail(msg, msz, "%zu tenants: at most %d", n, SRV_TENANTS_MAX - 1);
        goto out;
    }
    if (n && !(ks->t = calloc(n, sizeof *ks->t))) {
        fail(msg, msz, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        ks->n = (int)i + 1;
        if (parse_tenant(json_array_get(list, i), (int)i, &ks->t[i], msg, msz)) goto out;
        for (size_t j = 0; j < i; j++) {
            if (!strcmp(ks->t[j].name, ks->t[i].name)) {
                fail(msg, msz, "tenant \"%s\" is named twice", ks->t[i].name);
                goto out;
            }
        }
    }
    /* a digest names one tenant, once */
    for (int i = 0; i < ks->n; i++)
        for (int a = 0; a < ks->t[i].n_digests; a++)
            for (int j = i; j < ks->n; j++)
                for (int b = j == i ? a + 1 : 0; b < ks->t[j].n_digests; b++)
                    if (!memcmp(ks->t[i].digests[a], ks->t[j].digests[b], 32)) {
                        fail(msg, msz, "tenants \"%s\" and \"%s\" list the same key digest", ks->t[i].name, ks->t[j].name);
                        goto out;
                    }
    /* slots: a known name keeps its own; a new one takes a free slot */
    srv_keys_slots local;
    if (!slots) memset(&local, 0, sizeof local), slots = &local;
    srv_keys_slots next = *slots;
    for (int i = 0; i < ks->n; i++) {
        int s = 0;
        for (int k = 1; k < SRV_TENANTS_MAX && !s; k++)
            if (!strcmp(next.names[k], ks->t[i].name)) s = k;
        for (int k = 1; k < SRV_TENANTS_MAX && !s; k++)
            if (!next.names[k][0]) s = k, snprintf(next.names[k], sizeof next.names[k], "%s", ks->t[i].name);
        if (!s) {
            /* every slot was once named: reuse one whose name is gone from this file */
            for (int k = 1; k < SRV_TENANTS_MAX && !s; k++) {
                bool used = false;
                for (int j = 0; j < ks->n; j++) used |= !strcmp(next.names[k], ks->t[j].name);
                if (!used) s = k, snprintf(next.names[k], sizeof next.names[k], "%s", ks->t[i].name);
            }
        }
        ks->t[i].cls.slot = s;
    }
    *slots = next;
    rc = 0;
out:
    json_decref(root);
    if (rc) {
        srv__keyset_release(ks);
        return NULL;
    }
    return ks;
}

const srv_tenant *srv__keyset_find(const srv_keyset *ks, const char *key, size_t klen) {
    uint8_t d[32];
    if (!ks || !klen || gnutls_hash_fast(GNUTLS_DIG_SHA256, key, klen, d)) return NULL;
    const srv_tenant *found = NULL;
    /* every digest compared in full: the time taken says nothing of how close a guess came */
    for (int i = 0; i < ks->n; i++)
        for (int k = 0; k < ks->t[i].n_digests; k++) {
            uint8_t diff = 0;
            for (int b = 0; b < 32; b++) diff |= (uint8_t)(d[b] ^ ks->t[i].digests[k][b]);
            if (!diff) found = &ks->t[i];
        }
    return found;
}

bool srv__keys_match(char *const *patterns, int n, const char *name, size_t len) {
    char nm[320];
    const char *at = memchr(name, '@', len);
    if (at) len = (size_t)(at - name);
    if (len >= sizeof nm) return false;
    memcpy(nm, name, len), nm[len] = '\0';
    for (int i = 0; i < n; i++)
        if (!fnmatch(patterns[i], nm, 0)) return true;
    return false;
}

/* ---- the live keys ---- */

typedef struct {
    pthread_mutex_t mu;
    double req, tok;                 /* tokens left in each bucket (tok may be negative: a debt) */
    double t_req, t_tok;             /* when each was last filled (CLOCK_MONOTONIC seconds) */
    bool started;
} bucket;

typedef struct {
    _Atomic uint64_t requests, tokens, refusals[SRV_REFUSE_N], waits, wait_ns;
} tenant_counts;

struct srv_keys {
    char *path;
    pthread_mutex_t mu;              /* held only to load cur and take a reference */
    srv_keyset *cur;
    srv_keys_slots slots;            /* the loop's (the poll) */
    struct stat id;                  /* the file as last read */
    bool have_id;
    bucket b[SRV_TENANTS_MAX];
    tenant_counts c[SRV_TENANTS_MAX];
    _Atomic uint64_t reloads, reload_errors, unauthenticated;
    _Atomic double last_success;
};

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads and parses the file. 0 with a new snapshot in *out, or -1 with msg. */
static int load(srv_keys *k, struct stat *st, srv_keyset **out, char *msg, size_t msz) {
    FILE *fp = fopen(k->path, "rb");
    if (!fp) return fail(msg, msz, "cannot open %s: %s", k->path, strerror(errno));
    if (fstat(fileno(fp), st)) {
        fclose(fp);
        return fail(msg, msz, "cannot stat %s: %s", k->path, strerror(errno));
    }
    if (st->st_size > KEYS_FILE_MAX) {
        fclose(fp);
        return fail(msg, msz, "%s is over %d bytes", k->path, KEYS_FILE_MAX);
    }
    char *buf = malloc((size_t)st->st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st->st_size, fp) : 0;
    fclose(fp);
    if (!buf) return fail(msg, msz, "out of memory");
    char why[400];
    *out = srv__keyset_parse(buf, n, &k->slots, why, sizeof why);
    free(buf);
    if (!*out) return fail(msg, msz, "%s: %s", k->path, why);
    return 0;
}

srv_keys *srv__keys_open(const char *path, char *msg, size_t msz) {
    srv_keys *k = calloc(1, sizeof *k);
    if (!k || !(k->path = strdup(path))) {
        free(k);
        fail(msg, msz, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&k->mu, NULL);
    for (int i = 0; i < SRV_TENANTS_MAX; i++) pthread_mutex_init(&k->b[i].mu, NULL);
    if (load(k, &k->id, &k->cur, msg, msz)) {
        srv__keys_free(k);
        return NULL;
    }
    k->have_id = true;
    atomic_store(&k->reloads, 1);
    atomic_store(&k->last_success, wall());
    return k;
}

void srv__keys_free(srv_keys *k) {
    if (!k) return;
    srv__keyset_release(k->cur);
    pthread_mutex_destroy(&k->mu);
    for (int i = 0; i < SRV_TENANTS_MAX; i++) pthread_mutex_destroy(&k->b[i].mu);
    free(k->path);
    free(k);
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

void srv__keys_poll(srv_keys *k) {
    struct stat st;
    if (stat(k->path, &st)) {
        if (k->have_id) {
            fprintf(stderr, "adapterd: keys: cannot stat %s (%s); the last good keys stay in use\n", k->path, strerror(errno));
            atomic_fetch_add(&k->reload_errors, 1);
            k->have_id = false;
        }
        return;
    }
    if (k->have_id && same_file(&st, &k->id)) return;
    char msg[512];
    srv_keyset *ks = NULL;
    struct stat got;
    k->id = st, k->have_id = true; /* a broken file is reported once, not every poll */
    if (load(k, &got, &ks, msg, sizeof msg)) {
        fprintf(stderr, "adapterd: keys: reload refused, the last good keys stay in use: %s\n", msg);
        atomic_fetch_add(&k->reload_errors, 1);
        return;
    }
    k->id = got;
    pthread_mutex_lock(&k->mu);
    srv_keyset *old = k->cur;
    k->cur = ks;
    pthread_mutex_unlock(&k->mu);
    srv__keyset_release(old);
    atomic_fetch_add(&k->reloads, 1);
    atomic_store(&k->last_success, wall());
    fprintf(stderr, "adapterd: keys: reloaded %s (%d tenants)\n", k->path, ks->n);
}

srv_keyset *srv__keys_acquire(srv_keys *k) {
    pthread_mutex_lock(&k->mu);
    srv_keyset *ks = k->cur;
    atomic_fetch_add(&ks->ref, 1);
    pthread_mutex_unlock(&k->mu);
    return ks;
}

/* Fills b from its rates up to now. Under b->mu. */
static void refill(bucket *b, const srv_tenant *t, double now) {
    if (!b->started) {
        b->req = t->burst, b->tok = t->tokens_burst, b->t_req = b->t_tok = now, b->started = true;
        return;
    }
    if (t->requests_per_s) b->req = fmin(t->burst, b->req + (now - b->t_req) * t->requests_per_s);
    if (t->tokens_per_s) b->tok = fmin(t->tokens_burst, b->tok + (now - b->t_tok) * t->tokens_per_s);
    b->t_req = b->t_tok = now;
}

static int whole_seconds(double s) {
    double c = ceil(s);
    return c < 1 ? 1 : c > 86400 ? 86400 : (int)c;
}

int srv__keys_take_request(srv_keys *k, const srv_tenant *t) {
    if (!t->requests_per_s) return 0;
    bucket *b = &k->b[t->cls.slot];
    pthread_mutex_lock(&b->mu);
    refill(b, t, mono());
    int wait = 0;
    if (b->req >= 1) b->req -= 1;
    else wait = whole_seconds((1 - b->req) / t->requests_per_s);
    pthread_mutex_unlock(&b->mu);
    return wait;
}

int srv__keys_tokens_owed(srv_keys *k, const srv_tenant *t) {
    if (!t->tokens_per_s) return 0;
    bucket *b = &k->b[t->cls.slot];
    pthread_mutex_lock(&b->mu);
    refill(b, t, mono());
    int wait = b->tok < 0 ? whole_seconds(-b->tok / t->tokens_per_s) : 0;
    pthread_mutex_unlock(&b->mu);
    return wait;
}

void srv__keys_charge_tokens(srv_keys *k, const srv_tenant *t, long n) {
    if (!t->tokens_per_s) return;
    bucket *b = &k->b[t->cls.slot];
    pthread_mutex_lock(&b->mu);
    refill(b, t, mono());
    b->tok -= (double)n;
    pthread_mutex_unlock(&b->mu);
}

srv_keys_stats srv__keys_stats(srv_keys *k) {
    srv_keyset *ks = srv__keys_acquire(k);
    srv_keys_stats s = {.reloads = atomic_load(&k->reloads), .reload_errors = atomic_load(&k->reload_errors),
                        .unauthenticated = atomic_load(&k->unauthenticated), .last_success = atomic_load(&k->last_success),
                        .loaded = ks->n};
    srv__keyset_release(ks);
    return s;
}

void srv__keys_count_unauthenticated(srv_keys *k) { atomic_fetch_add(&k->unauthenticated, 1); }
void srv__keys_count_request(srv_keys *k, int slot) { atomic_fetch_add(&k->c[slot].requests, 1); }
void srv__keys_count_tokens(srv_keys *k, int slot, long n) { atomic_fetch_add(&k->c[slot].tokens, (uint64_t)n); }
void srv__keys_count_refusal(srv_keys *k, int slot, srv_refusal why) { atomic_fetch_add(&k->c[slot].refusals[why], 1); }
void srv__keys_count_queue_wait(srv_keys *k, int slot, double seconds) {
    atomic_fetch_add(&k->c[slot].waits, 1);
    atomic_fetch_add(&k->c[slot].wait_ns, (uint64_t)(seconds > 0 ? seconds * 1e9 : 0));
}

static int append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (w < 0) return -1;
        if ((size_t)w < *cap - *len) {
            *len += (size_t)w;
            return 0;
        }
        size_t nc = *cap * 2 + (size_t)w + 1;
        char *nb = realloc(*buf, nc);
        if (!nb) return -1;
        *buf = nb, *cap = nc;
    }
}

char *srv__keys_render(srv_keys *k, char *buf, size_t *len) {
    size_t cap = *len + 4096;
    char *nb = realloc(buf, cap);
    if (!nb) {
        free(buf);
        return NULL;
    }
    buf = nb;
    srv_keys_stats st = srv__keys_stats(k);
    static const char *const why[SRV_REFUSE_N] = {"forbidden", "not_found_scope", "rate_limited_requests",
                                                  "rate_limited_tokens", "queue_full"};
    int e = append(&buf, len, &cap,
                   "# HELP adapterd_keys_loaded Tenants in the keys file in use.\n# TYPE adapterd_keys_loaded gauge\n"
                   "adapterd_keys_loaded %d\n"
                   "# HELP adapterd_keys_reloads_total Keys files loaded (the first included).\n"
                   "# TYPE adapterd_keys_reloads_total counter\nadapterd_keys_reloads_total %llu\n"
                   "# HELP adapterd_keys_reload_errors_total Keys file reloads refused (the last good keys stayed in use).\n"
                   "# TYPE adapterd_keys_reload_errors_total counter\nadapterd_keys_reload_errors_total %llu\n"
                   "# HELP adapterd_keys_last_success_seconds When the keys in use were loaded (Unix seconds).\n"
                   "# TYPE adapterd_keys_last_success_seconds gauge\nadapterd_keys_last_success_seconds %.3f\n"
                   "# HELP adapterd_unauthenticated_total Requests refused 401 (no key, or an unknown one).\n"
                   "# TYPE adapterd_unauthenticated_total counter\nadapterd_unauthenticated_total %llu\n",
                   st.loaded, (unsigned long long)st.reloads, (unsigned long long)st.reload_errors, st.last_success,
                   (unsigned long long)st.unauthenticated);
    srv_keyset *ks = srv__keys_acquire(k);
    /* labels bounded by the keys file: the tenants of the snapshot in use */
    e |= append(&buf, len, &cap, "# HELP adapterd_tenant_requests_total Inference requests admitted, by tenant.\n"
                                 "# TYPE adapterd_tenant_requests_total counter\n");
    for (int i = 0; i < ks->n && !e; i++)
        e |= append(&buf, len, &cap, "adapterd_tenant_requests_total{tenant=\"%s\"} %llu\n", ks->t[i].name,
                    (unsigned long long)atomic_load(&k->c[ks->t[i].cls.slot].requests));
    e |= append(&buf, len, &cap, "# HELP adapterd_tenant_tokens_total Tokens charged, by tenant.\n"
                                 "# TYPE adapterd_tenant_tokens_total counter\n");
    for (int i = 0; i < ks->n && !e; i++)
        e |= append(&buf, len, &cap, "adapterd_tenant_tokens_total{tenant=\"%s\"} %llu\n", ks->t[i].name,
                    (unsigned long long)atomic_load(&k->c[ks->t[i].cls.slot].tokens));
    e |= append(&buf, len, &cap, "# HELP adapterd_tenant_refusals_total Requests refused, by tenant and reason.\n"
                                 "# TYPE adapterd_tenant_refusals_total counter\n");
    for (int i = 0; i < ks->n && !e; i++)
        for (int r = 0; r < SRV_REFUSE_N && !e; r++)
            e |= append(&buf, len, &cap, "adapterd_tenant_refusals_total{tenant=\"%s\",reason=\"%s\"} %llu\n", ks->t[i].name,
                        why[r], (unsigned long long)atomic_load(&k->c[ks->t[i].cls.slot].refusals[r]));
    e |= append(&buf, len, &cap, "# HELP adapterd_tenant_queue_wait_seconds Time jobs waited in the queue, by tenant.\n"
                                 "# TYPE adapterd_tenant_queue_wait_seconds summary\n");
    for (int i = 0; i < ks->n && !e; i++) {
        tenant_counts *c = &k->c[ks->t[i].cls.slot];
        e |= append(&buf, len, &cap,
                    "adapterd_tenant_queue_wait_seconds_sum{tenant=\"%s\"} %.6f\n"
                    "adapterd_tenant_queue_wait_seconds_count{tenant=\"%s\"} %llu\n",
                    ks->t[i].name, (double)atomic_load(&c->wait_ns) * 1e-9, ks->t[i].name,
                    (unsigned long long)atomic_load(&c->waits));
    }
    srv__keyset_release(ks);
    if (e) {
        free(buf);
        return NULL;
    }
    return buf;
}

bool srv__token_equal(const char *got, const char *want) {
    size_t a = strlen(got), b = strlen(want);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(got[i < a ? i : 0] ^ want[i]);
    return diff == 0;
}
