/* fuzz_keys.c - the keys file's parser (server/keys.c, --keys). The input is a keys document. Beyond
 * memory safety the harness checks the parser's contract: a document is either refused with a
 * message or yields at most SRV_TENANTS_MAX-1 tenants with distinct names, each with at least one
 * digest and a slot in 1..SRV_TENANTS_MAX-1 of its own, a positive share, rates that are 0 or
 * positive with a burst of at least 1 when limited; parsing the same document again keeps every
 * slot; looking up the input as a key and matching its names against the globs never fails. A
 * broken contract aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static srv_keys_slots slots; /* kept across inputs, as the server keeps them across reloads */
    char msg[400];
    msg[0] = '\0';
    srv_keyset *ks = srv__keyset_parse((const char *)data, size, &slots, msg, sizeof msg);
    if (!ks) {
        if (!msg[0]) abort(); /* a refusal always says why */
        return 0;
    }
    if (ks->n < 0 || ks->n > SRV_TENANTS_MAX - 1) abort();
    bool used[SRV_TENANTS_MAX] = {0};
    for (int i = 0; i < ks->n; i++) {
        const srv_tenant *t = &ks->t[i];
        if (t->n_digests < 1 || !t->name[0]) abort();
        if (t->cls.slot < 1 || t->cls.slot >= SRV_TENANTS_MAX || used[t->cls.slot]) abort();
        used[t->cls.slot] = true;
        if (!(t->cls.share > 0)) abort();
        if (t->requests_per_s < 0 || t->tokens_per_s < 0) abort();
        if (t->requests_per_s > 0 && !(t->burst >= 1)) abort();
        if (t->tokens_per_s > 0 && !(t->tokens_burst > 0)) abort();
        for (int j = 0; j < i; j++)
            if (!strcmp(ks->t[j].name, t->name)) abort();
        for (int k = 0; k < t->n_predict; k++) (void)srv__keys_match(t->admin, t->n_admin, t->predict[k], strlen(t->predict[k]));
    }
    srv_keyset *again = srv__keyset_parse((const char *)data, size, &slots, msg, sizeof msg);
    if (!again || again->n != ks->n) abort();
    for (int i = 0; i < ks->n; i++)
        if (again->t[i].cls.slot != ks->t[i].cls.slot) abort(); /* slots stay with their names */
    (void)srv__keyset_find(ks, (const char *)data, size);
    srv__keyset_release(again);
    srv__keyset_release(ks);
    return 0;
}
