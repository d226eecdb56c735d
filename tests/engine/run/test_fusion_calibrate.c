/* test_fusion_calibrate.c - AdapterFusion calibration (engine/run/fusion_calibrate.c) and the saved
 * pruning it writes, applied on load (engine/task/load_fusion.c).
 *
 * The reference fixtures carry `fusion_mean_attn` (n_fusion_layers, N): the mean softmax weight each
 * fused adapter receives over all valid tokens, computed by the PyTorch oracle. Calibration on the
 * same inputs must reproduce it (1e-5), and the pruning file must survive a reload. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/task.h"
#include "engine/fusion.h"
#include "engine/run.h"
#include "io/safetensors.h"
#include "ref_case.h"
#include "test_tmp.h"

static void load_case(const char *name, eng_model **m, eng_task **t, const char *fusion_dir_override) {
    char dir[PATH_MAX], msg[512];
    snprintf(dir, sizeof dir, "%s/adapters/bert-tiny/%s", ADAPTERD_FIXTURES, name);
    ref_case c;
    cr_assert_eq(ref_case_open(&c, ADAPTERD_FIXTURES, dir, msg, sizeof msg), 0, "%s", msg);
    eng_err e = {0};
    cr_assert_eq(eng_model_load(c.backbone, m, &e), 0, "%s", e.msg);
    eng_task_params p = ref_case_params(&c);
    if (fusion_dir_override) p.fusion_dir = fusion_dir_override;
    cr_assert_eq(ref_case_load_task(&c, *m, &p, t, &e), 0, "%s", e.msg);
    ref_case_close(&c);
}

Test(fusion_calibrate, calibration_matches_reference_attention) {
    const char *cases[] = {"fusion_dynamic_n3", "fusion_static_n4", "fusion_dynamic_n8"};
    for (int c = 0; c < 3; c++) {
        eng_model *m;
        eng_task *t;
        load_case(cases[c], &m, &t, NULL);
        char p[1200];
        snprintf(p, sizeof p, "%s/adapters/bert-tiny/%s/expected/skip0.safetensors", ADAPTERD_FIXTURES, cases[c]);
        eng_st_file *f;
        eng_err e = {0};
        cr_assert_eq(eng_st_open(p, &f, &e), 0, "%s", e.msg);
        const eng_st_tensor *ids = eng_st_find(f, "input_ids"), *lens = eng_st_find(f, "seq_lens"),
                            *ty = eng_st_find(f, "token_type_ids"), *ma = eng_st_find(f, "fusion_mean_attn");
        cr_assert(ids && lens && ty && ma, "%s lacks inputs or fusion_mean_attn", p);
        int n_seq = (int)lens->numel, L = eng_model_config(m)->n_layers;
        const char *const *names;
        int N = eng_task_fusion_children(t, &names);
        cr_assert_eq(N, (int)ma->shape[1]);
        const int32_t *id = ids->data, *ln = lens->data, *tt = ty->data;
        eng_input in[16];
        int off = 0;
        for (int s = 0; s < n_seq; s++) {
            in[s] = (eng_input){.ids = id + off, .type_ids = tt + off, .len = ln[s]};
            off += ln[s];
        }
        double *mean = calloc((size_t)L * N, sizeof *mean);
        eng_state *st = eng_state_new(2);
        cr_assert_eq(eng_fusion_calibrate(m, st, t, in, n_seq, mean, &e), 0, "%s", e.msg);
        const float *want = ma->data;
        for (int l = 0; l < (int)ma->shape[0]; l++)
            for (int i = 0; i < N; i++)
                cr_assert_float_eq(mean[(size_t)l * N + i], want[(size_t)l * N + i], 1e-5, "%s layer %d adapter %d: %g vs %g",
                                   cases[c], l, i, mean[(size_t)l * N + i], want[(size_t)l * N + i]);
        /* choose k = 2 and check it takes the two largest totals */
        uint8_t keep[16];
        eng_fusion_choose(mean, L, N, 2, keep);
        int kept = 0;
        double min_kept = 1e9, max_dropped = -1;
        for (int i = 0; i < N; i++) {
            double tot = 0;
            for (int l = 0; l < L; l++) tot += mean[(size_t)l * N + i];
            if (keep[i]) kept++, min_kept = tot < min_kept ? tot : min_kept;
            else max_dropped = tot > max_dropped ? tot : max_dropped;
        }
        cr_assert_eq(kept, 2);
        cr_assert_geq(min_kept, max_dropped);
        free(mean);
        eng_state_free(st);
        eng_st_close(f);
        eng_task_free(t);
        eng_model_free(m);
    }
}

