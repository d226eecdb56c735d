/* test_fusion_prune.c - `adapterd fusion-prune` prints what its --help promises: each adapter's mean
 * attention per fusion layer, the kept set, and how often the pruned fusion's labels agree with the
 * whole fusion's on the calibration texts.
 *
 * The agreement is checked against an independent count: every text through `adapterd predict`
 * with the whole fusion and again with the fusion folder the command pruned (the loader applies its
 * fusion_pruning.json). The per-layer figures are means of softmax weights, so over the adapters
 * they sum to 1 in every fusion layer, and summed over layers they give each adapter's total; the
 * kept adapters have the largest totals. (eng_fusion_calibrate itself is checked against the PyTorch
 * oracle's attention in tests/engine/run/test_fusion_calibrate.c.) Fixture: the 4-adapter fusion of
 * tests/fixtures/registry on its bert-tiny, whose vocab.txt gives a tokenizer. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_tmp.h"

#define REG ADAPTERD_FIXTURES "/registry"
#define TASK REG "/tasks/fusion/1"
#define BIN ADAPTERD_BINARY_DIR "/tools/adapterd"

static const char *texts[] = {
    "the movie was great",       "I hated every minute of it", "stocks fell sharply today",
    "what time is it",           "the team won the final",     "rain is expected tomorrow",
    "a quiet and gentle film",   "who wrote this book",        "prices rose again in may",
    "the match ended in a draw", "this is the worst service",  "where is the station",
};
#define N_TEXTS (int)(sizeof texts / sizeof texts[0])

static char work[512], fusion[600], calib[600];

static void setup(void) {
    cr_assert(mkdtemp(test_tmp_template(work, sizeof work, "fprune")));
    snprintf(fusion, sizeof fusion, "%s/fusion", work);
    snprintf(calib, sizeof calib, "%s/calib.tsv", work);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -rL '%s/fusion' '%s'", TASK, fusion); /* the command writes into it */
    cr_assert_eq(system(cmd), 0);
    FILE *f = fopen(calib, "w");
    cr_assert(f);
    for (int i = 0; i < N_TEXTS; i++) fprintf(f, "%s\t%d\n", texts[i], i % 3); /* a TSV: first column */
    fclose(f);
}
static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(fusion_prune, .init = setup, .fini = teardown, .timeout = 120);

static json_t *run_json(const char *cmd) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "%s", cmd);
    static char out[1 << 16];
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = '\0';
    cr_assert_eq(pclose(p), 0, "%s\n%s", cmd, out);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert(j, "%s: not JSON (%s): %s", cmd, je.text, out);
    return j;
}

static json_t *prune(int keep, int dry) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' fusion-prune --model '%s/models/bert-tiny' --adapter '%s/t0' --adapter '%s/t1' --adapter '%s/t2' "
             "--adapter '%s/t3' --fusion '%s' --head '%s/head' --calib '%s' --keep %d --threads 1%s",
             BIN, REG, TASK, TASK, TASK, TASK, fusion, TASK, calib, keep, dry ? " --dry-run" : "");
    return run_json(cmd);
}

/* The label `adapterd predict` gives text with the fusion folder fdir. */
static void predict_label(const char *fdir, const char *text, char *label, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' predict --model '%s/models/bert-tiny' --adapter '%s/t0' --adapter '%s/t1' --adapter '%s/t2' "
             "--adapter '%s/t3' --fusion '%s' --head '%s/head' --threads 1 --text '%s'",
             BIN, REG, TASK, TASK, TASK, TASK, fdir, TASK, text);
    json_t *j = run_json(cmd);
    const char *l = json_string_value(json_object_get(json_object_get(json_object_get(j, "tasks"), "fusion"), "label"));
    cr_assert(l, "%s: no label", cmd);
    snprintf(label, n, "%s", l);
    json_decref(j);
}

