/* fuzz_proto_v2.c - the KServe v2 request codec (proto/v2.c): POST /v2/models/{task}/infer
 * bodies. A parsed request is read back field by field so a bad length shows under ASan. */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    proto_limits lim = proto_default_limits();
    lim.max_inputs = 16, lim.max_tasks = 8, lim.max_text_bytes = 4096;
    proto_predict_req req;
    eng_err err;
    memset(&req, 0, sizeof req);
    if (proto_v2_infer_parse((const char *)data, size, "task", &lim, &req, &err) == 0) {
        unsigned h = req.v2_outputs;
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
    return 0;
}
