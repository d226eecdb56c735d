/* fuzz_proto_grpc.c - KServe v2's gRPC messages (proto/grpc.c). The first byte picks the direction:
 * 0 a ModelInferRequest (protobuf) to the v2 JSON and through the REST parser, 1 a model request
 * (name, version), 2 a RepositoryIndexRequest; 3 and 4 a v2 infer answer (JSON) to a
 * ModelInferResponse in contents or raw, 5 model metadata, 6 statistics, 7 server metadata. Every
 * result is read back so a bad length shows under ASan. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int op = data[0] & 7;
    const uint8_t *m = data + 1;
    size_t n = size - 1;
    eng_err err = {0};
    uint8_t *out = NULL;
    size_t len = 0;
    if (op == 0) {
        proto_grpc_infer_target t;
        char *json = NULL;
        size_t jl = 0;
        if (proto_grpc_infer_request(m, n, &t, &json, &jl, &err) == 0) {
            proto_limits lim = proto_default_limits();
            lim.max_inputs = 16, lim.max_text_bytes = 4096;
            proto_predict_req req;
            memset(&req, 0, sizeof req);
            keep_bytes((const uint8_t *)t.spec, strlen(t.spec));
            if (proto_v2_infer_parse(json, jl, t.spec, &lim, &req, &err) == 0) {
                for (int i = 0; i < req.n_inputs; i++) keep_bytes((const uint8_t *)req.inputs[i].text, req.inputs[i].len);
                proto_predict_free(&req);
            }
            free(json);
        }
    } else if (op == 1) {
        char name[64], ver[64];
        if (proto_grpc_model_request(m, n, data[0] & 8, name, ver, sizeof name, &err) == 0)
            keep_bytes((const uint8_t *)name, strlen(name)), keep_bytes((const uint8_t *)ver, strlen(ver));
    } else if (op == 2) {
        bool ready;
        if (proto_grpc_index_request(m, n, &ready, &err) == 0) fuzz_keep(ready);
    } else {
        const char *j = (const char *)m;
        int rc = op == 3 || op == 4 ? proto_grpc_infer_response(j, n, op == 4, &out, &len)
                 : op == 5          ? proto_grpc_model_metadata_response(j, n, &out, &len)
                 : op == 6          ? proto_grpc_stats_response(j, n, &out, &len)
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
