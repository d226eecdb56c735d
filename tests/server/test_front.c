/* test_front.c - server/front.c, the front door, without HTTP or gRPC transport: the same request
 * written in every protocol (adapterd's v1, TEI, KServe v2 JSON, KServe v2 binary, KServe v2 gRPC's
 * ModelInferRequest built with protobuf-c; for embeddings v1, TEI and OpenAI) is decoded by its
 * codec and prepared against the fixture registry, and every protocol must build the same engine
 * job: the same task versions (the very store_task references), skips, token ids, type ids and
 * special-token masks, the same model. A protocol whose decoder dropped a field, or an HTTP route that
 * lost its codec (infer.c's table), fails here. The one acquisition is checked too: a request holds
 * exactly one reference per named task from prepare to the end, and a named version that does not
 * exist is refused before anything is tokenized. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "front.h"
#include "grpc_service.pb-c.h"
#include "infer.h"
#include "proto/grpc.h"

static store_registry *reg;
static srv_server srv;

static void setup(void) {
    eng_err e = {0};
    store_params sp = store_default_params();
    cr_assert_eq(store_open(ADAPTERD_FIXTURES "/registry", &sp, &reg, &e), 0, "%s", e.msg);
    memset(&srv, 0, sizeof srv);
    srv.cfg = srv_default_config();
    srv.reg = reg;
    cr_assert(srv.metrics = srv__metrics_new(reg));
}

static void teardown(void) {
    srv__metrics_free(srv.metrics);
    store_free(reg);
}

static void no_done(srv_server *s, srv_job *j) { (void)s, (void)j; }
static const srv_edge test_edge = {.done = no_done, .abandon = no_done};

/* Decodes w with codec and prepares it; the front (its job) goes back to the caller. */
static void prepare(srv_front *f, const proto_codec *codec, const proto_wire *w) {
    memset(f, 0, sizeof *f);
    srv__front_init(f, &srv, codec, &test_edge, NULL, "test-1", 0);
    cr_assert_eq(srv__front_decode(f, w), 0, "%s: %s", codec->name, f->msg);
    cr_assert_eq(srv__front_prepare(f), SRV_FRONT_READY, "%s: %s", codec->name, f->msg);
}

/* a and b are the same engine job. */
static void expect_same_job(const srv_job *a, const srv_job *b, const char *what) {
    cr_assert_eq(a->model, b->model, "%s: model", what);
    cr_assert_eq(a->embed, b->embed, "%s", what);
    cr_assert_eq(a->n_tasks, b->n_tasks, "%s: tasks", what);
    for (int k = 0; k < a->n_tasks; k++) {
        cr_expect_eq(a->tasks[k], b->tasks[k], "%s: task %d is another version", what, k);
        cr_expect_eq(a->treqs[k].task, b->treqs[k].task, "%s: engine task %d", what, k);
        cr_expect_eq(a->treqs[k].skip, b->treqs[k].skip, "%s: skip of task %d", what, k);
        cr_expect_eq(a->skip_src[k], b->skip_src[k], "%s: skip source of task %d", what, k);
    }
    cr_assert_eq(a->n_inputs, b->n_inputs, "%s: inputs", what);
    cr_expect_eq(a->tokens, b->tokens, "%s: tokens", what);
    for (int i = 0; i < a->n_inputs; i++) {
        const eng_tok_encoding *x = &a->enc[i], *y = &b->enc[i];
        cr_assert_eq(x->n, y->n, "%s: input %d has %zu tokens against %zu", what, i, x->n, y->n);
        cr_expect_eq(memcmp(x->ids, y->ids, x->n * sizeof *x->ids), 0, "%s: ids of input %d", what, i);
        cr_expect_eq(memcmp(x->type_ids, y->type_ids, x->n * sizeof *x->type_ids), 0, "%s: type ids of input %d", what, i);
        cr_expect_eq(memcmp(x->special_mask, y->special_mask, x->n * sizeof *x->special_mask), 0, "%s: specials of input %d",
                     what, i);
        cr_expect_eq(a->truncated[i], b->truncated[i], "%s: truncated %d", what, i);
    }
    if (a->embed) cr_expect_eq(a->pooling, b->pooling, "%s: pooling", what);
}

static proto_wire json_wire(const char *body, const char *task) {
    return (proto_wire){.body = body, .len = strlen(body), .header_len = strlen(body), .task = task};
}

/* Two questions with their contexts, as each protocol writes them; cls_lora with skip 1. */
#define Q0 "what is the color of the sky"
#define C0 "the sky is blue on a fine day"
#define Q1 "who won the match"
#define C1 "the home team won the match in the last minute"

/* KServe v2's binary extension: the JSON header, then the tensors' bytes (a 4-byte little-endian length
 * and the bytes per element). */
