/* test_keys.c - server/keys.c: the keys file's parser (every refusal with its message), key lookup by
 * digest, the scope globs, slots stable across reloads, the token buckets and the reload that keeps
 * the last good keys. */
#include <criterion/criterion.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "test_text.h"

/* "sha256:<hex>" of key. */
static void digest_of(const char *key, char out[72]) {
    unsigned char d[32];
    cr_assert_eq(gnutls_hash_fast(GNUTLS_DIG_SHA256, key, strlen(key), d), 0);
    strcpy(out, "sha256:");
    for (int i = 0; i < 32; i++) sprintf(out + 7 + 2 * i, "%02x", d[i]);
}

static srv_keyset *parse(const char *doc, char *msg) {
    return srv__keyset_parse(doc, strlen(doc), NULL, msg, 400);
}

/* The document must be refused with a message containing want. */
static void refused(const char *doc, const char *want) {
    char msg[400] = "";
    srv_keyset *ks = parse(doc, msg);
    cr_expect_null(ks, "accepted: %s", doc);
    srv__keyset_release(ks);
    cr_expect(strstr(msg, want) != NULL, "message \"%s\" lacks \"%s\" (for %s)", msg, want, doc);
}

#define D1 "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
#define D2 "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

Test(keys, every_refusal_has_its_message) {
    refused("{", "not JSON");
    refused("[]", "one field, \"tenants\"");
    refused("{\"tenants\": [], \"x\": 1}", "one field");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"colour\": 1}]}", "unknown field \"colour\"");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"my-plain-key\"]}]}", "never in the clear");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"sha256:abcd\"]}]}", "64 hex digits");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"sha256:zzb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"]}]}",
            "not a hex digest");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": []}]}", "non-empty list");
    refused("{\"tenants\": [{\"keys\": [\"" D1 "\"]}]}", "\"name\" must be");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"]}, {\"name\": \"a\", \"keys\": [\"" D2 "\"]}]}",
            "named twice");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"]}, {\"name\": \"b\", \"keys\": [\"" D1 "\"]}]}",
            "same key digest");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\", \"" D1 "\"]}]}", "same key digest");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"requests_per_s\": -1}]}", "\"requests_per_s\" must be");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"tokens_per_s\": \"many\"}]}", "\"tokens_per_s\" must be");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"burst\": 5}]}", "\"burst\" needs");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"share\": 0}]}", "\"share\" must be");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"priority\": \"urgent\"}]}", "\"interactive\" or \"batch\"");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"predict\": \"x\"}]}", "\"predict\" must be a list");
    refused("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"admin\": [3]}]}", "\"admin\"[0]");
    refused("{\"tenants\": [{\"name\": \"operator\", \"keys\": [\"" D1 "\"]}]}", "other than \"operator\"");
    /* one tenant over the bound */
    size_t cap = (size_t)SRV_TENANTS_MAX * 120 + 64;
    char *doc = malloc(cap), *p = doc;
    p += sprintf(p, "{\"tenants\": [");
    for (int i = 0; i < SRV_TENANTS_MAX; i++)
        p += sprintf(p, "%s{\"name\": \"t%d\", \"keys\": [\"sha256:%064x\"]}", i ? "," : "", i, i);
    sprintf(p, "]}");
    refused(doc, "at most 255");
    free(doc);
}

