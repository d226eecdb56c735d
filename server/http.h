/* http.h - the HTTP plumbing every route uses: answers (JSON, text, errors through the one status
 * table), the request id, body accumulation and the access log. Calls nothing but libmicrohttpd,
 * proto's error encoder and the metrics. MHD thread. */
#ifndef ADAPTERD_SERVER_HTTP_H
#define ADAPTERD_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

/* Queues body (len bytes, ctype) with status on r's connection; mode says who frees body. Counts
 * the request in the metrics once. Returns MHD's result. */
enum MHD_Result srv__send_body(srv_request *r, unsigned status, const char *ctype, char *body, size_t len,
                               enum MHD_ResponseMemoryMode mode);
/* Queues a malloc'd JSON body (freed by MHD); json NULL (out of memory) sends a fixed 500. */
enum MHD_Result srv__send_json(srv_request *r, unsigned status, char *json, size_t len);

/* 200 with a KServe v2 answer in the binary tensor data extension (body: len bytes, malloc'd, taken):
 * Content-Type application/octet-stream, Inference-Header-Content-Length header_len (its JSON). */
enum MHD_Result srv__send_v2_binary(srv_request *r, char *body, size_t len, size_t header_len);
/* Queues {"error":{"code","message"}} with code's HTTP status (http_status.h). */
enum MHD_Result srv__send_error(srv_request *r, eng_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The error shape of a route's answers: TEI's on TEI's paths, OpenAI's on /v1/embeddings, KServe's
 * {"error": msg} on the v2 inference routes (the repository extension's admin routes keep adapterd's),
 * adapterd's elsewhere. */
proto_dialect srv__route_dialect(srv_route route);

/* Sets r->id: the client's X-Request-Id when it is 1..SRV_REQUEST_ID_ECHO_MAX printable ASCII
 * bytes, else "<server prefix>-<counter>". */
void srv__set_request_id(srv_request *r);
#define SRV_REQUEST_ID_ECHO_MAX 64

/* Appends a body chunk; beyond limit the body is dropped and r->too_large set (answered 413 once
 * complete). Returns 0, or -1 when out of memory. */
int srv__append_body(srv_request *r, const char *data, size_t n, size_t limit);

/* True when the Content-Type value ct is the media type want ("type/subtype", compared without
 * case), alone or followed by parameters (";charset=utf-8"); "application/jsonfoo" is not
 * "application/json". ct NULL is false. */
bool srv__media_type_is(const char *ct, const char *want);

/* The checks a route that parses a JSON body makes first: 415 unless its Content-Type is
 * application/json (srv__media_type_is), 413 when the body went over --max-body-bytes. Returns true
 * when it answered, with MHD's result in *ans. */
bool srv__refuse_json_body(srv_request *r, enum MHD_Result *ans);
/* The request codec's limits from the server's options (--max-inputs, --max-tasks, and
 * --max-body-bytes for one text). */
proto_limits srv__proto_limits(const srv_server *s);

/* Replaces every occurrence of path in msg (NUL-terminated, cap bytes) with as, cutting at cap:
 * error bodies name files relative to what the client sent, never where the server keeps them. */
void srv__scrub_path(char *msg, size_t cap, const char *path, const char *as);

/* One access-log line on stderr for a finished request. */
void srv__access_log(const srv_request *r, unsigned status, double seconds, bool completed);

#endif