static size_t v2_binary_body(char *out, size_t cap, size_t *header_len) {
    const char *texts[2] = {Q0, Q1}, *pairs[2] = {C0, C1};
    char data[1024];
    size_t n = 0, text_bytes = 0;
    for (int t = 0; t < 2; t++) {
        const char **v = t ? pairs : texts;
        for (int i = 0; i < 2; i++) {
            uint32_t l = (uint32_t)strlen(v[i]);
            unsigned char le[4] = {(unsigned char)l, (unsigned char)(l >> 8), (unsigned char)(l >> 16), (unsigned char)(l >> 24)};
            memcpy(data + n, le, 4), n += 4;
            memcpy(data + n, v[i], l), n += l;
        }
        if (!t) text_bytes = n;
    }
    int h = snprintf(out, cap,
                     "{\"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\", \"shape\": [2], \"parameters\": "
                     "{\"binary_data_size\": %zu}}, {\"name\": \"text_pair\", \"datatype\": \"BYTES\", \"shape\": [2], "
                     "\"parameters\": {\"binary_data_size\": %zu}}], \"parameters\": {\"skip\": 1}}",
                     text_bytes, n - text_bytes);
    cr_assert(h > 0 && (size_t)h + n < cap);
    memcpy(out + h, data, n);
    *header_len = (size_t)h;
    return (size_t)h + n;
}

/* The same request as a ModelInferRequest (no gRPC prefix), built with protobuf-c. */
static uint8_t *grpc_body(size_t *len) {
    static char *texts[2] = {Q0, Q1}, *pairs[2] = {C0, C1};
    ProtobufCBinaryData tb[2], pb[2];
    for (int i = 0; i < 2; i++) {
        tb[i] = (ProtobufCBinaryData){strlen(texts[i]), (uint8_t *)texts[i]};
        pb[i] = (ProtobufCBinaryData){strlen(pairs[i]), (uint8_t *)pairs[i]};
    }
    Inference__InferTensorContents tc = INFERENCE__INFER_TENSOR_CONTENTS__INIT, pc = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    tc.n_bytes_contents = 2, tc.bytes_contents = tb;
    pc.n_bytes_contents = 2, pc.bytes_contents = pb;
    int64_t shape[1] = {2};
    Inference__ModelInferRequest__InferInputTensor t = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT,
                                                   p = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
    t.name = "text", t.datatype = "BYTES", t.n_shape = 1, t.shape = shape, t.contents = &tc;
    p.name = "text_pair", p.datatype = "BYTES", p.n_shape = 1, p.shape = shape, p.contents = &pc;
    Inference__ModelInferRequest__InferInputTensor *ins[2] = {&t, &p};
    Inference__InferParameter skip = INFERENCE__INFER_PARAMETER__INIT;
    skip.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM, skip.int64_param = 1;
    Inference__ModelInferRequest__ParametersEntry pe = INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
    pe.key = "skip", pe.value = &skip;
    Inference__ModelInferRequest__ParametersEntry *params[1] = {&pe};
    Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
    q.model_name = "cls_lora", q.n_inputs = 2, q.inputs = ins, q.n_parameters = 1, q.parameters = params;
    *len = inference__model_infer_request__get_packed_size(&q);
    uint8_t *b = malloc(*len);
    cr_assert(b);
    inference__model_infer_request__pack(&q, b);
    return b;
}

Test(front, every_protocol_builds_the_same_job, .init = setup, .fini = teardown) {
    srv_front v1, tei, v2, v2b, grpc;
    const char *v1_body = "{\"inputs\": [{\"text\": \"" Q0 "\", \"text_pair\": \"" C0 "\"}, {\"text\": \"" Q1
                          "\", \"text_pair\": \"" C1 "\"}], \"tasks\": [\"cls_lora\"], \"skip\": 1}";
    proto_wire w = json_wire(v1_body, NULL);
    prepare(&v1, &proto_v1_predict_codec, &w);
    /* TEI's /predict has no skip: the task's default is 0, so TEI is compared with its own skip below */
    w = json_wire("{\"inputs\": [[\"" Q0 "\", \"" C0 "\"], [\"" Q1 "\", \"" C1 "\"]], \"truncate\": true}", "cls_lora");
    prepare(&tei, &proto_tei_predict_codec, &w);
    w = json_wire("{\"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\", \"shape\": [2, 1], \"data\": [[\"" Q0
                  "\"], [\"" Q1 "\"]]}, {\"name\": \"text_pair\", \"datatype\": \"BYTES\", \"shape\": [2], \"data\": [\"" C0
                  "\", \"" C1 "\"]}], \"parameters\": {\"skip\": 1}}",
                  "cls_lora");
    prepare(&v2, &proto_v2_infer_codec, &w);
    char bin[2048];
    size_t hl = 0, bl = v2_binary_body(bin, sizeof bin, &hl);
    w = (proto_wire){.body = bin, .len = bl, .header_len = hl, .task = "cls_lora"};
    prepare(&v2b, &proto_v2_infer_codec, &w);
    size_t gl = 0;
    uint8_t *g = grpc_body(&gl);
    w = (proto_wire){.body = (const char *)g, .len = gl, .header_len = gl};
    prepare(&grpc, &proto_grpc_infer_codec, &w);

    expect_same_job(v1.job, v2.job, "KServe v2 JSON");
    expect_same_job(v1.job, v2b.job, "KServe v2 binary");
    expect_same_job(v1.job, grpc.job, "KServe v2 gRPC");
    cr_expect_eq(v1.job->treqs[0].skip, 1, "the skip was read");
    /* TEI: the same but for the skip it cannot ask */
    cr_expect_eq(tei.job->treqs[0].skip, store_task_skip_default(tei.job->tasks[0]));
    tei.job->treqs[0].skip = 1, tei.job->skip_src[0] = SRV_SKIP_REQUEST;
    expect_same_job(v1.job, tei.job, "TEI");
    srv_front *all[] = {&v1, &tei, &v2, &v2b, &grpc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) srv__front_clear(all[i]);
    free(g);
}

