/* test_precision.c - a model's precision end to end: models/NAME/model.json and serve --precision
 * choose it, /v1/models and /metrics show it, the server's answers equal the engine's in that
 * precision, and `adapterd encode --precision` runs it (the real binary, on a registry copied to a
 * temporary directory). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http_client.h"
#include "engine/model.h"
#include "engine/run.h"
#include "engine/task.h"
#include "engine/platform.h"
#include "engine/tokenizer.h"

#define TINY ADAPTERD_FIXTURES "/registry/models/bert-tiny"
#define ADAPTERD ADAPTERD_BINARY_DIR "/tools/adapterd"

/* Skips the test when this CPU has no fast kernel for prec (the server refuses such a model). */
static void need_fast(eng_precision prec) {
    eng_model_params p = eng_model_default_params();
    p.precision = prec;
    eng_model *m = NULL;
    eng_err e = {0};
    int rc = eng_model_load_params(TINY, &p, &m, &e);
    eng_model_free(m);
    if (rc == ENG_UNSUPPORTED) cr_skip_test("%s", e.msg);
    cr_assert_eq(rc, 0, "%s", e.msg);
}

/* Registry: models/bert-tiny with model.json {"precision": "int8"} and task cls (cls_lora), and
 * models/plain (bert-tiny again) without model.json and without tasks. */
static char *make_registry(void) {
    char *dir = ts_registry_ok("adapterd-prec");
    ts_sh_ok("cp -rL %s %s/models/plain && printf '{\"precision\": \"int8\"}' > %s/models/bert-tiny/model.json", TINY, dir, dir);
    return dir;
}

static void remove_registry(char *dir) {
    ts_sh_ok("rm -rf %s", dir);
    free(dir);
}

static json_t *get_json(const test_server *s, const char *path, const char *tmpl) {
    ts_resp r;
    cr_assert_eq(ts_http(s, "GET", path, NULL, NULL, NULL, &r), 0);
    cr_assert_eq(r.status, 200, "%s: %ld %s", path, r.status, r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    cr_assert(d, "%s", r.body);
    char msg[512];
    cr_assert_eq(ts_validate("GET", tmpl, 200, d, msg, sizeof msg), 0, "%s: %s", path, msg);
    ts_resp_free(&r);
    return d;
}

static json_t *find_model(json_t *models, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(models, "models"), i, v) if (!strcmp(json_string_value(json_object_get(v, "name")), name)) return v;
    cr_assert_fail("model %s not listed", name);
    return NULL;
}

