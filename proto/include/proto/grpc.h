/* grpc.h - KServe v2's GRPCInferenceService on the wire (proto/grpc_service.proto): the gRPC
 * message prefix, the grpc-timeout header, the methods, ModelInfer's request decoded into the
 * request struct and its answer encoded from the response struct, and the small calls' messages
 * from and to the REST v2 routes' JSON (proto/grpc.c says why).
 *
 * Usage (one ModelInfer):
 *     proto_grpc_infer_target t;
 *     proto_predict_req req;
 *     if (proto_grpc_infer_decode(msg, n, &lim, &req, &t, &err) == 0) {   // as POST /v2/models/{m}/infer
 *         ... run it, fill a proto_predict_resp resp ...
 *         proto_grpc_infer_encode(&resp, t.raw, &out, &olen);             // out: prefix + ModelInferResponse
 *         proto_predict_free(&req);
 *     }
 *
 * No HTTP/2 here (server/grpc.c), no engine. */
#ifndef ADAPTERD_PROTO_GRPC_H
#define ADAPTERD_PROTO_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"
#include "proto/proto.h"

/* gRPC status codes (grpc/doc/statuscodes.md), the ones adapterd sends. */
typedef enum {
    PROTO_GRPC_OK = 0,
    PROTO_GRPC_CANCELLED = 1,
    PROTO_GRPC_UNKNOWN = 2,
    PROTO_GRPC_INVALID_ARGUMENT = 3,
    PROTO_GRPC_DEADLINE_EXCEEDED = 4,
    PROTO_GRPC_NOT_FOUND = 5,
    PROTO_GRPC_PERMISSION_DENIED = 7,
    PROTO_GRPC_RESOURCE_EXHAUSTED = 8,
    PROTO_GRPC_FAILED_PRECONDITION = 9,
    PROTO_GRPC_UNIMPLEMENTED = 12,
    PROTO_GRPC_INTERNAL = 13,
    PROTO_GRPC_UNAVAILABLE = 14,
    PROTO_GRPC_UNAUTHENTICATED = 16,
} proto_grpc_code;
#define PROTO_GRPC_N_CODES 17

/* The code's name as gRPC spells it ("OK", "INVALID_ARGUMENT", ...); "UNKNOWN" outside 0..16. */
const char *proto_grpc_code_name(int code);

/* The service's methods, one X-macro list: dispatch and the metrics' method label. */
#define PROTO_GRPC_METHOD_LIST(X) \
    X(SERVER_LIVE, "ServerLive")  \
    X(SERVER_READY, "ServerReady") \
    X(MODEL_READY, "ModelReady")  \
    X(SERVER_METADATA, "ServerMetadata") \
    X(MODEL_METADATA, "ModelMetadata") \
    X(MODEL_INFER, "ModelInfer")  \
    X(REPOSITORY_INDEX, "RepositoryIndex") \
    X(MODEL_STATISTICS, "ModelStatistics")

typedef enum {
#define PROTO__GRPC_METHOD_ENUM(id, name) PROTO_GRPC_##id,
    PROTO_GRPC_METHOD_LIST(PROTO__GRPC_METHOD_ENUM)
#undef PROTO__GRPC_METHOD_ENUM
    PROTO_GRPC_UNKNOWN_METHOD, /* any other path: UNIMPLEMENTED */
    PROTO_GRPC_N_METHODS
} proto_grpc_method;

/* The method's name ("ModelInfer"; "other" for PROTO_GRPC_UNKNOWN_METHOD). */
const char *proto_grpc_method_name(proto_grpc_method m);
/* The method a :path names ("/inference.GRPCInferenceService/ModelInfer", n bytes), or
 * PROTO_GRPC_UNKNOWN_METHOD. */
proto_grpc_method proto_grpc_method_of(const char *path, size_t n);

/* ---- framing ---- */

/* Bytes of the prefix before each message: a compressed flag, then the length big-endian. */
#define PROTO_GRPC_PREFIX 5
/* Reads a prefix: *compressed the flag (0 or 1), *len the message length. Returns 0, or
 * ENG_MALFORMED when the flag is neither 0 nor 1. */
int proto_grpc_prefix_read(const uint8_t p[PROTO_GRPC_PREFIX], bool *compressed, uint32_t *len);
/* Writes an uncompressed message's prefix for len bytes. */
void proto_grpc_prefix_write(uint8_t p[PROTO_GRPC_PREFIX], uint32_t len);
/* The grpc-timeout header (1 to 8 digits and a unit: H, M, S, m, u, n; n bytes) in seconds. Returns 0,
 * or ENG_MALFORMED for anything else. */
int proto_grpc_timeout_parse(const char *v, size_t n, double *seconds);
/* grpc-message's percent-encoding (bytes outside 0x20..0x7e, and '%', as %XX) of msg into out (cap
 * bytes, NUL-terminated, cut at a whole escape). Returns the length written. */
size_t proto_grpc_message_escape(const char *msg, char *out, size_t cap);

/* ---- requests ---- */

/* Bytes of a ModelInfer target "name" or "name@version". */
#define PROTO_GRPC_SPEC_MAX 320