static void check_report(json_t *j, int keep) {
    cr_assert_eq(json_integer_value(json_object_get(j, "calibration_texts")), N_TEXTS);
    json_t *adapters = json_object_get(j, "adapters"), *layers = json_object_get(j, "layers");
    cr_assert_eq(json_array_size(adapters), 4);
    cr_assert_eq(json_array_size(layers), 2, "bert-tiny's 2 layers both hold the fusion");
    double total[4] = {0};
    size_t li;
    json_t *lay;
    json_array_foreach(layers, li, lay) {
        json_t *att = json_object_get(lay, "attention");
        cr_assert_eq(json_object_size(att), 4);
        double sum = 0;
        for (int i = 0; i < 4; i++) {
            char name[8];
            snprintf(name, sizeof name, "t%d", i);
            json_t *v = json_object_get(att, name);
            cr_assert(json_is_number(v), "layer %zu lacks %s", li, name);
            cr_assert(json_number_value(v) > 0 && json_number_value(v) < 1);
            sum += json_number_value(v);
            total[i] += json_number_value(v);
        }
        cr_assert_float_eq(sum, 1.0, 1e-5, "layer %zu: the mean softmax weights sum to %g", li, sum);
    }
    double min_kept = 1e9, max_dropped = -1;
    int kept = 0;
    for (int i = 0; i < 4; i++) {
        json_t *a = json_array_get(adapters, (size_t)i);
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        cr_assert_str_eq(json_string_value(json_object_get(a, "name")), name);
        double tot = json_number_value(json_object_get(a, "total_attention"));
        cr_assert_float_eq(tot, total[i], 2e-6, "%s: total %g, layers sum to %g", name, tot, total[i]);
        if (json_is_true(json_object_get(a, "kept"))) kept++, min_kept = fmin(min_kept, tot);
        else max_dropped = fmax(max_dropped, tot);
    }
    cr_assert_eq(kept, keep);
    cr_assert_geq(min_kept, max_dropped);
}

Test(fusion_prune, label_agreement_matches_predict) {
    for (int keep = 1; keep <= 2; keep++) {
        json_t *j = prune(keep, 0);
        check_report(j, keep);
        json_t *ag = json_object_get(j, "label_agreement");
        int agree = (int)json_integer_value(json_object_get(ag, "agree"));
        cr_assert_eq(json_integer_value(json_object_get(ag, "texts")), N_TEXTS);
        cr_assert_float_eq(json_number_value(json_object_get(ag, "share")), (double)agree / N_TEXTS, 1e-4);
        /* independent count: each text through predict, whole fusion vs the folder just pruned */
        int same = 0;
        for (int i = 0; i < N_TEXTS; i++) {
            char a[64], b[64];
            predict_label(TASK "/fusion", texts[i], a, sizeof a);
            predict_label(fusion, texts[i], b, sizeof b);
            same += !strcmp(a, b);
        }
        cr_log_info("keep %d of 4: %d of %d labels agree", keep, agree, N_TEXTS);
        cr_assert_eq(agree, same, "keep %d: fusion-prune says %d agree, predict finds %d", keep, agree, same);
        /* run again over the pruned folder: it recalibrates from every adapter (the same figures) */
        json_t *again = prune(keep, 1);
        cr_assert(json_equal(json_object_get(again, "layers"), json_object_get(j, "layers")));
        json_decref(again);
        json_decref(j);
    }
}

Test(fusion_prune, keeping_every_adapter_agrees_everywhere) {
    json_t *j = prune(4, 1);
    check_report(j, 4);
    json_t *ag = json_object_get(j, "label_agreement");
    cr_assert_eq(json_integer_value(json_object_get(ag, "agree")), N_TEXTS);
    cr_assert(json_is_false(json_object_get(j, "written")));
    char p[700];
    snprintf(p, sizeof p, "%s/fusion_pruning.json", fusion);
    cr_assert_neq(access(p, F_OK), 0, "--dry-run wrote %s", p);
    json_decref(j);
}
