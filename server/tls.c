/* tls.c - see tls.h. The certificate and key are read into one srv_tls_creds (a pcert chain and a
 * private key), served through GnuTLS's certificate-retrieve callback on both ports, so a reload only
 * swaps which creds the next handshake gets: libmicrohttpd's connections and gRPC's sessions already
 * open keep theirs. A gRPC session holds a reference for its life; libmicrohttpd gives no hook at a
 * connection's end, so replaced creds are kept (retired) until shutdown, at most RETIRED_MAX of them
 * (cert-manager rotates every few weeks; only a file changed more often than that could outrun it).
 * The files are watched by identity (device, inode, size, mtime) once a second from the loop: a
 * Kubernetes Secret is updated by swapping a symlink, which inotify on the file would miss. */
#define _GNU_SOURCE
#include "tls.h"

#include <gnutls/abstract.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Certificates of one chain. */
#define CHAIN_MAX 8
/* Replaced credentials kept for libmicrohttpd's open connections. */
#define RETIRED_MAX 16
#define WATCH_MS 1000

struct srv_tls_creds {
    atomic_int refs;
    gnutls_pcert_st pcert[CHAIN_MAX];
    unsigned n_pcert;
    gnutls_privkey_t key;
    double not_after;
};

typedef struct {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} file_id;

struct srv_tls {
    char cert[1024], key[1024];
    bool mtls;
    gnutls_certificate_credentials_t cred; /* gRPC's sessions: the callback below, and the client CA */
    char *ca_pem;                          /* libmicrohttpd's trust (MHD_OPTION_HTTPS_MEM_TRUST) */
    pthread_mutex_t mu;                    /* cur and retired: libmicrohttpd's threads read cur */
    srv_tls_creds *cur;
    srv_tls_creds *retired[RETIRED_MAX];
    int n_retired;
    file_id id_cert, id_key;
    uv_timer_t timer;
    bool timer_on;
    atomic_uint_fast64_t reloads, errors;
    atomic_uint_fast64_t handshakes[2]; /* by port: HTTP, gRPC */
};

static void creds_free(srv_tls_creds *c) {
    for (unsigned i = 0; i < c->n_pcert; i++) gnutls_pcert_deinit(&c->pcert[i]);
    if (c->key) gnutls_privkey_deinit(c->key);
    free(c);
}

void srv__tls_release(srv_tls_creds *c) {
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) creds_free(c);
}

static int file_identity(const char *path, file_id *id) {
    struct stat st;
    if (stat(path, &st)) return -1;
    *id = (file_id){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
    return 0;
}

static bool same_id(const file_id *a, const file_id *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* The public key of the certificate and of the private key, exported, are the same bytes. */
static bool key_matches(gnutls_pcert_st *pc, gnutls_privkey_t key) {
    gnutls_pubkey_t pub = NULL;
    gnutls_datum_t a = {0}, b = {0};
    bool ok = !gnutls_pubkey_init(&pub) && !gnutls_pubkey_import_privkey(pub, key, 0, 0) &&
              !gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &a) &&
              !gnutls_pubkey_export2(pc->pubkey, GNUTLS_X509_FMT_DER, &b) && a.size == b.size &&
              !memcmp(a.data, b.data, a.size);
    gnutls_free(a.data), gnutls_free(b.data);
    if (pub) gnutls_pubkey_deinit(pub);
    return ok;
}

/* Loads the pair. Returns NULL with err set (naming the file). */
static srv_tls_creds *creds_load(const char *cert, const char *key, eng_err *err) {
    srv_tls_creds *c = calloc(1, sizeof *c);
    if (!c) return eng_err_set(err, ENG_NO_MEMORY, "out of memory"), NULL;
    atomic_init(&c->refs, 1);
    gnutls_datum_t cd = {0}, kd = {0};
    int rc;
    if ((rc = gnutls_load_file(cert, &cd))) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-cert: cannot read %s (%s)", cert, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_load_file(key, &kd))) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-key: cannot read %s (%s)", key, gnutls_strerror(rc));
        goto fail;
    }
    c->n_pcert = CHAIN_MAX;
    if ((rc = gnutls_pcert_list_import_x509_raw(c->pcert, &c->n_pcert, &cd, GNUTLS_X509_FMT_PEM, 0)) || !c->n_pcert) {
        c->n_pcert = 0;
        eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-cert: %s holds no PEM certificate (%s)", cert, gnutls_strerror(rc));
        goto fail;
    }
    if ((rc = gnutls_privkey_init(&c->key)) || (rc = gnutls_privkey_import_x509_raw(c->key, &kd, GNUTLS_X509_FMT_PEM, NULL, 0))) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-key: %s holds no PEM private key (%s)", key, gnutls_strerror(rc));
        goto fail;
    }
    if (!key_matches(&c->pcert[0], c->key)) {
        eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-key: %s is not the key of the certificate in %s", key, cert);
        goto fail;
    }
    gnutls_x509_crt_t x;
    if (!gnutls_x509_crt_init(&x)) {
        if (!gnutls_x509_crt_import(x, &c->pcert[0].cert, GNUTLS_X509_FMT_DER))
            c->not_after = (double)gnutls_x509_crt_get_expiration_time(x);
        gnutls_x509_crt_deinit(x);
    }
    gnutls_free(cd.data), gnutls_free(kd.data);
    return c;
