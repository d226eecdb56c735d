/* test_grpc.c - proto/grpc.c: gRPC's message prefix, grpc-timeout, grpc-message escaping, ModelInfer's
 * decode and encode, and the small calls' messages, with no server. The protobuf bytes here are
 * written by hand from the protobuf encoding rules (tag = field << 3 | wire type; 2:
 * length-delimited, 0: varint; repeated scalars packed) and the field numbers of
 * proto/grpc_service.proto, not produced by protobuf-c, so a generated-code or field-number mistake
 * shows. test_grpc_infer.c checks ModelInfer against REST's v2 codec with messages protobuf-c packs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/grpc.h"
#include "proto/proto.h"

Test(grpc, prefix_read_write) {
    uint8_t p[5];
    proto_grpc_prefix_write(p, 0x01020304u);
    const uint8_t want[5] = {0, 1, 2, 3, 4};
    cr_assert_arr_eq(p, want, 5);
    bool z = true;
    uint32_t n = 0;
    cr_assert_eq(proto_grpc_prefix_read(p, &z, &n), 0);
    cr_assert(!z);
    cr_assert_eq(n, 0x01020304u);
    const uint8_t comp[5] = {1, 0, 0, 0, 9}, bad[5] = {2, 0, 0, 0, 9};
    cr_assert_eq(proto_grpc_prefix_read(comp, &z, &n), 0);
    cr_assert(z);
    cr_assert_eq(n, 9);
    cr_assert_eq(proto_grpc_prefix_read(bad, &z, &n), ENG_MALFORMED);
}

Test(grpc, timeout_units) {
    /* gRPC over HTTP/2: TimeoutValue (1-8 digits) then TimeoutUnit H M S m u n */
    struct {
        const char *v;
        double s;
    } ok[] = {{"1H", 3600}, {"2M", 120}, {"3S", 3}, {"250m", 0.25}, {"99999999u", 99.999999}, {"1n", 1e-9}, {"0S", 0}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        double s = -1;
        cr_assert_eq(proto_grpc_timeout_parse(ok[i].v, strlen(ok[i].v), &s), 0, "%s", ok[i].v);
        cr_assert_float_eq(s, ok[i].s, 1e-12, "%s", ok[i].v);
    }
    const char *bad[] = {"", "S", "10", "10s", "123456789S", "-1S", "1.5S", "1 S"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double s;
        cr_assert_eq(proto_grpc_timeout_parse(bad[i], strlen(bad[i]), &s), ENG_MALFORMED, "\"%s\"", bad[i]);
    }
}

Test(grpc, message_escape) {
    char out[64];
    /* percent-encoding of everything outside 0x20..0x7e, and of % itself */
    proto_grpc_message_escape("a 100% \"t\xc3\xa9st\"\n", out, sizeof out);
    cr_assert_str_eq(out, "a 100%25 \"t%C3%A9st\"%0A");
    char small[5];
    proto_grpc_message_escape("ab\ncd", small, sizeof small); /* an escape is never cut */
    cr_assert_str_eq(small, "ab");
}