/* What a ModelInfer request names besides the request struct. */
typedef struct {
    char spec[PROTO_GRPC_SPEC_MAX]; /* "model_name", or "model_name@model_version" (as the REST version routes) */
    bool raw;                       /* answer in raw_output_contents: the inputs came in raw_input_contents, or an output
                                     * the request answers is asked as binary data (binary_data_output, an output's
                                     * binary_data); gRPC answers every output raw or none, as Triton does */
} proto_grpc_infer_target;

/* Decodes a ModelInferRequest (msg, n bytes, no prefix) into *out with the rules and messages of
 * proto_v2_infer_parse on the same request as REST JSON: inputs "text" and optionally "text_pair"
 * (BYTES, shape [N] or [N, 1]) from contents.bytes_contents or raw_input_contents (4-byte
 * little-endian lengths, each then its bytes), lim's limits (NULL: proto_default_limits()), the
 * "parameters" REST reads (skip, budget, latency_ms, truncate, aggregation, binary_data_output;
 * others ignored), "outputs" (and their binary_data) into v2_outputs and v2_binary, "id" into
 * v2_id, tasks {t->spec}. *out owns copies of every string it holds (release with
 * proto_predict_free); t is filled. Returns 0; ENG_MALFORMED only when the bytes are not a
 * ModelInferRequest; ENG_INVALID_ARGUMENT for a client's mistake, naming the field (no
 * model_name, a bad shape or datatype, raw data that does not frame its inputs, an unknown or
 * repeated output, a parameter of the wrong type or with no value, and bytes that are not UTF-8 or
 * hold a NUL where text is read: the id, a parameter's key or string, a tensor's or an output's
 * name, the texts); ENG_LIMIT over lim; ENG_NOT_FOUND for a name too long for any task;
 * ENG_NO_MEMORY when an allocation fails. On failure *out owns nothing. */
int proto_grpc_infer_decode(const uint8_t *msg, size_t n, const proto_limits *lim, proto_predict_req *out, proto_grpc_infer_target *t,
                            eng_err *err);

/* ModelReadyRequest, ModelMetadataRequest and ModelStatisticsRequest (same fields): the model's name
 * and version ("" when not given) into name, version (cap bytes each). Returns 0, or ENG_MALFORMED /
 * ENG_INVALID_ARGUMENT (no name unless name_optional, or one too long) with err set. */
int proto_grpc_model_request(const uint8_t *msg, size_t n, bool name_optional, char *name, char *version, size_t cap,
                             eng_err *err);
/* RepositoryIndexRequest: *ready_only its "ready". Returns 0 or ENG_MALFORMED with err set. */
int proto_grpc_index_request(const uint8_t *msg, size_t n, bool *ready_only, eng_err *err);
/* The requests with no fields (ServerLive, ServerReady, ServerMetadata): 0 when msg parses as one,
 * else ENG_MALFORMED with err set. */
int proto_grpc_empty_request(proto_grpc_method m, const uint8_t *msg, size_t n, eng_err *err);

/* ---- answers ----
 * Each returns 0 with *out a malloc'd whole gRPC message (the prefix, then the protobuf; the caller
 * frees it) of *len bytes, or ENG_MALFORMED (the JSON is not that answer) / ENG_NO_MEMORY. */

/* ServerLiveResponse, ServerReadyResponse or ModelReadyResponse (m) holding v. */
int proto_grpc_bool_response(proto_grpc_method m, bool v, uint8_t **out, size_t *len);
/* ServerMetadataResponse from GET /v2's JSON. */
int proto_grpc_server_metadata_response(const char *json, size_t n, uint8_t **out, size_t *len);
/* ModelMetadataResponse from GET /v2/models/{m}'s JSON. */
int proto_grpc_model_metadata_response(const char *json, size_t n, uint8_t **out, size_t *len);
/* ModelInferResponse from a one-task answer r, with the tensors, names, shapes, datatypes and
 * values of REST's (proto_v2_infer_encode): model_name, model_version, id (the client's, else the
 * request id), each output tensor with its shape and its data, FP32 in fp32_contents, INT32 in
 * int_contents, BYTES in bytes_contents, or every output in raw_output_contents when raw
 * (little-endian, a BYTES element as a 4-byte length and its bytes; r->v2_binary is not read). A
 * tensor always holds the elements its shape says. Returns 0 with *out as above, ENG_NO_MEMORY,
 * ENG_LIMIT (over 4 GiB), or ENG_INTERNAL when r is not one task's answer or one of its strings is
 * not UTF-8. */
int proto_grpc_infer_encode(const proto_predict_resp *r, bool raw, uint8_t **out, size_t *len);
/* ModelStatisticsResponse from the statistics extension's JSON ({"model_stats": [{"name", "version",
 * "last_inference", "inference_count", "execution_count", "inference_stats": {"success": {"count",
 * "ns"}, ...}}]}, GET /v2/models/{m}/stats), n bytes. */
int proto_grpc_stats_response(const char *json, size_t n, uint8_t **out, size_t *len);
/* One model of RepositoryIndexResponse. */
typedef struct {
    const char *name, *version, *state, *reason; /* reason may be NULL */
} proto_grpc_index_entry;
int proto_grpc_index_response(const proto_grpc_index_entry *e, int n, uint8_t **out, size_t *len);

/* The message of a REST error body ({"error": "msg"} or {"error": {"message": "msg"}}) into out
 * (cap bytes); the body itself when it is neither. */
void proto_grpc_error_message(const char *json, size_t n, char *out, size_t cap);

#endif
