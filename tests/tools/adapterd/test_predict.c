/* test_predict.c - `adapterd predict` answers as the server does: both print through proto's
 * encoder, so for the same input each task object of the command line equals the server's
 * (POST /v1/predict with "return": {"logits": true}), key for key, for every head of the fixture
 * registry and every tagging aggregation. The command line adds "kind" and "start_layer", the server
 * "version" and "skip_source" (what the registry knows); those are set aside. Numbers agree within
 * 1e-5 relative (+1e-6): the server's pass and the command line's are separate engine runs of the
 * same tokens. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "http_client.h"
#include "test_text.h"
#include "test_tmp.h"

#define REG ADAPTERD_FIXTURES "/registry"
#define BIN ADAPTERD_BINARY_DIR "/tools/adapterd"

/* The command line's JSON for args (exit status 0 required), read back from a scratch file; the
 * caller's to json_decref. */
static json_t *cli_json(const char *args) {
    char path[512];
    int fd = mkstemp(test_tmp_template(path, sizeof path, "predict"));
    cr_assert(fd >= 0, "%s", path);
    close(fd);
    cr_assert_eq(ts_sh("'%s' predict --model '%s/models/bert-tiny' --threads 1 %s > '%s'", BIN, REG, args, path), 0,
                 "adapterd predict %s", args);
    size_t len = 0;
    char *out = ts_read_file(path, &len);
    unlink(path);
    cr_assert(out, "%s", path);
    json_t *d = json_loadb(out, len, 0, NULL);
    cr_assert(d, "not JSON: %s", out);
    free(out);
    return d;
}

/* 1 when a and b are equal JSON, numbers within the tolerance; where names the place (for messages). */
static int same(json_t *a, json_t *b, char *where, size_t n) {
    if (json_is_number(a) && json_is_number(b)) {
        double x = json_number_value(a), y = json_number_value(b);
        return fabs(x - y) <= 1e-5 * fabs(x) + 1e-6;
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    size_t len = strlen(where);
    if (json_is_object(a)) {
        const char *k;
        json_t *v;
        if (json_object_size(a) != json_object_size(b)) return 0;
        json_object_foreach(a, k, v) {
            snprintf(where + len, n - len, ".%s", k);
            if (!json_object_get(b, k) || !same(v, json_object_get(b, k), where, n)) return 0;
        }
    } else if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++) {
            snprintf(where + len, n - len, "[%zu]", i);
            if (!same(json_array_get(a, i), json_array_get(b, i), where, n)) return 0;
        }
    } else if (!json_equal(a, b)) {
        return 0;
    }
    where[len] = '\0';
    return 1;
}

Test(predict, command_line_answers_as_the_server) {
    static const struct {
        const char *task, *folder, *inputs, *extra, *cli;
    } cases[] = {
        {"cls_lora", "cls_lora/1/lora", "\"the movie was great\"", "", "--text 'the movie was great'"},
        {"ml", "ml/1/ml", "\"sports and politics\"", "", "--text 'sports and politics'"},
        {"reg", "reg/1/reg", "\"a fine day\"", "", "--text 'a fine day'"},
        {"ner", "ner/1/ner", "\"john is a player in paris\"", "", "--text 'john is a player in paris'"},
        {"ner", "ner/1/ner", "\"john is a player in paris\"", ",\"aggregation\":\"none\"",
         "--text 'john is a player in paris' --aggregation none"},
        {"ner", "ner/1/ner", "\"john is unhappy in london\"", ",\"aggregation\":\"simple\"",
         "--text 'john is unhappy in london' --aggregation simple"},
        {"ner", "ner/1/ner", "\"john is unhappy in london\"", ",\"aggregation\":\"first\"",
         "--text 'john is unhappy in london' --aggregation first"},
        {"ner", "ner/1/ner", "[[2, 300, 301, 302, 3]]", "", "--ids 2,300,301,302,3"},
        {"qa", "qa/1/squad", "[{\"text\":\"who is john\",\"text_pair\":\"john is a player in paris\"}]", "",
         "--text 'who is john' --text-pair 'john is a player in paris'"},
    };
    test_server s;
    cr_assert_eq(ts_start(&s, NULL, NULL), 0);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char body[1024], args[2048], where[256] = "";
        snprintf(body, sizeof body, "{\"inputs\":%s,\"tasks\":[\"%s\"],\"skip\":0,\"return\":{\"logits\":true}%s}", cases[c].inputs,
                 cases[c].task, cases[c].extra);
        json_t *d = NULL;
        cr_assert_eq(ts_request(&s, "POST", "/v1/predict", body, strlen(body), "application/json", NULL, &d), 200, "%s", body);
        json_t *st = json_object_get(json_object_get(json_array_get(json_object_get(d, "results"), 0), "tasks"), cases[c].task);
        snprintf(args, sizeof args, "--adapter '%s/tasks/%s' %s", REG, cases[c].folder, cases[c].cli);
        json_t *cli = cli_json(args), *ct = NULL;
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(cli, "tasks"), k, v) ct = v;
        cr_assert(json_is_object(st) && json_is_object(ct), "case %zu: both answer", c);
        cr_expect(json_is_string(json_object_get(ct, "kind")) && json_is_integer(json_object_get(ct, "start_layer")));
        cr_expect(json_is_string(json_object_get(st, "version")), "the server names the version");
        json_object_del(ct, "kind"), json_object_del(ct, "start_layer");
        json_object_del(st, "version"), json_object_del(st, "skip_source");
        char *a = json_dumps(st, JSON_COMPACT), *b = json_dumps(ct, JSON_COMPACT);
        cr_expect(same(st, ct, where, sizeof where), "case %zu differs at %s:\nserver       %s\ncommand line %s", c, where, a, b);
        free(a), free(b);
        json_decref(cli);
        json_decref(d);
    }
    cr_assert_eq(ts_stop(&s), 0);
}