Test(grpc, methods) {
    const char *p = "/inference.GRPCInferenceService/ModelInfer";
    cr_assert_eq(proto_grpc_method_of(p, strlen(p)), PROTO_GRPC_MODEL_INFER);
    p = "/inference.GRPCInferenceService/ServerLive";
    cr_assert_eq(proto_grpc_method_of(p, strlen(p)), PROTO_GRPC_SERVER_LIVE);
    const char *no[] = {"/inference.GRPCInferenceService/ModelInferX", "/inference.GRPCInferenceService/", "/x.Y/ModelInfer",
                        "/inference.GRPCInferenceService/modelinfer"};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) cr_assert_eq(proto_grpc_method_of(no[i], strlen(no[i])), PROTO_GRPC_UNKNOWN_METHOD);
    cr_assert_str_eq(proto_grpc_method_name(PROTO_GRPC_MODEL_METADATA), "ModelMetadata");
    cr_assert_str_eq(proto_grpc_code_name(PROTO_GRPC_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    cr_assert_str_eq(proto_grpc_code_name(99), "UNKNOWN");
}

/* ModelInferRequest{model_name "m", model_version "2", id "r", parameters {"skip": int64 1},
 * inputs [{name "text", datatype "BYTES", shape [2], contents {bytes_contents ["a", "bc"]}}],
 * outputs [{name "label"}]} */
static const uint8_t infer_msg[] = {
    0x0a, 1, 'm', 0x12, 1, '2', 0x1a, 1, 'r',
    0x22, 10, 0x0a, 4, 's', 'k', 'i', 'p', 0x12, 2, 0x10, 1,                   /* map entry: key 1, value 2 (int64_param 2) */
    0x2a, 25, 0x0a, 4, 't', 'e', 'x', 't', 0x12, 5, 'B', 'Y', 'T', 'E', 'S', 0x1a, 1, 2,
    0x2a, 7, 0x42, 1, 'a', 0x42, 2, 'b', 'c',                                  /* contents: bytes_contents (8) */
    0x32, 7, 0x0a, 5, 'l', 'a', 'b', 'e', 'l'};

Test(grpc, infer_decode) {
    proto_grpc_infer_target t;
    proto_predict_req r;
    eng_err e = {0};
    cr_assert_eq(proto_grpc_infer_decode(infer_msg, sizeof infer_msg, NULL, &r, &t, &e), 0, "%s", e.msg);
    cr_assert_str_eq(t.spec, "m@2");
    cr_assert(!t.raw);
    cr_assert_eq(r.n_inputs, 2);
    cr_assert_eq(r.inputs[0].len, 1);
    cr_assert_str_eq(r.inputs[0].text, "a");
    cr_assert_str_eq(r.inputs[1].text, "bc");
    cr_assert_null(r.inputs[1].pair);
    cr_assert_eq(r.n_tasks, 1);
    cr_assert_str_eq(r.tasks[0], "m@2");
    cr_assert_eq(r.skip, 1);
    cr_assert_eq(r.v2_outputs, PROTO_V2_OUT_LABEL);
    cr_assert_eq(r.v2_binary, 0);
    cr_assert_str_eq(r.v2_id, "r");
    proto_predict_free(&r);
}

Test(grpc, infer_decode_raw_inputs) {
    /* inputs [{name "text", datatype "BYTES", shape [2]}], raw_input_contents [len 2 "hi", len 0 ""] */
    const uint8_t msg[] = {0x0a, 1, 'm', 0x2a, 16, 0x0a, 4, 't', 'e', 'x', 't', 0x12, 5, 'B', 'Y', 'T', 'E', 'S', 0x1a, 1, 2,
                           0x3a, 10, 2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0};
    proto_grpc_infer_target t;
    proto_predict_req r;
    eng_err e = {0};
    cr_assert_eq(proto_grpc_infer_decode(msg, sizeof msg, NULL, &r, &t, &e), 0, "%s", e.msg);
    cr_assert(t.raw, "raw inputs: raw outputs");
    cr_assert_str_eq(t.spec, "m");
    cr_assert_eq(r.n_inputs, 2);
    cr_assert_str_eq(r.inputs[0].text, "hi");
    cr_assert_eq(r.inputs[1].len, 0);
    cr_assert_str_eq(r.inputs[1].text, "");
    proto_predict_free(&r);
    /* the same with the element cut: length 9, 2 bytes */
    uint8_t cut[sizeof msg];
    memcpy(cut, msg, sizeof msg);
    cut[23] = 9;
    cr_assert_eq(proto_grpc_infer_decode(cut, sizeof cut, NULL, &r, &t, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "raw_input_contents[0]"), "%s", e.msg);
    cr_assert_null(r.inputs, "a failed decode owns nothing");
}

Test(grpc, infer_decode_errors) {
    proto_grpc_infer_target t;
    proto_predict_req r;
    eng_err e = {0};
    const uint8_t garbage[] = {0xff, 0xff, 0xff};
    cr_assert_eq(proto_grpc_infer_decode(garbage, sizeof garbage, NULL, &r, &t, &e), ENG_MALFORMED);
    const uint8_t noname[] = {0x1a, 1, 'r'};
    cr_assert_eq(proto_grpc_infer_decode(noname, sizeof noname, NULL, &r, &t, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "model_name"));
    /* one raw entry for no inputs */
    const uint8_t rawcount[] = {0x0a, 1, 'm', 0x3a, 0};
    cr_assert_eq(proto_grpc_infer_decode(rawcount, sizeof rawcount, NULL, &r, &t, &e), ENG_INVALID_ARGUMENT);
    /* bytes that are not UTF-8 */
    const uint8_t bad8[] = {0x0a, 1, 'm', 0x2a, 8, 0x0a, 1, 't', 0x2a, 3, 0x42, 1, 0xff};
    cr_assert_eq(proto_grpc_infer_decode(bad8, sizeof bad8, NULL, &r, &t, &e), ENG_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, "inputs[0].contents.bytes_contents[0] is not UTF-8"), "%s", e.msg);
}