Test(keys, a_good_file_and_its_lookups) {
    char d[72], msg[400] = "", doc[1024];
    digest_of("s3cret", d);
    snprintf(doc, sizeof doc,
             "{\"tenants\": [{\"name\": \"search\", \"keys\": [\"%s\"], \"predict\": [\"sentiment\", \"search-*\"], "
             "\"admin\": [\"search-*\"], \"requests_per_s\": 50, \"burst\": 100, \"tokens_per_s\": 40000, "
             "\"priority\": \"batch\", \"share\": 2}]}",
             d);
    srv_keyset *ks = parse(doc, msg);
    cr_assert_not_null(ks, "%s", msg);
    const srv_tenant *t = srv__keyset_find(ks, "s3cret", 6);
    cr_assert_not_null(t);
    cr_expect_str_eq(t->name, "search");
    cr_expect_eq(t->cls.slot, 1);
    cr_expect_eq(t->cls.share, 2.0);
    cr_expect_eq(t->cls.priority, SRV_PRIO_BATCH);
    cr_expect_eq(t->tokens_burst, 40000.0, "a burst of one second's tokens");
    cr_expect_null(srv__keyset_find(ks, "s3cre", 5), "a digest that does not match");
    cr_expect_null(srv__keyset_find(ks, "s3cret ", 7));
    cr_expect_null(srv__keyset_find(ks, d, strlen(d)), "the digest itself is not the key");
    cr_expect(srv__keys_match(t->predict, t->n_predict, "search-a", 8));
    cr_expect(srv__keys_match(t->predict, t->n_predict, "search-a@2", 10), "a version of a task in scope");
    cr_expect(srv__keys_match(t->predict, t->n_predict, "sentiment", 9));
    cr_expect_not(srv__keys_match(t->predict, t->n_predict, "searchx", 7), "search-* must not match searchx");
    cr_expect_not(srv__keys_match(t->predict, t->n_predict, "sentiment2", 10));
    cr_expect_not(srv__keys_match(t->admin, t->n_admin, "sentiment", 9));
    srv__keyset_release(ks);
    /* defaults: interactive, share 1, unlimited */
    ks = parse("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"]}]}", msg);
    cr_assert_not_null(ks, "%s", msg);
    cr_expect_eq(ks->t[0].cls.priority, SRV_PRIO_INTERACTIVE);
    cr_expect_eq(ks->t[0].cls.share, 1.0);
    cr_expect_eq(ks->t[0].requests_per_s, 0.0);
    srv__keyset_release(ks);
}

Test(keys, slots_stay_with_their_names_across_reloads) {
    srv_keys_slots slots;
    memset(&slots, 0, sizeof slots);
    char msg[400];
    const char *doc1 = "{\"tenants\": [{\"name\": \"x\", \"keys\": [\"" D1 "\"]}, {\"name\": \"y\", \"keys\": [\"" D2 "\"]}]}";
    srv_keyset *a = srv__keyset_parse(doc1, strlen(doc1), &slots, msg, sizeof msg);
    cr_assert_not_null(a, "%s", msg);
    cr_expect_eq(a->t[0].cls.slot, 1);
    cr_expect_eq(a->t[1].cls.slot, 2);
    /* reordered, x removed, z added: y keeps 2, z takes a fresh slot, not x's 1 while it is free elsewhere */
    const char *doc2 = "{\"tenants\": [{\"name\": \"z\", \"keys\": [\"" D1 "\"]}, {\"name\": \"y\", \"keys\": [\"" D2 "\"]}]}";
    srv_keyset *b = srv__keyset_parse(doc2, strlen(doc2), &slots, msg, sizeof msg);
    cr_assert_not_null(b, "%s", msg);
    cr_expect_eq(b->t[1].cls.slot, 2, "y keeps its slot");
    cr_expect_eq(b->t[0].cls.slot, 3, "z takes a slot never named");
    const char *doc3 = "{\"tenants\": [{\"name\": \"x\", \"keys\": [\"" D1 "\"]}]}";
    srv_keyset *c = srv__keyset_parse(doc3, strlen(doc3), &slots, msg, sizeof msg);
    cr_assert_not_null(c, "%s", msg);
    cr_expect_eq(c->t[0].cls.slot, 1, "x comes back to its slot");
    srv__keyset_release(a), srv__keyset_release(b), srv__keyset_release(c);
}


