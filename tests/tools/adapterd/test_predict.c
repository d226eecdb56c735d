/* test_predict.c - `adapterd predict` answers as the server does: both print through proto's
 * encoder, so for the same input each task object of the command line equals the server's
 * (POST /v1/predict with "return": {"logits": true}), key for key, for every head of the fixture
 * registry and every tagging aggregation. The command line adds "kind" and "start_layer", the server
 * "version" and "skip_source" (what the registry knows); those are set aside. Numbers agree within
 * 1e-5 relative (+1e-6): the server's pass and the command line's are separate engine runs of the
 * same tokens. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_client.h"
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