/* A regression answer (one input, value 1.5): the bytes of ModelInferResponse by hand. */
Test(grpc, infer_encode_bytes) {
    proto_task_result res = {.task = "m", .version = "1", .kind = PROTO_HEAD_REGRESSION, .value = 1.5f};
    proto_predict_resp pr = {.request_id = "x", .model = "bert", .n_inputs = 1, .n_tasks = 1, .results = &res};
    uint8_t *out = NULL;
    size_t len = 0;
    cr_assert_eq(proto_grpc_infer_encode(&pr, false, &out, &len), 0);
    /* 1.5f = 0x3fc00000, little-endian in a packed fp32_contents (6) */
    const uint8_t want[] = {0, 0, 0, 0, 35, 0x0a, 1, 'm', 0x12, 1, '1', 0x1a, 1, 'x', 0x2a, 24, 0x0a, 5, 'v', 'a', 'l', 'u', 'e',
                            0x12, 4, 'F', 'P', '3', '2', 0x1a, 1, 1, 0x2a, 6, 0x32, 4, 0x00, 0x00, 0xc0, 0x3f};
    cr_assert_eq(len, sizeof want);
    cr_assert_arr_eq(out, want, sizeof want);
    free(out);
    /* raw: no contents, the data in raw_output_contents (6) */
    cr_assert_eq(proto_grpc_infer_encode(&pr, true, &out, &len), 0);
    const uint8_t want_raw[] = {0, 0, 0, 0, 33, 0x0a, 1, 'm', 0x12, 1, '1', 0x1a, 1, 'x', 0x2a, 16, 0x0a, 5, 'v', 'a', 'l', 'u', 'e',
                                0x12, 4, 'F', 'P', '3', '2', 0x1a, 1, 1, 0x32, 4, 0x00, 0x00, 0xc0, 0x3f};
    cr_assert_eq(len, sizeof want_raw);
    cr_assert_arr_eq(out, want_raw, sizeof want_raw);
    free(out);
}

Test(grpc, infer_encode_raw_typed) {
    /* classification: label BYTES, score FP32, scores FP32 [1, 2] with a NaN; QA's start INT32 -1 */
    const char *labels[] = {"neg", "ok"};
    float sc[] = {NAN, 2.0f};
    proto_task_result res = {.task = "m", .version = "1", .kind = PROTO_HEAD_CLASSIFICATION, .n_labels = 2, .labels = labels,
                             .scores = sc, .label = 1, .score = 2.0f};
    proto_predict_resp pr = {.request_id = "x", .model = "bert", .n_inputs = 1, .n_tasks = 1, .results = &res};
    uint8_t *out = NULL;
    size_t len = 0;
    cr_assert_eq(proto_grpc_infer_encode(&pr, true, &out, &len), 0);
    /* the raw entries at the end: BYTES 4-byte length + "ok", FP32 2.0, FP32 NaN then 2.0 */
    const uint8_t tail[] = {0x32, 6, 2, 0, 0, 0, 'o', 'k', 0x32, 4, 0x00, 0x00, 0x00, 0x40, 0x32, 8, 0x00, 0x00, 0xc0, 0x7f, 0x00, 0x00, 0x00, 0x40};
    cr_assert_geq(len, sizeof tail);
    cr_assert_arr_eq(out + len - sizeof tail, tail, sizeof tail);
    free(out);
    proto_task_result qa = {.task = "qa", .version = "1", .kind = PROTO_HEAD_QA};
    pr.results = &qa, pr.v2_outputs = PROTO_V2_OUT_START;
    cr_assert_eq(proto_grpc_infer_encode(&pr, true, &out, &len), 0);
    const uint8_t minus1[] = {0x32, 4, 0xff, 0xff, 0xff, 0xff};
    cr_assert_arr_eq(out + len - sizeof minus1, minus1, sizeof minus1);
    free(out);
    pr.n_tasks = 2; /* v2 answers one task */
    cr_assert_eq(proto_grpc_infer_encode(&pr, false, &out, &len), ENG_INTERNAL);
}

