/* fuzz_proto_v2.c - the KServe v2 request codec (proto/v2.c): POST /v2/models/{task}/infer
 * bodies. A parsed request is read back field by field so a bad length shows under ASan.
 *
 * An input holding FUZZ_SEP is a body of the binary tensor data extension: the part before it is
 * the JSON header (its length the Inference-Header-Content-Length), the part after it the tensors'
 * raw bytes. The body is copied into a buffer of exactly its size, so any read past the binary data
 * is one past an allocation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    proto_limits lim = proto_default_limits();
    lim.max_inputs = 16, lim.max_tasks = 8, lim.max_text_bytes = 4096;
    fuzz_part parts[2];
    int binary = fuzz_split(data, size, parts, 2) == 2;
    size_t header = binary ? parts[0].n : size, len = binary ? parts[0].n + parts[1].n : size;
    char *body = malloc(len ? len : 1);
    if (!body) return 0;
    memcpy(body, parts[0].p, parts[0].n);
    if (binary) memcpy(body + parts[0].n, parts[1].p, parts[1].n);
    proto_predict_req req;
    eng_err err;
    memset(&req, 0, sizeof req);
    int rc = proto_v2_infer_parse_binary(body, len, header, "task", &lim, &req, &err);
    fuzz_log(binary ? "proto_v2 binary" : "proto_v2", rc, err.msg);
    if (rc == 0) {
        unsigned h = req.v2_outputs + req.v2_binary;
        for (int i = 0; i < req.n_inputs; i++) {
            const proto_text *t = &req.inputs[i];
            for (size_t k = 0; t->text && k < t->len; k++) h += (unsigned char)t->text[k];
            for (size_t k = 0; t->pair && k < t->pair_len; k++) h += (unsigned char)t->pair[k];
        }
        for (int i = 0; i < req.n_tasks; i++) h += (unsigned)strlen(req.tasks[i]);
        fuzz_keep(h);
        proto_predict_free(&req);
    } else {
        fuzz_keep((unsigned)strlen(err.msg));
    }
    free(body);
    return 0;
}