Test(front, every_embedding_protocol_builds_the_same_job, .init = setup, .fini = teardown) {
    srv_front v1, tei, oai;
    proto_wire w = json_wire("{\"inputs\": [\"" Q0 "\", \"" C1 "\"]}", NULL);
    prepare(&v1, &proto_v1_embed_codec, &w);
    prepare(&tei, &proto_tei_embed_codec, &w);
    w = json_wire("{\"input\": [\"" Q0 "\", \"" C1 "\"], \"model\": \"bert-tiny\"}", NULL);
    prepare(&oai, &proto_openai_embed_codec, &w);
    cr_assert(v1.job->embed && v1.job->model_ref);
    expect_same_job(v1.job, tei.job, "TEI /embed");
    expect_same_job(v1.job, oai.job, "OpenAI /v1/embeddings");
    srv__front_clear(&v1), srv__front_clear(&tei), srv__front_clear(&oai);
}

/* Every HTTP inference route goes through a codec: one line of infer.c's table each. */
Test(front, every_http_inference_route_has_a_codec) {
    const srv_route inference[] = {SRV_ROUTE_PREDICT,     SRV_ROUTE_EMBED,       SRV_ROUTE_TEI_EMBED,
                                   SRV_ROUTE_TEI_EMBED_ALL, SRV_ROUTE_TEI_PREDICT, SRV_ROUTE_TEI_RERANK,
                                   SRV_ROUTE_OPENAI_EMBEDDINGS, SRV_ROUTE_V2_INFER};
    for (size_t i = 0; i < sizeof inference / sizeof inference[0]; i++)
        cr_expect(srv__infer_codec(inference[i]), "route %d has no codec", (int)inference[i]);
    cr_expect_null(srv__infer_codec(SRV_ROUTE_TOKENIZE), "tokenizing runs no job");
    cr_expect_null(srv__infer_codec(SRV_ROUTE_TASKS));
}

/* The one acquisition: prepare holds one reference per task it names, the job runs exactly those,
 * and a version that does not exist is refused with 404 before anything else happens. */
/* body decodes with codec, and its preparation is refused with code and a message holding what, before
 * any job is built (nothing tokenized). */
static void expect_refused(const proto_codec *codec, const char *body, eng_status code, const char *what) {
    srv_front f;
    proto_wire w = json_wire(body, NULL);
    memset(&f, 0, sizeof f);
    srv__front_init(&f, &srv, codec, &test_edge, NULL, "test-2", 0);
    cr_assert_eq(srv__front_decode(&f, &w), 0, "%s", f.msg);
    cr_expect_eq(srv__front_prepare(&f), SRV_FRONT_FAILED);
    cr_expect_eq(f.code, code, "%s", f.msg);
    cr_expect(strstr(f.msg, what), "%s", f.msg);
    cr_expect_null(f.job, "nothing tokenized");
    srv__front_clear(&f);
}

/* References held by requests on the current version of task name. */
static int in_flight(const char *name) {
    store_version_info v[8];
    int n = store_versions(reg, name, v, 8);
    for (int i = 0; i < n; i++)
        if (v[i].current) return v[i].in_flight;
    cr_assert_fail("task %s has no current version", name);
    return -1;
}

Test(front, tasks_are_acquired_once, .init = setup, .fini = teardown) {
    srv_front f;
    int cls = in_flight("cls_lora"), ml = in_flight("ml");
    proto_wire w = json_wire("{\"inputs\": [\"a fine day\"], \"tasks\": [\"cls_lora\", \"ml\"]}", NULL);
    prepare(&f, &proto_v1_predict_codec, &w);
    cr_expect_eq(in_flight("cls_lora"), cls + 1, "one reference per named task");
    cr_expect_eq(in_flight("ml"), ml + 1, "one reference per named task");
    cr_expect_eq(f.job->n_tasks, 2);
    srv__front_clear(&f);
    cr_expect_eq(in_flight("cls_lora"), cls, "all given back");
    cr_expect_eq(in_flight("ml"), ml, "all given back");

    expect_refused(&proto_v1_predict_codec, "{\"inputs\": [\"a fine day\"], \"tasks\": [\"cls_lora@99\"]}", ENG_NOT_FOUND,
                   "cls_lora@99");
    /* TEI's one-task routes: with several tasks served and none named, a clear refusal */
    expect_refused(&proto_tei_predict_codec, "{\"inputs\": \"a fine day\"}", ENG_INVALID_ARGUMENT, "?task=");
}