fail:
    gnutls_free(cd.data), gnutls_free(kd.data);
    creds_free(c);
    return NULL;
}

/* Both ports' handshakes: the chain of the creds the session was given (gRPC), else the current ones
 * (libmicrohttpd, whose retired creds live until shutdown). With --tls-client-ca the client must
 * present a certificate the CA signed: asked for and verified here, since libmicrohttpd only asks. */
static srv_tls *g_tls; /* libmicrohttpd's callback has no user pointer; one server per process */

static int retrieve_with(srv_tls_creds *c, gnutls_pcert_st **pcert, unsigned *n, gnutls_privkey_t *key) {
    srv_tls *t = g_tls;
    pthread_mutex_lock(&t->mu);
    if (!c) c = t->cur;
    *pcert = c->pcert, *n = c->n_pcert, *key = c->key;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

/* libmicrohttpd's sessions: their user pointer is libmicrohttpd's, so always the current creds. */
static int retrieve_mhd(gnutls_session_t s, const gnutls_datum_t *req_ca, int nreq, const gnutls_pk_algorithm_t *algos,
                        int nalgos, gnutls_pcert_st **pcert, unsigned *n, gnutls_privkey_t *key) {
    (void)req_ca, (void)nreq, (void)algos, (void)nalgos;
    atomic_fetch_add(&g_tls->handshakes[0], 1);
    if (g_tls->mtls) { /* libmicrohttpd only requests a certificate: required and verified from here */
        gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
        gnutls_session_set_verify_cert(s, NULL, 0);
    }
    return retrieve_with(NULL, pcert, n, key);
}

/* gRPC's sessions: the creds srv__tls_session referenced for the session's life. */
static int retrieve_grpc(gnutls_session_t s, const gnutls_datum_t *req_ca, int nreq, const gnutls_pk_algorithm_t *algos,
                         int nalgos, gnutls_pcert_st **pcert, unsigned *n, gnutls_privkey_t *key) {
    (void)req_ca, (void)nreq, (void)algos, (void)nalgos;
    atomic_fetch_add(&g_tls->handshakes[1], 1);
    return retrieve_with(gnutls_session_get_ptr(s), pcert, n, key);
}

static void on_watch(uv_timer_t *h) {
    srv_tls *t = h->data;
    file_id ic, ik;
    if (file_identity(t->cert, &ic) || file_identity(t->key, &ik)) {
        memset(&ic, 0, sizeof ic); /* gone: tried (and counted) once it is back */
        if (!same_id(&ic, &t->id_cert)) {
            t->id_cert = ic;
            atomic_fetch_add(&t->errors, 1);
            fprintf(stderr, "adapterd: TLS files %s / %s unreadable; the loaded certificate stays\n", t->cert, t->key);
        }
        return;
    }
    if (same_id(&ic, &t->id_cert) && same_id(&ik, &t->id_key)) return;
    t->id_cert = ic, t->id_key = ik;
    eng_err err = {0};
    srv_tls_creds *c = creds_load(t->cert, t->key, &err);
    if (!c) {
        atomic_fetch_add(&t->errors, 1);
        fprintf(stderr, "adapterd: TLS reload refused, the loaded certificate stays: %s\n", err.msg);
        return;
    }
    pthread_mutex_lock(&t->mu);
    srv_tls_creds *old = t->cur, *drop = NULL;
    t->cur = c;
    if (t->n_retired == RETIRED_MAX) {
        drop = t->retired[0];
        memmove(t->retired, t->retired + 1, (RETIRED_MAX - 1) * sizeof *t->retired);
        t->n_retired--;
    }
    t->retired[t->n_retired++] = old;
    pthread_mutex_unlock(&t->mu);
    srv__tls_release(drop);
    atomic_fetch_add(&t->reloads, 1);
    fprintf(stderr, "adapterd: TLS certificate reloaded from %s\n", t->cert);
}

/* The options as given: both files or neither, and a client CA only with them. */
static int check_options(const srv_config *cfg, eng_err *err) {
    if (!cfg->tls_cert[0] != !cfg->tls_key[0])
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-cert and --tls-key: give both (or neither)");
    if (cfg->tls_client_ca[0] && !cfg->tls_cert[0])
        return eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-client-ca needs --tls-cert and --tls-key");
    return 0;
}

/* The client CA file's PEM text, checked to hold at least one certificate; NULL with err set. */
static char *load_ca(const char *path, gnutls_certificate_credentials_t cred, eng_err *err) {
    gnutls_datum_t d = {0};
    char *pem = NULL;
    if (gnutls_load_file(path, &d) || gnutls_certificate_set_x509_trust_mem(cred, &d, GNUTLS_X509_FMT_PEM) <= 0 ||
        !(pem = strndup((const char *)d.data, d.size)))
        eng_err_set(err, ENG_INVALID_ARGUMENT, "--tls-client-ca: %s is unreadable or holds no PEM certificate", path);
    gnutls_free(d.data);
    return pem;
}

int srv_tls_check(const srv_config *cfg, eng_err *err) {
    int rc = check_options(cfg, err);
    if (rc || !cfg->tls_cert[0]) return rc;
    srv_tls_creds *c = creds_load(cfg->tls_cert, cfg->tls_key, err);
    if (!c) return err->code;
    srv__tls_release(c);
    if (!cfg->tls_client_ca[0]) return 0;
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred)) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    char *pem = load_ca(cfg->tls_client_ca, cred, err);
    gnutls_certificate_free_credentials(cred);
    free(pem);
    return pem ? 0 : err->code;
}

