/* fuzz_proto_v1.c - the v1 request codecs (proto/parse.c): POST /v1/predict, /v1/embed and
 * /v1/tokenize bodies. The first byte picks the parser, the rest is the body. Every field of a
 * parsed request is read back, so a length or count that points past the document shows under
 * ASan. */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every byte a parsed request points to; returns a checksum so nothing is optimised out. */
static unsigned touch(const proto_predict_req *r) {
    unsigned h = 0;
    for (int i = 0; i < r->n_inputs; i++) {
        const proto_text *t = &r->inputs[i];
        for (size_t k = 0; t->text && k < t->len; k++) h += (unsigned char)t->text[k];
        for (size_t k = 0; t->pair && k < t->pair_len; k++) h += (unsigned char)t->pair[k];
        for (int k = 0; k < t->n_ids; k++) h += (unsigned)t->ids[k] + (t->type_ids ? (unsigned)t->type_ids[k] : 0u);
    }
    for (int i = 0; i < r->n_tasks; i++) h += (unsigned)strlen(r->tasks[i]);
    for (int i = 0; i < r->n_skips; i++) h += (unsigned)strlen(r->skips[i].task) + (unsigned)r->skips[i].skip;
    if (r->model) h += (unsigned)strlen(r->model);
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    proto_limits lim = proto_default_limits();
    lim.max_inputs = 16, lim.max_tasks = 8, lim.max_text_bytes = 4096;
    proto_predict_req req;
    eng_err err;
    memset(&req, 0, sizeof req);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    int rc;
    switch (data[0] % 3) {
    case 0: rc = proto_predict_parse(body, len, &lim, &req, &err); break;
    case 1: rc = proto_embed_parse(body, len, &lim, &req, &err); break;
    default: rc = proto_tokenize_parse(body, len, &lim, &req, &err); break;
    }
    if (rc == 0) {
        fuzz_keep(touch(&req));
        proto_predict_free(&req);
    } else {
        fuzz_keep((unsigned)strlen(err.msg));
    }
    return 0;
}