Test(fusion_calibrate, saved_pruning_is_applied_on_load_and_changes_outputs) {
    /* copy the fusion folder to a temp dir, prune to 1 of 3, reload, compare outputs */
    char tmp[1024];
    cr_assert(mkdtemp(test_tmp_template(tmp, sizeof tmp, "prune")));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/adapters/bert-tiny/fusion_dynamic_n3/fusion/* %s/", ADAPTERD_FIXTURES, tmp);
    cr_assert_eq(system(cmd), 0);
    eng_model *m;
    eng_task *t;
    load_case("fusion_dynamic_n3", &m, &t, tmp);
    const char *const *names;
    int N = eng_task_fusion_children(t, &names);
    cr_assert_eq(N, 3);
    int32_t ids[] = {101, 17, 400, 23, 9, 102}, len = 6;
    eng_task_req req = {t, 0};
    eng_input in = {.ids = ids, .len = len, .tasks = &req, .n_tasks = 1};
    eng_state *st = eng_state_new(2);
    eng_task_out full, pruned, reloaded;
    eng_err e = {0};
    cr_assert_eq(eng_run(m, st, &in, 1, &full, NULL, &e), 0, "%s", e.msg);
    uint8_t keep[3] = {0, 1, 0};
    double mean[64] = {0};
    cr_assert_eq(eng_task_prune_fusion(t, keep, 3, &e), 0, "%s", e.msg);
    cr_assert_eq(eng_run(m, st, &in, 1, &pruned, NULL, &e), 0, "%s", e.msg);
    /* calibration runs every child but leaves the loaded (pruned) task as it was */
    double probe_mean[64] = {0};
    cr_assert_leq(eng_model_config(m)->n_layers * N, 64);
    cr_assert_eq(eng_fusion_calibrate(m, st, t, &in, 1, probe_mean, &e), 0, "%s", e.msg);
    int dropped_seen = 0;
    for (int l = 0; l < eng_model_config(m)->n_layers; l++) dropped_seen |= probe_mean[(size_t)l * N] > 0;
    cr_assert(dropped_seen, "calibration of a pruned task gave no attention to a dropped child");
    eng_task_out again;
    cr_assert_eq(eng_run(m, st, &in, 1, &again, NULL, &e), 0, "%s", e.msg);
    for (int i = 0; i < pruned.num_labels; i++)
        cr_assert_eq(again.logits[i], pruned.logits[i], "calibration changed the task it read");
    eng_task_outs_free(&again, 1);
    cr_assert_eq(eng_fusion_save_pruning(t, tmp, mean, eng_model_config(m)->n_layers, keep, 0, &e), 0, "%s", e.msg);
    eng_task_free(t);
    eng_model_free(m);
    load_case("fusion_dynamic_n3", &m, &t, tmp);
    req.task = t;
    cr_assert_eq(eng_run(m, st, &in, 1, &reloaded, NULL, &e), 0, "%s", e.msg);
    float dmax = 0;
    for (int i = 0; i < full.num_labels; i++) {
        cr_assert_float_eq(reloaded.logits[i], pruned.logits[i], 1e-6, "reloaded pruning differs");
        float d = full.logits[i] - pruned.logits[i];
        dmax = d < 0 ? -d > dmax ? -d : dmax : d > dmax ? d : dmax;
    }
    cr_assert_gt(dmax, 1e-4, "pruning 2 of 3 adapters changed nothing");
    eng_task_outs_free(&full, 1), eng_task_outs_free(&pruned, 1), eng_task_outs_free(&reloaded, 1);
    eng_state_free(st);
    eng_task_free(t);
    eng_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    cr_assert_eq(system(cmd), 0);
}