int srv__tls_start(const srv_config *cfg, uv_loop_t *loop, srv_tls **out, eng_err *err) {
    *out = NULL;
    int rc = check_options(cfg, err);
    if (rc) return rc;
    srv_tls *t = calloc(1, sizeof *t);
    if (!t) return eng_err_set(err, ENG_NO_MEMORY, "out of memory");
    pthread_mutex_init(&t->mu, NULL);
    snprintf(t->cert, sizeof t->cert, "%s", cfg->tls_cert);
    snprintf(t->key, sizeof t->key, "%s", cfg->tls_key);
    file_identity(t->cert, &t->id_cert), file_identity(t->key, &t->id_key);
    if (!(t->cur = creds_load(t->cert, t->key, err))) {
        rc = err->code;
        goto fail;
    }
    if ((rc = gnutls_certificate_allocate_credentials(&t->cred))) {
        t->cred = NULL;
        rc = eng_err_set(err, ENG_NO_MEMORY, "out of memory");
        goto fail;
    }
    gnutls_certificate_set_retrieve_function2(t->cred, retrieve_grpc);
    if (cfg->tls_client_ca[0]) {
        if (!(t->ca_pem = load_ca(cfg->tls_client_ca, t->cred, err))) {
            rc = err->code;
            goto fail;
        }
        t->mtls = true;
    }
    g_tls = t;
    uv_timer_init(loop, &t->timer);
    t->timer.data = t;
    uv_timer_start(&t->timer, on_watch, WATCH_MS, WATCH_MS);
    uv_unref((uv_handle_t *)&t->timer);
    t->timer_on = true;
    *out = t;
    return 0;
fail:
    srv__tls_free(t);
    return rc;
}

void srv__tls_stop(srv_tls *t) {
    if (t && t->timer_on) uv_timer_stop(&t->timer);
}

void srv__tls_free(srv_tls *t) {
    if (!t) return;
    if (g_tls == t) g_tls = NULL;
    srv__tls_release(t->cur);
    for (int i = 0; i < t->n_retired; i++) srv__tls_release(t->retired[i]);
    if (t->cred) gnutls_certificate_free_credentials(t->cred);
    free(t->ca_pem);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void srv__tls_mhd_options(srv_tls *t, struct MHD_OptionItem *items) {
    int k = 0;
    items[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)retrieve_mhd};
    if (t->ca_pem) items[k++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, t->ca_pem};
    items[k] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

int srv__tls_session(srv_tls *t, gnutls_session_t *session, srv_tls_creds **creds) {
    gnutls_session_t s;
    if (gnutls_init(&s, GNUTLS_SERVER | GNUTLS_NONBLOCK)) return -1;
    static const gnutls_datum_t h2 = {(unsigned char *)"h2", 2};
    if (gnutls_set_default_priority(s) || gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, t->cred) ||
        gnutls_alpn_set_protocols(s, &h2, 1, GNUTLS_ALPN_MANDATORY)) {
        gnutls_deinit(s);
        return -1;
    }
    pthread_mutex_lock(&t->mu);
    srv_tls_creds *c = t->cur;
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_unlock(&t->mu);
    gnutls_session_set_ptr(s, c);
    if (t->mtls) { /* asked for in the ServerHello's flight, so said before the handshake starts */
        gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
        gnutls_session_set_verify_cert(s, NULL, 0);
    }
    *session = s, *creds = c;
    return 0;
}

void srv__tls_stats(srv_tls *t, uint64_t *reloads, uint64_t *errors, double *not_after, uint64_t handshakes[2]) {
    *reloads = atomic_load(&t->reloads), *errors = atomic_load(&t->errors);
    handshakes[0] = atomic_load(&t->handshakes[0]), handshakes[1] = atomic_load(&t->handshakes[1]);
    pthread_mutex_lock(&t->mu);
    *not_after = t->cur->not_after;
    pthread_mutex_unlock(&t->mu);
}