Test(grpc, small_answers) {
    uint8_t *out = NULL;
    size_t len = 0;
    cr_assert_eq(proto_grpc_bool_response(PROTO_GRPC_SERVER_LIVE, true, &out, &len), 0);
    const uint8_t live[] = {0, 0, 0, 0, 2, 0x08, 1};
    cr_assert_eq(len, sizeof live);
    cr_assert_arr_eq(out, live, sizeof live);
    free(out);
    cr_assert_eq(proto_grpc_bool_response(PROTO_GRPC_MODEL_READY, false, &out, &len), 0);
    cr_assert_eq(len, 5); /* proto3: a false bool is not sent */
    free(out);
    const char *sm = "{\"name\":\"a\",\"version\":\"1\",\"extensions\":[\"x\"]}";
    cr_assert_eq(proto_grpc_server_metadata_response(sm, strlen(sm), &out, &len), 0);
    const uint8_t smw[] = {0, 0, 0, 0, 9, 0x0a, 1, 'a', 0x12, 1, '1', 0x1a, 1, 'x'};
    cr_assert_eq(len, sizeof smw);
    cr_assert_arr_eq(out, smw, sizeof smw);
    free(out);
    const char *mm = "{\"name\":\"t\",\"versions\":[\"1\"],\"platform\":\"p\",\"inputs\":[{\"name\":\"i\",\"datatype\":\"BYTES\",\"shape\":[-1]}],"
                     "\"outputs\":[]}";
    cr_assert_eq(proto_grpc_model_metadata_response(mm, strlen(mm), &out, &len), 0);
    /* shape [-1]: int64 -1 is a 10-byte varint */
    const uint8_t mmw[] = {0, 0, 0, 0, 33, 0x0a, 1, 't', 0x12, 1, '1', 0x1a, 1, 'p', 0x22, 22, 0x0a, 1, 'i', 0x12, 5, 'B', 'Y', 'T', 'E', 'S',
                           0x1a, 10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    cr_assert_eq(len, sizeof mmw);
    cr_assert_arr_eq(out, mmw, sizeof mmw);
    free(out);
    const char *st = "{\"model_stats\":[{\"name\":\"t\",\"version\":\"1\",\"inference_count\":3,\"execution_count\":3,"
                     "\"inference_stats\":{\"success\":{\"count\":3,\"ns\":300}}}]}";
    cr_assert_eq(proto_grpc_stats_response(st, strlen(st), &out, &len), 0);
    /* model_stats (1) {name, version, inference_count (4) 3, execution_count (5) 3, inference_stats (6) {success (1) {1: 3, 2: 300}}} */
    const uint8_t stw[] = {0, 0, 0, 0, 21, 0x0a, 19, 0x0a, 1, 't', 0x12, 1, '1', 0x20, 3, 0x28, 3, 0x32, 7, 0x0a, 5, 0x08, 3, 0x10, 0xac, 0x02};
    cr_assert_eq(len, sizeof stw);
    cr_assert_arr_eq(out, stw, sizeof stw);
    free(out);
    char name[16], ver[16];
    eng_err e = {0};
    const uint8_t mr[] = {0x0a, 2, 'q', 'a', 0x12, 1, '3'};
    cr_assert_eq(proto_grpc_model_request(mr, sizeof mr, false, name, ver, sizeof name, &e), 0);
    cr_assert_str_eq(name, "qa");
    cr_assert_str_eq(ver, "3");
    cr_assert_eq(proto_grpc_model_request(mr + 4, 3, false, name, ver, sizeof name, &e), ENG_INVALID_ARGUMENT); /* no name */
    cr_assert_eq(proto_grpc_model_request(mr + 4, 3, true, name, ver, sizeof name, &e), 0);
    cr_assert_str_eq(name, "");
    cr_assert_eq(proto_grpc_empty_request(PROTO_GRPC_SERVER_LIVE, (const uint8_t *)"", 0, &e), 0);
    char m[32];
    const char *kserve = "{\"error\":\"bad thing\"}", *ours = "{\"error\":{\"code\":\"x\",\"message\":\"other\"}}";
    proto_grpc_error_message(kserve, strlen(kserve), m, sizeof m);
    cr_assert_str_eq(m, "bad thing");
    proto_grpc_error_message(ours, strlen(ours), m, sizeof m);
    cr_assert_str_eq(m, "other");
}
