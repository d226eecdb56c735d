/* keys.h - tenants and their keys (--keys FILE): who a bearer key belongs to, which tasks it may
 * predict with and administer, its quotas and its class (see keys.c). */
#ifndef ADAPTERD_SERVER_KEYS_H
#define ADAPTERD_SERVER_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tenant.h"

/* Bytes of a tenant's name, the NUL included. */
#define SRV_TENANT_NAME_MAX 64

/* One tenant of a snapshot. Immutable once parsed. */
typedef struct srv_tenant {
    char name[SRV_TENANT_NAME_MAX];
    srv_tenant_class cls;            /* slot (stable by name across reloads), share, priority */
    uint8_t (*digests)[32];          /* (n_digests) SHA-256 of its keys */
    int n_digests;
    char **predict, **admin;         /* (n_predict), (n_admin) task names or fnmatch globs */
    int n_predict, n_admin;
    double requests_per_s, burst;    /* 0: unlimited */
    double tokens_per_s, tokens_burst;
} srv_tenant;

/* An immutable, refcounted snapshot of the keys file. */
typedef struct srv_keyset {
    int n;
    srv_tenant *t;                   /* (n) */
    _Atomic int ref;
} srv_keyset;

/* The slot a name had: kept by the loader across reloads so a tenant keeps its queue, buckets and
 * metrics. names[0] is unused (slot 0: the operator and the caller with no tenant). */
typedef struct srv_keys_slots {
    char names[SRV_TENANTS_MAX][SRV_TENANT_NAME_MAX];
} srv_keys_slots;

/* Parses a keys document (len bytes). slots (may be NULL: slots in order of appearance) gives the
 * names their slots and learns the new ones. Returns a snapshot with one reference, or NULL with the
 * reason in msg (msz bytes). */
srv_keyset *srv__keyset_parse(const char *text, size_t len, srv_keys_slots *slots, char *msg, size_t msz);
void srv__keyset_release(srv_keyset *ks); /* NULL does nothing */

/* The tenant whose key is key (klen bytes, as presented after "Bearer "), or NULL. */
const srv_tenant *srv__keyset_find(const srv_keyset *ks, const char *key, size_t klen);
/* Whether got equals want (the operator's --admin-token), in time that depends on want's length only. */
bool srv__token_equal(const char *got, const char *want);
/* Whether name (len bytes, "name" or "name@version": the name is what counts) is in patterns. */
bool srv__keys_match(char *const *patterns, int n, const char *name, size_t len);

/* ---- the live keys: the file, its reloads, the buckets ---- */

typedef struct srv_keys srv_keys;

/* Loads path. Returns the keys, or NULL with the reason in msg. */
srv_keys *srv__keys_open(const char *path, char *msg, size_t msz);
void srv__keys_free(srv_keys *k);
/* Loop thread (a timer): reloads the file when its identity (inode, size, mtime) changed. A broken
 * file keeps the snapshot in use; the reason is logged and counted. */
void srv__keys_poll(srv_keys *k);
/* The current snapshot with a new reference (srv__keyset_release). Any thread. */
srv_keyset *srv__keys_acquire(srv_keys *k);
/* The request bucket of t: 0 when a request may go, or the whole seconds (>= 1) to wait. */
int srv__keys_take_request(srv_keys *k, const srv_tenant *t);
/* The token bucket of t: 0 when not in debt, or the seconds to wait. */
int srv__keys_tokens_owed(srv_keys *k, const srv_tenant *t);
/* Charges n tokens to t's bucket (it may go negative). */
void srv__keys_charge_tokens(srv_keys *k, const srv_tenant *t, long n);

/* Counters of the keys file and the tenants, for /metrics. */
typedef struct srv_keys_stats {
    uint64_t reloads, reload_errors, unauthenticated;
    double last_success;              /* Unix seconds */
    int loaded;                       /* tenants in the snapshot in use */
} srv_keys_stats;
srv_keys_stats srv__keys_stats(srv_keys *k);
void srv__keys_count_unauthenticated(srv_keys *k);

/* Per-tenant counters, by slot. */
typedef enum {
    SRV_REFUSE_FORBIDDEN, SRV_REFUSE_NOT_FOUND_SCOPE, SRV_REFUSE_RATE_REQUESTS, SRV_REFUSE_RATE_TOKENS,
    SRV_REFUSE_QUEUE_FULL, SRV_REFUSE_N
} srv_refusal;
void srv__keys_count_request(srv_keys *k, int slot);
void srv__keys_count_tokens(srv_keys *k, int slot, long n);
void srv__keys_count_refusal(srv_keys *k, int slot, srv_refusal why);
void srv__keys_count_queue_wait(srv_keys *k, int slot, double seconds);
/* Appends the keys' metrics (Prometheus text) to buf with a fresh malloc; returns it (NULL: no memory). */
char *srv__keys_render(srv_keys *k, char *buf, size_t *len);

#endif