Test(keys, a_broken_reload_keeps_the_last_good_keys_and_buckets_survive) {
    char path[] = "/tmp/adapterd-keys-XXXXXX", d[72], doc[512], msg[400];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    digest_of("k1", d);
    snprintf(doc, sizeof doc, "{\"tenants\": [{\"name\": \"a\", \"keys\": [\"%s\"], \"requests_per_s\": 0.5, \"burst\": 2}]}", d);
    write_file_atomic(path, doc);
    srv_keys *k = srv__keys_open(path, msg, sizeof msg);
    cr_assert_not_null(k, "%s", msg);
    srv_keyset *ks = srv__keys_acquire(k);
    const srv_tenant *t = srv__keyset_find(ks, "k1", 2);
    cr_assert_not_null(t);
    cr_expect_eq(srv__keys_take_request(k, t), 0);
    cr_expect_eq(srv__keys_take_request(k, t), 0);
    int wait = srv__keys_take_request(k, t);
    cr_expect(wait >= 1 && wait <= 2, "the third request waits about 2 s, got %d", wait);
    srv__keyset_release(ks);
    /* broken: kept, counted */
    write_file_atomic(path, "{\"tenants\": [{\"name\": \"a\", \"keys\": [\"plain\"]}]}");
    srv__keys_poll(k);
    srv_keys_stats st = srv__keys_stats(k);
    cr_expect_eq(st.reload_errors, 1);
    cr_expect_eq(st.loaded, 1);
    ks = srv__keys_acquire(k);
    cr_expect_not_null(srv__keyset_find(ks, "k1", 2), "the last good keys stay in use");
    srv__keyset_release(ks);
    /* a good one with the same name: the bucket is still empty (state kept by name) */
    snprintf(doc, sizeof doc, "{\"tenants\": [{\"name\": \"a\", \"keys\": [\"%s\"], \"requests_per_s\": 0.5, \"burst\": 2, "
                              "\"share\": 3}]}", d);
    write_file_atomic(path, doc);
    srv__keys_poll(k);
    ks = srv__keys_acquire(k);
    t = srv__keyset_find(ks, "k1", 2);
    cr_assert_not_null(t);
    cr_expect_eq(t->cls.share, 3.0, "reloaded");
    cr_expect_gt(srv__keys_take_request(k, t), 0, "the bucket kept its state across the reload");
    srv__keyset_release(ks);
    /* revoked */
    write_file_atomic(path, "{\"tenants\": []}");
    srv__keys_poll(k);
    ks = srv__keys_acquire(k);
    cr_expect_null(srv__keyset_find(ks, "k1", 2), "revoked");
    srv__keyset_release(ks);
    size_t len = 0;
    char *m = srv__keys_render(k, NULL, &len);
    cr_assert_not_null(m);
    cr_expect(strstr(m, "adapterd_keys_reload_errors_total 1\n") != NULL, "%s", m);
    free(m);
    srv__keys_free(k);
    unlink(path);
}

Test(keys, the_token_bucket_goes_into_debt) {
    char msg[400];
    srv_keyset *ks = parse("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" D1 "\"], \"tokens_per_s\": 100}]}", msg);
    cr_assert_not_null(ks, "%s", msg);
    char path[] = "/tmp/adapterd-keys-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    write_file_atomic(path, "{\"tenants\": []}");
    srv_keys *k = srv__keys_open(path, msg, sizeof msg);
    cr_assert_not_null(k, "%s", msg);
    const srv_tenant *t = &ks->t[0];
    cr_expect_eq(srv__keys_tokens_owed(k, t), 0);
    srv__keys_charge_tokens(k, t, 350); /* a burst of 100: 250 in debt */
    int w = srv__keys_tokens_owed(k, t);
    cr_expect(w >= 2 && w <= 3, "owes about 2.5 s, got %d", w);
    srv__keys_free(k);
    srv__keyset_release(ks);
    unlink(path);
}

/* The operator's token: equal only when every byte and the length are (a prefix or an extension is not). */
Test(keys, the_operator_token_compares_whole) {
    cr_expect(srv__token_equal("s3cret-token", "s3cret-token"));
    cr_expect_not(srv__token_equal("s3cret-toke", "s3cret-token"), "a prefix");
    cr_expect_not(srv__token_equal("s3cret-token!", "s3cret-token"), "an extension");
    cr_expect_not(srv__token_equal("s3cret-tokem", "s3cret-token"), "the last byte");
    cr_expect_not(srv__token_equal("", "s3cret-token"), "empty");
}