/* Long inputs: the command line reads them in the server's windows (the same plans, one pass over
 * every window) and gives the server's answers, for a QA context of several windows (default
 * windows, then max_seq_len, doc_stride, max_question_len, top_k given), a text tagged with a stride
 * and merged entities, and texts classified and regressed in "long" chunks (mean and max). The
 * fixture model takes 64 positions: a context of 150 words is several windows. */
Test(predict, long_inputs_answer_as_the_server) {
    char *ctx = fixture_words(150, 21u), *doc = fixture_words(120, 22u);
    struct {
        const char *task, *folder, *extra, *cli;
        int pair;
    } cases[] = {
        {"qa", "qa/1/squad", "", "", 1},
        {"qa", "qa/1/squad", ",\"max_seq_len\":48,\"doc_stride\":20,\"max_question_len\":3,\"top_k\":3",
         "--max-seq-len 48 --doc-stride 20 --max-question-len 3 --top-k 3", 1},
        {"ner", "ner/1/ner", ",\"stride\":16,\"aggregation\":\"simple\"", "--stride 16 --aggregation simple", 0},
        {"ner", "ner/1/ner", ",\"stride\":8,\"aggregation\":\"first\"", "--stride 8 --aggregation first", 0},
        {"cls_lora", "cls_lora/1/lora", ",\"long\":{\"mode\":\"chunks\",\"aggregate\":\"mean\",\"stride\":10}",
         "--long mean --long-stride 10", 0},
        {"reg", "reg/1/reg", ",\"long\":{\"mode\":\"chunks\",\"aggregate\":\"max\"}", "--long max", 0},
        {"ml", "ml/1/ml", ",\"long\":{\"mode\":\"chunks\"}", "--long mean", 0},
    };
    test_server s;
    cr_assert_eq(ts_start(&s, NULL, NULL), 0);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *body = NULL, *args = NULL, where[256] = "";
        if (cases[c].pair)
            cr_assert(asprintf(&body, "{\"inputs\":[{\"text\":\"who is john\",\"text_pair\":\"%s\"}],\"tasks\":[\"%s\"],"
                                      "\"skip\":0,\"return\":{\"logits\":true}%s}", ctx, cases[c].task, cases[c].extra) > 0);
        else
            cr_assert(asprintf(&body, "{\"inputs\":[\"%s\"],\"tasks\":[\"%s\"],\"skip\":0,\"return\":{\"logits\":true}%s}",
                               doc, cases[c].task, cases[c].extra) > 0);
        json_t *d = NULL;
        cr_assert_eq(ts_request(&s, "POST", "/v1/predict", body, strlen(body), "application/json", NULL, &d), 200, "%s", body);
        json_t *r0 = json_array_get(json_object_get(d, "results"), 0);
        cr_expect_gt(json_integer_value(json_object_get(r0, "windows")), 1, "case %zu: the input takes several windows", c);
        json_t *st = json_object_get(json_object_get(r0, "tasks"), cases[c].task);
        if (cases[c].pair)
            cr_assert(asprintf(&args, "--adapter '%s/tasks/%s' --text 'who is john' --text-pair '%s' %s", REG, cases[c].folder,
                               ctx, cases[c].cli) > 0);
        else
            cr_assert(asprintf(&args, "--adapter '%s/tasks/%s' --text '%s' %s", REG, cases[c].folder, doc, cases[c].cli) > 0);
        json_t *cli = cli_json(args), *ct = NULL;
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(cli, "tasks"), k, v) ct = v;
        cr_assert(json_is_object(st) && json_is_object(ct), "case %zu: both answer", c);
        json_object_del(ct, "kind"), json_object_del(ct, "start_layer");
        json_object_del(st, "version"), json_object_del(st, "skip_source");
        char *a = json_dumps(st, JSON_COMPACT), *b = json_dumps(ct, JSON_COMPACT);
        cr_expect(same(st, ct, where, sizeof where), "case %zu differs at %s:\nserver       %s\ncommand line %s", c, where, a, b);
        free(a), free(b);
        json_decref(cli);
        json_decref(d);
        free(body), free(args);
    }
    cr_assert_eq(ts_stop(&s), 0);
    free(ctx), free(doc);
}

/* The command line refuses what the server refuses: --stride without merged entities, two strides. */
Test(predict, long_input_options_refused) {
    static const char *const bad[] = {"--stride 8", "--stride 8 --aggregation none", "--long mean --long-stride 4 --stride 8 "
                                      "--aggregation simple", "--long-stride 4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st = ts_sh("'%s' predict --model '%s/models/bert-tiny' --adapter '%s/tasks/ner/1/ner' --text 'john' %s "
                           ">/dev/null 2>&1", BIN, REG, REG, bad[i]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: status %d, want exit 2 (usage)", bad[i], st);
    }
}