/* The logits of cls_lora on text from an engine in this process with bert-tiny in prec. */
static void engine_logits(eng_precision prec, const char *text, float *out, int *n) {
    eng_model_params p = eng_model_default_params();
    p.precision = prec;
    eng_model *m;
    eng_tokenizer *tok;
    eng_task *t;
    eng_err e;
    cr_assert_eq(eng_model_load_params(TINY, &p, &m, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_tokenizer_load(TINY, &tok, &e), 0, "%s", e.msg);
    const char *d[] = {ADAPTERD_FIXTURES "/registry/tasks/cls_lora/1/lora"};
    eng_task_params tp = eng_task_default_params();
    cr_assert_eq(eng_task_load(m, d, 1, &tp, &t, &e), 0, "%s", e.msg);
    eng_tok_encoding enc;
    eng_tok_params pp = eng_tok_default_params();
    pp.max_length = 64;
    cr_assert_eq(eng_tok_encode(tok, text, strlen(text), NULL, 0, &pp, &enc, &e), 0);
    eng_task_req req = {t, 0};
    eng_input in = {.ids = enc.ids, .type_ids = enc.type_ids, .len = (int)enc.n, .tasks = &req, .n_tasks = 1};
    eng_task_out o;
    eng_state *st = eng_state_new(1);
    cr_assert_eq(eng_run(m, st, &in, 1, &o, NULL, &e), 0, "%s", e.msg);
    *n = o.num_labels;
    memcpy(out, o.logits, sizeof(float) * (size_t)o.num_labels);
    eng_task_outs_free(&o, 1);
    eng_state_free(st);
    eng_tok_encoding_free(&enc);
    eng_task_free(t);
    eng_tokenizer_free(tok);
    eng_model_free(m);
}

Test(precision, model_json_and_default_served_and_listed) {
    need_fast(ENG_PRECISION_INT8);
    need_fast(ENG_PRECISION_BF16);
    char *reg = make_registry();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    test_server s;
    const char *args[] = {"--registry", reg, "--precision", "bf16", NULL};
    cr_assert_eq(ts_start(&s, args, NULL), 0, "server did not start on %s", reg);

    json_t *ms = get_json(&s, "/v1/models", "/v1/models");
    json_t *a = find_model(ms, "bert-tiny"), *b = find_model(ms, "plain");
    cr_assert_str_eq(json_string_value(json_object_get(a, "precision")), "int8"); /* model.json wins */
    cr_assert_str_eq(json_string_value(json_object_get(b, "precision")), "bf16"); /* --precision */
    /* the kernel families this CPU runs (the server runs under the same ADAPTERD_CPU_LEVEL as this test) */
    const char *k8 = eng_kernel_family("int8"), *k16 = eng_kernel_family("bf16");
    cr_assert_str_eq(json_string_value(json_object_get(a, "kernel")), k8);
    cr_assert_str_eq(json_string_value(json_object_get(b, "kernel")), k16);
    json_int_t pa = json_integer_value(json_object_get(a, "packed_bytes")),
               pb = json_integer_value(json_object_get(b, "packed_bytes"));
    cr_assert(pa > 0 && pa < pb, "int8 %lld, bf16 %lld packed bytes", (long long)pa, (long long)pb);
    json_decref(ms);

    ts_resp r;
    cr_assert_eq(ts_http(&s, "GET", "/metrics", NULL, NULL, NULL, &r), 0);
    char want[256];
    snprintf(want, sizeof want, "adapterd_model_info{model=\"bert-tiny\",precision=\"int8\",kernel=\"%s\"} 1", k8);
    cr_assert(strstr(r.body, want), "%s", r.body);
    snprintf(want, sizeof want, "adapterd_model_info{model=\"plain\",precision=\"bf16\",kernel=\"%s\"} 1", k16);
    cr_assert(strstr(r.body, want), "%s", r.body);
    snprintf(want, sizeof want, "adapterd_cpu_info{detected=\"%s\",level=\"%s\",fp32=\"%s\",bf16=\"%s\",int8=\"%s\"} 1",
             eng_cpu_level_detected(), eng_cpu_level(), eng_kernel_family("fp32"), k16, k8);
    cr_assert(strstr(r.body, want), "%s", r.body);
    ts_resp_free(&r);

    /* the server's logits are those of the engine with the model in int8, and not those in fp32 */
    const char *text = "the film was terrible and boring";
    cr_assert_eq(ts_http(&s, "POST", "/v1/predict",
                         "{\"inputs\":\"the film was terrible and boring\",\"tasks\":[\"cls\"],\"return\":{\"logits\":true}}",
                         NULL, NULL, &r),
                 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *d = json_loads(r.body, 0, NULL);
    json_t *lg = json_object_get(json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), "cls"),
                                 "logits");
    float q[64], f[64];
    int nq, nf;
    engine_logits(ENG_PRECISION_INT8, text, q, &nq);
    engine_logits(ENG_PRECISION_FP32, text, f, &nf);
    cr_assert_eq((int)json_array_size(lg), nq, "%s", r.body);
    float drift = 0;
    for (int i = 0; i < nq; i++) {
        double got = json_number_value(json_array_get(lg, (size_t)i));
        cr_expect(fabs(got - q[i]) <= 1e-5, "logit %d: server %g, engine int8 %g", i, got, q[i]);
        drift = fmaxf(drift, fabsf(q[i] - f[i]));
    }
    cr_assert_gt(drift, 1e-6f, "int8 and fp32 logits are identical: did int8 run?");
    json_decref(d);
    ts_resp_free(&r);
    cr_expect_eq(ts_stop(&s), 0);
    remove_registry(reg);
}

/* A precision the server cannot parse is a usage error. */
Test(precision, serve_rejects_unknown_precision) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s serve --registry %s/registry --precision fp16 2>/dev/null", ADAPTERD, ADAPTERD_FIXTURES);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d", st);
}

/* `adapterd encode --precision int8` prints what the engine computes with the model in int8. */
Test(precision, encode_cli_int8) {
    need_fast(ENG_PRECISION_INT8);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s encode --model %s --ids 101,759,208,102 --threads 1 --precision int8 2>/dev/null",
             ADAPTERD, TINY);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&buf, &cap, '\0', p);
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    cr_assert_gt(n, 0);
    json_t *d = json_loads(buf, 0, NULL);
    cr_assert(d, "%s", buf);
    free(buf);

    eng_model_params mp = eng_model_default_params();
    mp.precision = ENG_PRECISION_INT8;
    eng_model *m;
    eng_err e;
    cr_assert_eq(eng_model_load_params(TINY, &mp, &m, &e), 0, "%s", e.msg);
    int H = eng_model_config(m)->hidden;
    int32_t ids[] = {101, 759, 208, 102}, len = 4;
    eng_batch b = {.n_seq = 1, .ids = ids, .seq_len = &len};
    float *h = malloc(sizeof(float) * 4 * (size_t)H);
    eng_state *st = eng_state_new(1);
    cr_assert_eq(eng_encode(m, st, &b, h, NULL, &e), 0, "%s", e.msg);
    json_t *lh = json_object_get(d, "last_hidden_state");
    cr_assert_eq((int)json_array_size(lh), 4);
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < H; i++) {
            double got = json_number_value(json_array_get(json_array_get(lh, (size_t)t), (size_t)i));
            cr_assert(fabs(got - h[t * H + i]) <= 1e-6, "token %d, %d: cli %g, engine %g", t, i, got, h[t * H + i]);
        }
    free(h);
    eng_state_free(st);
    eng_model_free(m);
    json_decref(d);
    snprintf(cmd, sizeof cmd, "%s encode --model %s --ids 101,102 --precision fp16 2>/dev/null >/dev/null", ADAPTERD, TINY);
    int s2 = system(cmd);
    cr_assert(WIFEXITED(s2) && WEXITSTATUS(s2) == 2, "status %d", s2);
}
