/* grpc.h - KServe v2's GRPCInferenceService on the wire (proto/grpc_service.proto): the gRPC
 * message prefix, the grpc-timeout header, the methods, and the conversion of each call's protobuf
 * to and from the JSON the REST v2 routes take and give (proto/grpc.c says why).
 *
 * Usage (one ModelInfer):
 *     proto_grpc_infer_target t;
 *     char *json; size_t jlen;
 *     if (proto_grpc_infer_request(msg, n, &t, &json, &jlen, &err) == 0)
 *         proto_v2_infer_parse(json, jlen, t.spec, &lim, &req, &err);      // as POST /v2/models/{m}/infer
 *     ... the v2 answer body ...
 *     proto_grpc_infer_response(body, blen, t.raw, &out, &olen, &err);    // out: prefix + ModelInferResponse
 *
 * No HTTP/2 here (server/grpc.c), no engine. */
#ifndef ADAPTERD_PROTO_GRPC_H
#define ADAPTERD_PROTO_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/status.h"

/* gRPC status codes (grpc/doc/statuscodes.md), the ones adapterd sends. */
typedef enum {
    PROTO_GRPC_OK = 0,
    PROTO_GRPC_CANCELLED = 1,
    PROTO_GRPC_UNKNOWN = 2,
    PROTO_GRPC_INVALID_ARGUMENT = 3,
    PROTO_GRPC_DEADLINE_EXCEEDED = 4,
    PROTO_GRPC_NOT_FOUND = 5,
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

/* What a ModelInfer request names besides its body. */
typedef struct {
    char spec[PROTO_GRPC_SPEC_MAX]; /* "model_name", or "model_name@model_version" (as the REST version routes) */
    bool raw;                       /* its inputs came in raw_input_contents: the outputs go back raw too (as Triton) */
} proto_grpc_infer_target;

/* A ModelInferRequest (msg, n bytes, no prefix) as the JSON body of POST /v2/models/{m}/infer: its
 * inputs with their data from contents.bytes_contents or raw_input_contents (4-byte little-endian
 * lengths, each then its bytes), shapes, datatypes, "parameters", "outputs" and "id" as sent, so
 * the REST parser (proto_v2_infer_parse) checks them with the same rules and messages. Returns 0
 * with *json malloc'd (the caller frees it), or ENG_MALFORMED (not a ModelInferRequest),
 * ENG_INVALID_ARGUMENT (no model name, raw data that does not match its inputs, bytes that are not
 * UTF-8) or ENG_NO_MEMORY with err set. */
int proto_grpc_infer_request(const uint8_t *msg, size_t n, proto_grpc_infer_target *t, char **json, size_t *len,
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
/* ModelInferResponse from the v2 infer answer's JSON: model_name, model_version, id, and each output
 * tensor with its shape; BYTES data as bytes, FP32 as float, INT32 as int32 (JSON null, a non-finite
 * score, as NaN), in contents, or in raw_output_contents (raw: little-endian, BYTES length-prefixed). */
int proto_grpc_infer_response(const char *json, size_t n, bool raw, uint8_t **out, size_t *len);
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
