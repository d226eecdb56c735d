/* bench_grpc_decode.c - what a ModelInfer request costs the loop thread before it is a job:
 * proto_grpc_infer_decode (protobuf-c's unpack, the checks, the texts copied out) on
 *   - "shape1M": 1 MB of ModelInferRequest, an input whose shape has a million entries (refused:
 *     v2 takes [N] or [N, 1]); the JSON round trip this decoder replaced spent ~240 ms on it;
 *   - "8 inputs": a realistic request, 8 texts of one to three sentences, two parameters, two
 *     outputs and an id, in contents.bytes_contents;
 *   - "8 raw": the same texts in raw_input_contents, as Triton's clients send them.
 * Prints the median of the runs (each run of the small requests times a loop, for the clock's
 * resolution) and the CPU. No server, no engine.
 *     bench_grpc_decode [runs]   (default 15) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "grpc_service.pb-c.h"
#include "proto/grpc.h"
#include "proto/proto.h"

static const char *const texts[8] = {
    "The match was great and the crowd loved every minute of it.",
    "A dull and slow film that never finds its rhythm, despite a strong cast and a promising first act.",
    "Ada Lovelace lived in London and wrote the first published algorithm for Babbage's Analytical Engine.",
    "Where is the nearest train station?",
    "Shares of the company rose 4% after it reported quarterly earnings above analysts' expectations.",
    "I ordered the soup and it arrived cold, but the staff replaced it quickly and apologised.",
    "The new firmware update fixes the battery drain some users reported after the last release.",
    "Is this product suitable for children under three years old? The box does not say."};

/* A packed ModelInferRequest (malloc'd, *n bytes): kind 0 shape1M, 1 the 8 texts in contents, 2 raw. */
static uint8_t *make(int kind, size_t *n) {
    Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
    Inference__ModelInferRequest__InferInputTensor in = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT, *pin = &in;
    Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    ProtobufCBinaryData bc[8], raw = {0};
    int64_t one[1] = {8}, *big = NULL;
    q.model_name = "sentiment", q.id = "req-000042";
    q.inputs = &pin, q.n_inputs = 1;
    in.name = "text", in.datatype = "BYTES";
    if (kind == 0) {
        size_t dims = 1000000;
        if (!(big = malloc(dims * sizeof *big))) return NULL;
        for (size_t i = 0; i < dims; i++) big[i] = 1;
        in.shape = big, in.n_shape = dims;
        bc[0] = (ProtobufCBinaryData){.len = 5, .data = (uint8_t *)"hello"};
        c.bytes_contents = bc, c.n_bytes_contents = 1, in.contents = &c;
    } else {
        in.shape = one, in.n_shape = 1;
        size_t total = 0;
        for (int i = 0; i < 8; i++) total += 4 + strlen(texts[i]);
        if (kind == 2 && !(raw.data = malloc(total))) return NULL;
        for (int i = 0, o = 0; i < 8; i++) {
            uint32_t l = (uint32_t)strlen(texts[i]);
            bc[i] = (ProtobufCBinaryData){.len = l, .data = (uint8_t *)texts[i]};
            if (kind != 2) continue;
            raw.data[o] = (uint8_t)l, raw.data[o + 1] = (uint8_t)(l >> 8), raw.data[o + 2] = (uint8_t)(l >> 16), raw.data[o + 3] = (uint8_t)(l >> 24);
            memcpy(raw.data + o + 4, texts[i], l);
            o += 4 + (int)l;
        }
        raw.len = total;
        if (kind == 2) q.raw_input_contents = &raw, q.n_raw_input_contents = 1;
        else c.bytes_contents = bc, c.n_bytes_contents = 8, in.contents = &c;
    }
    Inference__InferParameter skip = INFERENCE__INFER_PARAMETER__INIT, trunc = INFERENCE__INFER_PARAMETER__INIT;
    skip.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM, skip.int64_param = 1;
    trunc.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM, trunc.bool_param = 1;
    Inference__ModelInferRequest__ParametersEntry pe[2] = {INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT,
                                                           INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT},
                                                  *ppe[2] = {&pe[0], &pe[1]};
    pe[0].key = "skip", pe[0].value = &skip, pe[1].key = "truncate", pe[1].value = &trunc;
    q.parameters = ppe, q.n_parameters = 2;
    Inference__ModelInferRequest__InferRequestedOutputTensor ot[2] = {INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT,
                                                                      INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT},
                                                             *pot[2] = {&ot[0], &ot[1]};
    ot[0].name = "label", ot[1].name = "score";
    q.outputs = pot, q.n_outputs = 2;
    *n = inference__model_infer_request__get_packed_size(&q);
    uint8_t *b = malloc(*n);
    if (b) inference__model_infer_request__pack(&q, b);
    free(big), free(raw.data);
    return b;
}

/* One decode; its status. */
static int decode(const uint8_t *msg, size_t n) {
    proto_predict_req r;
    proto_grpc_infer_target t;
    eng_err e = {0};
    int rc = proto_grpc_infer_decode(msg, n, NULL, &r, &t, &e);
    if (!rc) proto_predict_free(&r);
    return rc;
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 15;
    if (runs < 1 || runs > 1000) runs = 15;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256], cpu[256] = "unknown";
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') ? strchr(line, ':') + 2 : line);
            cpu[strcspn(cpu, "\n")] = '\0';
            break;
        }
    if (f) fclose(f);
    printf("proto_grpc_infer_decode, median of %d runs; CPU: %s\n", runs, cpu);
    static const char *const names[] = {"shape1M", "8 inputs", "8 raw"};
    double *ms = malloc((size_t)runs * sizeof *ms);
    if (!ms) return 1;
    for (int kind = 0; kind < 3; kind++) {
        size_t n = 0;
        uint8_t *msg = make(kind, &n);
        if (!msg) return 1;
        int loop = kind == 0 ? 1 : 2000, rc = decode(msg, n); /* a warm-up, and the status it gives */
        for (int r = 0; r < runs; r++) {
            double t0 = bench_now_ms();
            for (int i = 0; i < loop; i++) rc |= decode(msg, n) != rc;
            ms[r] = (bench_now_ms() - t0) / loop;
        }
        double med = bench_median(ms, runs);
        printf("%-9s %8zu bytes  %10.4f ms  (%s)\n", names[kind], n, med, rc == 0 ? "decoded" : rc == ENG_INVALID_ARGUMENT ? "refused" : "?");
        free(msg);
    }
    free(ms);
    return 0;
}
