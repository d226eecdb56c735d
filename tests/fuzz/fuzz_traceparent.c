/* fuzz_traceparent.c - the W3C Trace Context headers a caller sends (server/trace.c): traceparent, or with
 * the first byte odd, tracestate. Beyond memory safety the harness checks each accepted traceparent
 * against the spec read the slow way here (a second, independent reading: lengths, lowercase hex, the
 * version rules, non-zero ids), and that the traceparent adapterd would send back from it parses to
 * the same context; an accepted tracestate fits what is kept and holds only printable characters. A
 * broken contract aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_lhex(uint8_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* The spec's reading, character by character. */
static int spec_ok(const uint8_t *s, size_t n) {
    if (n < 55) return 0;
    for (size_t i = 0; i < 55; i++) {
        int dash = i == 2 || i == 35 || i == 52;
        if (dash ? s[i] != '-' : !is_lhex(s[i])) return 0;
    }
    if (s[0] == 'f' && s[1] == 'f') return 0;
    if (s[0] == '0' && s[1] == '0' && n != 55) return 0;
    if (n > 55 && s[55] != '-') return 0;
    int tz = 1, sz = 1;
    for (size_t i = 3; i < 35; i++) tz &= s[i] == '0';
    for (size_t i = 36; i < 52; i++) sz &= s[i] == '0';
    return !tz && !sz;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        if (srv__trace_state_valid(s, n)) {
            if (n >= SRV_TRACE_STATE_MAX) abort();
            for (size_t i = 0; i < n; i++)
                if (s[i] != '\t' && (s[i] < 0x20 || s[i] > 0x7e)) abort();
        }
        return 0;
    }
    srv_trace_parent p, q;
    int rc = srv__trace_parse_traceparent(s, n, &p);
    if ((rc == 0) != spec_ok(data + 1, n)) abort();
    if (rc) return 0;
    if (p.flags & ~1) abort();
    char again[SRV_TRACEPARENT_LEN + 1], tid[33], sid[17];
    srv__trace_hex(p.trace_id, 16, tid);
    srv__trace_hex(p.span_id, 8, sid);
    memcpy(again, "00-", 3), memcpy(again + 3, tid, 32), again[35] = '-', memcpy(again + 36, sid, 16);
    memcpy(again + 52, p.flags ? "-01" : "-00", 4);
    if (srv__trace_parse_traceparent(again, SRV_TRACEPARENT_LEN, &q) || memcmp(&p, &q, sizeof p)) abort();
    if (memcmp(again + 3, s + 3, 49)) abort(); /* the ids as they came */
    return 0;
}
