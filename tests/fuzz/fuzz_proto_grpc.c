/* fuzz_proto_grpc.c - KServe v2's gRPC messages (proto/grpc.c). The first byte picks the direction:
 * 0 a ModelInferRequest (protobuf) through proto_grpc_infer_decode, then an answer to it through
 * proto_grpc_infer_encode; 1 a model request (name, version), 2 a RepositoryIndexRequest; 3 and 4 a
 * ModelInferResponse (contents, raw) of an answer the input describes; 5 model metadata, 6
 * statistics, 7 server metadata (JSON). Every result is read back so a bad length shows under ASan,
 * and the codec's contracts abort when broken:
 *  - a decode fails only with a client's status (MALFORMED, INVALID_ARGUMENT, LIMIT, NOT_FOUND),
 *    never NO_MEMORY or INTERNAL; a decoded request is within its limits, every text NUL-terminated,
 *    UTF-8 and without a NUL, its task the target's spec;
 *  - the gRPC answer is encoded exactly when REST's JSON answer is (proto_v2_infer_encode), and its
 *    prefix says its length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

#include "proto/grpc.h"
#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void keep_bytes(const uint8_t *p, size_t n) {
    unsigned h = 0;
    for (size_t i = 0; i < n; i++) h += p[i];
    fuzz_keep(h);
}

/* A text of a decoded request: NUL-terminated, no NUL inside, UTF-8 (checked byte by byte here,
 * not with the code under test). */
static int text_ok(const char *s, size_t n) {
    if (!s || s[n] != '\0' || memchr(s, 0, n)) return 0;
    const unsigned char *p = (const unsigned char *)s, *e = p + n;
    while (p < e) {
        int k = *p < 0x80 ? 1 : *p >= 0xc2 && *p <= 0xdf ? 2 : *p >= 0xe0 && *p <= 0xef ? 3 : *p >= 0xf0 && *p <= 0xf4 ? 4 : 0;
        if (!k || e - p < k) return 0;
        for (int i = 1; i < k; i++)
            if ((p[i] & 0xc0) != 0x80) return 0;
        if ((k == 3 && *p == 0xe0 && p[1] < 0xa0) || (k == 3 && *p == 0xed && p[1] > 0x9f) || (k == 4 && *p == 0xf0 && p[1] < 0x90) ||
            (k == 4 && *p == 0xf4 && p[1] > 0x8f))
            return 0;
        p += k;
    }
    return 1;
}

/* Encodes r both ways: the gRPC answer exists exactly when REST's does, and its prefix says its length. */
static void encode_both(const proto_predict_resp *r, bool raw) {
    uint8_t *out = NULL;
    size_t len = 0, jl = 0;
    int rc = proto_grpc_infer_encode(r, raw, &out, &len);
    char *j = proto_v2_infer_encode(r, &jl);
    if ((rc == 0) != (j != NULL)) abort();
    if (rc == 0) {
        bool z;
        uint32_t n;
        if (len < PROTO_GRPC_PREFIX || proto_grpc_prefix_read(out, &z, &n) || z || n != len - PROTO_GRPC_PREFIX) abort();
        keep_bytes(out, len);
    } else if (rc != ENG_INTERNAL && rc != ENG_NO_MEMORY) {
        abort();
    }
    free(out), free(j);
}

static void infer_request(const uint8_t *m, size_t n) {
    proto_limits lim = proto_default_limits();
    lim.max_inputs = 16, lim.max_text_bytes = 4096;
    proto_grpc_infer_target t;
    proto_predict_req req;
    eng_err err = {0};
    int rc = proto_grpc_infer_decode(m, n, &lim, &req, &t, &err);
    fuzz_log("infer", rc, err.msg);
    if (rc) {
        if (rc != ENG_MALFORMED && rc != ENG_INVALID_ARGUMENT && rc != ENG_LIMIT && rc != ENG_NOT_FOUND) abort();
        if (req.inputs || req.tasks || req.own_) abort(); /* a failed decode owns nothing */
        fuzz_keep((unsigned)strlen(err.msg));
        return;
    }
    if (req.n_inputs < 1 || req.n_inputs > lim.max_inputs || req.n_tasks != 1 || strcmp(req.tasks[0], t.spec)) abort();
    if (req.v2_id && !text_ok(req.v2_id, strlen(req.v2_id))) abort();
    for (int i = 0; i < req.n_inputs; i++) {
        const proto_text *x = &req.inputs[i];
        if (!text_ok(x->text, x->len) || (x->pair && !text_ok(x->pair, x->pair_len)) || x->len + x->pair_len > lim.max_text_bytes) abort();
        keep_bytes((const uint8_t *)x->text, x->len);
    }
    /* an answer to it: a regression per input, with the request's outputs, id and binary flags */
    /* (unsigned) n_inputs: checked above, but a sanitized build's range analysis cannot see it */
    proto_task_result *res = calloc((unsigned)req.n_inputs, sizeof *res);
    if (res) {
        for (int i = 0; i < req.n_inputs; i++)
            res[i] = (proto_task_result){.task = "t", .version = "1", .kind = PROTO_HEAD_REGRESSION, .value = (float)req.inputs[i].len};
        proto_predict_resp r = {.request_id = "r", .model = "m", .n_inputs = req.n_inputs, .n_tasks = 1, .results = res,
                                .v2_outputs = req.v2_outputs, .v2_id = req.v2_id, .v2_binary = req.v2_binary};
        encode_both(&r, t.raw);
    }
    free(res);
    proto_predict_free(&req);
}

/* An answer described by the input: head, inputs, labels, outputs asked, then strings (labels, QA
 * answers, entity names and words; bytes between NULs, any bytes) and the bytes read as numbers. */
static void infer_answer(const uint8_t *d, size_t n, bool raw) {
    if (n < 6) return;
    proto_head_kind kind = (proto_head_kind)(d[0] % 5);
    int ni = 1 + d[1] % 4, k = 1 + d[2] % 4;
    unsigned outs = (unsigned)d[3] | (unsigned)d[4] << 8;
    bool named = d[5] & 1;
    int best = (d[0] >> 3) % k;
    unsigned ents = d[1];
    d += 6, n -= 6;
    char *pool = malloc(n + 1);
    if (!pool) return;
    memcpy(pool, d, n);
    pool[n] = '\0';
    const char *str[16];
    size_t slen[16];
    int ns = 0;
    for (size_t o = 0; ns < 16;) { /* the strings: NUL-separated; a missing one is "" */
        size_t l = strnlen(pool + o, n - o);
        str[ns] = pool + o, slen[ns++] = l;
        if (o + l >= n) break;
        o += l + 1;
    }
    for (int i = ns; i < 16; i++) str[i] = "", slen[i] = 0;
    float num[16];
    for (int i = 0; i < 16; i++) {
        uint32_t u = 0;
        for (int b = 0; b < 4; b++) u = u << 8 | (n ? d[(size_t)(4 * i + b) % n] : 0);
        memcpy(&num[i], &u, sizeof u);
    }
    const char *labels[4] = {str[0], named ? NULL : str[1], str[2], str[3]};
    proto_task_result res[4];
    proto_entity ent[4][3];
    for (int i = 0; i < ni; i++) {
        proto_task_result *t = &res[i];
        *t = (proto_task_result){.task = str[4], .version = "1", .kind = kind, .n_labels = k, .labels = labels, .scores = num + 4 * i,
                                 .label = best, .value = num[i], .has_answer = (int)(num[i] > 0),
                                 .ans_start = (int32_t)i, .ans_end = (int32_t)(i + 1), .ans_score = num[15 - i], .ans_text = str[5 + i],
                                 .ans_text_len = slen[5 + i], .entities = ent[i], .n_entities = (int)(ents >> (2 * i)) % 4,
                                 .aggregation = PROTO_AGG_SIMPLE};
        for (int e = 0; e < t->n_entities; e++)
            ent[i][e] = (proto_entity){.name = str[9 + e], .score = num[e], .start = e, .end = e + 1, .seq = e & 1,
                                       .word = str[12 + e], .word_len = slen[12 + e]};
    }
    proto_predict_resp r = {.request_id = str[15], .model = "m", .n_inputs = ni, .n_tasks = 1, .results = res, .v2_outputs = outs & 4095};
    encode_both(&r, raw);
    free(pool);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int op = data[0] & 7;
    const uint8_t *m = data + 1;
    size_t n = size - 1;
    eng_err err = {0};
    uint8_t *out = NULL;
    size_t len = 0;
    if (op == 0) {
        infer_request(m, n);
    } else if (op == 1) {
        char name[64], ver[64];
        if (proto_grpc_model_request(m, n, data[0] & 8, name, ver, sizeof name, &err) == 0)
            keep_bytes((const uint8_t *)name, strlen(name)), keep_bytes((const uint8_t *)ver, strlen(ver));
    } else if (op == 2) {
        bool ready;
        if (proto_grpc_index_request(m, n, &ready, &err) == 0) fuzz_keep(ready);
    } else if (op == 3 || op == 4) {
        infer_answer(m, n, op == 4);
    } else {
        const char *j = (const char *)m;
        int rc = op == 5 ? proto_grpc_model_metadata_response(j, n, &out, &len)
                 : op == 6 ? proto_grpc_stats_response(j, n, &out, &len)
                           : proto_grpc_server_metadata_response(j, n, &out, &len);
        if (rc == 0) keep_bytes(out, len);
        free(out);
        char msg[64];
        proto_grpc_error_message(j, n, msg, sizeof msg);
        keep_bytes((const uint8_t *)msg, strlen(msg));
    }
    fuzz_keep((unsigned)strlen(err.msg));
    return 0;
}
